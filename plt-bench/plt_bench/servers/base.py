"""What plt-bench asks of an HTTP server: one interface (Server), one implementation per server
(caddy.py), chosen by name from the table in servers/__init__.py.

A server serves the testbed's pages over h3, h2 and h1 from the server namespace, on every
origin's address, with the testbed's certificate (certs.py), and writes an access log. What comes
back from that log is an entry per response in protocol terms, whatever the server's own words:

    uri          the request's path and query            /index_5KB.html?trial=1a2b
    host         the origin asked (Host or :authority)   plt.test
    proto        the protocol that carried it: h3 | h2 | h1 (protocols.NAMES), or the server's own
                 word where it is none of them (then every judgement refuses it, naming it)
    status       the response's status                   200
    size         its body's bytes                        5000
    end_unix_s   when the response ended (wall clock); duration_s: how long it took
    referer      the request's Referer (a trial's objects carry its page's URI)
    remote_port  the client's port: one per connection
    resumed      the connection's TLS session was resumed
    method       GET, HEAD, ...; replay: how a replayed request was matched (exact | query | miss | preflight)
    think        the think stage's header X-Plt-Think (asked and waited ms: pages.timing), where --think asks
    rtt_ms       its connection's handshake round trip as the server measured it (quinnserve's; Caddy says none)

Which entries are a trial's own and which are others' traffic is the same for every server
(own_entries, overlapping).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from .. import cmd, protocols
from ..errors import EnvironmentProblem, ServerError
from ..pages.replayd import write_active
from ..pages.timing import THINK_FILE, write_think
from ..pages import HOST
from ..pages.base import served_paths
from .certs import make_certificate

# The paths a server serves from the pages' folder, every other one answered 404: each page kind's files
# (pages.PageKind.served: the generated pages, their objects, the bulk body, page sets' pages and objects);
# never MANIFEST.json, README.md or replay.json. One expression for every server (RE2 and Rust's regex
# read it alike).
SERVED_PATHS = served_paths()

# What a listener that offers one protocol alone offers, whatever the server: the browser's ALPN then
# gets that one (an h2 listener's h1 too: ALPN takes the most both sides offer); h3 also needs TCP
# (a browser that falls back, and Alt-Svc's first visit)
OFFERS = {"h3": ("h3", "h2", "h1"), "h2": ("h2", "h1"), "h1": ("h1",)}

# How long a server may take to listen: the bound catches a hung server, not a slow machine. In the
# netem VM (software emulation) with one host core busy Caddy took over 15 s, the bound until then.
LISTEN_TIMEOUT_S = 60.0


class Server:
    """One server process in a namespace, serving the testbed's pages (the generated pages, replayed
    recordings, served folders) on every origin's address. A subclass names itself (name, label),
    says where its own log is (log_path), starts (start: its configuration, then _launch) and reads
    its access log (parse_access_log); the rest is here, the same for every server."""

    name = ""    # what options and stores say: caddy
    label = ""   # for people: Caddy
    meta_key = ""  # a campaign's metadata keys for its build and version: caddy, caddy_version
    quic_cc_follows = True  # its QUIC connections run --cc's controller (False: its stack's own, whatever --cc)
    # what it can do beyond serving the testbed's pages and recordings over h3, h2 and h1 (a campaign
    # asking for more is refused by name, campaign._http_servers): "folders" served as they are (--folder),
    # "qlog" (--capture qlog), "two-machines" ('plt-bench serve' runs it)
    features: frozenset[str] = frozenset()
    # --cc's names -> its QUIC stack's controllers, where --cc chooses them (None: its own, fixed)
    quic_controllers: dict[str, str] | None = None
    # its words in a report: itself with its version (a format of the campaign's metadata: meta_key's
    # keys), and what its h3 runs for congestion control; its colour in the CPU figures (role meta_key)
    report_words = ""
    h3_cc_words = ""
    cpu_color = "#2c3e50"
    cert = None  # the testbed's certificate (certs.Certificate), once started
    proc = None  # its process (subprocess.Popen), while it runs
    access_log: Path  # its access log (a capture run keeps it; 'up' tells the user where it is)
    log_path: Path    # its own output (stdout and stderr)

    @staticmethod
    def locate() -> str:
        """Its program's path; EnvironmentProblem where this machine has none."""
        raise NotImplementedError

    @classmethod
    def installed(cls) -> bool:
        """Whether this machine has its program (what a cluster's worker declares)."""
        try:
            cls.locate()
        except EnvironmentProblem:
            return False
        return True

    def __init__(self, ns: str, bind_ip: str, run_dir: Path, sites: Path, origins: list[tuple[str, str]] | None = None,
                 env: dict | None = None, replay=None, statics=None, cc: str = "cubic", think: bool = False):
        """origins: every (host, address) it serves, the first its own (HOST on bind_ip unless given).
        replay: recordings it replays besides (caddy.Replay: their hosts on their own addresses,
        behind replayd); statics: folders served as they are (caddy.Static); cc: the campaign's
        congestion control (--cc), which a server whose QUIC controller is chosen runs for h3; think:
        its responses pass a think stage (--think, pages.timing), told the think of each load by
        set_think."""
        self.ns, self.bind_ip, self.run_dir, self.sites = ns, bind_ip, Path(run_dir), Path(sites)
        self.origins = list(origins or [(HOST, bind_ip)])
        self.replay, self.statics = replay, list(statics or [])
        self.replayd: subprocess.Popen | None = None
        self.think = think
        # the think asked of the loads to come (pages.timing); none there (its stages read: off) until a load asks
        self.think_file = self.run_dir / THINK_FILE
        self._think_told: str | None = None  # what set_think last wrote there
        self.helpers: dict[str, subprocess.Popen] = {}  # processes beside it (servers.think's stage), by name
        self.extra_env = dict(env or {})  # e.g. QLOGDIR for capture runs
        self.access_log = self.run_dir / "access.log"
        self.cc = cc
        self.proc: subprocess.Popen | None = None
        self.cert = None
        self._log_offset = 0

    # -- what a subclass says ---------------------------------------------------------------------
    def start(self) -> None:
        """Listen on every origin's address, TCP and UDP, or raise ServerError saying why not."""
        raise NotImplementedError

    def info(self) -> dict:
        """Its version and build (a campaign's metadata: 'version' is key metadata)."""
        raise NotImplementedError

    @staticmethod
    def parse_access_log(text: str) -> list[dict]:
        """Its access log's complete lines -> entries in the terms above."""
        raise NotImplementedError

    def quic_buffer_warning(self) -> str | None:
        """Its QUIC stack's complaint about the UDP buffers it got, if any."""
        return None

    def quic_cc(self) -> str:
        """The congestion controller its QUIC connections run now, in its stack's words."""
        raise NotImplementedError

    def set_quic_cc(self, cc: str) -> None:
        """Run --cc's controller on the QUIC connections to come, where its stack lets it choose;
        a stack whose controller is fixed (quic-go's) keeps its own, which quic_cc says."""
        self.cc = cc

    def quic_ecn(self, qlogs: list[Path]):
        """QUIC's ECN as its own log of the trial tells it (link.ecn.QuicSide): its connections'
        ECN validation and the counts the browser's ACKs reported. This server writes no such log."""
        from ..quic_ecn import QuicSide
        return QuicSide(source=None, why=f"{self.label} writes no log of its ECN state")

    # -- the same for every server ----------------------------------------------------------------
    def set_think(self, think: str | None) -> None:
        """The think time of the loads to come (its canonical text, pages.timing; None: off), read by
        the think stage as each request arrives. A server started without one refuses any but off."""
        if think is not None and not self.think:
            raise ServerError(f"{self.label} was started without a think stage; it cannot think {think} ms")
        if self.think and (think != self._think_told or not self.think_file.exists()):  # written when it changes
            write_think(self.think_file, think)
            self._think_told = think

    def activate(self, recording: str) -> None:
        """Name the recording measured now, where it replays several (replayd --active)."""
        write_active(self.replay.active, recording)

    @property
    def all_origins(self) -> list[tuple[str, str]]:
        """Every (host, address) it answers for: the generated pages' origins, replayed ones (as-recorded
        too), static ones."""
        own = [(h, ip) for h, ip, _ in self.replay.own] if self.replay else []
        return (self.origins + (self.replay.origins if self.replay else []) + own
                + [o for x in self.statics for o in x.origins])

    @property
    def listeners(self) -> list[tuple[str, str]]:
        """(address, protocol) of the addresses that offer one protocol alone (the rest offer all)."""
        return (self.replay.listeners if self.replay else []) + [x for s in self.statics for x in s.listeners]

    def _certificate(self) -> None:
        """The testbed's certificate for every origin it serves, made on its first start; one given
        (the testbed's, shared by the servers of a campaign of several) is kept."""
        if self.cert is None:
            self.cert = make_certificate(self.run_dir, self.all_origins)

    def _launch(self, argv: list[str], env: dict, timeout_s: float) -> None:
        """Start it in its namespace (a session of its own, its output to log_path) and wait until it
        listens on every address; ServerError with its log's tail if it exits or never does. Its
        access log is read from where it stands (another server of the testbed may have written it)."""
        try:
            self._log_offset = self.access_log.stat().st_size
        except OSError:
            self._log_offset = 0
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "HOME": str(self.run_dir),
               **env, **self.extra_env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd.in_netns(self.ns, argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"{self.label} exited with {self.proc.returncode}: {self.log_tail()}")
            if self._listening():
                return
            time.sleep(0.05)
        raise ServerError(f"{self.label} did not listen on {self.bind_ip}:443 and its origins' (TCP and UDP) within "
                          f"{timeout_s:.0f}s: {self.log_tail()}")

    def _start_replayd(self, timeout_s: float) -> int:
        """The replay server (pages.replayd) on the namespace's loopback; returns its port."""
        r = self.replay
        port = self._start_helper("replayd", [
            "plt_bench.pages.replayd", "--sites", str(r.sites.resolve()), "--deterministic",
            "on" if r.deterministic else "off", *(("--active", str(r.active)) if r.active else ()),
            *(("--think-file", str(self.think_file)) if self.think else ()), *r.names], timeout_s)
        self.replayd = self.helpers.pop("replayd")
        return port

    def _start_helper(self, name: str, module_argv: list[str], timeout_s: float) -> int:
        """A Python process of plt_bench's beside the server, on the namespace's loopback (the replay
        server, the think stage), which prints {"port": N} once it listens; returns N. It is kept in
        helpers by name, its errors in run_dir/NAME.log."""
        argv = [sys.executable, "-m", *module_argv]
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "PYTHONPATH": str(cmd.PACKAGE_DIR.parent)}  # this plt_bench, wherever it runs from
        with open(self.run_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(cmd.in_netns(self.ns, argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=log, env=env, start_new_session=True, text=True)
        self.helpers[name] = proc
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        line = proc.stdout.readline() if ready else ""
        try:
            return int(json.loads(line)["port"])
        except (ValueError, KeyError, TypeError):
            what = "the replay server" if name == "replayd" else f"the {name} stage"
            raise ServerError(f"{what} did not start: {line.strip()[:200] or 'no answer'}; log: "
                              f"{self.run_dir / f'{name}.log'}") from None

    def _listening(self) -> bool:
        tcp = cmd.run(["ss", "-Hltn"], ns=self.ns, check=False).stdout
        udp = cmd.run(["ss", "-Hlun"], ns=self.ns, check=False).stdout
        tcp_only = {ip for ip, p in self.listeners if p != "h3"}  # only an h3 listener has UDP
        return all(f"{ip}:443 " in tcp and (ip in tcp_only or f"{ip}:443 " in udp)
                   for ip in {ip for _, ip in self.all_origins})

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 3, path: Path | None = None) -> str:
        """The last n lines of its own log (or of path)."""
        try:
            lines = (path or self.log_path).read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-n:]) or "(empty log)"

    def _new_log_lines(self) -> str:
        """Complete lines appended to the access log since the last call."""
        try:
            with open(self.access_log, "rb") as f:
                f.seek(self._log_offset)
                data = f.read()
        except OSError:
            return ""
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next call
        self._log_offset += end
        return data[:end].decode(errors="replace")

    def access_entries(self, uri: str, wait_s: float = 2.0, expect: int = 1, own=None) -> list[dict]:
        """Every access-log entry (in the terms above) written since the last call, once `expect` of
        the trial's are among them: its page's (`uri`) and, for a multi-object page, those its page
        asked for (Referer: the page); own: how a trial's entries are told (own_entries by default;
        a replayed recording's, by host and time). An entry is written when its response ends, so
        wait briefly. The caller tells its own trial's (URIs are unique per trial) from others',
        which are evidence of foreign traffic."""
        deadline = time.monotonic() + wait_s
        found: list[dict] = []
        while True:
            found += self.parse_access_log(self._new_log_lines())
            page = any(e["uri"] == uri for e in found)
            mine = own(found) if own else own_entries(found, uri)
            if (page and len(mine) >= expect) or time.monotonic() >= deadline:
                return found
            time.sleep(0.02)

    def died_reason(self) -> str | None:
        """Why it is not serving, or None while it runs: the server, or the replay server behind it
        (a replayed recording's every response is replayd's: without it the server answers 502)."""
        def how(code: int) -> str:
            return f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        if self.proc is not None and not self.alive():
            return f"{self.label} exited ({how(self.proc.returncode)}; log: {self.log_tail()})"
        if self.replayd is not None and self.replayd.poll() is not None:
            return (f"the replay server behind {self.label} exited ({how(self.replayd.returncode)}; log: "
                    f"{self.log_tail(path=self.run_dir / 'replayd.log')})")
        for name, proc in self.helpers.items():
            if proc.poll() is not None:
                return (f"the {name} stage of {self.label} exited ({how(proc.returncode)}; log: "
                        f"{self.log_tail(path=self.run_dir / f'{name}.log')})")
        return None

    def stop(self) -> None:
        cmd.stop_process(self.proc)
        self.proc = None
        for proc in [self.replayd, *self.helpers.values()]:
            if proc is not None:
                cmd.stop_process(proc)
                proc.stdout.close()
        self.replayd, self.helpers = None, {}
        self.think_file.unlink(missing_ok=True)  # the next server of the run folder starts with none asked
        self._think_told = None


