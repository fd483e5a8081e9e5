"""One measurement path: pytest's measurement mode and 'plt-bench run' store the same trials the same
way (seeded order, idle gate, retries, warm-ups, resume, the refusal to pool machines), and the
bench commands run through it. Real testbeds; on a busy machine a trial may be refused (the
emulator fell behind): the tests assert that every slot was tried and recorded with its status."""
import re
import sqlite3
import subprocess
import sys

import pytest

from plt_bench import campaign

from ..conftest import link_refused, ok_slots, run_cli, system_state, unjudged
from .test_campaign import _ok_trials, interrupt_once
from .test_cli import _nothing

pytestmark = [pytest.mark.root, pytest.mark.slow]

GRID = ["--proto", "both", "--bw", "10mbit", "--size", "5KB", "--runs", "3", "--verify", "off"]


def _pytest(tmp_path, *args, timeout=400, popen=False):
    """pytest in measurement mode, from a folder of its own (no tests to collect there)."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *args]
    if popen:
        return subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)


def _rows(path, sql, *params):
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute(sql, params)]
    finally:
        db.close()


def _recorded(path):
    """Every attempt is a row with its status, a reason when it failed, and what the idle gate saw."""
    trials = _rows(path, "SELECT * FROM trials ORDER BY seq")
    for t in trials:
        assert t["status"] in ("ok", "failed") and bool(t["reason"]) == (t["status"] == "failed"), t
        assert t["busy_pct"] is not None and t["idle_wait_s"] is not None and t["attempt"] >= 1, t
    return trials


def test_pytest_and_the_cli_store_the_same_measurement(tmp_path):
    before = system_state()
    py, cli = tmp_path / "py.sqlite", tmp_path / "cli.sqlite"
    r = _pytest(tmp_path, *GRID, "--testbed", "220", "--results", str(py))
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    c = run_cli("run", *GRID, "--testbed", "220", "--results", str(cli), timeout=400)
    assert c.returncode in (0, 1) and "Traceback" not in c.stderr, c.stdout[-3000:] + c.stderr[-3000:]
    assert _nothing("pb220") and system_state() == before
    # the same table, the same campaign definition (its seed and order recorded), finished
    cols = [[(x["name"], x["type"]) for x in _rows(p, "PRAGMA table_info(trials)")] for p in (py, cli)]
    assert cols[0] == cols[1]
    camps = [_rows(p, "SELECT name, status, grid_json, spec_hash FROM campaigns") for p in (py, cli)]
    assert camps[0] == camps[1] and camps[0][0]["status"] == "finished" and '"seed": 1' in camps[0][0]["grid_json"]
    # every slot of the seeded plan, in the plan's order, in both stores
    spec = campaign.load(None, {"proto": "both", "bw": "10mbit", "size": "5KB", "runs": "3", "verify": "off"})
    plan = [(x.conditions.label, x.run_index, x.page.total_bytes, x.proto) for x in spec.plan()]
    for path, run in ((py, r), (cli, c)):
        trials = _recorded(path)
        ok = ok_slots(trials, lambda t: (t["run_index"], t["proto"]))
        assert {p for _, p in ok} == {"h3", "h1"}, ok  # both protocols measured
        assert (run.returncode == 0) == (len(ok) == len(plan)), (run.returncode, ok)
        slots = []
        for t in trials:
            slot = (t["conditions"], t["run_index"], t["size_bytes"], t["proto"])
            if not slots or slots[-1] != slot:  # a retry follows its failed attempt
                slots.append(slot)
        assert slots == plan, (path, slots)
        assert all(t["cpu_json"] for t in trials if t["status"] == "ok")
    # pytest's items are the plan's slots: one per trial, named in that order
    outcomes = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed|skipped)", r.stdout.splitlines()[-1]))
    assert sum(outcomes.values()) == len(plan) and not outcomes.get("skipped"), r.stdout[-2000:]
    assert "page-load time per cell" in r.stdout and "order seeded with 1" in r.stdout


TINY = """
name = "tiny-warm"
protos = ["h3", "h1"]
sizes = ["5KB"]
runs = 3
warmup = 1
retries = 1
[link]
bw = "10mbit"
verify = "off"
"""


def test_pytest_mode_resumes_skips_what_was_measured_and_keeps_warmups_out(tmp_path):
    """Interrupted by Ctrl-C after two trials, rerun: the measured slots are skipped with that
    reason, the rest run, the campaign is finished and no slot is measured twice. Run 0 is the
    warm-up: stored, marked, and not in the statistics."""
    before = system_state()
    spec_file = tmp_path / "tiny.toml"
    spec_file.write_text(TINY)
    results = tmp_path / "r.sqlite"
    args = ["--campaign", str(spec_file), "--testbed", "221", "--results", str(results)]
    p = _pytest(tmp_path, *args, popen=True)
    out, err = interrupt_once(p, results, lambda r: len(_ok_trials(r)) >= 2, testbed=221)
    assert p.returncode == 2 and "Traceback" not in err, out[-3000:] + err[-3000:]
    assert _rows(results, "SELECT status FROM campaigns") == [{"status": "interrupted"}]
    first = _recorded(results)
    assert _nothing("pb221") and system_state() == before

    r = _pytest(tmp_path, *args)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    done_before = {(t["run_index"], t["proto"]) for t in first if t["status"] == "ok"} | {
        (t["run_index"], t["proto"]) for t in first if t["attempt"] >= 2}  # measured, or out of attempts
    assert f"{len(done_before)} skipped" in r.stdout.splitlines()[-1], r.stdout[-2000:]
    assert r.stdout.count("measured before: campaign 1 was resumed") >= 1, r.stdout[-2000:]
    trials = _recorded(results)
    assert trials[:len(first)] == first  # nothing of the first session rewritten
    assert _rows(results, "SELECT id, status FROM campaigns") == [{"id": 1, "status": "finished"}]
    ok = [(t["run_index"], t["proto"]) for t in trials if t["status"] == "ok"]
    assert len(ok) == len(set(ok))  # no slot measured twice
    measured = ok_slots(trials, lambda t: (t["run_index"], t["proto"]))
    assert (r.returncode == 0) == (len(measured) == 6) and {p for _, p in measured} == {"h3", "h1"}, measured
    assert all(t["warmup"] == (t["run_index"] == 0) for t in trials)
    from plt_bench.analysis import report
    from plt_bench.store import Store
    with Store(results, read_only=True) as s:  # the statistics count no warm-up
        rows = report.build(s, [1])["rows"]
    counted = {p: sum(1 for t in trials if t["status"] == "ok" and not t["warmup"] and t["proto"] == p)
               for p in ("h3", "h1")}
    if all(counted.values()):
        assert (rows[0].reference.n, rows[0].other.n) == (counted["h3"], counted["h1"])
    assert _nothing("pb221") and system_state() == before


def test_a_failed_trial_is_retried_and_every_attempt_stored_in_both_front_ends(tmp_path):
    """A 1 ms page-load timeout fails every load for real (the browser is stopped mid-load): with
    retries = 1 each slot is tried twice, both attempts are stored with their reason, and both front
    ends say the trials failed (exit 1)."""
    before = system_state()
    grid = ["--proto", "h1", "--bw", "10mbit", "--size", "5KB", "--runs", "1", "--verify", "off", "--timeout", "1ms"]
    for front, path in (("pytest", tmp_path / "py.sqlite"), ("cli", tmp_path / "cli.sqlite")):
        if front == "pytest":  # pytest-timeout owns --timeout: the page's is --page-timeout there
            r = _pytest(tmp_path, *[x.replace("--timeout", "--page-timeout") for x in grid], "--testbed", "222",
                        "--results", str(path))
        else:
            r = run_cli("run", *grid, "--testbed", "222", "--results", str(path), timeout=300)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
        trials = _recorded(path)
        assert [(t["attempt"], t["status"]) for t in trials] == [(1, "failed"), (2, "failed")], trials
        assert _rows(path, "SELECT status FROM campaigns") == [{"status": "finished"}]
    assert _nothing("pb222") and system_state() == before


def test_a_campaign_from_another_kernel_is_not_resumed_by_pytest(tmp_path):
    """The same refusal as the CLI's: exit 2, the old campaign left as it was, none added."""
    from plt_bench.store import Store
    results = tmp_path / "r.sqlite"
    spec = campaign.load(None, {"size": "5KB", "bw": "20mbit", "runs": "1", "proto": "h3", "verify": "off"})
    with Store(results) as s:
        old = s.new_campaign(spec.name, "then", spec.as_dict(), {"kernel": "another-kernel"}, spec.spec_hash)
        s.finish_campaign(old, "interrupted", "then")
    before = system_state()
    r = _pytest(tmp_path, "--size", "5KB", "--bw", "20mbit", "--runs", "1", "--proto", "h3", "--verify", "off",
                "--testbed", "223", "--results", str(results))
    assert r.returncode == 2 and "cannot be resumed here" in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert _rows(results, "SELECT id, status FROM campaigns") == [{"id": old, "status": "interrupted"}]
    assert _nothing("pb223") and system_state() == before


