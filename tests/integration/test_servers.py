"""The second server, quinnserve (HTTP/3 on quinn, h2 and h1 on hyper; plt_bench.servers), through the
same testbed and the same trial as Caddy: every load proven at both ends, every object on every
origin, the QUIC congestion controller it ran said by its own log, a repeat visit resumed in 0-RTT
and revalidated with a 304. Each behaviour once; what does not depend on the server is tested with
Caddy elsewhere."""
import json
import sqlite3
from urllib.parse import urlsplit

import pytest

from plt_bench import protocols
from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Cell, Conditions
from plt_bench.pages import Page
from plt_bench.runner import run_cell_once
from plt_bench.servers import own_entries
from plt_bench import testbed

from ..conftest import machine_refused, machine_saturated, run_cli, system_state
from .conftest import until_ok

pytestmark = [pytest.mark.root, pytest.mark.slow]

COND = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=50)
PAGE = Page(5000, 12, origins=4)


@pytest.fixture(scope="module")
def quinn_bed():
    with testbed.Testbed(PROJECT_ROOT / "sites", server_name="quinn", cc="bbr") as b:
        b.sites.ensure([PAGE, Page(5000, 8, origins=4, visit="repeat-warm")])
        b.set_conditions(COND)
        yield b


@pytest.mark.parametrize("proto", protocols.NAMES)
def test_quinnserve_serves_every_object_on_every_origin_over_each_protocol_proven_at_both_ends(quinn_bed, store,
                                                                                               campaign, proto):
    t, reasons = until_ok(lambda i: run_cell_once(quinn_bed, store, campaign, 0, i, Cell(proto, PAGE, COND, cc="bbr")))
    if machine_refused(t, reasons):
        return
    p = protocols.get(proto)
    assert t.status == "ok", reasons
    assert (t.next_hop_protocol, t.server_proto) == (p.next_hop, p.http_version)
    assert (t.objects, t.objects_ok, t.origins) == (12, 12, 4)
    per = t.connections_per_origin
    assert len(per) == 4 and (proto == "h1" or set(per.values()) == {1}), per  # h3 and h2: one connection each
    assert {r["nextHopProtocol"] for r in t.resources} == {p.next_hop}
    # the controller each response's connection ran, in the server's own log: quinn's BBR for h3, the
    # kernel's bbr (the testbed's routes) for TCP
    u = urlsplit(t.url)
    uri = u.path + (f"?{u.query}" if u.query else "")
    mine = own_entries([json.loads(line) for line in quinn_bed.server.access_log.read_text().splitlines()], uri)
    assert len(mine) == 13 and {e["cc"] for e in mine} == {"bbr"} and {e["proto"] for e in mine} == {proto}, mine


def test_a_repeat_visit_to_quinnserve_resumes_in_0rtt_and_revalidates_the_page(quinn_bed, store, campaign):
    """A warm repeat visit over h3: the page's origin reconnects (the objects come from the cache), its
    0-RTT accepted by quinn (which says so: resumed), and the page answered 304 by its validators."""
    page = Page(5000, 8, origins=4, visit="repeat-warm")
    t, reasons = until_ok(lambda i: run_cell_once(quinn_bed, store, campaign, 0, i, Cell("h3", page, COND, cc="bbr")))
    if machine_refused(t, reasons):
        return
    assert t.status == "ok", reasons
    assert t.connections == 1 and t.resumed_connections == 1, (t.connections, t.resumed_connections)
    assert t.zero_rtt == "succeeded" and t.cached_objects == 8
    if not (t.ttfb_ms >= 2 * COND.rtt_ms and machine_saturated(t)):  # timed on a machine of its own
        assert t.ttfb_ms < 2 * COND.rtt_ms, (t.ttfb_ms, t.cpu_bound)  # 0-RTT: one round trip to the first byte


def test_run_with_quinnserve_records_the_server_and_its_controllers_and_leaves_nothing(tmp_path):
    """`plt-bench run --http-server quinn --cc reno`, as a user types it: every trial ok over h3 and h1,
    the campaign's metadata names the server, its version and the QUIC controller; nothing is left."""
    before = system_state()
    results = tmp_path / "r.sqlite"
    r = run_cli("run", "--http-server", "quinn", "--cc", "reno", "--proto", "h3,h1", "--bw", "20mbit", "--rtt", "20ms",
                "--size", "5KB", "--runs", "1", "--verify", "off", "--results", str(results), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert system_state() == before
    db = sqlite3.connect(results)
    meta = json.loads(db.execute("SELECT metadata_json FROM campaigns").fetchone()[0])
    assert (meta["http_server"], meta["quic_cc"]) == ("quinn", "newreno") and meta["quinnserve_version"], meta
    assert "caddy_version" not in meta
    rows = db.execute("SELECT proto, status, server_proto FROM trials ORDER BY proto").fetchall()
    assert rows == [("h1", "ok", "HTTP/1.1"), ("h3", "ok", "HTTP/3.0")], rows
