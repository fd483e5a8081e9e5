"""Pages like the web's in the real browser, through the real link (issue 29): a page of many
origins proven per origin with its paint metrics, repeat visits with the evidence of TLS
resumption and QUIC 0-RTT, and a recorded page replayed over every protocol and recorded again.
Each behaviour once where the protocol does not matter to it; a trial the machine refuses (the
emulator fell behind) is tried again, since a success is the point."""
import json
import shutil
import sqlite3

import pytest

from plt_bench.pages import standin as replay
from plt_bench.conditions import Cell, Conditions
from plt_bench.pages import Page, page_url, parse_page
from plt_bench.trial.run import run_cell_once
from plt_bench.pages import harfile

from ..conftest import ROOT, machine_refused, machine_saturated, ok_slots, run_cli, slots_refused, system_state
from .test_cli import _nothing

pytestmark = [pytest.mark.root, pytest.mark.slow]

RTT_MS = 50.0
COND = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=RTT_MS)
HOSTS = ["plt.test", "plt-o1.test", "plt-o2.test", "plt-o3.test"]


def _until_ok(bed, store, campaign, proto, label):
    page = parse_page(label)
    bed.sites.ensure([page])
    if bed.conditions != COND:
        bed.set_conditions(COND)
    reasons = []
    for attempt in range(2):
        t = run_cell_once(bed, store, campaign, 0, attempt, Cell(proto, page, COND))
        reasons.append(t.reason)
        if t.ok:
            break
    return t, reasons


@pytest.mark.parametrize("proto", ["h3", "h2", "h1"])
def test_a_page_of_four_origins_is_proven_per_origin_with_its_paint_metrics(bed, store, campaign, proto):
    t, reasons = _until_ok(bed, store, campaign, proto, "4o:12x5KB")
    if machine_refused(t, reasons):
        return
    assert t.ok, reasons
    assert (t.objects, t.objects_ok, t.origins, t.page) == (12, 12, 4, "4o:12x5KB")
    per = t.connections_per_origin
    assert list(per) == HOSTS  # each origin on its own connection(s): its own address, no pooling across them
    if proto == "h1":
        assert all(1 <= n <= 6 for n in per.values()) and t.connections == sum(per.values())
    else:
        assert set(per.values()) == {1} and t.connections == 4
    assert {r["nextHopProtocol"] for r in t.resources} == {t.next_hop_protocol}  # QUIC forced on every origin too
    # LCP is the hero image, painted after its last byte came; FCP (the heading) no later
    hero = next(r for r in t.resources if "/hero_5KB.png" in r["name"])
    assert t.lcp_element == "img#hero" and t.lcp_url.endswith("/hero_5KB.png?i=0") and t.paint_reason is None
    assert 0 < t.fcp_ms <= t.lcp_ms and t.lcp_ms >= hero["responseEnd"] - 1, (t.fcp_ms, t.lcp_ms, hero["responseEnd"])
    assert t.ttfb_ms < t.fcp_ms


def test_a_page_that_loads_in_milliseconds_has_its_paint_metrics_too(bed, store, campaign):
    """Paint entries come when their frame is presented, frames after a fast load: two frames after
    a 5KB page's 17 ms load one trial in eight had none yet (the suite, 2026-11-24)."""
    unshaped = Conditions(None, None)
    if bed.conditions != unshaped:
        bed.set_conditions(unshaped)
    page = parse_page("5KB")
    trials = [run_cell_once(bed, store, campaign, 0, run, Cell("h3", page, unshaped)) for run in range(8)]
    ok = [t for t in trials if t.ok]
    assert ok, [t.reason for t in trials]
    assert all(t.fcp_ms and t.lcp_ms and t.lcp_element == "h1" and t.paint_reason is None for t in ok), \
        [(t.plt_ms, t.fcp_ms, t.paint_reason) for t in ok]


@pytest.mark.parametrize("proto", ["h3", "h1"])
def test_a_repeat_visit_resumes_tls_and_h3_sends_its_request_in_0rtt(bed, store, campaign, proto):
    t, reasons = _until_ok(bed, store, campaign, proto, "4o:8x5KB@repeat")
    if machine_refused(t, reasons):
        return
    assert t.ok, reasons
    assert t.visit == "repeat" and t.objects_ok == 8 and t.first_plt_ms > 0
    first = json.loads(t.visit_json)["first_nav"]
    if proto == "h3":
        # the net-log: every QUIC session of the repeat sent 0-RTT; the page's first byte after one round trip
        assert t.zero_rtt == "succeeded" and t.resumed_connections == t.connections == 4
        timed = t.ttfb_ms < 1.5 * RTT_MS and first["responseStart"] > 1.8 * RTT_MS
        if not (not timed and machine_saturated(t)):  # the net-log's word stands; the timing, on a machine of its own
            assert timed, (t.ttfb_ms, first["responseStart"], t.cpu_bound)
    else:
        # no early data over TCP; a TLS 1.3 ticket is used once, so the first connection per origin resumes
        assert t.zero_rtt is None and 4 <= t.resumed_connections <= t.connections
        assert t.ttfb_ms >= 2.8 * RTT_MS


