"""A campaign's report: per-cell statistics and every protocol against the reference (h3 unless
--reference says otherwise), as a terminal table, Markdown, HTML and CSV, next to the campaign's
figures in results/<name>-<id>/."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Callable

from .. import protocols, units
from ..errors import UsageError
from ..conditions import AXIS_KEYS, VARIANT_AXES
from . import stats
from ..servers import SERVERS
from .files import atomic
from ..device.calibrate import calibration_diff
from ..metadata import key_diff
from ..records import DEFAULT_METRIC, METRICS, Trial
from ..store import Store


DEFAULT_STORE_STEM = "plt-bench"


def out_dir(results: Path, name: str, campaign_id: int) -> Path:
    """results/<name>-<id>/ beside the default store; beside any other store the folder carries the
    store's name too (<store>-<name>-<id>), so two stores in one folder never share a report folder."""
    results = Path(results)
    prefix = "" if results.stem == DEFAULT_STORE_STEM else f"{results.stem}-"
    return results.parent / f"{prefix}{name}-{campaign_id}"


def _csv(path: Path, fields: list[str], rows: list[dict]) -> Path:
    def fill(tmp):
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    return atomic(path, fill)


def write_files(write, directory: Path) -> list[Path]:
    """Report or figure files, or a message naming the folder that cannot take them."""
    try:
        return write()
    except OSError as e:
        from ..errors import PltBenchError
        raise PltBenchError(f"the report files could not be written to {directory}: {e.strerror or e}") from None


def build(store: Store, campaign_ids: list[int], test: str = "welch", correction: str = "holm",
          reference: str | None = None, axis: str | None = None, metric: str | None = None) -> dict:
    """Statistics of one or more campaigns; refuses to pool campaigns whose key metadata differ.
    axis: what the comparisons are along, proto (the protocols within each congestion control) or
    cc (the congestion controls within each protocol); reference: the value the others are compared
    against (stats.reference_for: for protocols h3 where it ran, else the campaign's first; for cc
    the campaign's first; one that did not run is refused); metric: the time compared (plt, fcp,
    lcp, ttfb: records.METRICS; the option's, else the campaign's, else plt)."""
    camps = poolable(store, campaign_ids)
    first = camps[0]["metadata"]
    trials = stats.distinct_traces(store.trials(campaign_ids))
    hosts_table = stats.hosts_table(trials)
    pool_warnings: list[str] = []
    hosts = first.get("hosts") if first.get("mode") == "cluster" else None
    if hosts:  # a cluster's campaign: its facts are its hosts'; a cell never pools unlike hosts
        trials, pool_warnings = stats.unpooled(trials, hosts)
        first = {**next(iter(hosts.values())), "host": ", ".join(sorted({m.get("host") for m in hosts.values()}))}
    grid = camps[0]["grid"]
    metric = metric or grid.get("metric") or DEFAULT_METRIC
    cells = stats.cells(trials, metric)
    ran = sorted({t.proto for t in trials}, key=protocols.order)
    ccs = sorted({stats.axis_value(t, "cc") for t in trials}, key=stats.axis_order("cc"))
    browsers = sorted({stats.axis_value(t, "browser") for t in trials}, key=stats.axis_order("browser"))
    servers = sorted({stats.axis_value(t, "server") for t in trials}, key=stats.axis_order("server"))
    budgets = sorted({stats.axis_value(t, "budget") for t in trials}, key=stats.axis_order("budget"))
    asked = axis  # the option's (--compare), as given
    axis = axis or grid.get("compare") or "proto"  # the option's, else the campaign file's
    axis_text = axis
    axis = {"cpu": "budget", "device": "budget"}.get(axis, axis)  # the budget axis as its options name it
    if (grid.get("compare") or "proto") == axis:
        reference = reference or grid.get("reference")  # ... and so the reference
    if axis == "proto":
        listed = tuple(protocols.get(p).name for p in grid.get("protos") or ())
    else:
        given = grid.get(AXIS_KEYS[axis]) or ()
        listed = tuple([given] if isinstance(given, str) else given)
        if axis == "budget":  # devices are values of the budget axis too, after --cpu's
            listed += tuple(grid.get("device") or ())
    values = {"proto": ran, "cc": ccs, "browser": browsers, "server": servers, "budget": budgets}[axis]
    one_value = None
    if axis != "proto" and len(values) < 2:
        one_value = (f"--compare {axis_text}: the campaign{'s' if len(camps) > 1 else ''} ran one {AXIS_NAMES[axis]} "
                     f"({', '.join(values) or 'none'}): nothing to compare along it; run several (--{AXIS_KEYS[axis].replace('_', '-')} "
                     "with a comma-separated list), or compare the protocols (--compare proto)")
        if asked is not None:
            raise UsageError(one_value)
    reference = stats.reference_for(values, reference, axis=axis, listed=listed)
    same_arms = [t for t in trials if axis == "cc" and not quic_cc_follows(t)]
    rows = stats.compare([t for t in trials if t not in same_arms] if same_arms else trials, test, correction,
                         reference=reference, axis=axis, listed=listed, metric=metric)
    without = sorted({stats.cell_key(t) for t in stats.usable(trials)} - set(cells))
    # a cell in words, with its congestion control, browser, server and CPU budget where several ran
    vary = [i for i, values in enumerate((ccs, browsers, servers, budgets)) if len(values) > 1]
    named = (lambda k: " ".join([*k[:3], *(k[3 + i] for i in vary)]))
    warnings = pool_warnings + [f"{named(k)}: no trial has a {METRICS[metric].label}; the cell is left out"
                                for k in without] + [f"{named(c.key)}: {w}" for c in cells.values() for w in c.warnings]
    if same_arms:
        warnings.append(f"{', '.join(sorted({t.proto + ' on ' + stats.axis_value(t, 'server') for t in same_arms}))}: "
                        "not compared across congestion controls: its QUIC stack ran its own controller in every arm "
                        "(quic-go's CUBIC), so the arms differ in name only; quinnserve (--http-server quinn) runs "
                        "--cc's")
    if not any(stats.metric_value(t, metric) is not None for t in stats.usable(trials)) and METRICS[metric].needs:
        warnings.append(f"no trial has a {METRICS[metric].label}: {METRICS[metric].needs}")
    if one_value:  # the campaign file's compare: the report stands, and says so
        warnings.append(one_value)
    damaged = [t for t in trials if t.damaged]
    if damaged:
        warnings.append(f"{len(damaged)} trial(s) hold stored values that are not of their column's type "
                        f"({', '.join(sorted({c for t in damaged for c in t.damaged}))}): read as missing (the store "
                        "was edited or damaged)")
    if test == "mannwhitney" and rows and all(min(r.reference.n, r.other.n) <= 5 for r in rows) and len(rows) > 1:
        warnings.append("Mann-Whitney with 5 or fewer trials per protocol cannot reach significance after "
                        "correcting for several cells: use more --runs or --test welch")
    warnings += shape_warnings(rows)
    failed = [t for t in trials if not t.ok]
    return {"campaigns": camps, "metadata": first, "trials": trials, "cells": cells, "rows": rows,
            "reference": reference, "protos": ran, "ccs": ccs, "browsers": browsers, "servers": servers, "budgets": budgets, "axis": axis, "metric": metric,
            "visitor": stats.visitor_table(trials), "visits": stats.visits_table(trials),
            "bottleneck": stats.bottleneck_table(trials), "ecn": stats.ecn_table(trials), "cross": stats.cross_table(trials),
            "origins": stats.origins_table(trials), "think": stats.think_table(trials),
            "discovery": stats.discovery_table(trials),
            "replays": stats.replay_table(trials), "corpus": stats.corpus_groups(rows),
            "warnings": warnings, "failed": failed, "test": test, "correction": correction,
            "cpu": stats.cpu_table(trials), "cpu_by_role": stats.cpu_by_role(trials),
            "cpu_series": cpu_series(store, trials), "datarate": stats.datarate_table(trials),
            "throughput_series": stats.throughput_series(trials), "latency": stats.latency_table(trials),
            "establishment": stats.establishment_table(trials), "samples": stats.samples(trials, metric),
            "frames": frames_of(store, trials), "precision": stats.precision_table(camps[0]["grid"], trials),
            "captures": captures_table(store, trials, store.path.parent),
            "captures_lost": [x for c in camps for x in c["metadata"].get("captures_lost") or ()],
            "hosts": hosts_table, "budget_meanings": budget_meanings(trials, camps)}


