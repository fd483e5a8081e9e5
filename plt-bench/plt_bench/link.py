"""The shaped link between client and server, on the router's egress veths.

Backends are chosen from a registry. This version has one, `tcconfig`, which sets the rate
(htb) with tcset. tcset's exit code is never trusted: on a kernel without sch_netem it fails
to add its netem leaf, prints an error and still exits 0. After every change the qdisc state
is read back and compared with what was asked; a mismatch raises LinkError.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path

from . import cmd
from .conditions import Conditions
from .errors import LinkError, UsageError
from .topology import Plan

_TC_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)bit$")
_TC_MULT = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_tc_rate(text: str) -> int:
    """tc's printed rate ('100Mbit', '123456Kbit', '8Kbit', '1Gbit') in bits per second."""
    m = _TC_RATE_RE.match(text)
    if not m:
        raise ValueError(f"not a tc rate: {text!r}")
    return round(float(m.group(1)) * _TC_MULT[m.group(2)])


def parse_htb_classes(text: str) -> dict[str, dict]:
    """`tc class show` output -> {classid: {'rate_bps', 'ceil_bps', 'parent'}} for htb classes."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"class htb (\S+) (?:root|parent (\S+))\b.*?\brate (\S+) ceil (\S+)", line.strip())
        if m:
            out[m.group(1)] = {"parent": m.group(2), "rate_bps": parse_tc_rate(m.group(3)),
                               "ceil_bps": parse_tc_rate(m.group(4))}
    return out


def parse_qdiscs(text: str) -> list[dict]:
    """`tc qdisc show` output -> [{'kind', 'handle', 'parent'}] ('parent' is 'root' for the root)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"qdisc (\S+) (\S+) (root|parent (\S+))", line.strip())
        if m:
            out.append({"kind": m.group(1), "handle": m.group(2), "parent": "root" if m.group(3) == "root" else m.group(4)})
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


def read_direction(ns: str, dev: str) -> DirectionState:
    q = parse_qdiscs(cmd.run(["tc", "qdisc", "show", "dev", dev], ns=ns).stdout)
    root = next((x for x in q if x["parent"] == "root"), None)
    rate = ceil = None
    if root and root["kind"] == "htb":
        classes = parse_htb_classes(cmd.run(["tc", "class", "show", "dev", dev], ns=ns).stdout)
        flows = parse_filter_flowids(cmd.run(["tc", "filter", "show", "dev", dev], ns=ns).stdout)
        shaped = [classes[f] for f in flows if f in classes]
        if len(shaped) == 1:
            rate, ceil = shaped[0]["rate_bps"], shaped[0]["ceil_bps"]
    leaves = tuple(x["kind"] for x in q if x["parent"] != "root")
    return DirectionState(dev, root["kind"] if root else None, rate, ceil, leaves)


def check_direction(state: DirectionState, want_bps: int | None, what: str) -> None:
    """Raise LinkError unless the interface is shaped exactly as asked (or unshaped when want is None)."""
    if want_bps is None:
        if state.root_kind == "htb" or state.shaped_rate_bps is not None:
            raise LinkError(f"{what} ({state.dev}) should be unshaped but has a {state.root_kind} root qdisc")
        return
    if state.root_kind != "htb" or state.shaped_rate_bps is None:
        raise LinkError(f"{what} ({state.dev}): tcset reported success but no htb rate is in place "
                        f"(root qdisc: {state.root_kind})")
    if state.shaped_rate_bps != want_bps or state.shaped_ceil_bps != want_bps:
        raise LinkError(f"{what} ({state.dev}): asked for {want_bps} bit/s, the kernel has rate "
                        f"{state.shaped_rate_bps} ceil {state.shaped_ceil_bps}")


_NETEM: dict[str, bool] = {}


def netem_available() -> bool:
    """Probe sch_netem once, in a scratch namespace of ours (never on a host interface)."""
    if "v" not in _NETEM:
        ns = f"pbprobe-{os.getpid()}"
        cmd.run(["ip", "netns", "add", ns])
        try:
            cmd.run(["ip", "link", "set", "lo", "up"], ns=ns)
            res = cmd.run(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"], ns=ns, check=False)
            _NETEM["v"] = res.returncode == 0
        finally:
            cmd.run(["ip", "netns", "del", ns], check=False)
    return _NETEM["v"]


def _venv_bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


class TcconfigLink:
    """Rate via tcconfig's tcset (htb) on each of the router's egress veths."""

    name = "tcconfig"

    def __init__(self, plan: Plan):
        self.plan = plan

    @staticmethod
    def tcset_argv(dev: str, rate_bps: int) -> list[str]:
        return [sys.executable, "-m", "plt_bench._tcset", dev, "--rate", f"{rate_bps // 1000}Kbps", "--overwrite"]

    @staticmethod
    def tcdel_argv(dev: str) -> list[str]:
        return [_venv_bin("tcdel"), dev, "--all"]

    def directions(self, cond: Conditions) -> list[tuple[str, str, int | None]]:
        return [("downlink", self.plan.down_if, cond.rate_down_bps), ("uplink", self.plan.up_if, cond.rate_up_bps)]

    def apply(self, cond: Conditions) -> dict:
        ns = self.plan.router_ns
        for what, dev, rate in self.directions(cond):
            if rate is None:
                cmd.run(self.tcdel_argv(dev), ns=ns, check=False)
            else:
                res = cmd.run(self.tcset_argv(dev, rate), ns=ns, check=False)
                if res.returncode != 0:
                    raise LinkError(f"tcset failed on the {what} ({dev}): {res.stderr.strip()[-300:]}")
        return self.verify(cond)

    def verify(self, cond: Conditions) -> dict:
        """Read the qdisc state back; raise LinkError unless it is what cond asks for."""
        out = {"backend": self.name, "conditions": cond.label}
        for what, dev, rate in self.directions(cond):
            state = read_direction(self.plan.router_ns, dev)
            check_direction(state, rate, what)
            out[what] = dataclasses.asdict(state)
        return out

    def clear(self) -> None:
        for _, dev, _ in self.directions(Conditions(None, None)):
            cmd.run(self.tcdel_argv(dev), ns=self.plan.router_ns, check=False)


LINKS = {"tcconfig": TcconfigLink}
LINK_CHOICES = ("auto", *LINKS)


def choose(name: str, plan: Plan):
    """The backend class for --link NAME ('auto' picks the one that works on this kernel)."""
    if name == "auto":
        name = "tcconfig"
    if name not in LINKS:
        raise UsageError(f"--link: unknown backend '{name}'; expected one of {', '.join(LINK_CHOICES)}")
    return LINKS[name](plan)
