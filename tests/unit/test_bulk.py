"""Bulk pages (throughput over time), their pure parts: the page and its parsing, the link's counter
turned into intervals, a trial's figures and judgement, the datarate table and its figures."""
import json
import os
import xml.etree.ElementTree as ET

import pytest

from plt_bench import pages
from plt_bench.pages import bulk
from plt_bench.analysis import plots, stats
from plt_bench.pages.bulk import judge_bulk
from plt_bench.conditions import Conditions
from plt_bench.errors import UsageError
from plt_bench.link.counters import parse_net_dev, per_interval
from plt_bench.pages.bulk import BULK_BYTES, BULK_NAME
from plt_bench.pages import Page, parse_page

from .trials import conditions, trial


def test_bulk_pages_parse_label_and_name_their_files():
    p = parse_page("bulk30s")
    assert (p.bulk_ms, p.interval_ms, p.label, p.html_name) == (30_000, 1000, "bulk30s", "bulk30s.html")
    q = parse_page(" bulk10s_100ms ")
    assert (q.bulk_ms, q.interval_ms, q.label) == (10_000, 100, "bulk10s_100ms")
    assert parse_page(q.label) == q and parse_page("bulk1500ms_500ms").label == "bulk1500ms_500ms"
    assert [n for n, _, _ in p.files()] == ["bulk30s.html", BULK_NAME] and p.files()[1][1] == BULK_BYTES
    html = p.html().decode()
    assert p.html_bytes == len(p.html()) == p.total_bytes and html.startswith("<!DOCTYPE html>")
    assert "const D = 30000, I = 1000" in html and 'fetch("/bulk.bin"' in html and "window.pltBench" in html
    assert sorted([Page(5000), p, Page(5000, 200), q], key=Page.sort_key) == [Page(5000), Page(5000, 200), q, p]
    assert p.expected_bytes(10**7) == p.total_bytes + 30 * 10**7 // 8 and Page(5000).expected_bytes(None) == 5000


@pytest.mark.parametrize("text,fragment", [
    ("bulk", "not a bulk download; expected bulkD or bulkD_I"),
    ("bulk30", "not a bulk download"),
    ("bulkfast", "not a bulk download"),
    ("bulk0.5s", "lasts 1s to 600s"),
    ("bulk601s", "lasts 1s to 600s"),
    ("bulk30s_7s", "divides the duration"),
    ("bulk30s_5ms", "10 ms or more"),
    ("bulk1.5ms", "whole milliseconds"),
])
def test_bad_bulk_pages_are_refused_naming_the_option(text, fragment):
    with pytest.raises(UsageError, match="^--size: ") as e:
        parse_page(text)
    assert fragment in str(e.value)


def test_the_bulk_body_is_a_sparse_file_made_once(tmp_path):
    sites = pages.Sites(tmp_path)
    html = sites.ensure([parse_page("bulk2s")])[parse_page("bulk2s")]
    body = tmp_path / BULK_NAME
    assert html.read_bytes() == parse_page("bulk2s").html()
    st = body.stat()
    assert st.st_size == BULK_BYTES and st.st_blocks * 512 < 1 << 20  # no disk used
    sites.ensure([parse_page("bulk5s_500ms")])
    assert body.stat().st_mtime_ns == st.st_mtime_ns and (tmp_path / "bulk5s_500ms.html").is_file()
    with open(body, "r+b") as f:
        f.truncate(10)  # a wrong size is made again
    sites.ensure([parse_page("bulk2s")])
    assert body.stat().st_size == BULK_BYTES
    assert not any(p.suffix == ".part" for p in tmp_path.iterdir())


def test_the_net_dev_reader_takes_the_transmitted_bytes():
    text = ("Inter-|   Receive                                                |  Transmit\n"
            " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
            "    lo:  1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n"
            "pb3-rc: 5555      50    0    0    0     0          0         0  9876543    6000    0    0    0     0       0          0\n")
    assert parse_net_dev(text, "pb3-rc") == 9876543 and parse_net_dev(text, "lo") == 1000
    with pytest.raises(Exception, match="no device eth9"):
        parse_net_dev(text, "eth9")