def origins_for(server, generated: list[tuple[str, str]], page, proto: str) -> list[tuple[str, str]]:
    """The (host, address) pairs a load's browser resolves and forces its protocol on: the generated
    pages' origins (the testbed's plan's, and the folders' a server serves as they are) and the
    replayed recordings' hosts. Where a recording holds a host the generated pages have too (a
    recording of plt-bench's own page), the load of a recording resolves it to the replay's address,
    any other load to the generated pages'. As recorded (protocols.AS_RECORDED), a recording's hosts
    resolve to the addresses that offer each its own. server: the one serving (here, or a server
    machine's: remote.RemoteServer), by its replay and statics."""
    generated = generated + [o for x in getattr(server, "statics", ()) for o in x.origins]
    replay = getattr(server, "replay", None)
    replayed = replay.origins if replay else []
    if replay and protocols.get(proto).per_origin:
        replayed = [(h, ip) for h, ip, _ in replay.own]
    first, then = (replayed, generated) if page.page_kind.replayed_hosts_first else (generated, replayed)
    hosts = {h for h, _ in first}
    return first + [(h, ip) for h, ip in then if h not in hosts]


def spoke(server) -> dict[str, str]:
    """Each host that speaks one protocol alone -> that protocol (a recording's as recorded, a served
    folder's as given); a browser is forced to QUIC on the h3 ones under as-recorded."""
    replay = getattr(server, "replay", None)
    return {**{h: p for h, _, p in (replay.own if replay else ())},
            **{h: p for x in getattr(server, "statics", ()) for h, p in x.protocols}}


