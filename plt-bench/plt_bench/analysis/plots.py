"""Figures of a campaign (seaborn/matplotlib; PNG and SVG). Every figure states its conditions,
the link backend and the test behind its significance marks."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib
import matplotlib.lines
import matplotlib.patches
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402

from .. import protocols, units  # noqa: E402
from ..conditions import VARIANT_AXES  # noqa: E402
from ..servers import SERVERS  # noqa: E402
from ..units import format_rate  # noqa: E402


def _protos(rows, key=lambda r: r["proto"]) -> list[str]:
    """The protocols of rows (dicts or records), in the table's order (h3, h2, h1)."""
    return sorted({key(r) for r in rows}, key=protocols.order)


def _color(proto: str) -> str:
    return protocols.color(proto.split()[0])


def _variants(cells) -> tuple[list[str], callable]:
    """The lines of a cell figure: one per protocol, or per protocol and congestion control and
    browser and server where the cells hold several ("h2 bbr", "h3 firefox", "h3 quinn"); and the
    function naming a cell's."""
    vary = [a for a in VARIANT_AXES if len({getattr(c, a) for c in cells}) > 1]

    def name(c) -> str:
        return " ".join([c.proto, *(getattr(c, a) for a in vary)])
    return sorted({name(c) for c in cells}, key=lambda v: (protocols.order(v.split()[0]), v)), name


def _name(proto: str) -> str:
    """'h3' -> 'h3 (HTTP/3)' in legends."""
    return f"{proto} ({protocols.label(proto)})" if proto in protocols.BY_NAME else proto


def _save(fig, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    from .files import atomic
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    try:  # each whole or not at all: a full disk left a 0-byte PNG
        atomic(paths[0], lambda tmp: fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight"))
        atomic(paths[1], lambda tmp: fig.savefig(tmp, format="svg", bbox_inches="tight"))
    finally:
        plt.close(fig)
    return paths


def _finish(fig, text: str, meta: dict, out_dir: Path, stem: str) -> list[Path]:
    """The figure's title (what it shows, and the link backend it was measured on), saved."""
    fig.suptitle(f"{text}; link: {meta.get('link_backend')}", fontsize=10)
    fig.tight_layout()
    return _save(fig, out_dir, stem)


def time_label(ms: float) -> str:
    """A time on an axis as people read it: '40 ms', '250 ms', '1.5 s', '12 s' (pure)."""
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    return f"{ms:.3g} ms" if ms >= 1 or ms == 0 else f"{ms:.2g} ms"


def size_label(nbytes: float) -> str:
    """A size on an axis: '5 KB', '500 KB', '1.5 MB', '10 MB' (decimal units, as --size takes them; pure)."""
    for unit, mult in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= mult:
            return f"{nbytes / mult:.3g} {unit}"
    return f"{nbytes:.3g} B"


def log_subs(lo: float, hi: float) -> tuple[float, ...]:
    """Where a log axis from lo to hi puts its labelled ticks within each decade (pure): every decade
    alone where it spans several; 1, 2 and 5 where it spans one to three (100 ms, 200 ms, 500 ms, 1 s);
    every whole step where it spans less than one (a single '1 s' labelled 0.13-1.2 s)."""
    import math
    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 0.0
    return (1.0,) if decades > 3 else (1.0, 2.0, 5.0) if decades >= 1 else tuple(float(k) for k in range(1, 10))


def _time_axis(ax, which: str = "y") -> None:
    """An axis of times in ms, labelled in ms and s (log or linear), never as 10^3 or 2x10^-1; a log
    axis of less than a few decades labelled in readable steps (log_subs), at the limits the data
    gave it (call it after plotting)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    axis = ax.yaxis if which == "y" else ax.xaxis
    if (ax.get_yscale() if which == "y" else ax.get_xscale()) == "log":
        lo, hi = ax.get_ylim() if which == "y" else ax.get_xlim()
        axis.set_major_locator(LogLocator(base=10, subs=log_subs(min(lo, hi), max(lo, hi)), numticks=15))
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(lambda v, _: time_label(v) if v > 0 else "0"))


def _size_axis(ax, which: str = "x") -> None:
    """An axis of sizes in bytes, labelled in KB and MB."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(FuncFormatter(lambda v, _: size_label(v) if v > 0 else "0"))
    axis.set_minor_formatter(NullFormatter())


def _rate_label(bps) -> str:
    return "unshaped" if bps is None or (isinstance(bps, float) and math.isnan(bps)) else format_rate(int(bps))


def _other(rtt, jitter, loss) -> str:
    parts = [f"RTT {rtt:g} ms" if rtt else "no added delay"]
    if jitter:
        parts.append(f"jitter {jitter:g} ms")
    parts.append(f"loss {loss:g}%" if loss else "no loss")
    return ", ".join(parts)


def _get(r, k, default=None):
    """A field of a row: a dict's key or a record's attribute."""
    return r.get(k, default) if isinstance(r, dict) else getattr(r, k, default)


def _pages(rows) -> list[str]:
    """The pages' labels in rows, in order of their bytes, then of their objects (1x1MB before 200x5KB)."""
    return [p for _, _, p in sorted({(_get(r, "size_bytes"), _get(r, "objects", 0) or 0, _get(r, "page")) for r in rows})]


def _page_axis(rows) -> str:
    """The page axis's name: what its labels are (a generated page of images names itself NxS; a
    recording, a folder or another kind names itself otherwise, and 'NxS' misread a corpus's axis)."""
    import re
    labels = {str(_get(r, "page")) for r in rows}
    if all(re.fullmatch(r"[0-9.]+[KMG]?B", x) for x in labels):
        return "page size"
    if any(re.fullmatch(r"(\d+o:)?\d+x[0-9.]+[KMG]?B(@.*)?", x) for x in labels):
        return "page (NxS: N images of S" + ("; Mo: over M origins)" if any("o:" in x for x in labels) else ")")
    return "page"


def heatmap_matrix(rows: list) -> dict[tuple, dict]:
    """Per (rtt, jitter, loss) group of comparisons of one pair (records.Comparison): pages (rows:
    the Long Look's page composition), rates (columns), diff and significance matrices."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        groups[(r.rtt_ms, r.jitter_ms, r.loss_pct)].append(r)
    out = {}
    for key, rs in groups.items():
        pages = _pages([r.reference for r in rs])
        # a column per downlink rate, a trace's apart from a constant rate of its mean
        rates = sorted({_column(r) for r in rs}, key=lambda c: (c[0] is None, c[0] or 0, c[1] or ""))
        diff = np.full((len(pages), len(rates)), np.nan)
        sig = np.zeros((len(pages), len(rates)), dtype=bool)
        cpu = np.zeros((len(pages), len(rates)), dtype=bool)
        for r in rs:
            i, j = pages.index(r.page), rates.index(_column(r))
            diff[i, j], sig[i, j] = r.diff_pct, r.significant
            cpu[i, j] = bool(r.reference.n_cpu_bound or r.other.n_cpu_bound)
        out[key] = {"pages": pages, "rates": rates, "diff": diff, "significant": sig, "cpu_bound": cpu,
                    "axis": _page_axis([r.reference for r in rs])}
    return out


def _column(r) -> tuple:
    """A comparison's heatmap column: (downlink rate, its trace's name or None)."""
    return (r.rate_down_bps, getattr(r.reference, "trace_down", None))


def _column_label(col: tuple) -> str:
    rate, trace = col
    return f"trace:{trace}\n(mean {_rate_label(rate)})" if trace else _rate_label(rate)


def varying(rows: list) -> set[str]:
    """Which of the axes beside the protocol (cc, browser, server) take several values in these comparisons."""
    return {a for a in VARIANT_AXES if len({getattr(c, a) for r in rows for c in (r.reference, r.other)}) > 1}


def pairs(rows: list) -> dict[tuple[str, str, str], list]:
    """The comparisons per pair (reference, other, within: the values they share of the other axes
    that vary, '' where none does: Comparison.within_in), in the table's order."""
    out: dict[tuple[str, str, str], list] = {}
    vary = varying(rows)
    for r in rows:  # rows come in the table's order (stats.compare)
        out.setdefault((r.reference_value, r.other_value, r.within_in(vary)), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: (protocols.order(kv[0][0]), protocols.order(kv[0][1]),
                                                    protocols.order(kv[0][2].split(" ")[0]), kv[0][2])))