def frames_of(store: Store, trials: list) -> dict[tuple[int, int], str]:
    """{(campaign, seq): its frames.zip} of the trials captured with --capture visual (the report's
    filmstrips), where the file is still there."""
    from pathlib import Path
    out = {}
    for t in trials:
        if t.trial_id is not None and t.counts and t.first_visual_change_ms is not None:
            for a in store.artifacts(t.trial_id):
                if a["kind"] == "visual" and Path(a["path"]).is_file():
                    out[(t.campaign_id, t.seq)] = a["path"]
    return out


def captures_table(store: Store, trials: list, base) -> list[dict]:
    """Per capture kind, the files the campaign's trials kept: {"kind", "trials", "files", "bytes",
    "folder" (their folders' common parent, relative to the store's folder: captures/<store>/<campaign>)},
    a cluster's included (its workers' files came back to the head)."""
    import os
    from pathlib import Path
    kinds: dict[str, dict] = {}
    for t in trials:
        if t.trial_id is None:
            continue
        for a in store.artifacts(t.trial_id):
            k = kinds.setdefault(a["kind"], {"kind": a["kind"], "trials": set(), "files": 0, "bytes": 0, "dirs": set()})
            k["trials"].add(t.trial_id)
            k["files"] += 1
            k["bytes"] += a["bytes"] or 0
            k["dirs"].add(str(Path(a["path"]).parent.parent))
    out = []
    for k in sorted(kinds.values(), key=lambda x: x["kind"]):
        common = os.path.commonpath(sorted(k.pop("dirs")))
        folder = os.path.relpath(common, base) if Path(common).is_relative_to(base) else common
        out.append({**k, "trials": len(k["trials"]), "folder": folder})
    return out


def budget_meanings(trials: list, camps: list) -> list[str]:
    """What each CPU budget and device of the campaigns meant on the host that ran them, in words:
    the quota a budget was given, a device's calibration (its metadata)."""
    from ..device.calibrate import stored
    out, seen = [], set()
    for t in trials:
        if t.cpu_budget is None or t.device or t.budget in seen:
            continue
        seen.add(t.budget)
        out.append(f"{t.budget}: " + (f"{t.cpu_quota_us / 1000:g} ms of every {t.cpu_period_us / 1000:g} ms over "
                                      f"{t.cpu_cores or 1} core(s)" if t.cpu_quota_us else
                                      f"{t.cpu_cores or 1} full core(s), pinned, no quota"))
    for c in camps:
        where = [("", c["metadata"])] + [(f"{h}: ", m) for h, m in sorted((c["metadata"].get("hosts") or {}).items())]
        for host, meta in where:  # a cluster's hosts each calibrated their own
            devices, damaged = stored(meta.get("devices"))
            for name, cal in sorted(devices.items()):
                words = host + cal.words()
                if words not in out:
                    out.append(words)
            if damaged:
                out.append(f"{host}campaign {c['id']}: its stored devices' calibration is damaged (not of its form); "
                           "what could not be read is not shown")
    return out


def poolable(store: Store, campaign_ids: list[int]) -> list[dict]:
    """The campaigns (Store.campaign), refused unless their key metadata agree (metadata.key_diff: the
    browser, the server, how h3 was found, the backend...): what report and summary pool alike."""
    camps = [store.campaign(c) for c in campaign_ids]
    for c in camps[1:]:
        diff = key_diff(c["metadata"], camps[0]["metadata"]) + calibration_diff(c["metadata"].get("devices"),
                                                                                 camps[0]["metadata"].get("devices"))
        if diff:
            raise UsageError(f"--campaign: campaigns {camps[0]['id']} and {c['id']} differ in {', '.join(diff)}; "
                             "their trials are not pooled (give one --campaign, or several that agree)")
    return camps


def quic_cc_follows(t: Trial) -> bool:
    """Whether --cc's controller ran the trial's transport: the kernel's for TCP, and for QUIC the
    server's stack only where it takes one (servers.base.Server.quic_cc_follows)."""
    from .. import servers
    if protocols.get(t.proto).transport != "QUIC":
        return True
    name = stats.axis_value(t, "server")
    return name not in servers.SERVERS or servers.get(name).quic_cc_follows


