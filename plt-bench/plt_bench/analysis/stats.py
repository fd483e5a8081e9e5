"""Statistics of a campaign (scipy): per cell, and every value of an axis against a reference.

Per cell (conditions x page x protocol: records.CellStats), over the ok, non-warm-up trials: n,
median, mean, sd, 95% confidence interval of the median (bootstrap), coefficient of variation (a
warning above 10%). Comparisons (records.Comparison), per conditions x page, each value of the
axis (the protocol) against the reference (h3 unless chosen): % difference of the medians
((reference - other) / other: negative means the reference is faster), Welch's t-test and the
Mann-Whitney U test, their p-values corrected over every comparison of the report (Holm by
default, or Benjamini-Hochberg), and effect sizes (Hedges' g; Cliff's delta). The design follows
pyperf's compare_to and hyperfine's relative speed: one typed result per cell, each compared
against one chosen reference rather than every pair against every other.

Note on small samples: a two-sided Mann-Whitney test on 5 + 5 trials cannot go below p = 0.008,
so after correcting for many cells it can never be significant; the primary test is therefore
Welch's t-test unless --test mannwhitney is asked for, and the report says so.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import defaultdict

import numpy as np
from scipy import stats as sps

from .. import cpu as cpu_mod
from .. import protocols
from ..browsers import NAMES as BROWSER_NAMES
from ..conditions import AXIS_KEYS, CONGESTION_CONTROLS, VARIANT_AXES, budget_of, device_of, transfer_seconds
from ..pages import parse_page, url_host
from ..servers import NAMES as SERVER_NAMES, SERVERS
from ..device.profiles import PROFILES
from ..errors import UsageError
from ..device.calibrate import calibration_diff
from ..metadata import key_diff
from ..precision import median_ci, precision_stop
from ..records import AXES, CELL_FIELDS, CORRECTIONS, DEFAULT_METRIC, METRICS, TESTS, CellStats, Comparison, Trial, metric_value

CV_WARN = 0.10
ALPHA = 0.05


def usable(trials: list[Trial], measures: str | None = "page") -> list[Trial]:
    """The trials statistics are made of (Trial.counts: ok, timed, not a warm-up), of one kind
    (Trial.measures): "page" for page-load times, "bulk" for throughput, "requests" for request
    latency; None: every kind (the navigation's establishment is in every trial)."""
    return [t for t in trials if t.counts and (measures is None or t.measures == measures)]


def diff_pct_ci(a: np.ndarray, b: np.ndarray, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95% CI of the diff % of two samples' medians, (median(a) - median(b)) / median(b)
    x 100, each sample resampled on its own (nan below three values in either)."""
    if len(a) < 3 or len(b) < 3:
        return float("nan"), float("nan")
    if np.all(a == a[0]) and np.all(b == b[0]):
        d = (float(a[0]) - float(b[0])) / float(b[0]) * 100.0
        return d, d

    def diff(x, y, axis=-1):
        my = np.median(y, axis=axis)
        return (np.median(x, axis=axis) - my) / my * 100.0
    res = sps.bootstrap((a, b), diff, confidence_level=confidence, n_resamples=2000, method="percentile",
                        vectorized=True, paired=False, random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def unpooled(trials: list[Trial], hosts: dict[str, dict]) -> tuple[list[Trial], list[str]]:
    """A cluster's campaign: trials of one cell from hosts whose key metadata differ (a named
    device's calibration among them: each host calibrates its own) are never pooled. Such a cell keeps the trials of the host with the most ok ones (the first on a tie) and
    a warning says which were left out and why. Returns (trials kept, warnings)."""
    by_cell: dict[tuple, dict[str, list[Trial]]] = defaultdict(lambda: defaultdict(list))
    for t in trials:
        by_cell[(t.conditions.label, t.page)][t.host].append(t)
    dropped: set[int] = set()
    warnings = []
    for (cond, page), per_host in by_cell.items():
        names = sorted(per_host, key=lambda h: (-sum(t.ok for t in per_host[h]), min(t.seq for t in per_host[h])))
        keep = names[0]
        for other in names[1:]:
            a, b = hosts.get(keep, {}), hosts.get(other, {})
            diff = key_diff(a, b) + calibration_diff(a.get("devices"), b.get("devices"))
            if diff:
                dropped |= {id(t) for t in per_host[other]}
                warnings.append(f"{cond} {page}: {len(per_host[other])} trial(s) of {other} left out of the statistics: "
                                f"its {', '.join(diff)} differ from {keep}'s, which measured the rest")
    return [t for t in trials if id(t) not in dropped], warnings


def hosts_table(trials: list[Trial]) -> list[list[str]]:
    """Which host measured each cell (a cluster's campaign), and on which CPUs: [head, *rows]; []
    on one machine."""
    per: dict[tuple, dict[tuple, int]] = defaultdict(lambda: defaultdict(int))
    for t in trials:
        if t.host:
            per[(t.conditions.label, t.page)][(t.host, t.cpus or "")] += 1
    if not per:
        return []
    return [["link", "page", "host [CPUs] (trials)"]] + [
        [c, p, ", ".join(f"{h}{f' [{cpus}]' if cpus else ''} ({n})" for (h, cpus), n in sorted(hs.items()))]
        for (c, p), hs in per.items()]


def precision_table(grid: dict, trials: list[Trial]) -> dict | None:
    """A precision campaign's cells (grid: the campaign's stored definition): runs per protocol, the
    medians' half widths and why each stopped (precision_stop on all its counted trials' values of
    the metric the campaign judged precision by, its --metric; "unfinished" when neither held).
    None for a campaign of fixed runs."""
    if grid.get("precision_pct") is None:
        return None
    metric = grid.get("metric") or DEFAULT_METRIC
    listed = {a: (lambda v: [v] if isinstance(v, str) else list(v))(grid.get(AXIS_KEYS[a]) or default)
              for a, default in VARIANT_AXES.items()}
    vary = [a for a, v in listed.items() if len(v) > 1]  # as the campaign judged: per protocol, cc, browser, server

    def kind(proto: str, values: dict) -> str:
        return " ".join([proto, *(values[a] for a in vary)])
    protos = tuple(kind(p, dict(zip(listed, v))) for p in (protocols.get(p).name for p in grid.get("protos") or ())
                   for v in itertools.product(*listed.values()))
    by: dict[tuple, dict[str, list[float]]] = {}
    for t in usable(trials):
        v = metric_value(t, metric)
        if v is not None:
            key = kind(t.proto, {a: axis_value(t, a) for a in VARIANT_AXES})
            by.setdefault((t.label, t.page), {}).setdefault(key, []).append(float(v))
    cells = []
    for (cond, page), times in by.items():
        why, widths = precision_stop(times, grid["precision_pct"], grid["runs"], grid["max_runs"], protos)
        cells.append({"conditions": cond, "page": page, "n": {p: len(times.get(p, [])) for p in protos},
                      "half_width_pct": widths, "stopped": why or "unfinished"})
    return {"target_pct": grid["precision_pct"], "min_runs": grid["runs"], "max_runs": grid["max_runs"],
            "protos": protos, "cells": cells, "metric": metric}


def distinct_traces(trials: list[Trial]) -> list[Trial]:
    """Trials whose conditions name a trace that another trace of the same name shares here (two
    campaigns' files, pooled by `--campaign all`): that trace is named with its hash's first 8 hex
    digits (trace:lte@1a2b3c4d), so that cells, which are keyed by labels, never pool two links.
    Trials of names that are not shared are returned as they are (a campaign's report as before)."""
    hashes: dict[str, set[str]] = defaultdict(set)
    for t in trials:
        c = t.conditions
        for name, sha in ((c.trace_down, c.trace_down_sha256), (c.trace_up, c.trace_up_sha256)):
            if name:
                hashes[name].add(sha or "")
    shared = {name for name, shas in hashes.items() if len(shas) > 1}
    if not shared:
        return trials

    def renamed(name, sha):
        return f"{name}@{(sha or 'unknown')[:8]}" if name in shared else name
    out = []
    for t in trials:
        c = t.conditions
        if c.trace_down in shared or c.trace_up in shared:
            c = dataclasses.replace(c, trace_down=renamed(c.trace_down, c.trace_down_sha256),
                                    trace_up=renamed(c.trace_up, c.trace_up_sha256))
            t = dataclasses.replace(t, conditions=c)
        out.append(t)
    return out


def cell_key(t: Trial) -> tuple:
    """(conditions' label, page's label, protocol, congestion control, browser, server, budget;
    records.CELL_FIELDS): the labels hold every field of the conditions and of the page (5KB, 200x5KB)."""
    return (t.label, t.page, axis_value(t, "proto"), *(axis_value(t, a) for a in VARIANT_AXES))


def axis_value(t: Trial, axis: str) -> str:
    """A trial's value of a comparison's axis (records.AXES): its protocol, or of an axis beside it
    (conditions.VARIANT_AXES) its own, else that axis's default (cubic for a trial stored without a
    congestion control, chromium before schema 18, caddy before schema 20)."""
    if axis == "proto":
        return t.proto
    return getattr(t, axis) or VARIANT_AXES[axis]


def _page_fields(t: Trial) -> dict:
    return {"page": t.page, "size_bytes": t.size_bytes, "objects": t.objects}


def cells(trials: list[Trial], metric: str = DEFAULT_METRIC) -> dict[tuple, CellStats]:
    """Per (conditions, page, proto, cc, browser, server, budget): the cell's statistics of a metric (records.CellStats); a
    trial that counts but has no value of it (no LCP reported) is counted apart, never as zero."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    meta: dict[tuple, Trial] = {}
    bound: dict[tuple, list[str]] = defaultdict(list)
    unjudged: dict[tuple, int] = defaultdict(int)
    missing: dict[tuple, list[Trial]] = defaultdict(list)
    for t in usable(trials):
        v = metric_value(t, metric)
        if v is None:
            missing[cell_key(t)].append(t)
            continue
        groups[cell_key(t)].append(v)
        meta.setdefault(cell_key(t), t)
        if t.cpu_bound:
            bound[cell_key(t)].append(t.cpu_bound)
        if cpu_mod.judged(t.cpu) is False:
            unjudged[cell_key(t)] += 1
    out = {}
    for k, v in groups.items():
        x = np.asarray(v)
        sd = float(np.std(x, ddof=1)) if len(x) > 1 else float("nan")
        lo, hi = median_ci(x)
        cv = sd / float(np.mean(x)) if len(x) > 1 else float("nan")
        warn = []
        if missing[k]:
            why = next((t.paint_reason for t in missing[k] if t.paint_reason), "not recorded (a trial before schema 14)")
            warn.append(f"{len(missing[k])} trial(s) have no {METRICS[metric].label}, left out: {why}")
        if len(x) > 1 and cv > CV_WARN:
            warn.append(f"CV {cv:.0%} > {CV_WARN:.0%}: unstable; add --runs or check the machine's load (busy_pct)")
        c = meta[k].conditions
        if bound[k]:
            warn.append(f"{len(bound[k])} of {len(x)} trials CPU-bound ({cpu_bound_roles(bound[k])}): "
                        + cpu_bound_meaning(meta[k].body_bytes, c.rate_down_bps, float(np.median(x))))
        out[k] = CellStats(conditions=k[0], page=k[1], size_bytes=meta[k].size_bytes, objects=meta[k].objects,
                           proto=k[2], cc=k[3], browser=k[4], server=k[5], budget=k[6], rate_down_bps=c.rate_down_bps, rtt_ms=c.rtt_ms, jitter_ms=c.jitter_ms,
                           loss_pct=c.loss_pct, n=len(x), median_ms=float(np.median(x)), mean_ms=float(np.mean(x)),
                           sd_ms=sd, ci_low_ms=lo, ci_high_ms=hi, cv=cv, n_cpu_bound=len(bound[k]),
                           cpu_bound_roles=cpu_bound_roles(bound[k]), n_cpu_unjudged=unjudged[k], warnings=tuple(warn),
                           metric=metric, n_no_metric=len(missing[k]), trace_down=c.trace_down)
    return out


def cpu_bound_meaning(body_bytes: int, rate_bps: int | None, median_ms: float) -> str:
    """What a CPU-bound flag means for a cell: for a throughput-bound load (its payload alone takes
    half its time or more at the link's rate) this machine's CPU capped what the link could deliver;
    for a latency-bound load (handshakes, requests, rendering) the CPU time is the page's own
    processing on a machine like this one, a part of its load time rather than a cap on the network."""
    ideal_ms = 1000.0 * transfer_seconds(body_bytes, rate_bps) if rate_bps else 0.0
    if ideal_ms >= 0.5 * median_ms:
        return (f"throughput-bound load (its payload alone takes {ideal_ms:.0f} of its {median_ms:.0f} ms at the "
                "rate): a CPU limit of this machine capped what the link could deliver, not the network's result")
    return (f"latency-bound load (its payload takes {ideal_ms:.0f} of its {median_ms:.0f} ms at the rate): the "
            "CPU time is the page's own processing on this machine, part of its load time, not a cap on the link")


def cpu_bound_roles(roles: list[str]) -> str:
    """The roles that limited a cell's trials, most frequent first: "machine", "machine x2, renderer"."""
    from collections import Counter
    counts = Counter(roles).most_common()
    return ", ".join(r if n == 1 or len(counts) == 1 else f"{r} x{n}" for r, n in counts)


def holm(p: list[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values (NaN stays NaN)."""
    idx = [i for i, v in enumerate(p) if not math.isnan(v)]
    order = sorted(idx, key=lambda i: p[i])
    m = len(order)
    adj = [float("nan")] * len(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adj[i] = running
    return adj


def bh(p: list[float]) -> list[float]:
    idx = [i for i, v in enumerate(p) if not math.isnan(v)]
    adj = [float("nan")] * len(p)
    if idx:
        fixed = sps.false_discovery_control([p[i] for i in idx], method="bh")
        for i, v in zip(idx, fixed):
            adj[i] = float(v)
    return adj


def hedges_g(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return float("nan")
    sp = math.sqrt(((na - 1) * np.var(a, ddof=1) + (nb - 1) * np.var(b, ddof=1)) / (na + nb - 2))
    if sp == 0:
        return float("nan")
    return (float(np.mean(a)) - float(np.mean(b))) / sp * (1 - 3 / (4 * (na + nb) - 9))


def cliffs_delta(a: np.ndarray, b: np.ndarray) -> float:
    """P(a > b) - P(a < b): -1 means every load of a was faster than every load of b."""
    if not len(a) or not len(b):
        return float("nan")
    gt = sum(int(x > y) for x in a for y in b)
    lt = sum(int(x < y) for x in a for y in b)
    return (gt - lt) / (len(a) * len(b))


def sort_key(r: dict) -> tuple:
    """Numeric order: rate (unshaped last), RTT, jitter, loss, then the page (its bytes, its objects)."""
    rate = r.get("rate_down_bps")
    return (rate is None, rate or 0, r.get("rtt_ms") or 0, r.get("jitter_ms") or 0, r.get("loss_pct") or 0,
            r["conditions"], r["size_bytes"], r.get("objects", 0))


def axis_order(axis: str):
    """How an axis's values are ordered in tables: protocols as their table (h3, h2, h1), congestion
    controls as conditions.CONGESTION_CONTROLS, browsers as browsers.NAMES (chromium first), servers
    as servers.NAMES (caddy first), CPU budgets from none (full) to the smallest, then devices as
    device.profiles lists them."""
    if axis == "proto":
        return protocols.order
    if axis == "budget":  # no budget first, the largest share of a core down to the smallest, then devices
        names = list(PROFILES)
        return lambda v: (1.0 + names.index(v)) if device_of(v) else -2.0 if budget_of(v) is None else -budget_of(v)
    known = {"cc": CONGESTION_CONTROLS, "browser": BROWSER_NAMES, "server": SERVER_NAMES}[axis]
    return lambda v: known.index(v) if v in known else len(known)


def reference_for(values: list[str], asked: str | None = None, option: str = "--reference", axis: str = "proto",
                  listed: tuple[str, ...] = ()) -> str:
    """The reference of the comparisons among the values an axis took: the one asked for, which
    must be among them; else for protocols h3 where it ran, else the first listed (or in the
    table's order); for another axis the first listed."""
    if asked is not None:
        name = str(asked).strip().lower()  # one rule for case, as --proto and --cc read theirs
        name = protocols.STORED_BEFORE_13.get(name, name) if axis == "proto" else name
        if name not in values:
            raise UsageError(f"{option}: '{asked}' was not run here; expected one of {', '.join(values) or 'none'}")
        return name
    if axis == "proto" and protocols.DEFAULT_REFERENCE in values:
        return protocols.DEFAULT_REFERENCE
    first = [v for v in listed if v in values] or list(values)
    return first[0] if first else protocols.DEFAULT_REFERENCE


def samples(trials: list[Trial], metric: str = DEFAULT_METRIC) -> dict[tuple, list[float]]:
    """Every value of the metric (ms) per cell (cell_key), over the trials that count, in their order."""
    out: dict[tuple, list[float]] = defaultdict(list)
    for t in usable(trials):
        v = metric_value(t, metric)
        if v is not None:
            out[cell_key(t)].append(v)
    return dict(out)


def _samples_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(Welch's p, Mann-Whitney's p, Kolmogorov-Smirnov's p) of two samples; nan below two values each.
    KS (scipy's exact distribution for small samples) asks whether one distribution could give both,
    in any way: two modes in different shares differ there where the means and ranks may not."""
    welch = mw = ks = float("nan")
    if len(a) >= 2 and len(b) >= 2:
        if np.var(a) + np.var(b) > 0:
            welch = float(sps.ttest_ind(a, b, equal_var=False).pvalue)
        elif np.mean(a) != np.mean(b):
            welch = 0.0  # no spread at all and different values: as different as can be
        mw = float(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)
        ks = float(sps.ks_2samp(a, b).pvalue)
    return welch, mw, ks


def compare(trials: list[Trial], test: str = "welch", correction: str = "holm", alpha: float = ALPHA,
            reference: str | None = None, axis: str = "proto", listed: tuple[str, ...] = (),
            metric: str = DEFAULT_METRIC) -> list[Comparison]:
    """Every value of the axis against the reference, for every conditions x page that has both:
    typed comparisons (records.Comparison) in numeric order, p-values corrected over all of them."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}")
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {CORRECTIONS}")
    per = cells(trials, metric)
    by_cell = samples(trials, metric)
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}")
    # the values the axis ran with (a protocol whose every trial failed ran too: it may be asked for,
    # and its comparisons are simply absent)
    values = sorted({getattr(c, axis) for c in per.values()} | {axis_value(t, axis) for t in trials},
                    key=axis_order(axis))
    ref = reference_for(values, reference, axis=axis, listed=listed)
    groups: dict[tuple, dict[str, CellStats]] = defaultdict(dict)
    for c in per.values():  # a group: everything but the axis (its conditions, page and the other axis)
        groups[tuple(v for f, v in zip(CELL_FIELDS, c.key) if f != axis)][getattr(c, axis)] = c
    raw = []
    for members in groups.values():
        r = members.get(ref)
        if r is None:
            continue
        for value in values:
            o = members.get(value)
            if value == ref or o is None:
                continue
            a, b = np.asarray(by_cell[r.key]), np.asarray(by_cell[o.key])
            welch, mw, ks = _samples_test(a, b)
            lo, hi = diff_pct_ci(a, b)
            raw.append(Comparison(axis=axis, reference=r, other=o, diff_pct=(r.median_ms - o.median_ms) / o.median_ms * 100.0,
                                  diff_ci_low_pct=lo, diff_ci_high_pct=hi, p_welch=welch, p_mannwhitney=mw,
                                  p_ks=ks, hedges_g=hedges_g(a, b), cliffs_delta=cliffs_delta(a, b), test=test,
                                  correction=correction))
    raw.sort(key=lambda c: (*sort_key(c.reference.row()), protocols.order(c.reference.proto), c.reference.cc, c.reference.browser, c.reference.server,
                            axis_order(axis)(c.other_value)))
    primary = [c.p_test for c in raw]
    adjusted = holm(primary) if correction == "holm" else bh(primary)
    out = []
    for c, p in zip(raw, adjusted):
        sig = bool(not math.isnan(p) and p < alpha)
        faster = (c.reference_value if c.diff_pct < 0 else c.other_value) if sig else "neither (not significant)"
        out.append(dataclasses.replace(c, p_adjusted=p, significant=sig, faster=faster))
    return out


# -- throughput (bulk pages) ------------------------------------------------------------------------------
def _mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    x = np.asarray(values) / 1e6
    return float(np.mean(x)), float(np.std(x, ddof=1)) if len(x) > 1 else None


def datarate_table(trials: list[Trial]) -> list[dict]:
    """The seeds' datarate-vs-loss table: per (conditions, bulk page, protocol), over the bulk trials
    that count, the mean and sd in Mbit/s of the link's throughput (its own counter) and of the
    browser's goodput; n_link: trials with the link's figure (none where it could not be read)."""
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in usable(trials, "bulk"):
        groups[cell_key(t)].append(t)
    rows = []
    for (cond, page, proto, cc, browser, server, budget), ts in groups.items():
        c = ts[0].conditions
        link = [t.throughput_bps for t in ts if t.throughput_bps is not None]
        good = [t.goodput_bps for t in ts if t.goodput_bps is not None]
        (lm, lsd), (gm, gsd) = _mean_sd(link), _mean_sd(good)
        rows.append({"conditions": cond, "page": page, "proto": proto, "cc": cc, "browser": browser, "server": server, "budget": budget,
                     "rate_down_bps": c.rate_down_bps,
                     "rtt_ms": c.rtt_ms, "jitter_ms": c.jitter_ms, "loss_pct": c.loss_pct, "size_bytes": 0,
                     "objects": 0, "bulk_ms": ts[0].bulk_ms, "n": len(ts), "n_link": len(link),
                     "throughput_mean_mbps": lm, "throughput_sd_mbps": lsd,
                     "goodput_mean_mbps": gm, "goodput_sd_mbps": gsd})
    rows.sort(key=lambda r: (*sort_key(r), r["bulk_ms"], protocols.order(r["proto"])))
    return rows


def throughput_series(trials: list[Trial]) -> list[dict]:
    """One row per interval of every bulk trial that counts: the link's Mbit/s (or None) and the
    browser's, with the trial's cell, for the over-time figure."""
    out = []
    for t in usable(trials, "bulk"):
        s = t.series
        if not s:
            continue
        step = s["interval_s"]
        link = s.get("link_bytes") or [None] * len(s["browser_bytes"])
        for k, (b, l) in enumerate(zip(s["browser_bytes"], link)):
            out.append({"conditions": t.label, "page": t.page, "proto": t.proto, "run_index": t.run_index,
                        "rate_down_bps": t.conditions.rate_down_bps, "rtt_ms": t.conditions.rtt_ms,
                        "loss_pct": t.conditions.loss_pct, "t_s": (k + 1) * step,
                        "browser_mbps": 8 * b / step / 1e6, "link_mbps": None if l is None else 8 * l / step / 1e6})
    return out


# -- request latency and establishment ---------------------------------------------------------------------
def latency_table(trials: list[Trial]) -> list[dict]:
    """Per (conditions, request page, protocol), the requests of all its counted trials pooled: n
    (trials), n_requests, p50/p90/p99 in ms, and the connections the trials used (median)."""
    from ..pages.requests import percentiles, request_latencies
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in usable(trials, "requests"):
        groups[cell_key(t)].append(t)
    rows = []
    for (cond, page, proto, cc, browser, server, budget), ts in groups.items():
        lat = [x for t in ts for x in request_latencies(parse_page(page, "a stored trial's page"), t.resources)]
        p = percentiles(lat) or {}
        c = ts[0].conditions
        conns = [t.connections for t in ts if t.connections]
        rows.append({"conditions": cond, "page": page, "proto": proto, "cc": cc, "browser": browser, "server": server, "budget": budget,
                     "rate_down_bps": c.rate_down_bps, "rtt_ms": c.rtt_ms, "jitter_ms": c.jitter_ms,
                     "loss_pct": c.loss_pct, "size_bytes": ts[0].object_bytes, "objects": 0, "requests": ts[0].requests,
                     "streams": ts[0].streams, "n": len(ts), "n_requests": len(lat),
                     "connections": float(np.median(conns)) if conns else None,
                     "p50_ms": p.get(50), "p90_ms": p.get(90), "p99_ms": p.get(99)})
    rows.sort(key=lambda r: (*sort_key(r), r["requests"], r["streams"], protocols.order(r["proto"])))
    return rows


def establishment_table(trials: list[Trial]) -> list[dict]:
    """Per (RTT, protocol) over every counted trial (each navigation opens a fresh connection):
    median connect and first-byte times, in ms and in round trips, beside the protocols' need
    (protocols.Protocol.connect_rtts, first_byte_rtts). Only links with an RTT, and without loss or jitter (a lost handshake
    packet is not the handshake's cost)."""
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in usable(trials, None):
        c = t.conditions
        # a first byte Firefox did not time (an h1 document's: browsers.firefox) leaves the connect alone
        if (c.rtt_ms and not c.loss_pct and not c.jitter_ms and t.connect_ms is not None
                and (t.visit or "first") == "first"  # a repeat visit's connection may resume (0-RTT)
                and t.proto in protocols.NAMES):  # as recorded, the document's protocol is its origin's
            groups[(c.rtt_ms, t.proto, axis_value(t, "browser"))].append(t)
    rows = []
    for (rtt, proto, browser), ts in sorted(groups.items(), key=lambda kv: (kv[0][0], protocols.order(kv[0][1]),
                                                                            kv[0][2])):
        timed = [t.ttfb_ms for t in ts if t.ttfb_ms is not None]
        connect, first = float(np.median([t.connect_ms for t in ts])), float(np.median(timed)) if timed else None
        rows.append({"rtt_ms": rtt, "proto": proto, "browser": browser, "n": len(ts), "connect_ms": connect,
                     "first_byte_ms": first, "connect_rtts": connect / rtt,
                     "first_byte_rtts": None if first is None else first / rtt,
                     "expected_connect_rtts": protocols.get(proto).connect_rtts,
                     "expected_first_byte_rtts": protocols.get(proto).first_byte_rtts})
    return rows


def visitor_table(trials: list[Trial]) -> list[dict]:
    """What a visitor sees, per (conditions, page, protocol, cc) over the page loads that count and
    read paint metrics (schema 14 on): medians of TTFB, FCP, LCP and PLT, what the LCP was (the most
    frequent element), the trials without an LCP, and the median connections per origin."""
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in usable(trials):
        if t.fcp_ms is not None or t.paint_reason:
            groups[cell_key(t)].append(t)
    rows = []
    for key, ts in groups.items():
        def med(field):
            vals = [getattr(t, field) for t in ts if getattr(t, field) is not None]
            return float(np.median(vals)) if vals else None
        elements = [t.lcp_element for t in ts if t.lcp_element]
        hosts = sorted({h for t in ts for h in t.connections_per_origin}, key=lambda h: (h != url_host(ts[0].url), h))
        per_origin = {h: float(np.median([t.connections_per_origin.get(h, 0) for t in ts])) for h in hosts}
        c = ts[0].conditions
        rows.append({"conditions": key[0], "page": key[1], "proto": key[2], "cc": key[3], "browser": key[4], "server": key[5], "budget": key[6],
                     "n": len(ts),
                     "rate_down_bps": c.rate_down_bps, "rtt_ms": c.rtt_ms, "size_bytes": ts[0].size_bytes,
                     "objects": ts[0].objects, "origins": ts[0].origins or 1,
                     "dns_ms": med("dns_ms"), "ttfb_ms": med("ttfb_ms"), "fcp_ms": med("fcp_ms"), "lcp_ms": med("lcp_ms"), "plt_ms": med("plt_ms"),
                     "first_visual_change_ms": med("first_visual_change_ms"), "speed_index_ms": med("speed_index_ms"),
                     "visually_complete_ms": med("visually_complete_ms"),
                     "lcp_element": max(set(elements), key=elements.count) if elements else None,
                     "n_no_lcp": sum(t.lcp_ms is None for t in ts), "connections_per_origin": per_origin,
                     "connections": med("connections")})
    return sorted(rows, key=lambda r: (*sort_key(r)[:6], r["objects"], r["origins"], protocols.order(r["proto"]), r["cc"],
                                       r["browser"], r["server"]))


def bottleneck_table(trials: list[Trial]) -> list[dict]:
    """What a queue discipline (--aqm) did during the page loads that count, per (conditions, page,
    protocol, ...) and direction: its drops, CE marks and a full queue's drops per trial (means), the
    mean sojourn of what it sent (the median of the trials'), and the share of the trial's packets
    that asked for ECN (ECT or CE): empty without --aqm."""
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in usable(trials):
        if t.conditions.aqm is not None:
            groups[cell_key(t)].append(t)
    rows = []
    for key, ts in groups.items():
        for direction in ("down", "up"):
            dirs = [(t.link.get("dirs") or {}).get(direction) or {} for t in ts]
            b = [d.get("bottleneck") or {} for d in dirs]
            if not any(b):
                continue
            mean = lambda k: float(np.mean([x.get(k, 0) for x in b]))  # noqa: E731
            soj = [x["sojourn_mean_us"] / 1000 for x in b if x.get("sojourn_mean_us") is not None]
            ecn = [d.get("ecn") or {} for d in dirs]
            total = sum(sum(e.values()) for e in ecn)
            asked = sum(e.get("ect0", 0) + e.get("ect1", 0) + e.get("ce", 0) for e in ecn)
            rows.append({"conditions": key[0], "page": key[1], "proto": key[2], "cc": key[3], "browser": key[4],
                         "server": key[5], "budget": key[6], "direction": direction, "n": len(ts),
                         "aqm": ts[0].conditions.aqm.text, "ecn": ts[0].conditions.ecn,
                         "aqm_drops": mean("aqm_drops"), "marks": mean("marks"), "overlimit_drops": mean("overlimit_drops"),
                         "sojourn_ms": float(np.median(soj)) if soj else None,
                         "ecn_capable_share": asked / total if total else None})
    return sorted(rows, key=lambda r: (r["conditions"], r["page"], protocols.order(r["proto"]), r["cc"], r["browser"],
                                       r["server"], r["direction"]))


def ecn_table(trials: list[Trial]) -> list[dict]:
    """Who negotiated ECN and what marks the endpoints saw (--ecn; link.ecn), per cell over the page
    loads that count, from each side's own figures: TCP connections that negotiated ECN of those
    opened (the kernel's, browser and server side) and the server's packets acknowledged with ECE
    (tcpi_delivered_ce: the echo repeats until the sender's CWR, so one mark counts several); QUIC
    connections whose ECN the server validated, and the CE count the browser's ACKs reported, as
    the browser's log and the server's read it (means per trial; None where no log was captured)."""
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in usable(trials):
        if t.conditions.ecn and t.link.get("endpoints_ecn"):
            groups[cell_key(t)].append(t)
    rows = []

    def measured(es, side, k):  # the trials' figures of one side, where it was measured (a QUIC log read)
        got = [e[side][k] for e in es if e.get(side) and e[side].get("source", "kernel") is not None]
        return got if got and None not in got else None

    def total(es, side, k):
        got = measured(es, side, k)
        return sum(got) if got else None

    def mean(es, side, k):
        got = measured(es, side, k)
        return float(np.mean(got)) if got else None

    for key, ts in groups.items():
        es = [t.link["endpoints_ecn"] for t in ts]
        rows.append({"conditions": key[0], "page": key[1], "proto": key[2], "cc": key[3], "browser": key[4],
                     "server": key[5], "budget": key[6], "n": len(ts),
                     **{f"tcp_{side}_{k}": total(es, f"tcp_{side}", k) for side in ("browser", "server")
                        for k in ("connections", "negotiated")},
                     "tcp_server_ce_delivered": mean(es, "tcp_server", "ce_delivered"),
                     "quic_connections": total(es, "quic_server", "connections"),
                     "quic_validated": total(es, "quic_server", "validated"),
                     "quic_ce_browser_log": mean(es, "quic_browser", "ce"),
                     "quic_ce_server_log": mean(es, "quic_server", "ce"),
                     "quic_why": next((e[s]["why"] for e in es for s in ("quic_browser", "quic_server")
                                       if e.get(s) and e[s].get("why")), None)})
    return sorted(rows, key=lambda r: (r["conditions"], r["page"], protocols.order(r["proto"]), r["cc"], r["browser"],
                                       r["server"]))


def jain(xs: list[float]) -> float | None:
    """Jain's fairness index of the shares (pure): (sum x)^2 / (n sum x^2), 1 when all are equal,
    1/n when one takes everything."""
    xs = [x for x in xs if x is not None]
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if xs and sq else None


def cross_table(trials: list[Trial]) -> list[dict]:
    """The page beside competing flows (--cross), per cell over the page loads that count: the page's
    mean rate over its load (its bytes over its PLT), the flows' (cross_mbps, at their receiver), the
    page's share of what both carried, its fair share (1 / (flows + 1)) and Jain's index over the
    page and each flow (the flows' rate split evenly among them: their aggregate is what is measured);
    beside a web background (its short transfers: no flows) neither the fair share nor Jain's index."""
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in usable(trials):
        if t.conditions.cross is not None and t.cross_mbps is not None and t.plt_ms:
            groups[cell_key(t)].append(t)
    rows = []
    for key, ts in groups.items():
        flows = ts[0].conditions.cross_flows
        # a page whose bytes are not known beforehand (url:, a served folder's) has no rate here: not 0
        page = float(np.median([t.size_bytes * 8 / t.plt_ms / 1000 for t in ts])) if ts[0].size_bytes else None
        cross = float(np.median([t.cross_mbps for t in ts]))
        rows.append({"conditions": key[0], "page": key[1], "proto": key[2], "cc": key[3], "browser": key[4],
                     "server": key[5], "budget": key[6], "n": len(ts), "cross": ts[0].conditions.cross,
                     "page_mbps": page, "cross_mbps": cross,
                     "page_share": page / (page + cross) if page is not None and page + cross else None,
                     # a web background (flows 0: short transfers) has no fair share to set the page against
                     "fair_share": 1 / (flows + 1) if flows else None,
                     "jain": jain([page] + [cross / flows] * flows) if page is not None and flows else None})
    return sorted(rows, key=lambda r: (r["conditions"], r["page"], protocols.order(r["proto"])))


def origins_table(trials: list[Trial]) -> list[dict]:
    """Each origin's distance per cell (--origin-rtt; link.origins): over every trial that proved it
    (the ok ones and those failed for it, warm-ups apart), the path delay and the round trip asked,
    the shortest handshake the browser measured per trial (median, min, max over the trials) and in
    how many trials it was within its tolerance."""
    import json
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for t in trials:
        if not t.origin_rtts_json or t.warmup:
            continue
        try:
            figures = json.loads(t.origin_rtts_json)
        except ValueError:
            continue
        for host, f in figures.items():
            groups[(*cell_key(t), host)].append(f)
    rows = []
    for key, fs in groups.items():
        measured = [f["measured_ms"] for f in fs if f.get("measured_ms") is not None]
        rows.append({"conditions": key[0], "page": key[1], "proto": key[2], "cc": key[3], "browser": key[4],
                     "server": key[5], "budget": key[6], "host": key[-1], "n": len(fs),
                     "path_ms": fs[0].get("path_ms"), "expected_ms": fs[0].get("expected_ms"),
                     "measured_ms": float(np.median(measured)) if measured else None,
                     "min_ms": min(measured, default=None), "max_ms": max(measured, default=None),
                     "within": sum(1 for f in fs if f.get("ok"))})
    return sorted(rows, key=lambda r: (r["conditions"], r["page"], protocols.order(r["proto"]), r["browser"],
                                       -(r["path_ms"] or 0), r["host"]))


def think_table(trials: list[Trial]) -> list[dict]:
    """The servers' think time per cell (--think; pages.timing): over every trial that proved it (the ok
    ones and those failed for it, warm-ups apart), the think asked, the responses held, the waits
    asked and waited (medians over the trials of each trial's median, and the largest of any
    response), and in how many trials every response was held as asked."""
    import json
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for t in trials:
        if not t.think_json or t.warmup:
            continue
        try:
            groups[cell_key(t)].append(json.loads(t.think_json))
        except ValueError:
            continue
    rows = []
    for key, fs in groups.items():
        def median_of(field: str, stat: str) -> float | None:
            xs = [f[field][stat] for f in fs if isinstance(f.get(field), dict) and f[field].get(stat) is not None]
            return float(np.median(xs)) if xs else None
        rows.append({"conditions": key[0], "page": key[1], "proto": key[2], "cc": key[3], "browser": key[4],
                     "server": key[5], "budget": key[6], "think": fs[0].get("think"), "n": len(fs),
                     "responses": float(np.median([f.get("responses") or 0 for f in fs])),
                     "asked_ms": median_of("asked_ms", "median"), "asked_max_ms": max(
                         (f["asked_ms"]["max"] for f in fs if isinstance(f.get("asked_ms"), dict)), default=None),
                     "waited_ms": median_of("waited_ms", "median"),
                     "over_ms": max((f.get("over_ms") or 0.0 for f in fs), default=None),
                     "held": sum(1 for f in fs if f.get("ok"))})
    return sorted(rows, key=lambda r: (r["conditions"], r["page"], protocols.order(r["proto"]), r["browser"]))


def replay_table(trials: list[Trial]) -> list[dict]:
    """Per (conditions, page, protocol) of replayed recordings (trials with replay evidence): trials
    ok of all, the requests the recording did not hold and those matched by query (all attempts),
    and the responses per protocol over the ok trials: one protocol's, those proven at both ends;
    as recorded, those served over each origin's own protocol, the mix (browser.judge_archive)."""
    import json
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in trials:
        if t.replay_json and not t.warmup:
            groups[(t.label, t.page, t.proto)].append(t)
    rows = []
    for (cond, page, proto), ts in groups.items():
        proven: dict[str, int] = {}
        evidence = [(t, json.loads(t.replay_json)) for t in ts]  # each trial's read once
        for t, ev in evidence:
            if t.ok:
                for p, n in counts_of(ev["protocols"] if "protocols" in ev else {proto: ev.get("proven", 0)}).items():
                    proven[p] = proven.get(p, 0) + n
        rows.append({"conditions": cond, "page": page, "proto": proto, "n": len(ts), "ok": sum(t.ok for t in ts),
                     "rate_down_bps": ts[0].conditions.rate_down_bps, "rtt_ms": ts[0].conditions.rtt_ms,
                     "size_bytes": ts[0].size_bytes, "objects": ts[0].objects,
                     "unrecorded": sum(t.unrecorded or 0 for t in ts),
                     "browser_own": sum(len(ev.get("browser_own") or []) if isinstance(ev.get("browser_own"), list)
                                        else 0 for _, ev in evidence),
                     "query_matched": sum(len(ev.get("query_matched") or []) if isinstance(ev.get("query_matched"), list)
                                          else 0 for _, ev in evidence),
                     # what the recording itself lacked (the same in each trial of it: its largest, as a damaged
                     # row may hold none): entries left out when it was made, bodies served as zeros of their size
                     "left_out": max((counts_of(ev).get("recording_left_out", 0) for _, ev in evidence), default=0),
                     "made_bodies": max((counts_of(ev).get("recording_made_bodies", 0) for _, ev in evidence),
                                        default=0),
                     "proven": dict(sorted(proven.items(), key=lambda kv: protocols.order(kv[0])))})
    return sorted(rows, key=lambda r: (*sort_key(r)[:6], r["page"], protocols.order(r["proto"])))


def counts_of(x) -> dict[str, int]:
    """{name: count} from a stored JSON object, its entries that are not counts left out (pure: a
    damaged or hand-edited row reads as what it holds of the form)."""
    if not isinstance(x, dict):
        return {}
    return {str(k): int(v) for k, v in x.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def discovery_table(trials: list[Trial]) -> list[dict]:
    """Per cell of the trials whose browser found h3 (Trial.protocol_mix_json: --discovery alt-svc or
    https-rr), over the trials that count: the median DNS lookup of the page, the pages that came over
    h3, the share of requests over h3 per origin (the page's own first) and over all, and the median
    start of the first request over h3 (ms from the navigation's start; over the trials that had one)."""
    import json
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in usable(trials):
        if t.protocol_mix_json:
            groups[cell_key(t)].append(t)
    rows = []
    for key, ts in groups.items():
        mixes = [json.loads(t.protocol_mix_json) for t in ts]
        hosts: dict[str, list[int]] = {}
        for m in mixes:
            per = m.get("per_origin")
            for host, counts in (per.items() if isinstance(per, dict) else ()):
                counts = counts_of(counts)
                h = hosts.setdefault(host, [0, 0])
                h[0] += counts.get("h3", 0)
                h[1] += sum(counts.values())
        page_host = url_host(ts[0].url)
        order = sorted(hosts, key=lambda h: (h != page_host, h))
        firsts = [m["first_h3_ms"] for m in mixes if isinstance(m.get("first_h3_ms"), (int, float))]
        dns = [t.dns_ms for t in ts if t.dns_ms is not None]
        total = sum(n for _, n in hosts.values())
        rows.append({"conditions": key[0], "page": key[1], "proto": key[2], "cc": key[3], "browser": key[4],
                     "server": key[5], "discovery": ts[0].discovery, "n": len(ts),
                     "rate_down_bps": ts[0].conditions.rate_down_bps, "rtt_ms": ts[0].conditions.rtt_ms,
                     "size_bytes": ts[0].size_bytes, "objects": ts[0].objects, "visit": ts[0].visit or "first",
                     "dns_ms": float(np.median(dns)) if dns else None,
                     "pages_h3": sum(m.get("page") == protocols.H3.next_hop for m in mixes),
                     "h3_share": sum(h for h, _ in hosts.values()) / total if total else None,
                     "h3_share_per_origin": {h: hosts[h][0] / hosts[h][1] for h in order if hosts[h][1]},
                     "first_h3_ms": float(np.median(firsts)) if firsts else None, "n_first_h3": len(firsts)})
    return sorted(rows, key=lambda r: (*sort_key(r)[:6], r["objects"], r["page"], protocols.order(r["proto"])))


def visits_table(trials: list[Trial]) -> list[dict]:
    """First against repeat visits, per (conditions, page, protocol, cc) of campaigns with repeat
    visits: for each visit the median PLT and first byte, the share of connections that resumed
    TLS (the server's log), the 0-RTT the net-log saw (repeat visits of h3), and the objects a kept
    cache served; the repeat's change of PLT against the first visit's median."""
    groups: dict[tuple, dict[str, list[Trial]]] = defaultdict(lambda: defaultdict(list))
    for t in usable(trials):
        base = t.page.split("@")[0]
        groups[(t.label, base, t.proto, *(axis_value(t, a) for a in VARIANT_AXES))][t.visit or "first"].append(t)
    rows = []
    for (cond, base, proto, cc, browser, server, budget), by in groups.items():
        if set(by) == {"first"}:
            continue
        first_plt = float(np.median([t.plt_ms for t in by["first"]])) if by.get("first") else None
        for visit in [v for v in ("first", "repeat", "repeat-warm") if v in by]:
            ts = by[visit]
            plt_ = float(np.median([t.plt_ms for t in ts]))
            conns = sum(t.connections or 0 for t in ts)
            resumed = [t.resumed_connections for t in ts if t.resumed_connections is not None]
            zero = [t.zero_rtt for t in ts if t.zero_rtt]
            cached = [t.cached_objects for t in ts if t.cached_objects is not None]
            rows.append({"conditions": cond, "page": base, "proto": proto, "cc": cc, "browser": browser, "server": server, "budget": budget, "visit": visit, "n": len(ts),
                         "rate_down_bps": ts[0].conditions.rate_down_bps, "rtt_ms": ts[0].conditions.rtt_ms,
                         "size_bytes": ts[0].size_bytes, "objects": ts[0].objects,
                         "plt_ms": plt_, "ttfb_ms": float(np.median([t.ttfb_ms for t in ts if t.ttfb_ms is not None]))
                         if any(t.ttfb_ms is not None for t in ts) else None,
                         "vs_first_pct": (plt_ - first_plt) / first_plt * 100 if first_plt and visit != "first" else None,
                         "resumed_share": sum(resumed) / conns if resumed and conns else None,
                         "zero_rtt": ", ".join(f"{w} {zero.count(w)}/{len(ts)}" for w in dict.fromkeys(zero)) or None,
                         "cached_objects": float(np.median(cached)) if cached else None})
    return sorted(rows, key=lambda r: (*sort_key(r)[:6], r["objects"], r["page"], protocols.order(r["proto"]),
                                       r["cc"], r["browser"], r["server"], ("first", "repeat", "repeat-warm").index(r["visit"])))


# -- CPU --------------------------------------------------------------------------------------------------
# Roles shown one by one; the rest of Chromium (zygote, utility, chromedriver, ...) is "other".
CPU_ROLES = ("browser", "renderer", "network", "gpu", *(c.meta_key for c in SERVERS.values()), "linkem")  # a server by its own name


def cpu_role(role: str) -> str:
    return role if role in CPU_ROLES else "other"


# Below a megabyte of bodies per trial, CPU per MB is the fixed cost of a load (the browser's
# scripting and layout, the connections' set-up) spread over few bytes: a 5KB page showed 1,030,000
# CPU ms per MB for the browser. There, only CPU per trial is shown.
PER_MB_MIN_BYTES = 10**6


def cpu_rows(trials: list[Trial]) -> list[dict]:
    """One row per usable trial of any kind and role: CPU seconds (user, system), the trial's body MB, and
    seconds per MB where the trial read at least PER_MB_MIN_BYTES (else None)."""
    from ..cpu import roles_of
    out = []
    for t in usable(trials, None):
        agg: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for r, v in roles_of(t.cpu_json).items():
            a = agg[cpu_role(r)]
            a[0] += v.get("user_s", 0.0)
            a[1] += v.get("system_s", 0.0)
        mb = t.body_bytes / 1e6
        for r, (u, s) in agg.items():
            out.append({"conditions": t.label, **_page_fields(t), "proto": t.proto,
                        "browser": axis_value(t, "browser"), "role": r, "mb": mb,
                        "user_s": u, "system_s": s, "cpu_s": u + s,
                        "cpu_s_per_mb": (u + s) / mb if t.body_bytes >= PER_MB_MIN_BYTES else None})
    return out


def cpu_table(trials: list[Trial]) -> list[dict]:
    """Per conditions x page x protocol x browser x role: n and the medians of CPU seconds and of
    seconds per MB (None where the page is under PER_MB_MIN_BYTES)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in cpu_rows(trials):
        groups[(r["conditions"], r["page"], r["proto"], r["browser"], r["role"])].append(r)
    out = []
    for (cond, _, proto, browser, role), rs in groups.items():
        page = {k: rs[0][k] for k in ("page", "size_bytes", "objects")}
        per_mb = [r["cpu_s_per_mb"] for r in rs if r["cpu_s_per_mb"] is not None]
        out.append({"conditions": cond, **page, "proto": proto, "browser": browser, "role": role, "n": len(rs),
                    "user_s": float(np.median([r["user_s"] for r in rs])),
                    "system_s": float(np.median([r["system_s"] for r in rs])),
                    "cpu_s": float(np.median([r["cpu_s"] for r in rs])),
                    "cpu_s_per_mb": float(np.median(per_mb)) if per_mb else None})
    order = {r: i for i, r in enumerate((*CPU_ROLES, "other"))}
    return sorted(out, key=lambda r: (r["conditions"], r["size_bytes"], r["objects"], protocols.order(r["proto"]),
                                      axis_order("browser")(r["browser"]), order[r["role"]]))


def cpu_by_role(trials: list[Trial]) -> list[dict]:
    """Per protocol (and browser) x role across a campaign: CPU seconds per trial (mean; user and
    system apart) and, where the trials read PER_MB_MIN_BYTES or more on average, per MB (the sum
    of CPU over the sum of MB, so big pages weigh by their bytes; else None). variant: the protocol,
    with the browser where several ran ('h3 firefox': two browsers' roles are never summed)."""
    acc: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    mb: dict[tuple, float] = defaultdict(float)
    n_trials: dict[tuple, int] = defaultdict(int)
    for t in usable(trials, None):
        mb[(t.proto, axis_value(t, "browser"))] += t.body_bytes / 1e6
        n_trials[(t.proto, axis_value(t, "browser"))] += 1
    several = len({b for _, b in n_trials}) > 1
    for r in cpu_rows(trials):
        a = acc[(r["proto"], r["browser"], r["role"])]
        a[0] += r["user_s"]
        a[1] += r["system_s"]
        a[2] += 1
    order = {r: i for i, r in enumerate((*CPU_ROLES, "other"))}
    out = []
    for (p, b, r), (u, s, n) in acc.items():
        m = mb[(p, b)]
        big = m * 1e6 / n_trials[(p, b)] >= PER_MB_MIN_BYTES
        out.append({"proto": p, "browser": b, "variant": f"{p} {b}" if several else p, "role": r, "trials": int(n),
                    "mb": m, "mb_per_trial": m / n_trials[(p, b)],
                    "user_s_per_trial": u / n, "system_s_per_trial": s / n, "cpu_s_per_trial": (u + s) / n,
                    "user_s_per_mb": u / m if big else None, "system_s_per_mb": s / m if big else None,
                    "cpu_s_per_mb": (u + s) / m if big else None})
    return sorted(out, key=lambda x: (protocols.order(x["proto"]), axis_order("browser")(x["browser"]),
                                      order[x["role"]]))


def cpu_percent(series: list[dict]) -> list[dict]:
    """Cumulative CPU samples {t_s, role, user_s, system_s} -> utilization per interval in % of one
    core: {t_s (interval end), role, user_pct, system_pct}. Samples closer than 1 ms are merged."""
    by: dict[str, list[dict]] = defaultdict(list)
    for s in series:
        by[s["role"]].append(s)
    out = []
    for role, ss in by.items():
        ss = sorted(ss, key=lambda s: s["t_s"])
        prev = ss[0]
        for s in ss[1:]:
            dt = s["t_s"] - prev["t_s"]
            if dt < 0.001:
                continue
            out.append({"t_s": s["t_s"], "role": role, "user_pct": 100 * (s["user_s"] - prev["user_s"]) / dt,
                        "system_pct": 100 * (s["system_s"] - prev["system_s"]) / dt})
            prev = s
    return out


# -- over the pages of a campaign (a corpus, issue 48) ------------------------------------------------------
CORPUS_MIN_PAGES = 4  # a campaign of this many pages or more is read as a corpus: the answer over its pages


def corpus_groups(rows: list[Comparison]) -> list[dict]:
    """The comparisons (compare()'s, already corrected over the report) grouped over the pages (pure):
    one group per comparison (reference vs other) within everything else but the page (its
    conditions, and the other axes: the browser, the cc, the server, the budget), each with its
    pages' rows (sorted by difference) and the count of pages where the reference was significantly
    faster, slower, or neither. Groups of fewer than CORPUS_MIN_PAGES pages are left out."""
    groups: dict[tuple, list[Comparison]] = defaultdict(list)
    for c in rows:
        key = (c.axis, c.reference_value, c.other_value, c.reference.conditions,
               *(getattr(c.reference, a) for a in AXES if a != c.axis))
        groups[key].append(c)
    out = []
    for key, members in groups.items():
        if len({c.reference.page for c in members}) < CORPUS_MIN_PAGES:
            continue
        members = sorted(members, key=lambda c: c.diff_pct)
        first = members[0]
        faster = sum(1 for c in members if c.significant and c.diff_pct < 0)
        slower = sum(1 for c in members if c.significant and c.diff_pct > 0)
        out.append({"axis": first.axis, "reference": first.reference_value, "other": first.other_value,
                    "conditions": first.reference.conditions, "within": first.within_in(AXES),
                    "pair": f"{first.reference_value} vs {first.other_value}", "rows": members,
                    "pages": len(members), "faster": faster, "slower": slower,
                    "neither": len(members) - faster - slower,
                    "median_diff_pct": float(np.median([c.diff_pct for c in members]))})
    out.sort(key=lambda g: (*sort_key(g["rows"][0].reference.row())[:6], protocols.order(g["rows"][0].reference.proto),
                            g["within"], axis_order(g["axis"])(g["other"])))
    return out


# What the field found over many live pages, as its papers' abstracts state it: no share of pages to set
# beside ours is among those statements (docs/results.md, "The corpus beside the literature").
CORPUS_LITERATURE = (
    "Trevisan et al. (MedComNet'21: thousands of live HTTP/3 sites, h3 against h2, under added delay, "
    "bandwidth limits and loss) found sizable gains only at high latency or very low bandwidth, none under "
    "heavy loss, and the most on sites taking few objects from third parties (which spoke h2 or h1); Yu & "
    "Benson (WWW'21: production endpoints) found the servers' congestion control decided the difference and "
    "h3's removal of head-of-line blocking barely moved page loads")


def corpus_beside_literature(g: dict) -> str | None:
    """A corpus group of h3 against a TCP protocol beside the literature's answer over live pages, and
    why ours may differ (pure); None for any other comparison."""
    if g.get("axis") != "proto" or g.get("reference") != protocols.H3.name:
        return None
    share = 100.0 * g["faster"] / g["pages"] if g["pages"] else 0.0
    return (f"Beside the literature: here h3 was significantly faster than {g['other']} on {share:.0f}% of "
            f"{g['pages']} pages at {g['conditions']}. {CORPUS_LITERATURE}. Where ours differs, these replays "
            "are why: every origin of a page speaks the protocol asked (as-recorded keeps a recording's mix), all "
            "from one server running CUBIC for TCP and QUIC alike, over one emulated link, so what h3 changes is "
            "chiefly its handshake's round trips, a larger share of a page's load the longer the round trip")


# Zhang et al. (WWW'24, Fig. 11: 100 live sites in Chrome, PLT h3/h2 per page, from their released data):
# the figures a corpus answer of h3 against h2 is set beside, by the link they measured on
ZHANG_FIG11 = {"Ethernet": {"pages": 100, "median": 1.008, "mean": 1.030, "faster": 37, "faster5": 10, "slower5": 24},
               "100 Mbit/s": {"pages": 100, "median": 1.021, "mean": 1.062, "faster": 27, "faster5": 11,
                              "slower5": 35}}
FIG11_COLUMNS = (("median", "median ratio"), ("mean", "mean ratio"), ("faster", "h3 faster"),
                 ("faster5", "h3 >= 5% faster"), ("slower5", "h3 >= 5% slower"))


def zhang_form(g: dict) -> dict | None:
    """A corpus group of h3 against h2 in Zhang's Fig. 11 form (pure): per page the ratio of the medians
    h3/h2, their median and mean, and the pages where h3 was faster (ratio below 1), 5% or more faster
    (0.95 or less) and 5% or more slower (1.05 or more); None for any other comparison."""
    if g.get("axis") != "proto" or g.get("reference") != protocols.H3.name or g.get("other") != protocols.H2.name:
        return None
    return fig11_figures([c.reference.median_ms / c.other.median_ms for c in g["rows"]
                          if c.reference.median_ms and c.other.median_ms])


def fig11_figures(ratios: list[float]) -> dict | None:
    """Per-page ratios h3/h2 in Fig. 11's figures (pure); None for none."""
    if not ratios:
        return None
    return {"pages": len(ratios), "median": float(np.median(ratios)), "mean": float(np.mean(ratios)),
            "faster": sum(r < 1.0 for r in ratios), "faster5": sum(r <= 0.95 for r in ratios),
            "slower5": sum(r >= 1.05 for r in ratios)}


def fig11_line(who: str, f: dict) -> str:
    """One row of Fig. 11's figures in words (pure)."""
    n = f["pages"]
    return (f"{who}: median ratio {f['median']:.3f}, mean {f['mean']:.3f}; h3 faster on {f['faster']} of {n} "
            f"({100.0 * f['faster'] / n:.0f}%), >= 5% faster on {f['faster5']}, >= 5% slower on {f['slower5']}")


def corpus_sentence(g: dict) -> str:
    """A corpus group in words (pure): the share of pages where the reference was significantly
    faster, slower or neither, and the median difference."""
    n = g["pages"]

    def share(k: int) -> str:
        return f"{k} of {n} pages ({100.0 * k / n:.0f}%)"
    return (f"{g['reference']} against {g['other']} at {g['conditions']} ({g['within']}): {g['reference']} was "
            f"significantly faster on {share(g['faster'])}, slower on {share(g['slower'])}, and neither on "
            f"{share(g['neither'])}; the median page's difference {g['median_diff_pct']:+.1f}%")
