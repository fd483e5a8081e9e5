"""The campaign benchmark's arithmetic: where a trial's time besides its page load goes."""
from plt_bench.bench import OVERHEAD_TARGET_S, campaign_lines, overhead_parts

from plt_bench.pages import Page
from plt_bench.link.aqm import parse as aqm_parse

from .trials import conditions, replace, trial


def _t(seq, start_s, cond=None, plt_ms=100.0):
    """A trial started start_s after 12:00:00 UTC: launch 0.4 s, load 0.15 s (PLT 0.1), end 0.05 s,
    wall 0.7 s (so 0.1 s of the worker's own work)."""
    started = f"2026-11-23T12:00:{start_s:06.3f}+00:00"
    return trial(seq=seq, plt=plt_ms, cond=cond, started_utc=started, wall_s=0.7, launch_s=0.4, load_s=0.15, quit_s=0.05)


def test_the_parts_add_up_to_the_time_from_one_start_to_the_next():
    trials = [_t(0, 0.0), _t(1, 0.8), _t(2, 1.6)]  # 0.8 s apart
    parts = overhead_parts(trials)
    assert round(parts["overhead"], 6) == 0.7  # 0.8 s between starts, 0.1 s of it the page load
    assert round(parts["launch (in the trial)"], 6) == 0.4 and parts["idle gate"] == 0
    assert round(parts["load beyond PLT"], 6) == 0.05
    assert round(parts["end"], 6) == 0.05
    assert round(parts["rest of the trial"], 6) == 0.1
    assert round(parts["between trials"], 6) == 0.1
    assert round(sum(v for k, v in parts.items() if k not in ("overhead", "gaps")), 6) == round(parts["overhead"], 6)


def test_a_change_of_conditions_is_not_overhead():
    """The gap across a change of conditions holds the link's check: it is left out, as are the
    gaps around a trial without a page load (failed)."""
    other = conditions(rate_bps=10**8)
    trials = [_t(0, 0.0), _t(1, 0.8), _t(2, 30.0, cond=other), _t(3, 30.9, cond=other),
              trial(seq=4, status="failed", cond=other, launch_s=0.4, load_s=0.1), _t(5, 40.0, cond=other)]
    parts = overhead_parts(trials)
    assert parts["gaps"] == 2  # 0->1 and 2->3
    assert round(parts["overhead"], 6) == 0.75  # the median of 0.7 and 0.8
    assert overhead_parts(trials[:1]) == {}


def test_the_campaign_lines_give_the_ratio_to_the_target():
    lines = campaign_lines([_t(0, 0.0), _t(1, 0.8), _t(2, 1.6)], [], 2.4)
    assert f"target: under {OVERHEAD_TARGET_S} s" in lines[0]
    assert f"(median of 2): 0.700 s (ratio to target {0.7 / OVERHEAD_TARGET_S:.2f})" in lines[-1]
    assert "launch (in the trial) 0.400" in lines[-1] and "between trials 0.100" in lines[-1]


def test_a_browser_started_early_and_the_gate_inside_the_trial_are_accounted_for():
    """Issue 27: a prelaunched browser started during the previous trial's bookkeeping (its launch
    is not in this trial's wall time), and the idle gate runs between the launch and the navigation
    (inside the wall time): the parts still add up to the gap."""
    def early(seq, start_s):
        started = f"2026-11-23T12:00:{start_s:06.3f}+00:00"
        return trial(seq=seq, plt=100.0, started_utc=started, wall_s=0.35, launch_s=0.4, load_s=0.15, quit_s=0.05,
                     prelaunched=True, idle_wait_s=0.05)
    parts = overhead_parts([early(0, 0.0), early(1, 0.45), early(2, 0.9)])
    assert parts["launch (in the trial)"] == 0 and round(parts["idle gate"], 6) == 0.05
    assert round(parts["rest of the trial"], 6) == 0.1 and round(parts["between trials"], 6) == 0.1
    assert round(sum(v for k, v in parts.items() if k not in ("overhead", "gaps")), 6) == round(parts["overhead"], 6)


