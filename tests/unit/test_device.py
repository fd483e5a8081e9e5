"""The visitor's device (issue 45), its pure parts: the quota arithmetic and the control groups'
layout and settings, read from /proc texts as this machine and a cgroup v2 machine write them."""
from pathlib import Path

import pytest

from plt_bench.device import budget, cgroup

# this machine's (2026-11-27): cgroup v1 per controller, cgroup2 without controllers
MOUNTS_V1 = """tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
OWN_V1 = """9:name=systemd:/
4:memory:/process_api/140dc
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
"""
# a systemd machine's: cgroup2 alone
MOUNTS_V2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"
OWN_V2 = "0::/user.slice/user-0.slice/session-3.scope\n"


def test_a_budget_gets_the_shortest_period_whose_quota_the_kernel_takes():
    """1 ms is the smallest quota (EINVAL below, measured): 0.25 of a core is 1 ms per 4 ms, frozen
    3 ms at a time; a full core has no quota; several cores share one quota."""
    q = budget.quota_for(0.25)
    assert (q.quota_us, q.period_us, q.factor, q.freeze_ms) == (1000, 4000, 4.0, 3.0)
    # no period under a scheduler tick (4 ms at HZ=250): enforced loosely there
    assert [(budget.quota_for(b).quota_us, budget.quota_for(b).period_us) for b in (0.5, 0.75, 0.1)] == [
        (2000, 4000), (3000, 4000), (1000, 10000)]
    assert budget.quota_for(1).quota_us is None and budget.quota_for(1).factor == 1.0
    two = budget.quota_for(0.5, cores=2)
    assert (two.quota_us, two.period_us, two.applied_cores) == (4000, 4000, 0.5)
    # a pool over the two cores: one thread alone takes all of it, a whole core (so its loop runs
    # unslowed); at 0.25 on two cores, half a core
    assert two.factor == 1.0 and budget.quota_for(0.25, cores=2).factor == 2.0
    odd = budget.quota_for(0.3)  # rounded to whole microseconds: what was applied is kept
    assert odd.quota_us >= budget.MIN_QUOTA_US and abs(odd.applied_cores - 0.3) < 0.001
    for bad in (0, -0.5, 1.5, 0.0005):
        with pytest.raises(ValueError):
            budget.quota_for(bad)
    with pytest.raises(ValueError):
        budget.quota_for(0.5, cores=0)


def test_the_layout_is_v1_where_cpu_and_cpuset_are_v1_controllers_below_the_maker_s_own_group():
    lay = cgroup.choose(MOUNTS_V1, OWN_V1, "")
    assert lay.version == 1
    f = lay.folders("plt-bench.pb3")
    assert f["cpu"] == Path("/sys/fs/cgroup/cpu/plt-bench.pb3")
    assert f["memory"] == Path("/sys/fs/cgroup/memory/process_api/140dc/plt-bench.pb3")  # a container's own
    assert set(f) == {"cpu", "cpuset", "cpuacct", "memory"}
    # run by `ip netns exec` (its own /sys hides the groups): the machine's hierarchies mounted again
    # where they were, the tmpfs they sit in first, only those a budget uses
    cmds = cgroup.mount_commands(MOUNTS_V1)
    assert cmds[0] == ["mount", "-t", "tmpfs", "-o", "rw,relatime,mode=755", "tmpfs", "/sys/fs/cgroup"]
    assert cmds[1:3] == [["mkdir", "-p", "/sys/fs/cgroup/cpu"],
                         ["mount", "-t", "cgroup", "-o", "rw,relatime,cpu", "cgroup", "/sys/fs/cgroup/cpu"]]
    assert [c[-1] for c in cmds if c[0] == "mount"] == ["/sys/fs/cgroup", *(f"/sys/fs/cgroup/{h}" for h in (
        "cpu", "cpuacct", "cpuset", "memory", "unified"))]  # not pids
    assert cgroup.mount_commands("proc /proc proc rw 0 0\n") == []


def test_the_layout_is_v2_where_cgroup2_offers_cpu_and_cpuset_and_none_names_what_is_missing():
    lay = cgroup.choose(MOUNTS_V2, OWN_V2, "cpuset cpu io memory pids")
    assert lay.version == 2
    assert lay.folders("plt-bench.pb3") == {
        "cgroup2": Path("/sys/fs/cgroup/user.slice/user-0.slice/session-3.scope/plt-bench.pb3")}
    with pytest.raises(cgroup.CgroupError, match="--cpu: .*offers io memory pids .*cpu and cpuset needed"):
        cgroup.choose(MOUNTS_V2, OWN_V2, "io memory pids")
    with pytest.raises(cgroup.CgroupError, match="no cgroup2 mounted"):
        cgroup.choose("proc /proc proc rw 0 0\n", "", None)


def test_a_budget_s_settings_come_in_the_order_the_kernel_needs():
    q = budget.quota_for(0.25)
    v1 = cgroup.choose(MOUNTS_V1, OWN_V1, "")
    w = [(p.parent.name + "/" + p.name, v) for p, v in cgroup.settings(v1, "g", q, [1], "0", 512 << 20)]
    assert w == [("g/cpuset.cpus", "1"), ("g/cpuset.mems", "0"), ("g/cpu.cfs_quota_us", "-1"),
                 ("g/cpu.cfs_period_us", "4000"), ("g/cpu.cfs_quota_us", "1000"),
                 ("g/memory.limit_in_bytes", str(512 << 20))]
    v2 = cgroup.choose(MOUNTS_V2, OWN_V2, "cpuset cpu memory")
    assert [(p.name, v) for p, v in cgroup.settings(v2, "g", budget.quota_for(1), [0, 1], "0")] == [
        ("cpuset.cpus", "0,1"), ("cpu.max", "max 100000"), ("memory.max", "max")]


def test_a_group_s_counters_are_read_in_nanoseconds_from_either_version():
    v1 = cgroup.choose(MOUNTS_V1, OWN_V1, "")
    assert cgroup.Group("pb3", v1).usage_file() == (Path("/sys/fs/cgroup/cpuacct/plt-bench.pb3/cpuacct.usage"), "cpuacct")
    a = cgroup.reading_from("nr_periods 340\nnr_throttled 264\nthrottled_time 742982237\nnr_bursts 0\n",
                            cgroup.usage_ns("cpuacct", "321123812\n"))
    assert a == cgroup.Reading(321123812, 340, 264, 742982237)
    v2 = cgroup.choose(MOUNTS_V2, OWN_V2, "cpuset cpu")
    assert cgroup.Group("pb3", v2).usage_file()[1] == "cpu.stat"  # v2 counts its CPU time in cpu.stat
    stat2 = "usage_usec 5000\nuser_usec 4000\nnr_periods 10\nnr_throttled 4\nthrottled_usec 300\n"
    b = cgroup.reading_from(stat2, cgroup.usage_ns("cpu.stat", stat2))
    assert b == cgroup.Reading(5_000_000, 10, 4, 300_000)
    assert a.since(cgroup.Reading(1, 40, 64, 2)) == cgroup.Reading(321123811, 300, 200, 742982235)


def test_a_trial_is_under_its_budget_only_when_the_loop_runs_the_factor_slower_and_the_quota_bit():
    q = budget.quota_for(0.25)
    held = {"slowdown": 4.1}
    assert budget.budget_problem(q, held, {"throttled_periods": 300}) is None
    assert budget.budget_problem(None, None, None) is None  # no budget, nothing to prove
    assert budget.budget_problem(q, {"slowdown": 6.0}, {"throttled_periods": 300}).startswith(budget.MACHINE_HELD_BACK)
    assert budget.budget_problem(q, {"slowdown": 1.1}, {"throttled_periods": 300}).startswith(budget.BUDGET_NOT_HELD)
    assert "never throttled" in budget.budget_problem(q, held, {"throttled_periods": 0})
    assert "proof is missing" in budget.budget_problem(q, {"error": "JavascriptException: x"}, {})
    full = budget.quota_for(1)  # a full core: no quota to bite, the loop at its CPU time
    assert budget.budget_problem(full, {"slowdown": 1.05}, {"throttled_periods": 0}) is None


def test_udp_receive_buffer_drops_are_read_from_the_namespace_s_snmp_counters():
    snmp = ("Ip: Forwarding DefaultTTL\nIp: 2 64\n"
            "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n"
            "Udp: 4 0 7 4 7 0 0 0 0\nUdpLite: InDatagrams\nUdpLite: 0\n")
    assert budget.rcvbuf_errors(snmp) == 7
    assert budget.rcvbuf_errors("Ip: a\nIp: 1\n") is None


def test_every_device_profile_is_complete_and_says_where_its_figures_come_from():
    """The profile table: a CPU class (a BenchmarkIndex), cores, RAM, a screen and a source each;
    the phones emulate a mobile, touch screen with a phone's user agent; an unknown name says the known."""
    from plt_bench.device import profiles
    assert list(profiles.PROFILES) == ["low-end-phone", "mid-phone", "laptop"]
    for p in profiles.PROFILES.values():
        assert p.benchmark_index > 0 and p.cores >= 1 and p.memory_bytes >= 2**30 and p.source
        assert p.screen.width_px > 0 and p.screen.height_px > 0 and p.screen.pixel_ratio >= 1
    low, mid = profiles.get("low-end-phone"), profiles.get("mid-phone")
    assert (low.benchmark_index, mid.benchmark_index) == (264, 1000)  # DevTools' calibration scores
    assert low.screen == profiles.Screen(412, 823, 1.75, True, True, low.screen.user_agent)  # Lighthouse's
    assert all(s.mobile and s.touch and "Mobile" in s.user_agent for s in (low.screen, mid.screen))
    assert not profiles.get("laptop").screen.mobile
    with pytest.raises(ValueError, match="'phone' is no device; known: low-end-phone, mid-phone, laptop"):
        profiles.get("phone")