def test_intervals_are_linear_between_samples_and_add_up_to_the_counter():
    samples = [(100.0, 0), (100.4, 400), (101.0, 1000), (101.5, 1000), (102.2, 3800)]
    got = per_interval(samples, 100.2, 0.5, 3)  # edges 100.2, 100.7, 101.2, 101.7: counter 200, 700, 1000, 1800
    assert got == pytest.approx([500, 300, 800])
    assert sum(got) == pytest.approx(1800 - 200)  # the counter's move across the window, interpolated at its edges
    assert per_interval(samples, 99.9, 0.5, 2) is None  # begins before the first sample
    assert per_interval(samples, 101.0, 0.5, 3) is None  # ends after the last
    assert per_interval(samples[:1], 100.0, 0.0, 0) is None


def _work(bins, start_ms=500.0, **kw):
    base = {"duration_ms": 1000 * len(bins), "interval_ms": 1000, "bins": bins, "bytes": sum(bins), "status": 200,
            "request_ms": 400.0, "start_ms": start_ms, "end_ms": start_ms + 1000 * len(bins), "ended_ms": None,
            "error": None, "time_origin_ms": 1_000_000.0}
    base.update(kw)
    return base


def test_a_bulk_trials_figures_come_from_the_browser_and_the_link_over_one_window():
    page = parse_page("bulk3s")
    start = 1000.5  # time_origin 1_000_000 ms + start_ms 500 ms
    samples = [(start - 0.2 + 0.1 * k, 1_000_000 + 125_000 * k) for k in range(35)]  # 10 Mbit/s at the link
    f = bulk.figures(page, _work([1_200_000, 1_250_000, 1_240_000]), samples, "pb3-rc")
    assert f["bulk_ms"] == 3000 and f["interval_ms"] == 1000 and f["bulk_bytes"] == 3_690_000
    assert f["goodput_bps"] == pytest.approx(8 * 3_690_000 / 3)
    assert f["throughput_bps"] == pytest.approx(10**7)
    s = json.loads(f["series_json"])
    assert s["link_bytes"] == pytest.approx([1_250_000] * 3) and s["browser_bytes"] == [1_200_000, 1_250_000, 1_240_000]
    assert s["start_unix_s"] == start and s["interval_s"] == 1.0 and s["link_device"] == "pb3-rc"
    assert s["link_samples"][0] == [-0.2, 0] and len(s["link_samples"]) == 35
    short = bulk.figures(page, _work([1, 2, 3]), samples[:20], "pb3-rc")  # the samples end inside the window
    assert short["throughput_bps"] is None and json.loads(short["series_json"])["link_bytes"] is None
    assert bulk.figures(page, None, samples) == {"bulk_ms": 3000, "interval_ms": 1000}
    # what a load of it waits for, asked of its kind (pages.PageKind): a generated page waits for nothing
    cond, single = Conditions(None, None, rtt_ms=100), Page(5000)
    assert page.page_kind is bulk.BULK and page.page_kind.counts_delivery and not single.page_kind.counts_delivery
    assert page.page_kind.await_s(page, cond) == pytest.approx(3 + bulk.AWAIT_SPARE_S + 0.4)
    assert single.page_kind.await_s(single, cond) == 0
    fine = parse_page("bulk1s_10ms")
    assert page.page_kind.sample_s(page) == 0.1 and fine.page_kind.sample_s(fine) == 0.01
    # a QUIC download's abort is given time to reach the server (a killed TCP client's kernel resets)
    assert page.page_kind.settle_s(page, "QUIC", 100) == pytest.approx(bulk.SETTLE_S + 1.0)
    assert page.page_kind.settle_s(page, "TCP", 100) == 0 and single.page_kind.settle_s(single, "QUIC", 100) == 0


def test_the_judgement_of_a_bulk_download():
    page = parse_page("bulk3s")
    ok = _work([10, 20, 30])
    log = [{"uri": "/bulk.bin", "proto": "h3", "status": 200, "size": 90}]
    assert judge_bulk("h3", page, ok, log) is None and judge_bulk("h3", page, ok, None) is None
    assert "no figures" in judge_bulk("h3", page, None, log)
    assert "TypeError: x" in judge_bulk("h3", page, {**ok, "error": "TypeError: x"}, log)
    assert "status 404" in judge_bulk("h3", page, {**ok, "status": 404}, log)
    assert "ended after 1.5 s, before the 3 s asked" in judge_bulk("h3", page, {**ok, "ended_ms": 1500.0}, log)
    assert "no byte arrived in 3 s" in judge_bulk("h3", page, _work([0, 0, 0]), log)
    assert "logged 0 requests of /bulk.bin" in judge_bulk("h3", page, ok, [])
    assert "logged 2 requests" in judge_bulk("h3", page, ok, log * 2)
    assert "saw h3, expected h1" in judge_bulk("h1", page, ok, log)
    assert "fewer than the 60" in judge_bulk("h3", page, ok, [{**log[0], "size": 59}])


