"""The linkem backend, for kernels without sch_netem: a constant rate stays in the kernel (htb with
an explicit quantum, a pfifo bottleneck queue); delay, jitter and loss come from linkem, our
userspace emulator (Rust, linkem/), fed by iptables NFQUEUE rules. A rate that follows a trace is
linkem's too (on every kernel): that direction has no htb, and linkem serves its droptail queue at
the trace's opportunities before the delay; each trial's mark starts the trace over. No --queue-bypass and no
fail-open: if linkem dies, traffic stops and the trial fails, it never runs unshaped.

- In the embedded testbed's router (LinkemLink, placement 'router'): one queue a direction, from
  the FORWARD chain; each direction gets RTT/2, jitter and its loss.
- On a two-machine client (HostLinkem, placement 'client'): on the client's own ingress, an IFB
  with htb for the downlink rate, linkem through NFQUEUE in mangle PREROUTING for the delay,
  jitter and loss, an htb on --iface's egress for the uplink rate. All the delay, jitter and loss
  go on the downlink (packets the client receives): a drop on a sender's own output path returns
  EPERM to quic-go, which closes the connection. Only the test traffic is shaped. Every change
  to the host is recorded in the testbed's state file before it is made (host.undo undoes it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

from .. import cmd, traces
from ..conditions import Conditions, ConstantRate, TraceRate
from ..errors import LinkError, UsageError
from . import host as hostnet
from . import origins
from .base import Link, router_delivery_point, router_directions
from .commands import (QUEUE_DOWN, QUEUE_UP, ce_mark_rule, htb_commands, host_egress_commands, host_nfqueue_rules,
                       ingress_redirect_commands, jump_rule, pfifo_leaf, router_nfqueue_rule, u32_matches)
from .readback import check_directions
from .stats import parse_stats

SNAPSHOT_WAIT_S = 5.0  # how long a running linkem may take to answer SIGUSR1
LINKEM_FIFO_PRIORITY = 10
# The wake-up bound linkem asks the kernel to hold for idle CPUs (PM QoS, /dev/cpu_dma_latency) while
# it runs: on a 2-core KVM guest, a lossy link's idle gaps let the CPUs halt and wake late, and 0.6-0.9%
# of a 5%-loss bulk download's packets were released >= 1 ms late (3-5 of 12 trials refused); held at
# 0 us, 0-0.14% (none refused). Idle CPUs poll instead of halting while linkem runs; no busy time is
# counted for it (the poll is the idle task's), and the kernel drops the request when linkem exits.
LINKEM_CPU_DMA_LATENCY_US = 0
QUEUE_BASE = 0x5042  # a client host's NFQUEUE number is QUEUE_BASE + the testbed index (clear of 0 and 1)


class LinkemDir(NamedTuple):
    """One direction linkem runs: its NFQUEUE, one-way delay, loss, and the trace its rate follows
    (None: no rate of linkem's; the kernel's htb, if any, sets it), or the constant rate linkem holds
    itself under a queue discipline (rate_bps, with --aqm)."""
    name: str
    queue: int
    delay_ms: float
    loss_pct: float
    trace: TraceRate | None = None
    rate_bps: int | None = None


def linkem_dirs(cond: Conditions) -> list[LinkemDir]:
    """Each direction linkem runs in the router."""
    return [LinkemDir("down", QUEUE_DOWN, cond.delay_ms, cond.loss_down_pct, _traced(cond.down), _managed(cond, cond.down)),
            LinkemDir("up", QUEUE_UP, cond.delay_ms, cond.loss_up_pct, _traced(cond.up), _managed(cond, cond.up))]


def _managed(cond: Conditions, rate) -> int | None:
    """A constant rate linkem holds itself: under a queue discipline (link.aqm)."""
    return rate.bps if cond.aqm is not None and isinstance(rate, ConstantRate) else None


def _traced(rate) -> TraceRate | None:
    return rate if isinstance(rate, TraceRate) else None


def needs_linkem(cond: Conditions) -> bool:
    """linkem runs for delay, jitter, loss, a trace or a queue discipline; a constant rate alone is the kernel's."""
    return cond.impaired or cond.traced or cond.aqm is not None


def trace_file(folder: Path, d: LinkemDir) -> Path:
    """Where the link writes a direction's trace for linkem: the trace as read when the campaign
    began (by its hash), so a file changed meanwhile cannot change a running campaign's link."""
    return folder / f"trace-{d.name}-{d.trace.sha256[:16]}.txt"


