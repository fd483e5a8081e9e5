"""The bottleneck's queue disciplines (issue 46) through the real testbed: linkem holds the bottleneck
at the rate under each discipline, and the link check proves each with real packets (a bulk TCP
flow, a sparse ping beside it), catching a claim the link does not keep; with --ecn the TCP flow is
marked CE instead of dropped. On linkem (every kernel): the kernel's own disciplines beneath netem are
not wired yet (link.resolve refuses --aqm with --link netem)."""
import pytest

from plt_bench import cmd, testbed, topology
from plt_bench.conditions import Conditions
from plt_bench.link import verify
from plt_bench.records import format_link_check

from ..conftest import unjudged

pytestmark = [pytest.mark.root, pytest.mark.slow]

RATE = 20 * 10**6


def _cond(aqm: str, ecn: bool = False) -> Conditions:
    return Conditions(RATE, RATE, rtt_ms=50, aqm=aqm, ecn=ecn)


def _judged(check: dict, name: str) -> dict:
    return next(c for c in check["checks"] if c["name"].startswith(name))


def test_each_discipline_keeps_its_standing_delay_and_the_check_catches_a_false_claim():
    """Under a saturating TCP flow: droptail fills its buffer (a sparse flow waits as long), CoDel
    holds about its 5 ms, PIE its 15 ms, FQ-CoDel its 5 ms with a sparse flow served at once; each
    link check passes. The same check claiming CoDel on a droptail link fails on the standing delay.
    With ECN, CoDel marks the ECN-capable flow and drops none of it. Nothing is left after."""
    with testbed.Testbed(cmd.PROJECT_ROOT / "sites", link="linkem", with_browser=False) as bed:
        prefix = bed.plan.prefix
        figures, misses = {}, {}
        for aqm in ("droptail", "codel", "fq_codel", "pie"):
            cond = _cond(aqm)
            bed.set_conditions(cond)
            assert bed.link.backend == "linkem"
            for _ in range(2):  # the busy machine may carry less than the rate once (its figure is the rate's)
                got = verify.verify(bed.plan, cond, probes=100, tcp_seconds=2, **bed.verify_args())
                if got["ok"]:
                    break
            standing = _judged(got, "downlink standing delay")
            figures[aqm] = (standing["measured"], _judged(got, "sparse flow")["measured"])
            if not got["ok"]:
                misses[aqm] = got["failed"]
                # only a rate the busy machine did not carry may fail (and the UDP loss its full queue makes)
                assert all(n.endswith(("rate (TCP goodput / rate x 1448/1514)", "downlink loss (UDP)"))
                           for n in got["failed"]), format_link_check(got)
        print("standing delay, sparse flow's delay (ms):", figures)
        # the false claim: CoDel's check on a droptail link (its buffer's delay, not CoDel's 5 ms)
        bed.set_conditions(_cond("droptail"))
        claim = verify.verify(bed.plan, _cond("codel"), probes=100, tcp_seconds=2, **bed.verify_args())
        false = _judged(claim, "downlink standing delay")
        assert false["ok"] is False and false["measured"] > 15, format_link_check(claim)
        # ECN: marks, not drops, for the ECN-capable TCP flow (the hosts' TCP asks for it under --ecn)
        ecn = _cond("codel", ecn=True)
        bed.set_conditions(ecn)
        marked = verify.verify(bed.plan, ecn, probes=100, tcp_seconds=2, **bed.verify_args())
        mark = _judged(marked, "ECN: CE marks in place of drops")
        assert mark["ok"], format_link_check(marked)
    left = topology.leftovers_of(prefix)
    assert not any(left.values()), left
    if misses:
        return unjudged(f"the machine carried less than the rate under {sorted(misses)}: {misses}")
    assert figures["fq_codel"][1] <= verify.SPARSE_DELAY_MS < figures["droptail"][1]
    assert figures["codel"][0] < figures["pie"][0] < figures["droptail"][0]


def test_a_campaign_with_competing_flows_records_what_they_carried_and_leaves_nothing(tmp_path):
    """--cross 2xtcp-cubic under FQ-CoDel, through the CLI: the flows start after the link check,
    carry their share alone before the first trial (the check's 'cross' figures), and each trial
    records what they carried during its load; their namespaces and processes go with the testbed."""
    import json
    import sqlite3

    from ..conftest import run_cli, state_unchanged, system_state
    before = system_state()
    store = tmp_path / "r.sqlite"
    r = run_cli("run", "--aqm", "fq_codel", "--cross", "2xtcp-cubic", "--bw", "20mbit", "--rtt", "50ms", "--size",
                "500KB", "--proto", "h2", "--runs", "2", "--verify", "off", "--results", str(store), timeout=600)
    assert state_unchanged(before) == before
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    db = sqlite3.connect(store)
    rows = db.execute("SELECT status, cross, cross_mbps, plt_ms, aqm FROM trials").fetchall()
    assert len(rows) == 2 and all(s == "ok" and c == "2xtcp-cubic" and a == "fq_codel" for s, c, _, _, a in rows), rows
    # beside a page load the two flows keep most of 20 Mbit/s (FQ-CoDel gives the page its own share)
    assert all(5 < mbps < 20.5 for _, _, mbps, _, _ in rows), rows
    (check,) = [json.loads(x) for (x,) in db.execute("SELECT result_json FROM link_checks")]
    assert check["cross"]["cross"] == "2xtcp-cubic" and check["cross"]["alone_mbps"] >= 16, check["cross"]


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
