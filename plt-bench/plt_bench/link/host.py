"""Two machines: a host's real interface, and the changes the link makes to it.

The testbed changes only the interface the user named (--iface), and only for the test
traffic: packets to or from the server's address on the ports the testbed uses (443 for
the HTTP servers, 5201 for the link check's iperf3, 53 for the name server of --discovery) and ICMP (the link check's ping). SSH, the control
channel and everything else on the interface pass untouched.

Every change is recorded in the testbed's state file before it is made, so the end of a run
(normal, error, SIGINT, SIGTERM) and `plt-bench clean` after SIGKILL undo exactly what was
done and nothing else:
- an IFB named pbN-ifb (ours by name);
- the root qdisc of --iface: an htb with handle 5042: (removed only while that handle is ours;
  the testbed refuses an interface whose root qdisc someone configured);
- the ingress qdisc of --iface (the testbed refuses an interface that has one already);
- the iptables chain PLTB-pbN in the mangle table and the one jump to it from PREROUTING;
- GRO of --iface, set back to its previous value.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from pathlib import Path

from .. import cmd
from ..errors import UsageError
from .commands import HOST_ROOT_HANDLE as ROOT_HANDLE, ifb_commands, jump_rule
from .readback import parse_qdiscs

IFACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
_DEFAULT_ROOT_KINDS = ("noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo")


# -- validation -------------------------------------------------------------------------------------
def check_iface_name(name: str, option: str = "--iface") -> str:
    if not IFACE_RE.match(name or ""):
        raise UsageError(f"{option}: '{name}' is not an interface name; expected 1 to 15 letters, digits, '_', '.' "
                         "or '-', e.g. eth1 or enp3s0")
    return name


def parse_ipv4(text: str, option: str) -> str:
    try:
        a = ipaddress.IPv4Address(text)
    except ValueError:
        raise UsageError(f"{option}: '{text}' is not an IPv4 address; expected dotted quad, e.g. 10.0.0.1") from None
    if a.is_unspecified or a.is_multicast or a.is_loopback or a == ipaddress.IPv4Address("255.255.255.255"):
        raise UsageError(f"{option}: {text} cannot be a testbed host; expected the unicast address of an interface "
                         "that joins the two machines, e.g. 10.0.0.1")
    return str(a)


def iface_exists(name: str) -> bool:
    return Path("/sys/class/net", name).is_dir()


def require_iface(name: str, option: str = "--iface") -> str:
    check_iface_name(name, option)
    if not iface_exists(name):
        have = ", ".join(sorted(p.name for p in Path("/sys/class/net").iterdir())) or "none"
        raise UsageError(f"{option}: there is no interface '{name}' on this machine (it has: {have})")
    return name


def _ip_json(*args: str) -> list[dict]:
    res = cmd.run(["ip", "-j", *args], check=False)
    try:
        return json.loads(res.stdout or "[]")
    except ValueError:
        return []


def local_iface_of(addr: str) -> str | None:
    """The interface holding addr on this machine, if any."""
    for link in _ip_json("-4", "addr", "show"):
        for a in link.get("addr_info", []):
            if a.get("local") == addr:
                return link.get("ifname")
    return None


def route_to(addr: str) -> dict:
    """{'dev', 'prefsrc', 'gateway', 'type'} of the route this machine takes to addr."""
    routes = _ip_json("route", "get", addr)
    return routes[0] if routes else {}


def default_route_ifaces() -> set[str]:
    return {r.get("dev") for fam in ("-4", "-6") for r in _ip_json(fam, "route", "show", "default") if r.get("dev")}


def pick_iface(dev: str, iface_opt: str | None, peer_what: str) -> str:
    """The interface to use: dev carries the traffic (found from the routes). --iface must name it
    if given; without --iface the interface that carries the default route is refused."""
    if iface_opt is not None:
        require_iface(iface_opt)
        if iface_opt != dev:
            raise UsageError(f"--iface: {peer_what} goes through {dev}, not {iface_opt}; name --iface {dev} "
                             "or fix the routes")
        return dev
    if dev in default_route_ifaces():
        raise UsageError(f"--iface: {peer_what} goes through {dev}, which carries this machine's default route "
                         f"(your way in, perhaps); the testbed uses it only if you name it: --iface {dev}")
    return dev


def netns_id() -> str:
    """The identity of this process's network namespace (an inode), recorded with every change."""
    return os.readlink("/proc/self/ns/net")


def _netns_name_of(ident: str) -> str | None:
    """The name under /run/netns of a namespace by identity; None if it has none."""
    d = Path("/run/netns")
    if not d.is_dir():
        return None
    for p in d.iterdir():
        try:
            if f"net:[{os.stat(p).st_ino}]" == ident:
                return p.name
        except OSError:
            continue
    return None