def _bulk_trial(seq, proto, loss, link_mbps, good_mbps, page="bulk3s", rtt=24.0, **kw):
    p = parse_page(page)
    n = p.bulk_ms // p.interval_ms
    series = {"start_unix_s": 1.0, "interval_s": p.interval_ms / 1000, "link_device": "d", "link_samples": [],
              "browser_bytes": [good_mbps * 1e6 / 8 * p.interval_ms / 1000] * n,
              "link_bytes": [link_mbps * 1e6 / 8 * p.interval_ms / 1000] * n}
    return trial(seq=seq, proto=proto, page=p, plt=50.0, cond=conditions(rtt_ms=rtt, loss_pct=loss),
                 throughput_bps=link_mbps * 1e6,
                 goodput_bps=good_mbps * 1e6, bulk_bytes=1, series_json=json.dumps(series), **kw)


def test_the_datarate_table_is_mean_and_sd_per_protocol_and_loss_and_pages_apart():
    trials = [_bulk_trial(0, "h3", 0, 9.0, 8.5), _bulk_trial(1, "h3", 0, 9.5, 9.0), _bulk_trial(2, "h3", 0, 10.0, 9.5),
              _bulk_trial(3, "h1", 0, 9.8, 9.6), _bulk_trial(4, "h1", 5, 2.0, 1.8),
              _bulk_trial(5, "h1", 5, 1.0, 0.9, warmup=True), _bulk_trial(6, "h1", 5, 3.0, 2.0, status="failed"),
              trial(seq=7, proto="h3", size=5000, plt=120.0), trial(seq=8, proto="h1", size=5000, plt=150.0)]
    rows = stats.datarate_table(trials)
    assert [(r["proto"], r["loss_pct"], r["n"]) for r in rows] == [("h3", 0, 3), ("h1", 0, 1), ("h1", 5, 1)]
    q = rows[0]
    assert q["throughput_mean_mbps"] == pytest.approx(9.5) and q["throughput_sd_mbps"] == pytest.approx(0.5)
    assert q["goodput_mean_mbps"] == pytest.approx(9.0) and q["n_link"] == 3 and q["page"] == "bulk3s"
    assert rows[1]["throughput_sd_mbps"] is None  # one run: no spread to tell
    # page-load statistics leave the bulk trials out, and the bulk figures the pages
    assert {c.page for c in stats.cells(trials).values()} == {"5KB"}
    series = stats.throughput_series(trials)
    assert len(series) == 5 * 3 and {r["t_s"] for r in series} == {1.0, 2.0, 3.0}
    assert series[0]["link_mbps"] == pytest.approx(9.0) and series[0]["browser_mbps"] == pytest.approx(8.5)


def test_datarate_and_over_time_figures_are_images(tmp_path):
    trials = [_bulk_trial(i, proto, loss, m - loss / 2, m - loss, rtt=rtt)
              for i, (proto, loss, rtt, m) in enumerate((p, lo, r, 9.0 + i % 2) for p in ("h3", "h1")
                                                        for lo in (0, 5, 10) for r in (24.0, 100.0) for i in range(2))]
    files = plots.datarate_plot(stats.datarate_table(trials), {"link_backend": "linkem"}, tmp_path, "t")
    files += plots.throughput_time_plot(stats.throughput_series(trials), {}, tmp_path, "t")
    assert sorted(f.name for f in files) == sorted(["datarate_vs_loss.png", "datarate_vs_loss.svg",
                                                    "throughput_time_10mbit_rtt24.png", "throughput_time_10mbit_rtt24.svg",
                                                    "throughput_time_10mbit_rtt100.png", "throughput_time_10mbit_rtt100.svg"])
    for f in files:
        assert os.path.getsize(f) > 1000
        if f.suffix == ".svg":
            assert ET.parse(f).getroot().tag.endswith("svg")
    assert plots.datarate_plot([], {}, tmp_path, "t") == [] and plots.throughput_time_plot([], {}, tmp_path, "t") == []