def linkem_argv(binary: str, cond: Conditions, stats: Path, seed: int = 1,
                dirs: list[LinkemDir] | None = None, paths: list[str] = ()) -> list[str]:
    """linkem's command line (pure); paths: its --origin-delay arguments (origins.linkem_args)."""
    argv = [binary]
    for d in dirs or linkem_dirs(cond):
        spec = (f"{d.name}:queue={d.queue},delay_us={round(d.delay_ms * 1000)},jitter_us={round(cond.jitter_ms * 1000)},"
                f"dist={cond.jitter_dist},loss={d.loss_pct / 100:.6g},reorder={int(cond.reorder)}")
        if d.trace is not None:
            spec += f",trace={trace_file(stats.parent, d)},limit={cond.queue_for(d.trace.mean_bps)}"
        elif d.rate_bps is not None:
            spec += f",rate_bps={d.rate_bps},limit={cond.queue_for(d.rate_bps)}"
        if cond.aqm is not None and (d.trace is not None or d.rate_bps is not None):
            spec += "," + ",".join(cond.aqm.linkem_keys()) + (",ecn=1" if cond.ecn else "")
        argv += ["--dir", spec]
    return argv + list(paths) + ["--stats", str(stats), "--seed", str(seed), "--maxlen", "65536", "--fifo", str(LINKEM_FIFO_PRIORITY),
                   "--cpu-dma-latency-us", str(LINKEM_CPU_DMA_LATENCY_US)]


LINKEM_HOW = ("in a checkout, scripts/setup builds it with cargo; else 'cargo install --path linkem' from a "
              "plt-bench checkout puts it on PATH")


