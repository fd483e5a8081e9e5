"""The HTTP versions plt-bench measures: one table, and the only place a protocol is named.

Each protocol is a Protocol record of HTTP facts alone: what a trial stores (h3, h2, h1), what
carries it, what Resource Timing and an HTTP log call it, the round trips its handshakes take.
How a browser is forced to it is the browser's (browsers/), how a server offers it the server's
(servers/). Everything else in plt-bench (the plan, the analysis, the figures) takes protocols
from here by name and never spells one out.

    h3  HTTP/3 over QUIC (UDP)
    h2  HTTP/2 over TLS 1.3 and TCP
    h1  HTTP/1.1 over TLS 1.3 and TCP (a browser opens up to six connections an origin)

    as-recorded  a replayed recording (pages har:NAME), each origin over the protocol it spoke when
                 recorded: its server offers that one alone (an h1 origin's no h2, an h2 origin's no
                 h3) and the browser is forced to QUIC on the h3 ones only; proven origin by origin

Names a user may type (--proto, campaign files, pytest): h3, h2, h1, as-recorded, and the names of the seed
experiment, which keep their meaning: quic = h3, tcp = h1 (HTTP/1.1 over TLS, as the seed ran it),
both = h3 and h1, all = h3, h2 and h1. Stores written before schema 13 hold quic and tcp; their
migration rewrites them to h3 and h1 (store.py), so a stored trial keeps the protocol it ran with.
"""

from __future__ import annotations

import dataclasses

from .errors import UsageError


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One HTTP version as plt-bench runs and proves it."""

    name: str  # what trials store and options take: h3 | h2 | h1
    label: str  # for people: HTTP/3
    transport: str  # what carries it: QUIC | TCP
    next_hop: str  # what Navigation and Resource Timing's nextHopProtocol say
    http_version: str  # the version as an HTTP log writes it (Trial.server_proto: the server's word, kept so)
    connect_rtts: int  # round trips to connectEnd on a fresh connection (TCP + TLS 1.3: 2; QUIC: 1)
    first_byte_rtts: int  # ... and to the page's first byte (one more: the request)
    color: str  # in every figure

    @property
    def per_origin(self) -> bool:
        """Each origin over its own protocol (as-recorded), not one for all."""
        return self.transport == "per origin"


H3 = Protocol("h3", "HTTP/3", "QUIC", "h3", "HTTP/3.0", 1, 2, "#c0392b")
H2 = Protocol("h2", "HTTP/2", "TCP", "h2", "HTTP/2.0", 2, 3, "#27ae60")
H1 = Protocol("h1", "HTTP/1.1", "TCP", "http/1.1", "HTTP/1.1", 2, 3, "#2471a3")
# Each origin of a recording over the protocol it spoke then (a first party on h3, third parties on
# h2 or h1: Trevisan's mix). Its timing and proof are each origin's own protocol's (for_origin);
# as a whole it takes TCP's round trips, the most any of its origins needs.
AS_RECORDED = Protocol("as-recorded", "as recorded", "per origin", "", "", 2, 3, "#8e44ad")

NAMES = ("h3", "h2", "h1")  # one protocol for every origin: the order of every table and figure
BY_NAME = {p.name: p for p in (H3, H2, H1, AS_RECORDED)}
ALL_NAMES = tuple(BY_NAME)  # and a replay's own mix, last
DEFAULT_REFERENCE = "h3"
# what a user may type for a list of protocols, beside the names themselves
GROUPS = {"quic": ("h3",), "tcp": ("h1",), "both": ("h3", "h1"), "all": NAMES}
CHOICES = (*ALL_NAMES, *GROUPS)
# the names stores before schema 13 wrote
STORED_BEFORE_13 = {"quic": "h3", "tcp": "h1"}


def get(name: str) -> Protocol:
    """The protocol of a stored or canonical name; ValueError for any other."""
    try:
        return BY_NAME[STORED_BEFORE_13.get(name, name)]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}; expected one of {', '.join(ALL_NAMES)}") from None


def by_next_hop(hop: str | None) -> Protocol | None:
    """The protocol Resource Timing's nextHopProtocol names ('http/1.1' -> h1), or None for any other word."""
    return next((p for p in (H3, H2, H1) if p.next_hop == hop), None)


def http_version(name: str | None) -> str | None:
    """A protocol's version as an HTTP log writes it ('h3' -> 'HTTP/3.0'); any other word as it is."""
    p = BY_NAME.get(name or "")
    return p.http_version if p and not p.per_origin else name


def for_origin(proto: str, recorded: str) -> Protocol:
    """What one origin of a load speaks: the load's protocol, or under as-recorded the origin's own
    recorded one (h3 | h2 | h1); ValueError where a recording does not say which it spoke."""
    p = get(proto)
    return get(recorded) if p.per_origin else p


def parse(text: str, option: str = "--proto") -> tuple[str, ...]:
    """A comma-separated list of protocols and groups -> canonical names, in the order given,
    duplicates dropped ('both' -> ('h3', 'h1'); 'quic,h2' -> ('h3', 'h2'))."""
    from .units import split_list
    items = split_list(text, option)
    if not items:
        raise UsageError(f"{option}: empty; expected {form()}")
    out: list[str] = []
    for item in items:
        p = item.lower()
        if p not in CHOICES:
            raise UsageError(f"{option}: unknown protocol '{item}'; expected {form()}")
        for q in GROUPS.get(p, (p,)):
            if q not in out:
                out.append(q)
    return tuple(out)


def form() -> str:
    """The accepted form of --proto, for messages and help."""
    return (f"one or more of {', '.join(ALL_NAMES)}, comma-separated (quic = h3, tcp = h1, both = h3,h1, "
            f"all = {','.join(NAMES)}; as-recorded: a recording's origins each over its own)")


def order(name: str) -> int:
    """A protocol's place in tables and figures (unknown names last)."""
    return ALL_NAMES.index(name) if name in ALL_NAMES else len(ALL_NAMES)


def label(name: str) -> str:
    """'h3' -> 'HTTP/3' (any other value as it is)."""
    return BY_NAME[name].label if name in BY_NAME else str(name)


def color(name: str, fallback_index: int = 0) -> str:
    return BY_NAME[name].color if name in BY_NAME else ("#7f8c8d", "#8e44ad", "#d35400")[fallback_index % 3]

