"""Benchmarks of the testbed itself (plt-bench bench, bench-sampler, bench-campaign) and of its
figures against the literature's (bench-literature): each runs a small campaign through
plt_bench.session (the same path as every measurement) and reads its stored trials back into
ratios (measured / ideal, measured / target, ours / the paper's). They print; they assert
nothing. The link's own benchmark is plt_bench.link.bench.

- pageload: PLT / ideal (conditions.ideal_ms), and the per-trial overhead (wall time minus PLT).
- sampler: the CPU samplers' own cost, in % of one core.
- campaign: a campaign's overhead per trial, with and without the link's verification, and
  where a trial's time besides its page load goes.
- literature: h2 against h3 where papers measured them (--entries network): a 1 Gbit/s download (Zhang et al.,
  WWW'24) and a many-object page under loss (Yu & Benson, WWW'21), our figures beside theirs;
  and across the browser's CPU (--entries cpu, issue 45): Zhang's Fig. 7 (h3/h2 across CPU budgets)
  and Kakhki's phone (IMC'17).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

from . import campaign, protocols, units
from .conditions import ideal_ms
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
        ratios = [t.plt_ms / ideal_ms(t.proto, t.size_bytes, t.conditions.rate_down_bps, t.conditions.rtt_ms, t.objects)
                  for t in ok]
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
             f"  the campaign's time besides its loads, per trial (the testbed's start and each change of conditions "
             f"included): {bare:.3f} s without verification (ratio to target {bare / OVERHEAD_TARGET_S:.2f}), "
             f"{(wall_s - plt_s) / n:.3f} s with it"]
    parts = overhead_parts(trials)
    if parts:
        over, gaps = parts.pop("overhead"), parts.pop("gaps")
        lines.append(f"  a trial's cost beyond its load, from one trial's start to the next (median of {gaps}): {over:.3f} s "
                     f"(ratio to target {over / OVERHEAD_TARGET_S:.2f}); of it, in s: "
                     + ", ".join(f"{k} {v:.3f}" for k, v in parts.items()))
    return lines


def bias_lines(kept: list[Trial], fresh: list[Trial]) -> list[str]:
    """The bias check of a browser kept across trials against a fresh browser per trial (pure): each
    cell's (conditions, page, protocol) PLT and FCP medians in both, and over the cells the median
    relative difference and Wilcoxon's signed-rank test of the paired medians, with a sentence."""
    import statistics

    from .analysis.stats import usable

    def medians(trials, metric):
        cells: dict = {}
        for t in usable(trials):
            if getattr(t, metric) is not None:
                cells.setdefault((t.conditions.label, t.page, t.proto), []).append(getattr(t, metric))
        return {k: statistics.median(v) for k, v in cells.items()}
    lines = ["bias check: the same campaign in a fresh browser per trial (--browser-start fresh) against a kept "
             "browser's fresh contexts"]
    for metric, label in (("plt_ms", "PLT"), ("fcp_ms", "FCP")):
        a, b = medians(fresh, metric), medians(kept, metric)
        both = sorted(set(a) & set(b))
        if not both:
            lines.append(f"  {label}: no cell measured in both")
            continue
        rel = [b[k] / a[k] - 1 for k in both if a[k]]
        for k in both:
            lines.append(f"  {label} {' '.join(map(str, k))}: fresh {a[k]:.1f} ms, kept {b[k]:.1f} ms "
                         f"({100 * (b[k] / a[k] - 1):+.1f}%)")
        p = None
        if len(both) >= 6 and any(x != 0 for x in rel):
            from scipy.stats import wilcoxon
            p = float(wilcoxon([b[k] for k in both], [a[k] for k in both]).pvalue)
        verdict = (f"Wilcoxon signed-rank p = {p:.3f}: " + ("the kept browser's figures differ (a bias)" if p < 0.05
                                                             else "no difference shown")
                   if p is not None else "every pair equal" if not any(rel)
                   else f"too few cells ({len(both)}) for a test of the pairs: read the cells")
        lines.append(f"  {label} over {len(both)} cells: median difference {100 * statistics.median(rel):+.1f}%; {verdict}")
    return lines


