"""Two machines: this host is the client, the server machine runs `plt-bench serve` (remote.py).

The same composition as the embedded testbed (testbed.embedded), built from the same settings
record, with the server machine's parts in place of the namespaces': its servers, its name server
and its replay through the control channel, the link shaped on the server (netem) or on this
machine's interface (linkem), the browser worker in this machine's own namespace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .. import cmd, link as link_mod, servers
from ..control import Control
from ..device.visitor import VisitorGroup
from ..errors import UsageError
from ..link import host as hostnet
from ..pages import archive
from ..remote import (RemoteIperf, RemoteNameServer, RemotePlan, RemoteQlogs, RemoteServer, RemoteSites, missing_servers,
                      replay_parts)
from ..topology import Topology
from .embedded import Testbed
from .setup import Setup


class RemoteTestbed(Testbed):
    """Two machines: this host is the client, the server runs `plt-bench serve` (remote.py).

    Everything is checked before anything is changed: the options, the route to the server, the
    interface, the control channel's token and the certificate's pin."""

    def __init__(self, setup: Setup, machine, iface: str | None, served_hosts: Sequence[str] = ()):
        """setup: as the embedded testbed's; its replays, recordings of its sites_dir (this machine's
        page sets) the server machine replays: sent to it once (by content hash), each recorded host on
        a replay address of its own there. machine: the server machine (remote.ServerRef: its address,
        its certificate's pin, its control channel's port and token). iface: the interface towards it
        that may be shaped (--iface). served_hosts: the hosts of the campaign's url: pages, folders the
        server machine serves as they are (serve --folder HOST=DIR)."""
        super().__init__(setup)
        self.machine, self.iface_opt, self.sites_root = machine, iface, setup.sites_dir
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
        if link_mod.canonical(self.setup.link) == "linkem":
            link_mod.HostLinkem.check_conditions(self.setup.conditions)

    def _choose_link(self) -> link_mod.Choice:
        """netem on the server (the seed's placement) if it can and may shape; else linkem on this
        machine's ingress (link.resolve). Refusals name what to change."""
        choice = link_mod.resolve("two-machines", self.setup.link, self.setup.conditions, link_mod.Capabilities(
            netem=bool(self.hello.get("netem")), server_may_shape=bool(self.hello.get("may_shape"))))
        if choice.backend == "linkem":
            link_mod.HostLinkem.check_conditions(self.setup.conditions)
        return choice

    def open(self) -> None:
        s = self.setup
        cmd.require_root()
        self.check()
        self._resolve_browser()
        addr = self.machine.addr
        route = hostnet.route_to(addr)
        if not route.get("dev"):
            raise UsageError(f"--server-machine: this machine has no route to {addr}")
        if route.get("type") == "local" or route.get("dev") == "lo":
            raise UsageError(f"--server-machine: {addr} is an address of this machine; expected the server's, on the other "
                             "machine")
        iface = hostnet.pick_iface(route["dev"], self.iface_opt, f"traffic to the server {addr}")
        self.control = Control(addr, self.machine.control_port, self.machine.token)
        self._stack.callback(self.control.close)
        self.hello = self.control.call("hello")
        if self.hello.get("pin") != self.machine.pin:
            raise UsageError(f"--server-pin: the server's certificate has pin {self.hello.get('pin')}, not "
                             f"{self.machine.pin}; copy the pin the running 'plt-bench serve' printed")
        if "qlog" in self.capture.kinds and not self.hello.get("qlog"):
            raise UsageError(f"--capture: qlog is written on the server machine, and the one at {addr} writes none; "
                             "restart it with 'plt-bench serve --qlog' (or capture cpu, pcap, keylog, netlog)")
        lacking = missing_servers(s.server_names, self.hello)
        if lacking:
            have = list(self.hello.get("servers") or [servers.DEFAULT])
            raise UsageError(f"--http-server: the server machine at {addr} serves with {','.join(have)}, not "
                             f"{', '.join(lacking)}; restart it with 'plt-bench serve --http-server "
                             f"{','.join([*have, *lacking])}'")
        statics = self._served_on_server(addr)
        replay = self._replay_on_server(addr) if s.replays else None
        net = (replay or {}).get("net") or (self.hello.get("replay_net") if statics else None)
        choice = self._choose_link()
        shaping = choice.backend == "linkem" and any(c.rate_down_bps or c.rate_up_bps or c.impaired for c in s.conditions)
        if shaping and self.iface_opt is None:
            raise UsageError(f"--iface: the link is shaped on this machine's interface towards {addr}, and the testbed "
                             f"shapes only an interface you name: add --iface {route['dev']}")
        if shaping:
            hostnet.check_untouched(iface)
        self.topology = Topology.allocate(s.cc, s.index)
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
        self.visitor_group = VisitorGroup(self._plan.prefix, self._stack.callback)
        self.servers = {n: RemoteServer(self.control, self.hello, n) for n in s.server_names}
        serving = self.hello.get("serving", servers.DEFAULT)
        self.server = self.servers.get(serving) or RemoteServer(self.control, self.hello, serving)
        if replay:
            replayed = servers.Replay(self.sites_root, s.replays, [tuple(o) for o in replay["origins"]],
                              own=tuple(tuple(o) for o in replay["own"]))
            for one in {*self.servers.values(), self.server}:
                one.replay = replayed
        for one in {*self.servers.values(), self.server}:
            one.statics = statics
        # every name to the server machine's address, for a browser that resolves by a hosts file (Firefox):
        # this machine's own is the user's, never touched; a replay's or served folder's hosts are in the
        # worker's own hosts file instead, each at its address
        self.one_address = None if s.replays or statics else self._plan.server_ip
        self.use_server(s.server_names[0])  # another client may have left it serving with another
        self.sites = RemoteSites(self.hello.get("pages") or {}, addr, self.sites_root)
        if "qlog" in self.capture.kinds:
            self.qlogs = RemoteQlogs(self.control)
        self.pcap_filter = self._plan.run_dir / "pcap.filter"  # in the run folder: `clean` finds a stray tcpdump
        self.pcap_filter.write_text(f"host {addr}" + (f" or net {net}" if net else "") + "\n")
        own_files, etc_files = [], None
        if s.discovery != "forced":  # the server machine's name server, asked over the link by the worker alone
            if "names" not in (self.hello.get("features") or ()):
                raise UsageError(f"--discovery: the server machine at {addr} runs a plt-bench without a name server "
                                 "for it; update plt-bench there and restart 'plt-bench serve'")
            self.name_server = RemoteNameServer(self.control, s.discovery)
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
        self._start_worker(None, own_files)

    def remote_cpu(self) -> dict:
        return self.server.cpu()

    def _served_on_server(self, addr: str) -> list:
        """The folders the server machine serves as they are (serve --folder) that the campaign's url: pages
        load, each host at its address there (servers.Static, the folder being the server's); UsageError
        naming the serve option where it serves a host not."""
        served = {h: ip for h, ip in self.hello.get("served") or ()}
        lacking = [h for h in self.served_hosts if h not in served]
        if lacking:
            raise UsageError(f"--size: the server machine at {addr} serves no folder as {', '.join(lacking)}; restart "
                             f"it with 'plt-bench serve --folder {lacking[0]}=DIR' (the folder on that machine)")
        origins = [(h, served[h]) for h in self.served_hosts]
        return [servers.Static(Path("(the server machine's)"), origins)] if origins else []

    def _replay_on_server(self, addr: str) -> dict:
        """The campaign's recordings replayed by the server machine: each it lacks sent first (by
        content hash, in parts; verified there before it is written), then the replay started. Its
        answer: the replay's net and each recorded host's address there (and as recorded)."""
        if "replay" not in (self.hello.get("features") or ()):
            raise UsageError(f"--size: the server machine at {addr} runs a plt-bench that takes no recording from a "
                             "client; update plt-bench there and restart 'plt-bench serve'")
        hashes = {n: archive.identity(n, self.sites_root) for n in self.setup.replays}
        for name in self.control.call("replay_missing", recordings=hashes)["missing"]:
            packed = archive.pack(name, self.sites_root)
            parts = replay_parts(packed.to_bytes())
            for i, part in enumerate(parts):
                self.control.call("replay_put", timeout_s=120, name=name, sha256=packed.sha256, part=i,
                                  parts=len(parts), data=part)
            self.recordings_sent[name] = packed.size_bytes
        return self.control.call("replay_start", timeout_s=180, names=list(self.setup.replays))

    def _route_replay(self, net: str, addr: str, iface: str) -> None:
        """This machine's way to the server machine's replay addresses: a route of `net` through its
        address, recorded before it is made (clean removes it after a kill), removed at the end."""
        held = cmd.run(["ip", "route", "show", net], check=False).stdout.strip()
        if held:
            raise UsageError(f"--server-machine: this machine routes {net} already ({held}); the server machine's replay "
                             "needs it: another campaign against a server machine with the same testbed index may "
                             "hold it (plt-bench clean, or serve with another --testbed)")
        record = {"netns": hostnet.netns_id(), "routes": [[net, "via", addr, "dev", iface]]}
        self.topology.write_state(replay=record)
        self._stack.callback(hostnet.undo, record)
        cmd.run(["ip", "route", "add", net, "via", addr, "dev", iface])

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
            raise ValueError(f"server {name!r}: this testbed serves with {', '.join(self.setup.server_names)}")
        self.control.call("use_server", timeout_s=60, name=name)
        self.server = self.servers[name]

    def quiesce(self) -> int:
        """The browser runs in this machine's own namespace among the user's processes: the worker
        ends every trial's processes (its descendants and whatever names the trial's profile)."""
        return 0

    def verify_args(self) -> dict:
        return {"iperf": RemoteIperf(self.control), "legs": self.link.jitter_legs,
                "user_latency": self.link.ping_user_latency, "timing": self.timing}

    def metadata(self) -> dict:
        m = super().metadata()
        sysctl = self.hello.get("sysctl") or {}
        m.update({
            "mode": "two machines",
            # the sender's algorithm is the server's; the testbed leaves real hosts' sysctls alone
            "congestion_control": (sysctl.get("net.ipv4.tcp_congestion_control") or "unknown"),
            "congestion_control_requested": self.setup.cc,
            # the server machine (its name in a store before 2026-11-28: "server")
            "server_machine": {k: self.hello.get(k) for k in ("host", "kernel", "cpu_count", "loadavg", "plt_bench",
                                                      "git_commit", "iface", "sysctl")},
            **({"recordings_sent": dict(self.recordings_sent)} if self.recordings_sent else {}),
        })
        return m
