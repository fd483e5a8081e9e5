"""The bottleneck's queue disciplines (issue 46) through the real testbed: the bottleneck held at the
rate under each discipline, and the link check proving each with real packets (a bulk TCP flow, a
sparse ping beside it), catching a claim the link does not keep; with --ecn the TCP flow is marked CE
instead of dropped. On linkem (every kernel: its own state machines), and inside the netem VM on the
netem backend (the kernel's codel, fq_codel and pfifo beneath netem: vm-marked, scripts/netem-vm)."""
import pytest

from plt_bench import cmd, testbed, topology
from plt_bench.conditions import Conditions
from plt_bench.link import verify
from plt_bench.records import format_link_check
from plt_bench.link.aqm import parse as aqm_parse

from ..conftest import unjudged

pytestmark = [pytest.mark.root, pytest.mark.slow]

RATE = 20 * 10**6
# inside the netem VM (software emulation) one TCP flow reached 0.75-0.85 of 20 Mbit/s: too little to hold a
# queue that a discipline acts on (FQ-CoDel then marked nothing); 5 Mbit/s it fills
VM_RATE = 5 * 10**6


def _cond(aqm: str, ecn: bool = False, rate: int = RATE) -> Conditions:
    return Conditions(rate, rate, rtt_ms=50, aqm=aqm_parse(aqm), ecn=ecn)


def _judged(check: dict, name: str) -> dict:
    return next(c for c in check["checks"] if c["name"].startswith(name))


@pytest.mark.vm
def test_each_discipline_keeps_its_standing_delay_and_the_check_catches_a_false_claim(link_backend):
    """Under a saturating TCP flow: droptail fills its buffer (a sparse flow waits as long), CoDel
    holds about its 5 ms, PIE its 15 ms, FQ-CoDel its 5 ms with a sparse flow served at once; each
    link check passes. The same check claiming CoDel on a droptail link fails on the standing delay.
    With ECN, the discipline marks the ECN-capable flow, more often than it drops (its retransmissions are
    Not-ECT). Nothing is left after.
    On netem (inside the VM, whose emulation is slow) the kernel's droptail, CoDel and FQ-CoDel, and
    ECN under FQ-CoDel: the kernel's discipline, read back and measured through its backlog."""
    kernel = link_backend == "netem"
    rate = VM_RATE if kernel else RATE
    with testbed.Testbed(testbed.Setup(cmd.PROJECT_ROOT / "sites", link=link_backend, with_browser=False)) as bed:
        prefix = bed.plan.prefix
        figures, misses = {}, {}
        for aqm in ("droptail", "codel", "fq_codel") + (() if kernel else ("pie",)):
            cond = _cond(aqm, rate=rate)
            applied = bed.set_conditions(cond)
            assert bed.link.backend == link_backend
            if kernel:  # the kernel's discipline beneath netem, read back with its parameters
                leaf = applied["downlink"]["discipline"]
                assert leaf["kind"] == ("pfifo" if aqm == "droptail" else aqm), applied
            for _ in range(1 if kernel else 2):  # the busy machine may carry less than the rate once (the VM: never judged)
                got = verify.verify(bed.plan, cond, probes=100, tcp_seconds=2, **bed.verify_args())
                if got["ok"]:
                    break
            standing = _judged(got, "downlink standing delay")
            figures[aqm] = (standing["measured"], _judged(got, "sparse flow")["measured"])
            if not got["ok"]:
                misses[aqm] = got["failed"]
                # only a rate the busy machine did not carry may fail (and the UDP loss its full queue makes);
                # inside the VM every rate is the emulation's (function, not performance: its UDP stream read
                # 0.91-1.09 of 5 and 20 Mbit/s through the plain netem path and through this one alike)
                rates = ("rate (TCP goodput / rate x 1448/1514)", "downlink loss (UDP)") + (
                    ("rate (UDP at the receiver's interface / rate, offered 1.2 x)",) if kernel else ())
                assert all(n.endswith(rates) for n in got["failed"]), format_link_check(got)
        print(f"{link_backend}: standing delay, sparse flow's delay (ms):", figures)
        if not kernel:  # the false claim: CoDel's check judging what the droptail link measured (its buffer's delay,
            # not CoDel's 5 ms). The probe measures the link as it is, whatever is claimed (the claim sets only the
            # rate and the round trip, the same here), so the droptail check's own measurement is judged, not a second one
            claim = verify.check_aqm(_cond("codel"), rate, figures["droptail"][0], [], [])
            false = _judged({"checks": claim}, "downlink standing delay")
            assert false["ok"] is False and false["measured"] > 15, claim
        # ECN: marks, not drops, for the ECN-capable TCP flow (the hosts' TCP asks for it under --ecn)
        ecn = _cond("fq_codel" if kernel else "codel", ecn=True, rate=rate)
        bed.set_conditions(ecn)
        marked = verify.verify(bed.plan, ecn, probes=100, tcp_seconds=2, **bed.verify_args())
        mark = _judged(marked, "ECN: CE marks in place of drops")
        assert mark["ok"], format_link_check(marked)
    left = topology.leftovers_of(prefix)
    assert not any(left.values()), left
    if misses and not kernel:  # inside the VM the rates are never judged: the disciplines' figures are, below
        return unjudged(f"the machine carried less than the rate under {sorted(misses)}: {misses}")
    assert figures["fq_codel"][1] <= verify.SPARSE_DELAY_MS < figures["droptail"][1]
    assert figures["codel"][0] < figures["droptail"][0]
    if "pie" in figures:
        # PIE below droptail only: one CUBIC flow that PIE has just halved leaves its queue near empty for a while,
        # as under CoDel (CI measured PIE 0.6 ms and CoDel 2.35 ms once, each passing its check), so their order
        # says nothing; PIE's hold near its 15 ms target is linkem's unit test's (a Reno flow's model)
        assert figures["pie"][0] < figures["droptail"][0]


