"""The emulated link with real packets, on every backend this kernel offers (the netem backend runs
inside Debian's own kernel where this one lacks sch_netem: test_netem_vm.py runs this module there):
read-back, delay against the path's own measured timing, loss, jitter's distribution, a real
Chromium trial per protocol through delay and loss, verify, and closing leaves nothing behind."""
import json
import math
import os
import signal
import statistics
import struct
import threading
import time

import pytest

from plt_bench import cmd, link, testbed, topology
from plt_bench.records import format_link_check
from plt_bench.conditions import Cell, Conditions
from plt_bench.errors import LinkError
from plt_bench.link import commands, readback, verify
from plt_bench.pages import Page
from plt_bench.trial.run import run_cell_once

from ..conftest import unjudged

pytestmark = pytest.mark.vm  # this module also runs inside the netem VM


def ping(bed, n, interval="0.005"):
    res = cmd.run(["ping", "-n", "-c", str(n), "-i", interval, "-W", "2", bed.plan.server_ip], ns=bed.plan.client_ns,
                  check=False, timeout=n * float(interval) + 120)
    return verify.parse_ping(res.stdout)


@pytest.fixture(scope="module")
def path(bed):
    """The unshaped path's own round trip (mean, sd, n): what the machine adds without any emulation.
    Tiny on the host; several ms with a wide spread under the netem VM's software emulation."""
    bed.set_conditions(Conditions(None, None))
    sent, rtts = ping(bed, 200, "0.01")
    assert len(rtts) >= 190, f"{sent - len(rtts)} of {sent} pings lost on an unshaped link"
    return statistics.fmean(rtts), statistics.stdev(rtts), len(rtts)


def test_detection_agrees_with_the_kernel(bed, link_backend):
    probe = link.netem_available()
    assert link.resolve("embedded", "auto", [], link.Capabilities(netem=probe)).backend == ("netem" if probe else "linkem")
    m = bed.metadata()
    assert m["netem_available"] is probe and m["link_backend"] == bed.link.backend == link_backend
    assert m["link_placement"] == "router" and m["link_tool"] == {"netem": "tcconfig", "linkem": "linkem"}[link_backend]


@pytest.mark.parametrize("cond", [
    Conditions(10 * 10**6, 10 * 10**6, rtt_ms=50, jitter_ms=5, jitter_dist="normal", loss_pct=1),
    Conditions(20 * 10**6, 5 * 10**6, rtt_ms=30, jitter_ms=2, loss_pct=3, loss_direction="down", queue_pkts=300),
    Conditions(None, None, rtt_ms=20),
])
def test_read_back_is_exactly_what_was_asked(bed, cond):
    """Read from the kernel independently of the backend's own check: rate, queue, and for netem the
    leaf's delay (RTT/2), jitter, loss and limit per direction; for linkem its own report."""
    bed.set_conditions(cond)
    for what, dev, rate, loss in link.base.router_directions(bed.plan, cond):
        state = readback.read_direction(bed.plan.router_ns, dev)
        if rate is None:  # a class that limits nothing may carry the netem leaf
            assert state.shaped_rate_bps is None or state.shaped_rate_bps >= commands.UNSHAPED_HTB_BPS, (what, state)
        else:
            assert state.shaped_rate_bps == rate, (what, state)
        if bed.link.backend == "netem":
            assert state.netem is not None, (what, state)
            n = state.netem
            assert (n["delay_ms"], n["jitter_ms"], n["loss_pct"], n["limit"]) == (
                cond.delay_ms, cond.jitter_ms, loss, cond.queue_for(rate)), (what, n)
        else:
            assert state.netem is None and (rate is None or state.queue_pkts == cond.queue_for(rate))
    if bed.link.backend == "linkem":
        dirs = bed.link.snapshot()["dirs"]
        assert dirs["down"]["delay_us"] == dirs["up"]["delay_us"] == round(cond.delay_ms * 1000)
        assert dirs["down"]["jitter_us"] == round(cond.jitter_ms * 1000)
        # while it runs, linkem holds the kernel's PM QoS request that idle CPUs wake at once (its own
        # descriptor on /dev/cpu_dma_latency, and the kernel's aggregate bound), and says so
        fds = f"/proc/{bed.link.proc.pid}/fd"
        assert "/dev/cpu_dma_latency" in {os.readlink(f"{fds}/{fd}") for fd in os.listdir(fds)}
        with open("/dev/cpu_dma_latency", "rb") as f:
            assert struct.unpack("i", f.read(4)) == (0,)
        assert bed.link.snapshot()["cpu_dma_latency_us"] == 0


