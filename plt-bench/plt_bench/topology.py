"""The embedded testbed: three network namespaces, client - router - server, joined by veths.

Every name carries one prefix, pb<N>, so two testbeds never collide and cleanup touches only
what is ours. Addresses come from the benchmarking range 198.18.0.0/15 (RFC 2544):
client 198.18.N.2, router 198.18.N.1 | 198.19.N.1, server 198.19.N.2, and the server's other
origins (a many-origin page's: pages.origin_host) 198.19.N.11 to 198.19.N.25, one each, and a
replayed recording's origins 198.19.N.64 to 198.19.N.95 (Plan.replay_addresses) and again, each
over the protocol it was recorded with alone, 198.19.N.160 to 198.19.N.191 (Plan.as_recorded_addresses),
and folders served as they are, 198.19.N.100 to 198.19.N.107 (Plan.static_addresses).

Nothing is changed in the root namespace: the veths are created directly inside the
namespaces, and TCP congestion control is set per route (a namespace may not switch its
default to a restricted algorithm such as bbr, but a route's congctl may name any).

Names: the client namespace has its own hosts file and resolv.conf (/etc/netns/pbN-client/, which
`ip netns exec` mounts over /etc's for every process it starts there): the server's origins by
name, each on its own address, and no name server but the namespace's own loopback (nothing
listens there: any other name fails at once, and no lookup leaves the testbed). Chromium resolves
inside itself (--host-resolver-rules); Firefox and any other program of the client ask the system.
A testbed whose browsers discover HTTP/3 (dns.py) has a name server of its own in the server
namespace instead: the hosts file then names no origin and resolv.conf names that server.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

from . import cmd
from .cpu import own_cpus
from .errors import LinkError, TopologyError, UsageError
from .pages import HOST
from .procs import pids_in

REPLAY_FIRST = 64  # the last octet of a replayed recording's first origin address
AS_RECORDED_FIRST = 160  # ... and of its first origin's address over its recorded protocol alone
STATIC_FIRST, STATIC_MAX = 100, 8  # the addresses of folders served as they are (record --folder)


def testbed_index(text: str) -> int:
    """--testbed's value: a whole number from 0 to MAX_INDEX (argparse type; pure)."""
    import argparse
    t = text.strip()
    n = int(t) if t.isascii() and t.isdigit() else -1  # ASCII digits only ("５" is not an index)
    if not 0 <= n <= MAX_INDEX:
        raise argparse.ArgumentTypeError(f"'{text}' is not a testbed index; expected a whole number from 0 to {MAX_INDEX}")
    return n


PREFIX_RE = re.compile(r"^pb(\d{1,3})$")
NS_RE = re.compile(r"^(pb\d{1,3})-(client|router|server|xclient|xserver)$")
PROBE_RE = re.compile(r"^pbprobe-(\d+)$")  # link.netem_available's scratch namespace
RUN_DIR = Path("/run/plt-bench")
MAX_INDEX = 255
# Socket buffer ceilings for TCP in the hosts, so one flow is not capped below 1 Gbit/s at high BDP.
TCP_MEM_MAX = 64 << 20


