"""Firefox through the same testbed and the same trial as Chromium (plt_bench.browsers): forced to
each protocol by its prefs, every load proven at both ends (Resource Timing's nextHopProtocol and
the server's log), its paint metrics and its CPU per process role recorded, its processes gone.
Each Firefox behaviour once, on a one-origin page: what does not depend on the browser is tested
with Chromium elsewhere."""
import json

import pytest

from plt_bench import protocols
from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Cell, Conditions
from plt_bench.errors import UsageError
from plt_bench.pages import Page
from plt_bench.runner import run_cell_once
from plt_bench.testbed import Testbed

from ..conftest import machine_refused, ok_slots, run_cli, system_state
from .conftest import until_ok

pytestmark = [pytest.mark.root, pytest.mark.slow]

COND = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=50)


@pytest.fixture(scope="module")
def firefox_bed():
    with Testbed(PROJECT_ROOT / "sites", browser="firefox") as b:
        b.sites.ensure([5000])
        b.set_conditions(COND)
        yield b


@pytest.mark.parametrize("proto", protocols.NAMES)
def test_firefox_loads_over_each_protocol_proven_at_both_ends(firefox_bed, store, campaign, proto):
    t, reasons = until_ok(lambda i: run_cell_once(firefox_bed, store, campaign, 0, i, Cell(proto, Page(5000), COND)))
    if machine_refused(t, reasons):
        return
    p = protocols.get(proto)
    assert t.status == "ok", reasons
    assert (t.next_hop_protocol, t.server_proto, t.connections) == (p.next_hop, p.server_proto, 1)
    stored = next(x for x in store.trials([campaign]) if x.trial_id == t.trial_id)
    assert stored.browser == t.browser == "firefox"  # the browser is stored per trial
    # the handshake's round trips are in the load: QUIC's one, TCP's and TLS's two, then the request
    assert t.plt_ms >= p.first_byte_rtts * COND.rtt_ms and t.fcp_ms and t.lcp_ms
    if proto == "h1":  # Firefox does not time an HTTP/1.1 document's response (browsers.firefox: untimed)
        assert t.ttfb_ms is None and t.response_end_ms is None
    else:
        assert t.ttfb_ms >= p.first_byte_rtts * COND.rtt_ms
    roles = json.loads(t.cpu_json)["roles"]
    assert {"geckodriver", "browser", "renderer"} <= set(roles) and "chromedriver" not in roles, roles


def test_what_firefox_cannot_do_yet_is_refused_by_name_before_a_load(firefox_bed):
    with pytest.raises(UsageError, match="--browser firefox: not supported yet with repeat"):
        firefox_bed.load("h3", Page(5000, visit="repeat").html_name, 30.0, visit="repeat")
    with pytest.raises(UsageError, match="--browser firefox: not supported yet with origins"):
        firefox_bed.load("h3", Page(5000, 20, origins=2).html_name, 30.0)


def test_a_firefox_campaign_from_the_command_line_stores_its_browser(tmp_path):
    """--browser firefox: the campaign's testbed loads its pages in Firefox, whose name and versions
    are in the campaign's metadata and whose name is in every trial; nothing is left behind."""
    import sqlite3
    before = system_state()
    results = tmp_path / "r.sqlite"
    r = run_cli("run", "--browser", "firefox", "--proto", "h3", "--size", "5KB", "--runs", "1", "--bw", "10mbit",
                "--rtt", "20ms", "--verify", "off", "--results", str(results), timeout=600)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert system_state() == before
    db = sqlite3.connect(results)
    rows = db.execute("SELECT browser, proto, status, reason FROM trials").fetchall()
    meta = json.loads(db.execute("SELECT metadata_json FROM campaigns").fetchone()[0])
    db.close()
    assert {b for b, *_ in rows} == {"firefox"} and meta["browser"] == "firefox"
    assert meta["firefox"].startswith("Mozilla Firefox") and meta["geckodriver"].startswith("geckodriver")
    ok = ok_slots([dict(zip(("browser", "proto", "status", "reason"), row)) for row in rows], lambda t: t["proto"])
    assert (r.returncode == 0) == (ok == {"h3"})
