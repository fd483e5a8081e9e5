"""The shaped link between client and server, on the router's egress veths.

Two backends behind one interface, chosen from a registry (LINKS):

- `tcconfig`: tcset (htb rate + a netem leaf with delay, jitter, loss, limit) on each egress.
  Needs sch_netem. tcset's exit code is never trusted: on a kernel without netem it prints an
  error and still exits 0, so every change is read back from the kernel.
- `linkem`: for kernels without sch_netem. The rate stays in the kernel (htb with an explicit
  quantum, pfifo bottleneck queue); delay, jitter and loss come from linkem, our userspace
  emulator, fed by iptables NFQUEUE rules in the router's FORWARD chain (one queue a direction,
  no --queue-bypass: if linkem dies, traffic stops instead of running unshaped).

`auto` picks tcconfig where the kernel has netem, linkem elsewhere (and linkem whenever a
condition asks for in-order jitter, which netem cannot do).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import cmd
from .conditions import Conditions
from .errors import LinkError, UsageError
from .topology import Plan

# -- reading the kernel's state --------------------------------------------------------------------
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
        out.append(q)
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
    """Raise LinkError unless the interface is rate-limited exactly as asked (or not at all)."""
    if want_bps is None:
        if state.shaped_rate_bps is not None:
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


def check_netem_directions(ns: str | None, directions, cond: Conditions) -> dict:
    """Each (name, device, rate, loss %) read back: htb rate, and netem's delay, jitter, loss and limit
    when cond is impaired; LinkError on the first that differs. Returns the states by name."""
    out = {}
    for what, dev, rate, loss in directions:
        state = read_direction(ns, dev)
        check_rate(state, rate, what)
        if cond.impaired:
            check_netem(state, cond.delay_ms, cond.jitter_ms, loss, cond.queue_for(rate), what)
        out[what] = dataclasses.asdict(state)
    return out


# -- netem probe -----------------------------------------------------------------------------------
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


def _directions(plan: Plan, cond: Conditions) -> list[tuple[str, str, int | None, float]]:
    """(name, egress device, rate, loss %) per direction: downlink leaves the router towards the client."""
    return [("downlink", plan.down_if, cond.rate_down_bps, cond.loss_down_pct),
            ("uplink", plan.up_if, cond.rate_up_bps, cond.loss_up_pct)]


class KernelLink:
    """A link that lives in the kernel only (qdiscs): no emulator process to sample, watch or read."""

    def pid(self) -> int | None:
        """The emulator's process, if the backend has one (its CPU is sampled with the trial's)."""
        return None

    def alive(self) -> bool:
        return True

    def died_reason(self) -> str | None:
        return None

    def snapshot(self) -> dict | None:
        return None


# -- tcconfig --------------------------------------------------------------------------------------
class TcconfigLink(KernelLink):
    """tcset on each of the router's egress veths: htb rate, netem delay (rtt/2), jitter, loss, limit."""

    name = "tcconfig"
    supports_no_reorder = False

    def __init__(self, plan: Plan):
        self.plan = plan

    @staticmethod
    def tcset_argv(dev: str, rate_bps: int | None, delay_ms: float = 0.0, jitter_ms: float = 0.0,
                   loss_pct: float = 0.0, limit: int | None = None) -> list[str]:
        argv = [sys.executable, "-m", "plt_bench._tcset", dev, "--overwrite"]
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
        return argv

    @staticmethod
    def uniform_jitter_argv(dev: str, parent: str, handle: str, delay_ms: float, jitter_ms: float, loss_pct: float,
                            limit: int) -> list[str]:
        """tcconfig always writes 'distribution normal'; netem's own default (uniform) needs a change."""
        argv = ["tc", "qdisc", "change", "dev", dev, "parent", parent, "handle", handle, "netem", "limit", str(limit),
                "delay", f"{round(delay_ms * 1000)}us", f"{round(jitter_ms * 1000)}us"]
        if loss_pct:
            argv += ["loss", f"{loss_pct:g}%"]
        return argv

    @staticmethod
    def tcdel_argv(dev: str) -> list[str]:
        return [_venv_bin("tcdel"), dev, "--all"]

    def apply(self, cond: Conditions) -> dict:
        if not cond.reorder and cond.jitter_ms:
            raise UsageError("--no-reorder: netem reorders jittered packets; in-order jitter needs --link linkem")
        ns = self.plan.router_ns
        for what, dev, rate, loss in _directions(self.plan, cond):
            if rate is None and not cond.impaired:
                cmd.run(self.tcdel_argv(dev), ns=ns, check=False)
                continue
            limit = cond.queue_for(rate)
            res = cmd.run(self.tcset_argv(dev, rate, cond.delay_ms, cond.jitter_ms, loss, limit), ns=ns, check=False)
            if res.returncode != 0:
                raise LinkError(f"tcset failed on the {what} ({dev}): {res.stderr.strip()[-300:]}")
            if cond.jitter_ms and cond.jitter_dist == "uniform":
                netem = read_direction(ns, dev).netem
                if netem is None:
                    raise LinkError(f"{what} ({dev}): tcset left no netem qdisc; this kernel may lack sch_netem: "
                                    "use --link linkem")
                cmd.run(self.uniform_jitter_argv(dev, netem["parent"], netem["handle"], cond.delay_ms,
                                                 cond.jitter_ms, loss, limit), ns=ns)
        return self.verify(cond)

    def verify(self, cond: Conditions) -> dict:
        """Read the qdisc state back; raise LinkError unless it is what cond asks for."""
        return {"backend": self.name, "conditions": cond.label,
                **check_netem_directions(self.plan.router_ns, _directions(self.plan, cond), cond)}

    def close(self) -> None:
        for _, dev, _, _ in _directions(self.plan, Conditions(None, None)):
            cmd.run(self.tcdel_argv(dev), ns=self.plan.router_ns, check=False)