@dataclasses.dataclass(frozen=True)
class Plan:
    """Names and addresses of one testbed; pure data, so its commands can be tested without root."""

    index: int
    cc: str = "cubic"

    def __post_init__(self):
        if not 0 <= self.index <= MAX_INDEX:
            raise UsageError(f"--testbed: {self.index} is out of range; expected 0 to {MAX_INDEX}")

    @property
    def prefix(self) -> str:
        return f"pb{self.index}"

    @property
    def client_ns(self) -> str:
        return f"{self.prefix}-client"

    @property
    def router_ns(self) -> str:
        return f"{self.prefix}-router"

    @property
    def server_ns(self) -> str:
        return f"{self.prefix}-server"

    @property
    def namespaces(self) -> tuple[str, str, str]:
        return (self.client_ns, self.router_ns, self.server_ns)

    @property
    def hosts_path(self) -> Path:
        """The client namespace's own hosts file (`ip netns exec` mounts it over /etc/hosts)."""
        return NETNS_ETC / self.client_ns / "hosts"

    def client_etc(self, name_server: str | None = None) -> dict[str, str]:
        """The client namespace's own /etc files (client_etc)."""
        return client_etc(self.prefix, self.origins, name_server)

    # interfaces: client's, router's towards client, router's towards server, server's
    @property
    def client_if(self) -> str:
        return f"{self.prefix}-c"

    @property
    def router_client_if(self) -> str:
        return f"{self.prefix}-rc"

    @property
    def router_server_if(self) -> str:
        return f"{self.prefix}-rs"

    @property
    def server_if(self) -> str:
        return f"{self.prefix}-s"

    @property
    def client_ip(self) -> str:
        return f"198.18.{self.index}.2"

    @property
    def router_client_ip(self) -> str:
        return f"198.18.{self.index}.1"

    @property
    def router_server_ip(self) -> str:
        return f"198.19.{self.index}.1"

    @property
    def server_ip(self) -> str:
        return f"198.19.{self.index}.2"

    @property
    def origins(self) -> list[tuple[str, str]]:
        """Every origin the server serves, (host name, address): the test host on server_ip, and a
        many-origin page's others (pages.origin_host(k)) on 198.19.N.(10 + k), each its own."""
        from .pages import MAX_ORIGINS, origin_host
        return [(origin_host(0), self.server_ip)] + [(origin_host(k), f"198.19.{self.index}.{10 + k}")
                                                     for k in range(1, MAX_ORIGINS)]

    @property
    def replay_addresses(self) -> list[str]:
        """The addresses of a replayed recording's origins (plt_bench.archive): 198.19.N.64 onwards, one
        per recorded origin (archive.MAX_ORIGINS), apart from the generated pages' origins."""
        from .pages.archive import MAX_ORIGINS
        return [f"198.19.{self.index}.{REPLAY_FIRST + k}" for k in range(MAX_ORIGINS)]

    @property
    def as_recorded_addresses(self) -> list[str]:
        """The addresses of a replayed recording's origins each over the protocol it was recorded with
        alone (--proto as-recorded): 198.19.N.160 onwards."""
        from .pages.archive import MAX_ORIGINS
        return [f"198.19.{self.index}.{AS_RECORDED_FIRST + k}" for k in range(MAX_ORIGINS)]

    def address_commands(self, addresses: list[str]) -> list[tuple[str | None, list[str]]]:
        """More addresses of the server's (origins): the generated pages' with the testbed, a replay's
        and served folders' (replay_addresses, static_addresses) when a testbed serves them."""
        return [(self.server_ns, ["ip", "addr", "add", f"{ip}/32", "dev", self.server_if]) for ip in addresses]

    @property
    def static_addresses(self) -> list[str]:
        """The addresses of folders served as they are (plt-bench record --folder): 198.19.N.100 onwards."""
        return [f"198.19.{self.index}.{STATIC_FIRST + k}" for k in range(STATIC_MAX)]

    # competing traffic's own hosts (link.cross), made when conditions ask for them: behind the same
    # router, on /30s of their own inside the client's and the server's ranges (more specific there)
    @property
    def xclient_ns(self) -> str:
        return f"{self.prefix}-xclient"

    @property
    def xserver_ns(self) -> str:
        return f"{self.prefix}-xserver"

    @property
    def xclient_if(self) -> str:
        return f"{self.prefix}-xc"

    @property
    def xserver_if(self) -> str:
        return f"{self.prefix}-xs"

    @property
    def router_xclient_if(self) -> str:
        return f"{self.prefix}-rxc"

    @property
    def router_xserver_if(self) -> str:
        return f"{self.prefix}-rxs"

    @property
    def xclient_ip(self) -> str:
        return f"198.18.{self.index}.250"

    @property
    def xserver_ip(self) -> str:
        return f"198.19.{self.index}.250"

    def cross_commands(self) -> list[tuple[str | None, list[str]]]:
        """(namespace, argv) that make the cross traffic's two hosts behind the router (pure): a veth
        each to the router, a /30 each (the router .249, the host .250), their default routes."""
        r = self.router_ns
        cmds: list[tuple[str | None, list[str]]] = [(None, ["ip", "netns", "add", ns])
                                                    for ns in (self.xclient_ns, self.xserver_ns)]
        for ns, dev, rdev, net in ((self.xclient_ns, self.xclient_if, self.router_xclient_if, "198.18"),
                                   (self.xserver_ns, self.xserver_if, self.router_xserver_if, "198.19")):
            cmds += [(None, ["ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", rdev, "netns", r]),
                     (ns, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]),
                     (ns, ["ip", "link", "set", "lo", "up"]),
                     (ns, offload_off_command(dev)), (r, offload_off_command(rdev)),
                     (ns, ["ip", "addr", "add", f"{net}.{self.index}.250/30", "dev", dev]),
                     (r, ["ip", "addr", "add", f"{net}.{self.index}.249/30", "dev", rdev]),
                     (ns, ["ip", "link", "set", dev, "up"]), (r, ["ip", "link", "set", rdev, "up"]),
                     (ns, ["ip", "route", "add", "default", "via", f"{net}.{self.index}.249"])]
        return cmds

    @property
    def down_if(self) -> str:
        """The router's egress towards the client: where the downlink is shaped."""
        return self.router_client_if

    @property
    def up_if(self) -> str:
        """The router's egress towards the server: where the uplink is shaped."""
        return self.router_server_if

    @property
    def down_ifb(self) -> str:
        """The router's IFB that is the downlink's one bottleneck under a kernel discipline (netem
        backend, --aqm): every packet leaving towards the client's side, the page's and the competing
        flows', is redirected through it (link.netem). In the router's namespace: gone with it."""
        return f"{self.prefix}-qd"

    @property
    def up_ifb(self) -> str:
        """The uplink's, as down_ifb."""
        return f"{self.prefix}-qu"

    @property
    def run_dir(self) -> Path:
        return RUN_DIR / self.prefix

    def ecn_commands(self, on: bool) -> list[tuple[str, list[str]]]:
        """(namespace, argv) that make the client's and the server's TCP ask for ECN (--ecn: 1) or only
        accept it when asked (2, the kernel's default), pure."""
        return [(ns, ["sysctl", "-qw", f"net.ipv4.tcp_ecn={1 if on else 2}"]) for ns in (self.client_ns, self.server_ns)]

    def create_commands(self) -> list[tuple[str | None, list[str]]]:
        """(namespace, argv) pairs that build the testbed, in order."""
        c, r, s = self.namespaces
        cmds: list[tuple[str | None, list[str]]] = [(None, ["ip", "netns", "add", ns]) for ns in self.namespaces]
        cmds += [
            (None, ["ip", "link", "add", self.client_if, "netns", c, "type", "veth",
                    "peer", "name", self.router_client_if, "netns", r]),
            (None, ["ip", "link", "add", self.server_if, "netns", s, "type", "veth",
                    "peer", "name", self.router_server_if, "netns", r]),
        ]
        for ns in self.namespaces:
            cmds.append((ns, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                              "net.ipv6.conf.default.disable_ipv6=1"]))
            cmds.append((ns, ["ip", "link", "set", "lo", "up"]))
        cmds.append((r, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]))
        for ns in (c, s):
            cmds.append((ns, ["sysctl", "-qw", f"net.ipv4.tcp_rmem=4096 131072 {TCP_MEM_MAX}",
                              f"net.ipv4.tcp_wmem=4096 16384 {TCP_MEM_MAX}"]))
        for ns, dev in ((c, self.client_if), (r, self.router_client_if), (r, self.router_server_if),
                        (s, self.server_if)):
            cmds.append((ns, offload_off_command(dev)))
            cmds.append((ns, rps_command(dev, own_cpus())))
        cmds += [
            (c, ["ip", "addr", "add", f"{self.client_ip}/24", "dev", self.client_if, "noprefixroute"]),
            (r, ["ip", "addr", "add", f"{self.router_client_ip}/24", "dev", self.router_client_if]),
            (r, ["ip", "addr", "add", f"{self.router_server_ip}/24", "dev", self.router_server_if]),
            (s, ["ip", "addr", "add", f"{self.server_ip}/24", "dev", self.server_if, "noprefixroute"]),
        ]
        cmds += self.address_commands([ip for _, ip in self.origins[1:]])
        for ns, dev in ((c, self.client_if), (r, self.router_client_if), (r, self.router_server_if),
                        (s, self.server_if)):
            cmds.append((ns, ["ip", "link", "set", dev, "up"]))
        return cmds + self.route_commands(self.cc, "add")

    def route_commands(self, cc: str, verb: str = "change") -> list[tuple[str | None, list[str]]]:
        """The hosts' routes with congestion control cc: made ("add") with the testbed, and changed
        ("change") between trials of a campaign with several (a connection takes its route's
        congctl when it opens; the namespace's own default may not be a restricted one like bbr)."""
        c, _, s = self.namespaces
        return [
            (c, ["ip", "route", verb, f"198.18.{self.index}.0/24", "dev", self.client_if, "congctl", cc]),
            (c, ["ip", "route", verb, "default", "via", self.router_client_ip, "dev", self.client_if, "congctl", cc]),
            (s, ["ip", "route", verb, f"198.19.{self.index}.0/24", "dev", self.server_if, "congctl", cc]),
            (s, ["ip", "route", verb, "default", "via", self.router_server_ip, "dev", self.server_if, "congctl", cc]),
        ]

    def describe(self) -> dict:
        return {
            "prefix": self.prefix,
            "namespaces": {"client": self.client_ns, "router": self.router_ns, "server": self.server_ns},
            "interfaces": {"client": self.client_if, "router_to_client": self.router_client_if,
                           "router_to_server": self.router_server_if, "server": self.server_if},
            "addresses": {"client": self.client_ip, "router_client_side": self.router_client_ip,
                          "router_server_side": self.router_server_ip, "server": self.server_ip},
            "congestion_control": self.cc,
        }


