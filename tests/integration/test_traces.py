"""Links that move, with real packets: a rate that follows a trace (Mahimahi's format), on this
kernel and inside the netem VM (where linkem follows the trace too: netem cannot). The traces are
the tests' own (generated), never the published ones."""
import json
import os
import sqlite3

import pytest

from plt_bench import cmd, link, testbed, traces
from plt_bench.records import format_link_check
from plt_bench.axes import make_grid
from plt_bench.conditions import Conditions
from plt_bench.link import verify

from ..conftest import link_refused, ok_slots, run_cli, unjudged

# inside the netem VM too (marked vm): linkem follows a moving trace there, and the campaign
# runs; the constant trace against htb and the ramp are this kernel's alone (the VM's htb falls short
# of its rate, and the VM part of the suite is its longest)


def _grid(**kw):
    """A grid of one traced condition: its conditions, and the traces it read (Grid.traces)."""
    return make_grid("h3", "unshaped", "5KB", 1, **kw)


@pytest.fixture(scope="module")
def trace_bed():
    """A testbed whose conditions hold a trace: its link is linkem on every kernel."""
    g = _grid(trace_down="gen:constant:12mbit", rtt="20ms")
    with testbed.Testbed(testbed.Setup(cmd.PROJECT_ROOT / "sites", conditions=g.conditions, with_browser=False,
                         traces=g.traces)) as bed:
        assert bed.link.backend == "linkem"
        yield bed


@pytest.fixture(scope="module")
def peak_mbit(trace_bed) -> float:
    """The fastest a moving trace of these tests runs: 24 Mbit/s, or a quarter of what linkem forwards
    now (TCP through a 10 ms link), if less: the netem VM's software emulation runs linkem's every
    release 10-50x slower, and a trace that outruns the machine is rightly refused (by its check, or
    trial by trial when linkem falls behind under Chromium's load)."""
    carried = _tcp_down_bps(trace_bed, Conditions(None, None, rtt_ms=10))  # through linkem: what it forwards
    return round(min(24.0, carried / 4 / 1e6), 1)


def _tcp_down_bps(bed, cond: Conditions) -> float:
    bed.set_conditions(cond)  # a traced one's trace: the testbed's own (trace_bed)
    with verify.Iperf(bed.plan.server_ns, bed.plan.server_ip):
        res = verify.iperf_client(bed.plan.client_ns, bed.plan.server_ip,
                                  ["-R", "-t", "8", "-O", str(verify.tcp_omit_s(cond.rtt_ms, 12 * 10**6))], 12)
    return res["end"]["sum_received"]["bits_per_second"]


def test_a_constant_trace_of_12_mbit_is_htb_s_12_mbit(trace_bed):
    """The trace counts 1500 IP bytes an opportunity, htb 1514 bytes a full frame: TCP's goodput
    through the trace is 1514/1500 of htb's (0.9%); each against its own ideal, the two rates agree
    within 2%, as the issue asks."""
    traced = _tcp_down_bps(trace_bed, _grid(trace_down="gen:constant:12mbit", rtt="20ms").conditions[0])
    htb = _tcp_down_bps(trace_bed, Conditions(12 * 10**6, 12 * 10**6, rtt_ms=20.0))
    ideal_trace, ideal_htb = 12e6 * 1448 / 1500, 12e6 * verify.TCP_PAYLOAD_PER_WIRE
    print(f"TCP goodput: trace {traced / 1e6:.3f} Mbit/s ({traced / ideal_trace:.4f} of its ideal), htb "
          f"{htb / 1e6:.3f} Mbit/s ({htb / ideal_htb:.4f}); trace / htb {traced / htb:.4f} (header accounting "
          f"alone: {1514 / 1500:.4f})")
    assert abs(traced / ideal_trace - 1) <= 0.02
    # htb itself carries less than its rate where the machine cannot keep its timers (the netem VM's
    # software emulation: 0.971 of 12 Mbit/s once, with the trace at 1.0003): then the trace is held
    # to the rate, as above, and not to htb's shortfall
    if htb / ideal_htb >= 0.98:
        assert abs((traced / ideal_trace) / (htb / ideal_htb) - 1) <= 0.02