def heatmaps(rows: list, meta: dict, out_dir: Path, title: str) -> list[Path]:
    """One heatmap per pair (h3 vs h2, h3 vs h1; or bbr vs cubic, firefox vs chromium within each
    protocol) and per (RTT, jitter, loss): pages against rates, the difference of the medians where
    significant; heatmap_<ref>-vs-<other>[_<within>][_rtt.._jitter.._loss..]: within is the
    congestion control or the browser (or both) where a campaign has several, the protocol of a
    comparison of congestion controls or browsers."""
    paths = []
    for (ref, other, within), pair_rows in pairs(rows).items():
        paths += _pair_heatmaps(pair_rows, ref, other, within or None, meta, out_dir, title)
    return paths


def _short(metric: str) -> str:
    """A metric's name on an axis: PLT, FCP, LCP, TTFB, SI."""
    return metric.upper()


def _stem(cs: list, base: str) -> str:
    """A figure's file stem, the metric named when it is not the default (PLT and LCP figures of one
    store side by side)."""
    from ..records import DEFAULT_METRIC
    return base if cs[0].metric == DEFAULT_METRIC else f"{base}_{cs[0].metric}"


def _pair_heatmaps(rows: list, ref: str, other: str, within: str | None, meta: dict, out_dir: Path,
                   title: str) -> list[Path]:
    from ..records import DEFAULT_METRIC, METRICS
    paths = []
    metric = rows[0].reference.metric
    short = _short(metric)
    for (rtt, jitter, loss), m in sorted(heatmap_matrix(rows).items()):
        diff, sig = m["diff"], m["significant"]
        finite = np.abs(diff[np.isfinite(diff)])
        lim = max(5.0, float(finite.max()) if finite.size else 5.0)
        fig, ax = plt.subplots(figsize=(1.3 * len(m["rates"]) + 2.5, 0.8 * len(m["pages"]) + 2.2))
        shown = np.where(sig, diff, np.nan)  # white where not significant
        sns.heatmap(shown, ax=ax, cmap="RdBu", center=0, vmin=-lim, vmax=lim,
                    cbar_kws={"label": f"{ref} vs {other} {short} (%)"},
                    linewidths=0.5, linecolor="#dddddd", xticklabels=[_column_label(c) for c in m["rates"]],
                    yticklabels=m["pages"])
        for i in range(diff.shape[0]):
            for j in range(diff.shape[1]):
                if np.isnan(diff[i, j]):
                    text = "-"
                else:
                    num = f"{diff[i, j]:+.1f}%" if abs(diff[i, j]) < 10 else f"{diff[i, j]:+.0f}%"
                    text = num if sig[i, j] else f"{num}\nn.s."
                ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8,
                        color="white" if sig[i, j] and abs(diff[i, j]) > 0.6 * lim else "black",
                        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 1}
                        if m["cpu_bound"][i, j] and not sig[i, j] else None)
                if sig[i, j]:  # a tiny significant difference is pale: the frame tells it from white (n.s.)
                    ax.add_patch(matplotlib.patches.Rectangle((j, i), 1, 1, fill=False, edgecolor="black", lw=1.5))
                if m["cpu_bound"][i, j]:  # a CPU limit, not the network's result: hatched
                    ax.add_patch(matplotlib.patches.Rectangle((j, i), 1, 1, fill=False, hatch="///", lw=0,
                                                              edgecolor="#555555"))
        ax.set_xlabel("bandwidth")
        ax.set_ylabel(m["axis"])
        if m["cpu_bound"].any():
            ax.legend(handles=[matplotlib.patches.Patch(facecolor="white", edgecolor="#555555", hatch="///",
                                                        label="CPU-bound trials: a limit of this machine")],
                      loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.02 * len(m["pages"])), fontsize=8,
                      frameon=False)
        t0 = rows[0]
        group = [r for r in rows if (r.rtt_ms, r.jitter_ms, r.loss_pct) == (rtt, jitter, loss)]
        ns = sorted({min(r.reference.n, r.other.n) for r in group})
        n_text = f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]} to {ns[-1]}"
        names = f"{ref} vs {other} within {_name(within)}" if rows[0].axis != "proto" else \
            f"{_name(ref)} vs {_name(other)}{f' ({within})' if within else ''}"
        ax.set_title(f"{title}: {names} {METRICS[metric].label} ({n_text} per cell)\n"
                     f"{_other(rtt, jitter, loss)}; link: {meta.get('link_backend')}\n"
                     f"red: {ref} faster, blue: {other} faster, framed: significant, white: not significant "
                     f"({t0.test}, {t0.correction}-corrected over every pair, p < 0.05)", fontsize=9)
        stem = (("heatmap_" if metric == DEFAULT_METRIC else f"heatmap_{metric}_") + f"{ref}-vs-{other}"
                + (f"_{within.replace(' ', '-')}" if within else "")
                + ("" if (rtt, jitter, loss) == (0, 0, 0) else f"_rtt{rtt:g}_jitter{jitter:g}_loss{loss:g}"))
        paths += _save(fig, out_dir, stem)
    return paths