def up_info(plan: "Plan", check: dict, url: str, pages: list[str], spki: str) -> dict:
    """Where everything of a testbed that stays up is ('plt-bench up': the plan, its URL and pages, the
    certificate's pin, the link's check), with "text" for people (pure)."""
    info = {**plan.describe(), "url": url, "pages": pages, "spki_sha256": spki, "link": check,
            "run_dir": str(plan.run_dir),
            "chromium_flags": f"--host-resolver-rules='MAP {HOST} {plan.server_ip}' "
                              f"--ignore-certificate-errors-spki-list={spki}"}
    n, addr = info["namespaces"], info["addresses"]
    info["text"] = "\n".join([
        f"testbed {info['prefix']} is up ({check['conditions']}, {check['backend']})",
        f"  client  {n['client']:<14} {addr['client']}",
        f"  router  {n['router']:<14} {addr['router_client_side']} | {addr['router_server_side']}",
        f"  server  {n['server']:<14} {addr['server']}  (Caddy: h3 on UDP 443, HTTP/1.1+TLS on TCP 443)",
        f"  url     {url}",
        f"  try     ip netns exec {n['client']} ping -c 3 {addr['server']}",
        f"          ip netns exec {n['client']} curl -sk --resolve {HOST}:443:{addr['server']} "
        f"-o /dev/null -w '%{{http_version}} %{{time_total}}\\n' {url}",
        f"  down    plt-bench down --testbed {info['prefix'][2:]}"])
    return info


