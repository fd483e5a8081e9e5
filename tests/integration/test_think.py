"""Server think time (--think, pages.timing), on a testbed of the module's own whose conditions ask it
(its servers then have a think stage): a fixed think holds every response of a generated page of
several origins before its first byte, proven by the server's log and seen by the browser; a server
that thought otherwise than asked fails the trial with the reason; a recording replays each
response's own recorded think (its wait less its origin's round trip). The link does not matter to
think time: linkem here, and the fixed case inside the netem VM (mark vm) on netem."""
import base64
import json
import shutil

import pytest

from plt_bench.conditions import Cell, Conditions
from plt_bench.pages import Page, archive, page_url, parse_page, replay_root
from plt_bench import testbed
from plt_bench.trial.run import run_cell_once

from ..conftest import MACHINE_REFUSALS, ROOT, machine_refused, unjudged
from .conftest import until_ok

pytestmark = [pytest.mark.root]
NAME = "test-think"  # made in the project's pages folder (a recording is read from there), removed after
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
DOC = (b"<!DOCTYPE html><html><head><title>t</title></head><body><p>think</p>"
       b"<img src=\"" + page_url("img.think.test", "/a.png").encode() + b"\"></body></html>")


def _entry(url: str, body: bytes, mime: str, connect: float, wait: float) -> dict:
    """A HAR entry with its timings: a TCP connection whose TLS took half of connect, then its wait."""
    return {"request": {"method": "GET", "url": url},
            "response": {"status": 200, "httpVersion": "http/2.0", "bodySize": -1,
                         "headers": [{"name": "Content-Type", "value": mime}],
                         "content": {"mimeType": mime, "size": len(body), "encoding": "base64",
                                     "text": base64.b64encode(body).decode()}},
            "timings": {"connect": connect, "ssl": connect / 2, "wait": wait}, "serverIPAddress": "192.0.2.1"}


@pytest.fixture(scope="module")
def thinking_bed(link_backend, tmp_path_factory):
    """A testbed whose conditions ask think time, and a recording of two origins with its timings: the
    page's origin 50 ms away that thought 200 ms (a wait of 250), the image's 30 ms away that thought
    10 ms (a wait of 40)."""
    sites = ROOT / "sites"
    shutil.rmtree(replay_root(sites, NAME), ignore_errors=True)  # a run stopped before it removed its own
    har = tmp_path_factory.mktemp("har") / "r.har"
    har.write_text(json.dumps({"log": {"version": "1.2", "creator": {"name": "test"}, "entries": [
        _entry(page_url("www.think.test", "/"), DOC, "text/html", 100.0, 250.0),
        _entry(page_url("img.think.test", "/a.png"), PNG, "image/png", 60.0, 40.0)]}}))
    archive.make(har, NAME, sites)
    cond = Conditions(50 * 10**6, 50 * 10**6, rtt_ms=20, think="200")
    try:
        with testbed.Testbed(testbed.Setup(sites, link=link_backend, conditions=(cond,), replays=(NAME,))) as bed:
            bed.set_conditions(cond.link_only)
            yield bed
    finally:
        shutil.rmtree(replay_root(sites, NAME), ignore_errors=True)


def _think_trial(bed, store, campaign, proto: str, page: Page, think: str):
    if not page.archived:
        bed.sites.ensure([page])
    cond = Conditions(50 * 10**6, 50 * 10**6, rtt_ms=20, think=think)
    return until_ok(lambda i: run_cell_once(bed, store, campaign, 0, i, Cell(proto, page, cond)))


@pytest.mark.parametrize("proto", [pytest.param("h3", marks=pytest.mark.vm), "h2"])  # netem's too, in the VM
def test_think_200_holds_every_response_200_ms_proven_by_the_server_and_seen_by_the_browser(
        thinking_bed, store, campaign, proto):
    page = parse_page("4o:8x5KB")
    t, reasons = _think_trial(thinking_bed, store, campaign, proto, page, "200")
    if machine_refused(t, reasons):
        return
    assert (t.status, t.reason) == ("ok", None), (reasons, t.think_json)
    figures = json.loads(t.think_json)
    assert figures["ok"] and figures["responses"] == figures["held"] == page.objects + 1, figures
    assert figures["asked_ms"] == {"min": 200.0, "median": 200.0, "max": 200.0}
    assert figures["waited_ms"]["min"] >= 199.0 and figures["short_ms"] <= 1.0, figures
    assert t.conditions.think == "200" and "think:200" in t.conditions.label
    # the browser saw each first byte at least the think and the link's round trip after its request
    # (a bound physics holds, however slow the machine)
    waits = [t.ttfb_ms] + [r["responseStart"] - r["requestStart"] for r in t.resources if r.get("responseStart")]
    assert len(waits) >= page.objects + 1 and min(waits) >= 200.0 + 20.0 - 1.0, waits


def test_a_server_that_thought_otherwise_than_asked_fails_the_trial_with_the_reason(
        thinking_bed, store, campaign, monkeypatch):
    """A false claim: the cell asks 200 ms, the server is told 50. The proof reads what the server did."""
    server = thinking_bed.server
    real = type(server).set_think
    monkeypatch.setattr(server, "set_think", lambda think: real(server, "50" if think else think))
    page = parse_page("4o:8x5KB")
    thinking_bed.sites.ensure([page])
    cell = Cell("h2", page, Conditions(50 * 10**6, 50 * 10**6, rtt_ms=20, think="200"))
    tries = [run_cell_once(thinking_bed, store, campaign, 0, 0, cell)]
    while (tries[-1].reason or "").startswith(MACHINE_REFUSALS) and len(tries) < 3:  # the busy machine's answer first
        tries.append(run_cell_once(thinking_bed, store, campaign, 0, len(tries), cell))
    monkeypatch.undo()
    t = tries[-1]
    if (t.reason or "").startswith(MACHINE_REFUSALS):
        unjudged(f"the machine refused every try ({t.reason})")
        return
    assert t.status == "failed" and t.reason.startswith("think time not as asked: "), t.reason
    assert "was asked 50 ms, not 200" in t.reason and not json.loads(t.think_json)["ok"]


def test_a_recording_replays_each_response_s_recorded_think_time(thinking_bed, store, campaign):
    page = parse_page(f"har:{NAME}")
    t, reasons = _think_trial(thinking_bed, store, campaign, "h2", page, "recorded")
    if machine_refused(t, reasons):
        return
    assert (t.status, t.reason) == ("ok", None), (reasons, t.think_json)
    figures = json.loads(t.think_json)
    # the page's 250 ms wait less its 50 ms round trip, the image's 40 less 30; a request the recording lacks
    # (the browser's /favicon.ico, where it asks one) none
    assert figures["ok"] and figures["held"] == figures["responses"] >= 2, figures
    assert figures["asked_ms"]["max"] == 200.0 and figures["asked_ms"]["min"] in (0.0, 10.0), figures
    assert t.ttfb_ms >= 200.0 + 20.0 - 1.0, t.ttfb_ms