def cpu_series(store: Store, trials: list[Trial]) -> dict[str, dict]:
    """Per protocol (in the table's order), the CPU time series of one capture trial to draw: the
    first ok trial of the largest page that has samples."""
    ok = stats.usable(trials)
    sampled = store.sampled(t.trial_id for t in ok)  # one query, not one per trial
    out = {}
    for proto in sorted({t.proto for t in ok}, key=protocols.order):
        cands = sorted((t for t in ok if t.proto == proto and t.trial_id in sampled),
                       key=lambda t: (-t.size_bytes, t.campaign_id, t.seq))
        if cands:
            out[proto] = {"trial": cands[0], "samples": store.cpu_samples(cands[0].trial_id)}
    return out


def cpu_lines(rep: dict) -> list[list[str]]:
    """CPU per trial across the campaign, per protocol and role (user + system), and per MB where
    the trials read a megabyte or more each (stats.PER_MB_MIN_BYTES; else '-')."""
    def ms(x: float | None) -> str:
        return "-" if x is None else units.format_sig(x * 1000)
    head = ["protocol", "role", "trials", "MB/trial", "CPU ms/trial", "user ms/trial", "system ms/trial", "CPU ms/MB"]
    body = [[r.get("variant") or r["proto"], r["role"], str(r["trials"]), units.format_sig(r["mb_per_trial"]), ms(r["cpu_s_per_trial"]),
             ms(r["user_s_per_trial"]), ms(r["system_s_per_trial"]), ms(r["cpu_s_per_mb"])] for r in rep["cpu_by_role"]]
    return [head, *body]


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(*rows)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _f(v, fmt="{:.1f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _frac(part, whole) -> str:
    return "-" if part is None or not whole else f"{part}/{whole}"


def table(rep: dict) -> list[list[str]]:
    """One row per comparison: the pair, both cells' n and median [95% CI], the difference, the
    test and the effect size."""
    head = ["link", "page", "compared", "n", "reference median ms [95% CI]", "other median ms [95% CI]",
            "diff % [95% CI]",
            f"p ({rep['test']})", f"p adj ({rep['correction']})", "KS p", "Cliff d", "faster", "CPU-bound"]
    body = []
    for r in rep["rows"]:
        q, t = r.reference, r.other
        body.append([r.conditions, r.page, r.pair_in(_varying(rep)), f"{q.n}/{t.n}",
                     f"{_f(q.median_ms)} [{_f(q.ci_low_ms)}, {_f(q.ci_high_ms)}]",
                     f"{_f(t.median_ms)} [{_f(t.ci_low_ms)}, {_f(t.ci_high_ms)}]",
                     f"{_f(r.diff_pct, '{:+.1f}')} [{_f(r.diff_ci_low_pct, '{:+.1f}')}, {_f(r.diff_ci_high_pct, '{:+.1f}')}]",
                     _f(r.p_test, "{:.3g}"), _f(r.p_adjusted, "{:.3g}"), _f(r.p_ks, "{:.3g}"),
                     _f(r.cliffs_delta, "{:+.2f}"), r.faster, _bound(q, t)])
    return [head, *body]


def _varying(rep: dict) -> set[str]:
    """The axes beside the protocol that took several values in the report's trials: of cc, browser, server."""
    return {a for a in VARIANT_AXES if len(rep.get(a + "s") or ()) > 1}


def _variant(r: dict, rep: dict) -> str:
    """A table row's protocol, with its congestion control, browser and server where several ran: 'h2
    (bbr firefox)'."""
    vary = [a for a in VARIANT_AXES if a in _varying(rep)]
    return r["proto"] + (f" ({' '.join(str(r.get(a)) for a in vary)})" if vary else "")


def _bound(*cells) -> str:
    """CPU-bound trials of a cell per protocol ("h3 3/3 machine"), or "-"."""
    said = [f"{c.proto} {c.n_cpu_bound}/{c.n} {c.cpu_bound_roles}" for c in cells if c.n_cpu_bound]
    if not said and all(c.n_cpu_unjudged == c.n for c in cells):
        return "too short to judge"  # fewer than cpu.MIN_READINGS CPU readings over every load
    return "; ".join(said) or "-"


def _rate(bps) -> str:
    from ..units import format_rate
    return "unshaped" if bps is None else format_rate(bps)


def _corpus(rep: dict) -> list:
    out = []
    for g in rep.get("corpus") or ():  # the answer over the pages of a corpus (stats.corpus_groups)
        out.append((f"Over the pages: {g['pair']} at {g['conditions']} ({g['within']})",
                    f"{stats.corpus_sentence(g)}. Per page, the medians, the difference (negative: {g['reference']} "
                    "faster) with its bootstrap 95% CI, and the test's p-value corrected over every comparison of the "
                    "report; the pages sorted by difference; their CDF: corpus.png"
                    + (f". {lit}" if (lit := stats.corpus_beside_literature(g)) else ""),
                    [["page", f"{g['reference']} ms", f"{g['other']} ms", "diff %", "95% CI", "p adj", "faster"],
                     *[[c.reference.page, _f(c.reference.median_ms), _f(c.other.median_ms), _f(c.diff_pct, "{:+.1f}"),
                        f"[{_f(c.diff_ci_low_pct, '{:+.1f}')}, {_f(c.diff_ci_high_pct, '{:+.1f}')}]",
                        _f(c.p_adjusted, "{:.2g}"), c.faster] for c in g["rows"]]]))
        ours = stats.zhang_form(g) if rep.get("metric", DEFAULT_METRIC) == "plt" else None
        if ours:
            out.append((f"Beside Zhang et al.'s Fig. 11: {g['pair']} at {g['conditions']} ({g['within']})",
                        "per page the ratio of the PLT medians h3/h2 (below 1: h3 faster), over the pages here and over "
                        "Zhang et al.'s 100 live sites in Chrome (WWW'24, Fig. 11, their released data); counts are "
                        "pages, whatever the significance. Where ours differs, see docs/results.md (the corpus "
                        "beside the literature)",
                        [["pages", "n", *[w for _, w in stats.FIG11_COLUMNS]],
                         *[[who, str(f["pages"]), _f(f["median"], "{:.3f}"), _f(f["mean"], "{:.3f}"),
                            *[f"{f[k]} ({100.0 * f[k] / f['pages']:.0f}%)" for k in ("faster", "faster5", "slower5")]]
                           for who, f in (("here", ours), *((f"Zhang, {k}", v) for k, v in stats.ZHANG_FIG11.items()))]]))
    return out


def _precision(rep: dict) -> list:
    if not (rep.get("precision")):
        return []
    out = []
    pr = rep["precision"]
    metric = pr.get("metric") or DEFAULT_METRIC  # what the campaign judged precision by (a PLT one as before)
    judged = "" if metric == DEFAULT_METRIC else f" on {METRICS[metric].label}"
    out.append((f"Runs per cell (precision target +-{pr['target_pct']:g}%{judged})",
                f"each cell ran, protocols interleaved, until the 95% CI of each protocol's median{judged} was within "
                f"+-{pr['target_pct']:g}% of it (at least {pr['min_runs']}, at most {pr['max_runs']} runs); "
                "half widths in percent of the median",
                [["link", "page", *[f"n {p}" for p in pr["protos"]], *[f"{p} +-%" for p in pr["protos"]],
                  "stopped"],
                 *[[r["conditions"], r["page"], *[str(r["n"][p]) for p in pr["protos"]],
                    *[_f(r["half_width_pct"].get(p), "{:.1f}") for p in pr["protos"]], r["stopped"]]
                   for r in pr["cells"]]]))
    return out


def _throughput(rep: dict) -> list:
    if not (rep["datarate"]):
        return []
    out = []
    out.append(("Throughput (bulk downloads)", "link: bytes the link delivered towards the client over the bulk "
                "window (its own counter: headers and retransmissions included), as the seeds' datarate; "
                "browser: the body bytes the page read. Mean and sd over the runs; per interval: "
                "throughput_series.csv",
                [["rate", "RTT ms", "loss %", "page", "protocol", "n", "link Mbit/s", "sd", "browser Mbit/s", "sd"],
                 *[[_rate(r["rate_down_bps"]), _f(r["rtt_ms"], "{:g}"), _f(r["loss_pct"], "{:g}"), r["page"],
                    _variant(r, rep), str(r["n"]), _f(r["throughput_mean_mbps"], "{:.2f}"),
                    _f(r["throughput_sd_mbps"], "{:.2f}"), _f(r["goodput_mean_mbps"], "{:.2f}"),
                    _f(r["goodput_sd_mbps"], "{:.2f}")] for r in rep["datarate"]]]))
    return out


def _latency(rep: dict) -> list:
    if not (rep["latency"]):
        return []
    out = []
    out.append(("Request latency", "each request's Resource Timing responseEnd - startTime after the load, over "
                "the connection(s) the page came on (queueing behind the others included); the requests of all "
                "runs pooled; conns: connections used (median of the trials)",
                [["link", "page", "protocol", "n", "requests", "conns", "p50 ms", "p90 ms", "p99 ms"],
                 *[[r["conditions"], r["page"], _variant(r, rep), str(r["n"]), str(r["n_requests"]),
                    _f(r["connections"], "{:g}"), _f(r["p50_ms"]), _f(r["p90_ms"]), _f(r["p99_ms"])]
                   for r in rep["latency"]]]))
    return out


def _captures(rep: dict) -> list:
    if not (rep.get("captures") or rep.get("captures_lost")):
        return []
    out = []
    lost = rep.get("captures_lost") or []
    out.append(("Capture files", "per kind, the trials' capture files and where they are (a folder per trial, "
                "relative to the store's folder; a cluster's came back from its workers)"
                + (f"; {len(lost)} file(s) not kept, each with why (the campaign's metadata, captures_lost): "
                   + "; ".join(f"trial {x['seq']} on {x['host']}: {x['why']}" for x in lost[:5])
                   + (" ..." if len(lost) > 5 else "") if lost else ""),
                [["kind", "trials", "files", "MB", "folder"],
                 *[[r["kind"], str(r["trials"]), str(r["files"]), f"{r['bytes'] / 1e6:,.1f}", r["folder"]]
                   for r in rep.get("captures") or []]]))
    return out


def _visual_progress(rep: dict) -> list:
    if not (rep.get("visitor") and any(r.get("speed_index_ms") is not None for r in rep["visitor"])):
        return []
    out = []
    out.append(("Visual progress", "medians per cell from the screencast of each load's frames (capture kind "
                "visual, plt_bench.visual): the first frame that showed anything, SpeedIndex (the mean time at "
                "which the page's pixels became what they end as) and visually complete (ms from the navigation's "
                "start)",
                [["link", "page", "protocol", "n", "first change ms", "SpeedIndex ms", "complete ms", "PLT ms"],
                 *[[r["conditions"], r["page"], _variant(r, rep), str(r["n"]), _f(r["first_visual_change_ms"]),
                    _f(r["speed_index_ms"]), _f(r["visually_complete_ms"]), _f(r["plt_ms"])]
                   for r in rep["visitor"]]]))
    return out


def _visitor(rep: dict) -> list:
    if not (rep.get("visitor")):
        return []
    out = []
    looked_up = bool(rep.get("discovery"))  # the names' lookup over the link (--discovery): in the breakdown
    out.append(("What a visitor sees", "medians per cell of "
                + ("the page's DNS lookup (over the link: --discovery), " if looked_up else "")
                + "the first byte, the first and the largest contentful "
                "paint and the load event (ms from the navigation's start); LCP: what it was (<img#hero>: the page's "
                "first image), no LCP: trials where the browser reported none (Trial.paint_reason); connections "
                "per origin: median of the trials, from the server's log (the page's own origin first)"
                + (f"; {KEPT_FCP}" if any(t.browser_start == "kept" for t in rep["trials"]) else ""),
                [["link", "page", "protocol", "n", *(["DNS ms"] if looked_up else []), "TTFB ms", "FCP ms", "LCP ms",
                  "PLT ms", "LCP", "no LCP", "connections per origin"],
                 *[[r["conditions"], r["page"], _variant(r, rep), str(r["n"]),
                    *([_f(r.get("dns_ms"))] if looked_up else []),
                    _f(r["ttfb_ms"]), _f(r["fcp_ms"]), _f(r["lcp_ms"]), _f(r["plt_ms"]),
                    units.format_element(r["lcp_element"]), str(r["n_no_lcp"]),
                    " ".join(f"{units.format_sig(v)}" for v in r["connections_per_origin"].values()) or "-"]
                   for r in rep["visitor"]]]))
    return out


def _visits(rep: dict) -> list:
    if not (rep.get("visits")):
        return []
    out = []
    out.append(("First and repeat visits", "per protocol, a fresh browser's first load against a repeat visit in "
                "the browser that loaded the page a moment before (its connections closed; repeat: its cache "
                "cleared; repeat-warm: kept, the page revalidated): medians of the load event and the first "
                "byte; vs first: the change of the median PLT; resumed: connections that resumed TLS, as "
                "Caddy's log says; 0-RTT: the QUIC sessions' 0-RTT state, as the browser's own log says "
                "(Chromium's net-log, Firefox's HTTP log; over TCP none is sent: Caddy's TLS offers no early data); "
                "cached: images served by the browser's cache",
                [["link", "page", "protocol", "visit", "n", "PLT ms", "vs first %", "TTFB ms", "resumed",
                  "0-RTT", "cached"],
                 *[[r["conditions"], r["page"], _variant(r, rep),
                    r["visit"], str(r["n"]), _f(r["plt_ms"]), _f(r["vs_first_pct"], "{:+.1f}"), _f(r["ttfb_ms"]),
                    _f(None if r["resumed_share"] is None else 100 * r["resumed_share"], "{:.0f}%"),
                    r["zero_rtt"] or "-", _f(r["cached_objects"], "{:g}")]
                   for r in rep["visits"]]]))
    return out


def _discovery(rep: dict) -> list:
    if not (rep.get("discovery")):
        return []
    out = []
    out.append(("How the browser found HTTP/3", "the h3 cells of a campaign whose browser was not forced "
                "(--discovery alt-svc: the server's Alt-Svc header; https-rr: an HTTPS DNS record as well; "
                "docs/discovery.md): what carried each request, as the browser's Resource Timing and the server's "
                "log both say (a mix is the result, not a failure); DNS: the page's lookup over the link, median; "
                "page h3: the trials whose page came over h3; requests h3: over h3 of all requests, and per origin "
                "(the page's own first); first h3: when the first request over h3 began, median ms from the "
                "navigation's start, over the trials that had one",
                [["link", "page", "protocol", "discovery", "n", "DNS ms", "page h3", "requests h3",
                  "per origin", "first h3 ms"],
                 *[[r["conditions"], r["page"], _variant(r, rep), r["discovery"], str(r["n"]), _f(r["dns_ms"]),
                    f"{r['pages_h3']}/{r['n']}", _f(None if r["h3_share"] is None else 100 * r["h3_share"], "{:.0f}%"),
                    " ".join(f"{100 * v:.0f}%" for v in r["h3_share_per_origin"].values()) or "-",
                    _f(r["first_h3_ms"]) + (f" ({r['n_first_h3']}/{r['n']})" if r["n_first_h3"] != r["n"] else "")]
                   for r in rep["discovery"]]]))
    return out


def _replays(rep: dict) -> list:
    if not (rep.get("replays")):
        return []
    out = []
    own = any(r.get("browser_own") for r in rep["replays"])  # a column only where the browser asked (as before)
    lacked = any(r.get("left_out") or r.get("made_bodies") for r in rep["replays"])  # ... where the recording lacked
    out.append(("Replayed recordings", "each recording served as recorded (plt_bench.archive); ok: trials ok of "
                "all attempts; unrecorded: requests the recording did not hold (404 at once), query: matched by "
                "the best query string; responses: proven at both ends, per protocol (as-recorded: served over each "
                "origin's own recorded protocol, seen so by the server and, where the page's Resource Timing has "
                "them, the browser: the mix)" + ("; browser's own: icons the browser asked for itself that the "
                                                 "recording lacks (counted, failing nothing)" if own else "")
                + ("; recording lacked: entries its archive left out when it was made (a body the recording's "
                   "browser did not keep, a blocked or cached request: said as it was made, and in its "
                   "archive.json's left_out), and bodies it did not hold, served as zeros of their recorded size"
                   if lacked else ""),
                [["link", "page", "protocol", "ok", "unrecorded", *(["browser's own"] if own else []),
                  *(["recording lacked"] if lacked else []), "query", "responses"],
                 *[[r["conditions"], r["page"], r["proto"], f"{r['ok']}/{r['n']}", str(r["unrecorded"]),
                    *([str(r.get("browser_own", 0))] if own else []),
                    *([f"{r.get('left_out', 0)} left out, {r.get('made_bodies', 0)} made"] if lacked else []),
                    str(r["query_matched"]), " ".join(f"{p} {n}" for p, n in r["proven"].items()) or "-"]
                   for r in rep["replays"]]]))
    return out


def _bottleneck(rep: dict) -> list:
    if not (rep.get("bottleneck")):
        return []
    out = []
    out.append(("The bottleneck's queue discipline", "per trial that counts, what the discipline (--aqm) did during "
                "the load, per direction: its own drops, CE marks (--ecn) and a full queue's drops (means), the "
                "mean time its packets waited (median of the trials'), and the share of the trial's packets that "
                "asked for ECN (ECT or CE: the sender's choice, from their IP headers)",
                [["link", "page", "protocol", "direction", "n", "drops", "marks", "full-queue drops", "sojourn ms",
                  "ECN-capable"],
                 *[[r["conditions"], r["page"], _variant(r, rep), r["direction"], str(r["n"]), _f(r["aqm_drops"], "{:.1f}"),
                    _f(r["marks"], "{:.1f}"), _f(r["overlimit_drops"], "{:.1f}"), _f(r["sojourn_ms"], "{:.2f}"),
                    _f(None if r["ecn_capable_share"] is None else 100 * r["ecn_capable_share"], "{:.0f}%")]
                   for r in rep["bottleneck"]]]))
    return out


def _ecn(rep: dict) -> list:
    if not (rep.get("ecn")):
        return []
    out = []
    out.append(("ECN at the endpoints", "per cell (--ecn), from each side's own figures: TCP connections that "
                "negotiated ECN of those opened, in the browser's and the server's kernel; the server's packets "
                "acknowledged with ECE (its tcp_info's delivered_ce, mean per trial: the echo repeats until the "
                "sender's CWR, so a mark counts several); QUIC connections whose ECN the server validated, and the CE "
                "count of the browser's ACKs as the browser's net-log and the server's qlog read it (mean per trial; "
                "'-' where the trial captured no such log: --capture qlog,netlog)",
                [["link", "page", "protocol", "browser", "n", "TCP ECN browser", "TCP ECN server", "ECE-acked pkts",
                  "QUIC validated", "CE (browser's log)", "CE (server's log)"],
                 *[[r["conditions"], r["page"], r["proto"], r["browser"], str(r["n"]),
                    _frac(r["tcp_browser_negotiated"], r["tcp_browser_connections"]),
                    _frac(r["tcp_server_negotiated"], r["tcp_server_connections"]),
                    _f(r["tcp_server_ce_delivered"], "{:.1f}"), _frac(r["quic_validated"], r["quic_connections"]),
                    _f(r["quic_ce_browser_log"], "{:.1f}"), _f(r["quic_ce_server_log"], "{:.1f}")]
                   for r in rep["ecn"]]]))
    return out


def _cross(rep: dict) -> list:
    if not (rep.get("cross")):
        return []
    out = []
    out.append(("Beside competing flows", "medians per cell of the page's rate over its load (its bytes over its "
                "PLT) and of what the competing flows (--cross) carried meanwhile at their receiver; the page's "
                "share of both, its fair share (1 / (flows + 1)) and Jain's index over the page and each flow "
                "(beside a web background of short transfers, neither: '-')",
                [["link", "page", "protocol", "n", "page Mbit/s", "flows Mbit/s", "page share", "fair share",
                  "Jain"],
                 *[[r["conditions"], r["page"], _variant(r, rep), str(r["n"]), _f(r["page_mbps"], "{:.2f}"),
                    _f(r["cross_mbps"], "{:.2f}"), _f(None if r["page_share"] is None else 100 * r["page_share"],
                                                      "{:.0f}%"),
                    _f(None if r["fair_share"] is None else 100 * r["fair_share"], "{:.0f}%"),
                    _f(r["jain"], "{:.3f}")] for r in rep["cross"]]]))
    return out


def _origins(rep: dict) -> list:
    if not (rep.get("origins")):
        return []
    return [("Each origin's distance", "per cell and origin (--origin-rtt), over the trials that proved it: its "
             "own path delay and the round trip asked (the link's RTT plus it), the shortest handshake the browser "
             "measured to it (TLS's round trip over TCP, QUIC's handshake: median, min and max over the trials), "
             "and in how many it was within its tolerance (docs/replay.md)",
             [["link", "page", "protocol", "origin", "n", "path ms", "asked ms", "measured ms", "min", "max", "within"],
              *[[r["conditions"], r["page"], _variant(r, rep), r["host"], str(r["n"]), _f(r["path_ms"], "{:g}"),
                 _f(r["expected_ms"], "{:g}"), _f(r["measured_ms"]), _f(r["min_ms"]), _f(r["max_ms"]),
                 f"{r['within']}/{r['n']}"] for r in rep["origins"]]])]


def _think(rep: dict) -> list:
    if not (rep.get("think")):
        return []
    return [("Think time", "per cell (--think), over the trials that proved it: the servers' wait asked before each "
             "response's first byte (recorded: each response its own, its recorded wait less its origin's round "
             "trip), the responses per trial, the median wait asked and waited (medians over the trials), the "
             "longest asked, the most any response waited over its ask, and in how many trials every response "
             "was held as asked (docs/replay.md)",
             [["link", "page", "protocol", "think", "n", "responses", "asked ms", "waited ms", "longest asked",
               "most over", "held"],
              *[[r["conditions"], r["page"], _variant(r, rep), str(r["think"]), str(r["n"]), _f(r["responses"], "{:g}"),
                 _f(r["asked_ms"]), _f(r["waited_ms"]), _f(r["asked_max_ms"]), _f(r["over_ms"]),
                 f"{r['held']}/{r['n']}"] for r in rep["think"]]])]


def _establishment(rep: dict) -> list:
    if not (rep["establishment"]):
        return []
    out = []
    per_browser = (rep.get("browsers") or ["chromium"]) != ["chromium"]  # Firefox's beside Chromium's
    out.append(("Connection establishment", "medians over every trial's fresh navigation (links without loss or "
                "jitter); in round trips of the RTT beside what the handshakes need: TCP + TLS 1.3 (h1, h2) "
                "connects in 2 and has the first byte after 3, QUIC (h3) in 1 and after 2"
                + ("; per browser, as its Navigation Timing says" if per_browser else ""),
                [["RTT ms", "protocol", *(["browser"] if per_browser else []), "n", "connect ms", "connect RTTs",
                  "expected", "first byte ms", "first byte RTTs", "expected"],
                 *[[_f(r["rtt_ms"], "{:g}"), r["proto"], *([r["browser"]] if per_browser else []), str(r["n"]),
                    _f(r["connect_ms"]),
                    _f(r["connect_rtts"], "{:.2f}"), str(r["expected_connect_rtts"]), _f(r["first_byte_ms"]),
                    _f(r["first_byte_rtts"], "{:.2f}"), str(r["expected_first_byte_rtts"])]
                   for r in rep["establishment"]]]))
    return out


SECTIONS = (_corpus, _precision, _throughput, _latency, _captures, _visual_progress, _visitor, _visits, _discovery, _replays, _origins, _think, _bottleneck, _ecn, _cross, _establishment)  # each a function of the report: its tables, or none


def sections(rep: dict) -> list[tuple[str, str, list[list[str]]]]:
    """The report's tables beyond the page-load comparison, where the campaign has their trials:
    (title, what the figures are, [head, *rows]), in SECTIONS' order."""
    return [one for section in SECTIONS for one in section(rep)]


def format_text(rep: dict) -> str:
    lines: list[str] = []
    for head, note, rows in blocks(rep):
        lines += ([""] if lines else []) + [f"{head}:"] + ["  " + x for x in _columns(rows)] + [f"  ({note})"]
    if rep["warnings"]:
        lines += ["", "warnings:"] + [f"  {w}" for w in rep["warnings"]]
    if rep["failed"]:
        lines += ["", f"{len(rep['failed'])} failed attempt(s) kept in the store (left out of the statistics)"]
    return "\n".join(lines)


CPU_NOTE = ("mean CPU per ok trial, per protocol and role, and the sum of CPU over the sum of MB read where "
            "the trials read 1 MB or more each (below that, per MB is a load's fixed cost over few bytes: '-'); "
            "the browser's roles count from navigation start (start-up apart), Caddy and linkem across the trial; "
            "per cell: cpu.csv")


def title(rep: dict) -> str:
    return f"plt-bench report: {', '.join(str(c['id']) for c in rep['campaigns'])} ({rep['campaigns'][0]['name']})"


# Where a kept browser's first paint stands against a peer tool's (issue 59), said wherever FCP is shown
KEPT_FCP = ("FCP from a kept browser (--browser-start kept, the default): a page's first paint comes 10-18% earlier "
            "than a cold browser's (browsertime and WebPageTest start one for every load; --browser-start fresh "
            "measured 12.9% later here, PLT alike: docs/results.md); fair between the protocols compared, but to set "
            "it beside a peer tool's FCP, measure with --browser-start fresh")
AXIS_NAMES = {"cc": "congestion control", "browser": "browser", "server": "server", "budget": "CPU budget or device"}
AXIS_WORDS = {"proto": "the protocol", "cc": "the congestion control, within each protocol",
              "browser": "the browser, within each protocol", "server": "the server, within each protocol",
              "budget": "the browser's CPU budget or device, within each protocol"}


def _browser_versions(rep: dict) -> str:
    """The browsers that loaded the report's trials, with the versions the campaign recorded."""
    m = rep["metadata"]
    said = {"chromium": f"Chromium: {m.get('chromium')}", "firefox": f"Firefox: {m.get('firefox')} "
            f"({m.get('geckodriver')})"}
    return "; ".join(said.get(b, b) for b in (rep.get("browsers") or ["chromium"]))


# Each server in a report's words: its name and version, and what its h3 runs for congestion control
SERVER_WORDS = {c.name: (c.report_words, c.h3_cc_words) for c in SERVERS.values()}  # each server's own


def _server(m: dict) -> tuple[str, str]:
    """The servers in a campaign's words (every campaign before the second server ran Caddy: its
    http_server names one, or several comma-separated), and what their h3 ran for congestion control
    (one server's as every report before said it; several each by its name)."""
    names = [n for n in (m.get("http_server") or "caddy").split(",") if n]
    said = {n: SERVER_WORDS.get(n, (n, "")) for n in names}
    server = "; ".join(w.format(**{f"{c.meta_key}_version": m.get(f"{c.meta_key}_version") for c in SERVERS.values()})
                       if n in SERVER_WORDS else n for n, (w, _) in said.items())  # an unknown name as it is
    if len(names) == 1:
        return server, said[names[0]][1]
    return server, "; ".join(f"{n}'s {cc}" for n, (_, cc) in said.items() if cc)


def facts(rep: dict) -> list[str]:
    """What the numbers were measured with and how they are compared: one line each."""
    m = rep["metadata"]
    server, h3_cc = _server(m)
    return [f"link: {m.get('link_backend')} ({m.get('link_tool')}, placement {m.get('link_placement')}; "
            f"netem in kernel: {m.get('netem_available')})",
            f"{_browser_versions(rep)}; {server}; congestion control {m.get('congestion_control')}",
            f"host {m.get('host')}, kernel {m.get('kernel')}, git {m.get('git_commit')}{' (dirty)' if m.get('git_dirty') else ''}",
            f"protocols: {', '.join(f'{p} ({protocols.label(p)})' for p in rep['protos'])}; TCP congestion control: "
            f"{', '.join(rep['ccs'])} ({h3_cc}); compared along "
            f"{AXIS_WORDS[rep['axis']]}, reference {rep['reference']}"
            + (f"; browsers: {', '.join(rep['browsers'])}" if len(rep.get("browsers") or ()) > 1 else "")
            + (f"; servers: {', '.join(rep['servers'])}" if len(rep.get("servers") or ()) > 1 else ""),
            *([f"CPU budgets on the host that ran them: {'; '.join(rep['budget_meanings'])}"]
              if rep.get("budget_meanings") else []),
            f"compared by: {METRICS[rep.get('metric', DEFAULT_METRIC)].label} (--metric "
            f"{rep.get('metric', DEFAULT_METRIC)})",
            f"statistics: medians with bootstrap 95% CI; each {'protocol' if rep['axis'] == 'proto' else 'one'} against "
            f"{rep['reference']} by {rep['test']}, "
            f"p-values {rep['correction']}-corrected over {len(rep['rows'])} comparisons; diff % = ({rep['reference']} - "
            f"other) / other, negative: {rep['reference']} faster"]


KS_NOTE = ("KS p: the Kolmogorov-Smirnov test (uncorrected) asks whether both cells' loads could come from one "
           "distribution, in shape as well as in centre; below 0.05 where the test of the centres finds nothing, the "
           "loads fall in different patterns (two modes in different shares, a longer tail): the distribution figures "
           "show each trial")


def shape_warnings(rows) -> list[str]:
    """The comparisons whose loads differ in distribution (KS p < 0.05) though not significantly in
    centre: a median alone misreads them."""
    return [f"{r.pair} at {r.conditions} for {r.page}: the loads' distributions differ (KS p {r.p_ks:.3g}) though "
            f"their centres do not significantly (p adj {r.p_adjusted:.3g}): see the distribution figure"
            for r in rows if r.p_ks < 0.05 and not r.significant]


def blocks(rep: dict) -> list[tuple[str, str, list[list[str]]]]:
    """Every table of the report, in order: (title, what its figures are, [head, *rows]); the
    page-load comparison first, CPU last."""
    what = {"proto": "protocol", "cc": "congestion control", "browser": "browser", "server": "server",
            "budget": "CPU budget"}[rep["axis"]]
    m = METRICS[rep.get("metric", DEFAULT_METRIC)]
    out = [(f"{m.title}, each {what} against {rep['reference']}",
            f"medians of the {m.label.split(' (')[0]} per cell; the heatmaps' numbers (one heatmap per pair). {KS_NOTE}",
            table(rep))
           ] if rep["rows"] or not (rep["datarate"] or rep["latency"]) else []
    out += sections(rep)
    if rep["cpu_by_role"]:
        out.append(("CPU by role", CPU_NOTE, cpu_lines(rep)))
    if rep.get("hosts"):
        out.append(("Hosts", "the machine and testbed that measured each cell, and its trials (a cluster's campaign)",
                    rep["hosts"]))
    return out


_MD_SPECIAL = str.maketrans({**{c: "\\" + c for c in "\\`*_[]|#"}, "<": "&lt;", ">": "&gt;", "&": "&amp;",
                            "\n": " ", "\r": " "})


def md(text: str) -> str:
    """Text as Markdown shows it, literally: HTML's and Markdown's own characters escaped (a profile
    named <script> stays text; a|b stays in its table cell), line breaks folded."""
    return str(text).translate(_MD_SPECIAL)


def markdown(rep: dict) -> str:
    out = [f"# {md(title(rep))}", ""] + [f"- {md(x)}" for x in facts(rep)]
    for head, note, rows in blocks(rep):
        out += ["", f"## {md(head)}", "", md(note[0].upper() + note[1:]) + ".", "",
                "| " + " | ".join(map(md, rows[0])) + " |", "|" + "---|" * len(rows[0])]
        out += ["| " + " | ".join(map(md, r)) + " |" for r in rows[1:]]
    if rep["warnings"]:
        out += ["", "## Warnings", ""] + [f"- {md(w)}" for w in rep["warnings"]]
    return "\n".join(out) + "\n"


def html(rep: dict, figures: list[Path]) -> str:
    """One self-contained page: the facts, every table, the warnings and the figures inline as SVG
    (no file, script or font fetched from anywhere)."""
    from html import escape as e
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{e(title(rep))}</title>",
           "<style>body{font-family:sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;"
           "font-size:.9em;margin:.5em 0 1.5em}td,th{border:1px solid #bbb;padding:.2em .5em;text-align:right}"
           "td:first-child,th:first-child{text-align:left}figure{margin:1em 0}figure svg{max-width:100%;height:auto}"
           ".warnings li{color:#a40}</style></head><body>", f"<h1>{e(title(rep))}</h1>",
           "<ul>" + "".join(f"<li>{e(x)}</li>" for x in facts(rep)) + "</ul>"]
    for head, note, rows in blocks(rep):
        out += [f"<h2>{e(head)}</h2>", f"<p>{e(note[0].upper() + note[1:])}.</p>", "<table>",
                "<tr>" + "".join(f"<th>{e(x)}</th>" for x in rows[0]) + "</tr>"]
        out += ["<tr>" + "".join(f"<td>{e(x)}</td>" for x in r) + "</tr>" for r in rows[1:]]
        out.append("</table>")
    if rep["warnings"]:
        out += ["<h2>Warnings</h2>", '<ul class="warnings">' + "".join(f"<li>{e(w)}</li>" for w in rep["warnings"])
                + "</ul>"]
    svgs = [f for f in figures if f.suffix == ".svg"]
    if svgs:
        out.append("<h2>Figures</h2>")
    for f in svgs:
        out += [f'<figure id="{e(f.stem)}">', _inline_svg(f.read_text()), f"<figcaption>{e(f.stem)}</figcaption>",
                "</figure>"]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _inline_svg(text: str) -> str:
    """An SVG file's <svg> element, without the XML declaration and DOCTYPE a file has."""
    return text[text.index("<svg"):]