def test_rtt_50ms_against_the_machines_own_timing(bed, path):
    """RTT = the asked 50 ms + the unshaped path's mean, within 3 standard errors of the two samples
    plus 0.1 ms below, and above also the two delay timers' lateness (a delay fires late, never
    early): the larger of what was measured when the testbed opened (bed.timing) and while the
    pings ran (verify.LateTimers)."""
    base_mean, base_sd, base_n = path
    bed.set_conditions(Conditions(100 * 10**6, 100 * 10**6, rtt_ms=50))
    with verify.LateTimers() as timers:
        sent, rtts = ping(bed, 200)
    late = 2 * max(bed.timing.timer_late_ms, timers.mean_ms)
    assert len(rtts) == sent == 200
    mean, sd = statistics.fmean(rtts), statistics.stdev(rtts)
    tol = 0.1 + 3 * math.sqrt(sd ** 2 / len(rtts) + base_sd ** 2 / base_n)
    print(f"path {base_mean:.3f} ms sd {base_sd:.3f}, timers {bed.timing.timer_late_ms:.3f} ms late at the start, "
          f"{timers.mean_ms:.3f} ms during; 50 ms link: {mean:.3f} ms sd {sd:.3f}; window -{tol:.3f} +{tol + late:.3f}")
    assert 50 + base_mean - tol <= mean <= 50 + base_mean + late + tol, (mean, base_mean, late, tol)
    # A delay is never shortened by more than the emulator says: netem never releases early; linkem
    # releases a packet up to one expected timer wake-up early (so that on average it lands on time)
    # and counts it (early_max_us per direction); ping prints 0.1 ms, so 49.9 is 49.85 to 49.95.
    stats = bed.link.snapshot() or {}
    early_ms = sum(d.get("early_max_us", 0.0) for d in stats.get("dirs", {}).values()) / 1000.0
    assert min(rtts) >= 50 - early_ms - (0.05 if early_ms else 0.0), (min(rtts), early_ms)


def test_loss_10pct_is_binomial(bed):
    bed.set_conditions(Conditions(100 * 10**6, 100 * 10**6, rtt_ms=2, loss_pct=10, loss_direction="down"))
    sent, rtts = ping(bed, 1000, "0.003")
    lost = (sent - len(rtts)) / sent
    sigma = (0.1 * 0.9 / sent) ** 0.5
    assert abs(lost - 0.10) <= 3 * sigma, f"{lost:.3%} lost of {sent}"


@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_jitter_follows_its_distribution_live(bed, path, dist):
    """The kernel does not report netem's distribution table, so it is judged live: the RTT's sd is
    sqrt(2) x the per-direction sd (j/sqrt(3) uniform, j normal), beside the path's own spread.
    The sample sd's relative standard error is 1/sqrt(2(n-1)); 4 of them, uniform and normal
    (ratio 1.73) are told apart."""
    _, base_sd, _ = path
    cond = Conditions(100 * 10**6, 100 * 10**6, rtt_ms=60, jitter_ms=10, jitter_dist=dist)
    bed.set_conditions(cond)
    want = math.sqrt(2 * verify.jitter_sd_ms(cond) ** 2 + base_sd ** 2)
    noisy = []
    for attempt in (1, 2):  # once more after a miss: a busy machine's timers widen the spread (inside the
        with verify.LateTimers() as timers:  # netem VM beside a campaign, 2026-11-26: sd 16.6 ms against 14.3)
            sent, rtts = ping(bed, 400, "0.01")
        assert len(rtts) == sent
        got = statistics.stdev(rtts)
        rel = 4 / math.sqrt(2 * (len(rtts) - 1))
        # the machine's own timers, sampled while the pings ran, fire each of the two delay stages late
        # by a spread of their own: when that spread alone could move the RTT's sd by half the window,
        # this attempt cannot tell the distributions apart (the VM beside a campaign and the host's
        # suite, 2026-11-26: sd 22.2 ms against 8.25, both attempts)
        timer_sd = statistics.stdev(timers.late_ms) if len(timers.late_ms) > 1 else 0.0
        noisy.append(math.sqrt(want ** 2 + 2 * timer_sd ** 2) / want - 1 > rel / 2)
        print(f"{dist}: RTT sd {got:.3f} ms, expected {want:.3f} (+-{rel:.0%}), timers' sd {timer_sd:.3f} ms, "
              f"attempt {attempt}")
        if abs(got / want - 1) <= rel:
            break
    else:
        if all(noisy):  # the machine's answer, said in the summary: never a pass, never a defect's
            return unjudged(f"{dist} jitter: the machine's timers spread by {timer_sd:.1f} ms while the pings ran, "
                            "every attempt: its distribution")
    assert abs(got / want - 1) <= rel, (got, want, timer_sd)


