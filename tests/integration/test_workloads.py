"""The seeds' other experiments in the real browser, through the real link: throughput over time (a
bulk page downloads for a fixed time while the link's own counter is sampled), request latency (a
request page makes K requests after its load) and connection establishment. A trial per protocol
of each with its proof and figures, and each new preset, small, from the command line to its
tables and figures. On a busy machine a trial may be refused (the emulator fell behind): a trial
is then tried again, since a success is the point; a campaign's refused slots are recorded."""
import json
import sqlite3

import pytest

from plt_bench import cmd
from plt_bench.conditions import Cell, Conditions
from plt_bench.pages import parse_page
from plt_bench.pages.requests import request_latencies
from plt_bench.trial.run import run_cell_once

from ..conftest import machine_refused, ok_slots, run_cli, system_state, unjudged
from .test_cli import _nothing

pytestmark = [pytest.mark.root, pytest.mark.slow]

RATE_BPS = 10 * 10**6


def _until_ok(bed, store, campaign, proto, page, before=None, after=None):
    """A trial of the page at RATE_BPS and 20 ms, tried twice if the first is refused; (trial, its
    cell, every reason, what before and after returned around the last try)."""
    page, cond = parse_page(page), Conditions(RATE_BPS, RATE_BPS, rtt_ms=20)
    bed.sites.ensure([page])
    if bed.conditions != cond:
        bed.set_conditions(cond)
    cell, reasons = Cell(proto, page, cond), []
    for attempt in range(2):
        b = before() if before else None
        t = run_cell_once(bed, store, campaign, 0, attempt, cell)
        a = after() if after else None
        reasons.append(t.reason)
        if t.ok:
            break
    return t, cell, reasons, b, a


def _tx_bytes(bed) -> int:
    """The router's downlink device's transmitted bytes, read by ip (not by link.counters)."""
    out = cmd.run(["ip", "-s", "-j", "link", "show", "dev", bed.plan.down_if], ns=bed.plan.router_ns).stdout
    return json.loads(out)[0]["stats64"]["tx"]["bytes"]


@pytest.mark.parametrize("proto", ["h3", "h1"])
def test_a_bulk_trial_series_adds_up_to_what_the_link_delivered(bed, store, campaign, proto):
    t, _, reasons, before, after = _until_ok(bed, store, campaign, proto, "bulk3s_500ms", lambda: _tx_bytes(bed),
                                             lambda: _tx_bytes(bed))
    if machine_refused(t, reasons):
        return
    assert t.ok, reasons
    s = t.series
    assert (t.bulk_ms, t.interval_ms, t.page) == (3000, 500, "bulk3s_500ms")
    assert len(s["browser_bytes"]) == len(s["link_bytes"]) == 6 and sum(s["browser_bytes"]) == t.bulk_bytes > 0
    assert s["link_device"] == bed.plan.down_if
    sampled = s["link_samples"][-1][1] - s["link_samples"][0][1]
    # what the sampler saw move is what the device counted over the trial, but for the last packets of
    # the browser's quit after the last sample (a QUIC close, TCP's FIN or reset)
    assert 0 <= (after - before) - sampled <= 64_000, (after - before, sampled)
    window = sum(s["link_bytes"])
    assert window <= sampled + 1
    # the link carried at least what the browser read in the window (less what was already on its
    # way when the window opened), and no more than its rate allows (htb: a burst of a few packets)
    assert window >= 0.9 * t.bulk_bytes - 64_000, (window, t.bulk_bytes)
    assert 0 < t.throughput_bps <= 1.02 * RATE_BPS + 8 * 2 * 1514 / 3, t.throughput_bps
    assert t.throughput_bps == pytest.approx(8 * window / 3)
    assert t.goodput_bps == pytest.approx(8 * t.bulk_bytes / 3)
    if proto == "h3":
        assert t.connections == 1 and t.next_hop_protocol == "h3"
    else:
        assert t.next_hop_protocol == "http/1.1"


