"""The verification's judgement and the runner's link-fidelity rule, on synthetic figures."""
import math

import pytest

from plt_bench.trial import run as runner
from plt_bench.link import verify
from plt_bench.conditions import Conditions
from plt_bench.trial import evidence

PING = """PING 198.19.0.2 (198.19.0.2) 56(84) bytes of data.
64 bytes from 198.19.0.2: icmp_seq=1 ttl=63 time=50.1 ms
64 bytes from 198.19.0.2: icmp_seq=2 ttl=63 time=50.2 ms

--- 198.19.0.2 ping statistics ---
3 packets transmitted, 2 received, 33.3333% packet loss, time 2003ms
"""


def test_parse_ping():
    assert verify.parse_ping(PING) == (3, [50.1, 50.2])


def test_expected_round_trip_loss_and_jitter_sd():
    c = Conditions(10**7, 10**7, rtt_ms=100, jitter_ms=10, loss_pct=10)
    assert verify.expected_rtt_loss(c) == pytest.approx(0.19)
    assert verify.jitter_sd_ms(c) == pytest.approx(10 / math.sqrt(3))
    assert verify.jitter_sd_ms(Conditions(1, 1, rtt_ms=100, jitter_ms=10, jitter_dist="normal")) == 10
    assert verify.expected_rtt_loss(Conditions(1, 1, loss_pct=10, loss_direction="up")) == pytest.approx(0.10)


def test_ping_checks_pass_good_and_fail_bad_links():
    c = Conditions(10**7, 10**7, rtt_ms=50)
    good = verify.check_ping(c, 500, [50.1 + 0.01 * (i % 5) for i in range(500)])
    assert all(x["ok"] for x in good)
    spike = verify.check_ping(c, 500, [50.1 + 0.01 * (i % 5) for i in range(499)] + [62.0])
    assert all(x["ok"] for x in spike)  # one stray probe does not fail the spread
    spread = verify.check_ping(c, 500, [48.1 + (i % 5) for i in range(500)])
    assert [x["name"] for x in spread if x["ok"] is False] == ["rtt spread (IQR/1.349)"]
    slow = verify.check_ping(c, 500, [52.0] * 500)
    assert [x["name"] for x in slow if x["ok"] is False] == ["rtt mean"]
    lossy = verify.check_ping(c, 500, [50.1] * 400)
    assert [x["name"] for x in lossy if x["ok"] is False] == ["round-trip loss"]


def test_jitter_sd_check_has_teeth():
    import random
    rnd = random.Random(3)
    c = Conditions(10**7, 10**7, rtt_ms=112, jitter_ms=10)
    right = [112 + rnd.uniform(-10, 10) + rnd.uniform(-10, 10) for _ in range(2000)]
    wrong = [112 + rnd.uniform(-5, 5) + rnd.uniform(-5, 5) for _ in range(2000)]
    assert {x["name"]: x["ok"] for x in verify.check_ping(c, 2000, right)}["rtt sd"] is True
    assert {x["name"]: x["ok"] for x in verify.check_ping(c, 2000, wrong)}["rtt sd"] is False


def _udp(n, lost, ooo):
    return {"end": {"sum": {"packets": n, "lost_packets": lost}, "streams": [{"udp": {"out_of_order": ooo}}]}}


def test_udp_checks():
    c = Conditions(10**7, 10**7, rtt_ms=50, loss_pct=5)
    ok = {x["name"]: x["ok"] for x in verify.check_udp(c, _udp(10000, 500, 0), 0)}
    assert ok == {"downlink loss (UDP)": True, "downlink reordering (UDP)": True}
    bad = {x["name"]: x["ok"] for x in verify.check_udp(c, _udp(10000, 900, 3), 0)}
    assert bad == {"downlink loss (UDP)": False, "downlink reordering (UDP)": False}
    # packets still in flight when iperf3 stops counting are not losses
    jit = Conditions(10**7, 10**7, rtt_ms=112, jitter_ms=10)
    r = {x["name"]: x for x in verify.check_udp(jit, _udp(10975, 48, 9075), 60)}
    assert r["downlink loss (UDP)"]["ok"] is True and r["downlink reordering (UDP)"]["ok"] is None
    assert r["downlink reordering (UDP)"]["measured"] == pytest.approx(82.69, abs=0.01)


