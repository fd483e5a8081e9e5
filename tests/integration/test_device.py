"""The visitor's device (issue 45) through the real testbed: a CPU budget holds every process of the
browser and nothing else, and slows the page's own script by its factor, in both browsers."""
import json
import statistics
import time
from pathlib import Path

import pytest

from plt_bench import procs
from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Conditions
from plt_bench.device.visitor import Visitor
from plt_bench.pages import Page
from plt_bench.testbed import Setup, Testbed

from ..conftest import CALIBRATION_REFUSALS, MACHINE_REFUSALS, system_state, unjudged

pytestmark = [pytest.mark.root, pytest.mark.slow]

COND = Conditions(20 * 10**6, 20 * 10**6, rtt_ms=20)
# the loop's slowdown at a quarter of a core, as judged here: 4 within this (measured: see docs/results.md)
TOLERANCE = 0.25
CONTENDED = 2.0  # a full-speed loop this much slower than its CPU time: the machine's other load binds


@pytest.mark.parametrize("browser", ["chromium", "firefox"])
def test_a_quarter_core_holds_every_browser_process_alone_and_slows_the_page_s_script_4x(browser):
    """Under --cpu 0.25 the WebDriver and every browser process it starts are in the testbed's group
    and nothing else is (not the worker, the server or the link emulator), in each browser; the group
    is throttled; a fixed JavaScript loop in the page takes about 4 times its CPU time (at a full core,
    budget 1: the same CPU and no quota, about 1), after a repeat visit's second load too (judged once,
    in Chromium: the group's, not the browser's). The group is gone with the testbed."""
    before = system_state()
    with Testbed(Setup(PROJECT_ROOT / "sites", browser_names=(browser,), conditions=[COND])) as bed:
        bed.set_conditions(COND)
        bed.set_visitor(Visitor(0.25))
        bed.prepare("h2", Page(5000), browser=browser)  # started under the budget, idle
        worker = bed.worker.proc.pid
        deadline, group, below = time.monotonic() + 60, set(), set()
        while time.monotonic() < deadline and len(group) < 3:  # the driver, the browser and a child of it
            time.sleep(0.5)
            group = bed.visitor_group.group.pids()
        table = procs.table()
        below = procs.descendants({p: row[0] for p, row in table.items()}, worker)
        group = bed.visitor_group.group.pids()
        assert len(group) >= 3, group
        assert worker not in group and group <= below | (group - set(table)), (group, below)
        assert below - {p for p in below if table[p][1] == "Z"} <= group | (below - set(procs.table())), (below, group)
        bed.discard_prepared()
        slowdown: dict[float, list[float]] = {}
        throttled: dict[float, int] = {}
        # Chromium twice each (the quarter's median of two); Firefox's processes in the group are its part here:
        # the loop's slowdown is the group's, whichever browser runs it (Firefox's two loads took 85 s of its 162)
        for share in (1.0, 0.25, 1.0, 0.25) if browser == "chromium" else ():
            bed.set_visitor(Visitor(share))
            ans, _ = bed.load("h2", Page(5000), 60.0, browser=browser)
            assert not ans.get("error"), ans.get("error")
            assert "error" not in ans["cpu_loop"], ans["cpu_loop"]
            slowdown.setdefault(share, []).append(ans["cpu_loop"]["slowdown"])
            throttled[share] = throttled.get(share, 0) + ans["cpu_group"]["throttled_periods"]
            assert ans["cpu_group"]["quota_us"] == (None if share == 1.0 else 1000)
        repeat_slowdown = None
        if browser == "chromium":  # a repeat visit under the budget (once: the group is the browsers' alike;
            # Firefox's two loads at a quarter core took over 2 minutes): both loads in one browser in the group
            bed.set_visitor(Visitor(0.25))
            ans, _ = bed.load("h2", Page(5000, visit="repeat"), 60.0, browser=browser)
            assert not ans.get("error") and not ans["first_visit"].get("error"), ans.get("error")
            assert ans["cpu_group"]["throttled_periods"] > 0 and "error" not in ans["cpu_loop"], ans["cpu_group"]
            repeat_slowdown = ans["cpu_loop"]["slowdown"]
        group_folders = list(bed.visitor_group.group.folders.values())
    assert not any(f.exists() for f in group_folders), "the group outlived the testbed"
    assert system_state() == before
    if browser != "chromium":
        return
    assert throttled[1.0] == 0 and throttled[0.25] > 0, throttled
    # the loop's wall time over the group's CPU time: 1 at a full core the machine leaves alone, the
    # budget's factor under a quota that binds; where the machine's other load already held the full-
    # speed loop below half a core, it is that load that the quarter's figure measures
    full, quarter = max(slowdown[1.0]), statistics.median(slowdown[0.25])
    if full > CONTENDED:
        return unjudged(f"the full-speed loop ran {full:.2f}x slower than its CPU time on this machine: its other "
                        "load, not the budget, decides the quarter's figure")
    assert abs(quarter / 4.0 - 1) <= TOLERANCE, (slowdown, TOLERANCE)
    assert repeat_slowdown is None or abs(repeat_slowdown / 4.0 - 1) <= TOLERANCE, (repeat_slowdown, TOLERANCE)


