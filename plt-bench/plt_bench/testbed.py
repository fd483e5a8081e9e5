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