def addresses_of(replay, statics) -> list[str]:
    """The addresses a replay (every recorded host's, and as recorded each host's own) and the folders
    served as they are listen on, beside the plan's own (Plan.address_commands makes them)."""
    return ([ip for _, ip in (replay.origins if replay else [])] + [ip for _, ip, _ in (replay.own if replay else ())]
            + [ip for x in statics for _, ip in x.origins])


def metadata_of(several: list, serving) -> dict:
    """A campaign's metadata of the servers that served its pages (several: each of them; serving: the
    one serving now): their names, comma-separated; each one's build and version under its own keys
    (Caddy's 'caddy' and 'caddy_version', as every campaign before the second server had them); the
    QUIC controller each ran ('quinn: bbr; caddy: ...' for several)."""
    infos = {x.meta_key: x.info() for x in several}
    return {"http_server": ",".join(x.name for x in several), **infos,
            **{f"{k}_version": v.get("version") for k, v in infos.items()},
            "quic_cc": several[0].quic_cc() if len(several) == 1 else "; ".join(f"{x.name}: {x.quic_cc()}" for x in several),
            "quic_buffer_warning": serving.quic_buffer_warning()}


def json_lines(text: str):
    """The JSON objects of a log's lines, one a line; a line that is none (cut short, another kind of
    line) is skipped."""
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            yield e