def test_a_warm_repeat_visit_takes_its_images_from_the_cache_and_revalidates_its_page(bed, store, campaign):
    t, reasons = _until_ok(bed, store, campaign, "h2", "4o:8x5KB@repeat-warm")
    if machine_refused(t, reasons):
        return
    assert t.ok, reasons
    assert t.cached_objects == 8 and t.objects_ok == 8
    assert t.server_status == 304 and t.server_proto == "HTTP/2.0"  # Cache-Control: no-cache on the page
    assert list(t.connections_per_origin) == ["plt.test"]  # nothing asked of the other origins


def _rows(results, campaign_id: int) -> list[dict]:
    db = sqlite3.connect(results)
    db.row_factory = sqlite3.Row
    rows = [dict(x) for x in db.execute("SELECT proto, status, reason, objects_ok, connections_json FROM trials "
                                        "WHERE campaign_id = ?", (campaign_id,))]
    db.close()
    return rows


def test_a_recorded_page_replays_over_every_protocol_and_records_again_the_same(tmp_path):
    """The done-when of issue 29: a HAR written by --capture har replays through pages --from-har --stand-in,
    a campaign on it runs over every protocol, and its recordings show the same requests, origins
    and sizes; the report compares by LCP when asked."""
    before = system_state()
    results, name = tmp_path / "r.sqlite", "test-round-trip"
    common = ["--bw", "10mbit", "--rtt", "20ms", "--runs", "1", "--verify", "off", "--testbed", "226",
              "--results", str(results), "--capture", "har"]
    try:
        _round_trip(tmp_path, results, name, common)
    finally:
        shutil.rmtree(ROOT / "sites" / "replay" / name, ignore_errors=True)
    assert _nothing("pb226") and system_state() == before


def _round_trip(tmp_path, results, name, common):
    """The test above, up to its leaving nothing: it returns early with the machine's refusal."""
    r = run_cli("run", "--size", "4o:8x5KB", "--proto", "h2", "--name", "source", *common, timeout=600)
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    if r.returncode == 1 and slots_refused(_rows(results, 1), lambda t: t["proto"], {"h2"}):
        return  # exit 1: every attempt refused by the busy machine (any other reason fails there)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    db = sqlite3.connect(results)  # the ok trial's recording (a refusal of the busy machine records too)
    (path,), = db.execute("SELECT a.path FROM artifacts a JOIN trials t ON t.id = a.trial_id "
                          "WHERE t.campaign_id = 1 AND t.status = 'ok' AND a.kind = 'har'").fetchall()
    db.close()
    recorded = results.parent / path
    # a HAR without bodies (the trial's capture keeps none): its same-weight stand-in (an archive would
    # replay zeros; test_replay_archive replays recordings with bodies as recorded)
    r = run_cli("pages", "--from-har", str(recorded), "--stand-in", name, timeout=120)
    assert r.returncode == 0 and "8 objects, 40000 bytes, from 4 origins" in r.stdout, r.stdout + r.stderr
    r = run_cli("run", "--size", f"har:{name}", "--proto", "all", "--name", "replay", "--metric", "lcp", *common,
                timeout=600)
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    rows = _rows(results, 2)
    if r.returncode == 1 and slots_refused(rows, lambda t: t["proto"], {"h1", "h2", "h3"}):
        return
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Largest contentful paint, each protocol against h3" in r.stdout and "What a visitor sees" in r.stdout
    assert ok_slots(rows, lambda t: t["proto"]) == {"h1", "h2", "h3"}  # a refusal of the busy machine retried
    ok = [x for x in rows if x["status"] == "ok"]
    assert sorted((x["proto"], x["objects_ok"]) for x in ok) == [("h1", 8), ("h2", 8), ("h3", 8)]
    assert all(list(json.loads(x["connections_json"])) == HOSTS for x in ok)
    assert len(list((tmp_path / "captures").glob("*/2/**/trial.har"))) == len(rows)  # one recording per attempt
    db = sqlite3.connect(results)
    again = [results.parent / p for p, in db.execute(
        "SELECT a.path FROM artifacts a JOIN trials t ON t.id = a.trial_id "
        "WHERE t.campaign_id = 2 AND t.status = 'ok' AND a.kind = 'har'")]
    db.close()
    assert len(again) == len(ok)
    source = json.loads(recorded.read_text())
    for f in again:
        assert harfile.round_trip_differences(source, json.loads(f.read_text())) == [], f
    assert any(p.name.startswith("heatmap_lcp_h3-vs-h2") for p in (tmp_path / "r-replay-2").iterdir())