def campaign_overhead(results: Path, bw: str = "10mbit,50mbit,100mbit,500mbit,1gbit", size: str | None = None,
                      out: Callable[[str], None] = print, against: str | None = "fresh") -> tuple[dict, list[str]]:
    """The pages preset's campaign, one run, in a browser kept across trials (the default); against
    fresh: the same campaign again in a fresh browser per trial, its overhead and the bias check
    (bias_lines) beside."""
    spec = campaign.load("pages", {"bw": bw, "size": size, "runs": "1", "name": "bench-campaign"})
    t0 = time.monotonic()
    counts, trials, checks = _run(spec, results, out)
    lines = [f"{spec.browser_start} browser:", *campaign_lines(trials, checks, time.monotonic() - t0)]
    if against and against != spec.browser_start:
        from .errors import LinkError
        other = dataclasses.replace(spec, browser_start=against, name=f"bench-campaign-{against}")
        t0 = time.monotonic()
        try:
            counts2, trials2, checks2 = _run(other, results, out)
        except LinkError as e:  # the first campaign's figures stand; the check says why it is missing
            return {**counts, "failed": counts.get("failed", 0) + 1}, lines + [
                f"bias check not run: the {against} browser's campaign was refused ({e})"]
        lines += [f"{against} browser:", *campaign_lines(trials2, checks2, time.monotonic() - t0),
                  *bias_lines(trials, trials2)]
        counts = {k: counts.get(k, 0) + counts2.get(k, 0) for k in set(counts) | set(counts2)}
    return counts, lines


# -- the literature's h2-vs-h3 figures, ours beside them (issue 28) -------------------------------------------
# Zhang et al., WWW'24: a 1 Gbit/s download in Chrome, goodput in Mbit/s (h3 flat near 450 above
# 500 Mbit/s of link); Chrome's CPU at 100 Mbit/s: h2 16%, h3 88% of a core.
H2, H3 = protocols.H2.name, protocols.H3.name
ZHANG_MBPS = {H2: 924.0, H3: 475.0}
# Yu & Benson, WWW'21: Chrome forced to h2 or h3 on production pages under 0/0.1/1% loss: the stacks'
# congestion control, not head-of-line blocking, decided the differences; h3's removal of HOL
# blocking barely moved FCP, LCP, SpeedIndex or onload.
YU_BENSON = ("congestion control dominated; removing head-of-line blocking barely moved page-load metrics "
             "(Yu & Benson, WWW'21)")


def zhang_lines(trials: list[Trial]) -> list[str]:
    """A 1 Gbit/s download over h2 and h3: our goodput (the page's bytes over its load time, median
    of the trials that count) beside Zhang et al.'s, their ratio, and the CPU-bound flags that say
    why ours differ (pure)."""
    from .analysis.stats import usable
    lines = ["h2 vs h3 at 1 Gbit/s (Zhang et al., WWW'24: Chrome 924 vs 475 Mbit/s, h3/h2 0.51)"]
    mbps = {}
    for proto in (H2, H3):
        ts = [t for t in usable(trials) if t.proto == proto]
        if not ts:
            lines.append(f"  {proto}: no trial that counts")
            continue
        mbps[proto] = statistics.median(8 * t.size_bytes / (t.plt_ms / 1000) / 1e6 for t in ts)
        bound = [t.cpu_bound for t in ts if t.cpu_bound]
        lines.append(f"  {proto}: {mbps[proto]:.0f} Mbit/s (median of {len(ts)}; Zhang {ZHANG_MBPS[proto]:.0f}; ours / "
                     f"theirs {mbps[proto] / ZHANG_MBPS[proto]:.2f}); CPU-bound in {len(bound)} of {len(ts)}"
                     + (f" ({', '.join(sorted(set(bound)))})" if bound else ""))
    if len(mbps) == 2:
        ratio, theirs = mbps[H3] / mbps[H2], ZHANG_MBPS[H3] / ZHANG_MBPS[H2]
        lines.append(f"  h3 / h2: {ratio:.2f} here, {theirs:.2f} in Zhang et al.")
        h3_bound = any(t.cpu_bound for t in usable(trials) if t.proto == H3)
        if ratio < theirs:
            why = ("h3 falls further behind h2 here than in Zhang's Chrome: this machine's 2 cores run the browser, "
                   "Caddy and the link emulator at once" + (", and the CPU-bound flags say a core limited h3's loads"
                                                            if h3_bound else ""))
        else:
            why = ("h3 keeps more of h2's rate here than in Zhang's Chrome (0.51)" + (
                   "" if h3_bound else ", and no h3 load was CPU-bound") + ": not the same client (Chromium "
                   "156 here, 2023's Chrome there), not the same server (quic-go in Caddy here), and a receive "
                   "path that is not starved by other work on a desktop's cores there but shares 2 cores here, "
                   "which caps h2 too (figures are the page's bytes over its whole load, handshake and ramp-up "
                   "included)")
        lines.append(f"  why: {why}. What Zhang found holds in direction when h3 is the slower: its user-space "
                     "receive path costs more CPU per byte than h2's kernel TCP (bench-link and the CPU table show "
                     "the cost per role)")
    return lines


