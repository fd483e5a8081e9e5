"""The stats file linkem writes and the Python reader, held together by one sample: linkem's Rust test
checks that stats_json writes exactly linkem/tests/stats-sample.json for fixed counters; here the
reader parses that same file strictly, and the trial judgement reads the figures it must."""
import json

import pytest

from plt_bench.trial import run as runner
from plt_bench.errors import LinkError
from plt_bench.link.stats import LATE_HIST_KEYS, parse_stats
from plt_bench.trial import evidence

from ..conftest import ROOT

SAMPLE = ROOT / "linkem" / "tests" / "stats-sample.json"


def test_the_reader_takes_exactly_what_linkem_writes():
    stats = parse_stats(SAMPLE.read_text())
    down = stats["dirs"]["down"]
    assert (down["queue"], down["delay_us"], down["jitter_us"], down["dist"]) == (42, 25000, 5000, "Uniform")
    assert list(down["late_hist_us"]) == list(LATE_HIST_KEYS)
    assert down["paths"] == [{"addr": "198.19.1.12", "extra_us": 50000, "packets": 2100}]
    assert stats["dirs"]["up"]["paths"] == []
    assert down["since_mark"] == {"late_max_us": 2000100.0, "early_max_us": 40.0, "max_depth": 120}
    assert stats["dirs"]["up"]["reorder"] is False and stats["enobufs"] == 1 and stats["cpu_dma_latency_us"] == 0
    held_none = json.loads(SAMPLE.read_text()) | {"cpu_dma_latency_us": None}  # the kernel refused the request
    assert parse_stats(json.dumps(held_none))["cpu_dma_latency_us"] is None


def test_the_trial_judgement_reads_the_sample_as_linkem_means_it():
    """A snapshot before (all zero) and the sample after: the 2 s stall, the 8 packets over 5 ms late
    and the lost verdict are each seen where the runner looks for them."""
    after = parse_stats(SAMPLE.read_text())
    before = json.loads(SAMPLE.read_text())
    for d in before["dirs"].values():
        for k in ("packets", "bytes", "dropped", "released", "reordered", "early"):
            d[k] = 0
        d["late_hist_us"] = {k: 0 for k in d["late_hist_us"]}
        d["late_sum_us"] = 0.0
    before["enobufs"] = 0
    delta = runner.link_delta(before, after)
    assert delta["dirs"]["down"]["late_max_us"] == 2000100.0 and delta["dirs"]["down"]["late_hist_us"]["inf"] == 8
    assert "stalled" in evidence.link_fidelity_problem(delta, 12.5, 9000.0)
    no_stall = json.loads(json.dumps(after))
    no_stall["dirs"]["down"]["since_mark"]["late_max_us"] = 900.0
    assert "ENOBUFS" in evidence.link_fidelity_problem(runner.link_delta(before, no_stall), 12.5, 9000.0)


@pytest.mark.parametrize("change,message", [
    (lambda s: s["dirs"]["down"].pop("since_mark"), "missing since_mark"),
    (lambda s: s["dirs"]["down"].update(late_p99_us=1.0), "unknown late_p99_us"),
    (lambda s: s["dirs"]["down"].update(released="6930"), "released = '6930', expected int"),
    (lambda s: s["dirs"]["down"]["since_mark"].pop("max_depth"), "dirs.down.since_mark has missing max_depth"),
    (lambda s: s["dirs"]["down"]["late_hist_us"].pop("inf"), "late_hist_us has buckets"),
    (lambda s: s.pop("enobufs"), "the file has missing enobufs"),
    (lambda s: s["dirs"]["down"]["paths"][0].pop("extra_us"), r"dirs.down.paths\[0\] has missing extra_us"),
    (lambda s: s.update(cpu_dma_latency_us="0"), "cpu_dma_latency_us = '0', expected int"),
])
def test_a_file_of_another_shape_is_refused_by_name(change, message):
    s = json.loads(SAMPLE.read_text())
    change(s)
    with pytest.raises(LinkError, match=message):
        parse_stats(json.dumps(s))