def test_the_datarate_preset_small_runs_from_the_command_line_to_its_table_and_figures(tmp_path):
    before = system_state()
    results = tmp_path / "r.sqlite"
    # two protocols of the preset's three: its tables and figures do not depend on how many (a bulk trial
    # per protocol is test_a_bulk_trial_series_adds_up_to_what_the_link_delivered's)
    # the link check is verify's (test_link); here the preset's tables and figures (a check cost 20-25 s a condition)
    r = run_cli("run", "datarate-loss", "--size", "bulk2s", "--bw", "10mbit", "--rtt", "20ms", "--loss", "0%,5%",
                "--proto", "h3,h1", "--runs", "1", "--verify", "off", "--testbed", "224", "--results", str(results),
                timeout=900)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    assert _nothing("pb224") and system_state() == before
    db = sqlite3.connect(results)
    rows = db.execute("SELECT proto, loss_pct, status, reason, throughput_bps, series_json FROM trials").fetchall()
    db.close()
    assert {(p, loss) for p, loss, *_ in rows} == {(p, loss) for p in ("h3", "h1") for loss in (0.0, 5.0)}
    for proto, loss, status, reason, bps, series in rows:
        assert (status == "ok") == (reason is None), (status, reason)
        if status == "ok":
            assert 0 < bps <= 1.02 * RATE_BPS + 8 * 2 * 1514 / 2 and len(json.loads(series)["link_bytes"]) == 2
    keys = ("proto", "loss_pct", "status", "reason")
    ok = ok_slots([dict(zip(keys, row)) for row in rows], lambda t: (t["proto"], t["loss_pct"]))
    assert (r.returncode == 0) == (len(ok) == 4)
    if {lo for _, lo in ok} != {0.0, 5.0}:  # every attempt at a loss refused by the busy machine (ok_slots: nothing else)
        return unjudged(f"the machine refused every trial at some loss (ok: {sorted(ok)}): the figures")
    folder = results.parent / "r-datarate-loss-1"
    assert "Throughput (bulk downloads):" in r.stdout and "link Mbit/s" in r.stdout
    assert (folder / "datarate.csv").is_file() and (folder / "throughput_series.csv").is_file()
    assert (folder / "throughput_time_10mbit_rtt20.png").stat().st_size > 1000
    assert (folder / "datarate_vs_loss.png").stat().st_size > 1000


@pytest.mark.parametrize("proto", ["h3", "h1"])
def test_a_request_trial_proves_and_times_every_request(bed, store, campaign, proto):
    t, cell, reasons, _, _ = _until_ok(bed, store, campaign, proto, "req20x1KB_c5")
    if machine_refused(t, reasons):
        return
    assert t.ok, reasons
    assert (t.requests, t.streams, t.objects, t.objects_ok, t.page) == (20, 5, 0, 20, "req20x1KB_c5")
    lat = request_latencies(parse_page(t.page), t.resources)
    assert len(lat) == 20
    # a request is answered no sooner than a round trip of the link (linkem may release a packet up to
    # a timer wake-up early: well under a millisecond), and its percentiles are its trial's
    assert min(lat) >= 0.95 * cell.conditions.rtt_ms, lat
    assert t.req_p50_ms <= t.req_p90_ms <= t.req_p99_ms <= max(lat)
    if proto == "h3":
        assert t.connections == 1  # one connection carried the page and every request
    else:
        assert 1 <= t.connections <= 6


def test_the_latency_and_establishment_presets_small_run_to_their_tables_and_figures(tmp_path):
    before = system_state()
    results = tmp_path / "r.sqlite"
    for preset, extra in (("latency", ["--size", "req10x1KB,req10x1KB_c10"]), ("establishment", [])):
        r = run_cli("run", preset, *extra, "--proto", "h3,h1", "--bw", "10mbit", "--rtt", "20ms,60ms", "--runs", "1",
                    "--verify", "off",
                    "--testbed", "225", "--results", str(results), timeout=900)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
        assert _nothing("pb225") and system_state() == before
        folder = results.parent / f"r-{preset}-{1 if preset == 'latency' else 2}"
        db = sqlite3.connect(results)
        rows = db.execute("SELECT page, proto, rtt_ms, status, reason, req_p99_ms FROM trials WHERE campaign_id = ?",
                          (1 if preset == "latency" else 2,)).fetchall()
        db.close()
        pages = ["req10x1KB", "req10x1KB_c10"] if preset == "latency" else ["5KB"]
        slots = {(p, proto, rtt) for p in pages for proto in ("h3", "h1") for rtt in (20.0, 60.0)}
        assert {(p, proto, rtt) for p, proto, rtt, *_ in rows} == slots  # every slot tried (a retry adds a row)
        assert all((status == "ok") == (reason is None) for *_, status, reason, _ in rows)
        keys = ("page", "proto", "rtt_ms", "status", "reason")
        measured = ok_slots([dict(zip(keys, row)) for row in rows], lambda t: (t["page"], t["proto"], t["rtt_ms"]))
        ok = [row for row in rows if row[3] == "ok"]
        assert (r.returncode == 0) == (measured == slots)
        assert {rtt for _, _, rtt in measured} == {20.0, 60.0}, measured  # each RTT measured: every figure drawn
        if preset == "latency":
            assert all(p99 is not None for *_, p99 in ok)
            assert "Request latency:" in r.stdout and (folder / "latency.csv").is_file()
            assert (folder / "request_latency.png").stat().st_size > 1000
        else:
            assert (folder / "establishment.png").stat().st_size > 1000
            assert "Connection establishment" in (folder / "report.md").read_text()