def yu_benson_lines(trials: list[Trial]) -> list[str]:
    """h3 against h2 on a 50-object page under 2% loss at 50 ms: the comparison beside Yu & Benson's
    finding, and whether ours agrees (pure)."""
    from .analysis.stats import compare
    rows = [r for r in compare(trials, reference=H3) if r.other_value == H2]
    lines = [f"h3 vs h2 on a 50-object page, 2% loss, 50 ms: {YU_BENSON}"]
    if not rows:
        return lines + ["  no pair of cells with trials that count"]
    for r in rows:
        lines.append(f"  {r.conditions} {r.page}: h3 {r.reference.median_ms:.0f} ms, h2 {r.other.median_ms:.0f} ms "
                     f"(n {r.reference.n}/{r.other.n}); diff {r.diff_pct:+.1f}%, p adj {r.p_adjusted:.3g}: "
                     f"{'h3 faster' if r.significant and r.diff_pct < 0 else 'h2 faster' if r.significant else 'no significant difference'}")
        if abs(r.diff_pct) < 10:
            lines.append("  agrees: under loss the two load this page within 10%; both send with CUBIC (Linux's for "
                         "h2, quic-go's for h3), and the head-of-line blocking h3 removes costs h2 little on a page "
                         "of small objects")
        elif not r.significant:
            lines.append(f"  undecided: a {r.diff_pct:+.0f}% difference that {min(r.reference.n, r.other.n)} runs "
                         "cannot tell from this loss's noise (95% CI of the diff "
                         f"[{r.diff_ci_low_pct:+.0f}, {r.diff_ci_high_pct:+.0f}]%): run with more --runs")
        else:
            lines.append("  differs in size: both send with CUBIC, but not the same CUBIC: Linux's TCP recovers "
                         "with SACK, RACK-TLP and PRR, quic-go with its own loss detection, and h2's one TCP "
                         "connection stalls every stream behind a lost segment where h3 stalls one; at 2% loss "
                         "(beyond Yu & Benson's 1%) these add up to the difference printed")
    return lines


def literature(results: Path, runs: str = "10", out: Callable[[str], None] = print,
               entries: tuple[str, ...] = ("network", "cpu")) -> tuple[dict, list[str]]:
    """The published h2-vs-h3 experiments, on this machine. network (issue 28): a 100 MB download at
    1 Gbit/s (Zhang et al.) and a 50-object page under 2% loss at 50 ms (Yu & Benson's setting,
    their loss raised to 2%); cpu (issue 45): cpu_literature; fairness: fairness_literature; corpus
    (issue 61): corpus_literature."""
    counts: dict = {}
    lines: list[str] = []
    for entry, run in (("network", _network_literature), ("cpu", cpu_literature), ("fairness", fairness_literature),
                       ("corpus", corpus_literature)):
        if entry in entries:
            c, more = run(results, runs, out)
            counts = {k: counts.get(k, 0) + c.get(k, 0) for k in set(counts) | set(c) if isinstance(c.get(k, 0), int)}
            lines += more
    return counts, lines


# The corpus beside Zhang et al.'s Fig. 11 (100 live sites, Chrome): the real pages replayed over h3 and h2 at
# a 100 Mbit/s link (their shaped one) and 50 ms, their servers answering at once and thinking 100 ms
CORPUS_LINK = {"bw": "100mbit", "rtt": "50ms"}
CORPUS_THINK = "off,100"


def corpus_literature(results: Path, runs: str = "3", out: Callable[[str], None] = print) -> tuple[dict, list[str]]:
    """The corpus (every real page: pages.real) over h3 and h2, its servers answering at once and
    thinking, each in Zhang et al.'s Fig. 11 form beside theirs (corpus_lines)."""
    spec = campaign.bare({"size": "real:*", **CORPUS_LINK, "runs": runs, "proto": f"{H3},{H2}",
                          "think": CORPUS_THINK, "name": "bench-corpus"})
    c, t, _ = _run(spec, results, out)
    return c, corpus_lines(t)


