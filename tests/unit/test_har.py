"""plt_bench.har: DevTools Network events to HAR 1.2 (pure), valid against the schema."""

import json

import jsonschema
import pytest

from plt_bench import har
from plt_bench.pages import HOST, page_url

URL = "https://plt.test/objects_2x5KB.html?trial=ab"


def timing(t0, dns=-1, connect=(-1, -1), ssl=(-1, -1), send=(20.0, 20.5), headers_end=40.0):
    return {"requestTime": t0, "dnsStart": dns, "dnsEnd": dns + 1 if dns >= 0 else -1, "connectStart": connect[0],
            "connectEnd": connect[1], "sslStart": ssl[0], "sslEnd": ssl[1], "sendStart": send[0], "sendEnd": send[1],
            "receiveHeadersEnd": headers_end}


def request(rid, url, wall, t0, proto, tm, body, conn, headers_bytes=100, finish_after_s=0.05, failed=False):
    evs = [{"method": "Network.requestWillBeSent",
            "params": {"requestId": rid, "wallTime": wall, "timestamp": t0,
                       "request": {"url": url, "method": "GET", "headers": {"User-Agent": "x"}}}}]
    if failed:
        return evs + [{"method": "Network.loadingFailed", "params": {"requestId": rid, "errorText": "net::ERR_QUIC_PROTOCOL_ERROR"}}]
    evs.append({"method": "Network.responseReceived",
                "params": {"requestId": rid, "response": {"url": url, "status": 200, "statusText": "", "protocol": proto,
                                                          "headers": {"content-type": "text/html"}, "mimeType": "text/html",
                                                          "timing": tm, "connectionId": conn, "remoteIPAddress": "10.0.0.2",
                                                          "encodedDataLength": headers_bytes}}})
    half = body // 2
    evs += [{"method": "Network.dataReceived", "params": {"requestId": rid, "dataLength": half, "encodedDataLength": half}},
            {"method": "Network.dataReceived", "params": {"requestId": rid, "dataLength": body - half,
                                                          "encodedDataLength": body - half}},
            {"method": "Network.loadingFinished", "params": {"requestId": rid, "timestamp": t0 + finish_after_s,
                                                             "encodedDataLength": body + headers_bytes}}]
    return evs


def page_events():
    evs = request("1", URL, 1700000000.0, 100.0, "h3", timing(100.0, dns=0.5, connect=(2.0, 12.0), ssl=(2.0, 12.0)),
                  700, 7)
    evs += request("2", "https://plt.test/obj_5KB.png?i=0", 1700000000.06, 100.06, "h3", timing(100.06), 5000, 7)
    evs += request("3", "https://plt.test/obj_5KB.png?i=1", 1700000000.06, 100.06, "h3", timing(100.06), 5000, 7)
    return evs


def test_a_pages_events_give_one_entry_per_request_with_sizes_and_protocol():
    log = har.build(page_events(), "Chromium 142.0.1", {"domContentLoadedEventEnd": 90.5, "loadEventEnd": 130.25})
    har.validate(log)
    entries = log["log"]["entries"]
    assert len(entries) == 3 and {e["response"]["httpVersion"] for e in entries} == {"h3"}
    assert [e["response"]["content"]["size"] for e in entries] == [700, 5000, 5000]
    assert [e["response"]["bodySize"] for e in entries] == [700, 5000, 5000]
    assert entries[1]["request"]["queryString"] == [{"name": "i", "value": "0"}] and entries[1]["connection"] == "7"
    first = entries[0]["timings"]
    assert first["dns"] == 1 and first["connect"] == 10 and first["ssl"] == 10 and first["blocked"] == 0.5
    assert first["wait"] == pytest.approx(19.5) and first["receive"] == pytest.approx(10.0)
    assert entries[0]["time"] == pytest.approx(0.5 + 1 + 10 + 0.5 + 19.5 + 10.0)
    assert entries[1]["timings"]["connect"] == -1  # the connection was reused
    assert log["log"]["pages"][0]["pageTimings"] == {"onContentLoad": 90.5, "onLoad": 130.25}
    assert log["log"]["pages"][0]["startedDateTime"] == "2023-11-14T22:13:20.000Z"
    assert log["log"]["browser"] == {"name": "Chromium", "version": "142.0.1"}


