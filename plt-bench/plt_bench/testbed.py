"""The whole embedded testbed: topology, Caddy, link, browser worker, as one context manager.

Everything it creates is undone by close(), which runs on success, on error and on Ctrl-C
(and SIGTERM, which the CLI turns into an exception). After SIGKILL, `plt-bench clean`
removes what is left: every process inside our namespaces, the namespaces, the run folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .device.budget import Quota

from . import browsers, cmd, dns, link as link_mod, protocols
from .trial.pipe import BrowserWorker
from .trial.worker import RESOURCE_WAIT_MS, paint_quiet_ms
from .browsers import WINDOW_ARGS, drivers, sandbox
from .capture import FILENAMES, Settings
from .conditions import Conditions
from .metadata import machine, utc_now
from . import servers, traces as traces_mod
from .pages import HOST, Page, Sites
from .pages.replayd import ACTIVE_REPLAY, write_active
from .topology import Topology, pids_in, write_client_etc


# How long beyond the page's own timeout the worker may take to answer (the browser's start and quit,
# the CPU readings, the sweep of its processes) before it counts as hung and the run stops. 60 s
# was once too short: the netem VM's emulated CPUs, with one host core busy, took over 80 s for a
# 5 KB trial. Only a hung worker waits this long.
WORKER_ALLOWANCE_S = 240.0


class Testbed:
    def __init__(self, sites_dir: Path, cc: str = "cubic", link: str = "auto", index: int | None = None,
                 persistent: bool = False, with_browser: bool = True, conditions: Sequence[Conditions] = (),
                 capture: Settings | None = None, browser_binary: str | None = None, replays: Sequence[str] = (),
                 serve: Sequence[tuple[str, Path]] = (), browser_names: Sequence[str] = (browsers.DEFAULT,),
                 traces: Sequence = (), server_names: Sequence[str] = (servers.DEFAULT,), discovery: str = "forced",
                 browser_sandbox: str = sandbox.DEFAULT, browser_start: str = browsers.START_DEFAULT):
        """conditions: every one it will be set to (the link is chosen for them all); traces: the
        traces those conditions follow (traces.Trace, as read: Spec.traces), handed to the link;
        server_names: which servers (plt_bench.servers) serve the pages, one at a time (use_server),
        the first from the start; discovery: how browsers find the origins and h3 (dns.MODES: other than
        forced, the testbed runs a name server of its own, dns.NameServer); browser_sandbox: on, the
        browsers run as the unprivileged user with their sandbox (browsers.sandbox), or off;
        browser_start: kept, a browser kept across trials with a fresh context each where it can
        (browsers.base.START_MODES), or fresh."""
        self.sites = Sites(sites_dir)
        self.traces = traces_mod.by_hash(traces)  # as conditions name them (TraceRate.trace)
        self.replays = tuple(dict.fromkeys(replays))  # recordings replayed as recorded (pages.recording)
        # (host, folder, protocol): folders served as they are, to record from (plt-bench record), each host over
        # every protocol ('') or the one given alone (record --serve HOST@h1=DIR)
        self.serve = [(x[0], x[1], x[2] if len(x) > 2 else "") for x in serve]
        self.record_bodies = False  # HARs keep every body (a recording: plt_bench.recorder)
        # which browsers load the pages (plt_bench.browsers): a load names its own, the first by default
        self.browser_names = tuple(browsers.get(b).name for b in browser_names)
        self.browser_name = self.browser_names[0]
        self.server_names = tuple(dict.fromkeys(servers.get(n).name for n in server_names))
        self.browser_binary = browser_binary  # None: Debian's Chromium (plt_bench.browsers.drivers)
        self.browser: drivers.ChromiumBuild | None = None
        self.capture = capture or Settings()
        self.qlog_spool: Path | None = None
        self.qlogs = None  # where a capture run's qlogs are had (capture.SpoolQlogs; remote.RemoteQlogs)
        self.cc, self.link_name, self.index, self.all_conditions = cc, link, index, list(conditions)
        self._cc = cc  # what the routes carry now (set_cc changes it between trials)
        self.persistent, self.with_browser = persistent, with_browser
        self.topology: Topology | None = None
        self.server: Server | None = None  # the one serving now
        self.servers: dict[str, Server] = {}  # every one of server_names, by name
        self.discovery = dns.parse(discovery, "discovery")
        self.browser_sandbox = sandbox.parse(browser_sandbox)
        self.browser_start = browsers.parse_start(browser_start)
        self._kept = False  # a load has asked the worker to keep its browser: it may hold browsers between loads
        # (uid, gid) of the browsers' user when they run sandboxed; refused before anything is made if it is missing
        self.sandbox_ids = sandbox.user_ids() if with_browser and self.browser_sandbox == "on" else None
        self.name_server: dns.NameServer | None = None
        self.link: link_mod.Link | None = None
        self.worker: BrowserWorker | None = None
        self.worker_versions: dict = {}
        # (proto, page, tag, browser) of the browser started early
        self._prepared: tuple[str, str, str, str, str] | None = None
        self.conditions: Conditions | None = None
        self.timing = link_mod.verify.Timing()  # this machine's own timing error, measured at open
        self.pcap_filter: Path | None = None  # tcpdump's filter file, where the interface carries other traffic
        self.budget = None  # the browser's CPU budget now (device.budget.Quota), None: the machine's whole CPU
        self.budget_cpus: list[int] = []
        self.cpu_group = None  # its control group (device.cgroup.Group), made on the first budget
        self._budget_request: dict = {}  # what a budgeted load asks of the worker (set_budget)
        self.memory_bytes: int | None = None  # the browser group's memory cap (set_budget), none by default
        self.device = None  # the named device in use (set_visitor): its device.calibrate.Calibration
        self.calibrations: dict = {}  # each device's calibration on this host (session: at the campaign's start)
        self.cross = None  # the competing flows running now (link.cross.Flows), started by start_cross
        self._cross_made = False  # their hosts' namespaces exist (made with the first conditions that ask)
        self._tcp_ecn: int | None = None  # the hosts' net.ipv4.tcp_ecn as last written and read back
        self.screen = None  # a device's screen the browser emulates (set_visitor; device.profiles.Screen)
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
        if self.with_browser and browsers.CHROMIUM_NAME in self.browser_names:  # a browser without a driver is
            self.browser = drivers.resolve(self.browser_binary)  # refused before anything is changed (Chromium's only)
        choice = link_mod.resolve("embedded", self.link_name, self.all_conditions,
                                  link_mod.Capabilities(netem=link_mod.netem_available()))
        self.topology = Topology.allocate(self.cc, self.index, self.persistent)
        self._stack.callback(self.topology.down)
        self.topology.create()
        self.link = link_mod.make(choice, plan=self.plan)
        self.link.traces = self.traces
        self._stack.callback(self.link.close)
        self._stack.callback(self.stop_cross)  # the competing flows end before the link and the namespaces
        self.timing = link_mod.verify.measure_timing(self.plan)
        env = {}
        if "qlog" in self.capture.kinds:  # quic-go writes one qlog per connection here; trials move theirs out
            self.qlog_spool = self.capture.root / f".qlog-spool-{self.plan.prefix}"
            self.qlog_spool.mkdir(parents=True, exist_ok=True)
            self._stack.callback(shutil.rmtree, self.qlog_spool, True)
            env["QLOGDIR"] = str(self.qlog_spool)
            from .capture import SpoolQlogs
            self.qlogs = SpoolQlogs(self.qlog_spool)
        replay, statics = self.replay_config(), self.static_config()
        extra = ([ip for _, ip in (replay.origins if replay else [])] + [ip for _, ip, _ in (replay.own if replay else ())]
                 + [ip for x in statics for _, ip in x.origins])
        for ns, argv in self.plan.address_commands(extra):  # only a testbed that replays or serves folders has them
            cmd.run(argv, ns=ns)
        self.servers = {n: servers.get(n)(self.plan.server_ns, self.plan.server_ip, self.plan.run_dir, self.sites.root,
                                          origins=self.plan.origins, env=env, replay=replay, statics=statics, cc=self.cc)
                        for n in self.server_names}
        for one in self.servers.values():
            self._stack.callback(one.stop)
        self.server = self.servers[self.server_names[0]]
        self.server.start()
        for one in self.servers.values():  # one certificate for all: a browser started early trusts its pin
            one.cert = self.server.cert
        if self.discovery != "forced":  # the origins' names are the testbed's own name server's
            self.name_server = dns.NameServer(self.plan.server_ns, self.plan.server_ip, self.server.all_origins,
                                              self.discovery, self.plan.run_dir)
            self._stack.callback(self.name_server.stop)
            self.name_server.start()
            write_client_etc(self.plan, self.plan.server_ip)
        self.topology.write_state(url=self.url(Page(5000)), spki=self.server.cert.spki_sha256_b64,
                                  server_pid=self.server.proc.pid)
        if self.with_browser:
            self.worker = BrowserWorker(self.plan.client_ns, self.plan.run_dir / "browser-worker.log", self.browser)
            self._sandbox_worker()
            self._stack.callback(self.worker.stop)
            hello = self.worker.start()
            self.worker_versions = hello.get("versions", {})

    def close(self) -> None:
        self._stack.close()

    def _sandbox_worker(self) -> None:
        """Under the sandbox: the browsers' user's home and the profiles its own, the run folder passable,
        the worker told (browsers.sandbox)."""
        if self.sandbox_ids:
            sandbox.give(self.sandbox_ids, *sandbox.home_folders(self.sandbox_home), self.plan.run_dir / "profiles")
            self.plan.run_dir.chmod(0o711)
            self.worker.env = sandbox.worker_env(self.sandbox_home)

    @property
    def sandbox_home(self) -> Path:
        """The browsers' user's home, temporary and configuration folders (browsers.sandbox)."""
        return self.plan.run_dir / "browser"

    def _activate(self, recording: str) -> None:
        """Name the recording measured now, where the server replays several (replayd --active)."""
        write_active(self.plan.run_dir / ACTIVE_REPLAY, recording)

    def replay_config(self):
        """What the server replays: every recorded host of the campaign's recordings, each on its own
        replay address (servers.Replay.of); None when it replays nothing."""
        if not self.replays:
            return None
        from .servers import Replay
        return Replay.of(self.sites.root, self.replays, self.plan.replay_addresses, self.plan.as_recorded_addresses,
                         active=self.plan.run_dir / ACTIVE_REPLAY)

    def static_config(self):
        """The folders served as they are, one site per folder, each host on its own address."""
        from .errors import UsageError
        from .servers import Static
        addresses = self.plan.static_addresses
        if len(self.serve) > len(addresses):
            raise UsageError(f"--serve: {len(self.serve)} hosts; a testbed serves at most {len(addresses)}")
        folders: dict[Path, list[tuple[str, str]]] = {}
        for (host, folder, _), ip in zip(self.serve, addresses):
            folders.setdefault(Path(folder).resolve(), []).append((host, ip))
        spoke = tuple((h, p) for h, _, p in self.serve if p)
        return [Static(f, o, tuple((h, p) for h, p in spoke if h in {x for x, _ in o})) for f, o in folders.items()]

    def origins_for(self, page: Page, proto: str = "h3") -> list[tuple[str, str]]:
        """The (host, address) pairs a load's browser resolves and forces its protocol on: the
        generated pages' origins and the replayed recordings' hosts; where a recording holds a host
        the generated pages have too (a recording of plt-bench's own page), the load of a recording
        resolves it to the replay's address, any other load to the generated pages'. As recorded
        (protocols.AS_RECORDED), a recording's hosts resolve to the addresses that offer each its own."""
        # the server's own origins are the plan's (here as on two machines, whose RemoteServer has no more)
        generated = self.plan.origins + [o for x in getattr(self.server, "statics", ()) for o in x.origins]
        replay = getattr(self.server, "replay", None)
        replayed = replay.origins if replay else []
        if replay and protocols.get(proto).per_origin:
            replayed = [(h, ip) for h, ip, _ in replay.own]
        first, then = (replayed, generated) if page.page_kind.replayed_hosts_first else (generated, replayed)
        hosts = {h for h, _ in first}
        return first + [(h, ip) for h, ip in then if h not in hosts]

    def spoke(self) -> dict[str, str]:
        """Each host that speaks one protocol alone -> that protocol (a recording's as recorded, a served
        folder's as given); the browser is forced to QUIC on the h3 ones under as-recorded."""
        replay = getattr(self.server, "replay", None)
        return {**{h: p for h, _, p in (replay.own if replay else ())},
                **{h: p for x in getattr(self.server, "statics", ()) for h, p in x.protocols}}

    def detach(self) -> None:
        """Leave everything up (plt-bench up): forget the cleanups, hand the testbed over to `down`."""
        self.topology.hand_over()
        self._stack.pop_all()

    # -- link ----------------------------------------------------------------------------------
    def set_conditions(self, cond: Conditions, traces=()) -> dict:
        """Apply conditions and read them back; raises LinkError if the kernel disagrees. A browser
        started early for the next load is ended first: nothing idles in the client while the link
        changes and is verified. traces: traces they follow beyond those the testbed was given."""
        self.traces.update(traces_mod.by_hash(traces))  # the link's own (the same mapping)
        self.discard_prepared()
        self.stop_cross()
        if cond.cross is not None and not self._cross_made:  # the competing flows' hosts, once (link.cross)
            for ns, argv in self.plan.cross_commands():
                cmd.run(argv, ns=ns)
            self._cross_made = True
        result = self.link.apply(cond)
        want_ecn = 1 if cond.ecn else 2
        if hasattr(self.plan, "ecn_commands") and self._tcp_ecn != want_ecn:
            # the embedded testbed's hosts: TCP asks for ECN under --ecn; written and read back when it changes
            commands = self.plan.ecn_commands(cond.ecn)
            for ns, argv in commands:
                cmd.run(argv, ns=ns)
            got = {cmd.run(["sysctl", "-n", "net.ipv4.tcp_ecn"], ns=ns).stdout.strip() for ns, _ in commands}
            if got != {str(want_ecn)}:
                from .errors import LinkError
                raise LinkError(f"--ecn: the hosts' net.ipv4.tcp_ecn reads back as {sorted(got)}")
            self._tcp_ecn = want_ecn
        if self._tcp_ecn is not None:
            result["tcp_ecn"] = self._tcp_ecn
        self.conditions = cond
        self.topology.write_state(conditions=cond.label)
        return result

    def start_cross(self, cond: Conditions) -> dict | None:
        """The conditions' competing flows (link.cross), started once the link is set and checked
        (they would load the check): steady and carrying their share before the first trial, or
        LinkError. None without --cross."""
        from .link.cross import Flows, parse
        spec = parse(cond.cross) if cond.cross else None
        if spec is None:
            return None
        rate = cond.rate_down_bps if spec.direction == "down" else cond.rate_up_bps
        self.cross = Flows(self.plan, spec, rate)
        return self.cross.start()

    def stop_cross(self) -> None:
        if self.cross is not None:
            self.cross.stop()
            self.cross = None

    def set_cc(self, cc: str) -> None:
        """The TCP congestion control of the trials to come, on the hosts' routes (a connection takes
        its route's when it opens); read back: raises LinkError if a route says otherwise."""
        from .errors import LinkError
        if cc == self.cc_in_use():
            return
        self.server.set_quic_cc(cc)  # a server whose QUIC controller is chosen (quinnserve) runs it too
        for ns, argv in self.plan.route_commands(cc):
            cmd.run(argv, ns=ns)
        for ns in (self.plan.client_ns, self.plan.server_ns):
            routes = [x for x in cmd.run(["ip", "route", "show"], ns=ns).stdout.splitlines() if x.strip()]
            wrong = [x for x in routes if f"congctl {cc}" not in x]
            if not routes or wrong:
                raise LinkError(f"congestion control {cc}: {ns}'s route reads back as '{(wrong or ['none'])[0]}'")
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
            raise ValueError(f"server {name!r}: this testbed serves with {', '.join(self.server_names)}")
        self.server.stop()
        self.server = self.servers[name]
        self.server.set_quic_cc(self._cc)
        self.server.start()
        self.topology.write_state(server_pid=self.server.proc.pid)

    # -- trials --------------------------------------------------------------------------------
    def broken(self) -> str | None:
        """What of the testbed has died (Caddy, the link emulator, the browser worker), or None."""
        for part in (self.server, self.link, self.worker, self.name_server):
            reason = part.died_reason() if part is not None else None
            if reason:
                return reason
        return None

    def quiesce(self) -> int:
        """Before a trial: no process but the browser worker in the client namespace (the worker ends
        every trial's processes itself; this is the check that it did). Returns how many were killed;
        raises TestbedBroken if one would not die."""
        from . import procs
        from .errors import TestbedBroken
        keep = {self.worker.proc.pid} if self.worker and self.worker.proc else set()
        if keep and (self._prepared or self._kept):  # the next trial's browser, started early, or a kept one: the worker's
            # its start done first: a driver the worker was starting while the table below was read is not in it,
            # and was killed as a stray (a kept browser's first prepare failed so, 'chromedriver ... exited -9')
            self.worker.settle()
        listed = pids_in(self.plan.client_ns)  # before the table: every process listed is in it
        if keep and (self._prepared or self._kept):
            keep |= procs.descendants({p: row[0] for p, row in procs.table().items()}, self.worker.proc.pid)
        strays = [p for p in listed if p not in keep and procs.alive(p)]
        left = procs.kill_and_reap(strays) if strays else []
        if left:
            raise TestbedBroken(f"processes {left} in {self.plan.client_ns} would not die; no trial can run beside them")
        return len(strays)

    def url(self, page: Page, tag: str | None = None) -> str:
        """A page's URL (with its trial's tag: the server's log tells trials apart by it); a replayed
        recording's is the recorded URL itself, untagged (its scripts read their own address), a served
        folder's page its own (pages.PageKind.url)."""
        return page.page_kind.url(page, self.sites.root, tag)

    def _request(self, proto: str, page: Page, tag: str, capture_dir: Path | None, browser: str | None = None,
                 benchmark: bool = False) -> dict:
        """The worker's request for one load (its timeout and await_s filled in by load). A repeat
        visit (pages.VISITS) loads the page first in the same browser, which keeps its own log (the
        capture's, if the trial captures one) for the repeat's evidence of resumption and 0-RTT.
        What the browser cannot do yet (browsers.base.Browser.features) is refused by name."""
        from .errors import UsageError
        profile = self.plan.run_dir / "profiles" / tag
        visit = page.visit
        repeat = visit != "first"
        b = browsers.get(browser or self.browser_name)
        if b.name not in self.browser_names:  # what the campaign's metadata says ran is all that runs
            raise ValueError(f"a {b.label} load on a testbed of {', '.join(self.browser_names)}")
        captured = capture_dir is not None and "netlog" in self.capture.kinds  # the browser's own log, kept
        written = self._browser_writes(capture_dir, tag)  # where the browser writes its capture files
        netlog = written / b.netlog_file if captured else Path(f"{profile}.visit-{b.netlog_file}")
        visiting = b.repeat_launch(str(netlog), captured) if repeat else {}
        origins = self.origins_for(page, proto)
        own = page.page_kind.own_origins(page)
        if "origins" not in b.features and own is not None:
            origins = origins[:own]  # a generated page's own (Chromium maps every origin)
        wanted = browsers.asked(repeat, len({ip for _, ip in origins}) > 1, protocols.get(proto).per_origin,
                                self.capture.kinds if capture_dir is not None else (),
                                recordings=page.page_kind.served_as_recorded,
                                discovery=self.discovery != "forced")
        if b.unsupported(wanted):
            raise UsageError(f"--browser {b.name}: not supported yet with {', '.join(b.unsupported(wanted))} "
                             f"(supported with {b.name}: {', '.join(sorted(b.features)) or 'one-origin loads only'})")
        if b.resolves_by_hosts_file and self.discovery == "forced" and (self.replays or self.server.statics):
            from .topology import write_client_hosts  # this load's hosts at this load's addresses (origins_for)
            write_client_hosts(self.plan, origins)
        launch = b.launch(proto, origins, self.server.cert.spki_sha256_b64, str(profile), spoke=self.spoke(),
                          extra=tuple(visiting.get("args", ())), discovery=self.discovery)
        args = launch["args"] + (b.capture_args(self.capture.kinds, written, FILENAMES) if capture_dir else [])
        env = {**visiting.get("env", {}),
               **(b.capture_env(self.capture.kinds, written, FILENAMES) if capture_dir else {})}
        if self.sandbox_ids:
            args = b.sandboxed(args)
        launch["prefs"] = {**launch.get("prefs", {}), **self._name_prefs(b)}
        req = {"url": self.url(page, tag), "profile_dir": str(profile), **launch,
               "args": args, **({"env": env} if env else {}), "cpu_interval_s": self.capture.cpu_interval_s, "cpu_series": "cpu" in self.capture.kinds,
               "visual": "visual" in self.capture.kinds,
               "paint_quiet_ms": paint_quiet_ms(self.conditions.rtt_ms if self.conditions else 0.0,
                                                page.page_kind.draws_after_load),
               **({"sandbox": True} if self.sandbox_ids else {}),
               # through this process's root: `ip netns exec` mounts the namespace's own /sys over the
               # worker's, which hides the control groups' file systems from it
               **(self._budget_request if self.budget is not None else {})}
        if self.screen is not None:  # a device's screen (device.profiles), in place of the fixed window
            emu = b.emulation(self.screen)
            req["args"] = [a for a in args if not a.startswith(WINDOW_ARGS)] + emu["args"]
            req["prefs"] = {**req.get("prefs", {}), **emu["prefs"]}
            if emu.get("mobile_emulation"):
                req["mobile_emulation"] = emu["mobile_emulation"]
        if any(a.startswith(("--log-net-log", "--ssl-key-log-file")) for a in args) or env:
            req["graceful_quit"] = True  # the browser completes these files as it closes
        if self.browser_start == "kept" and b.keeps_contexts and not req.get("graceful_quit") and not browsers.kept_refusals(
                repeat, self.capture.kinds if capture_dir is not None else (), screen=self.screen is not None,
                benchmark=benchmark):
            req["keep"] = True  # a kept browser's fresh context (trial.worker); else a fresh browser
            self._kept = True
        if capture_dir is not None and "har" in self.capture.kinds:
            req["har_path"] = str(capture_dir / FILENAMES["har"])
            req["har_bodies"] = self.record_bodies
        if capture_dir is not None and "visual" in self.capture.kinds:
            req["frames_path"] = str(capture_dir / FILENAMES["visual"])
        if repeat:
            rtt_s = (self.conditions.rtt_ms if self.conditions else 0.0) / 1000.0
            req["visit"] = {"cache": "kept" if visit == "repeat-warm" else "cleared", "settle_s": 0.5 + 3 * rtt_s,
                            "netlog": str(netlog), "keep_netlog": captured}
        return req

    def _name_prefs(self, b) -> dict:
        """Prefs that resolve the browser's names where its launch does not (RemoteTestbed's); none here:
        the client namespace's hosts file answers (topology.write_client_etc)."""
        return {}

    def prepare(self, proto: str, page: Page, browser: str | None = None) -> None:
        """Start the browser of the next load now (its own fresh profile and flags, idle on
        about:blank), while the last trial is judged and stored; load() takes it when it asks for
        the same protocol and page without a capture folder, and any other load ends it first."""
        tag = uuid.uuid4().hex[:16]
        browser = browser or self.browser_name
        self._prepared = (proto, page, tag, browser)
        self.worker.prepare(self._request(proto, page, tag, None, browser))

    def discard_prepared(self) -> None:
        """End the browser started early and every kept one (the worker's discard)."""
        if self._prepared or self._kept:
            self._prepared, self._kept = None, False
            self.worker.discard()

    def load(self, proto: str, page: Page, timeout_s: float, capture_dir: Path | None = None,
             await_s: float = 0.0, gate: bool = False,
             settle_s: float = 0.0, browser: str | None = None, expect: tuple[str, ...] = (),
             benchmark: tuple[int, ...] | None = None) -> tuple[dict, str]:
        """One fresh-browser load; returns the worker's answer and the URI the server should log.
        With a capture folder, Chromium writes its key log and net-log there (as the settings ask).
        await_s > 0: then wait that long for the page's own figures (a bulk page's download).
        gate: the idle gate runs between the browser's launch and the navigation (answer's gate).
        settle_s: the browser stays up that long after its figures are read (pages.PageKind.settle_s).
        browser: which of the testbed's browsers loads it (None: the first). expect: objects ("host/path")
        whose Resource Timing entries the worker waits for before reading them (a replay's fetches,
        which do not hold the load event). benchmark: (warm-ups, runs, work...) of the device calibration's
        benchmark, run in the page after its figures (the answer's "benchmark")."""
        browser = browser or self.browser_name
        ready, self._prepared = self._prepared, None
        same = ready and (ready[0], ready[1], ready[3]) == (proto, page, browser) and capture_dir is None
        tag = ready[2] if same else uuid.uuid4().hex[:16]
        uri = page.page_kind.log_uri(page, self.sites.root, tag)
        recording = page.page_kind.recording_name(page)
        if recording and len(self.replays) > 1:  # the replay serves this recording's responses alone
            self._activate(recording)
        req = {**self._request(proto, page, tag, capture_dir, browser, benchmark=bool(benchmark)),
               "timeout_s": timeout_s, "await_s": await_s,
               "gate": gate, "mark": self.link.mark_signal(), "settle_s": settle_s,
               **({"expect_resources": list(expect)} if expect else {}),
               **({"benchmark": list(benchmark)} if benchmark else {})}
        before = self.cpu_group.read() if self.budget is not None else None
        drops0 = self._rcvbuf_errors() if before is not None else None
        try:
            ans = self.worker.load(req, timeout_s + await_s + settle_s + WORKER_ALLOWANCE_S
                                   + (RESOURCE_WAIT_MS / 1000 if expect else 0.0))
        finally:
            if capture_dir is not None and self.sandbox_ids:  # the browser's capture files, the results' now
                sandbox.move_staged(self._browser_writes(capture_dir, tag), capture_dir)
        if before is not None:  # the group's own counters over the whole trial (its launch included)
            used = self.cpu_group.read().since(before)
            ans["cpu_group"] = {"budget_cores": self.budget.budget_cores, "applied_cores": self.budget.applied_cores,
                                "cores": self.budget.cores, "cpus": self.budget_cpus,
                                "quota_us": self.budget.quota_us, "period_us": self.budget.period_us,
                                "usage_ms": used.usage_ns / 1e6, "periods": used.periods,
                                "throttled_periods": used.throttled, "throttled_ms": used.throttled_ns / 1e6}
            drops1 = self._rcvbuf_errors()
            ans["cpu_group"]["udp_rcvbuf_errors"] = drops1 - drops0 if None not in (drops0, drops1) else None
        if self.device is not None:
            ans["device"] = self.device.as_dict()
        return ans, uri

    def _rcvbuf_errors(self) -> int | None:
        """UDP datagrams the browser's namespace dropped for a full receive buffer so far (the worker
        lives there: its /proc/PID/net is the namespace's)."""
        from .device.budget import rcvbuf_errors
        try:
            return rcvbuf_errors(Path(f"/proc/{self.worker.proc.pid}/net/snmp").read_text())
        except (OSError, AttributeError):
            return None

    @property
    def visitor(self) -> tuple:
        """The visitor the next load is for: (budget_cores, cores, memory_bytes, screen, device), as
        set_visitor takes it; (None, 1, None, None, None): the machine's whole CPU, the fixed window."""
        return ((self.budget.budget_cores, self.budget.cores) if self.budget is not None else (None, 1)) + (
            self.memory_bytes, self.screen, self.device)

    def set_visitor(self, budget_cores: float | None, cores: int = 1, memory_bytes: int | None = None,
                    screen=None, device=None) -> None:
        """The visitor's device from the next load on (plt_bench.device): its CPU budget and memory cap
        (set_budget), the screen the browser emulates (a device.profiles.Screen; None: the fixed
        window; a browser started for another screen is let go), and a named device's calibration
        (device.calibrate.Calibration), which each answer then carries."""
        if (budget_cores, cores, memory_bytes, screen, device) != self.visitor:
            self.discard_prepared()  # a browser started (or kept) for another visitor is let go
        self.set_budget(budget_cores, cores, memory_bytes)
        self.screen, self.device = screen, device

    def set_budget(self, budget_cores: float | None, cores: int = 1, memory_bytes: int | None = None) -> "Quota | None":
        """The browser's CPU budget for the loads that follow (issue 45; device.budget): budget_cores
        of a core on each of `cores` CPUs (this process's highest-numbered ones), every process the
        trial's WebDriver starts inside the testbed's group, nothing else. None: no budget (the
        WebDriver outside any group of ours). Returns the Quota applied. The group is made on the
        first budget and removed with the testbed; CgroupError where the machine has no CPU controller."""
        from .cpu import own_cpus
        from .device import budget as budget_mod
        from .device.cgroup import Group
        from .errors import UsageError
        if budget_cores is None:
            self.budget, self.memory_bytes = None, None
            return None
        mine = own_cpus()
        if cores > len(mine):
            raise UsageError(f"--cores: {cores}; this process may run on {len(mine)} CPU(s) ({', '.join(map(str, mine))})")
        quota = budget_mod.quota_for(budget_cores, cores)
        if self.cpu_group is None:
            group = Group(self.plan.prefix)
            self._stack.callback(group.remove)
            self.cpu_group = group.make()
            # through this process's root: `ip netns exec` mounts the namespace's own /sys over the
            # worker's, which hides the control groups' file systems from it
            root = f"/proc/{os.getpid()}/root"
            usage, kind = group.usage_file()
            self._budget_request = {"cgroup_procs": [f"{root}{f / 'cgroup.procs'}" for f in group.folders.values()],
                                    "cpu_loop": {"usage": [f"{root}{usage}", kind]}}
        self.budget_cpus = list(mine[-cores:])
        self.cpu_group.set(quota, self.budget_cpus, memory_bytes)
        self.budget = quota
        self.memory_bytes = memory_bytes
        return quota

    def _browser_writes(self, capture_dir: Path | None, tag: str) -> Path | None:
        """Where the browser writes a trial's capture files: the capture folder, or under the sandbox
        a staging folder of the browsers' user (made here), which load() moves into it."""
        if capture_dir is None or not self.sandbox_ids:
            return capture_dir
        stage = self.sandbox_home / "captures" / tag
        if not stage.is_dir():
            sandbox.give(self.sandbox_ids, stage.parent, stage)
        return stage

    def ecn_watches(self) -> list:
        """The TCP sockets of a trial under --ecn, watched in the browser's and the server's
        namespaces (link.ecn.SocketWatch, not started)."""
        from .link.ecn import SocketWatch
        return [SocketWatch(self.plan.client_ns, "browser"), SocketWatch(self.plan.server_ns, "server")]

    def remote_cpu(self) -> dict:
        """CPU readings of processes on another machine ({role: (user_s, system_s)}); none here."""
        return {}

    def verify_args(self) -> dict:
        """What the link check needs beyond the plan (an iperf3 server elsewhere, the jitter's legs, the path)."""
        return {"timing": self.timing, "link": self.link}

    # -- metadata ------------------------------------------------------------------------------
    def describe(self, check: dict, pages) -> dict:
        """Where everything of a testbed that stays up is ('plt-bench up'), with "text" for people."""
        info = {**self.plan.describe(), "url": self.url(Page(5000)), "pages": [f"/{p.html_name}" for p in pages],
                "spki_sha256": self.server.cert.spki_sha256_b64, "link": check, "run_dir": str(self.plan.run_dir),
                "chromium_flags": f"--host-resolver-rules='MAP {HOST} {self.plan.server_ip}' "
                                  f"--ignore-certificate-errors-spki-list={self.server.cert.spki_sha256_b64}"}
        n, addr = info["namespaces"], info["addresses"]
        info["text"] = "\n".join([
            f"testbed {info['prefix']} is up ({check['conditions']}, {check['backend']})",
            f"  client  {n['client']:<14} {addr['client']}",
            f"  router  {n['router']:<14} {addr['router_client_side']} | {addr['router_server_side']}",
            f"  server  {n['server']:<14} {addr['server']}  (Caddy: h3 on UDP 443, HTTP/1.1+TLS on TCP 443)",
            f"  url     {info['url']}",
            f"  try     ip netns exec {n['client']} ping -c 3 {addr['server']}",
            f"          ip netns exec {n['client']} curl -sk --resolve {HOST}:443:{addr['server']} "
            f"-o /dev/null -w '%{{http_version}} %{{time_total}}\\n' {info['url']}",
            f"  down    plt-bench down --testbed {info['prefix'][2:]}"])
        return info

    def metadata(self) -> dict:
        m = machine()
        several = [self.servers.get(n) or self.server for n in self.server_names]
        infos = {x.meta_key: x.info() for x in several}
        m.update({
            **self.link.describe(),
            "link_requested": self.link_name,
            "netem_available": link_mod.netem_available(),
            "congestion_control": self.cc,
            # which servers served the pages (plt_bench.servers), comma-separated, each one's build and
            # version under its own keys (Caddy's 'caddy' and 'caddy_version', as every campaign before the
            # second server had them); the QUIC controller each ran ('quinn: bbr; caddy: ...' for several)
            "http_server": ",".join(x.name for x in several),
            **infos,
            **{f"{k}_version": v.get("version") for k, v in infos.items()},
            "quic_cc": several[0].quic_cc() if len(several) == 1 else "; ".join(f"{x.name}: {x.quic_cc()}" for x in several),
            "quic_buffer_warning": self.server.quic_buffer_warning(),
            # how the browsers found the origins and h3 (dns.MODES; forced for every campaign before it)
            "discovery": self.discovery,
            # kept: a browser kept across trials, a fresh context each (fresh for every campaign before it)
            "browser_start": self.browser_start,
            # on: the browsers as the unprivileged user, their sandbox on (key metadata since 2026-11-27, but
            # written only since 2026-11-29: store schema 28 fills it in for the campaigns between)
            "browser_sandbox": self.browser_sandbox,
            "chromium": self.worker_versions.get("chromium"),
            "chromedriver": self.worker_versions.get("chromedriver"),
            # which load the pages (plt_bench.browsers), comma-separated; the versions of each but Chromium below
            "browser": ",".join(self.browser_names),
            **{k: v for b in self.browser_names if b != browsers.DEFAULT for k, v in browsers.get(b).versions().items()},
            **(self.browser.metadata() if self.browser else {}),
            "topology": self.plan.describe(),
            "testbed_up_utc": utc_now(),
            "capture": list(self.capture.kinds),
            "cpu_interval_s": self.capture.cpu_interval_s,
            "timing": dataclasses.asdict(self.timing),
        })
        return m


class RemoteTestbed(Testbed):
    """Two machines: this host is the client, the server runs `plt-bench serve` (remote.py).

    Everything is checked before anything is changed: the options, the route to the server, the
    interface, the control channel's token and the certificate's pin."""

    def __init__(self, server, iface: str | None, conditions: list[Conditions], link: str = "auto",
                 index: int | None = None, capture: Settings | None = None, cc: str = "cubic", with_browser: bool = True,
                 browser_binary: str | None = None, browser_start: str = browsers.START_DEFAULT,
                 server_names: Sequence[str] = (servers.DEFAULT,), browser_names: Sequence[str] = (browsers.DEFAULT,),
                 discovery: str = "forced", replays: Sequence[str] = (), sites_root: Path | None = None,
                 served_hosts: Sequence[str] = ()):
        """replays: recordings of sites_root (this machine's page sets) the server machine replays: sent
        to it once (by content hash), each recorded host on a replay address of its own there.
        served_hosts: the hosts of the campaign's url: pages, folders the server machine serves as they
        are (serve --serve HOST=DIR)."""
        super().__init__(Path("."), cc=cc, link=link, index=index, capture=capture, with_browser=with_browser,
                         conditions=conditions, browser_binary=browser_binary, browser_start=browser_start,
                         server_names=server_names, browser_names=browser_names, discovery=discovery,
                         replays=replays)
        self.ref, self.iface_opt, self.sites_root = server, iface, sites_root
        self.served_hosts = tuple(dict.fromkeys(served_hosts))
        self.recordings_sent: dict[str, int] = {}  # recording -> bytes sent to the server machine (it lacked them)
        self._plan = None
        self.hello: dict = {}
        self.control = None

    @property
    def plan(self):
        return self._plan

    def check(self) -> None:
        """Every refusal that needs no change on the system (usage errors exit 2 before anything is made)."""
        if self.iface_opt is not None:
            link_mod.host.require_iface(self.iface_opt)
        link_mod.canonical(self.link_name)
        if link_mod.canonical(self.link_name) == "linkem":
            link_mod.HostLinkem.check_conditions(self.all_conditions)

    def _choose_link(self) -> link_mod.Choice:
        """netem on the server (the seed's placement) if it can and may shape; else linkem on this
        machine's ingress (link.resolve). Refusals name what to change."""
        choice = link_mod.resolve("two-machines", self.link_name, self.all_conditions, link_mod.Capabilities(
            netem=bool(self.hello.get("netem")), server_may_shape=bool(self.hello.get("may_shape"))))
        if choice.backend == "linkem":
            link_mod.HostLinkem.check_conditions(self.all_conditions)
        return choice

    def open(self) -> None:
        from .control import Control
        from .errors import UsageError
        from .remote import RemoteNameServer, RemotePlan, RemoteQlogs, RemoteServer, RemoteSites, missing_servers
        hostnet = link_mod.host
        cmd.require_root()
        self.check()
        if self.with_browser and browsers.CHROMIUM_NAME in self.browser_names:
            self.browser = drivers.resolve(self.browser_binary)
        addr = self.ref.addr
        route = hostnet.route_to(addr)
        if not route.get("dev"):
            raise UsageError(f"--server-machine: this machine has no route to {addr}")
        if route.get("type") == "local" or route.get("dev") == "lo":
            raise UsageError(f"--server-machine: {addr} is an address of this machine; expected the server's, on the other "
                             "machine")
        iface = hostnet.pick_iface(route["dev"], self.iface_opt, f"traffic to the server {addr}")
        self.control = Control(addr, self.ref.control_port, self.ref.token)
        self._stack.callback(self.control.close)
        self.hello = self.control.call("hello")
        if self.hello.get("pin") != self.ref.pin:
            raise UsageError(f"--server-pin: the server's certificate has pin {self.hello.get('pin')}, not "
                             f"{self.ref.pin}; copy the pin the running 'plt-bench serve' printed")
        if "qlog" in self.capture.kinds and not self.hello.get("qlog"):
            raise UsageError(f"--capture: qlog is written on the server machine, and the one at {addr} writes none; "
                             "restart it with 'plt-bench serve --qlog' (or capture cpu, pcap, keylog, netlog)")
        lacking = missing_servers(self.server_names, self.hello)
        if lacking:
            have = list(self.hello.get("servers") or [servers.DEFAULT])
            raise UsageError(f"--http-server: the server machine at {addr} serves with {','.join(have)}, not "
                             f"{', '.join(lacking)}; restart it with 'plt-bench serve --http-server "
                             f"{','.join([*have, *lacking])}'")
        statics = self._served_on_server(addr)
        replay = self._replay_on_server(addr) if self.replays else None
        net = (replay or {}).get("net") or (self.hello.get("replay_net") if statics else None)
        choice = self._choose_link()
        shaping = choice.backend == "linkem" and any(c.rate_down_bps or c.rate_up_bps or c.impaired for c in self.all_conditions)
        if shaping and self.iface_opt is None:
            raise UsageError(f"--iface: the link is shaped on this machine's interface towards {addr}, and the testbed "
                             f"shapes only an interface you name: add --iface {route['dev']}")
        if shaping:
            hostnet.check_untouched(iface)
        self.topology = Topology.allocate(self.cc, self.index)
        self._stack.callback(self.topology.down)
        self._plan = RemotePlan(self.topology.plan.index, iface, addr, route.get("prefsrc") or "", replay_net=net)
        self.topology.write_state(role="client", server=addr, iface=iface)
        if net:
            self._route_replay(net, addr, iface)
        self.link = link_mod.make(choice, plan=self._plan, control=self.control,
                                  record=lambda host: self.topology.write_state(host=host))
        self.link.traces = self.traces
        self._stack.callback(self.link.close)
        self.link.open()
        self.timing = link_mod.verify.measure_timing(self._plan, user_latency=self.link.ping_user_latency)
        self.servers = {n: RemoteServer(self.control, self.hello, n) for n in self.server_names}
        serving = self.hello.get("serving", servers.DEFAULT)
        self.server = self.servers.get(serving) or RemoteServer(self.control, self.hello, serving)
        if replay:
            from .servers import Replay
            replayed = Replay(self.sites_root, tuple(self.replays), [tuple(o) for o in replay["origins"]],
                              own=tuple(tuple(o) for o in replay["own"]))
            for one in {*self.servers.values(), self.server}:
                one.replay = replayed
        for one in {*self.servers.values(), self.server}:
            one.statics = statics
        self.use_server(self.server_names[0])  # another client may have left it serving with another
        self.sites = RemoteSites(self.hello.get("pages") or {}, addr, self.sites_root)
        if "qlog" in self.capture.kinds:
            self.qlogs = RemoteQlogs(self.control)
        self.pcap_filter = self._plan.run_dir / "pcap.filter"  # in the run folder: `clean` finds a stray tcpdump
        self.pcap_filter.write_text(f"host {addr}" + (f" or net {net}" if net else "") + "\n")
        own_files, etc_files = [], None
        if self.discovery != "forced":  # the server machine's name server, asked over the link by the worker alone
            if "names" not in (self.hello.get("features") or ()):
                raise UsageError(f"--discovery: the server machine at {addr} runs a plt-bench without a name server "
                                 "for it; update plt-bench there and restart 'plt-bench serve'")
            self.name_server = RemoteNameServer(self.control, self.discovery)
            self._stack.callback(self.name_server.stop)
            self.name_server.start()
            etc_files = self._plan.client_etc(addr)
        elif net:  # a browser that resolves by a hosts file (Firefox) finds each recorded or served host there
            etc_files = self._plan.client_etc()
        if etc_files:
            etc = self._plan.run_dir / "etc"
            etc.mkdir(mode=0o755)
            for name, text in etc_files.items():
                (etc / name).write_text(text)
                own_files.append((str(etc / name), f"/etc/{name}"))
        if self.with_browser:
            self.worker = BrowserWorker(None, self._plan.run_dir / "browser-worker.log", self.browser)
            self.worker.own_files = own_files
            self._sandbox_worker()
            self._stack.callback(self.worker.stop)
            self.worker_versions = self.worker.start().get("versions", {})

    def remote_cpu(self) -> dict:
        return self.server.cpu()

    def _served_on_server(self, addr: str) -> list:
        """The folders the server machine serves as they are (serve --serve) that the campaign's url: pages
        load, each host at its address there (servers.Static, the folder being the server's); UsageError
        naming the serve option where it serves a host not."""
        from .errors import UsageError
        from .servers import Static
        served = {h: ip for h, ip in self.hello.get("served") or ()}
        lacking = [h for h in self.served_hosts if h not in served]
        if lacking:
            raise UsageError(f"--size: the server machine at {addr} serves no folder as {', '.join(lacking)}; restart "
                             f"it with 'plt-bench serve --serve {lacking[0]}=DIR' (the folder on that machine)")
        origins = [(h, served[h]) for h in self.served_hosts]
        return [Static(Path("(the server machine's)"), origins)] if origins else []

    def _replay_on_server(self, addr: str) -> dict:
        """The campaign's recordings replayed by the server machine: each it lacks sent first (by
        content hash, in parts; verified there before it is written), then the replay started. Its
        answer: the replay's net and each recorded host's address there (and as recorded)."""
        from .errors import UsageError
        from .pages import archive
        from .remote import replay_parts
        if "replay" not in (self.hello.get("features") or ()):
            raise UsageError(f"--size: the server machine at {addr} runs a plt-bench that takes no recording from a "
                             "client; update plt-bench there and restart 'plt-bench serve'")
        hashes = {n: archive.identity(n, self.sites_root) for n in self.replays}
        for name in self.control.call("replay_missing", recordings=hashes)["missing"]:
            packed = archive.pack(name, self.sites_root)
            parts = replay_parts(packed.to_bytes())
            for i, part in enumerate(parts):
                self.control.call("replay_put", timeout_s=120, name=name, sha256=packed.sha256, part=i,
                                  parts=len(parts), data=part)
            self.recordings_sent[name] = packed.size_bytes
        return self.control.call("replay_start", timeout_s=180, names=list(self.replays))

    def _route_replay(self, net: str, addr: str, iface: str) -> None:
        """This machine's way to the server machine's replay addresses: a route of `net` through its
        address, recorded before it is made (clean removes it after a kill), removed at the end."""
        from .errors import UsageError
        hostnet = link_mod.host
        held = cmd.run(["ip", "route", "show", net], check=False).stdout.strip()
        if held:
            raise UsageError(f"--server-machine: this machine routes {net} already ({held}); the server machine's replay "
                             "needs it: another campaign against a server machine with the same testbed index may "
                             "hold it (plt-bench clean, or serve with another --testbed)")
        record = {"netns": hostnet.netns_id(), "routes": [[net, "via", addr, "dev", iface]]}
        self.topology.write_state(replay=record)
        self._stack.callback(hostnet.undo, record)
        cmd.run(["ip", "route", "add", net, "via", addr, "dev", iface])

    def _activate(self, recording: str) -> None:
        self.control.call("replay_active", name=recording)

    def _name_prefs(self, b) -> dict:
        """Every name to the server machine's address, for a browser that resolves by a hosts file
        (Firefox): this machine's own is the user's, never touched."""
        own_hosts = self.replays or self.server.statics  # in the worker's own hosts file, each at its address
        return b.one_address(self._plan.server_ip) if b.resolves_by_hosts_file and not own_hosts else {}

    def cc_in_use(self) -> str:
        """The server's own default (it sends the pages; a real host's sysctls are left alone)."""
        return (self.hello.get("sysctl") or {}).get("net.ipv4.tcp_congestion_control") or "unknown"

    def set_cc(self, cc: str) -> None:
        """Nothing to switch on two machines: the server's default applies (the campaign refuses a
        list of congestion controls there)."""

    def use_server(self, name: str) -> None:
        """The server machine's server of the trials to come (its serve switches: the one serving
        stops, the other starts with the same certificate)."""
        if name == self.server.name:
            return
        if name not in self.servers:
            raise ValueError(f"server {name!r}: this testbed serves with {', '.join(self.server_names)}")
        self.control.call("use_server", timeout_s=60, name=name)
        self.server = self.servers[name]

    def quiesce(self) -> int:
        """The browser runs in this machine's own namespace among the user's processes: the worker
        ends every trial's processes (its descendants and whatever names the trial's profile)."""
        return 0

    def verify_args(self) -> dict:
        from .remote import RemoteIperf
        return {"iperf": RemoteIperf(self.control), "legs": self.link.jitter_legs,
                "user_latency": self.link.ping_user_latency, "timing": self.timing}

    def metadata(self) -> dict:
        m = super().metadata()
        sysctl = self.hello.get("sysctl") or {}
        m.update({
            "mode": "two machines",
            # the sender's algorithm is the server's; the testbed leaves real hosts' sysctls alone
            "congestion_control": (sysctl.get("net.ipv4.tcp_congestion_control") or "unknown"),
            "congestion_control_requested": self.cc,
            # the server machine (its name in a store before 2026-11-28: "server")
            "server_machine": {k: self.hello.get(k) for k in ("host", "kernel", "cpu_count", "loadavg", "plt_bench",
                                                      "git_commit", "iface", "sysctl")},
            **({"recordings_sent": dict(self.recordings_sent)} if self.recordings_sent else {}),
        })
        return m