def test_udp_loss_is_counted_over_what_the_receiver_awaited():
    """iperf3's end.sum: the sender's count (13027, sent until the test's end reached it at 500 ms
    RTT) with the receiver's losses; the receiver's intervals await 10418 (iperf3 3.12, measured)."""
    res = {"end": {"sum": {"packets": 13027, "lost_packets": 265}, "streams": [{"udp": {"out_of_order": 0}}]},
           "intervals": [{"sum": {"packets": 5211, "lost_packets": 134, "sender": False}},
                         {"sum": {"packets": 5207, "lost_packets": 131, "sender": False}}]}
    assert verify.udp_received(res) == (10418, 265)
    r = {x["name"]: x for x in verify.check_udp(Conditions(10**8, 10**8, rtt_ms=500, loss_pct=2.5), res)}
    assert r["downlink loss (UDP)"]["ok"] is True and r["downlink loss (UDP)"]["measured"] == 2.544
    assert verify.udp_received(_udp(10000, 500, 0)) == (10000, 500)  # no receiver intervals: end.sum


def test_datagrams_the_receiving_socket_dropped_are_not_the_links_loss():
    snmp = ("Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n"
            "Udp: 72521 0 9390 8 9390 0\nUdpLite: InDatagrams\nUdpLite: 0\n")
    assert verify.udp_rcvbuf_errors(snmp) == 9390 and verify.udp_rcvbuf_errors("Ip: 1\nIp: 2\n") is None
    c = Conditions(10**8, 10**8, rtt_ms=500, loss_pct=10)
    res = {"end": {"sum": {"packets": 13022, "lost_packets": 5503}, "streams": [{"udp": {"out_of_order": 0}}]},
           "intervals": [{"sum": {"packets": 1, "lost_packets": 0, "sender": False}},
                         {"sum": {"packets": 10414, "lost_packets": 5503, "sender": False}}]}
    assert {x["name"]: x["ok"] for x in verify.check_udp(c, res)}["downlink loss (UDP)"] is False
    r = {x["name"]: x for x in verify.check_udp(c, res, socket_drops=4460)}["downlink loss (UDP)"]
    assert r["ok"] is True and r["measured"] == pytest.approx(10.01, abs=0.01) and "4460 more" in r["tolerance"]


def test_tcp_probe_leaves_out_its_ramp_up():
    assert verify.tcp_omit_s(0.05, 10**8) == 1 and verify.tcp_omit_s(50, 10**7) == 2
    assert verify.tcp_omit_s(100, 10**7) == 3  # 2 s read 1.023-1.040 of the rate: the overshoot's repair
    assert verify.tcp_omit_s(500, 10**8) == 8  # 4317 segments in flight: 8.8 doublings, 3 RTT more, 2 s of repair
    assert verify.tcp_omit_s(500, 10**9) > verify.tcp_omit_s(500, 10**8)


def test_tcp_rate_is_judged_only_where_tcp_can_fill_the_link():
    c = Conditions(10**8, 10**8, rtt_ms=50)
    assert verify.check_tcp_rate(c, "downlink", 10**8, 10**8 * 1448 / 1514)["ok"] is True
    assert verify.check_tcp_rate(c, "downlink", 10**8, 0.9 * 10**8 * 1448 / 1514)["ok"] is False
    lossy = Conditions(10**8, 10**8, rtt_ms=50, loss_pct=1)
    assert verify.check_tcp_rate(lossy, "downlink", 10**8, 10**6)["ok"] is None


def _stats(released, late_1ms, cpu=1.0, late_sum=0.0, enobufs=0, worst_since_mark_us=None):
    hist = {"10": released - late_1ms, "50": 0, "100": 0, "250": 0, "500": 0, "1000": 0, "2000": late_1ms,
            "5000": 0, "inf": 0}
    d = {"packets": released, "bytes": 0, "dropped": 0, "released": released, "reordered": 0, "early": 0,
         "max_depth": 1, "late_max_us": 1500.0, "early_max_us": 0, "late_hist_us": hist, "late_sum_us": late_sum}
    if worst_since_mark_us is not None:
        d["since_mark"] = {"late_max_us": worst_since_mark_us, "early_max_us": 0.0, "max_depth": 1}
    return {"cpu_s": cpu, "enobufs": enobufs, "dirs": {"down": d, "up": dict(d)}}