@pytest.mark.parametrize("proto,hop", [("h3", "h3"), ("h1", "http/1.1")])
def test_500kb_under_delay_and_loss_proves_its_protocol(bed, store, campaign, proto, hop):
    """A real Chromium trial per protocol, through delay and loss; tried up to three times where the
    machine (the VM above all) makes a trial fail: the point is that an ok trial carries its proof."""
    if proto != "h3" and os.environ.get("PLT_BENCH_IN_VM"):  # the qdisc is the same for every protocol: h3's
        pytest.skip("inside the netem VM one protocol's trial (h3); TCP through netem is the link check's iperf3")
    cond = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=100, loss_pct=1)
    if bed.conditions != cond:
        bed.set_conditions(cond)
    tries = []
    while len(tries) < 3 and (not tries or tries[-1].status != "ok"):
        # in a starved TCG guest a QUIC handshake under 1% loss once ended in ERR_QUIC_PROTOCOL_ERROR
        tries.append(run_cell_once(bed, store, campaign, 0, len(tries), Cell(proto, Page(500_000), cond), timeout_s=120))
        assert tries[-1].status == "ok" or tries[-1].reason, "a failed trial is recorded with its reason"
    t = tries[-1]
    print(" // ".join(f"{x.status} {x.reason or ''}" for x in tries))
    assert t.status == "ok", " // ".join(x.reason or "" for x in tries)
    assert t.next_hop_protocol == hop and t.decoded_body_bytes == 500_000
    assert t.plt_ms > 200  # at least two round trips of 100 ms
    assert t.conditions.rtt_ms == 100 and t.conditions.loss_pct == 1
    if bed.link.backend == "linkem":
        stats = json.loads(t.link_json)
        assert stats["dirs"]["down"]["packets"] > 300 and stats["dirs"]["down"]["released"] > 0


def test_a_dying_emulator_fails_the_trial_and_stops_the_next(bed, store, campaign):
    if bed.link.backend != "linkem":
        pytest.skip("netem is the kernel's: there is no emulator process to kill")
    cond = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=50)
    bed.set_conditions(cond)
    pid = bed.link.proc.pid
    killer = threading.Timer(2.0, lambda: cmd.run(["kill", "-9", str(pid)]))
    killer.start()
    try:
        t = run_cell_once(bed, store, campaign, 0, 0, Cell("h1", Page(10**7), cond), timeout_s=20)
    finally:
        killer.cancel()
    assert t.status == "failed" and "link emulator (linkem) died (killed by signal 9)" in t.reason, t.reason
    with pytest.raises(LinkError, match="died"):
        run_cell_once(bed, store, campaign, 0, 0, Cell("h1", Page(5000), cond))
    bed.set_conditions(cond)  # a fresh emulator for the tests after this one
    assert bed.link.alive()


