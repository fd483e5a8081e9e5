"""Summary tables of a set of trials: per cell the trials that count (stats.usable: the one
rule), the failed attempts and the warm-ups apart; for pages median/min/max PLT and PLT / ideal
(conditions.ideal_ms: the protocol's round trips and the bytes at the rate), for bulk pages the
throughput (stats.datarate_table)."""

from __future__ import annotations

import statistics
from collections import defaultdict

from .. import protocols
from ..conditions import VARIANT_AXES, ideal_ms
from ..records import Trial
from .stats import cell_key, datarate_table, latency_table, usable


def summarize(trials: list[Trial]) -> list[dict]:
    """Per cell of the pages (bulk and request pages apart: see tables)."""
    groups: dict[tuple, list[Trial]] = defaultdict(list)
    for t in trials:
        if t.measures == "page":
            groups[cell_key(t)].append(t)
    rows = []
    order = sorted(groups.items(), key=lambda kv: (kv[0][0], kv[1][0].size_bytes, kv[1][0].objects,
                                                   protocols.order(kv[0][2])))
    for (label, page, proto, cc, browser, server, budget), ts in order:
        plts = [t.plt_ms for t in usable(ts)]
        size = ts[0].size_bytes
        c = ts[0].conditions
        ideal = ideal_ms(proto, size, c.rate_down_bps, c.rtt_ms, ts[0].objects)
        med = statistics.median(plts) if plts else None
        rows.append({
            "conditions": label, "size": page, "size_bytes": size, "proto": proto, "cc": cc, "browser": browser, "server": server,
            "budget": budget, "n_ok": len(plts), "n_failed": sum(not t.ok for t in ts), "n_warmup": sum(t.ok and t.warmup for t in ts),
            "median_ms": med, "min_ms": min(plts) if plts else None, "max_ms": max(plts) if plts else None,
            "ideal_ms": ideal,
            "ratio_to_ideal": (med / ideal) if (med and ideal) else None,
            "reasons": sorted({t.reason for t in ts if not t.ok}),
        })
    return rows


def campaign_sections(results, campaign_id: int) -> list[tuple[str, str]]:
    """(title, text) of a stored campaign: its link as measured, and its summary table."""
    from ..records import format_link_check
    from ..store import Store
    with Store(results, read_only=True) as store:
        c = store.campaign(campaign_id)
        link = [format_link_check(x["result"]["verify"]) if "verify" in x["result"] else
                f"{x['conditions']}: applied and read back, not measured (verify off)" for x in store.link_checks(campaign_id)]
        head = (f"campaign {campaign_id} '{c['name']}' in {results} (order seeded with {c['grid'].get('seed')}; link "
                f"backend: {c['metadata'].get('link_backend')}; report: plt-bench report {campaign_id} --results {results})")
        return [("plt-bench: the link, measured", "\n".join(link))] + [
            (title, head + "\n" + text) for title, text in tables(store.trials([campaign_id]))]


def tables(trials: list[Trial]) -> list[tuple[str, str]]:
    """(title, text) of each kind of trial present: pages' load times, and for bulk and request pages
    the report's own tables (report.sections: one table, one place); a set without trials: the
    pages' table, empty."""
    from .report import _columns, sections
    from .stats import distinct_traces
    trials = distinct_traces(trials)
    kinds = {t.measures for t in trials} or {"page"}
    out = []
    if "page" in kinds:
        out.append(("plt-bench: page-load time per cell", format_table(summarize(trials))))
    for title, note, rows in sections({"datarate": datarate_table(trials), "latency": latency_table(trials),
                                       "establishment": []}):
        out.append((f"plt-bench: {title.lower()}", "\n".join(_columns(rows) + [f"({note})"])))
    failed = sorted({t.reason for t in trials if t.measures != "page" and not t.ok})
    if failed and out:
        out[-1] = (out[-1][0], out[-1][1] + "\nfailures: " + "; ".join(failed))
    return out


def _f(v, fmt="{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def format_table(rows: list[dict]) -> str:
    head = ["link", "page", "proto", "ok", "fail", "warm-up", "median ms", "min ms", "max ms", "ideal ms", "median/ideal"]
    # the protocol with its congestion control, browser and server, where several ran
    vary = [a for a in VARIANT_AXES if len({r.get(a) for r in rows}) > 1]
    body = [[r["conditions"], r["size"], " ".join([r["proto"], *(r[a] for a in vary)]), str(r["n_ok"]),
             str(r["n_failed"]), str(r["n_warmup"]),
             _f(r["median_ms"]), _f(r["min_ms"]), _f(r["max_ms"]), _f(r["ideal_ms"]),
             _f(r["ratio_to_ideal"], "{:.3f}")] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(h.rjust(w) if i > 2 else h.ljust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        lines.append("  ".join(x.rjust(w) if i > 2 else x.ljust(w) for i, (x, w) in enumerate(zip(b, widths))))
    reasons = sorted({reason for r in rows for reason in r["reasons"]})
    if reasons:
        lines.append("failures: " + "; ".join(reasons))
    lines.append("ok: trials that count in the statistics (warm-ups apart); fail: failed attempts, kept in the store")
    return "\n".join(lines)