def test_a_calibration_divides_the_host_down_to_the_device_and_refuses_what_it_cannot_reach():
    """The host's index over the device's is the first budget; measurements under budgets move it
    along their line (the browser's own background work takes a constant share); a host slower than the device, or one that would
    need less than the kernel's smallest quota, is refused with the reason; the figure under the
    budget must be within the tolerance."""
    from plt_bench.device import calibrate as cal
    assert cal.first_share("low-end-phone", 264, 2112) == pytest.approx(0.125)
    # measured here beside a busy machine: 2040 at a full core, 146 at 0.13 (the browser's background
    # work takes a constant share): the line through the two says 0.184
    assert cal.next_share([(1.0, 2040.0), (0.13, 146.0)], 264) == pytest.approx(0.184, abs=0.001)
    assert cal.next_share([(1.0, 300.0), (0.5, 100.0)], 400) == 1.0  # never above a core
    assert cal.next_share([(1.0, 2040.0), (0.13, 2100.0)], 264) == pytest.approx(0.13 * 264 / 2100)  # no line
    with pytest.raises(cal.CalibrationError, match="slower than the device .*BenchmarkIndex 800 at a full core, "
                                                   "the device's 1000"):
        cal.first_share("mid-phone", 1000, 800)
    with pytest.raises(cal.CalibrationError, match="below the smallest budget the kernel gives"):
        cal.first_share("low-end-phone", 1, 5000)
    assert cal.calibration_problem(264, 280) is None
    assert "+21% off the device's 264" in cal.calibration_problem(264, 320)
    c = cal.Calibration("low-end-phone", 264, 2112.0, 0.125, 266.0)
    assert cal.Calibration.from_dict(c.as_dict()) == c
    assert c.words().startswith("low-end-phone: BenchmarkIndex 264 is 0.125 of one core here (this host 2112")
    assert cal.benchmark_index([900.0, 1000.0, 2000.0]) == 1000.0
    # two calibrations of one device differ where the host or the budget does; other devices do not count
    d = c.as_dict()
    assert cal.calibration_diff({"low-end-phone": d}, {"low-end-phone": dict(d)}) == []
    assert cal.calibration_diff({"low-end-phone": d}, {"low-end-phone": {**d, "budget_cores": 0.13}}) == [
        "low-end-phone's calibration"]
    assert cal.calibration_diff({"low-end-phone": d}, {"mid-phone": {**d, "budget_cores": 0.5}}) == []
    assert cal.calibration_diff(None, {"low-end-phone": d}) == []