def ifb_name(prefix: str) -> str:
    return f"{prefix}-ifb"


def chain_name(prefix: str) -> str:
    return f"PLTB-{prefix}"


# -- reading the interface --------------------------------------------------------------------------
def root_qdisc(iface: str, ns: str | None = None) -> dict | None:
    q = parse_qdiscs(cmd.run(["tc", "qdisc", "show", "dev", iface], ns=ns, check=False).stdout)
    return next((x for x in q if x["parent"] == "root"), None)


def has_ingress(iface: str, ns: str | None = None) -> bool:
    out = cmd.run(["tc", "qdisc", "show", "dev", iface], ns=ns, check=False).stdout
    return bool(re.search(r"^qdisc (ingress|clsact) ", out, re.M))


def check_untouched(iface: str) -> None:
    """Refuse an interface someone configured: we would overwrite their qdiscs."""
    root = root_qdisc(iface)
    if root and (root["kind"] not in _DEFAULT_ROOT_KINDS or root["handle"] not in ("0:", "")):
        raise UsageError(f"--iface: {iface} has a root qdisc someone set up ({root['kind']} {root['handle']}); the "
                         f"testbed would replace it. Remove it first (tc qdisc del dev {iface} root) or use another "
                         "interface")
    if has_ingress(iface):
        raise UsageError(f"--iface: {iface} has an ingress qdisc already; the testbed would replace it. Remove it "
                         f"first (tc qdisc del dev {iface} ingress) or use another interface")


def gro_state(iface: str) -> str | None:
    out = cmd.run(["ethtool", "-k", iface], check=False).stdout
    m = re.search(r"^generic-receive-offload: (on|off)", out, re.M)
    return m.group(1) if m else None


# -- preparing and clearing (both sides) -------------------------------------------------------------
def prepare(iface: str, ifb: str, note) -> None:
    """Ready iface for shaping: refuse a configured one, GRO off, our IFB up. `note(**changes)`
    records each change in the state file before it is made."""
    check_untouched(iface)
    gro = gro_state(iface)
    note(netns=netns_id(), iface=iface, gro=gro)
    if gro == "on":  # a GRO super-packet would pass the rate and a drop as one packet
        cmd.run(["ethtool", "-K", iface, "gro", "off"])
    note(ifb=ifb)
    cmd.run_all(ifb_commands(ifb))
    note(root=True, ingress=True)


def clear(iface: str, ifb: str) -> None:
    """Remove the shaping of one set of conditions (iface's ingress and our root, the IFB's root), keep the rest."""
    if has_ingress(iface):
        cmd.run(["tc", "qdisc", "del", "dev", iface, "ingress"], check=False)
    root = root_qdisc(iface)
    if root and root["handle"] == ROOT_HANDLE:
        cmd.run(["tc", "qdisc", "del", "dev", iface, "root"], check=False)
    cmd.run(["tc", "qdisc", "del", "dev", ifb, "root"], check=False)


# -- undoing ----------------------------------------------------------------------------------------
def undo(host: dict) -> list[str]:
    """Undo the changes recorded in a state file's 'host' entry; safe to repeat. Runs them in the
    namespace they were made in (found by identity); if that namespace is gone, so are they."""
    if not host:
        return []
    ns = None
    if host.get("netns") and host["netns"] != netns_id():
        ns = _netns_name_of(host["netns"])
        if ns is None:
            return []
    iface, done = host.get("iface"), []

    def run(argv):
        if cmd.run(argv, ns=ns, check=False).returncode == 0:
            done.append(" ".join(argv))
    if host.get("chain"):
        chain = host["chain"]
        while cmd.run(["iptables", "-w", "-t", "mangle", "-D", *jump_rule(iface, chain)], ns=ns,
                      check=False).returncode == 0:
            done.append(f"iptables -t mangle -D {' '.join(jump_rule(iface, chain))}")
        run(["iptables", "-w", "-t", "mangle", "-F", chain])
        run(["iptables", "-w", "-t", "mangle", "-X", chain])
    if iface and host.get("ingress"):
        run(["tc", "qdisc", "del", "dev", iface, "ingress"])
    if iface and host.get("root"):
        root = root_qdisc(iface, ns)
        if root and root["handle"] == ROOT_HANDLE:
            run(["tc", "qdisc", "del", "dev", iface, "root"])
    if host.get("ifb"):
        run(["ip", "link", "del", host["ifb"]])
    if iface and host.get("gro") == "on":
        run(["ethtool", "-K", iface, "gro", "on"])
    for route in host.get("routes") or ():  # a client's way to a server machine's replay addresses
        run(["ip", "route", "del", *route])
    for address in host.get("addresses") or ():  # a server machine's replay addresses (remote.replay_addresses)
        run(["ip", "addr", "del", address, "dev", host["addresses_dev"]])
    return done
