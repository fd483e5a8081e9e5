"""How precisely a median is known: its bootstrap confidence interval, and the rule by which a
campaign with a precision target (--precision) stops a cell. The campaign decides with it while it
runs (session) and the report tells how each cell stopped (analysis.stats): one rule, below both."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps


def median_ci(x: np.ndarray, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """The median's confidence interval (percentile bootstrap, 2000 resamples, seeded: the same
    values give the same interval); nan below three values, the value itself when all are equal."""
    if len(x) < 3 or np.all(x == x[0]):
        return (float("nan"), float("nan")) if len(x) < 3 else (float(x[0]), float(x[0]))
    res = sps.bootstrap((x,), np.median, confidence_level=confidence, n_resamples=2000, method="percentile",
                        random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def half_width_pct(x: list[float]) -> float:
    """Half the width of the median's 95% CI, in percent of the median (nan below three values)."""
    a = np.asarray(x, dtype=float)
    lo, hi = median_ci(a)
    med = float(np.median(a)) if len(a) else float("nan")
    return (hi - lo) / 2 / med * 100 if med and not math.isnan(lo) else float("nan")


def precision_stop(by_proto: dict[str, list[float]], target_pct: float, min_runs: int, max_runs: int,
                   protos: tuple[str, ...]) -> tuple[str | None, dict[str, float]]:
    """Whether a cell may stop under a precision target: ("precision reached", half widths) when
    every protocol has at least min_runs counted page-load times and its median's half width is
    within target_pct; ("max runs reached", ...) once a protocol has max_runs; else (None, ...)."""
    widths = {p: half_width_pct(by_proto.get(p, [])) for p in protos}
    counts = [len(by_proto.get(p, [])) for p in protos]
    if min(counts) >= min_runs and all(w <= target_pct for w in widths.values()):
        return "precision reached", widths
    if max(counts) >= max_runs:
        return "max runs reached", widths
    return None, widths