@pytest.mark.parametrize("shape", ["onoff", "ramp-file"])
def test_a_moving_trace_is_followed_window_by_window_in_both_directions(trace_bed, peak_mbit, shape, tmp_path):
    """On/off and a ramp (written to a file by the library, as `plt-bench trace` does): the verification
    sends a saturating stream each way and finds every 100 ms window's bytes within tolerance."""
    if shape == "ramp-file":
        path = tmp_path / "ramp.txt"
        traces.write(path, traces.ramp(peak_mbit / 8, peak_mbit * 2 / 3, 2.0, steps=4))
        spec = str(path)
    else:
        spec = f"gen:onoff:{peak_mbit:g}mbit:500ms:500ms"
    g = _grid(trace_down=spec, rtt="30ms")
    cond = g.conditions[0]
    trace_bed.set_conditions(cond, g.traces)
    rep = verify.verify(trace_bed.plan, cond, probes=100, **trace_bed.verify_args())
    print(format_link_check(rep))
    checks = {c["name"].split(" (")[0]: c for c in rep["checks"]}
    failed = [c for c in rep["checks"] if c["ok"] is False]
    if os.environ.get("PLT_BENCH_IN_VM") and failed and all(c.get("starved") for c in failed):
        # the netem VM's software emulation: the stream's packets did not reach the trace's queue
        # in time (CI: 0.93 of the offer, window error 0.092); the check said so and refused the
        # link. What the machine cannot spoil: no window the trace keeps off carried bytes.
        for direction in ("downlink", "uplink"):
            windows = rep["trace_windows"][direction]
            off = sum(w["delivered"] for w in windows if w["offered"] == 0)
            assert len(windows) >= 30 and off <= 0.05 * sum(w["delivered"] for w in windows), windows
        return unjudged(f"the machine refused the link: {[c['tolerance'] for c in failed]}")
    assert rep["ok"], format_link_check(rep)
    for direction in ("downlink", "uplink"):
        c = next(v for k, v in checks.items() if k.startswith(f"{direction} trace"))
        assert abs(c["measured"] - 1) <= 0.02
        windows = rep["trace_windows"][direction]
        assert len(windows) >= 30 and any(w["offered"] == 0 for w in windows) == (shape == "onoff")
        assert c["idle_opportunities"][0] <= verify.STARVED_SHARE * c["idle_opportunities"][1]  # kept full
    assert "downlink rate (TCP goodput / rate x 1448/1514)" not in checks  # a traced rate is judged by its windows