def loss_plot(cells: dict, meta: dict, out_dir: Path, title: str) -> list[Path]:
    by = defaultdict(list)
    for c in cells.values():
        by[(c.rate_down_bps, c.rtt_ms, c.jitter_ms)].append(c)
    paths = []
    for (rate, rtt, jitter), cs in by.items():
        losses = sorted({c.loss_pct for c in cs})
        if len(losses) < 2:
            continue
        pages = _pages(cs)
        fig, axes = plt.subplots(1, len(pages), figsize=(4.2 * len(pages), 3.6), squeeze=False)
        for ax, page in zip(axes[0], pages):
            variants, name = _variants(cs)
            for proto in variants:
                pts = sorted((c.loss_pct, c.median_ms, c.ci_low_ms, c.ci_high_ms) for c in cs
                             if c.page == page and name(c) == proto)
                if not pts:
                    continue
                x, y, lo, hi = (np.array(v, dtype=float) for v in zip(*pts))
                ax.plot(x, y / 1000, "o-", color=_color(proto), label=proto)
                ok = np.isfinite(lo) & np.isfinite(hi)
                ax.fill_between(x[ok], lo[ok] / 1000, hi[ok] / 1000, color=_color(proto), alpha=0.2)
            ax.set_title(page)
            ax.set_xlabel("packet loss (%)")
            ax.set_ylabel(f"{_short(cs[0].metric)} (s), median and 95% CI")
            ax.legend()
        fig.suptitle(f"{title}: {_short(cs[0].metric)} vs loss at {_rate_label(rate)}, RTT {rtt:g} ms"
                     f"{f', jitter {jitter:g} ms' if jitter else ''}; link: {meta.get('link_backend')}", fontsize=10)
        fig.tight_layout()
        paths += _save(fig, out_dir, _stem(cs, f"loss_{_rate_label(rate)}_rtt{rtt:g}"))
    return paths


def jitter_plot(cells: dict, meta: dict, out_dir: Path, title: str) -> list[Path]:
    by = defaultdict(list)
    for c in cells.values():
        by[(c.rate_down_bps, c.rtt_ms, c.loss_pct)].append(c)
    paths = []
    for (rate, rtt, loss), cs in by.items():
        jitters = sorted({c.jitter_ms for c in cs})
        if len(jitters) < 2:
            continue
        pages = _pages(cs)
        fig, axes = plt.subplots(1, len(pages), figsize=(3.6 * len(pages), 3.6), squeeze=False)
        for ax, page in zip(axes[0], pages):
            width = 0.8 / len(jitters)
            protos, name = _variants(cs)
            for k, jit in enumerate(jitters):
                for p_i, proto in enumerate(protos):
                    c = next((c for c in cs if c.page == page and name(c) == proto and c.jitter_ms == jit), None)
                    if c is None:
                        continue
                    y = c.median_ms / 1000
                    err = [[max(0, y - c.ci_low_ms / 1000)], [max(0, c.ci_high_ms / 1000 - y)]] \
                        if np.isfinite(c.ci_low_ms) else None
                    ax.bar(p_i + k * width - 0.4 + width / 2, y, width, yerr=err, capsize=3, color=_color(proto),
                           alpha=1.0 if jit == 0 else 0.55, edgecolor="black", linewidth=0.5,
                           label=f"jitter {jit:g} ms" if p_i == 0 else None)
            ax.set_xticks(range(len(protos)), protos)
            ax.set_title(page)
            ax.set_ylabel(f"{_short(cs[0].metric)} (s), median and 95% CI")
            ax.legend(fontsize=7)
        fig.suptitle(f"{title}: {_short(cs[0].metric)} with and without jitter at {_rate_label(rate)}, RTT {rtt:g} ms"
                     f"{f', loss {loss:g}%' if loss else ''} (jitter reorders packets); link: {meta.get('link_backend')}",
                     fontsize=10)
        fig.tight_layout()
        paths += _save(fig, out_dir, _stem(cs, f"jitter_{_rate_label(rate)}_rtt{rtt:g}"))
    return paths


def trace_plot(cells: dict, meta: dict, out_dir: Path, title: str) -> list[Path]:
    """The metric against the downlink trace's mean rate, per protocol, one panel per page: links that
    move, set beside what a constant link of the same mean would suggest (each point is named by
    its trace: two traces of one mean may differ)."""
    from ..records import DEFAULT_METRIC, METRICS
    by = defaultdict(list)
    for c in cells.values():
        if c.trace_down:
            by[(c.rtt_ms, c.jitter_ms, c.loss_pct)].append(c)
    paths = []
    for (rtt, jitter, loss), cs in by.items():
        if len({c.trace_down for c in cs}) < 2:
            continue
        pages = _pages(cs)
        metric = METRICS[cs[0].metric]
        fig, axes = plt.subplots(1, len(pages), figsize=(7.0 * len(pages), 4.8), squeeze=False)
        for ax, page in zip(axes[0], pages):
            variants, name = _variants(cs)
            for proto in variants:
                pts = sorted((c.rate_down_bps / 1e6, c.median_ms, c.ci_low_ms, c.ci_high_ms, c.trace_down) for c in cs
                             if c.page == page and name(c) == proto)
                if not pts:
                    continue
                x, y, lo, hi = (np.array([p[i] for p in pts], dtype=float) for i in range(4))
                # points, not a line: two traces of one mean rate are two links (the shape decides)
                err = np.array([np.where(np.isfinite(lo), y - lo, 0), np.where(np.isfinite(hi), hi - y, 0)]) / 1000
                ax.errorbar(x, y / 1000, yerr=err, fmt="o", capsize=3, color=_color(proto), label=proto)
            for xv, trace in sorted({(c.rate_down_bps / 1e6, c.trace_down) for c in cs if c.page == page}):
                ax.annotate(trace, (xv, ax.get_ylim()[1]), fontsize=6, rotation=90, va="top", ha="right",
                            color="#555555")
            ax.set_title(page)
            ax.set_xlabel("downlink trace's mean rate (Mbit/s)")
            ax.set_ylabel(f"{metric.label} (s), median and 95% CI")
            ax.legend(fontsize=7)
        fig.suptitle(f"{title}: {metric.label} over trace-driven links, against each trace's mean rate\n"
                     f"{_other(rtt, jitter, loss)}; link: {meta.get('link_backend')}", fontsize=9)
        fig.tight_layout()
        paths += _save(fig, out_dir, "trace_rate" + ("" if cs[0].metric == DEFAULT_METRIC else f"_{cs[0].metric}")
                       + f"_rtt{rtt:g}" + (f"_jitter{jitter:g}" if jitter else "") + (f"_loss{loss:g}" if loss else ""))
    return paths


