"""Reading the link back from the kernel, and judging it against what was asked.

Nothing a tool reports is trusted (tcset prints an error and exits 0 on a kernel without netem):
after every change the qdiscs, classes and filters are read back and compared with the
conditions; any difference is a LinkError. netem's distribution table is not reported by the
kernel (tc prints none), so a jitter's distribution is judged live, by the RTT spread (verify).
"""

from __future__ import annotations

import dataclasses
import re

from .. import cmd
from ..conditions import Conditions
from ..errors import LinkError
from .aqm import KERNEL_FIXED, PARAMS
from .commands import UNSHAPED_HTB_BPS

# -- parsing tc's output --------------------------------------------------------------------
_TC_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)bit$")
_TC_MULT = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_TC_TIME_RE = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_TC_TIME_MULT = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def parse_tc_rate(text: str) -> int:
    """tc's printed rate ('100Mbit', '123456Kbit', '8Kbit', '1Gbit') in bits per second."""
    m = _TC_RATE_RE.match(text)
    if not m:
        raise ValueError(f"not a tc rate: {text!r}")
    return round(float(m.group(1)) * _TC_MULT[m.group(2)])


def parse_tc_time_ms(text: str) -> float:
    m = _TC_TIME_RE.match(text)
    if not m:
        raise ValueError(f"not a tc time: {text!r}")
    return float(m.group(1)) * _TC_TIME_MULT[m.group(2)]


def parse_htb_classes(text: str) -> dict[str, dict]:
    """`tc class show` output -> {classid: {'rate_bps', 'ceil_bps', 'parent'}} for htb classes."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"class htb (\S+) (?:root|parent (\S+))\b.*?\brate (\S+) ceil (\S+)", line.strip())
        if m:
            out[m.group(1)] = {"parent": m.group(2), "rate_bps": parse_tc_rate(m.group(3)),
                               "ceil_bps": parse_tc_rate(m.group(4))}
    return out


AQM_KINDS = ("codel", "fq_codel", "pie")  # the disciplines whose parameters parse_qdiscs reads


def parse_qdiscs(text: str) -> list[dict]:
    """`tc qdisc show` output -> [{'kind', 'handle', 'parent', 'limit', 'default', 'delay_ms', 'jitter_ms', 'loss_pct'}]."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"qdisc (\S+) (\S+) (root|parent (\S+))", line)
        if not m:
            continue
        q = {"kind": m.group(1), "handle": m.group(2), "parent": "root" if m.group(3) == "root" else m.group(4)}
        if (lim := re.search(r"\blimit (\d+)p?\b", line)):
            q["limit"] = int(lim.group(1))
        if (d := re.search(r"\bdefault (0x[0-9a-f]+|\d+)", line)):
            q["default"] = int(d.group(1), 0)
        if q["kind"] == "netem":
            dm = re.search(r"\bdelay (\S+)(?:\s+(\d\S*))?", line)
            q["delay_ms"] = parse_tc_time_ms(dm.group(1)) if dm else 0.0
            q["jitter_ms"] = parse_tc_time_ms(dm.group(2)) if dm and dm.group(2) else 0.0
            lm = re.search(r"\bloss (\d+(?:\.\d+)?)%", line)
            q["loss_pct"] = float(lm.group(1)) if lm else 0.0
        if q["kind"] in AQM_KINDS:  # a queue discipline's parameters, as tc prints them (times in ms)
            for key in ("target", "interval", "tupdate"):
                if (t := re.search(rf"\b{key} (\S+)", line)):
                    q[f"{key}_ms"] = parse_tc_time_ms(t.group(1))
            for key in ("flows", "quantum"):
                if (n := re.search(rf"\b{key} (\d+)\b", line)):
                    q[key] = int(n.group(1))
            q["ecn"] = re.search(r"\becn\b", line) is not None
        out.append(q)
    return out


def parse_qdisc_stats(text: str) -> dict[str, dict]:
    """`tc -s qdisc show` output -> {handle: {'kind', 'sent_pkts', 'dropped', 'backlog_bytes',
    'backlog_pkts', 'ecn_mark', 'overlimit_drops'}}: each qdisc's counters (the last two where the
    discipline reports them: its drops of a full buffer, within 'dropped')."""
    out: dict[str, dict] = {}
    for block in re.split(r"(?m)^(?=qdisc )", text):
        m = re.match(r"qdisc (\S+) (\S+) ", block)
        if not m:
            continue
        q = {"kind": m.group(1)}
        for key, pattern in (("sent_pkts", r"\bSent \d+ bytes (\d+) pkt"), ("dropped", r"\bdropped (\d+)"),
                             ("backlog_bytes", r"\bbacklog (\d+)b"), ("backlog_pkts", r"\bbacklog \d+b (\d+)p"),
                             ("ecn_mark", r"\becn_mark (\d+)"),
                             ("overlimit_drops", r"\b(?:drop_overlimit|overlimit) (\d+)")):
            if (v := re.search(pattern, block)):
                q[key] = int(v.group(1))
        out[m.group(2)] = q
    return out