def corpus_lines(trials: list[Trial]) -> list[str]:
    """Per link (its conditions, think time among them): each page's ratio of PLT medians h3/h2 over its
    ok trials, in Fig. 11's figures beside Zhang et al.'s (pure)."""
    from .analysis import stats
    lines = ["the corpus beside Zhang et al. (WWW'24, Fig. 11: 100 live sites in Chrome, PLT h3/h2 per page)"]
    for who, f in stats.ZHANG_FIG11.items():
        lines.append("  " + stats.fig11_line(f"Zhang, {who}", f))
    for label in sorted({t.label for t in trials}):
        ratios = []
        for page in sorted({t.page for t in trials if t.label == label}):
            med = {p: [t.plt_ms for t in trials if t.label == label and t.page == page and t.proto == p and t.counts]
                   for p in (H3, H2)}
            if med[H3] and med[H2]:
                ratios.append(statistics.median(med[H3]) / statistics.median(med[H2]))
        f = stats.fig11_figures(ratios)
        lines.append("  " + (stats.fig11_line(f"here, {label}", f) if f else f"here, {label}: no page with both"))
    return lines


def _network_literature(results: Path, runs: str, out: Callable[[str], None]) -> tuple[dict, list[str]]:
    pair = f"{H3},{H2}"
    zhang = campaign.bare({"size": "100MB", "bw": "1gbit", "runs": runs, "proto": pair, "name": "bench-zhang"})
    yb = campaign.bare({"size": "50x20KB", "bw": "10mbit", "rtt": "50ms", "loss": "2%", "runs": runs,
                        "proto": pair, "name": "bench-yu-benson"})
    c1, t1, _ = _run(zhang, results, out)
    c2, t2, _ = _run(yb, results, out)
    counts = {k: c1.get(k, 0) + c2.get(k, 0) for k in set(c1) | set(c2) if isinstance(c1.get(k, 0), int)}
    return counts, zhang_lines(t1) + yu_benson_lines(t2)


# -- the literature's CPU findings, ours beside them (issue 45) ---------------------------------------------
# Zhang et al., WWW'24, Fig. 7 (their released data): Chrome on an i7-10700 whose clock they set, a bulk
# download at 1 Gbit/s: at 0.8 GHz h3 84 Mbit/s, h2 473 (h3/h2 0.18); at 4.8 GHz h3 529, h2 941
# (0.56); h2 fills the link from about 1.8 GHz. A budget b of a core stands for b x 4.8 GHz here.
ZHANG_CPU = {0.8: (84.0, 473.0), 4.8: (529.0, 941.0)}  # GHz -> (h3, h2) Mbit/s
ZHANG_MAX_GHZ = 4.8
ZHANG_H2_FILLS_GHZ = 1.8
ZHANG_CPU_BUDGETS = "1,0.375,0.17"  # 4.8, 1.8 and 0.8 GHz of Zhang's i7
# Kakhki et al., IMC'17: QUIC's gains over TCP on a desktop disappear on 2013/2014 phones (MotoG,
# Nexus 6): its packet processing and crypto run in user space, where the phone's CPU limits them.
KAKHKI = ("QUIC's gains over TCP on a desktop disappear on 2013/2014 phones: its packet processing and crypto "
          "run in user space (Kakhki et al., IMC'17)")


def _mbps(ts: list[Trial]) -> float | None:
    """The median goodput of the trials that count: the page's bytes over its load time."""
    from .analysis.stats import usable
    ok = usable(ts)
    return statistics.median(8 * t.size_bytes / (t.plt_ms / 1000) / 1e6 for t in ok) if ok else None


