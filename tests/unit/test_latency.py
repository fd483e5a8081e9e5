"""Request pages (request latency) and connection establishment, their pure parts: the page and its
parsing, the latency figures of a trial and of a cell, the establishment table, the report's
sections and figures."""
import json
import os

import pytest

from plt_bench.pages import requests as latency
from plt_bench.analysis import plots, report, stats
from plt_bench.pages.proof import judge_objects
from plt_bench.pages.requests import judge_requests
from plt_bench.errors import UsageError
from plt_bench.pages.content import MIN_OBJECT_BYTES
from plt_bench.pages import Page, parse_page

from .trials import conditions, trial


def test_request_pages_parse_label_and_name_their_files():
    p = parse_page("req100x1KB")
    assert (p.measures, p.requests, p.size_bytes, p.streams, p.objects) == ("requests", 100, 1000, 1, 0)
    assert (p.label, p.html_name, p.fetched, p.object_name) == ("req100x1KB", "req100x1KB.html", 100, "obj_1KB.png")
    q = parse_page("req100x64KB_c10")
    assert (q.streams, q.label) == (10, "req100x64KB_c10") and parse_page(q.label) == q
    assert q.object_uris()[:2] == ["/obj_64KB.png?r=0", "/obj_64KB.png?r=1"] and len(q.object_uris()) == 100
    assert [n for n, _, _ in q.files()] == ["req100x64KB_c10.html", "obj_64KB.png"]
    assert q.total_bytes == q.html_bytes + 100 * 64_000
    html = q.html().decode()
    assert "const K = 100, C = 10, base = \"/obj_64KB.png?r=\"" in html and "setResourceTimingBufferSize(116)" in html
    # an image page and a request page of the same object share its file, not their URIs
    assert Page(64_000, 100).object_name == q.object_name and not set(Page(64_000, 2).object_uris()) & set(q.object_uris())


@pytest.mark.parametrize("text,fragment", [
    ("req", "not a request series; expected reqKxS or reqKxS_cC"),
    ("req100", "not a request series"),
    ("req0x1KB", "makes 0 requests; expected 1 to 1000"),
    ("req1001x1KB", "makes 1001 requests"),
    ("req10x1KB_c11", "asks for 11 requests at once; expected 1 to 10"),
    ("req200x1KB_c101", "expected 1 to 100"),
    ("req10x10B", f"at least {MIN_OBJECT_BYTES} bytes"),
    ("req10x1KQ", "--size: '1KQ' is not a size"),
])
def test_bad_request_pages_are_refused_naming_the_option(text, fragment):
    with pytest.raises(UsageError, match="^--size: ") as e:
        parse_page(text)
    assert fragment in str(e.value)


def _entry(k, start, end, hop="h3", size=1000, status=200):
    return {"name": f"https://plt.test/obj_1KB.png?r={k}", "initiatorType": "fetch", "nextHopProtocol": hop,
            "responseStatus": status, "decodedBodySize": size, "startTime": start, "responseEnd": end}


def test_a_request_trials_latencies_and_percentiles():
    page = parse_page("req5x1KB")
    resources = [_entry(k, 100.0 + 10 * k, 100.0 + 10 * k + lat) for k, lat in enumerate([30, 10, 20, 50, 40])]
    resources.append({"name": "https://plt.test/favicon.ico", "startTime": 1.0, "responseEnd": 2.0})
    assert latency.request_latencies(page, resources) == [30, 10, 20, 50, 40]  # in the order made
    f = latency.figures(page, resources)
    assert (f["requests"], f["streams"], f["req_p50_ms"]) == (5, 1, 30.0)
    assert f["req_p90_ms"] == pytest.approx(46.0) and f["req_p99_ms"] == pytest.approx(49.6)  # numpy linear
    assert latency.figures(page, [])["req_p50_ms"] is None and latency.percentiles([]) is None
    cond = conditions(rtt_ms=100)
    at_once = parse_page("req5x1KB_c5")
    assert page.page_kind.await_s(page, cond) == pytest.approx(3 * (8 * 5000 / 10**7 + 3 * 5 * 0.1) + 30)
    assert at_once.page_kind.await_s(at_once, cond) == pytest.approx(3 * (8 * 5000 / 10**7 + 0.3) + 30)
    assert Page(5000).page_kind.await_s(Page(5000), cond) == 0


def test_every_request_is_proven_like_an_object():
    page = parse_page("req3x1KB_c3")
    resources = [_entry(k, 0.0, 5.0) for k in range(3)]
    log = [{"uri": f"/obj_1KB.png?r={k}", "proto": "h3", "status": 200, "size": 1000} for k in range(3)]
    assert judge_objects("h3", page, resources, log) == (3, None)
    proven, why = judge_objects("h3", page, resources[:2] + [_entry(2, 0.0, 5.0, hop="http/1.1")], log)
    assert proven == 2 and why.startswith("1 of 3 requests not proven; first: /obj_1KB.png?r=2: carried over 'http/1.1'")
    assert judge_requests(page, {"ok": 3, "error": None}) is None
    assert judge_requests(page, {"ok": 2, "error": None}) == "requests: 2 of 3 answered 200"
    assert judge_requests(page, {"ok": 2, "error": "TypeError: Failed to fetch"}) == "requests: TypeError: Failed to fetch"
    assert judge_requests(page, None) == "requests: the page's script gave no figures"