def parse_src_filters(text: str) -> list[tuple[str, str]]:
    """`tc filter show` output -> [(source address, flowid)] of u32 filters matching one IPv4 source
    (match HEX/ffffffff at 12)."""
    out = []
    for block in re.split(r"(?m)^(?=filter )", text):
        flow = re.search(r"\bflowid (\S+)", block)
        m = re.search(r"\bmatch ([0-9a-f]{8})/ffffffff at 12\b", block)
        if flow and m:
            n = int(m.group(1), 16)
            out.append((".".join(str(n >> s & 255) for s in (24, 16, 8, 0)), flow.group(1)))
    return out


def parse_filter_flowids(text: str) -> list[str]:
    return re.findall(r"\bflowid (\S+)", text)


@dataclasses.dataclass(frozen=True)
class DirectionState:
    """What the kernel says about one egress interface."""

    dev: str
    root_kind: str | None
    shaped_rate_bps: int | None
    shaped_ceil_bps: int | None
    leaf_kinds: tuple[str, ...]
    queue_pkts: int | None = None
    netem: dict | None = None


def read_direction(ns: str, dev: str) -> DirectionState:
    q = parse_qdiscs(cmd.run(["tc", "qdisc", "show", "dev", dev], ns=ns).stdout)
    root = next((x for x in q if x["parent"] == "root"), None)
    rate = ceil = None
    shaped_class = None
    if root and root["kind"] == "htb":
        classes = parse_htb_classes(cmd.run(["tc", "class", "show", "dev", dev], ns=ns).stdout)
        flows = parse_filter_flowids(cmd.run(["tc", "filter", "show", "dev", dev], ns=ns).stdout)
        if not flows and "default" in root:  # no filter: everything goes to the default class
            flows = [f"{root['handle']}{root['default']:x}"]
        flows = list(dict.fromkeys(flows))  # several filters may lead to one class
        shaped = [(f, classes[f]) for f in flows if f in classes]
        if len(shaped) == 1:
            shaped_class = shaped[0][0]
            rate, ceil = shaped[0][1]["rate_bps"], shaped[0][1]["ceil_bps"]
    leaves = [x for x in q if x["parent"] != "root"]
    leaf = next((x for x in leaves if x["parent"] == shaped_class), None)
    netem = next((x for x in q if x["kind"] == "netem"), None)
    return DirectionState(dev, root["kind"] if root else None, rate, ceil, tuple(x["kind"] for x in leaves),
                          leaf.get("limit") if leaf else None, netem)


def check_rate(state: DirectionState, want_bps: int | None, what: str) -> None:
    """Raise LinkError unless the interface is rate-limited exactly as asked (or not at all). Unshaped
    with delay, an htb class still carries the netem leaf: at UNSHAPED_HTB_BPS or more (tcconfig
    uses the device's speed, or 32 Gbit/s) it limits nothing and counts as unshaped."""
    if want_bps is None:
        if state.shaped_rate_bps is not None and state.shaped_rate_bps < UNSHAPED_HTB_BPS:
            raise LinkError(f"{what} ({state.dev}) should be unshaped but has a {state.root_kind} rate")
        return
    if state.root_kind != "htb" or state.shaped_rate_bps is None:
        raise LinkError(f"{what} ({state.dev}): no htb rate is in place although the tool reported success "
                        f"(root qdisc: {state.root_kind})")
    if state.shaped_rate_bps != want_bps or state.shaped_ceil_bps != want_bps:
        raise LinkError(f"{what} ({state.dev}): asked for {want_bps} bit/s, the kernel has rate "
                        f"{state.shaped_rate_bps} ceil {state.shaped_ceil_bps}")



def check_netem(state: DirectionState, delay_ms: float, jitter_ms: float, loss_pct: float, limit: int,
                what: str) -> None:
    n = state.netem
    if n is None:
        raise LinkError(f"{what} ({state.dev}): no netem qdisc is in place although tcset reported success; "
                        "this kernel may lack sch_netem: use --link linkem")
    for name, want, got, tol in (("delay", delay_ms, n["delay_ms"], 0.001), ("jitter", jitter_ms, n["jitter_ms"], 0.001),
                                 ("loss", loss_pct, n["loss_pct"], 1e-6)):
        if abs(want - got) > tol:
            raise LinkError(f"{what} ({state.dev}): asked for {name} {want:g}, netem has {got:g}")
    if n.get("limit") != limit:
        raise LinkError(f"{what} ({state.dev}): asked for a netem limit of {limit} packets, netem has {n.get('limit')}")


