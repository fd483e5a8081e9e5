import json
import os
import subprocess
import sys
import time

import pytest

from plt_bench import cpu
from plt_bench.cpu import cpu_by_role


def test_roles_from_chromium_command_lines():
    assert cpu.role(["/usr/lib/chromium/chromium", "--headless=new", "--no-sandbox"]) == "browser"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=renderer", "--lang=en"]) == "renderer"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=gpu-process"]) == "gpu"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=utility",
                     "--utility-sub-type=network.mojom.NetworkService"]) == "network"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=utility",
                     "--utility-sub-type=storage.mojom.StorageService"]) == "utility"
    assert cpu.role(["/usr/lib/chromium/chromium", "--type=zygote"]) == "zygote"
    assert cpu.role(["/usr/bin/chromedriver", "--port=1234"]) == "chromedriver"
    assert cpu.role([]) == "other"


def test_cpu_by_role_adds_caddy_and_linkem_from_the_server_sampler():
    browser = {"roles": {"renderer": {"user_s": 0.5, "system_s": 0.1, "processes": 1}},
               "launch": {"browser": {"user_s": 0.3, "system_s": 0.1, "processes": 1}}, "sampler": {"samples": 5}}
    out = cpu_by_role(browser, {"caddy": (1.0, 2.0), "linkem": (0.0, 0.0)},
                      {"caddy": (1.5, 2.25), "linkem": (0.1, 0.3)}, {"cpu_s": 0.4}, {"samples": 6})
    assert out["roles"]["caddy"] == {"user_s": 0.5, "system_s": 0.25, "processes": 1}
    assert out["roles"]["linkem"]["system_s"] == 0.3 and out["roles"]["linkem"]["self_reported_s"] == 0.4
    assert out["roles"]["renderer"]["user_s"] == 0.5 and out["launch"]["browser"]["user_s"] == 0.3
    assert out["sampler"] == {"samples": 5} and out["server_sampler"] == {"samples": 6}
    assert cpu_by_role(None, {}, {}, None) is None


def test_roles_of_reads_schema_4_and_5_rows():
    flat = {"renderer": {"user_s": 1.0, "system_s": 0.0, "processes": 1}}
    assert cpu.roles_of(json.dumps(flat)) == flat
    assert cpu.roles_of(json.dumps({"roles": flat, "launch": None})) == flat
    assert cpu.roles_of(None) == {}