@pytest.mark.parametrize("command,protos", [
    (["bench", "--size", "5KB", "--bw", "10mbit", "--runs", "1"], {"h3", "h1"}),
    (["bench-sampler", "--size", "5KB", "--runs", "1"], {"h3", "h1"}),
    (["bench-campaign", "--bw", "10mbit", "--size", "5KB"], {"h3", "h2", "h1"}),  # the pages preset's protocols
])
def test_each_bench_command_runs_once_on_a_tiny_page_and_prints_ratios(tmp_path, command, protos):
    before = system_state()
    results = tmp_path / "b.sqlite"
    r = run_cli(*command, "--results", str(results), timeout=400)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    if link_refused(r.returncode, r.stderr):  # bench-sampler verifies its 100 Mbit/s link: a busy machine may fail it
        assert system_state() == before
        return
    assert "ratio to target" in r.stdout or "PLT/ideal" in r.stdout, r.stdout[-2000:]
    if r.returncode == 1 and "bias check not run: the fresh browser's campaign was refused" in r.stdout:
        unjudged("the machine refused bench-campaign's second campaign (its link check): the bias check and the count")
        assert system_state() == before
        return
    if command[0] == "bench-campaign":  # a kept browser's campaign, then a fresh one's, the bias check beside
        assert "kept browser:" in r.stdout and "fresh browser:" in r.stdout and "bias check:" in r.stdout, r.stdout[-3000:]
        assert "  PLT over 3 cells: median difference" in r.stdout, r.stdout[-3000:]
    trials = _recorded(results)
    assert trials and all(t["status"] == "ok" for t in trials) == (r.returncode == 0)
    assert ok_slots(trials, lambda t: t["proto"]) == protos  # a figure of each protocol was measured
    assert system_state() == before