def check_queue(state: DirectionState, want_pkts: int, what: str) -> None:
    if state.queue_pkts != want_pkts:
        raise LinkError(f"{what} ({state.dev}): asked for a queue of {want_pkts} packets, the kernel has "
                        f"{state.queue_pkts}")


def check_managed(ns: str | None, dev: str, cond: Conditions, rate_bps: int, loss_pct: float, what: str) -> dict:
    """A direction of the netem backend under a queue discipline (commands.netem_aqm_commands), read
    back: netem at the root with the delay, jitter and loss; its child htb's class at the rate; under
    it the discipline with its limit, every parameter and ECN as asked. LinkError on the first that
    differs; the qdiscs as read."""
    from .commands import AQM_ROOT, AQM_SHAPER, NETEM_LINE_LIMIT
    q = parse_qdiscs(cmd.run(["tc", "qdisc", "show", "dev", dev], ns=ns).stdout)
    root = next((x for x in q if x["parent"] == "root"), None)
    if root is None or root["kind"] != "netem" or root["handle"] != AQM_ROOT:
        raise LinkError(f"{what} ({dev}): no netem at the root although tc reported success (root: "
                        f"{root and root['kind']}); this kernel may lack sch_netem: use --link linkem")
    check_netem(DirectionState(dev, "netem", None, None, (), netem=root), cond.delay_ms, cond.jitter_ms, loss_pct,
                NETEM_LINE_LIMIT, what)
    shaper = next((x for x in q if x["handle"] == AQM_SHAPER), None)
    classes = parse_htb_classes(cmd.run(["tc", "class", "show", "dev", dev], ns=ns).stdout)
    cls = classes.get(AQM_SHAPER + "1")
    if shaper is None or shaper["kind"] != "htb" or cls is None:
        raise LinkError(f"{what} ({dev}): no htb beneath netem (qdiscs: {[x['kind'] for x in q]})")
    if cls["rate_bps"] != rate_bps or cls["ceil_bps"] != rate_bps:
        raise LinkError(f"{what} ({dev}): asked for {rate_bps} bit/s, the kernel has rate {cls['rate_bps']} "
                        f"ceil {cls['ceil_bps']}")
    a = cond.aqm
    kind = "pfifo" if a.name == "droptail" else a.name
    leaf = next((x for x in q if x["parent"] == AQM_SHAPER + "1"), None)
    if leaf is None or leaf["kind"] != kind:
        raise LinkError(f"{what} ({dev}): asked for {a.text}, the kernel has {leaf and leaf['kind']} at the bottleneck")
    want: dict = {"limit": cond.queue_for(rate_bps)}
    if a.name != "droptail":
        want["ecn"] = cond.ecn
        for key, value in a.params:
            if (a.name, key) not in KERNEL_FIXED:
                want[f"{key}_ms" if PARAMS[a.name][key][1] == "ms" else key] = value
    for key, value in want.items():
        got = leaf.get(key)
        if got is None or (abs(got - value) > 0.001 if isinstance(value, float) else got != value):
            raise LinkError(f"{what} ({dev}): asked for {a.text} with {key} {value}, the kernel's {kind} has {got}")
    return {"dev": dev, "netem": root, "rate_bps": rate_bps, "discipline": leaf}


def parse_redirects(text: str) -> list[str]:
    """`tc filter show dev X egress` output -> the devices its filters redirect to."""
    return re.findall(r"Egress Redirect to device (\S+)\)", text)


def check_redirects(ns: str | None, devs: list[str], ifb: str, what: str) -> list[str]:
    """Each of devs sends its egress through the IFB (commands.egress_redirect_commands), read back;
    LinkError for one that does not (its packets would pass the bottleneck by)."""
    for dev in devs:
        got = parse_redirects(cmd.run(["tc", "filter", "show", "dev", dev, "egress"], ns=ns).stdout)
        if got != [ifb]:
            raise LinkError(f"{what} ({dev}): its egress should go through {ifb}, the kernel redirects it to {got}")
    return list(devs)


def check_directions(ns: str | None, directions, cond: Conditions, netem: bool) -> dict:
    """Each direction, (name, device, rate, loss %), read back: the htb rate; with netem doing the
    impairments, netem's delay, jitter, loss and limit, else the pfifo queue under a rate.
    LinkError on the first that differs. Returns the states by name."""
    out = {}
    for what, dev, rate, loss in directions:
        state = read_direction(ns, dev)
        check_rate(state, rate, what)
        if netem and cond.impaired:
            check_netem(state, cond.delay_ms, cond.jitter_ms, loss, cond.queue_for(rate), what)
        elif rate is not None:
            check_queue(state, cond.queue_for(rate), what)
        out[what] = dataclasses.asdict(state)
    return out