def test_a_campaign_with_competing_flows_records_what_they_carried_and_leaves_nothing(tmp_path):
    """--cross 2xtcp-cubic,1xquic-cubic,web-20-50KB under FQ-CoDel, through the CLI: each kind of
    competing traffic starts after the link check, carries its share alone before the first trial
    (the check's 'cross' figures; the web background its offered load, about), and each trial
    records what it carried during its load; their namespaces and processes go with the testbed."""
    import json
    import sqlite3

    from ..conftest import ok_slots, run_cli, slots_refused, state_unchanged, system_state
    before = system_state()
    store = tmp_path / "r.sqlite"
    kinds = ("2xtcp-cubic", "1xquic-cubic", "web-20-50KB")
    r = run_cli("run", "--aqm", "fq_codel", "--cross", ",".join(kinds), "--bw", "20mbit", "--rtt", "50ms", "--size",
                "500KB", "--proto", "h2", "--runs", "1", "--verify", "off", "--results", str(store), timeout=600)
    assert state_unchanged(before) == before
    db = sqlite3.connect(store)
    db.row_factory = sqlite3.Row
    rows = [dict(x) for x in db.execute("SELECT proto, status, reason, cross, cross_mbps, plt_ms, aqm FROM trials")]
    checks = [json.loads(x) for (x,) in db.execute("SELECT result_json FROM link_checks")]
    db.close()
    if r.returncode == 1 and slots_refused(rows, lambda t: t["cross"], set(kinds)):
        return
    ok_slots(rows, lambda t: t["cross"])  # a failed attempt (retried) only where the busy machine refused it
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ok = {t["cross"]: t for t in rows if t["status"] == "ok"}
    assert set(ok) == set(kinds) and all(t["aqm"] == "fq_codel" for t in ok.values()), rows
    # beside a page load the long flows keep most of 20 Mbit/s (FQ-CoDel gives the page its own share);
    # the web background carries what it offers (8 Mbit/s on average: its heavy tail makes one load's vary)
    assert all(5 < ok[k]["cross_mbps"] < 20.5 for k in ("2xtcp-cubic", "1xquic-cubic")), ok
    assert 0 < ok["web-20-50KB"]["cross_mbps"] < 20.5, ok
    alone = {c["cross"]["cross"]: c["cross"] for c in checks if c.get("cross")}
    assert alone["2xtcp-cubic"]["alone_mbps"] >= 16 and alone["1xquic-cubic"]["alone_mbps"] >= 16, alone
    assert alone["web-20-50KB"]["offered_mbps"] == 8.0, alone  # what it carried: the trial's cross_mbps above
    assert "Beside competing flows" in r.stdout