def test_a_replayed_sub_document_json_and_font_load_whole_and_a_warm_visit_proves_them(bed, store, campaign, tmp_path):
    """Issue 36: a page set holding HTML (an iframe), JSON or a font failed every repeat-warm trial: the
    sub-document's 304 was judged unproven, and JSON and fonts loaded as images were cut off at their
    first bytes (no image) and found nothing whole in the cache. Over two origins, first and warm: the
    sub-document revalidated (304), the rest from the cache, every object proven."""
    import base64
    from plt_bench import pages
    png = b"".join(pages.content.iter_png(3000))

    def entry(address, mime, size, body=None):
        content = {"size": size, "mimeType": mime}
        if body is not None:
            content.update(text=base64.b64encode(body).decode(), encoding="base64")
        return {"request": {"method": "GET", "url": address}, "response": {"status": 200, "content": content}}
    from ..unit.test_replay import url
    har = {"log": {"version": "1.2", "entries": [
        entry(url("www", "/index.html"), "text/html", 3000), entry(url("www", "/a.png"), "image/png", 3000, png),
        entry(url("www", "/frame.html"), "text/html", 2000), entry(url("cdn", "/data.json"), "application/json", 4000),
        entry(url("cdn", "/f.woff2"), "font/woff2", 5000)]}}
    (tmp_path / "p.har").write_text(json.dumps(har))
    name = "test-sub-documents"
    try:
        rs, _ = replay.make(tmp_path / "p.har", name, ROOT / "sites")
        assert [o.element for o in rs.objects] == ["img", "iframe", "fetch", "fetch"]
        for label, cached in ((f"har:{name}", None), (f"har:{name}@repeat-warm", 3)):
            t, reasons = _until_ok(bed, store, campaign, "h2", label)
            if machine_refused(t, reasons):
                return
            assert t.ok and t.objects_ok == 4 and t.cached_objects == cached, reasons
    finally:
        shutil.rmtree(ROOT / "sites" / "replay" / name, ignore_errors=True)


LATE_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>drawn late</title>
<style>body{margin:0;font-family:sans-serif} h1{font-size:56px;margin:40px} p{font-size:12px;margin:4px}</style>
</head><body><p id="wait">loading</p>
<script>
addEventListener('load', () => setTimeout(() => fetch('data.json').then(r => r.json()).then(d => {
  document.body.textContent = '';  /* a re-render: the first candidate's node is detached */
  const h = document.createElement('h1'); h.id = 'title'; h.textContent = d.title; document.body.appendChild(h);
}), 150));
</script></body></html>
"""


def test_the_lcp_of_a_page_its_script_draws_late_is_read_once_the_page_has_settled(tmp_path):
    """Issue 44, item 11: a page whose script, after the load event, fetches its data and draws its
    heading (as swagger-ui does). Read 50 ms after the last LCP record (until 2026-11-27) its LCP was
    the first paint's 'loading' with no element; read once the page has settled (no response ending,
    no new record, no long task for half a second and two round trips), it is the heading, as
    browsertime reports swagger-ui's. The wait is recorded, and the load's own time is not moved."""
    from plt_bench.trial.judge import paint_fields
    from plt_bench.browsers.worker import paint_quiet_ms
    from plt_bench.testbed import Setup, Testbed
    site = tmp_path / "late"
    site.mkdir()
    (site / "index.html").write_text(LATE_PAGE)
    (site / "data.json").write_text(json.dumps({"title": "A heading its script drew once its data had come"}))
    before = system_state()
    with Testbed(Setup(ROOT / "sites", index=235, conditions=[COND], folders=[("late.pkg.test", site, "")])) as bed:
        bed.set_conditions(COND)
        answer, _ = bed.load("h2", Page(0, url=page_url("late.pkg.test", "/index.html")), 60.0)
    assert not answer.get("error"), answer.get("error")
    got = paint_fields(answer["paint"], True)
    nav = answer["nav"]
    assert got["lcp_element"] == "h1#title" and got["paint_reason"] is None, (got, answer["paint"])
    # drawn after the load, a timeout and the fetch's round trip; the first paint no later (a busy machine
    # may paint 'loading' after the load event: the order of FCP and the load is not the claim)
    assert got["lcp_ms"] >= nav["loadEventEnd"] + 150 + RTT_MS - 5, (got, nav["loadEventEnd"])
    assert got["lcp_ms"] > got["fcp_ms"], got
    assert answer["paint"]["settled"] and got["paint_wait_ms"] >= paint_quiet_ms(RTT_MS), got
    assert _nothing("pb235") and system_state() == before