def test_a_campaign_over_traces_runs_every_protocol_and_records_its_traces(peak_mbit, tmp_path):
    """The issue's command: plt-bench run --trace-down t.txt --trace-up u.txt --size 50x5KB --proto all,
    with the link verified against the traces; every trial proves its protocol, stores both traces'
    names and hashes, and met the trace from its start. At 100 ms, linkem's releases are judged late
    from 10% of the one-way delay (evidence.late_bound_ms). Inside the netem VM, whose software
    emulation runs Chromium and linkem on the same two slow cores, 13-24% of them were 2 ms late at
    40 ms, and at 100 ms an h1 trial's uplink had 2.5% 5 ms late twice: such a trial is refused with
    that reason (MACHINE_REFUSALS), and the others must prove what they claim. There, too, Chromium
    itself runs 10-50x slower: the default page timeout (3x the ideal + 20 s, 24 s here) was hit by
    an h1 and an h2 load on CI and an h3 load here, with the link keeping time throughout; there
    the test gave loads 120 s (--timeout). Since 2026-11-26 the trace tests run on this machine's
    kernel only: a trace is linkem's on every kernel (link.resolve, unit-tested on a netem kernel's
    capabilities), so the VM added nothing but 11 minutes of refused trials."""
    t, u = tmp_path / "t.txt", tmp_path / "u.txt"
    traces.write(t, traces.ramp(peak_mbit / 6, peak_mbit, 2.0, steps=4))
    traces.write(u, traces.on_off(peak_mbit / 4, 0.2, 0.05, cycles=4))
    store = tmp_path / "r.sqlite"
    slow = ("--timeout", "120s") if os.environ.get("PLT_BENCH_IN_VM") else ()
    asked = {"h1", "h2", "h3"}
    r = run_cli("run", "--trace-down", str(t), "--trace-up", str(u), "--size", "50x5KB", "--proto", "all",
                "--runs", "1", "--rtt", "100ms", "--results", str(store), *slow, timeout=1800)
    db = sqlite3.connect(store)
    db.row_factory = sqlite3.Row
    rows = [dict(x) for x in db.execute("SELECT * FROM trials")]
    if not rows and link_refused(r.returncode, r.stderr):
        return
    assert rows, (r.returncode, r.stderr[-2000:], r.stdout[-2000:])  # the link passed its check: trials ran
    ok = ok_slots(rows, lambda x: x["proto"])  # every failed attempt a machine's refusal, with its reason
    assert r.returncode == (0 if ok == asked else 1), (r.returncode, r.stderr[-2000:])
    # on this machine's own kernel every protocol runs; inside the netem VM (a netem kernel here) one
    # run of six attempts was all refused, another ran all three: there, refusals with their reason
    # are the truth, and the link's check against the traces (below) must still pass
    print(f"ok: {sorted(ok)}; refused: {[(x['proto'], x['reason']) for x in rows if x['status'] != 'ok']}")
    if not link.netem_available():
        assert ok, "no trial ran under its conditions"
    sha_t, sha_u = (traces.read(p, "test").sha256 for p in (t, u))
    for x in rows:
        assert (x["conditions"], x["trace_down"], x["trace_down_sha256"], x["trace_up"], x["trace_up_sha256"],
                x["rate_down_bps"]) == ("trace:t/trace:u rtt100ms", "t", sha_t, "u", sha_u,
                                        traces.read(t, "test").mean_bps)
    good = [x for x in rows if x["status"] == "ok"]
    assert all(abs(x["trace_phase_ms"]) < 50 for x in good), [x["trace_phase_ms"] for x in good]  # from its start
    assert all(json.loads(x["link_json"])["dirs"]["down"]["trace"]["served_bytes"] > 250_000 for x in good)
    (check,) = db.execute("SELECT result_json FROM link_checks ORDER BY id DESC LIMIT 1").fetchone()
    names = {c["name"].split(" (")[0]: c["ok"] for c in json.loads(check)["verify"]["checks"]}
    assert names["downlink trace t"] is True and names["uplink trace u"] is True
    meta = json.loads(db.execute("SELECT metadata_json FROM campaigns").fetchone()[0])
    assert meta["link_backend"] == "linkem"
    assert "trace:t/trace:u" in r.stdout


def test_a_trace_that_starves_the_load_is_named_in_the_failed_trial_s_reason(tmp_path):
    """Issue 36: through a dead-link trace (one opportunity a minute) a trial failed with Chromium's
    ERR_QUIC_PROTOCOL_ERROR, as if QUIC had failed. The reason names the trace and what it offered."""
    dead = tmp_path / "dead.txt"
    dead.write_text("60000\n")
    results = tmp_path / "r.sqlite"
    r = run_cli("run", "--trace-down", str(dead), "--rtt", "20ms", "--proto", "h3", "--size", "5KB", "--runs", "1",
                "--verify", "off", "--timeout", "8s", "--testbed", "233", "--results", str(results), timeout=600)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    db = sqlite3.connect(results)
    reasons = [x for (x,) in db.execute("SELECT reason FROM trials")]
    db.close()
    assert reasons and all(x.startswith("the downlink follows trace dead (mean 0.000 Mbit/s), which offered 0 bytes")
                           and "the trace starved the load (the browser: " in x for x in reasons), reasons
