"""Statistics on synthetic samples with known answers."""
import math

import numpy as np
import pytest

from plt_bench import precision
from plt_bench.analysis import stats

from .trials import conditions, label, replace, trial


def _trials(cond, size, proto, values, **kw):
    return [trial(seq=i, cond=conditions(cond), size=size, proto=proto, plt=float(v), **kw) for i, v in enumerate(values)]


def test_identical_distributions_are_not_significant():
    rng = np.random.default_rng(1)
    trials = []
    for i in range(10):  # ten cells where h3 and h1 come from the same law
        base = rng.normal(1000, 30, 20)
        trials += _trials(f"c{i}", 5000, "h3", base[:10]) + _trials(f"c{i}", 5000, "h1", base[10:])
    rows = stats.compare(trials)
    assert not any(r.significant for r in rows)
    assert all(r.faster.startswith("neither") for r in rows)


def test_a_shifted_distribution_is_significant_and_its_sign_is_right():
    rng = np.random.default_rng(2)
    trials = _trials("c", 10**7, "h3", rng.normal(900, 20, 10)) + _trials("c", 10**7, "h1", rng.normal(1000, 20, 10))
    (row,) = stats.compare(trials)
    assert row.significant and row.faster == "h3" and row.diff_pct < -5
    assert row.diff_ci_low_pct <= row.diff_pct <= row.diff_ci_high_pct < 0  # the difference's own 95% CI, 0 outside
    assert all(np.isnan(stats.diff_pct_ci(np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0]))))
    assert row.p_welch < 1e-6 and row.p_mannwhitney < 0.001 and row.cliffs_delta == -1.0
    assert row.hedges_g < -3


def test_correction_moves_a_borderline_p():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.02]) == [0.02]
    raw = [0.01, 0.02, 0.03, 0.04, 0.2]
    b, h = stats.bh(raw), stats.holm(raw)
    assert all(x >= r for x, r in zip(h, raw)) and all(bb <= hh + 1e-12 for bb, hh in zip(b, h))
    assert b[3] == pytest.approx(0.05)  # BH: 0.04 * 5 / 4
    # a cell significant alone is not after correction over many cells
    one = (_trials("x", 5000, "h3", [1030, 1000, 1060, 1010, 1050, 1020, 1040, 1000])
           + _trials("x", 5000, "h1", [1000, 990, 1010, 1020, 980, 1005, 995, 1000]))
    alone = stats.compare(one)[0]
    assert 0.001 < alone.p_welch < 0.05 and alone.significant  # borderline, significant on its own
    crowd = list(one)
    for i in range(30):
        crowd += _trials(f"n{i}", 5000, "h3", [1000, 1010, 990]) + _trials(f"n{i}", 5000, "h1", [1000, 1010, 990])
    x = [r for r in stats.compare(crowd) if r.conditions == label("x")][0]
    assert x.p_welch == pytest.approx(alone.p_welch)
    assert x.p_adjusted > alone.p_adjusted and not x.significant  # ...but not among 31 cells
    assert stats.holm([float("nan"), 0.01]) == [pytest.approx(float("nan"), nan_ok=True), 0.01]


def test_cells_ci_warmups_failures_and_cv_warning():
    vals = [1000, 1010, 990, 1005, 995, 1002, 998]
    t = _trials("c", 5000, "h1", vals)
    t.append(replace(t[0], plt_ms=5000.0, warmup=True))   # a warm-up is kept out
    t.append(replace(t[0], plt_ms=None, status="failed"))  # so is a failure
    c = stats.cells(t)[(label("c"), "5KB", "h1", "cubic", "chromium", "caddy", "full")]
    assert c.n == 7 and c.median_ms == 1000 and c.ci_low_ms <= 1000 <= c.ci_high_ms
    assert not c.warnings
    noisy = stats.cells(_trials("c", 5000, "h1", [500, 1000, 1500, 700]))[(label("c"), "5KB", "h1", "cubic", "chromium", "caddy", "full")]
    assert noisy.warnings and "CV" in noisy.warnings[0]
    assert stats.cliffs_delta(np.array([1, 2]), np.array([3, 4])) == -1.0
    assert math.isnan(precision.median_ci(np.array([1.0, 2.0]))[0])