def test_bench_literature_runs_once_and_prints_ours_beside_the_papers(tmp_path):
    """Issue 28's literature checks: 100 MB at 1 Gbit/s over h2 and h3 beside Zhang et al.'s 924 and
    475 Mbit/s, and h3 against h2 on a 50-object page under 2% loss beside Yu & Benson's finding."""
    before = system_state()
    results = tmp_path / "l.sqlite"
    r = run_cli("bench-literature", "--entries", "network", "--runs", "1", "--results", str(results), timeout=900)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    if link_refused(r.returncode, r.stderr):
        assert system_state() == before
        return
    out = r.stdout[r.stdout.index("h2 vs h3 at 1 Gbit/s"):]
    print("\n" + out)
    assert "Zhang 924" in out or "no trial that counts" in out
    assert "Yu & Benson" in out and "50x20KB" in out or "no pair of cells" in out
    trials = _recorded(results)
    assert {(t["proto"], t["size_bytes"]) for t in trials} >= {("h2", 10**8), ("h3", 10**8)}
    assert system_state() == before


def test_bench_link_runs_once_and_prints_ratios():
    before = system_state()
    r = run_cli("bench-link", "--probes", "100", "--tcp-seconds", "1", timeout=600)  # a smoke test: figures at 5 s
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    assert "ratio" in r.stdout, r.stdout
    assert system_state() == before