def size_plot(cells: dict, meta: dict, out_dir: Path, title: str) -> list[Path]:
    """The metric against the size of single-object pages (a multi-object page's is not a function of
    its bytes alone: the heatmap has those)."""
    by = defaultdict(list)
    for c in cells.values():
        if not c.objects:
            by[(c.rtt_ms, c.jitter_ms, c.loss_pct)].append(c)
    paths = []
    for (rtt, jitter, loss), cs in by.items():
        if len({c.size_bytes for c in cs}) < 2:
            continue
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        rates = sorted({c.rate_down_bps for c in cs}, key=lambda b: (b is None, b or 0))
        palette = sns.color_palette("viridis", len(rates))
        for color, rate in zip(palette, rates):
            variants, name = _variants(cs)
            for proto, style in zip(variants, ("-", "--", ":", "-.", (0, (1, 3)), (0, (5, 1)))):
                pts = sorted((c.size_bytes, c.median_ms) for c in cs if c.rate_down_bps == rate and name(c) == proto)
                if pts:
                    x, y = zip(*pts)
                    ax.plot(x, np.array(y), style, marker="o", color=color,
                            label=f"{_rate_label(rate)} {proto}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sorted({c.size_bytes for c in cs}))
        _size_axis(ax)
        _time_axis(ax)
        ax.set_xlabel("page size")
        ax.set_ylabel(f"{_short(cs[0].metric)}, median")
        ax.legend(fontsize=7, ncol=2)
        ax.set_title(f"{title}: {_short(cs[0].metric)} vs page size per bandwidth ({', '.join(f'{p} {w}' for p, w in zip(_variants(cs)[0], ('solid', 'dashed', 'dotted', 'dash-dot', 'sparse dots', 'dense dashes')))})\n{_other(rtt, jitter, loss)}; "
                     f"link: {meta.get('link_backend')}", fontsize=9)
        paths += _save(fig, out_dir, _stem(cs, "size" + ("" if (rtt, jitter, loss) == (0, 0, 0) else f"_rtt{rtt:g}_loss{loss:g}")))
    return paths


ROLE_COLORS = {"browser": "#7f8c8d", "renderer": "#8e44ad", "network": "#d35400", "gpu": "#16a085",
               **{c.meta_key: c.cpu_color for c in SERVERS.values()}, "linkem": "#b7950b", "other": "#bdc3c7"}


def _rolling(values: list[float], n: int) -> np.ndarray:
    """Mean over the last n values (fewer at the start)."""
    v = np.asarray(values, dtype=float)
    c = np.cumsum(np.insert(v, 0, 0.0))
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(idx - n, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def cpu_time_plot(series: dict[str, dict], meta: dict, out_dir: Path, title: str, smooth_s: float = 0.5) -> list[Path]:
    """CPU utilization over time, % of one core per role; user (top) and system (bottom); one capture
    trial per protocol side by side (the seed's Part 3). `series`: proto -> {"trial": row, "samples": [...]}.
    Lines are means over `smooth_s` (the kernel counts CPU in 10 ms ticks, so one 100 ms interval is
    quantized to 10%)."""
    from .stats import cpu_percent, cpu_role
    protos = sorted(series, key=protocols.order)
    if not protos:
        return []
    interval = meta.get("cpu_interval_s") or 0.1
    n = max(1, round(smooth_s / interval))
    fig, axes = plt.subplots(2, len(protos), figsize=(6.2 * len(protos), 6.8), sharey=True, sharex="col",
                             squeeze=False)
    shown = []
    for col, proto in enumerate(protos):
        t = series[proto]["trial"]
        merged: dict[tuple, dict] = {}
        for s in series[proto]["samples"]:  # fold the minor Chromium roles into "other"
            k = (cpu_role(s["role"]), s["t_s"])
            m = merged.setdefault(k, {"role": k[0], "t_s": s["t_s"], "user_s": 0.0, "system_s": 0.0})
            m["user_s"] += s["user_s"]
            m["system_s"] += s["system_s"]
        pct = cpu_percent(list(merged.values()))
        for row, key in enumerate(("user_pct", "system_pct")):
            ax = axes[row][col]
            for role, color in ROLE_COLORS.items():
                pts = sorted((p["t_s"], p[key]) for p in pct if p["role"] == role)
                if not pts or max(v for _, v in pts) < 1.0:
                    continue
                x, y = zip(*pts)
                ax.plot(x, _rolling(list(y), n), "-", color=color, lw=1.3, label=role)
                if role not in shown:
                    shown.append(role)
            if t.plt_ms:
                ax.axvline(t.plt_ms / 1000, color="black", lw=0.8, ls=":")
            ax.grid(alpha=0.3)
            ax.set_ylabel(f"{key.split('_')[0]} CPU, % of one core" if col == 0 else "")
        axes[0][col].set_title(f"{_name(proto)}: {t.page} at {_rate_label(t.conditions.rate_down_bps)}, "
                               f"PLT {t.plt_ms / 1000:.2f} s (dotted; trial {t.seq})", fontsize=9)
        axes[1][col].set_xlabel("time since navigation start (s)")
    handles = [matplotlib.lines.Line2D([], [], color=ROLE_COLORS[r], lw=2) for r in shown]
    fig.legend(handles, shown, loc="lower center", ncol=len(shown), fontsize=8, frameon=False)
    fig.suptitle(f"{title}: CPU utilization per role over time (sampled every {interval * 1000:.0f} ms, "
                 f"mean over {n * interval:.1f} s)\nlink: {meta.get('link_backend')}", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return _save(fig, out_dir, "cpu_time")


def cpu_by_role_plot(by_role: list[dict], meta: dict, out_dir: Path, title: str) -> list[Path]:
    """Bars: CPU ms per MB read by role (cpu_per_mb), or per trial where the trials read under a
    megabyte each (cpu_per_trial; stats.PER_MB_MIN_BYTES), the protocols side by side, user and
    system stacked."""
    if not by_role:
        return []
    per_mb = all(x["cpu_s_per_mb"] is not None for x in by_role)
    unit = "mb" if per_mb else "trial"
    roles = [r for r in (*ROLE_COLORS,) if any(x["role"] == r for x in by_role)]
    fig, ax = plt.subplots(figsize=(1.2 * len(roles) + 3, 4.4))
    variant = (lambda x: x.get("variant") or x["proto"])  # the protocol, with its browser where several ran
    protos = sorted({variant(x) for x in by_role}, key=lambda v: (protocols.order(v.split()[0]), v))
    width = 0.76 / len(protos)
    for k, proto in enumerate(protos):
        rows = {x["role"]: x for x in by_role if variant(x) == proto}
        if not rows:
            continue
        xs = np.arange(len(roles)) + (k - (len(protos) - 1) / 2) * width
        user = np.array([rows[r][f"user_s_per_{unit}"] * 1000 if r in rows else 0 for r in roles])
        system = np.array([rows[r][f"system_s_per_{unit}"] * 1000 if r in rows else 0 for r in roles])
        # a protocol's colour; the second browser's bars of it framed in black
        edge = {"edgecolor": "black", "linewidth": 1.2} if proto.split()[1:] and proto.split()[1] != \
            by_role[0].get("browser", "chromium") else {}
        ax.bar(xs, user, width, color=_color(proto), label=f"{proto} user", **edge)
        ax.bar(xs, system, width, bottom=user, color=_color(proto), alpha=0.45, hatch="//",
               label=f"{proto} system", **edge)
        for x, tot in zip(xs, user + system):
            ax.text(x, tot, units.format_sig(tot), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(np.arange(len(roles)), roles)
    ax.set_ylabel("CPU ms per MB read" if per_mb else "CPU ms per trial")
    ax.legend(fontsize=7)
    mb = {variant(x): x for x in by_role}
    read = ", ".join(f"{p} {units.format_sig(x['mb'])} MB, {units.format_sig(x['mb_per_trial'])} per trial"
                     for p, x in mb.items())
    what = "per MB read" if per_mb else "per trial (under 1 MB a trial: per MB would be a load's fixed cost)"
    ax.set_title(f"{title}: CPU {what}, by role\n({read}; ok trials) link: {meta.get('link_backend')}; "
                 f"the browser roles count from navigation start", fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir, f"cpu_per_{unit}")


def datarate_plot(rows: list[dict], meta: dict, out_dir: Path, title: str) -> list[Path]:
    """The seeds' datarate vs loss: one panel per rate (columns) and RTT (rows), the link's mean
    Mbit/s with its sd per protocol against loss, the nominal rate dashed."""
    rows = [r for r in rows if r["throughput_mean_mbps"] is not None or r["goodput_mean_mbps"] is not None]
    if not rows:
        return []
    rates = sorted({r["rate_down_bps"] for r in rows}, key=lambda b: (b is None, b or 0))
    rtts = sorted({r["rtt_ms"] for r in rows})
    fig, axes = plt.subplots(len(rtts), len(rates), figsize=(3.8 * len(rates), 3.0 * len(rtts)), squeeze=False)
    for i, rtt in enumerate(rtts):
        for j, rate in enumerate(rates):
            ax = axes[i][j]
            for proto in _protos(rows):
                pts = sorted((r["loss_pct"], *_datarate(r)) for r in rows
                             if r["rtt_ms"] == rtt and r["rate_down_bps"] == rate and r["proto"] == proto)
                if pts:
                    x, y, sd = (np.array(v, dtype=float) for v in zip(*pts))
                    ax.errorbar(x, y, yerr=np.nan_to_num(sd), fmt="o-", capsize=3, color=_color(proto),
                                label=proto)
            if rate:
                ax.axhline(rate / 1e6, color="grey", ls="--", lw=1, label="link rate")
            ax.set_title(f"{_rate_label(rate)}, RTT {rtt:g} ms", fontsize=9)
            ax.set_xlabel("packet loss (%)")
            ax.set_ylabel("Mbit/s at the link")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7)
    return _finish(fig, f"{title}: datarate vs loss (mean and sd over the runs; the link's own counter)", meta,
                   out_dir, "datarate_vs_loss")


def _datarate(r: dict) -> tuple[float, float]:
    """The link's figure where it was read, else the browser's."""
    if r["throughput_mean_mbps"] is not None:
        return r["throughput_mean_mbps"], r["throughput_sd_mbps"] if r["throughput_sd_mbps"] is not None else 0.0
    return r["goodput_mean_mbps"], r["goodput_sd_mbps"] if r["goodput_sd_mbps"] is not None else 0.0


def throughput_time_plot(series: list[dict], meta: dict, out_dir: Path, title: str) -> list[Path]:
    """Throughput second by second (per interval): per rate and RTT a figure, one panel per loss,
    the link's Mbit/s per protocol, mean over the runs, the nominal rate dashed."""
    by = defaultdict(list)
    for r in series:
        by[(r["rate_down_bps"], r["rtt_ms"])].append(r)
    paths = []
    for (rate, rtt), rs in sorted(by.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0, kv[0][1])):
        losses = sorted({r["loss_pct"] for r in rs})
        fig, axes = plt.subplots(1, len(losses), figsize=(3.6 * len(losses), 3.2), squeeze=False, sharey=True)
        for ax, loss in zip(axes[0], losses):
            for proto in _protos(rs):
                per_t = defaultdict(list)
                for r in rs:
                    if r["loss_pct"] == loss and r["proto"] == proto:
                        per_t[r["t_s"]].append(r["link_mbps"] if r["link_mbps"] is not None else r["browser_mbps"])
                if per_t:
                    ts = sorted(per_t)
                    ax.plot(ts, [float(np.mean(per_t[t])) for t in ts], "-", color=_color(proto),
                            label=proto)
            if rate:
                ax.axhline(rate / 1e6, color="grey", ls="--", lw=1)
            ax.set_title(f"loss {loss:g}%", fontsize=9)
            ax.set_xlabel("time (s)")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7)
        axes[0][0].set_ylabel("Mbit/s at the link, per interval")
        paths += _finish(fig, f"{title}: throughput over time at {_rate_label(rate)}, RTT {rtt:g} ms (mean over the "
                         "runs)", meta, out_dir, f"throughput_time_{_rate_label(rate)}_rtt{rtt:g}")
    return paths


def latency_plot(rows: list[dict], meta: dict, out_dir: Path, title: str) -> list[Path]:
    """Request latency: per link conditions a panel, per request page a bar per protocol: the
    p50 bar with the p90 and p99 marked above it, on a log scale."""
    if not rows:
        return []
    conds = list(dict.fromkeys(r["conditions"] for r in rows))
    fig, axes = plt.subplots(1, len(conds), figsize=(max(4.5, 1.3 * len({r["page"] for r in rows}) + 2) * len(conds), 4.0),
                             squeeze=False)
    for ax, cond in zip(axes[0], conds):
        rs = [r for r in rows if r["conditions"] == cond]
        pages = list(dict.fromkeys(r["page"] for r in rs))
        protos = _protos(rs)
        bar = 0.76 / len(protos)
        for k, proto in enumerate(protos):
            for i, page in enumerate(pages):
                r = next((x for x in rs if x["page"] == page and x["proto"] == proto), None)
                if r is None or r["p50_ms"] is None:
                    continue
                x = i + (k - (len(protos) - 1) / 2) * bar
                ax.bar(x, r["p50_ms"], width=bar * 0.95, color=_color(proto), alpha=0.85,
                       label=proto if i == 0 else None)
                ax.plot([x, x], [r["p50_ms"], r["p99_ms"]], color="black", lw=1)
                ax.plot([x], [r["p90_ms"]], "_", color="black", ms=10)
                ax.plot([x], [r["p99_ms"]], "v", color="black", ms=4)
        ax.set_xticks(range(len(pages)))
        ax.set_xticklabels(pages, rotation=20, fontsize=8)
        ax.set_yscale("log")
        _time_axis(ax)
        ax.set_ylabel("request latency: p50 bar, p90 -, p99 v")
        ax.set_title(cond, fontsize=9)
        ax.legend(fontsize=7)
    return _finish(fig, f"{title}: request latency after the load (reqKxS_cC: K requests of S, C at once)", meta,
                   out_dir, "request_latency")


def establishment_plot(rows: list[dict], meta: dict, out_dir: Path, title: str) -> list[Path]:
    """Connect and first byte against the RTT, per protocol (medians), beside the round trips the
    handshakes need (dashed: protocols.Protocol's connect_rtts and first_byte_rtts). Needs two RTTs or more."""
    rtts = sorted({r["rtt_ms"] for r in rows})
    if len(rtts) < 2:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), squeeze=False)
    for ax, (what, key, exp) in zip(axes[0], (("connect", "connect_ms", "expected_connect_rtts"),
                                              ("first byte of the page", "first_byte_ms", "expected_first_byte_rtts"))):
        several = len({r.get("browser") for r in rows}) > 1  # a line per protocol and browser
        for proto in _protos(rows):
            for k, browser in enumerate(sorted({r.get("browser") for r in rows if r["proto"] == proto} - {None})
                                        or [None]):
                pts = sorted((r["rtt_ms"], r[key], r[exp]) for r in rows if r["proto"] == proto and r[key] is not None
                             and r.get("browser") == browser)  # a first byte the browser did not time: no point
                if not pts:
                    continue
                x, y, e = (np.array(v, dtype=float) for v in zip(*pts))
                name = f"{proto} {browser}" if several else proto
                ax.plot(x, y, "o-" if k == 0 else "s:", color=_color(proto), label=f"{name} measured")
                if k == 0:
                    ax.plot(x, x * e, "--", color=_color(proto), lw=1, label=f"{proto}: {e[0]:g} RTT")
        ax.set_xlabel("RTT (ms)")
        ax.set_ylabel(f"{what} (ms, median)")
        ax.set_title(what, fontsize=9)
        ax.legend(fontsize=7)
    return _finish(fig, f"{title}: connection establishment against the RTT (fresh browser, fresh connection)", meta,
                   out_dir, "establishment")