def zhang_cpu_lines(trials: list[Trial]) -> list[str]:
    """A bulk download over h3 and h2 under each CPU budget: the h3/h2 goodput ratio per budget beside
    Zhang et al.'s Fig. 7 at the clock the budget stands for (pure)."""
    rate = trials[0].conditions.rate_down_bps / 1e6 if trials else 0
    lines = [f"h3/h2 goodput across CPU budgets, {rate:g} Mbit/s (Zhang et al., WWW'24 Fig. 7: h3/h2 0.18 at 0.8 GHz, "
             f"0.56 at 4.8 GHz, h2 filling the link from {ZHANG_H2_FILLS_GHZ} GHz)"]
    shares = sorted({t.cpu_budget for t in trials if t.cpu_budget is not None}, reverse=True)
    ratios = {}
    for share in shares:
        h3 = _mbps([t for t in trials if t.cpu_budget == share and t.proto == H3])
        h2 = _mbps([t for t in trials if t.cpu_budget == share and t.proto == H2])
        ghz = share * ZHANG_MAX_GHZ
        theirs = ZHANG_CPU.get(round(ghz, 1))
        if h3 is None or h2 is None:
            lines.append(f"  {share:g} of a core (~{ghz:.1f} GHz): no pair of trials that count")
            continue
        ratios[share] = h3 / h2
        lines.append(f"  {share:g} of a core (~{ghz:.1f} GHz of Zhang's i7): h3 {h3:.0f}, h2 {h2:.0f} Mbit/s, h3/h2 "
                     f"{h3 / h2:.2f}" + (f"; Zhang at {round(ghz, 1)} GHz: h3 {theirs[0]:.0f}, h2 {theirs[1]:.0f}, "
                                         f"h3/h2 {theirs[0] / theirs[1]:.2f}" if theirs else "")
                     + f"; h2 {'fills' if h2 >= 0.9 * rate else 'short of'} the link")
    if len(ratios) >= 2:
        lo, hi = min(ratios), max(ratios)
        rises = ratios[hi] > ratios[lo]
        lines.append(f"  shape: h3/h2 {'rises' if rises else 'does not rise'} with the CPU ({ratios[lo]:.2f} at {lo:g}, "
                     f"{ratios[hi]:.2f} at {hi:g}), as in Zhang's Fig. 7" + ("" if rises else " (it does there)"))
        lines.append("  why ours differ: a budget slices time (the browser runs at the full clock for 1 ms, then "
                     "waits), where a lower clock slows every cycle, memory stalls less than compute; the rate is "
                     "this machine's, not their 1 Gbit/s; the whole browser shares one core's budget here, where "
                     "their Chrome spread over the i7's 8 cores; and the server (Caddy's quic-go, Linux TCP) is "
                     "not theirs")
    return lines


def kakhki_lines(trials: list[Trial]) -> list[str]:
    """h3 against h2 on a multi-object page at a full core and at a phone's budget: the difference
    per budget beside Kakhki et al.'s finding (pure)."""
    from .analysis.stats import compare
    lines = [f"h3 vs h2 on a page of many objects at a full core and a phone's budget: {KAKHKI}"]
    rows = [r for r in compare(trials, reference=H3) if r.other_value == H2]
    if not rows:
        return lines + ["  no pair of cells with trials that count"]
    diffs = {}
    for r in sorted(rows, key=lambda r: r.budget):
        diffs[r.budget] = r.diff_pct
        lines.append(f"  {r.budget} {r.conditions} {r.page}: h3 {r.reference.median_ms:.0f} ms, h2 {r.other.median_ms:.0f} ms "
                     f"(n {r.reference.n}/{r.other.n}); diff {r.diff_pct:+.1f}%, p adj {r.p_adjusted:.3g}: "
                     f"{'h3 faster' if r.significant and r.diff_pct < 0 else 'h2 faster' if r.significant else 'no significant difference'}")
    from .conditions import device_of
    full = next((d for b, d in diffs.items() if not device_of(b)), None)
    phone = next((d for b, d in diffs.items() if device_of(b)), None)
    if full is not None and phone is not None:
        agrees = phone > full
        lines.append(f"  {'agrees' if agrees else 'differs'}: h3's lead {full:+.1f}% at a full core, {phone:+.1f}% on the "
                     f"phone ({'shrinks' if agrees else 'does not shrink'} as the CPU does). Their phones were a 2013 "
                     "MotoG and a Nexus 6 on Google's 2016 QUIC; ours is a 2022 Moto G Power's CPU class on this host's "
                     "core, quic-go against Linux TCP, and the whole browser on that one core")
    return lines


def cpu_literature(results: Path, runs: str = "10", out: Callable[[str], None] = print) -> tuple[dict, list[str]]:
    """Issue 45's two literature entries: Zhang's Fig. 7 shape (a 20 MB download at 200 Mbit/s and
    10 ms over h3 and h2 at 1, 0.375 and 0.17 of a core) and Kakhki's phone finding (a page of 20
    objects at 10 Mbit/s and 50 ms over h3 and h2 at a full core and as the low-end phone)."""
    pair = f"{H3},{H2}"
    zhang = campaign.bare({"size": "20MB", "bw": "200mbit", "rtt": "10ms", "runs": runs, "proto": pair,
                           "cpu": ZHANG_CPU_BUDGETS, "name": "bench-zhang-cpu"})
    kak = campaign.bare({"size": "20x5KB", "bw": "10mbit", "rtt": "50ms", "runs": runs, "proto": pair, "cpu": "1",
                         "device": "low-end-phone", "name": "bench-kakhki"})
    c1, t1, _ = _run(zhang, results, out)
    c2, t2, _ = _run(kak, results, out)
    counts = {k: c1.get(k, 0) + c2.get(k, 0) for k in set(c1) | set(c2) if isinstance(c1.get(k, 0), int)}
    return counts, zhang_cpu_lines(t1) + kakhki_lines(t2)