def set_route_cc(plan: "Plan", cc: str) -> None:
    """The hosts' routes with congestion control cc (Plan.route_commands), read back: LinkError where a
    route says otherwise."""
    cmd.run_each(plan.route_commands(cc))
    for ns in (plan.client_ns, plan.server_ns):
        routes = [x for x in cmd.run(["ip", "route", "show"], ns=ns).stdout.splitlines() if x.strip()]
        wrong = [x for x in routes if f"congctl {cc}" not in x]
        if not routes or wrong:
            raise LinkError(f"congestion control {cc}: {ns}'s route reads back as '{(wrong or ['none'])[0]}'")


def offload_off_command(dev: str) -> list[str]:
    """Segmentation offloads off: the qdisc must see wire-sized packets and a drop must cost one packet."""
    return ["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx-udp-segmentation", "off"]


def cpu_mask(cpus) -> str:
    """CPUs (numbers) as a sysfs cpumask: hex in comma-separated 32-bit groups."""
    digits = format(sum(1 << c for c in set(cpus)), "x")
    groups = [digits[max(0, i - 8):i] for i in range(len(digits), 0, -8)]
    return ",".join(reversed(groups))


def rps_command(dev: str, cpus) -> list[str]:
    """Receive packet steering on dev onto the given CPUs (the testbed's own: all of them, or a
    pinned cluster worker's set): each flow's packets are queued on one CPU (chosen by its
    hash). Without it a veth queues a packet on the backlog of whichever CPU sent it, and a link
    that releases packets from a timer (netem) or a thread that moves between CPUs delivers a flow
    out of order: seen in the netem VM, 5 of 2146 UDP packets (0.14% in a verify) with a constant
    50 ms delay and no jitter; with RPS, none in 10 runs. dev is one of our names (Plan), never input."""
    return ["sh", "-c", f"echo {cpu_mask(cpus)} > /sys/class/net/{dev}/queues/rx-0/rps_cpus"]


