"""Recordings replayed as recorded (issue 37), through the real testbed: a real page that no one
here wrote (swagger-ui-dist building an API reference from a JSON document it fetches from a second
origin; npm packages unpacked by scripts/setup) recorded from its files served as they are, then
replayed over h3, h2 and h1 with every served response proven at both ends; a recording whose
script asks for what it does not hold (404 at once, counted, not a clean ok) and builds a URL from
the time (found by its query); and a script that reaches for a host outside the testbed, which
resolves nowhere there. Each behaviour once; the protocol is the axis of the first only: recorded
with its first party over h3 and its API's origin over h1 (each host's server offering that one
alone), it replays over h3, h2, h1 and as recorded, each origin proven over its own protocol."""
import json
import shutil
import sqlite3

import pytest

from plt_bench import topology
from plt_bench.pages import real as realpages
from plt_bench.pages import replay_root
from plt_bench.visual import read_frames

from ..conftest import MACHINE_REFUSALS, ROOT, ok_slots, run_cli, system_state, unjudged
from .conftest import rendered_figures
from .test_cli import _nothing

pytestmark = [pytest.mark.root, pytest.mark.slow]
SITES = ROOT / "sites"


def machine_refused_row(t) -> bool:
    """A stored attempt the busy machine refused (conftest.MACHINE_REFUSALS): its claim unjudged."""
    if (t["reason"] or "").startswith(MACHINE_REFUSALS):
        return unjudged(f"the machine refused the trial ({t['reason']})")
    return False


def _trials(results, campaign_id=1):
    db = sqlite3.connect(results)
    db.row_factory = sqlite3.Row
    rows = [dict(x) for x in db.execute("SELECT * FROM trials WHERE campaign_id = ?", (campaign_id,))]
    db.close()
    return rows


