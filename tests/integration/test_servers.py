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
from plt_bench.trial.run import run_cell_once
from plt_bench.servers import own_entries
from plt_bench import testbed

from ..conftest import machine_refused, machine_saturated, run_cli, slots_refused, system_state, unjudged
from .conftest import until_ok

pytestmark = [pytest.mark.root, pytest.mark.slow]

COND = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=50)
PAGE = Page(5000, 12, origins=4)


@pytest.fixture(scope="module")
def quinn_bed():
    with testbed.Testbed(testbed.Setup(PROJECT_ROOT / "sites", server_names=("quinn",), cc="bbr")) as b:
        b.sites.ensure([PAGE, Page(5000, 8, origins=4, visit="repeat-warm")])
        b.set_conditions(COND)
        yield b


@pytest.mark.parametrize("proto", protocols.NAMES)
def test_quinnserve_serves_every_object_on_every_origin_over_each_protocol_proven_at_both_ends(quinn_bed, store,
                                                                                               campaign, proto):
    t, reasons = until_ok(lambda i: run_cell_once(quinn_bed, store, campaign, 0, i,
                                                  Cell(proto, PAGE, COND, cc="bbr", server="quinn")))
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
    # each connection's handshake round trip as the server measured it (the kernel's SYN-ACK sample, quinn's at
    # the handshake's end): the link's 50 ms, never less (the browser's side of the same proof: link.origins)
    rtts = [e["rtt_ms"] for e in mine]
    assert all(isinstance(x, float) for x in rtts) and 50.0 - 1.0 <= min(rtts) <= max(rtts) < 50.0 + 30.0, rtts


def test_a_repeat_visit_to_quinnserve_resumes_in_0rtt_and_revalidates_the_page(quinn_bed, store, campaign):
    """A warm repeat visit over h3: the page's origin reconnects (the objects come from the cache), its
    0-RTT accepted by quinn (which says so: resumed), and the page answered 304 by its validators."""
    page = Page(5000, 8, origins=4, visit="repeat-warm")
    t, reasons = until_ok(lambda i: run_cell_once(quinn_bed, store, campaign, 0, i,
                                                  Cell("h3", page, COND, cc="bbr", server="quinn")))
    if machine_refused(t, reasons):
        return
    assert t.status == "ok", reasons
    assert t.connections == 1 and t.resumed_connections == 1, (t.connections, t.resumed_connections)
    assert t.zero_rtt == "succeeded" and t.cached_objects == 8
    if not (t.ttfb_ms >= 2 * COND.rtt_ms and machine_saturated(t)):  # timed on a machine of its own
        assert t.ttfb_ms < 2 * COND.rtt_ms, (t.ttfb_ms, t.cpu_bound)  # 0-RTT: one round trip to the first byte


def test_a_campaign_of_two_servers_interleaves_them_records_each_and_compares_them_within_each_protocol(tmp_path):
    """`plt-bench run --http-server caddy,quinn --proto h3,h2 --cc bbr --compare server`, as a user types
    it: the testbed switches servers between trials (one certificate, one set of addresses), every
    trial is proven and says which server served it, quinn's log says its h3 and h2 connections ran
    BBR; the metadata names both servers and their versions, the report compares quinn against Caddy
    within each protocol; nothing is left."""
    before = system_state()
    results = tmp_path / "r.sqlite"
    r = run_cli("run", "--http-server", "caddy,quinn", "--cc", "bbr", "--proto", "h3,h2", "--bw", "20mbit", "--rtt",
                "20ms", "--size", "5KB", "--runs", "2", "--verify", "off", "--compare", "server", "--reference", "quinn",
                "--results", str(results), timeout=600)
    db = sqlite3.connect(results)
    db.row_factory = sqlite3.Row
    rows = [dict(x) for x in db.execute("SELECT proto, status, reason, server, server_cc, server_proto FROM trials")]
    meta = json.loads(db.execute("SELECT metadata_json FROM campaigns").fetchone()[0])
    db.close()
    assert system_state() == before
    if r.returncode == 1 and slots_refused(rows, lambda t: (t["proto"], t["server"]),
                                           {(p, s) for p in ("h3", "h2") for s in ("caddy", "quinn")}):
        return
    ok = [x for x in rows if x["status"] == "ok"]
    every = sorted((p, s) for p in ("h3", "h2") for s in ("caddy", "quinn") for _ in range(2))
    if r.returncode == 1:  # each slot has an ok trial, but one of its two trials the machine refused on every try
        unjudged("the machine refused every attempt of one trial (recorded as failed): the exit status and the count")
        assert set((x["proto"], x["server"]) for x in ok) == set(every), ok
    else:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert sorted((x["proto"], x["server"]) for x in ok) == every, ok
    assert {(x["proto"], x["server_proto"]) for x in ok} == {("h3", "HTTP/3.0"), ("h2", "HTTP/2.0")}
    assert {x["server_cc"] for x in ok if x["server"] == "quinn"} == {"bbr"}  # QUIC's and the kernel's, by quinn's log
    assert meta["http_server"] == "caddy,quinn" and meta["caddy_version"] and meta["quinnserve_version"], meta
    assert "quinn: bbr" in meta["quic_cc"], meta["quic_cc"]
    assert "2 servers x" in r.stdout
    assert "each server against quinn" in r.stdout and "quinn vs caddy (h3)" in r.stdout \
        and "quinn vs caddy (h2)" in r.stdout, r.stdout[-3000:]
