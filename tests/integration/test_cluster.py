"""Many machines on one: a Dask scheduler and two plt-bench workers (testbeds 228 and 229) run a
tiny campaign; every cell is measured by exactly one worker, the store holds what a local run
would, and a worker killed in the middle loses and duplicates nothing."""
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from ..conftest import ROOT, run_cli

DASK = [sys.executable, "-c", "from distributed.cli.dask_scheduler import main; main()"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(address, index):
    return subprocess.Popen([sys.executable, "-m", "plt_bench.cli", "worker", "--scheduler", address, "--testbed",
                             str(index)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _wait_workers(address, n, timeout_s=120):
    from distributed import Client
    with Client(address, timeout="10s") as c:
        c.wait_for_workers(n, timeout=timeout_s)


@pytest.fixture
def cluster():
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    sched = subprocess.Popen([*DASK, "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    workers = {i: _worker(address, i) for i in (228, 229)}
    try:
        _wait_workers(address, 2)
        yield address, workers
    finally:
        for p in [*workers.values(), sched]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in [*workers.values(), sched]:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        run_cli("clean")  # a killed worker's testbed


def _rows(path):
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    return [dict(r) for r in db.execute("SELECT * FROM trials ORDER BY id")]


def _slots(rows):
    return sorted((r["conditions"], r["page"], r["run_index"], r["proto"]) for r in rows if r["status"] == "ok")


def test_a_tiny_campaign_on_two_workers_holds_what_a_local_run_would(cluster, tmp_path):
    address, _ = cluster
    opts = ["--size", "5KB,500KB", "--bw", "100mbit", "--runs", "2", "--proto", "both", "--verify", "off"]
    c = run_cli("run", *opts, "--cluster", address, "--results", str(tmp_path / "cluster.sqlite"), timeout=900)
    assert c.returncode == 0, c.stdout[-3000:] + c.stderr[-3000:]
    local = run_cli("run", *opts, "--testbed", "230", "--results", str(tmp_path / "local.sqlite"), timeout=900)
    assert local.returncode == 0, local.stderr[-3000:]
    got, want = _rows(tmp_path / "cluster.sqlite"), _rows(tmp_path / "local.sqlite")
    assert set(got[0]) == set(want[0])  # the same columns
    assert _slots(got) == _slots(want) and len(_slots(got)) == 8  # the same trials: 2 cells x 2 runs x 2 protocols
    hosts = {}
    for r in got:
        assert r["host"], r
        hosts.setdefault((r["conditions"], r["page"]), set()).add(r["host"])
    assert all(len(h) == 1 for h in hosts.values()), hosts  # every cell measured by exactly one worker
    assert not any(r["host"] for r in want)


def test_a_worker_killed_in_the_middle_loses_and_duplicates_nothing(cluster, tmp_path):
    address, workers = cluster
    store = tmp_path / "kill.sqlite"
    head = subprocess.Popen([sys.executable, "-m", "plt_bench.cli", "run", "--size", "5KB,500KB", "--bw",
                             "100mbit", "--runs", "3", "--proto", "both", "--verify", "off", "--cluster", address,
                             "--results", str(store)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    victim = None
    deadline = time.monotonic() + 600
    while victim is None and time.monotonic() < deadline and head.poll() is None:
        time.sleep(0.5)
        try:
            rows = _rows(store)
        except sqlite3.Error:
            continue
        for r in rows:  # the first worker with a stored trial is killed mid-cell
            if r["host"]:
                victim = int(r["host"].rsplit("pb", 1)[1])
                break
    assert victim is not None, "no trial reached the store"
    kept = [r["id"] for r in _rows(store) if r["host"].endswith(f"pb{victim}")]
    os.killpg(workers[victim].pid, signal.SIGKILL)
    out, _ = head.communicate(timeout=1500)
    assert head.returncode == 0, out[-4000:]
    rows = _rows(store)
    assert _slots(rows) == sorted(set(_slots(rows))) and len(_slots(rows)) == 2 * 3 * 2  # every slot once
    assert set(kept) <= {r["id"] for r in rows}  # the dead worker's finished trials stay
    hosts = {}
    for r in rows:
        hosts.setdefault((r["conditions"], r["page"]), set()).add(r["host"])
    # the cell it was measuring was finished by the other worker, from where it stopped
    assert any(len(h) == 2 for h in hosts.values()), hosts


def test_the_head_killed_then_run_again_resumes_its_campaign(cluster, tmp_path):
    address, _ = cluster
    store = tmp_path / "resume.sqlite"
    argv = [sys.executable, "-m", "plt_bench.cli", "run", "--size", "5KB,500KB", "--bw", "100mbit", "--runs", "3",
            "--proto", "both", "--verify", "off", "--cluster", address, "--results", str(store)]
    head = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    first = []
    while len(first) < 2 and time.monotonic() < deadline and head.poll() is None:
        time.sleep(0.3)
        try:
            first = _rows(store)
        except sqlite3.Error:
            pass
    head.kill()
    head.wait()
    assert len(first) >= 2, "the head stored nothing before it was killed"
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    rows = _rows(store)
    assert {r["campaign_id"] for r in rows} == {first[0]["campaign_id"]}  # the same campaign, resumed
    assert {r["id"] for r in first} <= {r["id"] for r in rows}  # what the first head stored stays
    assert _slots(rows) == sorted(set(_slots(rows))) and len(_slots(rows)) == 2 * 3 * 2