def existing_namespaces() -> list[str]:
    res = cmd.run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def our_prefixes() -> list[str]:
    """Prefixes of every testbed of ours on this machine: namespaces, run folders and the client's
    /etc files alike."""
    found = {m.group(1) for ns in existing_namespaces() if (m := NS_RE.match(ns))}
    if RUN_DIR.is_dir():
        found |= {p.name for p in RUN_DIR.iterdir() if PREFIX_RE.match(p.name)}
    if NETNS_ETC.is_dir():
        found |= {m.group(1) for p in NETNS_ETC.iterdir() if (m := NS_RE.match(p.name))}
    from .device.cgroup import testbed_prefixes_with_groups  # a browser's CPU budget (issue 45)
    found |= {p for p in testbed_prefixes_with_groups() if PREFIX_RE.match(p)}
    return sorted(found, key=lambda p: int(p[2:]))


NETNS_ETC = Path("/etc/netns")  # where `ip netns exec NS` finds the files it mounts over /etc's


def client_etc(prefix: str, origins: list[tuple[str, str]], name_server: str | None = None) -> dict[str, str]:
    """A client's own /etc files (pure): name -> text (see the module's words). name_server: the
    testbed's own name server's address (dns.NameServer: browsers that discover HTTP/3 look the
    origins up over the link), which then alone knows the origins."""
    if name_server:
        return {"hosts": "# plt-bench testbed " + prefix + ": the origins are the name server's\n"
                         "127.0.0.1 localhost\n",
                "resolv.conf": "# plt-bench testbed " + prefix + ": its own name server, on the server's "
                               f"address; no lookup leaves the testbed\nnameserver {name_server}\n"
                               "options timeout:1 attempts:1\n"}
    return {"hosts": client_hosts(prefix, origins),
            "resolv.conf": "# plt-bench testbed " + prefix + ": no lookup leaves the testbed\n"
                           "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"}


def client_hosts(prefix: str, origins: list[tuple[str, str]]) -> str:
    """The client namespace's hosts file naming these origins (host, address) (pure)."""
    return ("# plt-bench testbed " + prefix + ": the server's origins\n127.0.0.1 localhost\n"
            + "".join(f"{ip} {host}\n" for host, ip in origins))


def write_client_hosts(plan: "Plan", origins: list[tuple[str, str]]) -> None:
    """The client namespace's hosts file rewritten in place for one load's origins: a browser that
    resolves through it (Firefox) finds a recording's or a served folder's hosts at the addresses this
    load's are at. In place: `ip netns exec` (or, on two machines, cmd.with_own_files) bind-mounted
    the file over the worker's /etc/hosts, and the mount keeps the file it was made with."""
    path = plan.hosts_path
    text = client_hosts(plan.prefix, origins)
    with open(path, "r+") as f:
        if f.read() != text:
            f.seek(0)
            f.write(text)
            f.truncate()


def write_client_etc(plan: "Plan", name_server: str | None = None) -> None:
    """The client namespace's hosts and resolv.conf (Plan.client_etc), before any process starts there."""
    folder = NETNS_ETC / plan.client_ns
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in plan.client_etc(name_server).items():
        (folder / name).write_text(text)


def remove_client_etc(prefix: str) -> None:
    """A testbed's /etc/netns folders, and /etc/netns itself when nothing else is left in it."""
    if not NETNS_ETC.is_dir():
        return
    for p in NETNS_ETC.iterdir():
        m = NS_RE.match(p.name)
        if m and m.group(1) == prefix:
            shutil.rmtree(p, ignore_errors=True)
    try:
        NETNS_ETC.rmdir()
    except OSError:  # another testbed's, or the machine's own
        pass


