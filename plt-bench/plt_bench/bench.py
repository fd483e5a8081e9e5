"""Benchmarks of the testbed itself (plt-bench bench, bench-sampler, bench-campaign): each runs a
small campaign through plt_bench.session (the same path as every measurement) and reads its stored
trials back into ratios (measured / ideal or measured / target). They print; they assert nothing. The link's own benchmark is plt_bench.link.bench.

- pageload: PLT / payload-only ideal, and the per-trial overhead (wall time minus PLT).
- sampler: the CPU samplers' own cost, in % of one core.
- campaign: a campaign's overhead per trial, with and without the link's verification, and
  where a trial's time besides its page load goes.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

from . import campaign
from .conditions import ideal_seconds
from .records import Trial
from .session import Session
from .store import Store

PLT_RATIO_TARGET = 1.07
OVERHEAD_TARGET_S = 0.5  # per trial besides its page load, with a fresh browser every trial (issue 17)
SAMPLER_TARGET_PCT = 1.0


def _run(spec, results: Path, out: Callable[[str], None]) -> tuple[dict, list[Trial], list[dict]]:
    """The campaign, always new; its trials and link checks as stored."""
    with Session(spec, results, new=True, out=out) as s:
        counts = s.run()
        cid = s.campaign_id
    with Store(results, read_only=True) as store:
        return counts, store.trials([cid]), store.link_checks(cid)


def _spread(values: list[float], fmt: str) -> str:
    v = sorted(values)
    return f"median {v[len(v) // 2]:{fmt}} (min {v[0]:{fmt}}, max {v[-1]:{fmt}})"


def pageload_lines(trials: list[Trial], protos) -> list[str]:
    lines = [f"benchmark (targets: PLT/ideal <= {PLT_RATIO_TARGET}, overhead <= {OVERHEAD_TARGET_S} s)"]
    for proto in protos:
        ok = [t for t in trials if t.proto == proto and t.counts]
        if not ok:
            lines.append(f"  {proto}: no successful trial")
            continue
        ratios = [t.plt_ms / 1000 / ideal_seconds(t.size_bytes, t.conditions.rate_down_bps) for t in ok]
        over = [t.wall_s - t.plt_ms / 1000 for t in ok]
        lines.append(f"  {proto}: PLT/ideal {_spread(ratios, '.3f')}; overhead {_spread(over, '.3f')} s; n={len(ok)}")
    return lines


def pageload(results: Path, size: str = "50MB", bw: str = "100mbit", runs: str = "3",
             out: Callable[[str], None] = print) -> tuple[dict, list[str]]:
    spec = campaign.bare({"size": size, "bw": bw, "runs": runs, "proto": "both", "name": "bench"})
    counts, trials, _ = _run(spec, results, out)
    return counts, pageload_lines(trials, spec.grid.protos)


def sampler_lines(trials: list[Trial], interval_s: float) -> list[str]:
    lines = [f"sampler benchmark (interval {interval_s * 1000:.0f} ms; target: at most {SAMPLER_TARGET_PCT:g}% of one "
             "core)"]
    for side, name in (("sampler", "browser tree (worker)"), ("server_sampler", "Caddy + linkem (runner)")):
        own = window = ticks = 0.0
        for t in trials:
            info = t.cpu.get(side) or {}
            own += info.get("own_cpu_s", 0.0)
            window += info.get("window_s", 0.0)
            ticks += info.get("samples", 0)
        if window:
            pct = 100 * own / window
            lines.append(f"  {name}: {own:.3f} s of CPU over {window:.1f} s sampled, {ticks:.0f} samples: {pct:.2f}% of "
                         f"one core (ratio to target {pct / SAMPLER_TARGET_PCT:.2f}), {1e6 * own / max(ticks, 1):.0f} us "
                         "per sample")
        else:
            lines.append(f"  {name}: no sampler figures in the trials")
    return lines


def sampler(results: Path, runs: str = "3", cpu_interval: str = "100ms", size: str = "50MB",
            out: Callable[[str], None] = print) -> tuple[dict, list[str]]:
    spec = campaign.bare({"size": size, "bw": "100mbit", "runs": runs, "proto": "both", "capture": "cpu",
                                "cpu_interval": cpu_interval, "name": "bench-sampler"})
    counts, trials, _ = _run(spec, results, out)
    return counts, sampler_lines(trials, spec.cpu_interval_s)


def overhead_parts(trials: list[Trial]) -> dict[str, float]:
    """Where a trial's time besides its page load goes (medians in s, pure): from one trial's start
    to the next one's under the same conditions (a change of conditions adds the link's check),
    the browser's launch where it ran inside the trial (not when it was started early, during the
    previous trial's bookkeeping), the idle gate (between the launch and the navigation), its load
    beyond the PLT, its end, the rest of the trial (the worker's own work: CPU readings, Navigation
    Timing, the process sweep) and the time between trials (the runner's bookkeeping), and how many
    such gaps ("gaps"). {} without two such trials."""
    ts = sorted((t for t in trials if t.plt_ms and t.launch_s is not None and t.load_s is not None), key=lambda t: t.seq)
    rows = []
    for a, b in zip(ts, ts[1:]):
        if b.seq != a.seq + 1 or a.conditions != b.conditions:
            continue
        gap = (datetime.fromisoformat(b.started_utc) - datetime.fromisoformat(a.started_utc)).total_seconds()
        plt = a.plt_ms / 1000
        quit_s = a.quit_s or 0.0
        launch_in = 0.0 if a.prelaunched else a.launch_s  # a browser started early launched before the trial
        gate = a.idle_wait_s or 0.0
        rows.append({"overhead": gap - plt, "launch (in the trial)": launch_in, "idle gate": gate,
                     "load beyond PLT": a.load_s - plt, "end": quit_s,
                     "rest of the trial": a.wall_s - launch_in - gate - a.load_s - quit_s,
                     "between trials": gap - a.wall_s})
    if not rows:
        return {}
    return {**{k: statistics.median(r[k] for r in rows) for k in rows[0]}, "gaps": len(rows)}


def campaign_lines(trials: list[Trial], checks: list[dict], wall_s: float) -> list[str]:
    verify_s = sum(c["result"].get("verify", {}).get("seconds", 0) for c in checks)
    plt_s = sum(t.plt_ms / 1000 for t in trials if t.plt_ms)
    n = max(len(trials), 1)
    bare = (wall_s - plt_s - verify_s) / n
    lines = [f"campaign benchmark ({len(trials)} trials; target: under {OVERHEAD_TARGET_S} s of overhead per trial)",
             f"  wall {wall_s:.1f} s, sum of PLTs {plt_s:.1f} s, link verification {verify_s:.1f} s",
             f"  overhead per trial: {bare:.3f} s without verification (ratio to target {bare / OVERHEAD_TARGET_S:.2f}), "
             f"{(wall_s - plt_s) / n:.3f} s with it"]
    parts = overhead_parts(trials)
    if parts:
        over, gaps = parts.pop("overhead"), parts.pop("gaps")
        lines.append(f"  from one trial's start to the next, besides the page load (median of {gaps}): {over:.3f} s "
                     f"(ratio to target {over / OVERHEAD_TARGET_S:.2f}); of it, in s: "
                     + ", ".join(f"{k} {v:.3f}" for k, v in parts.items()))
    return lines


def campaign_overhead(results: Path, bw: str = "10mbit,50mbit,100mbit,500mbit,1gbit", size: str | None = None,
                      out: Callable[[str], None] = print) -> tuple[dict, list[str]]:
    spec = campaign.load("pages", {"bw": bw, "size": size, "runs": "1", "name": "bench-campaign"})
    t0 = time.monotonic()
    counts, trials, checks = _run(spec, results, out)
    return counts, campaign_lines(trials, checks, time.monotonic() - t0)
