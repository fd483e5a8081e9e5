"""A measurement's grid from the user's text: each part parses its own option and the grid is put
together here, above the parts and below the campaign (the model, plt_bench.conditions, holds the
records and imports no part).

    the pages        --size, by the page seam's parser (pages.parse_page; har:* and real:* expanded)
    the link         --bw, --rtt, --jitter, --loss, --queue: the link's numbers (conditions' parsers);
                     --aqm and --cross by link.aqm and link.cross; --trace-down/--trace-up by traces
    the protocols    --proto (protocols.parse)

Everything is checked here, before anything is created on the system.
"""

from __future__ import annotations

from . import protocols, traces, units
from .conditions import (Conditions, Grid, RTT_STEP_MS, JITTER_DISTS, LOSS_DIRECTIONS,
                         check_jitter, parse_durations, parse_list, parse_losses, parse_queue, parse_rates, parse_runs,
                         rate_fields)
from .errors import UsageError
from .link import aqm as aqm_mod, cross as cross_mod, origins as origins_mod
from .pages import Page, page_form, parse_page, timing as timing_mod
from .pages.real import expand
from .pages.recording import recorded_corpus


def parse_pages(text: str, option: str = "--size") -> tuple[Page, ...]:
    """Pages, single- ('500KB') or multi-object ('200x5KB'); har:* is every recording made here (a
    corpus: pages.recording.recorded_corpus), real:* every real page (pages.real.PAGES)."""
    text = expand(",".join(units.split_list(text, option)))  # real:*: every real page (pages.real.PAGES)
    if any(x.strip().lower() == "har:*" for x in units.split_list(text, option)):
        text = ",".join(",".join(f"har:{n}" for n in recorded_corpus(option)) if x.strip().lower() == "har:*" else x
                        for x in units.split_list(text, option))
    return parse_list(text, option, page_form(), lambda item: parse_page(item, option))



GRID_KEYS = ("proto", "bw", "size", "runs", "up_bw", "rtt", "jitter", "loss", "jitter_dist", "loss_direction", "queue",
             "trace_down", "trace_up", "aqm", "ecn", "cross", "origin_rtt", "think")


def parse_traces(text: str, option: str) -> tuple[traces.Trace, ...]:
    """Trace files, comma-separated: each read and checked (traces.read); two different files may not
    share a name (labels and reports show the name)."""
    out = parse_list(text, option, traces.TRACE_FORM, lambda item: traces.read(item, option))
    names: dict[str, str] = {}
    for t in out:
        if names.setdefault(t.name, t.sha256) != t.sha256:
            raise UsageError(f"{option}: two different traces are named {t.name} ({t.path} and another); rename one")
    return out


def _directions(downs, ups, trace_downs, trace_ups, name) -> list[tuple]:
    """Each condition's (down, up) rates: ints, None (unshaped) or traces.Trace."""
    if trace_downs:
        if trace_ups and len(trace_ups) not in (1, len(trace_downs)):
            raise UsageError(f"{name['trace_up']}: {len(trace_ups)} traces for {len(trace_downs)} downlink traces; "
                             f"give one (for every downlink trace) or one for each, in the order of {name['trace_down']}")
        pairs = []
        for i, d in enumerate(trace_downs):
            up = (trace_ups[0] if len(trace_ups) == 1 else trace_ups[i]) if trace_ups else (ups[0] if ups else d)
            pairs.append((d, up))
        return pairs
    pairs = []
    for d in downs:
        up = d if ups is None else ups[0]
        if trace_ups:
            up = trace_ups[0]
            if len(trace_ups) != 1:
                raise UsageError(f"{name['trace_up']}: give one trace when the downlink has a rate ({name['bw']})")
        if up is not None and d is None:
            raise UsageError(f"{name['trace_up'] if trace_ups else name['up_bw']}: cannot shape the uplink while "
                             f"{name['bw']} leaves the link unshaped")
        pairs.append((d, up))
    return pairs


MAX_CONDITIONS = 10_000