def test_the_literature_lines_put_our_figures_beside_the_papers():
    from plt_bench.bench import yu_benson_lines, zhang_lines
    cond = conditions(rate_bps=10**9)
    # 100 MB: 1.0 s is 800 Mbit/s, 2.0 s is 400 Mbit/s; two of h3's three trials CPU-bound (network)
    trials = [trial(seq=i, proto="h2", size=10**8, plt=1000.0 + i, cond=cond) for i in range(3)]
    trials += [trial(seq=3 + i, proto="h3", size=10**8, plt=2000.0, cond=cond, cpu_bound="network" if i else None)
               for i in range(3)]
    text = "\n".join(zhang_lines(trials))
    assert "h2: 799 Mbit/s (median of 3; Zhang 924; ours / theirs 0.86); CPU-bound in 0 of 3" in text, text
    assert "h3: 400 Mbit/s (median of 3; Zhang 475; ours / theirs 0.84); CPU-bound in 2 of 3 (network)" in text, text
    assert "h3 / h2: 0.50 here, 0.51 in Zhang et al." in text and "a core limited h3's loads" in text
    faster = [trial(seq=9 + i, proto="h3", size=10**8, plt=1200.0, cond=cond) for i in range(3)]
    assert "h3 keeps more of h2's rate here" in "\n".join(zhang_lines(trials[:3] + faster))
    assert "no trial that counts" in "\n".join(zhang_lines(trials[:3]))
    lossy = conditions(rate_bps=10**7)
    close = [trial(seq=i, proto=p, page=Page(20000, 50), plt=v, cond=lossy, run_index=i)
             for i, (p, v) in enumerate([("h3", 1500.0), ("h2", 1510.0), ("h3", 1520.0), ("h2", 1490.0),
                                         ("h3", 1505.0), ("h2", 1500.0)])]
    text = "\n".join(yu_benson_lines(close))
    assert "h3 1505 ms, h2 1500 ms (n 3/3)" in text and "no significant difference" in text and "agrees" in text
    noisy = [trial(seq=i, proto=p, page=Page(20000, 50), plt=v, cond=lossy, run_index=i)
             for i, (p, v) in enumerate([("h3", 1000.0), ("h2", 3000.0), ("h3", 3000.0), ("h2", 1500.0),
                                         ("h3", 1200.0), ("h2", 2500.0)])]
    assert "undecided: a -52% difference that 3 runs cannot tell" in "\n".join(yu_benson_lines(noisy))
    apart = [trial(seq=i, proto=p, page=Page(20000, 50), plt=v + i, cond=lossy, run_index=i)
             for i, (p, v) in enumerate([("h3", 1000.0), ("h2", 2000.0)] * 4)]
    text = "\n".join(yu_benson_lines(apart))
    assert "h3 faster" in text and "differs in size" in text, text


def test_the_device_benchmark_prints_each_budget_s_slowdown_over_its_factor_and_the_refusals():
    from plt_bench import bench
    from plt_bench.device.budget import MACHINE_HELD_BACK
    from .trials import trial
    ts = [trial(1, 0, cpu_budget=0.25, cpu_cores=1, cpu_slowdown=4.2, browser="firefox"),
          trial(1, 1, cpu_budget=0.25, cpu_cores=1, cpu_slowdown=3.8, browser="firefox"),
          trial(1, 2, cpu_budget=1.0, cpu_cores=1, cpu_slowdown=1.02, browser="firefox"),
          trial(1, 3, status="failed", cpu_budget=1.0, cpu_cores=1, cpu_slowdown=2.0, browser="firefox",
                reason=f"{MACHINE_HELD_BACK}: ..."),
          trial(1, 4)]  # no budget: not the benchmark's
    lines = bench.device_lines(ts)
    assert lines[1].startswith("  firefox 1 of a core (factor 1.00): slowdown/factor median 2.000 (min 1.020, max 2.000)")
    assert "n=2, 1 refused (the machine held it back)" in lines[1]
    assert lines[2].startswith("  firefox 0.25 of a core (factor 4.00): slowdown/factor median 1.050 (min 0.950, max 1.050)")
    assert len(lines) == 3


