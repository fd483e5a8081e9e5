"""Summary table of a set of trials: per cell n, median/min/max PLT and PLT / payload-only ideal."""

from __future__ import annotations

import statistics
from collections import defaultdict

from .conditions import ideal_seconds
from .units import format_size


def summarize(trials: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for t in trials:
        groups[(t["conditions"], t["size_bytes"], t["proto"])].append(t)
    rows = []
    for (cond, size, proto), ts in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        plts = [t["plt_ms"] for t in ts if t["status"] == "ok"]
        ideal = ideal_seconds(size, ts[0]["rate_down_bps"])
        med = statistics.median(plts) if plts else None
        rows.append({
            "conditions": cond, "size": format_size(size), "size_bytes": size, "proto": proto,
            "n_ok": len(plts), "n_failed": len(ts) - len(plts),
            "median_ms": med, "min_ms": min(plts) if plts else None, "max_ms": max(plts) if plts else None,
            "ideal_ms": ideal * 1000 if ideal else None,
            "ratio_to_ideal": (med / (ideal * 1000)) if (med and ideal) else None,
            "reasons": sorted({t["reason"] for t in ts if t["status"] != "ok"}),
        })
    return rows


def _f(v, fmt="{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def format_table(rows: list[dict]) -> str:
    head = ["link", "size", "proto", "ok", "fail", "median ms", "min ms", "max ms", "ideal ms", "median/ideal"]
    body = [[r["conditions"], r["size"], r["proto"], str(r["n_ok"]), str(r["n_failed"]), _f(r["median_ms"]),
             _f(r["min_ms"]), _f(r["max_ms"]), _f(r["ideal_ms"]), _f(r["ratio_to_ideal"], "{:.3f}")] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(h.rjust(w) if i > 2 else h.ljust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        lines.append("  ".join(x.rjust(w) if i > 2 else x.ljust(w) for i, (x, w) in enumerate(zip(b, widths))))
    reasons = sorted({reason for r in rows for reason in r["reasons"]})
    if reasons:
        lines.append("failures: " + "; ".join(reasons))
    return "\n".join(lines)