def _slug(text: str) -> str:
    """Text as a file name's part: 'loss1%' -> 'loss1'."""
    import re
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_") or "x"


PANELS_PER_FIGURE = 12  # a distribution figure's cells (conditions x page); then the next figure


def distribution_plot(cells: dict, samples: dict, meta: dict, out_dir: Path, title: str) -> list[Path]:
    """Every trial, per cell: the empirical distribution (ECDF) of the metric per protocol (and per
    congestion control, browser, server where several ran), a dot per trial and the median dotted; a
    panel per conditions and page, PANELS_PER_FIGURE to a figure (distribution.png, or _1, _2, ...): a
    bimodal cell (TCP's slow-start loss or none) shows as two steps where its median would flip
    between them. samples: {cell key: [ms, ...]}."""
    cs = [c for c in cells.values() if samples.get(c.key)]
    if not cs:
        return []
    variants, name = _variants(cs)
    panels = sorted({(c.conditions, c.page) for c in cs}, key=lambda cp: min(
        (c.rate_down_bps or 0, c.rtt_ms, c.loss_pct, c.jitter_ms, c.conditions, c.size_bytes, c.objects)
        for c in cs if (c.conditions, c.page) == cp))
    styles = ("-", "--", ":", "-.", (0, (1, 3)), (0, (5, 1))) * 4
    paths = []
    for k in range(0, len(panels), PANELS_PER_FIGURE):
        chunk = panels[k:k + PANELS_PER_FIGURE]
        cols = min(4, len(chunk))
        rows = math.ceil(len(chunk) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 3.2 * rows), squeeze=False)
        for ax, (cond, page) in zip(axes.flat, chunk):
            for style, v in zip(styles, variants):
                for c in (c for c in cs if (c.conditions, c.page) == (cond, page) and name(c) == v):
                    xs = np.sort(np.asarray(samples[c.key], dtype=float))
                    ys = np.arange(1, len(xs) + 1) / len(xs)
                    color = _color(v)
                    ax.step(np.r_[xs[0], xs], np.r_[0.0, ys], where="post", ls=style, color=color, label=v)
                    ax.plot(xs, ys, "o", ms=3, color=color)
                    ax.axvline(c.median_ms, color=color, ls=":", lw=0.8)
            _time_axis(ax, "x")
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
            ax.set_ylim(0, 1.02)
            ax.set_yticks([0, 0.5, 1])
            ax.set_title(f"{cond}\n{page}", fontsize=8)
            ax.set_xlabel(_short(cs[0].metric), fontsize=8)
            ax.set_ylabel("share of trials", fontsize=8)
            ax.tick_params(labelsize=7)
            ns = sorted({len(samples[c.key]) for c in cs if (c.conditions, c.page) == (cond, page)})
            ax.text(0.98, 0.04, f"n = {'/'.join(map(str, ns))}", transform=ax.transAxes, fontsize=6, ha="right")
        for ax in list(axes.flat)[len(chunk):]:
            ax.set_visible(False)
        handles = [matplotlib.lines.Line2D([], [], color=_color(v), ls=st, marker="o", ms=3, label=v)
                   for st, v in zip(styles, variants)]
        axes[0, 0].legend(handles=handles, fontsize=6, loc="lower right", bbox_to_anchor=(1.0, 0.1))  # once a figure
        part = f"_{k // PANELS_PER_FIGURE + 1}" if len(panels) > PANELS_PER_FIGURE else ""
        paths += _finish(fig, f"{title}: every trial's {_short(cs[0].metric)} per cell (ECDF: a dot per trial, "
                              f"the median dotted)", meta, out_dir, _stem(cs, f"distribution{part}"))
    return paths