def own_entries(entries: list[dict], uri: str) -> list[dict]:
    """A trial's own entries: its page's URI, and the objects its page asked for (their Referer is the
    page's URI), but not a browser's own /favicon.ico."""
    return [e for e in entries if e["uri"] == uri
            or ((e.get("referer") or "").endswith(uri) and not (e["uri"] or "").startswith("/favicon.ico"))]


def overlapping(entries: list[dict], uri: str, start_unix_s: float, end_unix_s: float) -> list[dict]:
    """Responses to other requests that were on the wire during [start, end]: a trial that shared the
    link with them did not run under its conditions. The page's own requests are not others: its
    URI, and what the page asked for (a browser's /favicon.ico, whose Referer is the page's URI).
    Nor is an earlier trial's /favicon.ico, which Chromium asks after the load: a request of a few
    hundred bytes answered 404 without a body, which the closed browser's orphaned TCP socket can
    retransmit into the next trial (at 200 ms of RTT it reached the server 40 ms into the next
    one). An entry without times counts as overlapping."""
    out = []
    for e in entries:
        if e["uri"] == uri or (e.get("referer") or "").endswith(uri):
            continue
        if (e["uri"] or "").startswith("/favicon.ico") and e.get("status") == 404 and not e.get("size"):
            continue
        end, dur = e.get("end_unix_s"), e.get("duration_s")
        if isinstance(end, (int, float)) and isinstance(dur, (int, float)):
            if end < start_unix_s or end - dur > end_unix_s:
                continue
        out.append(e)
    return out