def test_a_linkem_snapshot_holds_the_worst_since_the_one_before(bed):
    """Each snapshot answers its own request (numbered) with the maxima since the snapshot before:
    a 0.5 s stop of linkem under a ping is in the snapshot after it, and not in the next one, though
    periodic writes (every 250 ms, after the reset) came between. Reading the file by its time once
    let such a write, all zeros, pass for a trial's answer and a 2 s stall went unseen. The stop
    comes once the ping's first reply is in (on a busy machine ping took over 0.4 s to start, and
    a stop before its first packet delayed nothing)."""
    import subprocess
    if bed.link.backend != "linkem":
        pytest.skip("netem is the kernel's: there is no emulator process to snapshot")
    bed.set_conditions(Conditions(None, None, rtt_ms=20))
    first = bed.link.snapshot()
    pinger = subprocess.Popen(cmd.in_netns(bed.plan.client_ns, ["ping", "-n", "-c", "200", "-i", "0.01", "-W", "2",
                                                                 bed.plan.server_ip]),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in pinger.stdout:  # its first reply: packets are on the link
            if "bytes from" in line:
                break
        os.kill(bed.link.proc.pid, signal.SIGSTOP)
        time.sleep(0.5)
        os.kill(bed.link.proc.pid, signal.SIGCONT)
        pinger.communicate(timeout=60)
    finally:
        if pinger.poll() is None:
            pinger.kill()
            pinger.wait()
    stalled = bed.link.snapshot()
    time.sleep(0.8)
    ping(bed, 20)
    after = bed.link.snapshot()
    assert (stalled["snapshot"], after["snapshot"]) == (first["snapshot"] + 1, first["snapshot"] + 2)
    worst = {n: d["since_mark"]["late_max_us"] for n, d in stalled["dirs"].items()}
    assert max(worst.values()) >= 400_000, worst
    assert all(d["since_mark"]["late_max_us"] < 400_000 for d in after["dirs"].values()), after["dirs"]
    assert max(d["late_max_us"] for d in after["dirs"].values()) >= 400_000  # the lifetime figure keeps it


def _carried_bps(bed) -> float:
    """TCP goodput the testbed's path carries unshaped right now: what this machine can forward."""
    bed.set_conditions(Conditions(None, None))
    with verify.Iperf(bed.plan.server_ns, bed.plan.server_ip):
        res = verify.iperf_client(bed.plan.client_ns, bed.plan.server_ip, ["-R", "-t", "2"], 2)
    return res["end"]["sum_received"]["bits_per_second"]


def test_verify_passes_a_true_link_and_catches_a_false_claim(bed):
    """A true link is one the machine can carry: the fastest of 20, 10, 5 and 2 Mbit/s, at most a
    quarter of what the path forwards unshaped now, whose rate verify finds held. A faster one may
    fail only on its rates, and only by carrying less than asked (a machine too slow to keep htb's
    timers: the netem VM with one host core busy carried 0.65-0.77 of 20 Mbit/s, and verify rightly
    said so; its queue then overflows under the UDP check, so downlink loss may fail with it); every other check passes at every rate, and the false claim fails at the true rate."""
    if os.environ.get("PLT_BENCH_IN_VM"):  # (43 s there) verify's judgement is the backend's no more than a trial's
        pytest.skip("inside the netem VM verify runs on netem in the server-side placement's campaign (test_two_machines)")
    carried = _carried_bps(bed)
    rates = [r * 10**6 for r in (20, 10, 5, 2) if r * 10**6 <= carried / 4] or [10**6]
    slow = {}
    for rate in rates:
        cond = Conditions(rate, rate, rtt_ms=50)
        bed.set_conditions(cond)
        for _ in range(2):  # a check other than the rates failed once is measured again: inside the netem VM
            # beside a campaign, 2026-11-26, the RTT's mean left its bound once at 20 Mbit/s (late timers)
            good = verify.verify(bed.plan, cond, probes=200, tcp_seconds=2, **bed.verify_args())
            if good["ok"] or all(name.endswith(("rate (TCP goodput / rate x 1448/1514)", "downlink loss (UDP)"))
                                 for name in good["failed"]):
                break
        if good["ok"]:
            break
        rate_checks = {c["name"]: c["measured"] for c in good["checks"] if c["name"].endswith("rate (TCP goodput / "
                                                                                                 "rate x 1448/1514)")}
        # a link that carries less than its rate also overflows its queue under verify's UDP stream sent
        # at the rate: downlink UDP loss may fail with a short downlink rate, never alone (busy VM: 0.415%)
        short = {name for name in rate_checks if rate_checks[name] < 0.95}
        allowed = short | ({"downlink loss (UDP)"} if any(n.startswith("downlink") for n in short) else set())
        assert set(good["failed"]) <= allowed, format_link_check(good)
        slow[rate] = rate_checks
    print(f"unshaped {carried / 1e6:.0f} Mbit/s; carried short of the rate: {slow}; true link {rate / 1e6:g} Mbit/s")
    assert good["ok"], format_link_check(good)
    claimed = Conditions(rate, rate, rtt_ms=80, loss_pct=5)
    bad = verify.verify(bed.plan, claimed, probes=200, tcp_seconds=2, **bed.verify_args())
    assert not bad["ok"] and "rtt mean" in bad["failed"] and "downlink loss (UDP)" in bad["failed"]


def test_closing_a_testbed_leaves_nothing(link_backend):
    """Another testbed on the same backend, shaped with everything, then closed: none of its
    namespaces, run folder or processes remain (the suite's end checks all testbeds again)."""
    with testbed.Testbed(testbed.Setup(cmd.PROJECT_ROOT / "sites", link=link_backend, with_browser=False)) as other:
        other.set_conditions(Conditions(10**7, 10**7, rtt_ms=40, jitter_ms=4, loss_pct=1))
        prefix = other.plan.prefix
        assert other.link.backend == link_backend
    left = topology.leftovers_of(prefix)
    assert not any(left.values()), left