def test_link_delta_and_fidelity():
    before, after = _stats(1000, 0, 1.0, 5000.0), _stats(3000, 10, 1.5, 25000.0)
    d = runner.link_delta(before, after)
    assert d["dirs"]["down"]["released"] == 2000 and d["dirs"]["down"]["late_hist_us"]["2000"] == 10
    assert d["dirs"]["down"]["late_mean_us"] == 10.0 and d["cpu_s"] == 0.5
    assert evidence.link_fidelity_problem(d) is None  # 0.5% late: within bounds
    d2 = runner.link_delta(before, _stats(3000, 100, 1.5))
    assert "fell behind" in evidence.link_fidelity_problem(d2)
    # with 25 ms one way, the bound is 2 ms: packets 1-2 ms late do not count
    assert evidence.late_bound_ms(25) == 2 and evidence.late_bound_ms(0) == 1 and evidence.late_bound_ms(60) == 5
    assert evidence.link_fidelity_problem(d2, 25.0) is None
    d3 = runner.link_delta(before, _stats(3000, 0, enobufs=2))
    assert "ENOBUFS" in evidence.link_fidelity_problem(d3)
    assert evidence.link_fidelity_problem(None) is None


def test_a_stall_fails_a_trial_by_its_own_worst_lateness_not_a_lifetime_one():
    """kill -STOP of linkem for 2 s in a 10 Mbit trial: 8 of 6956 packets late (0.11%, under the share
    rule) but the worst 2 s late: refused. The next trial's own worst (since its snapshot) is small,
    though linkem's lifetime maximum still says 2 s: accepted."""
    before = _stats(1000, 0)
    stalled = runner.link_delta(before, _stats(7956, 8, worst_since_mark_us=2_000_000.0))
    why = evidence.link_fidelity_problem(stalled, 10.0, 10_410.0)
    assert why and "stalled" in why and "2000 ms late" in why and "520 ms" in why, why
    after = _stats(9000, 8, worst_since_mark_us=900.0)
    after["dirs"]["down"]["late_max_us"] = 2_000_000.0  # the lifetime figure
    clean = runner.link_delta(_stats(7956, 8), after)
    assert clean["dirs"]["down"]["late_max_us"] == 900.0
    assert evidence.link_fidelity_problem(clean, 10.0, 8_463.0) is None
    # the bound: 20 ms at least, else 5% of the load
    assert evidence.stall_bound_ms(100.0) == 20.0 and evidence.stall_bound_ms(10_000.0) == 500.0
    assert "stalled" in evidence.link_fidelity_problem(runner.link_delta(before, _stats(3000, 0, worst_since_mark_us=25_000.0)),
                                                     0.0, 200.0)


def test_late_timers_widen_the_rtt_window_upwards_only_and_by_what_was_measured():
    """A delay is a timer: measured late by 0.5 ms here (as under the netem VM), each of the two delay
    stages may add up to that, so 51 ms passes for 50 ms; nothing makes a delay early, so 49 ms fails."""
    c = Conditions(10**8, 10**8, rtt_ms=50)
    t = verify.Timing(path_rtt_ms=0.3, path_rtt_sd_ms=0.05, timer_late_ms=0.5, timer_late_sd_ms=0.2)

    def mean_ok(rtts, timing=t, cond=c):
        return {x["name"]: x["ok"] for x in verify.check_ping(cond, len(rtts), rtts, 2, timing)}["rtt mean"]
    assert mean_ok([51.2 + 0.01 * (i % 5) for i in range(500)])
    assert not mean_ok([51.2 + 0.01 * (i % 5) for i in range(500)], verify.Timing())  # the same on a host: late
    assert not mean_ok([49.0] * 500) and not mean_ok([52.0] * 500)
    # no delay asked: no timer, no allowance
    assert not mean_ok([1.3] * 500, t, Conditions(10**8, 10**8))


def test_the_timers_lateness_seen_during_a_measurement_raises_the_one_from_the_start():
    start = verify.Timing(path_rtt_ms=0.3, path_rtt_sd_ms=0.1, timer_late_ms=0.2, timer_late_sd_ms=0.05)
    with verify.LateTimers() as timers:
        timers._stop.wait(0.1)  # a few 10 ms sleeps: real ones, on this machine
    timers.late_ms = [1.0, 1.4, 1.2]  # as a starved machine saw them
    worse = timers.worse(start)
    assert (worse.timer_late_ms, worse.path_rtt_ms) == (1.2, 0.3) and worse.timer_late_sd_ms == 0.2
    timers.late_ms = [0.1, 0.1]  # quieter than at the start: the start's figure stands
    assert timers.worse(start) == start