def read_state(prefix: str) -> dict:
    try:
        return json.loads((RUN_DIR / prefix / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def owner_alive(state: dict) -> bool:
    """The run that owns the testbed still runs (a recycled PID is not it: its start time differs)."""
    from . import procs
    pid = state.get("owner_pid")
    return bool(pid) and procs.same_process(int(pid), state.get("owner_start"))


def in_use(index: int) -> str:
    """Whose testbed `index` is, and what to do about it, in words (the command it names works)."""
    st = read_state(f"pb{index}")
    if st.get("up"):
        return f"brought up by 'plt-bench up'; take it down with 'plt-bench down --testbed {index}', or choose another"
    if owner_alive(st):
        return f"a running plt-bench (PID {st['owner_pid']}) is using it; choose another --testbed"
    claim = worker_claims().get(f"pb{index}")
    if claim is not None and owner_alive(claim):
        return f"cluster worker PID {claim.get('owner_pid')} holds it; choose another --testbed"
    return "left by a run that is gone; 'plt-bench clean' removes it, or choose another"


def claim_path(index: int) -> Path:
    """Where a cluster worker on testbed `index` says which CPUs it holds (plt_bench.cluster.pin)."""
    return RUN_DIR / f"worker-pb{index}.json"


def worker_dir(index: int) -> Path:
    """A cluster worker's scratch folder (Dask's local directory): gone with the worker or its claim."""
    return RUN_DIR / f"worker-pb{index}.dask"


def worker_claims() -> dict[str, dict]:
    """Every cluster worker's CPU claim on this machine, live or not: {prefix: claim}."""
    out = {}
    for path in sorted(RUN_DIR.glob("worker-pb*.json")):
        try:
            out[path.name[len("worker-"):-len(".json")]] = json.loads(path.read_text())
        except (OSError, ValueError):
            out[path.name[len("worker-"):-len(".json")]] = {}
    return out


class Topology:
    """Creates and removes one testbed's namespaces; records what it made in its run folder."""

    def __init__(self, plan: Plan, persistent: bool = False):
        self.plan = plan
        self.persistent = persistent  # 'plt-bench up': owned by its process until it is up, then by nobody
        self.created = False

    @classmethod
    def allocate(cls, cc: str = "cubic", index: int | None = None, persistent: bool = False) -> "Topology":
        """Claim a free testbed index (or the one given) by creating its run folder atomically."""
        if index is not None:
            Plan(index, cc)  # an index out of range is refused before anything is made
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        taken = set(our_prefixes())
        candidates = [index] if index is not None else range(MAX_INDEX + 1)
        for i in candidates:
            plan = Plan(i, cc)
            if plan.prefix in taken:
                continue
            try:
                plan.run_dir.mkdir(mode=0o700)
            except FileExistsError:
                continue
            topo = cls(plan, persistent)
            topo.write_state()  # its owner at once: another run (or test) never takes it for a leak while it is made
            return topo
        remove_empty_run_dir()
        if index is not None:
            raise UsageError(f"--testbed: testbed {index} (pb{index}) exists already: {in_use(index)}")
        raise TopologyError("no free testbed index: run 'plt-bench clean'")

    def write_state(self, **extra) -> None:
        state = read_state(self.plan.prefix)
        state.update({"prefix": self.plan.prefix, "topology": self.plan.describe(),
                      "persistent": self.persistent, **extra})
        if not state.get("up"):  # until 'up' hands it over, the process making it owns it
            state["owner_pid"] = os.getpid()
            from . import procs
            state["owner_start"] = procs.start_time(os.getpid())
        path = self.plan.run_dir / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, path)

    def hand_over(self) -> None:
        """'plt-bench up' succeeded: the testbed now belongs to nobody but 'down' (clean keeps it)."""
        self.write_state(up=True)
        state = read_state(self.plan.prefix)
        state.pop("owner_pid", None)
        state.pop("owner_start", None)
        path = self.plan.run_dir / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, path)

    def create(self) -> None:
        self.write_state()
        self.created = True  # from here on, down() must run even if a step fails
        try:
            write_client_etc(self.plan)
        except OSError as e:
            raise TopologyError(f"creating testbed {self.plan.prefix}: {NETNS_ETC / self.plan.client_ns}: "
                                f"{e.strerror}") from None
        for ns, argv in self.plan.create_commands():
            try:
                cmd.run(argv, ns=ns)
            except cmd.CommandFailed as e:
                raise TopologyError(f"creating testbed {self.plan.prefix}: {e}") from None

    def down(self) -> None:
        teardown(self.plan.prefix)
        self.created = False


