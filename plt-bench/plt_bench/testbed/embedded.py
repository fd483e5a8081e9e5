"""The embedded testbed: three namespaces, the servers, the link, the name server, the browser worker
and the visitor's control group, composed from one settings record (testbed.setup.Setup).

The testbed holds its parts and does not re-implement them: the link applies conditions (link/),
the servers serve (servers/), the browser seam builds each load's request (browsers.visit) and runs
it (browsers.worker), the visitor's group holds the browser to its budget (device.visitor).
Everything it creates is undone by close(), which runs on success, on error and on Ctrl-C (and
SIGTERM, which the CLI turns into an exception). After SIGKILL, `plt-bench clean` removes what is
left: every process inside our namespaces, the namespaces, the run folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from pathlib import Path

from .. import browsers, cmd, dns, link as link_mod, servers
from ..browsers import drivers, sandbox, visit as visit_mod
from ..browsers.pipe import BrowserWorker, quiesce
from ..browsers.worker import RESOURCE_WAIT_MS
from ..capture import SpoolQlogs
from ..conditions import Conditions
from ..device.visitor import Visitor, VisitorGroup
from ..link import cross as cross_mod, ecn
from ..metadata import machine, utc_now
from ..pages import Page, Sites
from ..pages.replayd import ACTIVE_REPLAY
from ..topology import Topology, set_route_cc, up_info, write_client_etc, write_client_hosts
from .setup import Setup

# How long beyond the page's own timeout the worker may take to answer (the browser's start and quit,
# the CPU readings, the sweep of its processes) before it counts as hung and the run stops. 60 s
# was once too short: the netem VM's emulated CPUs, with one host core busy, took over 80 s for a
# 5 KB trial. Only a hung worker waits this long.
WORKER_ALLOWANCE_S = 240.0


class Testbed:
    def __init__(self, setup: Setup):
        self.setup = setup
        self.sites = Sites(setup.sites_dir)
        self.capture = setup.capture
        self.traces = {t.sha256: t for t in setup.traces}  # as conditions name them (TraceRate.trace), the link's too
        # (uid, gid) of the browsers' user when they run sandboxed; refused before anything is made if it is missing
        self.sandbox_ids = sandbox.user_ids() if setup.with_browser and setup.browser_sandbox == "on" else None
        self.browser: drivers.ChromiumBuild | None = None
        self.topology: Topology | None = None
        self.link: link_mod.Link | None = None
        self.servers: dict = {}  # every one of server_names, by name (servers.Server)
        self.server = None  # the one serving now
        self.name_server: dns.NameServer | None = None
        self.worker: BrowserWorker | None = None
        self.worker_versions: dict = {}
        self.qlogs = None  # where a capture run's qlogs are had (capture.SpoolQlogs; remote.RemoteQlogs)
        self.pcap_filter: Path | None = None  # tcpdump's filter file, where the interface carries other traffic
        self.timing = link_mod.verify.Timing()  # this machine's own timing error, measured at open
        self.conditions: Conditions | None = None  # the link's now
        self.cross = None  # the competing flows running now (link.cross.Flows)
        self.visitor = Visitor()  # who the next load is for (device.visitor)
        self.visitor_group: VisitorGroup | None = None  # the browser's control group, made at open
        self.calibrations: dict = {}  # each device's calibration on this host (session: at the campaign's start)
        self.one_address: str | None = None  # where a hosts-file browser finds every name (browsers.visit.Visit)
        self._cc = setup.cc  # what the routes carry now (set_cc changes it between trials)
        self._cross_made = False  # the competing flows' hosts' namespaces exist (made with the first that ask)
        self._tcp_ecn: int | None = None  # the hosts' net.ipv4.tcp_ecn as last written and read back
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

    def close(self) -> None:
        self._stack.close()

    def detach(self) -> None:
        """Leave everything up (plt-bench up): forget the cleanups, hand the testbed over to `down`."""
        self.topology.hand_over()
        self._stack.pop_all()

    def open(self) -> None:
        s = self.setup
        cmd.require_root()
        self._resolve_browser()
        choice = link_mod.resolve("embedded", s.link, s.conditions, link_mod.Capabilities(netem=link_mod.netem_available()))
        self.topology = Topology.allocate(s.cc, s.index, s.persistent)
        self._stack.callback(self.topology.down)
        self.topology.create()
        self.link = link_mod.make(choice, plan=self.plan)
        self.link.traces = self.traces
        self._stack.callback(self.link.close)
        self._stack.callback(self.stop_cross)  # the competing flows end before the link and the namespaces
        self.timing = link_mod.verify.measure_timing(self.plan)
        self.visitor_group = VisitorGroup(self.plan.prefix, self._stack.callback)
        env = {}
        if "qlog" in self.capture.kinds:  # quic-go writes one qlog per connection here; trials move theirs out
            self.qlogs = SpoolQlogs.made(self.capture, self.plan.prefix, self._stack)
            env["QLOGDIR"] = str(self.qlogs.spool)
        replay = servers.Replay.of(self.sites.root, s.replays, self.plan.replay_addresses, self.plan.as_recorded_addresses,
                                   active=self.plan.run_dir / ACTIVE_REPLAY) if s.replays else None
        statics = servers.statics_for(s.folders, self.plan.static_addresses)
        # only a testbed that replays or serves folders has them
        cmd.run_each(self.plan.address_commands(servers.addresses_of(replay, statics)))
        self.servers = {n: servers.get(n)(self.plan.server_ns, self.plan.server_ip, self.plan.run_dir, self.sites.root,
                                          origins=self.plan.origins, env=env, replay=replay, statics=statics, cc=s.cc,
                                          think=s.think)
                        for n in s.server_names}
        for one in self.servers.values():
            self._stack.callback(one.stop)
        self.server = self.servers[s.server_names[0]]
        self.server.start()
        for one in self.servers.values():  # one certificate for all: a browser started early trusts its pin
            one.cert = self.server.cert
        if s.discovery != "forced":  # the origins' names are the testbed's own name server's
            self.name_server = dns.NameServer(self.plan.server_ns, self.plan.server_ip, self.server.all_origins,
                                              s.discovery, self.plan.run_dir)
            self._stack.callback(self.name_server.stop)
            self.name_server.start()
            write_client_etc(self.plan, self.plan.server_ip)
        self.topology.write_state(url=self.url(Page(5000)), spki=self.server.cert.spki_sha256_b64,
                                  server_pid=self.server.proc.pid)
        self._start_worker(self.plan.client_ns)

    def _resolve_browser(self) -> None:
        """A browser without a driver is refused before anything is changed (Chromium's only)."""
        if self.setup.with_browser and browsers.CHROMIUM_NAME in self.setup.browser_names:
            self.browser = drivers.resolve(self.setup.browser_binary)

    def _start_worker(self, ns: str | None, own_files=()) -> None:
        """The browser worker (browsers.worker), in the client's namespace; under the sandbox the browsers'
        user's home and the profiles its own, the run folder passable, the worker told (browsers.sandbox)."""
        if not self.setup.with_browser:
            return
        self.worker = BrowserWorker(ns, self.plan.run_dir / "browser-worker.log", self.browser)
        self.worker.own_files = list(own_files)
        if self.sandbox_ids:
            self.worker.env = sandbox.ready_worker(self.sandbox_ids, self.plan.run_dir)
        self._stack.callback(self.worker.stop)
        self.worker_versions = self.worker.start().get("versions", {})

    # -- link ----------------------------------------------------------------------------------
    def set_conditions(self, cond: Conditions, traces=()) -> dict:
        """Apply conditions and read them back; raises LinkError if the kernel disagrees. A browser
        started early for the next load is ended first: nothing idles in the client while the link
        changes and is verified. traces: traces they follow beyond those the testbed was given."""
        self.traces.update({t.sha256: t for t in traces})  # the link's own (the same mapping)
        self.discard_prepared()
        self.stop_cross()
        if cond.cross is not None and not self._cross_made:  # the competing flows' hosts, once (link.cross)
            cmd.run_each(self.plan.cross_commands())
            self._cross_made = True
        result = self.link.apply(cond)
        if hasattr(self.plan, "ecn_commands") and self._tcp_ecn != (1 if cond.ecn else 2):
            self._tcp_ecn = ecn.set_tcp_ecn(self.plan, cond.ecn)  # the embedded testbed's hosts, when it changes
        if self._tcp_ecn is not None:
            result["tcp_ecn"] = self._tcp_ecn
        self.conditions = cond
        self.topology.write_state(conditions=cond.label)
        return result

    def start_cross(self, cond: Conditions) -> dict | None:
        """The conditions' competing flows (link.cross), started once the link is set and checked (they
        would load the check): steady and carrying their share before the first trial, or LinkError.
        None without --cross."""
        self.cross = cross_mod.flows_for(self.plan, cond)
        return self.cross.start() if self.cross else None

    def stop_cross(self) -> None:
        if self.cross is not None:
            self.cross.stop()
            self.cross = None

    def set_cc(self, cc: str) -> None:
        """The TCP congestion control of the trials to come, on the hosts' routes (a connection takes
        its route's when it opens); read back: raises LinkError if a route says otherwise."""
        if cc != self._cc:
            self.server.set_quic_cc(cc)  # a server whose QUIC controller is chosen (quinnserve) runs it too
            set_route_cc(self.plan, cc)
            self._cc = cc

    def cc_in_use(self) -> str:
        """The TCP congestion control a connection opened now would use."""
        return self._cc

    def use_server(self, name: str) -> None:
        """The server of the trials to come (one of server_names): the one serving stops, the other
        starts on the same addresses with the same certificate and the congestion control in use, its
        access log read from where it stands. Raises ServerError if it does not listen."""
        if name == self.server.name:
            return
        if name not in self.servers:
            raise ValueError(f"server {name!r}: this testbed serves with {', '.join(self.setup.server_names)}")
        self.server.stop()
        self.server = self.servers[name]
        self.server.set_quic_cc(self._cc)
        self.server.start()
        self.topology.write_state(server_pid=self.server.proc.pid)

    # -- trials --------------------------------------------------------------------------------
    def broken(self) -> str | None:
        """What of the testbed has died (the server, the link emulator, the browser worker), or None."""
        return next((why for part in (self.server, self.link, self.worker, self.name_server)
                     if part is not None and (why := part.died_reason())), None)

    def quiesce(self) -> int:
        """Before a trial: no process but the browser worker (and the browser it holds) in the client
        namespace. Returns how many were killed; raises TestbedBroken if one would not die."""
        return quiesce(self.plan.client_ns, self.worker)

    def url(self, page: Page, tag: str | None = None) -> str:
        """A page's URL (with its trial's tag: the server's log tells trials apart by it); a replayed
        recording's is the recorded URL itself, untagged, a served folder's page its own."""
        return page.page_kind.url(page, self.sites.root, tag)

    def origins_for(self, page: Page, proto: str = "h3") -> list[tuple[str, str]]:
        """The (host, address) pairs a load's browser resolves (servers.origins_for)."""
        return servers.origins_for(self.server, self.plan.origins, page, proto)

    def visit(self, proto: str, page: Page, tag: str, capture_dir: Path | None = None, browser: str | None = None,
              benchmark: bool = False) -> visit_mod.Visit:
        """One load as its browser sees it (browsers.visit.Visit), from the testbed's parts."""
        b = browsers.get(browser or self.setup.browser_name)
        if b.name not in self.setup.browser_names:  # what the campaign's metadata says ran is all that runs
            raise ValueError(f"a {b.label} load on a testbed of {', '.join(self.setup.browser_names)}")
        writes = capture_dir  # under the sandbox, the browser's user writes to a staging folder of its own
        if capture_dir is not None and self.sandbox_ids:
            writes = sandbox.staging(self.sandbox_ids, self.plan.run_dir, tag)
        return visit_mod.Visit(
            proto, page, b, self.url(page, tag), self.plan.run_dir / "profiles" / tag,
            origins=tuple(self.origins_for(page, proto)), spki=self.server.cert.spki_sha256_b64,
            spoke=servers.spoke(self.server), discovery=self.setup.discovery, capture_dir=capture_dir, writes=writes,
            captures=self.capture.kinds if capture_dir is not None else (), cpu_interval_s=self.capture.cpu_interval_s,
            rtt_ms=self.conditions.rtt_ms if self.conditions else 0.0, sandboxed=bool(self.sandbox_ids),
            screen=self.visitor.screen, budget=self.visitor_group.request if self.visitor.quota else {},
            keep=self.setup.browser_start == "kept", har_bodies=self.setup.record_bodies, benchmark=benchmark,
            one_address=self.one_address)

    def _request(self, v: visit_mod.Visit) -> dict:
        """The worker's request for a visit (browsers.visit.request); a browser that resolves by a hosts
        file finds this load's hosts at this load's addresses."""
        req = visit_mod.request(v)
        if (v.browser.resolves_by_hosts_file and self.setup.discovery == "forced"
                and (self.setup.replays or self.server.statics)):
            write_client_hosts(self.plan, list(v.browser_origins))
        return req

    def prepare(self, proto: str, page: Page, browser: str | None = None) -> None:
        """Start the browser of the next load now (its own fresh profile and flags, idle on
        about:blank), while the last trial is judged and stored; load() takes it when it asks for
        the same protocol and page without a capture folder, and any other load ends it first."""
        tag, browser = uuid.uuid4().hex[:16], browser or self.setup.browser_name
        self.worker.prepare(self._request(self.visit(proto, page, tag, None, browser)), (proto, page, browser), tag)

    def discard_prepared(self) -> None:
        """End the browser started early and every kept one (the worker's discard)."""
        if self.worker:
            self.worker.discard()

    def load(self, proto: str, page: Page, timeout_s: float, capture_dir: Path | None = None,
             await_s: float = 0.0, gate: bool = False, settle_s: float = 0.0, browser: str | None = None,
             expect: tuple[str, ...] = (), benchmark: tuple[int, ...] | None = None) -> tuple[dict, str]:
        """One load; returns the worker's answer and the URI the server should log. await_s > 0: then
        wait that long for the page's own figures (a bulk page's download). gate: the idle gate runs
        between the browser's launch and the navigation. settle_s: the browser stays up that long after
        its figures are read. browser: which of the testbed's browsers loads it (None: the first).
        expect: objects ("host/path") whose Resource Timing entries the worker waits for (a replay's
        fetches, which do not hold the load event). benchmark: (warm-ups, runs, work...) of the device
        calibration's benchmark, run in the page after its figures (the answer's "benchmark")."""
        ready = self.worker.take((proto, page, browser or self.setup.browser_name))
        tag = ready if ready and capture_dir is None else uuid.uuid4().hex[:16]
        recording = page.page_kind.recording_name(page)
        if recording and len(self.setup.replays) > 1:  # the replay serves this recording's responses alone
            self.server.activate(recording)
        v = self.visit(proto, page, tag, capture_dir, browser, benchmark=bool(benchmark))
        req = {**self._request(v), "timeout_s": timeout_s, "await_s": await_s, "gate": gate,
               "mark": self.link.mark_signal(), "settle_s": settle_s,
               **({"expect_resources": list(expect)} if expect else {}),
               **({"benchmark": list(benchmark)} if benchmark else {})}
        quota, pid = self.visitor.quota, getattr(self.worker.proc, "pid", None)
        before = self.visitor_group.start(pid) if quota else None
        try:
            ans = self.worker.load(req, timeout_s + await_s + settle_s + WORKER_ALLOWANCE_S
                                   + (RESOURCE_WAIT_MS / 1000 if expect else 0.0))
        finally:
            if capture_dir is not None and self.sandbox_ids:  # the browser's capture files, the results' now
                sandbox.move_staged(v.writes, capture_dir)
        if before is not None:  # the group's own counters over the whole trial (its launch included)
            ans["cpu_group"] = self.visitor_group.used(quota, before, pid)
        if self.visitor.calibration is not None:
            ans["device"] = self.visitor.calibration.as_dict()
        return ans, page.page_kind.log_uri(page, self.sites.root, tag)

    def set_visitor(self, visitor: Visitor) -> None:
        """The visitor of the loads that follow (device.visitor): a browser started (or kept) for another
        is let go; the budget applied to the browser's group (UsageError, CgroupError)."""
        if visitor != self.visitor:
            self.discard_prepared()
        self.visitor_group.apply(visitor)
        self.visitor = visitor

    def remote_cpu(self) -> dict:
        """CPU readings of processes on another machine ({role: (user_s, system_s)}); none here."""
        return {}

    def verify_args(self) -> dict:
        """What the link check needs beyond the plan (an iperf3 server elsewhere, the jitter's legs, the path)."""
        return {"timing": self.timing, "link": self.link}

    # -- what it is ----------------------------------------------------------------------------
    def describe(self, check: dict, pages) -> dict:
        """Where everything of a testbed that stays up is ('plt-bench up'), with "text" for people."""
        return up_info(self.plan, check, self.url(Page(5000)), [f"/{p.html_name}" for p in pages],
                       self.server.cert.spki_sha256_b64)

    def metadata(self) -> dict:
        """The campaign's metadata: the machine, and what each part says of itself. Every key field
        (metadata.KEY_FIELDS) a setting of the testbed decides is written here, from that setting."""
        s, several = self.setup, [self.servers.get(n) or self.server for n in self.setup.server_names]
        return {**machine(), **self.link.describe(), "link_requested": s.link, "netem_available": link_mod.netem_available(),
                "congestion_control": s.cc, **servers.metadata_of(several, self.server),
                "discovery": s.discovery,  # forced for every campaign before it
                **browsers.metadata_of(s.browser_names, self.worker_versions, self.browser, s.browser_start,
                                       s.browser_sandbox),
                "topology": self.plan.describe(), "testbed_up_utc": utc_now(), "capture": list(self.capture.kinds),
                "cpu_interval_s": self.capture.cpu_interval_s, "timing": dataclasses.asdict(self.timing)}