def test_the_cpu_literature_lines_put_each_budget_beside_zhangs_clock_and_kakhkis_phone():
    """Issue 45's entries: per budget, h3 and h2 goodput and their ratio beside Zhang's Fig. 7 at the
    clock the budget stands for (0.17 of a core ~ 0.8 GHz, 1 ~ 4.8 GHz), with the shape; and h3
    against h2 at a full core and as the phone, beside Kakhki's finding."""
    from plt_bench.bench import kakhki_lines, zhang_cpu_lines
    cond = conditions(rate_bps=2 * 10**8)
    # 20 MB: 1 s is 160 Mbit/s, 2 s 80, 8 s 20
    ts = []
    for i, (proto, share, plt) in enumerate([("h2", 1.0, 1000.0), ("h3", 1.0, 2000.0), ("h2", 0.17, 2000.0),
                                             ("h3", 0.17, 8000.0)] * 2):
        ts.append(trial(seq=i, proto=proto, size=2 * 10**7, plt=plt, cond=cond, run_index=i // 4, cpu_budget=share,
                        cpu_cores=1))
    text = "\n".join(zhang_cpu_lines(ts))
    assert "1 of a core (~4.8 GHz of Zhang's i7): h3 80, h2 160 Mbit/s, h3/h2 0.50; Zhang at 4.8 GHz: h3 529, h2 941, " \
           "h3/h2 0.56; h2 short of the link" in text, text
    assert "0.17 of a core (~0.8 GHz of Zhang's i7): h3 20, h2 80 Mbit/s, h3/h2 0.25; Zhang at 0.8 GHz: h3 84, " \
           "h2 473, h3/h2 0.18" in text, text
    assert "shape: h3/h2 rises with the CPU (0.25 at 0.17, 0.50 at 1), as in Zhang's Fig. 7" in text
    page = Page(5000, 20)
    kak = [trial(seq=i, proto=p, page=page, plt=v + i, run_index=i // 4, cpu_budget=b, cpu_cores=1,
                 device=d, cond=conditions(rate_bps=10**7))
           for i, (p, v, b, d) in enumerate([("h3", 800.0, 1.0, None), ("h2", 1000.0, 1.0, None),
                                             ("h3", 3000.0, 0.2, "low-end-phone"), ("h2", 2900.0, 0.2, "low-end-phone")] * 3)]
    text = "\n".join(kakhki_lines(kak))
    assert "Kakhki et al., IMC'17" in text and "cpu1 " in text and "low-end-phone " in text, text
    assert "agrees: h3's lead -20.0% at a full core, +3.4% on the phone (shrinks as the CPU does)" in text, text
    assert "no pair of cells" in "\n".join(kakhki_lines(kak[:1]))


