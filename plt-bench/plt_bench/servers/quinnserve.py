"""quinnserve, plt-bench's second server (quinnserve/, Rust, built by scripts/setup into .tools/bin):
HTTP/3 on quinn, a QUIC stack other than Caddy's quic-go, whose congestion controller is chosen
(NewReno, CUBIC or BBR: the names --cc uses, reno for NewReno); HTTP/2 and HTTP/1.1 on hyper over
the kernel's TCP, whose controller is the kernel's. It serves what Caddy serves by the same rules
(the paths: base.SERVED_PATHS; types, validators, caching, CORS, one Alt-Svc entry: quinnserve/src/
files.rs), replayed recordings through replayd as Caddy does, but no folders served as they are
(record --folder: Caddy's).

Its configuration is a JSON file (render_config, pure); its access log is already in base's terms,
one JSON object a line, with each response's congestion controller as its connection ran it: quinn's
for h3, the kernel's (TCP_CONGESTION on the server's socket) for h2 and h1.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import cmd, protocols
from ..errors import EnvironmentProblem, ServerError
from .base import LISTEN_TIMEOUT_S, OFFERS, SERVED_PATHS, Server, json_lines

BINARY = cmd.PROJECT_ROOT / ".tools" / "bin" / "quinnserve"
# plt-bench's --cc names -> quinn's controllers (quinnserve/src/config.rs CONTROLLERS)
CONTROLLERS = {"reno": "newreno", "cubic": "cubic", "bbr": "bbr"}
ALL = list(OFFERS["h3"])  # every protocol: a listener that offers none alone
KEYS = ("uri", "host", "proto", "status", "size", "end_unix_s", "duration_s", "referer", "remote_port", "resumed",
        "method", "replay", "cc", "think", "rtt_ms")


def quic_controller(cc: str) -> str:
    """quinn's controller for a --cc name; ServerError naming the ones it has."""
    try:
        return CONTROLLERS[cc]
    except KeyError:
        raise ServerError(f"quinnserve cannot run QUIC with {cc!r}; its controllers: {', '.join(CONTROLLERS)}") from None


def render_config(*, origins: list[tuple[str, str]], sites: Path, cert: Path, key: Path, access_log: Path, cc: str,
                  cc_file: Path | None = None, listeners: list[tuple[str, str]] = (), replay_addresses: list[str] = (),
                  replay_port: int | None = None, own: list[str] = (), think_file: Path | None = None) -> dict:
    """quinnserve's configuration (pure): a listener per address, offering every protocol or the one
    its (address, protocol) in listeners gives it alone; the replay addresses (and the as-recorded
    ones, own) handed to replayd on replay_port; cc: a --cc name, the controller of every QUIC
    connection unless cc_file (read as each connection arrives) names another."""
    alone = dict(listeners)
    out: list[dict] = []
    for ip in dict.fromkeys(ip for _, ip in origins):
        out.append({"addr": ip, "protocols": list(OFFERS[protocols.get(alone[ip]).name]) if ip in alone else ALL})
    if replay_addresses or own:
        if replay_port is None:
            raise ServerError("replayed addresses without replayd's port")
        out += [{"addr": ip, "protocols": ALL, "replay": True} for ip in replay_addresses]
        out += [{"addr": ip, "protocols": list(OFFERS[protocols.get(alone[ip]).name]), "replay": True} for ip in own]
    return {"sites": str(sites), "cert": str(cert), "key": str(key), "access_log": str(access_log),
            "served": SERVED_PATHS, "cc": quic_controller(cc), "cc_file": str(cc_file) if cc_file else None,
            "max_streams": 100, "listeners": out, **({"think_file": str(think_file)} if think_file else {}),
            "replay_upstream": f"127.0.0.1:{int(replay_port)}" if replay_port is not None else None}


def parse_access_log(text: str) -> list[dict]:
    """quinnserve's lines -> entries (already in base's terms; anything that is not one is skipped)."""
    return [{k: e.get(k) for k in KEYS} for e in json_lines(text) if "uri" in e]


def locate() -> str:
    if not BINARY.is_file():
        raise EnvironmentProblem(f"quinnserve is not built: run scripts/setup (it builds {BINARY} with cargo)")
    return str(BINARY)


class QuinnServe(Server):
    """One quinnserve process inside a namespace."""

    name, label, meta_key = "quinn", "quinnserve", "quinnserve"
    features = frozenset({"two-machines"})  # 'plt-bench serve --http-server caddy,quinn' runs it too
    locate = staticmethod(locate)
    quic_controllers = CONTROLLERS
    report_words = "quinnserve {quinnserve_version} (HTTP/3 on quinn)"
    h3_cc_words = "h3 runs quinn's controller of the same name, reno as NewReno: each trial's server_cc says"
    cpu_color = "#6c3483"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.statics:
            raise ServerError("quinnserve serves no folders as they are (record --folder): Caddy does")
        quic_controller(self.cc)  # refused before anything starts
        self.path = locate()
        self.config_path = self.run_dir / "quinnserve.json"
        self.cc_file = self.run_dir / "quinnserve.cc"
        self.log_path = self.run_dir / "quinnserve.log"

    def info(self) -> dict:
        version = cmd.run([self.path, "--version"], check=False).stdout.strip()
        return {"path": self.path, "version": version.split(" ")[1] if version.count(" ") else "unknown",
                "build": version, "quic": "quinn"}

    def start(self, timeout_s: float = LISTEN_TIMEOUT_S) -> None:
        self._certificate()
        port = self._start_replayd(timeout_s) if self.replay else None
        config = render_config(
            origins=self.origins, sites=self.sites.resolve(), cert=self.cert.cert, key=self.cert.key,
            access_log=self.access_log, cc=self.cc, cc_file=self.cc_file, listeners=self.listeners,
            replay_addresses=self.replay.addresses if self.replay else [], replay_port=port,
            own=[ip for ip, _ in self.replay.listeners] if self.replay else [],
            think_file=self.think_file if self.think else None)
        self.config_path.write_text(json.dumps(config, indent=1))
        self._launch([self.path, "--config", str(self.config_path)], {}, timeout_s)

    def quic_cc(self) -> str:
        return quic_controller(self.cc)

    def set_quic_cc(self, cc: str) -> None:
        """The controller of the QUIC connections to come (a campaign's --cc switched): quinnserve reads
        it as each connection arrives, and its log says which each ran."""
        name = quic_controller(cc)
        tmp = self.cc_file.with_suffix(".cc.new")
        tmp.write_text(name + "\n")
        tmp.replace(self.cc_file)  # whole or not at all, for a connection arriving now
        self.cc = cc

    @staticmethod
    def parse_access_log(text: str) -> list[dict]:
        return parse_access_log(text)