def kill_namespace_processes(namespaces: list[str]) -> None:
    """SIGTERM every process inside our namespaces, then SIGKILL what is left (twice: a dying
    parent may have started a child in between)."""
    for _ in range(2):
        pids = [p for ns in namespaces for p in pids_in(ns)]
        if not pids:
            return
        _kill(pids)


# The programs a testbed starts. A process is ours only if it runs one of them: a user's `tail -F
# /run/plt-bench/pb150/access.log` names our run folder too, and teardown once killed it.
OUR_PROGRAMS = frozenset({"chromium", "chrome", "chromedriver", "caddy", "quinnserve", "dnsmasq", "linkem", "tcpdump",
                          "iperf3", "firefox-esr", "firefox", "geckodriver",
                          "Xvfb", "ffmpeg"})  # Firefox's display and its recording (capture visual: browsers.display)
# our Python programs, by the module they run (and the names they ran as until 2026-11-28: a leftover of an earlier
# version is found by clean too)
OUR_MODULES = ("plt_bench.browsers.worker", "plt_bench.trial.worker", "plt_bench.pages.replayd", "plt_bench.servers.think",
               "plt_bench.browser_worker", "plt_bench.replayd")


def is_our_program(exe: str | None, cmdline: str) -> bool:
    """exe (the resolved /proc/PID/exe) is one of the testbed's programs, or the browser worker (pure)."""
    if not exe:
        return False
    name = os.path.basename(exe.removesuffix(" (deleted)"))
    if name in OUR_PROGRAMS:
        return True
    return name.startswith("python") and any(f" -m {m} " in f" {cmdline} " for m in OUR_MODULES)


def _our_processes(prefix: str | None = None) -> list[int]:
    """PIDs of the testbed's own programs (OUR_PROGRAMS, the browser worker) whose command line carries
    our signature, a path in a run folder of ours (Caddy's config, Chromium's profile, the worker's
    log), or that run in a namespace of ours. Finds them even outside a namespace."""
    from . import procs
    mark = f"{RUN_DIR}/{prefix}/" if prefix else f"{RUN_DIR}/"
    inodes = _ns_inodes(prefix) if prefix else set()
    found = []
    for pid in procs.all_pids():
        if pid == os.getpid():
            continue
        line = procs.cmdline(pid)
        if not line or not (mark in line or (inodes and procs.netns_of(pid) in inodes)):
            continue
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if is_our_program(exe, line):
            found.append(pid)
    return found


def _ns_inodes(prefix: str) -> set[str]:
    out = set()
    for role in ("client", "router", "server"):
        try:
            out.add(f"net:[{os.stat(f'/run/netns/{prefix}-{role}').st_ino}]")
        except OSError:
            pass
    return out


def entry_prefix(name: str) -> str:
    """The testbed a run folder's entry is of (pure): pbN itself, or a cluster worker's claim and Dask
    folder (worker-pbN.json, worker-pbN.dask)."""
    return name[len("worker-"):].split(".")[0] if name.startswith("worker-") else name


def leftovers(besides: frozenset[str] = frozenset()) -> dict:
    """Everything of plt-bench's still on this machine: namespaces, run folders, processes; besides:
    prefixes of testbeds to leave out (those that were already there, alive, when one looked before)."""
    ns = [n for n in existing_namespaces()
          if PROBE_RE.match(n) or ((m := NS_RE.match(n)) and m.group(1) not in besides)]
    dirs = sorted(p.name for p in RUN_DIR.iterdir() if p.name not in besides
                  and entry_prefix(p.name) not in besides) if RUN_DIR.is_dir() else []
    theirs = {pid for prefix in besides for pid in _our_processes(prefix)}
    return {"namespaces": ns, "run_dirs": dirs, "processes": [p for p in _our_processes() if p not in theirs]}


def leftovers_of(prefix: str) -> dict:
    """What is left of one testbed: its namespaces, its run folder's entries, its processes (another
    testbed's, pb2 beside pb249, are not its)."""
    ns = [n for n in existing_namespaces() if (m := NS_RE.match(n)) and m.group(1) == prefix]
    dirs = sorted(p.name for p in RUN_DIR.iterdir() if entry_prefix(p.name) == prefix) if RUN_DIR.is_dir() else []
    return {"namespaces": ns, "run_dirs": dirs, "processes": _our_processes(prefix)}