def test_a_real_page_its_script_renders_is_recorded_and_replays_over_every_protocol(tmp_path):
    page = next(p for p in realpages.ready() if p.name == "swagger")
    before = system_state()
    name, results = "test-swagger", tmp_path / "r.sqlite"
    spoke = {"docs.pkg.test": "h3", "api.pkg.test": "h1"}  # a first party on h3, a third party on h1
    serve = [x for h, d in page.folders for x in ("--folder", f"{h}@{spoke[h]}={d}")]
    try:
        r = run_cli("record", page.url, "--name", name, *serve, "--testbed", "227", timeout=600)
        assert r.returncode == 0 and f"recorded {page.url} as {name}" in r.stderr + r.stdout, r.stdout + r.stderr
        recorded = json.loads((replay_root(SITES, name) / "archive.json").read_text())
        assert {o["host"]: o["protocol"] for o in recorded["origins"]} == spoke  # each as its server spoke
        har = json.loads((replay_root(SITES, name) / "recorded.har").read_text())  # kept beside, HAR 1.2 with bodies
        assert any(e["request"]["url"].endswith("petstore.json") and e["response"]["content"].get("text")
                   for e in har["log"]["entries"])
        r = run_cli("run", "--size", f"har:{name}", "--proto", "all,as-recorded", "--runs", "1", "--bw", "10mbit",
                    "--rtt", "20ms", "--verify", "off", "--testbed", "227", "--results", str(results), "--capture",
                    "har,visual", timeout=900)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
        rows = _trials(results)
        ok = ok_slots(rows, lambda t: t["proto"])  # every failed attempt one the busy machine refused
        every = {"h1", "h2", "h3", "as-recorded"}
        assert r.returncode == (0 if ok == every else 1), (r.returncode, ok)
        if ok != every:
            machine_refused_row(next(x for x in rows if x["status"] != "ok"))  # said in the summary
        for t in (x for x in rows if x["status"] == "ok"):
            evidence = json.loads(t["replay_json"])
            assert t["unrecorded"] == 0 and evidence["unrecorded"] == [] and evidence["proven"] >= 6, evidence
            assert set(json.loads(t["connections_json"])) == {"docs.pkg.test", "api.pkg.test"}  # both origins
            # its visual progress from the screencast (capture kind visual): the page drawn by its script
            assert 0 < t["first_visual_change_ms"] <= t["speed_index_ms"] <= t["visually_complete_ms"], t
            if t["proto"] == "as-recorded":  # each origin's responses over its own protocol, seen so by the server
                assert set(evidence["protocols"]) == {"h3", "h1"} and evidence["protocols"]["h1"] >= 1, evidence
            else:
                assert "protocols" not in evidence
        assert "Visual progress:" in r.stdout and "SpeedIndex ms" in r.stdout
        if "as-recorded" in ok:
            assert "Replayed recordings:" in r.stdout and "h3 " in r.stdout.split("Replayed recordings:")[1]
        # the page asks validator.swagger.io (a site on the web) to check the document: inside the testbed
        # the name resolves nowhere, so nothing leaves it; the server never saw it either
        db = sqlite3.connect(results)
        hars = [results.parent / p for p, in db.execute("SELECT path FROM artifacts WHERE kind = 'har'")]
        frames = dict(db.execute("SELECT t.id, a.path FROM artifacts a JOIN trials t ON t.id = a.trial_id "
                                 "WHERE a.kind = 'visual' AND t.status = 'ok'"))
        firsts = dict(db.execute("SELECT id, first_visual_change_ms FROM trials WHERE status = 'ok'"))
        db.close()
        # each ok trial's frames where the page changed, its first visual change among them; the report's filmstrip
        assert set(frames) == set(firsts), (frames, firsts)
        for tid, path in frames.items():
            shown = read_frames(results.parent / path)
            assert len(shown) >= 2 and any(abs(ms - firsts[tid]) < 0.1 for ms, _ in shown), ([ms for ms, _ in shown],
                                                                                           firsts[tid])
        # the report of a visual capture, opened in headless Chromium: each protocol's filmstrip and waterfall drawn
        folder = results.parent / r.stdout.split("report and figures: ")[1].split("/ (")[0].rsplit("/", 1)[-1]
        shown = rendered_figures(folder / "report.html", tmp_path / "chromium-profile")
        drawn = {k: v for k, v in shown.items() if k.startswith(("filmstrip_", "waterfall_"))}
        assert {k.split("_")[0] for k in drawn} == {"filmstrip", "waterfall"} and min(drawn.values()) > 0.01, shown
        outside = [e for f in hars for e in json.loads(f.read_text())["log"]["entries"]
                   if "validator.swagger.io" in e["request"]["url"]]
        assert all(e.get("_error") == "net::ERR_NAME_NOT_RESOLVED" for e in outside), outside
        assert outside or not ok, hars  # every ok trial's page asked for it (a refused one may have kept no HAR)
        assert not any("validator" in json.dumps(json.loads(t["replay_json"])) for t in rows)
        # Firefox replays the same two-origin recording (issue 48), forced and as recorded: its names resolved
        # through the client's hosts file as this load's origins are, every response proven at both ends
        ff = tmp_path / "firefox.sqlite"
        r = run_cli("run", "--size", f"har:{name}", "--browser", "firefox", "--proto", "h3,h1,as-recorded", "--runs", "1", "--bw",
                    "10mbit", "--rtt", "20ms", "--verify", "off", "--testbed", "227", "--results", str(ff),
                    "--no-report", timeout=600)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
        rows = _trials(ff)
        ok = ok_slots(rows, lambda t: t["proto"])
        if ok != {"h3", "h1", "as-recorded"}:
            machine_refused_row(next(x for x in rows if x["status"] != "ok"))
        for t in (x for x in rows if x["status"] == "ok"):
            evidence = json.loads(t["replay_json"])
            assert t["browser"] == "firefox" and t["unrecorded"] == 0 and evidence["unrecorded"] == [], evidence
            assert evidence["proven"] == evidence["served"] >= 6 and evidence["document_proven"], evidence
            assert set(json.loads(t["connections_json"])) == {"docs.pkg.test", "api.pkg.test"}
            if t["proto"] == "as-recorded":  # the first party over h3, the API's origin over h1, as recorded
                assert set(evidence["protocols"]) == {"h3", "h1"} and evidence["protocols"]["h1"] >= 1, evidence
            else:
                assert t["next_hop_protocol"] == {"h3": "h3", "h1": "http/1.1"}[t["proto"]], t
        _revisits_of_a_recording(name, tmp_path)
    finally:
        shutil.rmtree(replay_root(SITES, name), ignore_errors=True)
    assert _nothing("pb227") and system_state() == before