def make_grid(protos: str, rates: str, sizes: str, runs: str | int, up_rates: str | None = None,
              rtt: str | None = None, jitter: str | None = None, loss: str | None = None,
              jitter_dist: str = "uniform", loss_direction: str = "both", reorder: bool = True,
              queue: str | None = None, names: dict[str, str] | None = None,
              trace_down: str | None = None, trace_up: str | None = None, aqm: str | None = None,
              ecn: bool = False, cross: str | None = None, origin_rtt: str | None = None,
              think: str | None = None) -> Grid:
    """Build a grid from the user's strings; raises UsageError before anything is created. `names`
    says how each value was given (GRID_KEYS -> '--bw', or a campaign file's 'campaign file F: bw');
    a value not named there is an option's. trace_down / trace_up: trace files whose rates replace
    the constant ones (the downlink's are an axis; the uplink's one for all or one each). aqm: the
    bottleneck's queue disciplines (link.aqm), an axis too; ecn: they mark rather than drop; origin_rtt:
    each origin's own path delay (link.origins), an axis; think: the servers' wait before each first byte
    (pages.timing), an axis."""
    name = {k: "--" + k.replace("_", "-") for k in GRID_KEYS}
    name.update(names or {})
    aqms = aqm_mod.parse_list(aqm, name.get("aqm", "--aqm"))
    if ecn and aqms == (None,):
        raise UsageError(f"{name.get('ecn', '--ecn')}: ECN marks where a queue discipline would drop; give --aqm "
                         "codel, fq_codel or pie with it")
    crosses = cross_mod.parse_list(cross, name.get("cross", "--cross"))
    far = origins_mod.parse_list(origin_rtt, name.get("origin_rtt", "--origin-rtt"))
    thinks = timing_mod.parse_list(think, name.get("think", "--think"))
    if crosses != (None,) and None in aqms:
        raise UsageError(f"{name.get('cross', '--cross')}: competing flows share the page's managed bottleneck; "
                         "give --aqm with it (droptail for a FIFO)")
    if ecn and any(a is not None and a.name == "droptail" for a in aqms):
        raise UsageError(f"{name.get('ecn', '--ecn')}: droptail drops what does not fit and marks nothing; give "
                         "--aqm codel, fq_codel or pie with --ecn")
    p = protocols.parse(protos, name["proto"])
    trace_downs = parse_traces(trace_down, name["trace_down"]) if trace_down is not None else ()
    trace_ups = parse_traces(trace_up, name["trace_up"]) if trace_up is not None else ()
    downs = parse_rates(rates, name["bw"]) if not trace_downs else (None,)
    s = parse_pages(sizes, name["size"])
    n = parse_runs(runs, name["runs"])
    rtts = parse_durations(rtt, name["rtt"], RTT_STEP_MS) if rtt is not None else (0.0,)
    jitters = parse_durations(jitter, name["jitter"]) if jitter is not None else (0.0,)
    losses = parse_losses(loss, name["loss"]) if loss is not None else (0.0,)
    if jitter_dist not in JITTER_DISTS:
        raise UsageError(f"{name['jitter_dist']}: unknown distribution '{jitter_dist}'; expected one of "
                         f"{', '.join(JITTER_DISTS)}")
    if loss_direction not in LOSS_DIRECTIONS:
        raise UsageError(f"{name['loss_direction']}: unknown direction '{loss_direction}'; expected one of "
                         f"{', '.join(LOSS_DIRECTIONS)}")
    q = parse_queue(queue, name["queue"])
    ups = None
    if up_rates is not None:
        if trace_ups:
            raise UsageError(f"{name['up_bw']} and {name['trace_up']}: the uplink has one rate; give one of them")
        ups = parse_rates(up_rates, name["up_bw"])
        if len(ups) != 1:
            raise UsageError(f"{name['up_bw']}: give one rate; it applies to every rate of {name['bw']}")
    pairs = _directions(downs, ups, trace_downs, trace_ups, name)
    many = len(pairs) * len(rtts) * len(jitters) * len(losses) * len(aqms) * len(crosses) * len(far) * len(thinks)
    if many > MAX_CONDITIONS:
        raise UsageError(f"{name['bw']}, {name['rtt']}, {name['jitter']}, {name['loss']}: {many:,} conditions; "
                         f"at most {MAX_CONDITIONS:,} (each is applied and verified in turn): split the campaign")
    conds = []
    for d, up in pairs:
        rates_kw = {**rate_fields(d, "down"), **rate_fields(up, "up")}
        for r in rtts:
            for j in jitters:
                if j:
                    check_jitter(r / 2.0, j, jitter_dist, name["jitter"])
                for lo in losses:
                    for a in aqms:
                        for x in crosses:
                            for o in far:
                                for t in thinks:
                                    conds.append(Conditions(
                                        rtt_ms=r, jitter_ms=j, jitter_dist=jitter_dist, loss_pct=lo,
                                        loss_direction=loss_direction, reorder=reorder, queue_pkts=q, aqm=a,
                                        ecn=ecn and a is not None, cross=x, origin_rtt=o, think=t, **rates_kw))
    return Grid(p, s, tuple(conds), n, traces=tuple(traces.by_hash(trace_downs + trace_ups).values()))