# -- linkem ----------------------------------------------------------------------------------------
LINKEM_BIN = cmd.TOOLS_BIN / "linkem"
QUEUE_DOWN, QUEUE_UP = 0, 1  # NFQUEUE numbers are per network namespace: the router's own
LINKEM_FIFO_PRIORITY = 10
HTB_QUANTUM = 1514


def htb_burst_bytes(rate_bps: int) -> int:
    """htb's bucket: 0.5 ms at the rate, at least two full frames. tc's default (about one frame)
    loses every sending chance a late timer misses: measured here, TCP reached 0.90 of 1 Gbit with
    it, 0.999 with 64 KB."""
    return max(2 * 1514, rate_bps // 8 // 2000)


def htb_commands(dev: str, rate_bps: int, queue_pkts: int) -> list[list[str]]:
    """Rate with htb (explicit quantum and burst: accurate from 1 Mbit to 1 Gbit) and a pfifo bottleneck queue."""
    burst = f"{htb_burst_bytes(rate_bps)}b"
    return [
        ["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
        ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
         "rate", f"{rate_bps}bit", "ceil", f"{rate_bps}bit", "quantum", str(HTB_QUANTUM), "burst", burst, "cburst", burst],
        ["tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "pfifo", "limit", str(queue_pkts)],
    ]


def nfqueue_rule(in_dev: str, queue: int) -> list[str]:
    """Forwarded packets arriving on in_dev go to linkem's queue. No --queue-bypass: without a
    listener the kernel drops them, so a dead emulator stops traffic instead of passing it."""
    return ["-i", in_dev, "-j", "NFQUEUE", "--queue-num", str(queue)]


def linkem_dirs(cond: Conditions) -> list[tuple[str, int, float, float]]:
    """(name, queue, one-way delay ms, loss %) of each direction linkem runs in the router."""
    return [("down", QUEUE_DOWN, cond.delay_ms, cond.loss_down_pct), ("up", QUEUE_UP, cond.delay_ms, cond.loss_up_pct)]


def linkem_argv(binary: str, cond: Conditions, stats: Path, seed: int = 1,
                dirs: list[tuple[str, int, float, float]] | None = None) -> list[str]:
    argv = [binary]
    for name, queue, delay_ms, loss_pct in dirs or linkem_dirs(cond):
        argv += ["--dir", f"{name}:queue={queue},delay_us={round(delay_ms * 1000)},jitter_us={round(cond.jitter_ms * 1000)},"
                          f"dist={cond.jitter_dist},loss={loss_pct / 100:.6g},reorder={int(cond.reorder)}"]
    return argv + ["--stats", str(stats), "--seed", str(seed), "--maxlen", "65536", "--fifo", str(LINKEM_FIFO_PRIORITY)]


class LinkemLink:
    """htb rate in the kernel; delay, jitter and loss in linkem through NFQUEUE."""

    name = "linkem"
    supports_no_reorder = True

    def __init__(self, plan: Plan, binary: Path = LINKEM_BIN, seed: int = 1):
        if not binary.is_file():
            raise LinkError(f"linkem is not built ({binary}): run scripts/setup (it builds linkem with cargo)")
        self.plan, self.binary, self.seed = plan, binary, seed
        self.ns = getattr(plan, "router_ns", None)  # the router's namespace; None: this host (two machines)
        self.stats_path = plan.run_dir / "linkem.json"
        self.log_path = plan.run_dir / "linkem.log"
        self.proc: subprocess.Popen | None = None
        self.cond: Conditions | None = None

    def _iptables(self, *args: str, check: bool = True):
        return cmd.run(["iptables", "-w", *args], ns=self.ns, check=check)

    def _stop(self) -> None:
        cmd.stop_process(self.proc)
        self.proc = None
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None

    def _start(self, cond: Conditions) -> None:
        self.stats_path.unlink(missing_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd.in_netns(self.ns, linkem_argv(str(self.binary), cond, self.stats_path, self.seed,
                                                                        self.dirs(cond))),
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, start_new_session=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LinkError(f"linkem exited with {self.proc.returncode}: {self._log_tail()}")
            if self.stats_path.exists():  # written once every queue is bound
                return
            time.sleep(0.01)
        raise LinkError(f"linkem did not bind its queues within 5s: {self._log_tail()}")

    def dirs(self, cond: Conditions) -> list[tuple[str, int, float, float]]:
        return linkem_dirs(cond)

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-3:]) or "(empty log)"
        except OSError:
            return "(no log)"

    def apply(self, cond: Conditions) -> dict:
        ns = self.plan.router_ns
        self._stop()
        self._iptables("-F", "FORWARD")
        for what, dev, rate, _ in _directions(self.plan, cond):
            # start from the veth's own default: an htb root cannot be changed in place
            cmd.run(["tc", "qdisc", "del", "dev", dev, "root"], ns=ns, check=False)
            if rate is not None:
                for argv in htb_commands(dev, rate, cond.queue_for(rate)):
                    cmd.run(argv, ns=ns)
        if cond.impaired:
            self._start(cond)
            self._iptables("-A", "FORWARD", *nfqueue_rule(self.plan.router_server_if, QUEUE_DOWN))
            self._iptables("-A", "FORWARD", *nfqueue_rule(self.plan.router_client_if, QUEUE_UP))
        self.cond = cond
        return self.verify(cond)

    def verify(self, cond: Conditions) -> dict:
        out = {"backend": self.name, "conditions": cond.label}
        for what, dev, rate, _ in _directions(self.plan, cond):
            state = read_direction(self.plan.router_ns, dev)
            check_rate(state, rate, what)
            if rate is not None and state.queue_pkts != cond.queue_for(rate):
                raise LinkError(f"{what} ({dev}): asked for a queue of {cond.queue_for(rate)} packets, "
                                f"the kernel has {state.queue_pkts}")
            out[what] = dataclasses.asdict(state)
        rules = self._iptables("-S", "FORWARD").stdout
        queued = re.findall(r"-j NFQUEUE --queue-num (\d+)(.*)", rules)
        if cond.impaired:
            if sorted(int(q) for q, _ in queued) != [QUEUE_DOWN, QUEUE_UP] or any("bypass" in rest for _, rest in queued):
                raise LinkError(f"the router's NFQUEUE rules are not as set: {rules.strip()}")
            out["linkem"] = self.check_running(cond)
        elif queued:
            raise LinkError(f"NFQUEUE rules are set although the conditions need none: {rules.strip()}")
        out["iptables"] = cmd.run(["iptables", "-V"]).stdout.strip()
        return out

    def check_running(self, cond: Conditions) -> dict:
        """linkem runs each direction as asked (read from its own report), or LinkError."""
        if not self.alive():
            raise LinkError(f"linkem is not running: {self.died_reason()}")
        stats = self.snapshot() or {}
        for name, q, delay_ms, loss in self.dirs(cond):
            d = stats.get("dirs", {}).get(name, {})
            want = (q, round(delay_ms * 1000), round(cond.jitter_ms * 1000), cond.reorder)
            got = (d.get("queue"), d.get("delay_us"), d.get("jitter_us"), d.get("reorder"))
            if want != got or abs(d.get("loss", -1) - loss / 100) > 1e-9:
                raise LinkError(f"linkem's {name} direction runs {d}, expected queue/delay/jitter/reorder {want} "
                                f"and loss {loss / 100}")
        return {"pid": self.proc.pid, "binary": str(self.binary), "fifo_priority": LINKEM_FIFO_PRIORITY}

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def alive(self) -> bool:
        return self.cond is None or not self.cond.impaired or (self.proc is not None and self.proc.poll() is None)

    def died_reason(self) -> str | None:
        if self.alive():
            return None
        code = self.proc.poll() if self.proc else None
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return f"link emulator (linkem) died ({how}); traffic through the router is stopped, never passed unshaped"

    def snapshot(self) -> dict | None:
        """linkem's counters now (it writes them on SIGUSR1)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            before = self.stats_path.stat().st_mtime_ns
        except OSError:
            before = 0
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                if self.stats_path.stat().st_mtime_ns != before:
                    break
            except OSError:
                pass
            time.sleep(0.002)
        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        self._stop()
        self._iptables("-F", "FORWARD", check=False)


LINKS = {"tcconfig": TcconfigLink, "linkem": LinkemLink}
LINK_CHOICES = ("auto", *LINKS)


def resolve(name: str, need_no_reorder: bool = False) -> str:
    """The backend --link NAME stands for on this machine."""
    if name == "auto":
        return "linkem" if need_no_reorder or not netem_available() else "tcconfig"
    if name not in LINKS:
        raise UsageError(f"--link: unknown backend '{name}'; expected one of {', '.join(LINK_CHOICES)}")
    if need_no_reorder and not LINKS[name].supports_no_reorder:
        raise UsageError(f"--no-reorder: the {name} backend reorders jittered packets; use --link linkem")
    return name


def choose(name: str, plan: Plan, need_no_reorder: bool = False):
    """An instance of the backend for --link NAME."""
    return LINKS[resolve(name, need_no_reorder)](plan)