def test_the_fairness_lines_put_the_download_s_share_beside_its_fair_share_and_kakhkis():
    """Issue 46's entry: per discipline and protocol, the download's share of the bottleneck during its
    load over its fair share (1 / (flows + 1)), Jain's index, and whether h3 took Kakhki's 2x."""
    from plt_bench.bench import FAIRNESS_FLOWS, fairness_lines
    drop = conditions(rate_bps=2 * 10**7, aqm=aqm_parse("droptail"), cross=f"{FAIRNESS_FLOWS}xtcp-cubic")
    fq = conditions(rate_bps=2 * 10**7, aqm=aqm_parse("fq_codel"), cross=f"{FAIRNESS_FLOWS}xtcp-cubic")
    # 10 MB in 8 s: 10 Mbit/s beside 10 (a share of 50%, 2.5x a fair 20%); in 20 s: 4 beside 16 (20%, 1x)
    ts = [trial(seq=i, proto=p, size=10**7, plt=plt, cond=c, run_index=i // 4, cross_mbps=x)
          for i, (p, c, plt, x) in enumerate([("h3", drop, 8000.0, 10.0), ("h2", drop, 20000.0, 16.0),
                                              ("h3", fq, 20000.0, 16.0), ("h2", fq, 20000.0, 16.0)] * 2)]
    text = "\n".join(fairness_lines(ts))
    assert "share 50% of a fair 20% (2.50x), Jain 0.640" in text and "share 20% of a fair 20% (1.00x), Jain 1.000" in text, text
    assert "agrees: h3's share is at most 2.50x its fair share here" in text, text
    assert "no cell with trials that count" in "\n".join(fairness_lines([]))


def test_the_bias_check_pairs_each_cell_of_the_two_browser_starts_and_tests_the_pairs():
    """bench-campaign's bias check: each cell's medians in a fresh browser and a kept one, and over the
    cells the median difference with Wilcoxon's signed-rank test: a kept browser 1% faster in every one
    of 8 cells is a difference; one that differs by noise either way is not; too few cells, no test."""
    from plt_bench.bench import bias_lines
    sizes = [5000 * 10**k for k in range(4)]
    cells = [(s, p) for s in sizes for p in ("h3", "h1")]
    fresh = [trial(seq=i, proto=p, size=s, plt=100.0 + i * 10, fcp_ms=50.0 + i) for i, (s, p) in enumerate(cells)]
    faster = [replace(t, plt_ms=t.plt_ms * 0.99, fcp_ms=t.fcp_ms) for t in fresh]
    lines = bias_lines(faster, fresh)
    assert any(x.startswith("  PLT over 8 cells: median difference -1.0%; Wilcoxon signed-rank p = 0.008: "
                            "the kept browser's figures differ") for x in lines), lines
    assert "  FCP over 8 cells: median difference +0.0%; every pair equal" in lines, lines
    noisy = [replace(t, plt_ms=t.plt_ms * (1.01 if i % 2 else 0.99)) for i, t in enumerate(fresh)]
    assert any("no difference shown" in x for x in bias_lines(noisy, fresh) if x.startswith("  PLT over")), \
        bias_lines(noisy, fresh)
    assert any("too few cells (2)" in x for x in bias_lines(faster[:2], fresh[:2]))


def test_the_replay_benchmark_puts_each_browsers_replay_beside_its_live_load():
    """bench-replay: per browser and protocol, the replay's medians over the live page's; a figure off by
    more than 15% says OUT."""
    from types import SimpleNamespace

    from plt_bench.bench import replay_lines
    from plt_bench.pages import page_url
    url = page_url("jinja.pkg.test", "/index.html")
    page = SimpleNamespace(name="jinja", url=url, what="Jinja's documentation")
    trials = []
    for browser, replayed in (("chromium", 1000.0), ("firefox", 1300.0)):
        for label in (f"url:{url}", "har:bench-jinja"):
            plt = replayed if label.startswith("har:") else 1000.0
            trials += [trial(seq=len(trials), proto="h3", plt=plt, page=None, browser=browser, fcp_ms=plt / 2,
                             lcp_ms=plt / 2, unrecorded=0) for _ in range(3)]
    trials = [replace(t, page=(f"url:{url}" if i % 6 < 3 else "har:bench-jinja"))
              for i, t in enumerate(trials)]
    lines = replay_lines(page, "bench-jinja", trials)
    chromium = next(x for x in lines if x.startswith("    chromium h3:"))
    firefox = next(x for x in lines if x.startswith("    firefox h3:"))
    assert " OUT" not in chromium and "PLT 1000/1000 ms = 1.000" in chromium, chromium
    assert "PLT 1300/1000 ms = 1.300 OUT" in firefox, firefox


def test_the_replay_benchmark_sets_each_replay_way_beside_the_live_load_and_judges_the_one_with_distances():
    """bench-replay --origin-rtt: the replay at its recorded distances and at one, each beside the live
    load at its distances; TTFB among the figures; only the first judged (the second shows what a replay
    of one distance misses)."""
    import dataclasses as dc
    from types import SimpleNamespace

    from plt_bench.bench import ONE_DISTANCE, replay_lines
    from plt_bench.link import origins
    from plt_bench.pages import page_url
    url = page_url("site.pkg.test", "/index.html")
    page = SimpleNamespace(name="cdn", url=url, what="three origins")
    base = trial(seq=0, proto="h3", plt=1000.0, page=None, browser="chromium", fcp_ms=900.0, lcp_ms=900.0,
                 ttfb_ms=50.0, unrecorded=0)
    far = dc.replace(base.conditions, origin_rtt=origins.parse("static.pkg.test=100"))
    trials = [replace(base, seq=i, page=f"url:{url}", conditions=far) for i in range(3)]
    trials += [replace(base, seq=3 + i, page="har:bench-cdn", plt_ms=950.0, fcp_ms=860.0, lcp_ms=860.0,
                       conditions=dc.replace(far, origin_rtt=origins.parse("recorded"))) for i in range(3)]
    trials += [replace(base, seq=6 + i, page="har:bench-cdn", plt_ms=400.0, fcp_ms=380.0, lcp_ms=380.0,
                       conditions=dc.replace(far, origin_rtt=None)) for i in range(3)]
    lines = replay_lines(page, "bench-cdn", trials)
    recorded = next(x for x in lines if "recorded distances" in x)
    one = next(x for x in lines if ONE_DISTANCE in x)
    assert lines.index(recorded) < lines.index(one)
    assert "TTFB 50/50 ms = 1.000" in recorded and "PLT 950/1000 ms = 0.950" in recorded and " OUT" not in recorded
    assert "PLT 400/1000 ms = 0.400 OUT" in one


def test_the_replay_benchmark_with_think_time_judges_the_replay_with_its_recorded_timing_and_shows_the_one_without():
    """bench-replay --origin-rtt --think: the live side's servers think and its origins are far; the replay
    with its recorded distances and think time is judged, the one without (every origin at one distance,
    every response at once) shown beside it."""
    import dataclasses as dc
    from types import SimpleNamespace

    from plt_bench.bench import AT_ONCE, ONE_DISTANCE, replay_lines
    from plt_bench.link import origins
    from plt_bench.pages import page_url
    url = page_url("site.pkg.test", "/index.html")
    page = SimpleNamespace(name="cdn", url=url, what="three origins")
    base = trial(seq=0, proto="h2", plt=1400.0, page=None, browser="firefox", fcp_ms=1200.0, lcp_ms=1200.0,
                 ttfb_ms=260.0, unrecorded=0)
    live = dc.replace(base.conditions, origin_rtt=origins.parse("static.pkg.test=100"), think="200")
    timed = dc.replace(live, origin_rtt=origins.parse("recorded"), think="recorded")
    trials = [replace(base, seq=i, page=f"url:{url}", conditions=live) for i in range(3)]
    trials += [replace(base, seq=3 + i, page="har:bench-cdn", plt_ms=1350.0, ttfb_ms=255.0, conditions=timed)
               for i in range(3)]
    trials += [replace(base, seq=6 + i, page="har:bench-cdn", plt_ms=500.0, ttfb_ms=40.0,
                       conditions=dc.replace(live, origin_rtt=None, think=None)) for i in range(3)]
    lines = replay_lines(page, "bench-cdn", trials)
    with_timing = next(x for x in lines if "(with its recorded distances and think time)" in x)
    without = next(x for x in lines if f"({ONE_DISTANCE}, {AT_ONCE})" in x)
    assert lines.index(with_timing) < lines.index(without) and with_timing.startswith("    firefox h2")
    assert "TTFB 255/260 ms = 0.981" in with_timing and " OUT" not in with_timing
    assert "TTFB 40/260 ms = 0.154 OUT" in without and "PLT 500/1400 ms = 0.357 OUT" in without


def test_the_corpus_entry_sets_each_link_s_pages_beside_zhang_s_fig_11():
    """bench-literature --entries corpus: per link (think time among its conditions), each page's ratio of
    PLT medians h3/h2 in Fig. 11's figures, under Zhang et al.'s two rows (pure)."""
    import dataclasses as dc

    from plt_bench.bench import corpus_lines
    from plt_bench.pages import Page
    base = trial(seq=0, proto="h3", plt=100.0, page=None)
    thought = dc.replace(base.conditions, think="100")
    trials = []
    for cond in (base.conditions, thought):
        for size, (h3, h2) in {5000: (80.0, 100.0), 6000: (99.0, 100.0), 7000: (110.0, 100.0)}.items():
            if cond.think:
                h3, h2 = h3 + 200.0, h2 + 200.0  # a think dilutes h3's lead
            for proto, plt in (("h3", h3), ("h2", h2)):
                trials += [replace(base, seq=len(trials), proto=proto, plt_ms=plt, page=Page(size).label,
                                   conditions=cond) for _ in range(3)]
    lines = corpus_lines(trials)
    assert lines[1].startswith("  Zhang, Ethernet: median ratio 1.008, mean 1.030; h3 faster on 37 of 100 (37%)")
    off = next(x for x in lines if x.startswith("  here, ") and "think" not in x)
    on = next(x for x in lines if "think:100" in x)
    assert "median ratio 0.990" in off and "h3 faster on 2 of 3 (67%), >= 5% faster on 1, >= 5% slower on 1" in off
    assert "median ratio 0.997" in on and ">= 5% faster on 1, >= 5% slower on 0" in on  # 310/300: within 5%