def test_difference_per_role():
    a = {"renderer": {"user_s": 1.0, "system_s": 0.5, "processes": 2}}
    b = {"renderer": {"user_s": 1.5, "system_s": 0.5, "processes": 3}, "gpu": {"user_s": 0.1, "system_s": 0.0}}
    d = cpu.difference(a, b)
    assert d["renderer"] == {"user_s": 0.5, "system_s": 0.0, "processes": 3}
    assert d["gpu"]["user_s"] == 0.1


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_sampler_follows_a_real_busy_process_and_stays_monotone():
    """A real child burning 0.3 s of CPU, then sleeping: the sampler's cumulative series is
    monotone and its last value matches the process's own total. The child says when it has
    burnt its share, so a busy machine (which stretches the burning) changes nothing asserted."""
    proc = subprocess.Popen([sys.executable, "-c", "import time\nend=time.process_time()+0.3\n"
                             "while time.process_time()<end: pass\nprint('burnt', flush=True)\ntime.sleep(2)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        import psutil
        p = psutil.Process(proc.pid)
        total = lambda t: t.user + t.system  # noqa: E731
        b1 = total(p.cpu_times())  # the sampler counts from its start: what the child used before, read around it
        s = cpu.Sampler(lambda: [("busy", p)], interval_s=0.05).start()
        s.mark()
        b2 = total(p.cpu_times())
        assert proc.stdout.readline().strip() == "burnt"
        n, deadline = s.ticks, time.monotonic() + 30
        time.sleep(0.2)  # a few readings of the sleeping child (a busy machine may starve the sampler: wait for them)
        while s.ticks < n + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        t_end = p.cpu_times()
        s.stop()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    rows = [r for r in s.series() if r["role"] == "busy"]
    assert len(rows) >= 4
    assert all(b["t_s"] > a["t_s"] and b["user_s"] >= a["user_s"] and b["system_s"] >= a["system_s"]
               for a, b in zip(rows, rows[1:]))
    # the child sleeps after burning, so the final sample and its total since the sampler's start differ by a
    # tick or two at most (on a busy machine the child's start-up may take a share of CPU before the sampler's)
    last = rows[-1]["user_s"] + rows[-1]["system_s"]
    assert total(t_end) - b2 - 0.03 <= last <= total(t_end) - b1 + 0.03, (b1, b2, last, t_end)
    assert total(t_end) >= 0.3 and last > 0
    info = s.info()
    assert info["samples"] == len(s.samples) and info["window_s"] >= 0.2 and info["own_cpu_s"] >= 0


def test_sampler_keeps_the_last_reading_of_a_process_that_exits():
    proc = subprocess.Popen([sys.executable, "-c", "import time\nend=time.process_time()+0.2\n"
                             "while time.process_time()<end: pass"])
    import psutil
    p = psutil.Process(proc.pid)
    s = cpu.Sampler(lambda: [("gone", p)], interval_s=0.02).start()
    proc.wait()
    time.sleep(0.1)
    s.stop()
    last = s.samples[-1][1]["gone"]
    assert last[0] + last[1] >= 0.1  # the reading before it exited stays in the cumulative total


def test_saturation_counts_the_time_a_role_runs_a_whole_core_within_a_window():
    sat = cpu.Saturation()
    # network: 0.95 of a core for 1 s, then 0.5 for 1 s; caddy 0.2 throughout; readings every 0.1 s
    for i in range(21):
        t = i / 10
        net = 0.095 * min(i, 10) + 0.05 * max(0, i - 10)
        sat.add(100 + t, {"network": net, "caddy": 0.02 * i})
    sat.add(102.005, {"network": 9.9, "caddy": 9.9})  # 5 ms later: merged with the next, never judged alone
    f = sat.figures()
    assert f == {"network": pytest.approx(1.0), "observed": pytest.approx(2.0), "readings": 20}
    assert sat.figures(since=100.5, until=101.5) == {"network": pytest.approx(0.5), "observed": pytest.approx(1.0),
                                                     "readings": 10}
    # the machine: busy jiffies over all jiffies of all cores, >= 95%
    m = cpu.Saturation()
    m.add(0.0, {}, (0, 0))
    m.add(0.1, {}, (19, 20))
    m.add(0.2, {}, (37, 40))
    assert m.figures() == {"machine": pytest.approx(0.1), "observed": pytest.approx(0.2), "readings": 2}


def test_a_trial_is_cpu_bound_when_one_role_was_saturated_for_half_the_load():
    def figs(browser, server):
        return {"sampler": {"saturated_s": browser}, "server_sampler": {"saturated_s": server}}
    assert cpu.bound(figs({"network": 6.0, "renderer": 1.0, "observed": 10.0}, {"observed": 10.0})) == ("network", 0.6)
    assert cpu.bound(figs({"renderer": 4.9, "observed": 10.0}, {"machine": 8.0, "observed": 10.0})) == ("machine", 0.8)
    assert cpu.bound(figs({"renderer": 4.9, "observed": 10.0}, {"linkem": 4.0, "observed": 10.0})) is None
    assert cpu.bound({"roles": {}}) is None and cpu.bound(None) is None  # figures from before schema 9
    assert cpu.bound(figs({"observed": 0.0}, {})) is None


def test_a_load_too_short_for_enough_readings_is_never_flagged():
    """Issue 27: a 30 ms load at zero RTT had one CPU reading at 100 ms intervals, and that one
    saturated reading flagged it CPU-bound ("half of the load" was a sample). Fewer than
    MIN_READINGS readings over the load: too short to judge, not flagged."""
    def load(seconds, interval=0.1):
        sat = cpu.Saturation()
        n = max(1, round(seconds / interval))
        for i in range(n + 1):  # the renderer and the machine flat out throughout
            sat.add(i * seconds / n, {"renderer": 0.98 * i * seconds / n}, (100 * i, 100 * i))
        return {"sampler": {"saturated_s": sat.figures()}, "server_sampler": {"saturated_s": sat.figures()}}
    short = load(0.03)
    assert short["sampler"]["saturated_s"]["readings"] == 1
    assert cpu.bound(short) is None and cpu.judged(short) is False  # a 30 ms load: too short to judge
    assert cpu.bound(load(0.3)) is None and cpu.judged(load(0.3)) is False  # 3 readings: still too few
    assert cpu.bound(load(1.0))[1] == 1.0 and cpu.judged(load(1.0)) is True  # 10 readings: judged
    old = {"sampler": {"saturated_s": {"renderer": 0.9, "observed": 1.0}}}  # stored before readings were counted
    assert cpu.bound(old) == ("renderer", 0.9) and cpu.judged(old) is True
    assert cpu.judged(None) is None


def test_the_sampler_reports_saturation_of_a_real_busy_process_and_the_machine():
    """A real child burning a whole core for 0.6 s: the sampler finds it saturated for most of it.
    The child runs at a real-time priority (the suite runs as root), so that on a busy shared
    machine it still has its core: the test is about what the sampler sees, not about the load."""
    proc = subprocess.Popen([sys.executable, "-c", "import os, time\nos.sched_setscheduler(0, os.SCHED_FIFO, "
                             "os.sched_param(1))\nend=time.monotonic()+0.6\nwhile time.monotonic()<end: pass"])
    # the sampler's thread too (it inherits this thread's policy): on a busy machine (the unit tests on every
    # core, a campaign beside them) a sampler left at normal priority missed its ticks (observed < 0.5 s)
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        import psutil
        p = psutil.Process(proc.pid)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        try:
            s = cpu.Sampler(lambda: [("busy", p)], interval_s=0.05, machine=True).start()
        finally:
            os.sched_setscheduler(0, policy, param)
        proc.wait()
        s.stop()
    finally:
        proc.wait()
    sat = s.info()["saturated_s"]
    assert sat["observed"] >= 0.5 and sat.get("machine", 0.0) <= sat["observed"]
    assert proc.returncode == 0  # it had its real-time priority
    # interrupts and the sampler's own start may take a little of its time: most, not all, of it
    assert sat.get("busy", 0.0) >= 0.25, sat


@pytest.mark.parametrize("text,cpus,back", [("0", (0,), "0"), ("0-3,6", (0, 1, 2, 3, 6), "0-3,6"),
                                            ("4,0-1, 2", (0, 1, 2, 4), "0-2,4"), ("7-7", (7,), "7")])
def test_cpu_lists_in_the_kernels_form_read_and_written(text, cpus, back):
    assert cpu.parse_cpus(text) == cpus and cpu.cpu_list(cpus) == back


@pytest.mark.parametrize("text", ["", "a", "1-", "3-1", "0,,1", "-1", "0.5"])
def test_a_bad_cpu_list_is_refused_naming_the_option_and_the_form(text):
    from plt_bench.errors import UsageError
    with pytest.raises(UsageError, match=r"^--cpus: .* is not a CPU list; expected CPU numbers and ranges"):
        cpu.parse_cpus(text, "--cpus")


def test_busy_jiffies_count_only_the_given_cpus_and_not_guest_time_twice():
    stat = ["cpu  300 0 100 600 0 0 0 0 50 0\n",
            "cpu0 100 0 50 100 0 0 0 0 50 0\n",   # busy 150 of 250 (guest 50 is inside user 100)
            "cpu1 200 0 50 500 0 0 0 0 0 0\n",    # busy 250 of 750
            "intr 12345 0 0\n", "cpu9 999 0 0 0 0 0 0 0 0 0\n"]
    assert cpu.busy_jiffies(stat, [0]) == (150, 250)
    assert cpu.busy_jiffies(stat, [1]) == (250, 750)
    assert cpu.busy_jiffies(stat, [0, 1]) == (400, 1000)
    assert cpu.busy_jiffies(stat, [9]) == (0, 0)  # only the cpu lines at the top count


def test_pinning_reaches_every_thread_and_every_process_started_after():
    """Real threads and a real child process (a cluster worker's mechanism: on this 2-core machine
    a worker's own set is both cores, so its test cannot tell pinned from not; one CPU can)."""
    code = ("import subprocess, sys, threading, time\n"
            "from plt_bench.cpu import pin_threads\n"
            "t = threading.Thread(target=time.sleep, args=(30,), daemon=True); t.start()\n"
            "pin_threads((0,))\n"
            "child = subprocess.Popen(['sleep', '30'])\n"
            "print(child.pid, flush=True)\n"
            "sys.stdin.read()\n"
            "child.kill()\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(p.stdout.readline())

        def allowed(path):
            with open(path) as f:
                return next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list:"))
        threads = [f"/proc/{p.pid}/task/{tid}/status" for tid in os.listdir(f"/proc/{p.pid}/task")]
        assert len(threads) >= 2  # the thread started before pinning is there
        assert {allowed(t) for t in threads} == {"0"}
        assert allowed(f"/proc/{child}/status") == "0"
    finally:
        p.stdin.close()
        p.wait(timeout=10)


def test_a_stopped_process_is_seen_as_a_stall_and_a_running_one_is_not():
    """The liveness watch (issue 26): a real child stopped by SIGSTOP is in state T at the samples,
    named in the stall; a sleeping one (state S) is not; without a watch nothing is judged."""
    import signal
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(3)]
    stopped, sleeping, worker = procs
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while cpu.process_state(stopped.pid) not in ("T", "t") and time.monotonic() < deadline:
            time.sleep(0.01)  # the stop is delivered asynchronously
        assert cpu.process_state(stopped.pid) in ("T", "t") and cpu.process_state(sleeping.pid) in ("S", "R")
        s = cpu.Sampler(cpu.fixed_sources({"caddy": stopped.pid, "linkem": sleeping.pid}), interval_s=0.02,
                        grows=False, watch={"browser worker": worker.pid}).start()
        time.sleep(0.15)
        s.stop()
        why = s.stall_problem()
        assert why and "testbed stalled" in why and "caddy in" in why, why
        assert "linkem" not in why and "browser worker" not in why
        quiet = cpu.Sampler(cpu.fixed_sources({"caddy": stopped.pid}), interval_s=0.02, grows=False).start()
        time.sleep(0.05)
        quiet.stop()
        assert quiet.stall_problem() is None  # no watch asked for: the browser tree's sampler judges nothing
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert cpu.process_state(stopped.pid) is None  # gone


def test_a_kept_browsers_trial_counts_each_process_from_its_own_reading():
    """A kept browser's trial (--browser-start kept): a renderer of an earlier trial's context that
    leaves during this one takes nothing from this trial's figures (per role it would have: 2.0 s of
    the leaving renderer against this one's new 0.3), a new process counts all it used."""
    before = {10: ("browser", 5.0, 1.0), 11: ("renderer", 2.0, 0.0), 12: ("network", 0.5, 0.1)}
    after = {10: ("browser", 5.2, 1.0), 12: ("network", 0.6, 0.2), 13: ("renderer", 0.25, 0.05)}
    got = cpu.pid_difference(before, after)
    assert got == {"browser": {"user_s": 0.2, "system_s": 0.0, "processes": 1},
                   "network": {"user_s": 0.1, "system_s": 0.1, "processes": 1},
                   "renderer": {"user_s": 0.25, "system_s": 0.05, "processes": 1}}
    assert cpu.difference({"renderer": {"user_s": 2.0, "system_s": 0.0}},
                          {"renderer": {"user_s": 0.25, "system_s": 0.05}})["renderer"]["user_s"] == 0.0