WATERFALLS_MAX = 6    # cells (conditions x page) with a waterfall figure, in the distribution figure's order
WATERFALL_MIN_OBJECTS = 2  # Resource Timing entries a trial needs for its cell's waterfall (a favicon is one)
WATERFALL_ROWS = 60   # requests drawn per protocol (a real page's first ones by start; the rest counted)
NO_PROTOCOL = "#b0b0b0"  # a request whose protocol the browser did not say (a cross-origin entry, the cache)


def median_trial(trials: list, values: list[float]):
    """The trial whose value is the median (of an even number, the lower middle one): a real trial
    to draw, not an average of two (pure)."""
    order = sorted(range(len(trials)), key=lambda i: (values[i], trials[i].seq))
    return trials[order[(len(order) - 1) // 2]]


def median_trials(trials: list, cells: dict, metric: str, keep) -> list[tuple[tuple[str, str], list]]:
    """Per cell (conditions, page) whose trials `keep` accepts, in the distribution figure's order and
    the first WATERFALLS_MAX: [(variant, its median trial, of how many)] per protocol (and congestion
    control, browser, server where several ran). The waterfalls' and filmstrips' choice."""
    from ..records import metric_value
    from .stats import cell_key, usable
    cs = list(cells.values())
    if not cs:
        return []
    _, name = _variants(cs)
    by: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for t in usable(trials):
        c = cells.get(cell_key(t))
        if c is not None and metric_value(t, metric) is not None and keep(t):
            by[(c.conditions, c.page)][name(c)].append(t)
    order = sorted(by, key=lambda cp: min((c.rate_down_bps or 0, c.rtt_ms, c.loss_pct, c.jitter_ms, c.conditions,
                                           c.size_bytes, c.objects) for c in cs if (c.conditions, c.page) == cp))
    out = []
    for cp in order[:WATERFALLS_MAX]:
        variants = sorted(by[cp], key=lambda v: (protocols.order(v.split()[0]), v))
        out.append((cp, [(v, median_trial(by[cp][v], [metric_value(x, metric) for x in by[cp][v]]), len(by[cp][v]))
                         for v in variants]))
    return out


def _cell_stem(cells: dict, cp: tuple[str, str], base: str) -> str:
    return _stem([next(c for c in cells.values() if (c.conditions, c.page) == cp)], f"{base}_{_slug(cp[0])}_{_slug(cp[1])}")


def requests_of(t) -> list[dict]:
    """A trial's requests for its waterfall, in order of start (ms from the navigation's start): the
    document from its navigation entry, then every resource entry; each with its protocol (h3, h2,
    h1 or None), when its connection was set up (new_connection: connectEnd after connectStart) and
    its phases (pure)."""
    from .. import protocols
    rows = []
    nav = t.nav
    entries = ([{**nav, "name": nav.get("name") or t.url, "startTime": nav.get("startTime", 0.0)}] if nav else []) + [
        r for r in t.resources if isinstance(r.get("startTime"), (int, float))]
    for e in entries:
        start = float(e.get("startTime") or 0.0)
        end = float(e.get("responseEnd") or start)
        hop = protocols.by_next_hop(e.get("nextHopProtocol"))
        cs, ce = e.get("connectStart") or 0.0, e.get("connectEnd") or 0.0
        rows.append({"name": str(e.get("name") or ""), "start_ms": start, "end_ms": max(end, start),
                     "response_ms": float(e.get("responseStart") or end), "proto": hop.name if hop else None,
                     "new_connection": ce > cs,  # a reused connection's entry has them equal
                     "connect_ms": (float(cs), float(ce))})
    return sorted(rows, key=lambda r: (r["start_ms"], r["end_ms"]))


def _short_name(url: str, own_host: str | None = None) -> str:
    """A request on a waterfall's axis: its file, with its host where that is not the document's own."""
    from urllib.parse import urlsplit
    u = urlsplit(url)
    path = u.path.rsplit("/", 1)[-1] or "/"
    return (f"{u.hostname} {path}" if u.hostname and u.hostname != own_host else path)[:34]


def waterfall_plot(trials: list, cells: dict, meta: dict, out_dir: Path, title: str, metric: str = "plt") -> list[Path]:
    """Per cell (conditions x page; the first WATERFALLS_MAX), the median trial of each protocol (and
    congestion control, browser, server where several ran) as a waterfall on one time axis: a bar per
    request from its start to its response's end (light: waiting for the first byte; dark: the body),
    coloured by the protocol that request actually used (grey: not said), a triangle where it set up
    a new connection, and the trial's FCP, LCP and load event marked. Each panel names its trial."""
    from urllib.parse import urlsplit

    from ..records import metric_value
    paths = []
    # a page of one object is its document alone (and the browser's favicon): no waterfall to read
    for (cond, page), chosen in median_trials(trials, cells, metric,
                                              lambda t: len(t.resources) >= WATERFALL_MIN_OBJECTS):
        drawn = [(v, t, n, requests_of(t)) for v, t, n in chosen]
        heights = [1.0 + 0.16 * min(len(rows), WATERFALL_ROWS) for *_, rows in drawn]
        fig, axes = plt.subplots(len(drawn), 1, figsize=(9.5, sum(heights) + 0.8), sharex=True, squeeze=False,
                                 gridspec_kw={"height_ratios": heights})
        for ax, (v, t, n, rows) in zip(axes[:, 0], drawn):
            shown = rows[:WATERFALL_ROWS]
            ys = np.arange(len(shown))
            colors = [protocols.color(r["proto"]) if r["proto"] else NO_PROTOCOL for r in shown]
            start, first, end = (np.array([r[k] for r in shown]) for k in ("start_ms", "response_ms", "end_ms"))
            ax.barh(ys, first - start, left=start, height=0.7, color=colors, alpha=0.35)  # one call per phase
            ax.barh(ys, end - first, left=first, height=0.7, color=colors)
            new = [(r["connect_ms"][0], y) for y, r in enumerate(shown) if r["new_connection"]]
            if new:
                ax.plot(*zip(*new), ls="", marker=">", ms=4, color="black")
            for ms, what, style in ((t.fcp_ms, "FCP", "--"), (t.lcp_ms, "LCP", "-."), (t.plt_ms, "load", ":")):
                if ms:
                    ax.axvline(ms, color="black", ls=style, lw=0.8)
                    ax.text(ms, -0.9, what, fontsize=6, ha="center", va="bottom")
            ax.set_yticks(range(len(shown)))
            own = urlsplit(t.nav.get("name") or t.url or "").hostname  # the document's host
            ax.set_yticklabels([_short_name(r["name"], own) for r in shown], fontsize=5)
            ax.set_ylim(len(shown) - 0.4, -1.2)
            more = f"; {len(rows) - len(shown)} more requests not drawn" if len(rows) > len(shown) else ""
            ax.set_title(f"{v}: trial {t.seq} (run {t.run_index}), the median of {n}: {_short(metric)} "
                         f"{time_label(metric_value(t, metric))}{more}", fontsize=8)
        _time_axis(axes[-1, 0], "x")
        axes[-1, 0].set_xlabel("time since the navigation's start")
        used = sorted({r["proto"] for *_, rows in drawn for r in rows}, key=lambda p: protocols.order(p) if p else 9)
        handles = [matplotlib.patches.Patch(color=protocols.color(p) if p else NO_PROTOCOL,
                                            label=_name(p) if p else "not said") for p in used]
        handles.append(matplotlib.lines.Line2D([], [], marker=">", ls="", color="black", label="new connection"))
        axes[0, 0].legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        stem = _cell_stem(cells, (cond, page), "waterfall")
        paths += _finish(fig, f"{title}: the median trial's requests per protocol at {cond} for {page} (colour: the "
                              "protocol each request used; light: waiting, dark: the body)", meta, out_dir, stem)
    return paths


FILMSTRIP_COLUMNS = 8  # frames shown per protocol, at even steps of one time axis


def frame_at(frames: list[tuple[float, bytes]], ms: float) -> bytes | None:
    """The frame on screen at ms: the last shown at or before it (None before the first; pure)."""
    shown = [jpeg for t, jpeg in frames if t <= ms]
    return shown[-1] if shown else None


def filmstrip_plot(trials: list, cells: dict, frames: dict, meta: dict, out_dir: Path, title: str,
                   metric: str = "plt") -> list[Path]:
    """Per cell (the first WATERFALLS_MAX with frames), the median trial of each protocol as a
    filmstrip on one time axis: what the page showed at FILMSTRIP_COLUMNS even steps from the
    navigation's start to the last one's load (each step the last frame shown by then, blank before
    the first), with each trial's FCP, LCP and load event marked across its strip. frames: {(campaign,
    seq): frames.zip} of the trials captured with --capture visual."""
    import io

    from PIL import Image

    from ..visual import read_frames
    if not frames:
        return []
    paths = []
    for (cond, page), chosen in median_trials(trials, cells, metric, lambda t: (t.campaign_id, t.seq) in frames):
        strips = []
        for v, t, n in chosen:
            try:
                strips.append((v, t, n, read_frames(frames[(t.campaign_id, t.seq)])))
            except (OSError, ValueError):
                continue  # a frames file gone or cut short: that protocol's strip is left out
        if not strips:
            continue
        end_ms = max(max([t.plt_ms or 0.0] + [ms for ms, _ in fs]) for _, t, _, fs in strips)
        step = end_ms / (FILMSTRIP_COLUMNS - 1) if end_ms > 0 else 1.0
        times = [k * step for k in range(FILMSTRIP_COLUMNS)]
        fig, axes = plt.subplots(len(strips), 1, figsize=(12, 1.9 * len(strips) + 0.6), sharex=True, squeeze=False)
        for ax, (v, t, n, fs) in zip(axes[:, 0], strips):
            for ms in times:
                jpeg = frame_at(fs, ms)
                if jpeg is None:
                    ax.add_patch(matplotlib.patches.Rectangle((ms - 0.45 * step, 0.05), 0.9 * step, 0.9, fill=False,
                                                              ec="#cccccc"))
                    continue
                with Image.open(io.BytesIO(jpeg)) as im:
                    im = im.convert("RGB")
                    im.thumbnail((240, 240))
                    ax.imshow(np.asarray(im), extent=(ms - 0.45 * step, ms + 0.45 * step, 0.05, 0.95), aspect="auto")
            for ms, what, style, color in ((t.fcp_ms, "FCP", "--", "#1f77b4"), (t.lcp_ms, "LCP", "-.", "#9467bd"),
                                           (t.plt_ms, "load", "-", "black")):
                if ms:
                    ax.axvline(ms, color=color, ls=style, lw=1.2)
                    ax.text(ms, 1.0, f"{what} {time_label(ms)}", fontsize=6, ha="center", va="bottom", color=color)
            ax.set_xlim(-0.5 * step, end_ms + 0.5 * step)
            ax.set_ylim(0, 1.12)
            ax.set_yticks([])
            ax.set_ylabel(v, fontsize=8, rotation=0, ha="right", va="center")
            ax.set_title(f"{v}: trial {t.seq} (run {t.run_index}), the median of {n} with frames", fontsize=8,
                         loc="left")
        axes[-1, 0].set_xticks(times)
        _time_axis(axes[-1, 0], "x")
        axes[-1, 0].set_xlabel("time since the navigation's start (each frame: what the page showed then)")
        stem = _cell_stem(cells, (cond, page), "filmstrip")
        paths += _finish(fig, f"{title}: what each protocol's median trial showed at {cond} for {page}", meta,
                         out_dir, stem)
    return paths


def corpus_plot(groups: list[dict], meta: dict, out_dir: Path, title: str) -> list[Path]:
    """Over the pages of a corpus (stats.corpus_groups): per conditions, the CDF of each page's
    difference (the reference's median against the other's, in %), one line per comparison and what
    it is within (the browser, where several ran); a filled dot where the page's difference is
    significant. corpus.png (corpus_1, ... for several conditions)."""
    if not groups:
        return []
    conds = list(dict.fromkeys(g["conditions"] for g in groups))
    styles = ("-", "--", ":", "-.") * 6
    paths = []
    for i, cond in enumerate(conds):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        mine = [g for g in groups if g["conditions"] == cond]
        for style, g in zip(styles, mine):
            xs = np.array([c.diff_pct for c in g["rows"]], dtype=float)
            ys = np.arange(1, len(xs) + 1) / len(xs)
            color = _color(g["other"]) if g["axis"] == "proto" else None
            label = f"{g['pair']} ({g['within']})"
            line = ax.step(np.r_[xs[0], xs], np.r_[0.0, ys], where="post", ls=style, color=color, label=label)[0]
            sig = np.array([c.significant for c in g["rows"]])
            ax.plot(xs[sig], ys[sig], "o", ms=4, color=line.get_color())
            ax.plot(xs[~sig], ys[~sig], "o", ms=4, mfc="none", color=line.get_color())
        ax.axvline(0.0, color="#555555", lw=0.8)
        ax.set_xlabel("difference of the page's medians, % (negative: the first named faster)")
        ax.set_ylabel("share of pages")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7, loc="lower right")
        ax.set_title(cond, fontsize=9)
        stem = "corpus" + (f"_{i + 1}" if len(conds) > 1 else "")
        paths += _finish(fig, f"{title}: each page's difference over the corpus (CDF; filled: significant)", meta,
                         out_dir, stem)
    return paths


def draw_report(rep: dict, out_dir: Path, title: str) -> list[Path]:
    """Every figure of a report (report.build)."""
    return draw_all(rep["rows"], rep["cells"], rep["metadata"], out_dir, title, rep["cpu_series"], rep["cpu_by_role"],
                    rep["datarate"], rep["throughput_series"], rep["latency"], rep["establishment"],
                    rep.get("samples"), rep.get("trials"), rep.get("metric", "plt"), rep.get("frames")) + corpus_plot(
        rep.get("corpus") or [], rep["metadata"], out_dir, title)


def draw_all(rows: list[dict], cells: dict, meta: dict, out_dir: Path, title: str,
             cpu_series: dict | None = None, by_role: list[dict] | None = None,
             datarate: list[dict] | None = None, series: list[dict] | None = None,
             latency: list[dict] | None = None, establishment: list[dict] | None = None,
             samples: dict | None = None, trials: list | None = None, metric: str = "plt",
             frames: dict | None = None) -> list[Path]:
    paths = heatmaps(rows, meta, out_dir, title) if rows else []
    paths += distribution_plot(cells, samples or {}, meta, out_dir, title)
    paths += waterfall_plot(trials or [], cells, meta, out_dir, title, metric)
    paths += filmstrip_plot(trials or [], cells, frames or {}, meta, out_dir, title, metric)
    paths += loss_plot(cells, meta, out_dir, title)
    paths += jitter_plot(cells, meta, out_dir, title)
    paths += size_plot(cells, meta, out_dir, title)
    paths += trace_plot(cells, meta, out_dir, title)
    paths += cpu_time_plot(cpu_series or {}, meta, out_dir, title)
    paths += cpu_by_role_plot(by_role or [], meta, out_dir, title)
    paths += datarate_plot(datarate or [], meta, out_dir, title)
    paths += throughput_time_plot(series or [], meta, out_dir, title)
    paths += latency_plot(latency or [], meta, out_dir, title)
    paths += establishment_plot(establishment or [], meta, out_dir, title)
    return paths