def _revisits_of_a_recording(name: str, tmp_path) -> None:
    """Issue 48: a recording's repeat visit in both browsers, over h3. With the cache cleared, every
    response served again and proven, over connections that resumed TLS; with it kept, what the
    recording's headers let the browser keep comes from its cache or is revalidated (the replay's 304,
    no body), and still nothing unrecorded or unproven."""
    results = tmp_path / "revisits.sqlite"
    r = run_cli("run", "--size", f"har:{name}@repeat,har:{name}@repeat-warm", "--browser", "chromium,firefox",
                "--proto", "h3", "--runs", "1", "--bw", "10mbit", "--rtt", "20ms", "--verify", "off", "--testbed", "227",
                "--results", str(results), "--no-report", timeout=600)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    rows = _trials(results)
    want = {(b, v) for b in ("chromium", "firefox") for v in ("repeat", "repeat-warm")}
    ok = ok_slots(rows, lambda t: (t["browser"], t["visit"]))
    if ok != want:
        machine_refused_row(next(x for x in rows if x["status"] != "ok"))
    for t in (x for x in rows if x["status"] == "ok"):
        evidence = json.loads(t["replay_json"])
        assert t["unrecorded"] == 0 and evidence["unrecorded"] == [], (t["browser"], t["visit"], evidence)
        assert t["first_plt_ms"] and t["plt_ms"], t
        if t["visit"] == "repeat":  # nothing kept: every response asked for and proven again, TLS resumed
            assert evidence["proven"] == evidence["served"] >= 6 and evidence["document_proven"], evidence
            assert t["resumed_connections"] >= 1 and t["zero_rtt"], (t["browser"], t["resumed_connections"])
        else:  # kept: from the cache (no connection at all, where everything was), or revalidated by a 304
            assert evidence["cached"] + evidence.get("revalidated", 0) >= 1, (t["browser"], evidence)
            assert t["resumed_connections"] is None or t["resumed_connections"] >= 1, t["resumed_connections"]


PAGE = b"""<!DOCTYPE html><html><head><meta charset=utf-8><title>rendered by its script</title></head>
<body><h1>orders</h1><ul id=list></ul><script src="https://cdn.rec.test/app.js"></script></body></html>"""
APP = b"""fetch('https://api.rec.test/orders.json?t=' + Date.now() + '&v=2').then(r => r.json()).then(d => {
  for (const x of d.items) { const li = document.createElement('li'); li.textContent = x;
    document.getElementById('list').appendChild(li); }
  return fetch('https://api.rec.test/not-recorded.json');
});"""


def _entry(url, body, mime, version):
    return {"startedDateTime": "2026-11-25T10:00:00.000Z", "request": {"method": "GET", "url": url},
            "response": {"status": 200, "httpVersion": version, "bodySize": len(body),
                         "headers": [{"name": "Content-Type", "value": mime},
                                     {"name": "Access-Control-Allow-Origin", "value": "*"}],
                         "content": {"size": len(body), "mimeType": mime, "text": body.decode()}}}


