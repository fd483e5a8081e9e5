"""Pure builders of every command the link runs: tc (htb, pfifo, netem, IFB redirects, u32
filters), iptables (NFQUEUE), and tcconfig's own tcset/tcdel commands. Each returns argv lists
and changes nothing, so all of it is unit-tested without root.

One htb shape serves every placement: a root htb, one class at the rate (explicit quantum and a
0.5 ms burst: accurate from 1 Mbit to 1 Gbit) and one leaf under it, a pfifo queue or a netem
qdisc. Where the interface also carries other traffic (a real host), u32 filters put only the
test traffic into the class.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

from ..errors import UsageError
from .aqm import KERNEL_FIXED, PARAMS, Aqm, kernel_refusal

HTB_QUANTUM = 1514
UNSHAPED_HTB_BPS = 10 * 10**9  # the class's rate when only delay, jitter or loss is asked for
SHAPED_PORTS = (443, 5201, 53)  # the HTTP servers (TCP and UDP), iperf3 of the link check, the name server
# of a --discovery campaign (a lookup costs a round trip over the link, as a visitor's does)
HOST_ROOT_HANDLE = "5042:"  # "PB": the htb we put at the root of a real host's interface
QUEUE_DOWN, QUEUE_UP = 0, 1  # the router's NFQUEUE numbers (per network namespace)


def htb_burst_bytes(rate_bps: int) -> int:
    """htb's bucket: 0.5 ms at the rate, at least two full frames. tc's default (about one frame)
    loses every sending chance a late timer misses: measured here, TCP reached 0.90 of 1 Gbit with
    it, 0.999 with 64 KB."""
    return max(2 * 1514, rate_bps // 8 // 2000)


def pfifo_leaf(queue_pkts: int) -> list[str]:
    """The bottleneck queue of a rate-only direction."""
    return ["pfifo", "limit", str(queue_pkts)]


def netem_leaf(delay_ms: float, jitter_ms: float, dist: str, loss_pct: float, limit: int) -> list[str]:
    """A netem qdisc's arguments: one direction's delay, jitter (netem's default distribution is
    uniform; 'normal' names its table), loss and queue limit."""
    args = ["netem", "limit", str(limit), "delay", f"{round(delay_ms * 1000)}us"]
    if jitter_ms:
        args += [f"{round(jitter_ms * 1000)}us"] + (["distribution", "normal"] if dist == "normal" else [])
    if loss_pct:
        args += ["loss", f"{loss_pct:g}%"]
    return args


def htb_commands(dev: str, rate_bps: int | None, leaf: list[str], root: str = "1:",
                 default_class: bool = True, parent: str | None = None) -> list[list[str]]:
    """htb at dev's root (or under `parent`, a classful qdisc's class) with one class (rate, or
    unshaped) and `leaf` under it. default_class: everything goes through the class; otherwise only
    what a filter sends there (the rest passes)."""
    rate = rate_bps or UNSHAPED_HTB_BPS
    burst = f"{htb_burst_bytes(rate)}b"
    major = root.rstrip(":")
    where = ["parent", parent] if parent else ["root"]
    return [["tc", "qdisc", "add", "dev", dev, *where, "handle", root, "htb", *(["default", "1"] if default_class else [])],
            ["tc", "class", "add", "dev", dev, "parent", root, "classid", f"{major}:1", "htb", "rate", f"{rate}bit",
             "ceil", f"{rate}bit", "quantum", str(HTB_QUANTUM), "burst", burst, "cburst", burst],
            ["tc", "qdisc", "add", "dev", dev, "parent", f"{major}:1", "handle", f"{int(major, 16) + 1:x}:", *leaf]]


# -- a queue discipline beneath netem (link.aqm on the netem backend) -------------------------------
# netem's own queue under a discipline: the delay line only (every packet in flight for the one-way
# delay at up to 10 Gbit/s of small packets), never the bottleneck, which is the discipline's
NETEM_LINE_LIMIT = 100_000
AQM_ROOT, AQM_SHAPER, AQM_LEAF = "1:", "2:", "3:"  # netem at the root; htb its child (netem's class 1:1); the discipline


def aqm_leaf(a: Aqm, ecn: bool, limit_pkts: int) -> list[str]:
    """The kernel's qdisc for a discipline (link.aqm.Aqm): droptail is a pfifo of the
    buffer; codel, fq_codel and pie take the buffer as their limit, each parameter in tc's unit, and
    ECN said either way (the kernel's defaults differ: fq_codel marks, codel and pie drop). PIE's
    burst allowance is fixed at RFC 8033's 150 ms in the kernel: another is refused (UsageError)."""
    if (why := kernel_refusal(a)):
        raise UsageError(f"--aqm {a.text}: {why} (the netem backend); give it with --link linkem")
    if a.name == "droptail":
        return pfifo_leaf(limit_pkts)
    args = [a.name, "limit", str(limit_pkts)]
    for key, value in a.params:
        if (a.name, key) in KERNEL_FIXED:  # the kernel's own value, which it takes no parameter for
            continue
        unit = PARAMS[a.name][key][1]
        args += [key, f"{round(value * 1000)}us" if unit == "ms" else str(int(value))]
    return args + ["ecn" if ecn else "noecn"]


def netem_aqm_commands(dev: str, rate_bps: int, delay_ms: float, jitter_ms: float, dist: str, loss_pct: float,
                       aqm: Aqm, ecn: bool, limit_pkts: int) -> list[list[str]]:
    """One direction of the netem backend under a queue discipline: netem at the root (delay, jitter,
    loss; its queue only the delay line), an htb at the rate as its child, and the discipline under
    the htb's class. A packet leaves netem when its delay is over and then waits in the discipline's
    queue for the rate: the discipline measures the bottleneck's queue alone, never the propagation
    delay (netem under htb, tcconfig's shape, would put the delay inside the queue it judges)."""
    return ([["tc", "qdisc", "add", "dev", dev, "root", "handle", AQM_ROOT,
              *netem_leaf(delay_ms, jitter_ms, dist, loss_pct, NETEM_LINE_LIMIT)]]
            + htb_commands(dev, rate_bps, aqm_leaf(aqm, ecn, limit_pkts), root=AQM_SHAPER,
                           parent=AQM_ROOT.rstrip(":") + ":1"))


def qdisc_del_commands(dev: str) -> list[list[str]]:
    """Remove whatever qdisc is at dev's root (its children go with it) and any clsact (its redirects)."""
    return [["tc", "qdisc", "del", "dev", dev, "root"], ["tc", "qdisc", "del", "dev", dev, "clsact"]]


def egress_redirect_commands(devs: list[str], ifb: str) -> list[list[str]]:
    """Every IP packet leaving each of devs goes through the IFB's qdisc first (clsact's egress hook,
    u32 matching all: the kernel here has no matchall), then out of its own device: several egresses
    share one bottleneck. The IFB marks what it sends back, so nothing is redirected twice."""
    cmds = []
    for dev in devs:
        cmds += [["tc", "qdisc", "add", "dev", dev, "clsact"],
                 ["tc", "filter", "add", "dev", dev, "egress", "protocol", "ip", "prio", "1", "u32", "match", "u32",
                  "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb]]
    return cmds


# -- test traffic on a real host's interface ------------------------------------------------------
def _nets(peers) -> list[str]:
    """Peers as networks (pure): an address alone is its /32."""
    return [p if "/" in p else f"{p}/32" for p in ([peers] if isinstance(peers, str) else peers)]


def u32_matches(peers, peer_is: str, port_is: str | None = None) -> list[list[str]]:
    """u32 match lists for the test traffic: TCP and UDP on SHAPED_PORTS, and ICMP, to or from the
    peers (an address, or several addresses and networks: a server machine and its replay's net).
    peer_is 'src': packets from the peer, 'dst': packets to it; port_is: which port is the test
    port (default: the peer's, i.e. the peer is the server)."""
    port_is = port_is or ("sport" if peer_is == "src" else "dport")
    out = []
    for net in _nets(peers):
        for port in SHAPED_PORTS:
            for proto in (6, 17):
                out.append(["match", "ip", peer_is, net, "match", "ip", "protocol", str(proto), "0xff",
                            "match", "ip", port_is, str(port), "0xffff"])
        out.append(["match", "ip", peer_is, net, "match", "ip", "protocol", "1", "0xff"])
    return out


def classify_commands(dev: str, root: str, matches: list[list[str]]) -> list[list[str]]:
    """Filters that send the matched packets into the htb class root:1."""
    major = root.rstrip(":")
    return [["tc", "filter", "add", "dev", dev, "parent", root, "protocol", "ip", "prio", str(i + 1), "u32", *m,
             "flowid", f"{major}:1"] for i, m in enumerate(matches)]


def ingress_redirect_commands(iface: str, ifb: str, matches: list[list[str]]) -> list[list[str]]:
    """The matched packets arriving on iface go through the IFB's qdisc (its egress shapes them)."""
    cmds = [["tc", "qdisc", "add", "dev", iface, "handle", "ffff:", "ingress"]]
    for i, m in enumerate(matches):
        cmds.append(["tc", "filter", "add", "dev", iface, "parent", "ffff:", "protocol", "ip", "prio", str(i + 1),
                     "u32", *m, "action", "mirred", "egress", "redirect", "dev", ifb])
    return cmds


def ifb_commands(ifb: str) -> list[list[str]]:
    return [["ip", "link", "add", ifb, "type", "ifb"], ["ip", "link", "set", ifb, "up"]]


def host_egress_commands(iface: str, rate_bps: int | None, leaf: list[str], matches: list[list[str]]) -> list[list[str]]:
    """htb at a host interface's root (our handle): the matched test packets share one class at the
    rate with `leaf`; everything else (no filter matches) goes out directly, unshaped."""
    return (htb_commands(iface, rate_bps, leaf, HOST_ROOT_HANDLE, default_class=False)
            + classify_commands(iface, HOST_ROOT_HANDLE, matches))


def server_netem_commands(iface: str, ifb: str, client: str, cond) -> list[list[str]]:
    """The seed's placement, on the server: the downlink on iface's egress, the uplink on an IFB fed
    by iface's ingress, each an htb class (rate) with a netem leaf (RTT/2, jitter, loss) or a pfifo.
    Only the test traffic to and from the client is classified; the rest passes unshaped."""
    def leaf(rate, loss):
        if not cond.impaired:
            return pfifo_leaf(cond.queue_for(rate))
        return netem_leaf(cond.delay_ms, cond.jitter_ms, cond.jitter_dist, loss, cond.queue_for(rate))
    cmds = []
    if cond.rate_down_bps is not None or cond.impaired:
        cmds += host_egress_commands(iface, cond.rate_down_bps, leaf(cond.rate_down_bps, cond.loss_down_pct),
                                     u32_matches(client, "dst", "sport"))
    if cond.rate_up_bps is not None or cond.impaired:
        cmds += htb_commands(ifb, cond.rate_up_bps, leaf(cond.rate_up_bps, cond.loss_up_pct))
        cmds += ingress_redirect_commands(iface, ifb, u32_matches(client, "src", "dport"))
    return cmds


# -- iptables: packets to linkem's NFQUEUE --------------------------------------------------------
def router_nfqueue_rule(in_dev: str, queue: int) -> list[str]:
    """Forwarded packets arriving on in_dev go to linkem's queue. No --queue-bypass: without a
    listener the kernel drops them, so a dead emulator stops traffic instead of passing it."""
    return ["-i", in_dev, "-j", "NFQUEUE", "--queue-num", str(queue)]


# the mark linkem's verdict sets on a packet its queue discipline marked CE (linkem/src/main.rs CE_MARK)
CE_MARK = 0x4345


def ce_mark_rule() -> list[str]:
    """The router's rule (mangle POSTROUTING) that turns linkem's CE verdicts into the IP header's CE
    codepoint: the TOS byte's two ECN bits set to 11, the rest left as they were."""
    return ["-m", "mark", "--mark", hex(CE_MARK), "-j", "TOS", "--set-tos", "0x03/0x03"]


def host_nfqueue_rules(servers, queue: int) -> list[list[str]]:
    """Rules of our chain on a client host: test packets from the server (an address, or several
    addresses and networks) to linkem's queue (no --queue-bypass: without linkem they are dropped,
    never passed undelayed)."""
    rules = []
    for server in ([servers] if isinstance(servers, str) else servers):
        for port in SHAPED_PORTS:
            for proto in ("tcp", "udp"):
                rules.append(["-s", server, "-p", proto, "--sport", str(port), "-j", "NFQUEUE", "--queue-num",
                              str(queue)])
        rules.append(["-s", server, "-p", "icmp", "-j", "NFQUEUE", "--queue-num", str(queue)])
    return rules


def jump_rule(iface: str, chain: str) -> list[str]:
    return ["PREROUTING", "-i", iface, "-j", chain]


# -- tcconfig: the netem backend's router commands, as tcconfig itself builds them ----------------
def _tcconfig(main_module: str, argv: list[str]) -> list[list[str]]:
    """Run a tcconfig command in this process with --tc-command (it only prints the commands it
    would run) and return them as argv lists, the program by its name ('tc', 'ip'). In-process
    because importing tcconfig costs 0.8 s here and 48 s under the netem VM's emulation."""
    import importlib
    import subprocrunner
    mod = importlib.import_module(f"tcconfig.{main_module}")
    mod.verify_netem_module = lambda: None  # it asks lsmod, which fails where modules are built in
    dry = subprocrunner.SubprocessRunner.default_is_dry_run
    out, saved_argv = io.StringIO(), sys.argv
    sys.argv = [main_module, *argv, "--tc-command"]
    try:
        with contextlib.redirect_stdout(out):
            rc = mod.main()
    finally:
        sys.argv = saved_argv
        subprocrunner.SubprocessRunner.default_is_dry_run = dry
    if rc not in (0, None):
        raise ValueError(f"tcconfig's {main_module} refused {' '.join(argv)} (exit {rc})")
    cmds = [line.split() for line in out.getvalue().splitlines() if line.strip()]
    return [[os.path.basename(c[0]), *c[1:]] for c in cmds]


def tcset_commands(dev: str, rate_bps: int | None, delay_ms: float = 0.0, jitter_ms: float = 0.0,
                   jitter_dist: str = "uniform", loss_pct: float = 0.0, limit: int | None = None) -> list[list[str]]:
    """tcconfig's commands for one direction: htb at the rate with a netem leaf (delay, jitter,
    loss, limit). tcconfig always writes 'distribution normal'; for uniform jitter that token is
    dropped, which leaves netem's own default, uniform."""
    argv = [dev]
    if rate_bps is not None:
        argv += ["--rate", f"{rate_bps // 1000}Kbps", "--burst", str(htb_burst_bytes(rate_bps))]
    if delay_ms:
        argv += ["--delay", f"{round(delay_ms * 1000)}us"]
    if jitter_ms:
        argv += ["--delay-distro", f"{round(jitter_ms * 1000)}us"]
    if loss_pct:
        argv += ["--loss", f"{loss_pct:g}%"]
    if limit is not None:
        argv += ["--limit", str(limit)]
    cmds = _tcconfig("tcset", argv)
    if jitter_dist == "uniform":
        for c in cmds:
            if "netem" in c and "distribution" in c:
                i = c.index("distribution")
                del c[i:i + 2]
    return cmds


def tcdel_commands(dev: str) -> list[list[str]]:
    """tcconfig's commands that remove its shaping of dev (only those on dev: it also names an IFB
    it would have made for --direction incoming, which the router never uses)."""
    return [c for c in _tcconfig("tcdel", [dev, "--all"]) if dev in c]