def write_all(rep: dict, directory: Path, name: str) -> list[Path]:
    """Everything of a report, beside its store: report.md, the CSVs, the figures and report.html
    (the tables and the figures in one file)."""
    from . import plots
    files = write(rep, directory)
    files += plots.draw_report(rep, directory, name)
    page = atomic(directory / "report.html", lambda tmp: tmp.write_text(html(rep, files)))
    return files + [page]


def write(rep: dict, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    md = atomic(directory / "report.md", lambda tmp: tmp.write_text(markdown(rep)))
    rows = [r.row() for r in rep["rows"]]
    comp = _csv(directory / "comparison.csv", list(rows[0]) if rows else ["conditions"], rows)
    vals = [c.row() for c in rep["cells"].values()]
    cells = _csv(directory / "cells.csv", list(vals[0]) if vals else ["conditions"], vals)
    files = [md, comp, cells]
    for name, key in (("datarate.csv", "datarate"), ("throughput_series.csv", "throughput_series"),
                      ("latency.csv", "latency"), ("establishment.csv", "establishment"), ("visitor.csv", "visitor"),
                      ("visits.csv", "visits"), ("discovery.csv", "discovery"), ("bottleneck.csv", "bottleneck"), ("ecn.csv", "ecn"),
                      ("cross.csv", "cross"), ("origins.csv", "origins"), ("think.csv", "think")):
        if rep.get(key):
            files.append(_csv(directory / name, list(rep[key][0]),
                              [{k: json.dumps(v) if isinstance(v, dict) else v for k, v in r.items()} for r in rep[key]]))
    if rep["cpu"]:
        files.append(_csv(directory / "cpu.csv", list(rep["cpu"][0]), rep["cpu"]))
    if rep.get("corpus"):  # the answer over the pages: a row per comparison and page
        rows = [{"conditions": g["conditions"], "within": g["within"], "reference": g["reference"], "other": g["other"],
                 "page": c.reference.page, "reference_ms": c.reference.median_ms, "other_ms": c.other.median_ms,
                 "diff_pct": c.diff_pct, "diff_ci_low_pct": c.diff_ci_low_pct, "diff_ci_high_pct": c.diff_ci_high_pct,
                 "p_adjusted": c.p_adjusted, "significant": c.significant, "faster": c.faster}
                for g in rep["corpus"] for c in g["rows"]]
        files.append(_csv(directory / "corpus.csv", list(rows[0]), rows))
    return files


def campaign_report(results: Path, campaign_id: int, name: str, test: str, correction: str,
                    reference: str | None = None, axis: str | None = None, metric: str | None = None,
                    out: Callable[[str], None] = print) -> tuple[Path, list[Path]]:
    """The report and figures of a stored campaign, beside its store; the text report goes to `out`."""
    with Store(results, read_only=True) as store:
        rep = build(store, [campaign_id], test, correction, reference, axis, metric)
    out(format_text(rep))
    directory = out_dir(Path(results), name, campaign_id)
    files = write_files(lambda: write_all(rep, directory, f"{name} #{campaign_id}"), directory)
    return directory, files