# -- fairness against competing TCP (issue 46) ----------------------------------------------------------------
# Kakhki et al., IMC'17: QUIC took more than twice its fair share of a bottleneck against competing TCP flows.
KAKHKI_FAIRNESS = 2.0  # their QUIC's share over its fair share, at least
FAIRNESS_FLOWS = 4
FAIRNESS_AQMS = "droptail,fq_codel"


def fairness_lines(trials: list[Trial]) -> list[str]:
    """One download over h3 and over h2 against competing TCP flows, under each discipline: its share
    of what the bottleneck carried during its load over its fair share, and Jain's index, beside
    Kakhki et al.'s QUIC (pure)."""
    from .analysis.stats import cross_table
    rows = cross_table(trials)
    lines = [f"one download against {FAIRNESS_FLOWS} TCP CUBIC flows: its share / its fair share and Jain's index "
             f"(Kakhki et al., IMC'17: QUIC took more than {KAKHKI_FAIRNESS:g}x its fair share against TCP)"]
    if not rows:
        return lines + ["  no cell with trials that count"]
    by: dict[tuple, dict] = {}
    for r in rows:
        if r["page_share"] is None:
            continue
        by[(r["conditions"], r["proto"])] = r
        lines.append(f"  {r['conditions']} {r['page']} {r['proto']} (n {r['n']}): {r['page_mbps']:.2f} Mbit/s beside "
                     f"the flows' {r['cross_mbps']:.2f}: share {100 * r['page_share']:.0f}% of a fair "
                     f"{100 * r['fair_share']:.0f}% ({r['page_share'] / r['fair_share']:.2f}x), Jain {r['jain']:.3f}")
    h3 = [r["page_share"] / r["fair_share"] for (c, p), r in by.items() if p == H3]
    if h3:
        most = max(h3)
        lines.append(f"  {'agrees' if most > KAKHKI_FAIRNESS else 'differs'}: h3's share is at most {most:.2f}x its fair "
                     f"share here, Kakhki's QUIC's over {KAKHKI_FAIRNESS:g}x. Theirs was Google's 2016 gQUIC (Cubic "
                     "with an emulation of N=2 connections) against Linux TCP; ours is quic-go's CUBIC against Linux "
                     "CUBIC, a browser's download that starts in slow start while the flows are at their steady "
                     "state, and FQ-CoDel gives each flow its own queue whatever its controller")
    return lines


def fairness_literature(results: Path, runs: str = "10", out: Callable[[str], None] = print) -> tuple[dict, list[str]]:
    """Issue 46's fairness entry: a 10 MB download over h3 and h2 at 20 Mbit/s and 50 ms against four
    TCP CUBIC flows, under droptail and under FQ-CoDel."""
    spec = campaign.bare({"size": "10MB", "bw": "20mbit", "rtt": "50ms", "runs": runs, "proto": f"{H3},{H2}",
                          "aqm": FAIRNESS_AQMS, "cross": f"{FAIRNESS_FLOWS}xtcp-cubic", "name": "bench-fairness"})
    c, t, _ = _run(spec, results, out)
    return c, fairness_lines(t)


REPLAY_TOLERANCE = 0.15  # issue 37: a replay's FCP, LCP and PLT medians within 15% of the live page's
REPLAY_METRICS = (("TTFB", "ttfb_ms"), ("FCP", "fcp_ms"), ("LCP", "lcp_ms"), ("PLT", "plt_ms"))
ONE_DISTANCE = "every origin at one distance"  # a replay without its origins' distances (--origin-rtt off)
AT_ONCE = "every response at once"  # ... and without its servers' think time (--think off)


def timing_way(c) -> tuple[bool, bool]:
    """Which recorded timing a replay's conditions ask: (its origins' distances, its responses' think)."""
    return (c.origin_rtt is not None, c.think is not None)