def test_mann_whitney_primary_and_bh():
    rng = np.random.default_rng(4)
    trials = _trials("c", 5000, "h3", rng.normal(800, 10, 12)) + _trials("c", 5000, "h1", rng.normal(1000, 10, 12))
    (row,) = stats.compare(trials, test="mannwhitney", correction="bh")
    assert row.significant and row.p_adjusted == pytest.approx(row.p_mannwhitney)
    with pytest.raises(ValueError):
        stats.compare(trials, test="ks")


def test_cpu_percent_from_cumulative_samples():
    series = [{"role": "caddy", "t_s": t, "user_s": u, "system_s": sy}
              for t, u, sy in ((0.0, 0.0, 0.0), (0.1, 0.05, 0.01), (0.2, 0.05, 0.03), (0.2004, 0.06, 0.03))]
    pct = stats.cpu_percent(series)
    assert [round(p["user_pct"]) for p in pct] == [50, 0]  # the sample 0.4 ms after the last is merged away
    assert [round(p["system_pct"]) for p in pct] == [10, 20]


def cpu_trial(proto, size, cpu_s, **kw):
    import json
    return trial(plt=1.0, proto=proto, size=size,
                 cpu_json=json.dumps({"roles": {"renderer": {"user_s": cpu_s, "system_s": 0.0}}}), **kw)


def test_cpu_per_mb_weighs_by_bytes():
    t = cpu_trial
    rows = stats.cpu_by_role([t("h3", 10**6, 0.1), t("h3", 9 * 10**6, 0.9), t("h1", 10**6, 0.5)])
    q = next(r for r in rows if r["proto"] == "h3")
    assert q["cpu_s_per_mb"] == pytest.approx(0.1) and q["mb"] == 10 and q["trials"] == 2
    assert q["cpu_s_per_trial"] == pytest.approx(0.5) and q["mb_per_trial"] == 5
    table = stats.cpu_table([t("h3", 10**6, 0.1), t("h3", 10**6, 0.3), t("h3", 10**6, 0.2)])
    assert table[0]["n"] == 3 and table[0]["cpu_s"] == pytest.approx(0.2)


def test_small_pages_get_cpu_per_trial_and_no_figure_rounds_to_zero():
    """Seen for a 5KB-only run: 'MB 0' and 1,030,000 CPU ms/MB for the browser. Under a megabyte a
    trial, per MB is a load's fixed cost over few bytes: none is given, per trial is."""
    from plt_bench.analysis import report
    rows = stats.cpu_by_role([cpu_trial("h3", 5000, 0.0051), cpu_trial("h3", 5000, 0.0052)])
    assert rows[0]["cpu_s_per_mb"] is None and rows[0]["cpu_s_per_trial"] == pytest.approx(0.00515)
    line = report.cpu_lines({"cpu_by_role": rows})[1]
    assert line == ["h3", "renderer", "2", "0.005", "5.15", "5.15", "0", "-"]
    assert stats.cpu_table([cpu_trial("h1", 5000, 0.01)])[0]["cpu_s_per_mb"] is None


def test_a_bulk_trials_download_counts_as_read():
    from plt_bench.pages import Page
    bulk = cpu_trial("h1", 0, 2.0, page=Page(0, 0, 30000, 1000), bulk_bytes=300 * 10**6)
    row = stats.cpu_by_role([bulk])[0]
    assert row["mb"] == pytest.approx(300, rel=0.01) and row["cpu_s_per_mb"] == pytest.approx(2 / 300, rel=0.01)


def test_a_precision_target_stops_a_cell_when_both_medians_are_tight_or_at_the_most_runs():
    rng = np.random.default_rng(3)
    tight = {"h3": list(rng.normal(100, 1, 8)), "h1": list(rng.normal(200, 2, 8))}
    loose = {"h3": list(rng.normal(100, 30, 8)), "h1": list(rng.normal(200, 2, 8))}
    why, widths = precision.precision_stop(tight, 2.0, 3, 20, ("h3", "h1"))
    assert why == "precision reached" and all(0 < w <= 2.0 for w in widths.values())
    assert precision.precision_stop(loose, 2.0, 3, 20, ("h3", "h1"))[0] is None
    assert precision.precision_stop(loose, 2.0, 3, 8, ("h3", "h1"))[0] == "max runs reached"
    # fewer than the least runs: not yet, however tight
    assert precision.precision_stop({"h3": [100.0, 100.1], "h1": [200.0, 200.1]}, 50.0, 3, 20, ("h3", "h1"))[0] is None
    assert precision.precision_stop({"h3": tight["h3"]}, 2.0, 3, 20, ("h3", "h1"))[0] is None  # h1 missing
    assert math.isnan(precision.half_width_pct([1.0, 2.0]))
    # the half width is the bootstrap CI's, in percent of the median
    lo, hi = precision.median_ci(np.asarray(tight["h3"]))
    assert precision.half_width_pct(tight["h3"]) == pytest.approx((hi - lo) / 2 / np.median(tight["h3"]) * 100)