def _kill(pids: list[int], grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL what is left after grace_s (procs.kill_and_reap)."""
    from . import procs
    procs.kill_and_reap(pids, grace_s=grace_s, timeout_s=grace_s, until_reaped=True)


def take_down(index: int | None) -> list[str]:
    """'plt-bench down': testbed `index` (refused if a live run owns it), or every one 'up' left."""
    from .errors import UsageError
    if index is None:
        prefixes = [p for p in our_prefixes() if read_state(p).get("up")]
    else:
        prefixes = [f"pb{index}"]
        if prefixes[0] not in our_prefixes():
            raise UsageError(f"--testbed: there is no testbed {index}")
        st = read_state(prefixes[0])
        if owner_alive(st):
            raise UsageError(f"--testbed: testbed {index} belongs to a running plt-bench (pid {st['owner_pid']}); "
                             "stop that run instead")
    for p in prefixes:
        teardown(p)
    return prefixes


def teardown(prefix: str) -> list[str]:
    """Remove everything of one testbed: its processes, namespaces (and with them veths, qdiscs,
    iptables rules) and run folder. Safe to call on a half-built or already removed testbed."""
    if not PREFIX_RE.match(prefix):
        raise UsageError(f"'{prefix}' is not a plt-bench testbed prefix (pb0 to pb{MAX_INDEX})")
    namespaces = [ns for ns in existing_namespaces() if NS_RE.match(ns) and NS_RE.match(ns).group(1) == prefix]
    kill_namespace_processes(namespaces)
    _kill(_our_processes(prefix))
    from .link.host import undo  # two machines: the host's own interface, IFB, iptables chain
    undo(read_state(prefix).get("host") or {})
    undo(read_state(prefix).get("replay") or {})  # a replay's addresses (serve) or its route (a client)
    undo(read_state(prefix).get("statics") or {})  # a server machine's served folders' addresses
    removed = []
    for ns in namespaces:
        res = cmd.run(["ip", "netns", "del", ns], check=False)
        if res.returncode != 0 and ns in existing_namespaces():
            raise TopologyError(f"could not remove namespace {ns}: {res.stderr.strip()}")
        removed.append(ns)
    remove_client_etc(prefix)
    from .device.cgroup import remove_testbed_group
    remove_testbed_group(prefix)  # the browser's CPU budget's group (issue 45), its processes ended
    shutil.rmtree(RUN_DIR / prefix, ignore_errors=True)
    remove_empty_run_dir()
    return removed


def remove_empty_run_dir() -> None:
    """/run/plt-bench goes with the last thing in it."""
    try:
        RUN_DIR.rmdir()
    except OSError:  # not empty: another testbed's
        pass


def clean(force: bool = False, index: int | None = None) -> dict:
    """Remove every testbed of ours that is really abandoned: its owning run is gone, and it is not
    one that 'plt-bench up' brought up for the user ('down' removes those). force: all of them.
    index: testbed `index` alone (its namespaces, run folder, processes and worker claim), so that a
    user cleans up their own without touching a colleague's."""
    report = {"removed": [], "kept": [], "up": []}
    aimed = None if index is None else Plan(index, "cubic").prefix  # an index out of range is refused here
    for prefix in our_prefixes():
        if aimed is not None and prefix != aimed:
            continue
        state = read_state(prefix)
        if not force and state.get("up"):
            report["up"].append(prefix)
            continue
        if not force and owner_alive(state):
            report["kept"].append(prefix)
            continue
        teardown(prefix)
        report["removed"].append(prefix)
    for prefix, claim in worker_claims().items():  # a killed cluster worker's claim on its CPUs
        if aimed is not None and prefix != aimed:
            continue
        if force or not owner_alive(claim):
            shutil.rmtree(worker_dir(int(prefix[2:])), ignore_errors=True)
            claim_path(int(prefix[2:])).unlink(missing_ok=True)
            remove_empty_run_dir()
            report["removed"].append(f"worker-{prefix}.json")
    if aimed is not None:
        return report
    for ns in existing_namespaces():  # a netem probe whose process died mid-probe
        m = PROBE_RE.match(ns)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            cmd.run(["ip", "netns", "del", ns], check=False)
            report["removed"].append(ns)
    return report