def test_each_trial_records_who_negotiated_ecn_on_both_ends_and_the_marks_they_saw(tmp_path):
    """--ecn under CoDel with the server's qlog and the browser's net-log captured: each h2 trial's
    TCP connections negotiated ECN in both kernels, and the server learnt of the link's CE marks (its
    ECE-acked packets); each h3 trial's QUIC connection was validated by quic-go, the browser's ACKs
    counted the server's ECT(0) packets, and no side counted more CE marks than the link made."""
    import json
    import sqlite3

    from ..conftest import ok_slots, run_cli, slots_refused
    store = tmp_path / "r.sqlite"
    r = run_cli("run", "--aqm", "codel", "--ecn", "--bw", "20mbit", "--rtt", "50ms", "--size", "500KB", "--proto",
                "h3,h2", "--runs", "1", "--verify", "off", "--capture", "qlog,netlog", "--results", str(store),
                timeout=600)
    db = sqlite3.connect(store)
    db.row_factory = sqlite3.Row
    rows = [dict(x) for x in db.execute("SELECT proto, status, reason, link_json FROM trials")]
    db.close()
    if r.returncode == 1 and slots_refused(rows, lambda t: t["proto"], {"h3", "h2"}):
        return
    ok_slots(rows, lambda t: t["proto"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ok = {t["proto"]: json.loads(t["link_json"]) for t in rows if t["status"] == "ok"}
    tcp, quic = ok["h2"]["endpoints_ecn"], ok["h3"]["endpoints_ecn"]
    for side in ("tcp_browser", "tcp_server"):
        assert tcp[side]["connections"] >= 1 and tcp[side]["negotiated"] == tcp[side]["connections"], tcp
    marks = ok["h2"]["dirs"]["down"]["bottleneck"]["marks"]
    assert (tcp["tcp_server"]["ce_delivered"] > 0) == (marks > 0), (tcp, marks)
    assert tcp["quic_browser"] is None and quic["tcp_server"] is None, (tcp, quic)
    server, browser = quic["quic_server"], quic["quic_browser"]
    assert server["source"] == "qlog" and server["connections"] >= 1 and server["validated"] == server["connections"]
    assert browser["source"] == "netlog" and browser["ect0"] > 100 and server["ect_sent"] > 100, quic
    marks = ok["h3"]["dirs"]["down"]["bottleneck"]["marks"]
    assert server["ce"] <= browser["ce"] <= marks, (quic, marks)
    assert "ECN at the endpoints" in r.stdout


def test_competing_flows_killed_with_their_run_are_found_and_removed_by_clean(tmp_path):
    """SIGKILL runs no cleanup: the cross traffic's namespaces (pbN-xclient, pbN-xserver) and its
    iperf3 processes stay with the testbed until 'plt-bench clean --testbed N' removes them all."""
    import os
    import signal
    import subprocess
    import time

    from ..conftest import CLI, ROOT, run_cli
    proc = subprocess.Popen([*CLI, "run", "--aqm", "droptail", "--cross", "1xtcp-cubic", "--bw", "20mbit", "--size",
                             "500KB", "--proto", "h2", "--runs", "20", "--verify", "off",
                             "--results", str(tmp_path / "r.sqlite")], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline, prefix = time.monotonic() + 120, None
        while True:  # its own testbed (the one whose owner it is), once its flows run
            assert proc.poll() is None and time.monotonic() < deadline, "the competing flows did not start"
            prefix = prefix or next((p for p in topology.our_prefixes()
                                     if topology.read_state(p).get("owner_pid") == proc.pid), None)
            if prefix and os.path.exists(f"/run/netns/{prefix}-xclient") and f"198.19.{prefix[2:]}.250" in \
                    subprocess.run(["pgrep", "-af", "iperf3"], capture_output=True, text=True).stdout:
                break
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert any(topology.leftovers_of(prefix).values())  # left behind by the kill...
    r = run_cli("clean", "--testbed", prefix[2:], timeout=120)
    assert r.returncode == 0 and f"removed {prefix}" in r.stdout, r.stdout + r.stderr
    left = topology.leftovers_of(prefix)  # ...and gone: namespaces, run folder, processes (the flows' too)
    assert not any(left.values()), left
    assert not os.path.exists(f"/run/netns/{prefix}-xclient") and not os.path.exists(f"/run/netns/{prefix}-xserver")