def test_every_protocol_is_compared_against_the_reference_and_corrected_together():
    rng = np.random.default_rng(5)
    trials = (_trials("c", 5000, "h1", rng.normal(1000, 10, 8)) + _trials("c", 5000, "h3", rng.normal(900, 10, 8))
              + _trials("c", 5000, "h2", rng.normal(950, 10, 8)))
    cells = stats.cells(trials)
    med = {p: cells[(label("c"), "5KB", p, "cubic", "chromium", "caddy", "full")].median_ms for p in ("h3", "h2", "h1")}
    rows = stats.compare(trials)  # h3 by default, the others in the table's order
    assert [r.pair for r in rows] == ["h3 vs h2", "h3 vs h1"]
    assert [r.diff_pct for r in rows] == [pytest.approx((med["h3"] - med[p]) / med[p] * 100) for p in ("h2", "h1")]
    assert all(r.significant and r.faster == "h3" for r in rows)
    # Holm over both comparisons: the smaller p doubled, the larger as it is (never below the first)
    ps = sorted(r.p_welch for r in rows)
    assert sorted(r.p_adjusted for r in rows) == [pytest.approx(min(1, 2 * ps[0])), pytest.approx(max(2 * ps[0], ps[1]))]
    other = stats.compare(trials, reference="h1")
    assert [r.pair for r in other] == ["h1 vs h3", "h1 vs h2"] and all(r.faster in ("h3", "h2") for r in other)
    assert other[0].diff_pct == pytest.approx((med["h1"] - med["h3"]) / med["h3"] * 100)
    assert other[0].row()["reference"] == "h1" and other[0].row()["median_other_ms"] == med["h3"]
    # without h3 the first protocol in the table's order is the reference; one that did not run is refused
    assert [r.pair for r in stats.compare([t for t in trials if t.proto != "h3"])] == ["h2 vs h1"]
    with pytest.raises(stats.UsageError, match="--reference: 'h2' was not run"):
        stats.compare([t for t in trials if t.proto != "h2"], reference="h2")


def test_a_cell_is_a_typed_record_and_a_comparison_reads_its_groups_fields():
    trials = _trials("c", 5000, "h3", [900, 910, 905]) + _trials("c", 5000, "h1", [1000, 1010, 1005])
    (row,) = stats.compare(trials)
    assert (row.conditions, row.page, row.size_bytes, row.rate_down_bps) == (label("c"), "5KB", 5000,
                                                                             row.reference.rate_down_bps)
    with pytest.raises(AttributeError):
        row.proto  # the axis differs within a comparison: it has no one value
    assert set(row.row()) >= {"reference", "other", "n_reference", "n_other", "diff_pct", "p_adjusted"}
    assert "warnings" not in row.reference.row()


def test_congestion_controls_compare_within_each_protocol_with_the_same_code():
    """--cc cubic,bbr: the axis cc, each protocol its own group; along proto, each cc its own."""
    rng = np.random.default_rng(6)
    trials = []
    for proto, cc, mean in (("h1", "cubic", 2000), ("h1", "bbr", 1000), ("h3", "cubic", 900), ("h3", "bbr", 905)):
        trials += _trials("c", 5000, proto, rng.normal(mean, 10, 6), cc=cc)
    rows = stats.compare(trials, axis="cc", listed=("cubic", "bbr"))  # the first listed is the reference
    assert [r.pair for r in rows] == ["cubic vs bbr (h3)", "cubic vs bbr (h1)"]
    h3, h1 = rows
    assert h1.significant and h1.faster == "bbr" and h1.diff_pct == pytest.approx(100, abs=5)
    assert h3.within_in({"cc"}) == "h3" and abs(h3.diff_pct) < 3  # quic-go's own CUBIC either way
    by_proto = stats.compare(trials)  # along proto: one comparison per cc
    assert sorted((r.pair_in({"cc"}), r.within_in({"cc"})) for r in by_proto) == [("h3 vs h1 (bbr)", "bbr"),
                                                                                  ("h3 vs h1 (cubic)", "cubic")]
    assert stats.compare(trials, axis="cc", reference="bbr")[0].pair == "bbr vs cubic (h3)"
    with pytest.raises(stats.UsageError, match="--reference: 'reno' was not run"):
        stats.compare(trials, axis="cc", reference="reno")