def test_what_the_recording_lacks_is_a_404_counted_and_a_url_made_from_the_time_is_found_by_its_query(tmp_path):
    data = json.dumps({"items": [f"order {k}" for k in range(20)]}).encode()
    har = {"log": {"version": "1.2", "creator": {"name": "hand-made"}, "entries": [
        _entry("https://www.rec.test/", PAGE, "text/html", "h3"),
        _entry("https://cdn.rec.test/app.js", APP, "application/javascript", "http/2.0"),
        _entry("https://api.rec.test/orders.json?t=1795600800123&v=2", data, "application/json", "http/1.1")]}}
    (tmp_path / "p.har").write_text(json.dumps(har))
    before = system_state()
    name, results = "test-lacking", tmp_path / "r.sqlite"
    try:
        r = run_cli("pages", "--from-har", str(tmp_path / "p.har"), name)
        assert r.returncode == 0 and "3 responses" in r.stdout and "(1 h3, 1 h2, 1 h1 when recorded)" in r.stdout, \
            r.stdout + r.stderr
        r = run_cli("run", "--size", f"har:{name}", "--proto", "h2", "--runs", "1", "--bw", "10mbit", "--rtt", "20ms",
                    "--verify", "off", "--testbed", "228", "--results", str(results), timeout=600)
        rows = _trials(results)  # the campaign's retry fails alike
        t = next((x for x in rows if not (x["reason"] or "").startswith(MACHINE_REFUSALS)), None)
        if t is None and all(machine_refused_row(x) for x in rows):
            return
        assert r.returncode == 1 and t["status"] == "failed", (r.stdout[-2000:], t["reason"])
        assert "1 request(s) the recording does not hold" in t["reason"] and "not-recorded.json" in t["reason"]
        evidence = json.loads(t["replay_json"])
        assert t["unrecorded"] == 1 and evidence["unrecorded"] == ["api.rec.test/not-recorded.json"]
        # the script's URL carried this load's time (the recording's, moved by the page's clock): found by query
        assert len(evidence["query_matched"]) == 1 and "orders.json?t=17956008" in evidence["query_matched"][0]
        # the document, the script and the JSON served; the script proven at both ends (the JSON, fetched
        # without holding the load event, may end after the browser's entries are read: then unseen)
        assert evidence["served"] == 3 and t["objects_ok"] >= 1 and t["plt_ms"] > 0, evidence
    finally:
        shutil.rmtree(replay_root(SITES, name), ignore_errors=True)
    assert _nothing("pb228") and system_state() == before
    assert "pb228" not in topology.our_prefixes()


def test_a_real_page_by_name_is_recorded_by_its_first_campaign_and_replayed_by_the_next(tmp_path):
    """--size real:toolbelt (Debian's requests-toolbelt documentation): the first campaign that names
    it records it from the package's folder (sites/real-toolbelt) and replays that recording; a second
    campaign replays it without recording again. A recording already there is set aside meanwhile."""
    folder = replay_root(SITES, "real-toolbelt")
    aside = tmp_path / "aside"
    if folder.exists():
        shutil.move(str(folder), str(aside))
    before = system_state()
    try:
        runs = []
        for k in range(2):
            results = tmp_path / f"r{k}.sqlite"
            r = run_cli("run", "--size", "real:toolbelt", "--proto", "h2", "--runs", "1", "--bw", "50mbit", "--rtt",
                        "20ms", "--verify", "off", "--testbed", "228", "--results", str(results), timeout=600)
            assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
            runs.append((r, _trials(results)))
        (first, first_rows), (second, second_rows) = runs
        assert "recording real:toolbelt" in first.stdout + first.stderr
        assert "recording real:toolbelt" not in second.stdout + second.stderr  # the recording, replayed again
        assert json.loads((folder / "archive.json").read_text())["origins"][0]["host"] == "toolbelt.pkg.test"
        for r, rows in runs:
            ok = ok_slots(rows, lambda t: t["proto"])  # a failed attempt only one the busy machine refused
            if not ok:
                machine_refused_row(rows[0])
                continue
            t = next(x for x in rows if x["status"] == "ok")
            evidence = json.loads(t["replay_json"])
            assert t["page"] == "har:real-toolbelt" and t["unrecorded"] == 0 and evidence["proven"] >= 5, evidence
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if aside.exists():
            shutil.move(str(aside), str(folder))
    assert _nothing("pb228") and system_state() == before