def timing_words(way: tuple[bool, bool], asked: tuple[bool, bool]) -> str:
    """A replay's way in words, where the live side asked some timing (asked: what it asked)."""
    if any(way):
        return " (with its recorded " + " and ".join(w for w, on in (("distances", way[0]), ("think time", way[1]))
                                                     if on) + ")"
    return " (" + ", ".join(w for w, on in ((ONE_DISTANCE, asked[0]), (AT_ONCE, asked[1])) if on) + ")"


def replay(results: Path, runs: str = "5", bw: str = "10mbit", rtt: str = "100ms",
           out: Callable[[str], None] = print, pages: str = "swagger,toolbelt",
           browser: str = "chromium", origin_rtt: str | None = None,
           think: str | None = None) -> tuple[dict, list[str]]:
    """Each real page named (plt_bench.pages.real; '*': the corpus) recorded afresh from its folders
    served as they are, then measured live and replayed through the same link in each browser,
    protocols (and browsers) interleaved: the replay's medians beside the live page's. origin_rtt
    (HOST=MS...): the live side's origins at those distances; think (MS): its servers thinking before
    each first byte; recorded so, and replayed both with the timing the recording kept (--origin-rtt
    recorded, --think recorded) and without it (off), each beside live, the first judged."""
    import shutil
    from . import recorder as record
    from .pages import real as realpages
    from .pages import DEFAULT_SITES, replay_root
    from .units import split_list
    counts: dict = {}
    lines = [f"replay against the live page, {bw} and {rtt}{f', origins {origin_rtt}' if origin_rtt else ''}"
             f"{f', servers thinking {think} ms' if think else ''}, {runs} "
             f"runs per protocol and browser (medians; replay / live within +-{REPLAY_TOLERANCE:.0%})"]
    names = [p.name for p in realpages.PAGES] if pages.strip() == "*" else split_list(pages, "--pages")
    chosen = [realpages.by_name(n, "--pages") for n in dict.fromkeys(names)]
    from .parts import ensure
    ensure({"pages": "bench-replay"}, out)
    realpages.ready()
    within = 0
    for page in chosen:
        name = f"bench-{page.name}"
        common = {"folder": page.folder_option, "proto": "all", "runs": runs, "bw": bw, "rtt": rtt, "browser": browser}
        far = {**({"origin_rtt": origin_rtt} if origin_rtt else {}), **({"think": think} if think else {})}
        shutil.rmtree(replay_root(DEFAULT_SITES, name), ignore_errors=True)  # recorded afresh every time
        at = campaign.bare({"size": f"url:{page.url}", **common, **far}).grid.conditions[0] if far else None
        record.record_served([page.url], [name], [(h, d, "") for h, d in page.folders], DEFAULT_SITES, note=out,
                             conditions=at)
        if far:  # the live side with its timing; the replay with the recorded timing and without (three campaigns)
            sides = [{"size": f"url:{page.url}", **far}, {"size": f"har:{name}", **{k: "recorded" for k in far}},
                     {"size": f"har:{name}"}]
        else:
            sides = [{"size": f"url:{page.url},har:{name}"}]
        trials = []
        for k, side in enumerate(sides):
            spec = campaign.bare({**common, **side, "name": f"bench-replay-{page.name}" + (f"-{k + 1}" if far else "")})
            c, ts, _ = _run(spec, results, out)
            trials += ts
            for key, v in c.items():
                if isinstance(v, int):
                    counts[key] = counts.get(key, 0) + v
        page_lines = replay_lines(page, name, trials)
        within += all(" OUT" not in x for x in page_lines if ONE_DISTANCE not in x and AT_ONCE not in x)
        lines += page_lines
    lines.append(f"  pages whose every figure held within +-{REPLAY_TOLERANCE:.0%} in every browser: {within} of "
                 f"{len(chosen)}" + (" (the replay with its recorded timing; without it: shown, not judged)"
                                     if far else ""))
    return counts, lines


def replay_lines(page, name: str, trials: list[Trial]) -> list[str]:
    """One page's replay against its live load, per browser and protocol (pure)."""
    lines = [f"  {page.name}: {page.what}"]
    for browser in sorted({t.browser or "chromium" for t in trials}, key=lambda b: (b != "chromium", b)):
        lines += _replay_browser_lines(page, name, [t for t in trials if (t.browser or "chromium") == browser],
                                       browser)
    return lines