def test_a_killed_run_s_cpu_group_and_what_runs_in_it_are_removed_by_clean():
    """SIGKILL runs no cleanup: the testbed's group stays, with the browser processes in it (here a
    stand-in, a sleep started inside it). `plt-bench clean --testbed N` finds the testbed by its
    group alone, ends what runs in it and removes the group from every hierarchy."""
    import signal
    import subprocess
    import sys

    from plt_bench.device import cgroup
    from ..conftest import run_cli
    before = system_state()
    maker = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, time\n"
        "from plt_bench.device import budget, cgroup\n"
        "g = cgroup.Group('pb247').make()\n"
        "g.set(budget.quota_for(0.5), [sorted(os.sched_getaffinity(0))[-1]])\n"
        "g.join(os.getpid())\n"
        "p = subprocess.Popen(['sleep', '300'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(300)\n")], stdout=subprocess.PIPE, text=True)
    try:
        stray = int(maker.stdout.readline())
    finally:
        maker.send_signal(signal.SIGKILL)
        maker.wait()
        maker.stdout.close()
    group = cgroup.Group("pb247")
    assert stray in group.pids() and all(f.is_dir() for f in group.folders.values())
    r = run_cli("clean", "--testbed", "247")
    assert r.returncode == 0 and "removed pb247" in r.stdout, r.stdout + r.stderr
    assert not any(f.exists() for f in group.folders.values()) and not procs.alive(stray)
    procs.reap_children()
    assert system_state() == before


def test_a_phone_loads_a_real_page_in_its_own_window_under_its_calibrated_budget(tmp_path):
    """--device low-end-phone on a real page (a package's documentation, served as it is): the host
    is calibrated first (Lighthouse's BenchmarkIndex in Chromium, within 15% of the phone's 264 under
    its budget), the trial runs under that budget (its loop slowed by the budget's factor: the trial
    is ok only then), in the phone's window (412x823 CSS px at 1.75, as the page's own script saw it),
    with its LCP judged there; the report says what the phone's budget meant here; nothing is left."""
    import sqlite3

    from plt_bench.pages import real as realpages
    from plt_bench.device.calibrate import CALIBRATION_TOLERANCE
    from ..conftest import run_cli
    page = next(p for p in realpages.ready() if p.name == "toolbelt")
    serve = [x for h, d in page.folders for x in ("--folder", f"{h}={d}")]
    results = tmp_path / "phone.sqlite"
    before = system_state()
    r = run_cli("run", "--size", f"url:{page.url}", *serve, "--device", "low-end-phone", "--proto", "h2", "--runs", "1",
                "--bw", "20mbit", "--rtt", "20ms", "--verify", "off", "--results", str(results), timeout=900)
    assert system_state() == before
    if r.returncode != 0 and any(x in r.stderr for x in CALIBRATION_REFUSALS):
        return unjudged(f"the machine's other load kept the host from being calibrated: {r.stderr.strip()[-300:]}")
    assert "Traceback" not in r.stderr and "device low-end-phone: BenchmarkIndex 264 is" in r.stdout, r.stdout + r.stderr
    db = sqlite3.connect(results)
    db.row_factory = sqlite3.Row
    rows = [dict(x) for x in db.execute("SELECT * FROM trials")]
    meta = json.loads(db.execute("SELECT metadata_json FROM campaigns").fetchone()[0])
    db.close()
    cal = meta["devices"]["low-end-phone"]
    assert abs(cal["measured_index"] / 264 - 1) <= CALIBRATION_TOLERANCE and 0 < cal["budget_cores"] < 1, cal
    t = rows[-1]
    if t["status"] != "ok" and (t["reason"] or "").startswith(MACHINE_REFUSALS):
        return unjudged(f"the machine refused the trial: {t['reason']}")
    assert r.returncode == 0 and t["status"] == "ok", (t["status"], t["reason"])
    assert (t["device"], t["cpu_cores"], t["device_host_index"]) == ("low-end-phone", 1, cal["host_index"])
    assert t["cpu_budget"] == pytest.approx(cal["budget_cores"]) and t["cpu_throttled_periods"] > 0
    assert t["viewport"] == "412x823@1.75" and t["lcp_ms"] and t["lcp_ms"] >= t["fcp_ms"] > 0, t
    folder = r.stdout.split("report and figures: ")[1].split(" (")[0]
    report = (Path(folder) / "report.md").read_text()
    assert "CPU budgets on the host that ran them: low-end-phone: BenchmarkIndex 264 is" in report
