"""The CLI end to end: up/down, a killed run and clean, an interrupted run, congestion control."""
import json
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from plt_bench import cmd, topology
from plt_bench import testbed

from ..conftest import CLI, ROOT, run_cli


def _mine(prefix):
    left = topology.leftovers()
    return {"namespaces": [n for n in left["namespaces"] if n.startswith(prefix + "-")],
            "run_dirs": [d for d in left["run_dirs"] if d == prefix],
            "processes": topology._our_processes(prefix)}


def _nothing(prefix):
    return _mine(prefix) == {"namespaces": [], "run_dirs": [], "processes": []}


def test_up_gives_a_usable_link_and_down_removes_it():
    r = run_cli("up", "--bw", "20mbit", "--testbed", "201", "--json", timeout=120)
    try:
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        assert info["prefix"] == "pb201" and info["link"]["downlink"]["shaped_rate_bps"] == 20 * 10**6
        client, server_ip = info["namespaces"]["client"], info["addresses"]["server"]
        ping = cmd.run(["ping", "-c", "3", "-i", "0.2", "-W", "2", server_ip], ns=client, check=False)
        assert ping.returncode == 0, ping.stdout
        curl = cmd.run(["curl", "-sk", "--resolve", f"plt.test:443:{server_ip}", "-o", "/dev/null",
                        "-w", "%{http_code} %{http_version} %{size_download}", info["url"]], ns=client, check=False)
        assert curl.stdout.split() == ["200", "1.1", "5000"], curl.stdout + curl.stderr
        assert _mine("pb201")["processes"], "Caddy should keep running after 'up' returns"
    finally:
        d = run_cli("down", "--testbed", "201", timeout=60)
    assert d.returncode == 0, d.stderr
    assert _nothing("pb201")


def _start_run(index, results, *extra):
    return subprocess.Popen([*CLI, "run", "--testbed", str(index), "--results", str(results), *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_trial_in_flight(prefix, proc, timeout=90):
    """Until a Chromium of this testbed is loading a page."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for pid in topology._our_processes(prefix):
            try:
                if "chromium" in open(f"/proc/{pid}/cmdline").read():
                    return
            except OSError:
                pass
        time.sleep(0.1)
    pytest.fail("no trial started")


def _ready_trials(results):
    """Finished trials so far; none while the run is still creating the store."""
    try:
        return _finished_trials(results)
    except sqlite3.OperationalError:
        return []


def _finished_trials(results):
    db = sqlite3.connect(results)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return db.execute("SELECT status, COUNT(*) FROM trials GROUP BY status").fetchall()
    finally:
        db.close()


def test_sigkill_then_clean_leaves_nothing(tmp_path):
    results = tmp_path / "r.sqlite"
    p = _start_run(202, results, "--proto", "tcp", "--bw", "1mbit", "--size", "5KB,500KB", "--runs", "3", "--verify", "off")
    try:
        _wait_for_trial_in_flight("pb202", p)
        time.sleep(1.0)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
    assert not _nothing("pb202"), "a SIGKILLed run leaves its testbed (that is what clean is for)"
    r = run_cli("clean", timeout=120)
    assert r.returncode == 0 and "removed pb202" in r.stdout, r.stdout + r.stderr
    assert _nothing("pb202")
    assert run_cli("clean", timeout=60).returncode == 0  # safe to rerun


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_cleans_up_and_keeps_finished_trials(tmp_path, sig):
    results = tmp_path / "r.sqlite"
    p = _start_run(203, results, "--proto", "both", "--bw", "10mbit", "--size", "5KB,10MB", "--runs", "2",
                   "--verify", "off")
    try:
        _wait_for_trial_in_flight("pb203", p)
        # let at least one trial finish, then interrupt during a later one
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not os.path.exists(results):
            time.sleep(0.2)
        while time.monotonic() < deadline and not _ready_trials(results):
            time.sleep(0.2)
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "interrupted" in err
    assert _nothing("pb203")
    rows = dict(_finished_trials(results))
    assert rows.get("ok", 0) >= 1
    db = sqlite3.connect(results)
    assert db.execute("SELECT status FROM campaigns").fetchone()[0] == "interrupted"
    db.close()


@pytest.mark.parametrize("cc", ["reno", "cubic"])
def test_congestion_control_is_the_one_configured(cc):
    """A real TCP transfer across the link uses the algorithm set on the testbed's routes."""
    with testbed.Testbed(ROOT / "sites", cc=cc, with_browser=False) as bed:
        bed.sites.ensure([500_000])
        from plt_bench.conditions import Conditions
        bed.set_conditions(Conditions(1_000_000, 1_000_000))  # ~4 s for 500 KB: time to look
        curl = subprocess.Popen(cmd.in_netns(bed.plan.client_ns, [
            "curl", "-sk", "--resolve", f"plt.test:443:{bed.plan.server_ip}", "-o", "/dev/null",
            "https://plt.test/index_500KB.html"]))
        try:
            seen = ""
            for _ in range(40):
                time.sleep(0.1)
                seen = cmd.run(["ss", "-tinH", "state", "established"], ns=bed.plan.server_ns).stdout
                if "bytes_acked" in seen:
                    break
        finally:
            curl.kill()
            curl.wait()
        algos = {w for w in seen.split() if w in ("reno", "cubic", "bbr")}
        assert algos == {cc}, seen
