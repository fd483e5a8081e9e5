"""plt_bench.results: a store as tidy DataFrames, and the README's five lines giving the heatmap's
numbers (stats.compare's diff %)."""

import json

import numpy as np
import pytest

from plt_bench import results
from plt_bench.analysis import stats
from plt_bench.errors import UsageError
from plt_bench.pages import Page
from plt_bench.store import Store

from .trials import conditions, trial


@pytest.fixture
def stored(tmp_path):
    """Two campaigns; the second: two rates x two pages x both protocols x 5 runs, a warm-up, a
    failure, a bulk trial, CPU samples and a link check."""
    path = tmp_path / "r.sqlite"
    rng = np.random.default_rng(4)
    with Store(path) as s:
        old = s.new_campaign("old", "t", {}, {})
        s.add_trial(trial(old, 0))
        cid = s.new_campaign("grid", "t", {}, {})
        seq = 0
        for rate in (10**7, 10**8):
            for size in (5000, 10**6):
                for run in range(5):
                    for proto, base in (("h3", 900.0), ("h1", 1000.0)):
                        plt = base * size / 10**6 * 10**7 / rate + rng.normal(0, 20) + 100
                        s.add_trial(trial(cid, seq, proto, plt=plt, cond=conditions(rate_bps=rate), size=size,
                                          run_index=run))
                        seq += 1
        s.add_trial(trial(cid, seq, "h3", plt=1.0, warmup=True))
        s.add_trial(trial(cid, seq + 1, "h1", status="failed"))
        tid = s.add_trial(trial(cid, seq + 2, "h1", page=Page(0, 0, 30000, 1000), bulk_bytes=10**8,
                                cpu_json=json.dumps({"roles": {}})))
        s.add_cpu_samples(tid, [{"role": "caddy", "t_s": 0.1, "user_s": 0.01, "system_s": 0.02}])
        s.add_link_check(cid, "10mbit", "now", {"backend": "linkem", "verify": {"down": {"rate_bps": 9.9e6}}})
        s.finish_campaign(cid, "finished", "later")
    return path, cid


def test_the_readmes_five_lines_give_the_heatmaps_numbers(stored):
    path, cid = stored
    df = results.trials(path, campaign="latest")
    ok = df[df.counts & (df.kind == "page")]
    med = ok.pivot_table(index=["conditions", "page"], columns="proto", values="plt_ms", aggfunc="median")
    diff = (med.h3 - med.h1) / med.h1 * 100
    with Store(path, read_only=True) as s:
        want = {(r.conditions, r.page): r.diff_pct for r in stats.compare(s.trials([cid]))}
    got = {k: v for k, v in diff.items() if not np.isnan(v)}
    assert set(got) == set(want) and len(want) == 4
    assert all(got[k] == pytest.approx(want[k]) for k in want)


def test_one_tidy_row_per_trial_with_units_in_names(stored):
    path, cid = stored
    df = results.trials(path, "latest")
    assert len(df) == 43 and set(df.campaign_id) == {cid}
    assert {"rate_down_bps", "rtt_ms", "loss_pct", "plt_ms", "size_bytes", "measures", "kind", "counts", "body_bytes"} <= set(df)
    assert not any(c.endswith("_json") for c in df)
    assert df.counts.sum() == 41  # the warm-up and the failure do not count
    assert (df.counts & (df.kind == "page")).sum() == 40  # the page loads the heatmap is made of
    assert df[df.kind == "bulk"].body_bytes.iloc[0] > 10**8
    assert list(df.seq) == sorted(df.seq)
    assert len(results.trials(path, "all")) == 44
    assert "cpu_json" in results.trials(path, with_json=True)


def test_cpu_samples_and_link_checks(stored):
    path, cid = stored
    cpu = results.cpu_samples(path)
    assert len(cpu) == 1 and cpu.iloc[0].role == "caddy" and cpu.iloc[0].proto == "h1"
    checks = results.link_checks(path)
    assert checks.iloc[0]["verify.down.rate_bps"] == 9.9e6 and checks.iloc[0].campaign_id == cid


def test_a_missing_store_or_campaign_is_a_usage_error(tmp_path, stored):
    with pytest.raises(UsageError, match="--results"):
        results.trials(tmp_path / "none.sqlite")
    with pytest.raises(UsageError, match="--campaign"):
        results.trials(stored[0], campaign=99)