@pytest.mark.parametrize("target,most", [("50%", 6), ("0.01%", 4)])
def test_a_precision_target_stops_a_cell_when_reached_or_at_its_most_runs(tmp_path, target, most):
    """A tiny real campaign, protocols interleaved, with a precision target: +-50% is usually reached
    after the least runs (3) and +-0.01% never (the cell takes its most). Whatever the machine's
    load, each cell stops for a stated reason: the target met by both protocols with equal runs,
    or the most runs; the report gives per cell the runs and the half widths."""
    results = tmp_path / "p.sqlite"
    r = run_cli("run", "--proto", "both", "--bw", "100mbit", "--size", "5KB", "--runs", "3", "--precision", target,
                "--max-runs", str(most), "--verify", "off", "--testbed", "227", "--results", str(results), timeout=600)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-2000:]
    measured = ok_slots(_recorded(results), lambda t: (t["run_index"], t["proto"]))
    assert (r.returncode == 0) == all((i, p) in measured for i in {i for i, _ in measured} for p in ("h3", "h1"))
    db = sqlite3.connect(results)
    n = dict(db.execute("SELECT proto, COUNT(*) FROM trials WHERE status = 'ok' GROUP BY proto").fetchall())
    runs = dict(db.execute("SELECT proto, COUNT(DISTINCT run_index) FROM trials GROUP BY proto").fetchall())
    db.close()
    assert runs["h3"] == runs["h1"], runs  # both protocols of the cell always have the same runs
    section = r.stdout[r.stdout.index("Runs per cell"):]
    row = next(line for line in section.splitlines() if line.strip().startswith("100mbit"))
    if target == "0.01%":
        assert runs["h3"] == most and "max runs reached" in row, (runs, row)
    elif "precision reached" in row:
        assert 3 <= runs["h3"] <= most, (runs, row)
        if runs["h3"] < most:  # stopped early: the run said so (at the most runs nothing was left to stop)
            assert f"precision reached after {runs['h3']} run(s)" in r.stdout, r.stdout
        widths = [float(x) for x in re.findall(r"(\d+\.\d)\s", row)[-2:]]
        assert all(w <= 50 for w in widths), row
    else:  # a busy machine spread the loads too widely: the most runs, and said so
        assert runs["h3"] == most and "max runs reached" in row, (runs, row)
    assert n.get("h3", 0) <= runs["h3"] and n.get("h1", 0) <= runs["h1"]


def test_a_store_deleted_mid_run_is_saved_and_the_run_exits_1(tmp_path):
    """Issue 36: the results folder deleted after trial 2 of 6: the run printed '6 ok', exited 2 and
    trials 3 to 6 were gone. Now within one trial it notices, saves what it holds at its path, stops,
    exits 1, and every trial it measured is in the saved store."""
    import shutil
    import time
    from .test_cli import _start_run
    results = tmp_path / "res" / "r.sqlite"
    p = _start_run(227, results, "--proto", "h3", "--bw", "100mbit", "--size", "5KB", "--runs", "6", "--verify", "off")
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and p.poll() is None:
            try:
                if results.exists() and len(_rows(results, "SELECT id FROM trials")) >= 2:
                    break
            except sqlite3.Error:  # the store is being made
                pass
            time.sleep(0.1)
        assert p.poll() is None, p.communicate()
        shutil.rmtree(results.parent)
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
            run_cli("clean", "--testbed", "227", timeout=120)
    assert p.returncode == 1 and "was saved to" in err and str(results) in err and "Traceback" not in err, (p.returncode, err)
    measured = len(re.findall(r" (ok|failed) ", out))
    kept = _rows(results, "SELECT seq, status FROM trials ORDER BY seq")
    assert len(kept) >= 2 and len(kept) == measured, (kept, out)
    assert _rows(results, "SELECT status FROM campaigns") == [{"status": "failed"}]
    assert _nothing("pb227")