def test_browsers_compare_within_each_protocol_and_protocols_within_each_browser():
    """--browser chromium,firefox: along browser, each protocol its own group (the first listed the
    reference); along proto, each browser its own; a trial stored before schema 18 is Chromium's."""
    rng = np.random.default_rng(7)
    trials = []
    for proto, browser, mean in (("h3", "chromium", 900), ("h3", "firefox", 1200), ("h2", "chromium", 1000),
                                 ("h2", "firefox", 1010)):
        trials += [replace(t, browser=browser) for t in _trials("c", 5000, proto, rng.normal(mean, 10, 6))]
    trials[0] = replace(trials[0], browser=None)  # an old store's trial: read as Chromium's
    cells = stats.cells(trials)
    assert {k[2:] for k in cells} == {("h3", "cubic", "chromium", "caddy", "full"), ("h3", "cubic", "firefox", "caddy", "full"),
                                      ("h2", "cubic", "chromium", "caddy", "full"), ("h2", "cubic", "firefox", "caddy", "full")}
    assert cells[(label("c"), "5KB", "h3", "cubic", "chromium", "caddy", "full")].n == 6
    rows = stats.compare(trials, axis="browser", listed=("chromium", "firefox"))
    assert [r.pair for r in rows] == ["chromium vs firefox (h3)", "chromium vs firefox (h2)"]
    h3, h2 = rows
    assert h3.significant and h3.faster == "chromium" and not h2.significant
    row = h3.row()  # comparison.csv: the group's fields, the browsers as reference and other
    assert row["proto"] == "h3" and "browser" not in row and (row["reference"], row["other"]) == ("chromium", "firefox")
    by_proto = stats.compare(trials)  # along proto: h3 against h2 within each browser
    assert sorted(r.pair_in({"browser"}) for r in by_proto) == ["h3 vs h2 (chromium)", "h3 vs h2 (firefox)"]
    assert [r.browser for r in by_proto] == ["chromium", "firefox"]
    assert stats.compare(trials, axis="browser", reference="firefox")[0].pair == "firefox vs chromium (h3)"


def test_servers_compare_within_each_protocol_and_a_precision_campaign_judges_each_server_apart():
    """--http-server caddy,quinn: along server, each protocol its own group; along proto, each server
    its own; a trial stored before schema 20 is Caddy's; a precision campaign's cells count each
    (protocol, server) apart, as the campaign judged them."""
    rng = np.random.default_rng(11)
    trials = []
    for proto, server, mean in (("h3", "caddy", 900), ("h3", "quinn", 700), ("h2", "caddy", 1000), ("h2", "quinn", 1004)):
        trials += [replace(t, server=server) for t in _trials("c", 5000, proto, rng.normal(mean, 10, 6))]
    trials[0] = replace(trials[0], server=None)  # an old store's trial: read as Caddy's
    cells = stats.cells(trials)
    assert cells[(label("c"), "5KB", "h3", "cubic", "chromium", "caddy", "full")].n == 6
    rows = stats.compare(trials, axis="server", listed=("caddy", "quinn"))
    assert [r.pair for r in rows] == ["caddy vs quinn (h3)", "caddy vs quinn (h2)"]
    h3, h2 = rows
    assert h3.significant and h3.faster == "quinn" and not h2.significant
    assert sorted(r.pair_in({"server"}) for r in stats.compare(trials)) == ["h3 vs h2 (caddy)", "h3 vs h2 (quinn)"]
    table = stats.precision_table({"precision_pct": 50, "runs": 2, "max_runs": 6, "protos": ["h3", "h2"],
                                   "http_server": ["caddy", "quinn"]}, trials)
    assert table["protos"] == ("h3 caddy", "h3 quinn", "h2 caddy", "h2 quinn")
    assert all(c["n"] == dict.fromkeys(table["protos"], 6) for c in table["cells"]), table["cells"]


