"""Link traces (Mahimahi's format): reading, what they offer, making them, and how conditions,
campaigns, the link's commands and its verification take them. Pure logic: no root, no packets."""
import dataclasses
import hashlib

import pytest

from plt_bench import campaign, traces
from plt_bench.axes import make_grid
from plt_bench.conditions import ConstantRate, TraceRate
from plt_bench.errors import UsageError
from plt_bench.link.resolve import resolve
from plt_bench.link.linkem import linkem_argv, linkem_dirs, needs_linkem, trace_file
from plt_bench.link.resolve import Capabilities
from plt_bench.link.verify import check_ping, check_trace, parse_samples


def _file(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_file_holding_1_is_12_mbit_and_the_trace_is_known_by_its_hash(tmp_path):
    p = _file(tmp_path, "one.txt", "1\n")
    t = traces.read(p, "--trace-down")
    assert (t.name, t.period_ms, t.opportunities, t.mean_bps) == ("one", 1, 1, 12_000_000)
    assert t.sha256 == hashlib.sha256(b"1\n").hexdigest()
    assert traces.by_hash([t]) == {t.sha256: t}
    assert t.window_bytes(100, 0, 3) == [150_000] * 3  # 100 opportunities of 1500 bytes a window


def test_repeated_timestamps_are_several_opportunities_and_the_trace_loops(tmp_path):
    t = traces.read(_file(tmp_path, "burst.txt", "10\n10\n10\n100\n"), "--trace-down")
    assert (t.opportunities, t.period_ms) == (4, 100)
    # window 0 holds 10,10,10 and 100 (an opportunity at t counts in the window ending at t)
    assert t.window_bytes(50, 0, 4) == [4500, 1500, 4500, 1500]
    assert t.window_bytes(50, 100, 2) == [4500, 1500]  # the second period
    assert t.mean_bps == round(4 * 12000 * 1000 / 100)


@pytest.mark.parametrize("text,fragment", [
    ("", "no timestamps"), ("3\nx\n", "line 2: not a whole number"), ("4\n2\n", "line 2: 2 comes after 4"),
    ("0\n", "line 1: the last timestamp is 0"), ("1 2\n", "line 1: not a whole number"), ("99999999999\n", "more than 24 hours")])
def test_a_bad_trace_names_its_line(tmp_path, text, fragment):
    with pytest.raises(UsageError, match="--trace-up: .*bad.txt") as e:
        traces.read(_file(tmp_path, "bad.txt", text), "--trace-up")
    assert fragment in str(e.value)


def test_crlf_and_blank_lines_are_read_like_mahimahi(tmp_path):
    t = traces.read(_file(tmp_path, "w.txt", "1\r\n\r\n2\r\n"), "--trace-down")
    assert t.ms == (1, 2)


def test_a_rate_series_becomes_a_trace_with_its_mean():
    ms = traces.from_rates([(0.0, 4.0), (1.0, 12.0), (2.0, 1.0), (3.0, 20.0)])
    assert ms == sorted(ms) and ms[-1] <= 4000
    offered_bits = len(ms) * 12000
    assert offered_bits == pytest.approx((4 + 12 + 1 + 20) * 1e6, abs=12000)  # within one opportunity
    # each step offers its own rate: the first second 4 Mbit/s (333 opportunities), the third 1 Mbit/s
    assert sum(1 for m in ms if m <= 1000) == 333 and sum(1 for m in ms if 2000 < m <= 3000) == 83


def test_generated_shapes():
    on_off = traces.on_off(24.0, 0.5, 0.5)
    assert on_off[0] == 501 and on_off[-1] == 1000 and len(on_off) == 1000  # off, then 24 Mbit/s for 500 ms
    ramp = traces.ramp(2.0, 20.0, 10.0)
    rates = [sum(1 for m in ramp if s * 1000 < m <= (s + 1) * 1000) * 12000 / 1e6 for s in range(10)]
    assert rates[0] == pytest.approx(2.0, abs=0.02) and rates[-1] == pytest.approx(20.0, abs=0.02)
    assert rates == sorted(rates)
    t = traces.generate("gen:onoff:24mbit:500ms:500ms", "--trace-down")
    assert (t.name, t.mean_bps, t.peak_bps(100)) == ("onoff-24mbit-500ms-500ms", 12_000_000, 24_000_000)
    with pytest.raises(UsageError, match="ends at 1 s on a rate of 0"):
        traces.from_rates([(0.0, 5.0), (1.0, 0.0)], end_s=2.0)


def test_a_rate_series_from_csv(tmp_path):
    rows = traces.parse_rates_csv("time_s,mbit\n0,1.5\n0.5,3\n", "x")
    assert rows == [(0.0, 1.5), (0.5, 3.0)]
    with pytest.raises(UsageError, match="line 3: time 0.5 s does not come after 0.5 s"):
        traces.parse_rates_csv("0,1\n0.5,2\n0.5,3\n", "x")
    with pytest.raises(UsageError, match="line 2: time 1 and rate -1"):
        traces.parse_rates_csv("0,1\n1,-1\n", "x")


def test_a_trace_is_never_written_over_a_file(tmp_path):
    out = tmp_path / "t.txt"
    traces.write(out, [1, 2])
    assert out.read_text() == "1\n2\n"
    with pytest.raises(UsageError, match="exists"):
        traces.write(out, [3])
    assert out.read_text() == "1\n2\n" and [p.name for p in tmp_path.iterdir()] == ["t.txt"]


def test_conditions_take_a_trace_as_a_kind_of_rate(tmp_path):
    down = _file(tmp_path, "lte-down.txt", "1\n")
    up = _file(tmp_path, "lte-up.txt", "2\n4\n")
    (c,) = make_grid("h3", "unshaped", "5KB", 1, rtt="50ms", trace_down=str(down), trace_up=str(up)).conditions
    assert c.label == "trace:lte-down/trace:lte-up rtt50ms"
    assert isinstance(c.down, TraceRate) and c.down.name == "lte-down" and c.rate_down_bps == 12_000_000
    assert c.up.mean_bps == 6_000_000 and c.traced and needs_linkem(c)
    # the downlink's traces are an axis; one uplink trace serves them all, or one each
    g = make_grid("h3", "unshaped", "5KB", 1, trace_down=f"{down},gen:constant:24mbit", trace_up=str(up))
    assert [x.label for x in g.conditions] == ["trace:lte-down/trace:lte-up", "trace:constant-24mbit/trace:lte-up"]
    (same,) = make_grid("h3", "unshaped", "5KB", 1, trace_down=str(down)).conditions
    assert same.down == same.up and same.label == "trace:lte-down"  # the uplink follows the same trace
    (mixed,) = make_grid("h3", "unshaped", "5KB", 1, up_rates="2mbit", trace_down=str(down)).conditions
    assert mixed.up == ConstantRate(2_000_000) and mixed.label == "trace:lte-down/2mbit"
    with pytest.raises(UsageError, match="two different traces are named lte-down"):
        other = tmp_path / "b"
        other.mkdir()
        make_grid("h3", "unshaped", "5KB", 1, trace_down=f"{down},{_file(other, 'lte-down.txt', '3')}")


def test_a_constant_campaign_keeps_its_hash_and_a_file_names_its_traces_from_its_folder(tmp_path):
    plain = campaign.bare({"bw": "10mbit", "rtt": "50ms", "size": "5KB"})
    assert all("trace_down" not in c for c in plain.as_dict()["conditions"])  # campaigns before traces hash alike
    _file(tmp_path, "cell.txt", "1\n")
    f = _file(tmp_path, "c.toml", "[link]\ntrace_down = 'cell.txt'\nrtt = '40ms'\n")
    spec = campaign.load(str(f), {})
    (c,) = spec.grid.conditions
    assert c.trace_down == "cell" and c.trace_down_sha256 == hashlib.sha256(b"1\n").hexdigest()
    assert spec.as_dict()["conditions"][0]["trace_down_sha256"] == c.trace_down_sha256
    # an option's rate over the file's trace, and the other way round
    assert campaign.load(str(f), {"bw": "5mbit"}).grid.conditions[0].down == ConstantRate(5_000_000)
    f2 = _file(tmp_path, "d.toml", "[link]\nbw = '5mbit'\n")
    assert campaign.load(str(f2), {"trace_down": str(tmp_path / "cell.txt")}).grid.conditions[0].traced


def test_traces_are_linkem_s_on_every_kernel_and_refused_elsewhere(tmp_path):
    (c,) = make_grid("h3", "unshaped", "5KB", 1, trace_down="gen:constant:12mbit").conditions
    for netem in (True, False):
        assert resolve("embedded", "auto", [c], Capabilities(netem)).backend == "linkem"
    with pytest.raises(UsageError, match="netem cannot follow a trace"):
        resolve("embedded", "netem", [c], Capabilities(True))
    with pytest.raises(UsageError, match="--server"):
        resolve("two-machines", "auto", [c], Capabilities(True, True))


def test_linkem_is_told_the_trace_and_its_queue(tmp_path):
    (c,) = make_grid("h3", "unshaped", "5KB", 1, rtt="50ms", trace_down="gen:constant:12mbit",
                     up_rates="10mbit").conditions
    dirs = linkem_dirs(c)
    assert dirs[0].trace == c.down and dirs[1].trace is None
    argv = linkem_argv("linkem", c, tmp_path / "linkem.json")
    down = argv[argv.index("--dir") + 1]
    assert down.startswith("down:queue=") and f",trace={trace_file(tmp_path, dirs[0])},limit=64" in down
    assert "trace=" not in argv[argv.index("--dir", argv.index("--dir") + 1) + 1]


def _receiver(trace, epoch_ns, delay_ms, seconds, share=1.0, step_ns=1_000_000):
    """What an ideal receiver's counter reads each ms: every opportunity's bytes, delay_ms after it."""
    samples, total = [(epoch_ns - 10**6, 0)], 0  # the sampler runs before the trace starts over
    opps = trace.window_bytes(1, 0, int(seconds * 1000))  # bytes per ms of trace time
    for k in range(int(seconds * 1000)):
        total += opps[k] * share
        samples.append((epoch_ns + round(delay_ms * 1e6) + (k + 1) * step_ns, int(total)))
    return samples


def test_the_trace_check_passes_a_faithful_link_and_fails_a_short_or_late_one():
    t = traces.generate("gen:onoff:24mbit:500ms:500ms", "--trace-down")
    rate = TraceRate(t.name, t.sha256, t.mean_bps)
    KNOWN = traces.by_hash([t])  # noqa: N806 - the traces the link was given
    ok, windows = check_trace("downlink", rate, _receiver(t, 10**12, 25.0, 4.0), 10**12, 25.0, known=KNOWN)
    assert ok["ok"] and ok["measured"] == 1.0 and len(windows) >= 38
    assert [w["offered"] for w in windows[:10]] == [0] * 5 + [300_000] * 5
    short, _ = check_trace("downlink", rate, _receiver(t, 10**12, 25.0, 4.0, share=0.9), 10**12, 25.0,
                           known=KNOWN)
    assert short["ok"] is False and short["measured"] == pytest.approx(0.9, abs=0.01)
    late, _ = check_trace("downlink", rate, _receiver(t, 10**12, 75.0, 4.0), 10**12, 25.0,
                          known=KNOWN)  # 50 ms behind its trace
    assert late["ok"] is False and "window error" in late["tolerance"]
    assert parse_samples("5 1514 1\nx\n9 3028 2\n") == [(5, 1500), (9, 3000)]
    begun_late = _receiver(t, 10**12, 25.0, 4.0)[200:]  # a receiver counted from 0.2 s on only
    late_start, _ = check_trace("downlink", rate, begun_late, 10**12, 25.0, known=KNOWN)
    assert late_start["ok"] is False and "sampling began" in late_start["tolerance"]


def test_a_short_window_check_whose_queue_ran_empty_is_the_streams_shortfall_not_the_links():
    from plt_bench.link.verify import starved
    t = traces.generate("gen:onoff:24mbit:500ms:500ms", "--trace-down")
    rate = TraceRate(t.name, t.sha256, t.mean_bps)
    KNOWN = traces.by_hash([t])  # noqa: N806
    short = lambda: check_trace("downlink", rate, _receiver(t, 10**12, 25.0, 4.0, share=0.9), 10**12, 25.0,  # noqa: E731
                                known=KNOWN)[0]
    c = starved(short(), 400, 8000)  # 5% of the opportunities found the queue empty
    assert c["ok"] is False and c["starved"] and "empty at 400 of 8000 opportunities" in c["tolerance"]
    assert "starved" not in starved(short(), 40, 8000)  # 0.5%: the link's own shortfall
    ok = check_trace("downlink", rate, _receiver(t, 10**12, 25.0, 4.0), 10**12, 25.0, known=KNOWN)[0]
    assert "starved" not in starved(ok, 400, 8000) and ok["idle_opportunities"] == [400, 8000]  # passed: judged


def test_probes_through_a_trace_are_judged_by_their_least_rtt():
    g = make_grid("h3", "unshaped", "5KB", 1, rtt="50ms", trace_down="gen:onoff:24mbit:500ms:500ms")
    (c,), known = g.conditions, traces.by_hash(g.traces)  # the grid carries the traces it read
    checks = {x["name"]: x for x in check_ping(c, 100, [50.6] * 50 + [300.0] * 50, known=known)}
    assert checks["rtt min"]["ok"] and checks["rtt mean"]["ok"] is None
    checks = {x["name"]: x for x in check_ping(c, 100, [45.0] * 100, known=known)}  # faster than the delay
    assert checks["rtt min"]["ok"] is False
    assert dataclasses.replace(c, trace_down_sha256=None, trace_up_sha256=None).traced is False


def test_the_cellular_preset_generates_its_traces():
    spec = campaign.load("cellular")
    conds = spec.grid.conditions
    assert [c.label for c in conds] == ["trace:constant-4mbit rtt60ms", "trace:ramp-2mbit-20mbit-4s rtt60ms",
                                        "trace:constant-12mbit rtt60ms", "trace:onoff-30mbit-400ms-200ms rtt60ms"]
    assert [round(c.rate_down_bps / 1e6, 1) for c in conds] == [4.0, 11.0, 12.0, 20.0]  # each trace's mean
    assert all(c.down == c.up for c in conds) and spec.grid.protos == ("h3", "h2", "h1")
    assert len(spec.plan()) == 4 * 3 * 8


def test_the_trace_figure_draws_the_metric_against_each_trace_s_mean(tmp_path):
    from plt_bench.analysis import plots, stats
    from .trials import trial
    ts = []
    for i, spec in enumerate(["gen:constant:4mbit", "gen:onoff:30mbit:400ms:200ms"]):
        (c,) = make_grid("h3,h1", "unshaped", "20x5KB", 1, rtt="60ms", trace_down=spec).conditions
        for run in range(3):
            for proto, plt in (("h3", 900.0 - 300 * i), ("h1", 1400.0 - 400 * i)):
                ts.append(trial(1, len(ts), proto, plt=plt + run, cond=c, run_index=run))
    cells = stats.cells(ts)
    assert {c.trace_down for c in cells.values()} == {"constant-4mbit", "onoff-30mbit-400ms-200ms"}
    files = plots.trace_plot(cells, {"link_backend": "linkem"}, tmp_path, "t")
    assert [f.name for f in files] == ["trace_rate_rtt60.png", "trace_rate_rtt60.svg"]
    assert files[0].stat().st_size > 10_000
    one = {k: v for k, v in cells.items() if v.trace_down == "constant-4mbit"}
    assert plots.trace_plot(one, {}, tmp_path / "none", "t") == []  # one trace: nothing to set against


def test_a_campaign_carries_its_traces_to_a_cluster_s_workers():
    """A cluster's worker is another process: the spec it is sent holds the traces, by hash, and
    nothing else does (no registry of the process that read them)."""
    import pickle
    spec = campaign.bare({"trace_down": "gen:ramp:1mbit:9mbit:3s", "trace_up": "gen:constant:2mbit", "size": "5KB"})
    assert [t.name for t in spec.traces] == ["ramp-1mbit-9mbit-3s", "constant-2mbit"]
    sent = pickle.loads(pickle.dumps(spec))
    with pytest.raises(LookupError, match="was not given with these conditions"):
        sent.grid.conditions[0].down.trace({})
    assert sent.grid.conditions[0].down.trace(traces.by_hash(sent.traces)).ms == spec.traces[0].ms
    # a campaign carries the traces its conditions name, and none without them
    over = campaign.bare({"trace_down": "gen:constant:2mbit", "size": "5KB"})
    assert [t.name for t in over.traces] == ["constant-2mbit"] and not campaign.bare({"size": "5KB"}).traces


def test_a_trace_has_its_own_heatmap_column_beside_a_constant_rate_of_its_mean():
    from plt_bench.analysis import plots, stats
    from .trials import trial
    ts = []
    constant = make_grid("h3,h1", "12mbit", "20x5KB", 1, rtt="60ms").conditions[0]
    traced = make_grid("h3,h1", "unshaped", "20x5KB", 1, rtt="60ms", trace_down="gen:constant:12mbit").conditions[0]
    assert constant.rate_down_bps == traced.rate_down_bps == 12_000_000
    for c, slower in ((constant, 0), (traced, 200)):
        for run in range(4):
            for proto, plt in (("h3", 500.0 + slower), ("h1", 900.0)):
                ts.append(trial(1, len(ts), proto, plt=plt + run, cond=c, run_index=run))
    m = plots.heatmap_matrix(stats.compare(ts))[(60.0, 0.0, 0.0)]
    assert m["rates"] == [(12_000_000, None), (12_000_000, "constant-12mbit")]
    assert m["diff"][0, 0] != m["diff"][0, 1]
    assert plots._column_label(m["rates"][1]) == "trace:constant-12mbit\n(mean 12mbit)"