def test_a_failed_request_is_an_entry_with_its_error_and_the_file_stays_valid():
    evs = page_events() + request("4", "https://plt.test/obj_5KB.png?i=2", 1700000000.1, 100.1, "", None, 0, 0,
                                  failed=True)
    log = har.build(evs, "Chromium 142", None)
    har.validate(log)
    assert log["log"]["entries"][-1]["_error"] == "net::ERR_QUIC_PROTOCOL_ERROR"
    assert log["log"]["pages"][0]["pageTimings"] == {"onContentLoad": -1, "onLoad": -1}


def test_what_reached_no_server_is_no_entry():
    """A page's file:// reference (Debian's mkdocs-doc names highlight.js so; the browser refuses it from an
    https page), a data: URL: no server saw them, so the HAR (and a recording made of it) holds none."""
    evs = page_events() + request("5", "file:///usr/share/javascript/highlight.js/highlight.min.js", 1700000000.1,
                                  100.1, "", None, 0, 0, failed=True) + request(
        "6", "data:image/png;base64,iVBORw0KGgo=", 1700000000.1, 100.1, "", timing(100.1), 8, 0)
    log = har.build(evs, "Chromium 142", None)
    har.validate(log)
    assert [e["request"]["url"].split(":")[0] for e in log["log"]["entries"]] == ["https"] * 3


def test_the_performance_log_is_read_and_other_domains_left_out():
    entries = [{"message": json.dumps({"message": e, "webview": "x"}), "level": "INFO", "timestamp": 1}
               for e in page_events()]
    entries.append({"message": json.dumps({"message": {"method": "Page.frameNavigated", "params": {}}})})
    entries.append({"message": "not json"})
    assert har.events_of(entries) == page_events()


def test_the_schema_refuses_what_har_does_not_allow():
    log = har.build(page_events(), "Chromium 142", None)
    for breaks in (lambda l: l["log"].pop("creator"), lambda l: l["log"]["entries"][0]["timings"].pop("wait"),
                   lambda l: l["log"]["entries"][0]["response"]["content"].update(size="700"),
                   lambda l: l["log"]["entries"][0].update(startedDateTime="yesterday")):
        bad = json.loads(json.dumps(log))
        breaks(bad)
        with pytest.raises(jsonschema.ValidationError):
            har.validate(bad)


def test_a_recordings_har_keeps_every_body_and_each_redirect_hop_as_an_entry():
    evs = page_events()
    # request 4 is redirected once: the hop (301, Location) and the request it became share an id
    hop = {"url": "https://plt.test/old.png", "status": 301, "statusText": "", "protocol": "h3",
           "headers": {"Location": "/obj_5KB.png?i=9"}, "mimeType": "", "encodedDataLength": 90}
    evs += [{"method": "Network.requestWillBeSent", "params": {"requestId": "4", "wallTime": 1700000000.07,
                                                                "timestamp": 100.07,
                                                                "request": {"url": "https://plt.test/old.png"}}},
            {"method": "Network.requestWillBeSent", "params": {"requestId": "4", "wallTime": 1700000000.08,
                                                                "timestamp": 100.08, "redirectResponse": hop,
                                                                "request": {"url": "https://plt.test/obj_5KB.png?i=9"}}}]
    evs += request("4", "https://plt.test/obj_5KB.png?i=9", 1700000000.08, 100.08, "h3", timing(100.08), 5000, 7)[1:]
    assert har.finished_requests(evs) == ["1", "2", "3", "4"]
    log = har.build(evs, "Chromium 142", None, bodies={"1": ("<html>", False), "2": ("iVBORw0K", True)})
    har.validate(log)
    entries = log["log"]["entries"]
    assert [(e["request"]["url"][-12:], e["response"]["status"]) for e in entries][3:] == [
        ("ttps://plt.test/old.png"[-12:], 301), ("/obj_5KB.png?i=9"[-12:], 200)]
    assert entries[3]["response"]["redirectURL"] == "/obj_5KB.png?i=9"
    assert entries[0]["response"]["content"]["text"] == "<html>" and "encoding" not in entries[0]["response"]["content"]
    assert entries[1]["response"]["content"] == {"size": 5000, "mimeType": "text/html", "text": "iVBORw0K",
                                                 "encoding": "base64"}
    assert "text" not in entries[2]["response"]["content"]  # no body given: none written


