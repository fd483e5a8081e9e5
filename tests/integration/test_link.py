"""The emulated link with real packets: delay, loss, protocol proof under impairment, a dying emulator."""
import threading

import pytest

from plt_bench import cmd, link, verify
from plt_bench.conditions import Cell, Conditions
from plt_bench.errors import LinkError
from plt_bench.runner import run_cell_once


def ping(bed, n, interval="0.005"):
    res = cmd.run(["ping", "-n", "-c", str(n), "-i", interval, "-W", "2", bed.plan.server_ip], ns=bed.plan.client_ns,
                  check=False, timeout=120)
    return verify.parse_ping(res.stdout)


def test_detection_agrees_with_the_kernel(bed):
    probe = link.netem_available()
    assert link.resolve("auto") == ("tcconfig" if probe else "linkem")
    assert bed.link.name == link.resolve("auto") and bed.metadata()["netem_available"] is probe


def test_rtt_50ms(bed):
    bed.set_conditions(Conditions(100 * 10**6, 100 * 10**6, rtt_ms=50))
    sent, rtts = ping(bed, 200)
    assert len(rtts) == sent == 200
    mean = sum(rtts) / len(rtts)
    assert abs(mean - 50) <= 0.5, mean


def test_loss_10pct_is_binomial(bed):
    bed.set_conditions(Conditions(100 * 10**6, 100 * 10**6, rtt_ms=2, loss_pct=10, loss_direction="down"))
    sent, rtts = ping(bed, 1000, "0.003")
    lost = (sent - len(rtts)) / sent
    sigma = (0.1 * 0.9 / sent) ** 0.5
    assert abs(lost - 0.10) <= 3 * sigma, f"{lost:.3%} lost of {sent}"


@pytest.mark.parametrize("proto,hop", [("quic", "h3"), ("tcp", "http/1.1")])
def test_500kb_under_delay_and_loss_proves_its_protocol(bed, store, campaign, proto, hop):
    cond = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=100, loss_pct=1)
    if bed.conditions != cond:
        bed.set_conditions(cond)
    t = run_cell_once(bed, store, campaign, 0, 0, Cell(proto, 500_000, cond))
    assert t.status == "ok", t.reason
    assert t.next_hop_protocol == hop and t.decoded_body_bytes == 500_000
    assert t.plt_ms > 200  # at least two round trips of 100 ms
    assert t.rtt_ms == 100 and t.loss_pct == 1
    if bed.link.name == "linkem":
        stats = __import__("json").loads(t.link_json)
        assert stats["dirs"]["down"]["packets"] > 300 and stats["dirs"]["down"]["released"] > 0


def test_a_dying_emulator_fails_the_trial_and_stops_the_next(bed, store, campaign):
    if bed.link.name != "linkem":
        pytest.skip("only the linkem backend has a userspace emulator to kill")
    cond = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=50)
    bed.set_conditions(cond)
    pid = bed.link.proc.pid
    killer = threading.Timer(2.0, lambda: cmd.run(["kill", "-9", str(pid)]))
    killer.start()
    try:
        t = run_cell_once(bed, store, campaign, 0, 0, Cell("tcp", 10**7, cond), timeout_s=20)
    finally:
        killer.cancel()
    assert t.status == "failed" and "link emulator (linkem) died (killed by signal 9)" in t.reason, t.reason
    with pytest.raises(LinkError, match="died"):
        run_cell_once(bed, store, campaign, 0, 0, Cell("tcp", 5000, cond))
    bed.set_conditions(cond)  # a fresh emulator for the tests after this one
    assert bed.link.alive()


def test_verify_passes_a_true_link_and_catches_a_false_claim(bed):
    cond = Conditions(100 * 10**6, 100 * 10**6, rtt_ms=50)
    bed.set_conditions(cond)
    good = verify.verify(bed.plan, cond, probes=200, tcp_seconds=2)
    assert good["ok"], verify.format_report(good)
    claimed = Conditions(100 * 10**6, 100 * 10**6, rtt_ms=80, loss_pct=5)
    bad = verify.verify(bed.plan, claimed, probes=200, tcp_seconds=2)
    assert not bad["ok"] and "rtt mean" in bad["failed"] and "downlink loss (UDP)" in bad["failed"]