def test_a_device_s_screen_is_chromium_s_mobile_emulation_and_firefox_s_prefs():
    """Chromium: ChromeDriver's mobileEmulation (CSS viewport, ratio, mobile, touch, user agent) and the
    window at the viewport; Firefox: the ratio, touch and user agent as prefs, the window in device
    pixels. Either replaces the fixed window's arguments."""
    from plt_bench.browsers.chromium import chromium_emulation
    from plt_bench.browsers.firefox import firefox_emulation
    from plt_bench.device.profiles import get
    screen = get("low-end-phone").screen
    c = chromium_emulation(screen)
    assert c["mobile_emulation"] == {"deviceMetrics": {"width": 412, "height": 823, "pixelRatio": 1.75, "mobile": True,
                                                       "touch": True}, "userAgent": screen.user_agent}
    assert c["args"] == ["--window-size=412,823"]
    f = firefox_emulation(screen)
    assert f["args"] == ["--width=721", "--height=1440"]
    assert f["prefs"] == {"layout.css.devPixelsPerPx": "1.75", "dom.w3c_touch_events.enabled": 1,
                          "general.useragent.override": screen.user_agent}
    assert "mobile_emulation" not in firefox_emulation(get("laptop").screen)
    assert "general.useragent.override" not in firefox_emulation(get("laptop").screen)["prefs"]


def test_a_trial_held_back_by_its_quota_for_most_of_its_periods_is_bound_by_its_budget():
    """The CPU-bound flag's 'budget': the share of the trial's periods the quota throttled, the page's
    loop (after the load, throttled throughout) left out; none without a quota."""
    group = {"quota_us": 1000, "period_us": 4000, "periods": 1000, "throttled_periods": 800}
    loop = {"wall_ms": 1200.0}  # 300 periods of 4 ms, all throttled
    assert budget.budget_bound(group, loop) == pytest.approx(500 / 700)
    assert budget.budget_bound({**group, "throttled_periods": 400}, loop) == pytest.approx(100 / 700)
    assert budget.budget_bound({**group, "quota_us": None}, loop) is None
    assert budget.budget_bound(None, loop) is None
    assert budget.budget_bound({**group, "periods": 300}, loop) is None  # the loop's alone