class LinkemLink(Link):
    """The router's link: htb rate in the kernel; delay, jitter and loss in linkem through NFQUEUE."""

    backend, tool, placement = "linkem", "linkem", "router"
    detail = "router egress veths (htb), linkem on NFQUEUE in the router's FORWARD chain"
    supports_no_reorder = True
    split_paths = True  # an origin's path delay: half on each direction (origins.linkem_args)

    def __init__(self, plan, binary: Path | None = None, seed: int = 1):
        binary = binary or cmd.linkem_binary()
        if binary is None or not binary.is_file():
            raise LinkError(f"linkem is not built ({binary or cmd.TOOLS_BIN / 'linkem'}, nor on PATH): "
                            f"{LINKEM_HOW}")
        self.plan, self.binary, self.seed = plan, binary, seed
        self.ns = getattr(plan, "router_ns", None)  # the router's namespace; None: this host (two machines)
        self.stats_path = plan.run_dir / "linkem.json"
        self.snap_path = plan.run_dir / "linkem.json.snap"  # linkem's answers to SIGUSR1, numbered
        self._snapshots = 0
        self.log_path = plan.run_dir / "linkem.log"
        self.proc: subprocess.Popen | None = None
        self.cond: Conditions | None = None
        self.paths: dict[str, float] = {}

    def runs(self, cond: Conditions) -> bool:
        """Whether linkem runs under these conditions: for their delay, jitter, loss, trace or discipline
        (needs_linkem), or for an origin's own path."""
        return needs_linkem(cond) or bool(self.paths)

    def apply(self, cond: Conditions) -> dict:
        """Set the conditions, every origin at the link's RTT (set_paths then places a load's origins)."""
        self.paths = {}
        return self._apply(cond)

    def set_paths(self, paths: dict[str, float]) -> dict | None:
        if paths == self.paths:
            return None
        if self.cond is None:
            raise LinkError("origins placed before any conditions were applied")
        self.paths = dict(paths)
        return self._apply(self.cond)

    def _iptables(self, *args: str, check: bool = True):
        return cmd.run(["iptables", "-w", *args], ns=self.ns, check=check)

    def _stop(self) -> None:
        cmd.stop_process(self.proc)
        self.proc = None
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None

    def _start(self, cond: Conditions) -> None:
        for d in self.dirs(cond):
            if d.trace is not None:
                try:
                    t = d.trace.trace(self.traces)
                except LookupError as e:
                    raise LinkError(str(e)) from None
                trace_file(self.stats_path.parent, d).write_text(traces.render(list(t.ms)))
        self.stats_path.unlink(missing_ok=True)
        self.snap_path.unlink(missing_ok=True)
        self._snapshots = 0  # a new linkem counts its snapshots from 1
        self._log = open(self.log_path, "ab")
        argv = linkem_argv(str(self.binary), cond, self.stats_path, self.seed, self.dirs(cond),
                           origins.linkem_args(self.paths, self.split_paths))
        self.proc = subprocess.Popen(cmd.in_netns(self.ns, argv),
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, start_new_session=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LinkError(f"linkem exited with {self.proc.returncode}: {self._log_tail()}")
            if self.stats_path.exists():  # written once every queue is bound
                return
            time.sleep(0.01)
        raise LinkError(f"linkem did not bind its queues within 5s: {self._log_tail()}")

    def dirs(self, cond: Conditions) -> list[LinkemDir]:
        return linkem_dirs(cond)

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-3:]) or "(empty log)"
        except OSError:
            return "(no log)"

    def _apply(self, cond: Conditions) -> dict:
        ns = self.plan.router_ns
        self._stop()
        self._iptables("-F", "FORWARD")
        for what, dev, rate, _ in router_directions(self.plan, cond):
            # start from the veth's own default: an htb root cannot be changed in place
            cmd.run(["tc", "qdisc", "del", "dev", dev, "root"], ns=ns, check=False)
            if rate is not None:
                cmd.run_all(htb_commands(dev, rate, pfifo_leaf(cond.queue_for(rate))), ns=ns)
        self._iptables("-t", "mangle", "-F", "POSTROUTING")
        if self.runs(cond):
            self._start(cond)
            self._iptables("-A", "FORWARD", *router_nfqueue_rule(self.plan.router_server_if, QUEUE_DOWN))
            self._iptables("-A", "FORWARD", *router_nfqueue_rule(self.plan.router_client_if, QUEUE_UP))
            if cond.cross is not None:  # the competing flows' packets join the same queues: one bottleneck each way
                self._iptables("-A", "FORWARD", *router_nfqueue_rule(self.plan.router_xserver_if, QUEUE_DOWN))
                self._iptables("-A", "FORWARD", *router_nfqueue_rule(self.plan.router_xclient_if, QUEUE_UP))
            if cond.ecn:  # linkem's CE verdicts carry a mark; this sets the IP header's CE codepoint by it
                self._iptables("-t", "mangle", "-A", "POSTROUTING", *ce_mark_rule())
        self.cond = cond
        return self.verify(cond)

    def verify(self, cond: Conditions) -> dict:
        out = {"backend": self.backend, "conditions": cond.label,
               **check_directions(self.plan.router_ns, router_directions(self.plan, cond), cond, netem=False)}
        rules = self._iptables("-S", "FORWARD").stdout
        queued = re.findall(r"-j NFQUEUE --queue-num (\d+)(.*)", rules)
        if self.runs(cond):
            want = [QUEUE_DOWN, QUEUE_UP] * (2 if cond.cross is not None else 1)
            if sorted(int(q) for q, _ in queued) != sorted(want) or any("bypass" in rest for _, rest in queued):
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
        for x in self.dirs(cond):
            d = stats.get("dirs", {}).get(x.name, {})
            want = (x.queue, round(x.delay_ms * 1000), round(cond.jitter_ms * 1000), cond.reorder)
            got = (d.get("queue"), d.get("delay_us"), d.get("jitter_us"), d.get("reorder"))
            if want != got or abs(d.get("loss", -1) - x.loss_pct / 100) > 1e-9:
                raise LinkError(f"linkem's {x.name} direction runs {d}, expected queue/delay/jitter/reorder {want} "
                                f"and loss {x.loss_pct / 100}")
            b = d.get("bottleneck") or {}
            managed = x.trace is not None or x.rate_bps is not None
            want_b = ((cond.aqm.name if cond.aqm else "droptail") if managed else "none",
                      x.rate_bps or 0, bool(cond.ecn and managed),
                      cond.queue_for(x.rate_bps if x.rate_bps else x.trace.mean_bps) if managed else 0)
            got_b = (b.get("aqm"), b.get("rate_bps"), b.get("ecn"), b.get("limit"))
            if want_b != got_b:
                raise LinkError(f"linkem's {x.name} bottleneck runs {got_b} (discipline, rate, ECN, queue), expected "
                                f"{want_b}")
            want_p = origins.direction_us(self.paths, self.split_paths).get(x.name, {})
            got_p = {p["addr"]: p["extra_us"] for p in d.get("paths") or []}
            if want_p != got_p:
                raise LinkError(f"linkem's {x.name} direction holds origins' paths {got_p} (address: us), expected {want_p}")
            tr = d.get("trace") or {}
            if x.trace is None:
                if tr.get("path"):
                    raise LinkError(f"linkem's {x.name} direction follows a trace ({tr['path']}) the conditions do not have")
                continue
            t = x.trace.trace(self.traces)
            want_t = (str(trace_file(self.stats_path.parent, x)), t.period_ms, t.opportunities,
                      cond.queue_for(x.trace.mean_bps))
            got_t = (tr.get("path"), tr.get("period_ms"), tr.get("opportunities_per_period"), tr.get("limit"))
            if want_t != got_t:
                raise LinkError(f"linkem's {x.name} direction follows {got_t} (path, period, opportunities, queue), "
                                f"expected {want_t}")
        return {"pid": self.proc.pid, "binary": str(self.binary), "fifo_priority": LINKEM_FIFO_PRIORITY,
                "cpu_dma_latency_us": stats.get("cpu_dma_latency_us")}

    def delivery_point(self) -> tuple[str | None, str] | None:
        return router_delivery_point(self.plan) if self.ns is not None else None

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def alive(self) -> bool:
        return self.cond is None or not self.runs(self.cond) or (self.proc is not None and self.proc.poll() is None)

    def died_reason(self) -> str | None:
        if self.alive():
            return None
        code = self.proc.poll() if self.proc else None
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return f"link emulator (linkem) died ({how}); traffic through the router is stopped, never passed unshaped"

    def mark_signal(self) -> tuple[int, int] | None:
        """SIGUSR2 to linkem starts every trace over; only a traced link has anything to start over."""
        pid = self.pid()
        return (pid, signal.SIGUSR2) if pid and self.cond is not None and self.cond.traced else None

    def mark(self) -> dict | None:
        """Start every trace over now; then the snapshot that shows it (its rewinds counted one more)."""
        how = self.mark_signal()
        if how is None:
            return self.snapshot()
        before = self.snapshot() or {}
        count = lambda st: sum((d.get("trace") or {}).get("rewinds", 0) for d in (st.get("dirs") or {}).values())  # noqa: E731
        os.kill(*how)
        deadline = time.monotonic() + SNAPSHOT_WAIT_S
        while True:
            after = self.snapshot() or {}
            if count(after) > count(before):
                return after
            if time.monotonic() > deadline:
                raise LinkError(f"linkem (pid {how[0]}) did not start its traces over within {SNAPSHOT_WAIT_S:.0f} s")
            time.sleep(0.002)

    def snapshot(self, sig: int = signal.SIGUSR1) -> dict | None:
        """linkem's counters now, with its maxima since the last snapshot: on SIGUSR1 it writes them
        to its .snap file under the next number (then resets those maxima). None when linkem is not
        running; LinkError when a running linkem does not answer (it runs SCHED_FIFO: it is stuck)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self._snapshots += 1
        os.kill(self.proc.pid, sig)
        deadline, problem = time.monotonic() + SNAPSHOT_WAIT_S, "no answer"
        while True:
            try:
                stats = parse_stats(self.snap_path.read_text())  # each write is a rename: never half a file
                if stats["snapshot"] >= self._snapshots:
                    self._snapshots = stats["snapshot"]
                    return stats
                problem = f"its last answer is number {stats['snapshot']}"
            except OSError:
                pass  # the first answer is not written yet
            except LinkError as e:
                problem = str(e)
            if self.proc.poll() is not None:
                return None
            if time.monotonic() > deadline:
                raise LinkError(f"linkem (pid {self.proc.pid}) did not answer snapshot request {self._snapshots} "
                                f"within {SNAPSHOT_WAIT_S:.0f} s: {problem}")
            time.sleep(0.002)

    def close(self) -> None:
        self._stop()
        self._iptables("-F", "FORWARD", check=False)
        self._iptables("-t", "mangle", "-F", "POSTROUTING", check=False)


class HostLinkem(LinkemLink):
    """The link on the client's ingress (module docstring), changes recorded before they are made."""

    placement = "client"
    detail = "client ingress (IFB + htb, NFQUEUE in mangle PREROUTING); all delay, jitter and loss on the downlink"
    split_paths = False  # an origin's path delay too
    jitter_legs = 1  # one jitter sample per round trip, not two as in the router
    ping_user_latency = True  # ping's kernel receive timestamp precedes the delay (verify.verify)

    def __init__(self, plan, record):
        super().__init__(plan)
        self.record = record  # writes the 'host' entry of the state file
        self.host: dict = {}

    @staticmethod
    def check_conditions(conds: list[Conditions]) -> None:
        for c in conds:
            if c.loss_up_pct:
                raise UsageError(f"--loss-direction: {c.label} drops packets on the uplink, which the client would do "
                                 "on its own output path (quic-go sees EPERM and closes the connection); with "
                                 "--server-machine use --loss-direction down")

    def _note(self, **kw) -> None:
        self.host.update(kw)
        self.record(dict(self.host))

    def open(self) -> None:
        p = self.plan
        hostnet.prepare(p.iface, p.ifb, self._note)
        self._note(chain=p.chain)
        self._iptables("-t", "mangle", "-N", p.chain)
        self._iptables("-t", "mangle", "-A", *jump_rule(p.iface, p.chain))

    def dirs(self, cond: Conditions) -> list[LinkemDir]:
        return [LinkemDir("down", self.plan.queue, cond.rtt_ms, cond.loss_down_pct)]

    def _clear(self) -> None:
        self._stop()
        self._iptables("-t", "mangle", "-F", self.plan.chain)
        hostnet.clear(self.plan.iface, self.plan.ifb)

    def _apply(self, cond: Conditions) -> dict:
        self.check_conditions([cond])
        p = self.plan
        self._clear()
        if cond.rate_down_bps is not None:
            cmd.run_all(htb_commands(p.ifb, cond.rate_down_bps, pfifo_leaf(cond.queue_for(cond.rate_down_bps))))
            cmd.run_all(ingress_redirect_commands(p.iface, p.ifb, u32_matches(p.peers, "src")))
        if cond.rate_up_bps is not None:
            cmd.run_all(host_egress_commands(p.iface, cond.rate_up_bps, pfifo_leaf(cond.queue_for(cond.rate_up_bps)),
                                             u32_matches(p.peers, "dst")))
        if cond.impaired or self.paths:
            self._start(cond)
            for rule in host_nfqueue_rules(p.peers, p.queue):
                self._iptables("-t", "mangle", "-A", p.chain, *rule)
        self.cond = cond
        return self.verify(cond)

    def verify(self, cond: Conditions) -> dict:
        p = self.plan
        out = {"backend": self.backend, "placement": self.placement, "conditions": cond.label,
               **check_directions(None, (("downlink", p.ifb, cond.rate_down_bps, 0.0),
                                         ("uplink", p.iface, cond.rate_up_bps, 0.0)), cond, netem=False)}
        redirects = cmd.run(["tc", "filter", "show", "dev", p.iface, "parent", "ffff:"], check=False).stdout
        n_redirect = len(re.findall(rf"redirect to device {re.escape(p.ifb)}\)", redirects, re.I))
        want = len(u32_matches(p.peers, "src")) if cond.rate_down_bps is not None else 0
        if n_redirect != want:
            raise LinkError(f"downlink: {n_redirect} ingress filters lead to {p.ifb}, expected {want}")
        rules = self._iptables("-t", "mangle", "-S", p.chain).stdout
        queued = re.findall(rf"-j NFQUEUE --queue-num {p.queue}\b(.*)", rules)
        if cond.impaired or self.paths:
            if len(queued) != len(host_nfqueue_rules(p.peers, p.queue)) or any("bypass" in r for r in queued):
                raise LinkError(f"the NFQUEUE rules of {p.chain} are not as set: {rules.strip()}")
            out["linkem"] = self.check_running(cond)
        elif queued:
            raise LinkError(f"NFQUEUE rules are set although the conditions need none: {rules.strip()}")
        jump = self._iptables("-t", "mangle", "-S", "PREROUTING").stdout
        if f"-A {' '.join(jump_rule(p.iface, p.chain))}" not in jump:
            raise LinkError(f"the jump from mangle PREROUTING to {p.chain} is missing")
        out["iptables"] = cmd.run(["iptables", "-V"]).stdout.strip()
        return out

    def close(self) -> None:
        self._stop()
        hostnet.undo(self.host)