def _req_trial(seq, proto, lats, rtt=24.0, page="req4x1KB", conns=1, **kw):
    p = parse_page(page)
    res = [_entry(k, 10.0 * k, 10.0 * k + lat) for k, lat in enumerate(lats)]
    return trial(seq=seq, proto=proto, page=p, plt=50.0, cond=conditions(rtt_ms=rtt), resources_json=json.dumps(res),
                 connections=conns, **kw)


def test_a_cells_latency_pools_the_requests_of_its_runs_and_kinds_stay_apart():
    trials = [_req_trial(0, "h3", [10, 20, 30, 40]), _req_trial(1, "h3", [50, 60, 70, 80]),
              _req_trial(2, "h1", [100, 100, 100, 100], conns=4), _req_trial(3, "h1", [1, 1, 1, 1], warmup=True),
              trial(seq=4, proto="h3", size=5000, plt=120.0)]
    rows = stats.latency_table(trials)
    assert [(r["proto"], r["n"], r["n_requests"]) for r in rows] == [("h3", 2, 8), ("h1", 1, 4)]
    assert rows[0]["p50_ms"] == pytest.approx(45.0) and rows[0]["p99_ms"] == pytest.approx(79.3)
    assert rows[1]["p50_ms"] == rows[1]["p99_ms"] == 100.0 and rows[1]["connections"] == 4
    assert {c.page for c in stats.cells(trials).values()} == {"5KB"}  # page-load statistics: pages only
    assert [t.seq for t in stats.usable(trials, "requests")] == [0, 1, 2] and len(stats.usable(trials, None)) == 4


def test_establishment_in_round_trips_beside_what_the_handshakes_need():
    trials = []
    for rtt in (10.0, 100.0):
        for i in range(3):
            trials.append(trial(seq=len(trials), proto="h1", size=5000, cond=conditions(rtt_ms=rtt),
                                connect_ms=2 * rtt + i, ttfb_ms=3 * rtt + 1 + i))
            trials.append(trial(seq=len(trials), proto="h3", size=5000, cond=conditions(rtt_ms=rtt),
                                connect_ms=rtt + i, ttfb_ms=2 * rtt + 1 + i))
    trials.append(trial(seq=99, proto="h3", size=5000, cond=conditions(rtt_ms=10.0, loss_pct=5), connect_ms=500.0,
                        ttfb_ms=900.0))  # under loss: not a handshake's cost
    rows = stats.establishment_table(trials)
    assert [(r["rtt_ms"], r["proto"], r["n"]) for r in rows] == [(10, "h3", 3), (10, "h1", 3), (100, "h3", 3),
                                                                  (100, "h1", 3)]
    tcp100 = rows[3]
    assert (tcp100["connect_ms"], tcp100["first_byte_ms"]) == (201.0, 302.0)
    assert tcp100["connect_rtts"] == pytest.approx(2.01) and tcp100["first_byte_rtts"] == pytest.approx(3.02)
    assert (tcp100["expected_connect_rtts"], tcp100["expected_first_byte_rtts"]) == (2, 3)
    assert (rows[0]["expected_connect_rtts"], rows[0]["expected_first_byte_rtts"]) == (1, 2)


def test_the_report_has_a_section_and_a_figure_per_kind(tmp_path):
    trials = [_req_trial(0, "h3", [10, 20, 30, 40]), _req_trial(1, "h1", [15, 25, 35, 45]),
              _req_trial(2, "h3", [100, 200, 300, 400], rtt=100.0), _req_trial(3, "h1", [150, 250, 350, 450], rtt=100.0)]
    rep = {"rows": [], "datarate": [], "latency": stats.latency_table(trials),
           "establishment": stats.establishment_table([]), "cpu_by_role": [], "warnings": [], "failed": [],
           "axis": "proto", "reference": "h3", "protos": ["h3", "h1"], "ccs": ["cubic"]}
    titles = [t for t, _, _ in report.sections(rep)]
    assert titles == ["Request latency"]
    text = report.format_text(rep)
    assert "Request latency:" in text and "req4x1KB" in text and "p99 ms" in text
    files = plots.latency_plot(rep["latency"], {"link_backend": "linkem"}, tmp_path, "t")
    assert [f.name for f in files] == ["request_latency.png", "request_latency.svg"]
    assert all(os.path.getsize(f) > 1000 for f in files)
    est = [{"rtt_ms": r, "proto": p, "connect_ms": k * r, "first_byte_ms": (k + 1) * r, "expected_connect_rtts": k,
            "expected_first_byte_rtts": k + 1} for r in (10.0, 50.0) for p, k in (("h3", 1), ("h1", 2))]
    assert [f.name for f in plots.establishment_plot(est, {}, tmp_path, "t")] == ["establishment.png", "establishment.svg"]
    assert plots.establishment_plot(est[:2], {}, tmp_path, "t") == []  # one RTT: no line to draw


def test_the_summary_shows_each_kind_with_the_reports_own_table():
    from plt_bench.analysis.summary import tables
    trials = [_req_trial(0, "h3", [10, 20, 30, 40]), trial(seq=1, proto="h1", size=5000, plt=150.0),
              _req_trial(2, "h1", [10, 20], status="failed", reason="requests: 2 of 4 answered 200")]
    got = dict(tables(trials))
    assert list(got) == ["plt-bench: page-load time per cell", "plt-bench: request latency"]
    text = got["plt-bench: request latency"]
    assert "req4x1KB" in text and "p99 ms" in text and text.endswith("failures: requests: 2 of 4 answered 200")