def test_a_protocol_whose_every_trial_failed_ran_and_has_no_comparison():
    """Every trial failed (a 1 ms timeout; a cluster's lost cells): the report still stands, with no
    comparison, and the failed protocol may be the reference (it ran)."""
    failed = [replace(t, plt_ms=None, status="failed") for t in _trials("c", 5000, "h1", [1, 2])]
    assert stats.compare(failed) == [] and stats.compare(failed, reference="h1") == []
    ok = _trials("c", 5000, "h3", [900, 910, 920])
    assert stats.compare(ok + failed, reference="h1") == []  # h1 has no cell: nothing to compare with
    with pytest.raises(stats.UsageError, match="'h2' was not run"):
        stats.compare(ok + failed, reference="h2")


def test_a_precision_table_judges_the_campaign_s_metric():
    """Issue 36: --precision judged PLT whatever --metric said, and the 'Runs per cell' table showed PLT
    widths in an LCP report. Tight LCPs and scattered PLTs: an LCP campaign's cells are precise."""
    from .trials import trial
    rows = [trial(seq=i, proto=p, plt=100.0 + 40 * (i % 3), lcp_ms=50.0 + 0.01 * i) for i in range(6) for p in ("h3", "h1")]
    grid = {"precision_pct": 2.0, "runs": 3, "max_runs": 20, "protos": ["h3", "h1"]}
    by_plt = stats.precision_table(grid, rows)
    by_lcp = stats.precision_table({**grid, "metric": "lcp"}, rows)
    assert by_plt["cells"][0]["stopped"] == "unfinished" and by_plt["metric"] == "plt"
    assert by_lcp["cells"][0]["stopped"] == "precision reached" and by_lcp["metric"] == "lcp"
    assert all(w < 1 for w in by_lcp["cells"][0]["half_width_pct"].values())


def test_two_traces_of_one_name_are_two_cells_when_pooled():
    """Issue 36: `summary --campaign all` pooled two campaigns' traces named alike (12 and 6 Mbit/s)
    into one row. Cells are keyed by the trace's hash: a shared name shows its hash's first digits;
    a name no other trace shares is shown as before."""
    from plt_bench.analysis import summary
    from .trials import conditions, trial
    fast = conditions(rate_bps=12 * 10**6, trace_down="l", trace_down_sha256="a" * 64)
    slow = conditions(rate_bps=6 * 10**6, trace_down="l", trace_down_sha256="b" * 64)
    rows = [trial(cid=1, seq=i, plt=100.0, cond=fast) for i in range(3)] + \
           [trial(cid=2, seq=i, plt=200.0, cond=slow) for i in range(3)]
    table = summary.summarize(stats.distinct_traces(rows))
    assert sorted((r["conditions"], r["median_ms"]) for r in table) == [
        ("trace:l@aaaaaaaa/12mbit", 100.0), ("trace:l@bbbbbbbb/6mbit", 200.0)]
    assert "trace:l@" in summary.tables(rows)[0][1]
    alone = rows[:3]
    assert stats.distinct_traces(alone) is alone


def test_the_replay_table_shows_each_protocol_s_proven_responses_and_the_as_recorded_mix():
    import json
    ev = lambda proven, **kw: json.dumps({"proven": proven, "query_matched": [], **kw})  # noqa: E731
    trials = [trial(seq=0, proto="h3", replay_json=ev(5), unrecorded=0),
              trial(seq=1, proto="as-recorded", replay_json=ev(5, protocols={"h1": 1, "h3": 4}), unrecorded=0),
              trial(seq=2, proto="as-recorded", replay_json=ev(5, protocols={"h3": 4, "h1": 1},
                                                               query_matched=["a.test/x?y"]), unrecorded=1),
              trial(seq=3, proto="as-recorded", status="failed", replay_json=ev(2, protocols={"h3": 2}), unrecorded=3),
              trial(seq=4, proto="h1")]  # not a replay
    trials = [replace(t, page="har:rec") for t in trials]
    rows = stats.replay_table(trials)
    assert [(r["proto"], r["ok"], r["n"], r["unrecorded"], r["query_matched"]) for r in rows] == [
        ("h3", 1, 1, 0, 0), ("as-recorded", 2, 3, 4, 1)]
    assert rows[0]["proven"] == {"h3": 5} and list(rows[1]["proven"].items()) == [("h3", 8), ("h1", 2)]
