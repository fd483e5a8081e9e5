"""The whole embedded testbed: topology, Caddy, link, browser worker, as one context manager.

Everything it creates is undone by close(), which runs on success, on error and on Ctrl-C
(and SIGTERM, which the CLI turns into an exception). After SIGKILL, `plt-bench clean`
removes what is left: every process inside our namespaces, the namespaces, the run folder.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import shutil

from . import cmd, link as link_mod
from .browser import PREFS, BrowserWorker, chromium_args
from .capture import Settings, chromium_capture_args
from .conditions import Conditions
from .metadata import machine, utc_now
from .pages import Sites
from .server import HOST, Server
from .topology import Topology


class Testbed:
    def __init__(self, sites_dir: Path, cc: str = "cubic", link: str = "auto", index: int | None = None,
                 persistent: bool = False, with_browser: bool = True, need_no_reorder: bool = False,
                 capture: Settings | None = None):
        self.sites = Sites(sites_dir)
        self.capture = capture or Settings()
        self.qlog_spool: Path | None = None
        self.cc, self.link_name, self.index, self.need_no_reorder = cc, link, index, need_no_reorder
        self.persistent, self.with_browser = persistent, with_browser
        self.topology: Topology | None = None
        self.server: Server | None = None
        self.link = None
        self.worker: BrowserWorker | None = None
        self.worker_versions: dict = {}
        self.conditions: Conditions | None = None
        self.pcap_filter: Path | None = None  # tcpdump's filter file, where the interface carries other traffic
        self._stack = contextlib.ExitStack()

    @property
    def plan(self):
        return self.topology.plan

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> "Testbed":
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        cmd.require_root()
        self.topology = Topology.allocate(self.cc, self.index, self.persistent)
        self._stack.callback(self.topology.down)
        self.topology.create()
        self.link = link_mod.choose(self.link_name, self.plan, self.need_no_reorder)
        self._stack.callback(self.link.close)
        env = {}
        if "qlog" in self.capture.kinds:  # quic-go writes one qlog per connection here; trials move theirs out
            self.qlog_spool = self.capture.root / f".qlog-spool-{self.plan.prefix}"
            self.qlog_spool.mkdir(parents=True, exist_ok=True)
            self._stack.callback(shutil.rmtree, self.qlog_spool, True)
            env["QLOGDIR"] = str(self.qlog_spool)
        self.server = Server(self.plan.server_ns, self.plan.server_ip, self.plan.run_dir, self.sites.root, env=env)
        self._stack.callback(self.server.stop)
        self.server.start()
        self.topology.write_state(url=self.url("index_5KB.html"), spki=self.server.cert.spki_sha256_b64,
                                  server_pid=self.server.proc.pid)
        if self.with_browser:
            self.worker = BrowserWorker(self.plan.client_ns, self.plan.run_dir / "browser-worker.log")
            self._stack.callback(self.worker.stop)
            hello = self.worker.start()
            self.worker_versions = hello.get("versions", {})

    def close(self) -> None:
        self._stack.close()

    def detach(self) -> None:
        """Leave everything up (plt-bench up): forget the cleanups, keep the state file for `down`."""
        self._stack.pop_all()

    # -- link ----------------------------------------------------------------------------------
    def set_conditions(self, cond: Conditions) -> dict:
        """Apply conditions and read them back; raises LinkError if the kernel disagrees."""
        result = self.link.apply(cond)
        self.conditions = cond
        self.topology.write_state(conditions=cond.label)
        return result

    # -- trials --------------------------------------------------------------------------------
    def url(self, page: str, tag: str | None = None) -> str:
        q = f"?trial={tag}" if tag else ""
        return f"https://{HOST}/{page}{q}"

    def load(self, proto: str, page: str, timeout_s: float, capture_dir: Path | None = None) -> tuple[dict, str]:
        """One fresh-browser load; returns the worker's answer and the URI the server should log.
        With a capture folder, Chromium writes its key log and net-log there (as the settings ask)."""
        tag = uuid.uuid4().hex[:16]
        uri = f"/{page}?trial={tag}"
        profile = self.plan.run_dir / "profiles" / tag
        args = chromium_args(proto, HOST, self.plan.server_ip, self.server.cert.spki_sha256_b64, str(profile))
        if capture_dir is not None:
            args += chromium_capture_args(self.capture.kinds, capture_dir)
        req = {"url": self.url(page, tag), "timeout_s": timeout_s, "profile_dir": str(profile), "prefs": PREFS,
               "args": args, "cpu_interval_s": self.capture.cpu_interval_s, "cpu_series": "cpu" in self.capture.kinds}
        ans = self.worker.load(req, timeout_s + 60)
        return ans, uri

    def remote_cpu(self) -> dict:
        """CPU readings of processes on another machine ({role: (user_s, system_s)}); none here."""
        return {}

    def verify_args(self) -> dict:
        """What the link check needs beyond the plan (an iperf3 server elsewhere, the jitter's legs)."""
        return {}

    # -- metadata ------------------------------------------------------------------------------
    def metadata(self) -> dict:
        m = machine()
        caddy = self.server.info()
        m.update({
            "link_backend": self.link.name,
            "link_requested": self.link_name,
            "netem_available": link_mod.netem_available(),
            "congestion_control": self.cc,
            "caddy": caddy,
            "caddy_version": caddy.get("version"),
            "quic_buffer_warning": self.server.quic_buffer_warning(),
            "chromium": self.worker_versions.get("chromium"),
            "chromedriver": self.worker_versions.get("chromedriver"),
            "topology": self.plan.describe(),
            "testbed_up_utc": utc_now(),
            "capture": list(self.capture.kinds),
            "cpu_interval_s": self.capture.cpu_interval_s,
        })
        return m


class RemoteTestbed(Testbed):
    """Two machines: this host is the client, the server runs `plt-bench serve` (remote.py).

    Everything is checked before anything is changed: the options, the route to the server, the
    interface, the control channel's token and the certificate's pin."""

    def __init__(self, server, iface: str | None, conditions: list[Conditions], link: str = "auto",
                 index: int | None = None, capture: Settings | None = None, cc: str = "cubic", with_browser: bool = True):
        super().__init__(Path("."), cc=cc, link=link, index=index, capture=capture, with_browser=with_browser,
                         need_no_reorder=any(not c.reorder and c.jitter_ms for c in conditions))
        self.ref, self.iface_opt, self.all_conditions = server, iface, list(conditions)
        self._plan = None
        self.hello: dict = {}
        self.control = None

    @property
    def plan(self):
        return self._plan

    def check(self) -> None:
        """Every refusal that needs no change on the system (usage errors exit 2 before anything is made)."""
        from .errors import UsageError
        from .remote import HostLinkem
        if self.iface_opt is not None:
            from . import hostnet
            hostnet.require_iface(self.iface_opt)
        if "qlog" in self.capture.kinds:
            raise UsageError("--capture: qlog is Caddy's, written on the server machine; with --server choose from "
                             "cpu, pcap, keylog, netlog")
        if self.link_name == "linkem":
            HostLinkem.check_conditions(self.all_conditions)

    def _backend(self) -> str:
        """tcconfig (netem on the server, where the seed put it) if the server can and may shape; else
        linkem on this machine's ingress. Refusals name what to change."""
        from .errors import UsageError
        from .remote import HostLinkem
        impaired = any(c.impaired for c in self.all_conditions)
        server_can = (self.hello.get("netem") or not impaired) and self.hello.get("may_shape")
        backend = self.link_name if self.link_name != "auto" else ("tcconfig" if server_can else "linkem")
        if backend == "tcconfig":
            if not self.hello.get("may_shape"):
                raise UsageError(f"--link tcconfig: the server shapes only an interface named on its side; restart it "
                                 f"with 'plt-bench serve --addr {self.ref.addr} --iface {self.hello.get('iface')}'")
            if impaired and not self.hello.get("netem"):
                raise UsageError("--link tcconfig: the server's kernel has no sch_netem, so it cannot add delay, jitter "
                                 "or loss; use --link linkem (on this machine's ingress)")
            if self.need_no_reorder:
                raise UsageError("--no-reorder: netem reorders jittered packets; in-order jitter needs --link linkem")
        else:
            HostLinkem.check_conditions(self.all_conditions)
        return backend

    def open(self) -> None:
        from . import hostnet
        from .control import Control
        from .errors import UsageError
        from .remote import HostLinkem, RemotePlan, RemoteServer, RemoteSites, ServerNetemLink
        cmd.require_root()
        self.check()
        addr = self.ref.addr
        route = hostnet.route_to(addr)
        if not route.get("dev"):
            raise UsageError(f"--server: this machine has no route to {addr}")
        if route.get("type") == "local" or route.get("dev") == "lo":
            raise UsageError(f"--server: {addr} is an address of this machine; expected the server's, on the other "
                             "machine")
        iface = hostnet.pick_iface(route["dev"], self.iface_opt, f"traffic to the server {addr}")
        self.control = Control(addr, self.ref.control_port, self.ref.token)
        self._stack.callback(self.control.close)
        self.hello = self.control.call("hello")
        if self.hello.get("pin") != self.ref.pin:
            raise UsageError(f"--server-pin: the server's certificate has pin {self.hello.get('pin')}, not "
                             f"{self.ref.pin}; copy the pin the running 'plt-bench serve' printed")
        backend = self._backend()
        shaping = backend == "linkem" and any(c.rate_down_bps or c.rate_up_bps or c.impaired for c in self.all_conditions)
        if shaping and self.iface_opt is None:
            raise UsageError(f"--iface: the link is shaped on this machine's interface towards {addr}, and the testbed "
                             f"shapes only an interface you name: add --iface {route['dev']}")
        if shaping:
            hostnet.check_untouched(iface)
        self.topology = Topology.allocate(self.cc, self.index)
        self._stack.callback(self.topology.down)
        self._plan = RemotePlan(self.topology.plan.index, iface, addr, route.get("prefsrc") or "")
        self.topology.write_state(role="client", server=addr, iface=iface)
        if backend == "linkem":
            self.link = HostLinkem(self._plan, lambda host: self.topology.write_state(host=host))
            self._stack.callback(self.link.close)
            self.link.open()
        else:
            self.link = ServerNetemLink(self._plan, self.control)
            self._stack.callback(self.link.close)
        self.server = RemoteServer(self.control, self.hello)
        self.sites = RemoteSites(self.hello.get("pages") or {}, addr)
        self.pcap_filter = self._plan.run_dir / "pcap.filter"  # in the run folder: `clean` finds a stray tcpdump
        self.pcap_filter.write_text(f"host {addr}\n")
        if self.with_browser:
            self.worker = BrowserWorker(None, self._plan.run_dir / "browser-worker.log")
            self._stack.callback(self.worker.stop)
            self.worker_versions = self.worker.start().get("versions", {})

    def remote_cpu(self) -> dict:
        return self.server.cpu()

    def verify_args(self) -> dict:
        from .remote import RemoteIperf
        return {"iperf": RemoteIperf(self.control), "legs": self.link.jitter_legs,
                "user_latency": self.link.ping_user_latency}

    def metadata(self) -> dict:
        m = super().metadata()
        sysctl = self.hello.get("sysctl") or {}
        m.update({
            "mode": "two machines",
            "link_placement": self.link.placement,
            # the sender's algorithm is the server's; the testbed leaves real hosts' sysctls alone
            "congestion_control": (sysctl.get("net.ipv4.tcp_congestion_control") or "unknown"),
            "congestion_control_requested": self.cc,
            "server": {k: self.hello.get(k) for k in ("host", "kernel", "cpu_count", "loadavg", "plt_bench",
                                                      "git_commit", "iface", "sysctl")},
        })
        return m