def _replay_browser_lines(page, name: str, trials: list[Trial], browser: str) -> list[str]:
    """Per protocol, each replay (one per --origin-rtt value it ran under) beside the live load."""
    import collections
    import json
    lines = []
    ways = sorted({timing_way(t.conditions) for t in trials if t.page == f"har:{name}"}, key=lambda w: not any(w))
    live_way = next((timing_way(t.conditions) for t in trials if t.page == f"url:{page.url}"), (False, False))
    for proto in protocols.NAMES:
        live = [t for t in trials if t.proto == proto and t.page == f"url:{page.url}"]
        for way in ways:
            rep = [t for t in trials if t.proto == proto and t.page == f"har:{name}" and timing_way(t.conditions) == way]
            if not rep and not live:
                continue
            lok, rok = [t for t in live if t.counts], [t for t in rep if t.counts]
            parts = []
            for label, field in REPLAY_METRICS:
                a = [getattr(t, field) for t in lok if getattr(t, field) is not None]
                b = [getattr(t, field) for t in rok if getattr(t, field) is not None]
                if not a or not b:
                    parts.append(f"{label} -")
                    continue
                ma, mb = statistics.median(a), statistics.median(b)
                ratio = mb / ma
                parts.append(f"{label} {mb:.0f}/{ma:.0f} ms = {ratio:.3f}"
                             f"{'' if abs(ratio - 1) <= REPLAY_TOLERANCE else ' OUT'}")
            element = lambda ts: units.format_element(  # noqa: E731
                collections.Counter(t.lcp_element for t in ts).most_common(1)[0][0] if ts else None)
            unrecorded = sum(t.unrecorded or 0 for t in rep)
            overhead = lambda ts: statistics.median([t.wall_s - t.plt_ms / 1000 for t in ts]) if ts else float("nan")  # noqa: E731
            query = sum(len(json.loads(t.replay_json or "{}").get("query_matched", [])) for t in rok)
            said = "" if len(ways) == 1 else timing_words(way, live_way)
            lines.append(f"    {browser} {proto}{said}: {'; '.join(parts)}; LCP element {element(rok)} (live "
                         f"{element(lok)}); ok {len(rok)}/{len(rep)} replayed, {len(lok)}/{len(live)} live; unrecorded "
                         f"{unrecorded}; matched by query {query}; beyond the load {overhead(rok):.2f} s replayed, "
                         f"{overhead(lok):.2f} s live")
    return lines


def device_lines(trials: list[Trial]) -> list[str]:
    """Per browser and CPU budget: the page loop's slowdown (its wall time over the browser group's
    CPU time) against the budget's factor, as a ratio measured / ideal, and the trials refused
    because the machine held the browser below its budget (plt_bench.device.budget)."""
    from .device.budget import MACHINE_HELD_BACK, SLOWDOWN_TOLERANCE, quota_for
    lines = [f"CPU budget benchmark (the loop's slowdown / the budget's factor; held within "
             f"+-{SLOWDOWN_TOLERANCE:.0%})"]
    keys = sorted({(t.browser or "chromium", t.cpu_budget) for t in trials if t.cpu_budget is not None},
                  key=lambda k: (k[0], -k[1]))
    for browser, share in keys:
        mine = [t for t in trials if (t.browser or "chromium", t.cpu_budget) == (browser, share)]
        factor = quota_for(share, mine[0].cpu_cores or 1).factor
        ratios = [t.cpu_slowdown / factor for t in mine if t.cpu_slowdown]
        held = sum(1 for t in mine if (t.reason or "").startswith(MACHINE_HELD_BACK))
        plt = [t.plt_ms for t in mine if t.counts]
        lines.append(f"  {browser} {share:g} of a core (factor {factor:.2f}): slowdown/factor "
                     + (_spread(ratios, ".3f") if ratios else "no figure")
                     + f"; PLT {_spread(plt, '.0f') + ' ms' if plt else '-'}; n={len(mine)}"
                     + (f", {held} refused (the machine held it back)" if held else ""))
    return lines


def device(results: Path, runs: str = "5", cpu: str = "1,0.5,0.25", out: Callable[[str], None] = print
           ) -> tuple[dict, list[str]]:
    spec = campaign.bare({"size": "5KB", "bw": "100mbit", "rtt": "20ms", "runs": runs, "proto": "h2",
                          "browser": "chromium,firefox", "cpu": cpu, "name": "bench-device", "retries": "0"})
    counts, trials, _ = _run(spec, results, out)
    return counts, device_lines(trials)