# -- Firefox: its Performance Timeline after the load (entries as Firefox 153 gave them, 2026-11-28) ----
ORIGIN_MS = 1795852134253.781


def timeline_entry(name, start, marks, proto="h3", status=200, size=5000, transfer=5300, initiator="img"):
    return {"name": name, "entryType": "resource", "startTime": start, "initiatorType": initiator,
            "nextHopProtocol": proto, "responseStatus": status, "decodedBodySize": size, "encodedBodySize": size,
            "transferSize": transfer, "fetchStart": start, "domainLookupStart": start, "domainLookupEnd": start,
            "connectStart": start, "secureConnectionStart": 0, "connectEnd": start, **marks}


def test_firefox_s_timeline_gives_one_entry_per_request_with_its_protocol_phases_and_sizes():
    page = page_url(HOST, "/objects_2x5KB.html?trial=ab")
    nav = {**timeline_entry(page, 0, {"fetchStart": 10, "domainLookupStart": 10, "domainLookupEnd": 10.3,
                                       "connectStart": 10.4, "secureConnectionStart": 10.4, "connectEnd": 60.4,
                                       "requestStart": 61, "responseStart": 101, "responseEnd": 102},
                           size=700, transfer=1000, initiator="navigation"),
           "entryType": "navigation", "domContentLoadedEventEnd": 90.5, "loadEventEnd": 130.25}
    reused = timeline_entry(page_url(HOST, "/obj_5KB.png?i=0"), 120, {"requestStart": 121, "responseStart": 161,
                                                                      "responseEnd": 170})
    cached = timeline_entry(page_url(HOST, "/obj_5KB.png?i=1"), 110, {"requestStart": 0, "responseStart": 111,
                                                                      "responseEnd": 111}, transfer=0)
    inline = timeline_entry("data:image/png;base64,AAAA", 100, {})
    log = har.build_from_timeline(ORIGIN_MS, [nav], [reused, inline, cached], "Firefox 153.8.0", page)
    har.validate(log)
    assert log["log"]["browser"] == {"name": "Firefox", "version": "153.8.0"}
    es = log["log"]["entries"]
    assert [e["request"]["url"] for e in es] == [page, page_url(HOST, "/obj_5KB.png?i=1"),
                                                 page_url(HOST, "/obj_5KB.png?i=0")]  # by start; no data: URL
    first, from_cache, moved = es
    assert first["response"]["httpVersion"] == first["request"]["httpVersion"] == "h3"
    # a new connection's phases; ssl lies within connect, as HAR has it (not counted twice in time)
    assert first["timings"] == {"blocked": 10.0, "dns": 0.3, "connect": 50.0, "ssl": 50.0, "send": 0, "wait": 40.0,
                                "receive": 1.0}
    assert first["time"] == 101.3 and first["response"]["content"]["size"] == 700 and first["_initiatorType"] == "navigation"
    assert first["startedDateTime"] == "2026-11-28T07:48:54.253Z"
    # a reused connection: its marks all at fetchStart, so no dns, connect or ssl
    assert moved["timings"] == {"blocked": 1.0, "dns": -1, "connect": -1, "ssl": -1, "send": 0, "wait": 40.0,
                                "receive": 9.0}
    assert (moved["response"]["bodySize"], moved["response"]["_transferSize"], moved["response"]["status"]) == \
        (5000, 5300, 200)
    assert (from_cache["response"]["bodySize"], from_cache["response"]["_transferSize"]) == (0, 0)
    assert from_cache["response"]["content"]["size"] == 5000
    assert log["log"]["pages"][0]["pageTimings"] == {"onContentLoad": 90.5, "onLoad": 130.25}
    assert log["log"]["pages"][0]["startedDateTime"] == "2026-11-28T07:48:54.253Z"


def test_a_timeline_with_no_navigation_entry_still_makes_a_valid_har():
    log = har.build_from_timeline(ORIGIN_MS, [], [], "Firefox")
    har.validate(log)
    assert log["log"]["entries"] == [] and log["log"]["pages"][0]["pageTimings"]["onLoad"] == -1
    assert har.timeline_timings({})["blocked"] == -1 and har.timeline_timings({})["wait"] == 0
