"""A trial's HAR 1.2 file, so any HAR viewer draws the trial's waterfall: every request with its
timings, protocol (h3, h2 or http/1.1) and sizes. Built from one of two sources:
- Chromium: its DevTools Network events (chromedriver's performance log): build(). The browser
  worker asks chromedriver for the log (PERF_LOG_CAPABILITY) when the trial captures `har`.
- Firefox: its Performance Timeline (Navigation and Resource Timing), read after the load:
  build_from_timeline(). Not WebDriver BiDi's network events, which slowed its loads (docs/browsers.md).
Pure: no browser here.

Sizes, per entry: response.content.size is the decoded body (the bytes of Network.dataReceived,
what Resource Timing calls decodedBodySize); response.bodySize is the body as it came over the
wire (loadingFinished's encodedDataLength less the response's headers, where Chromium gives
both; else -1); `_transferSize` is loadingFinished's encodedDataLength (headers and body).
Timings follow the HAR spec from the response's ResourceTiming (ms since its requestTime);
-1 where a phase did not happen (a reused connection has no dns, connect or ssl).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

HAR_VERSION = "1.2"
# chromedriver: the Network domain's events in the 'performance' log
PERF_LOG_CAPABILITY = {"goog:loggingPrefs": {"performance": "ALL"},
                       "goog:perfLoggingPrefs": {"enableNetwork": True, "enablePage": False}}


def events_of(log_entries: list[dict]) -> list[dict]:
    """chromedriver's performance log entries ({"message": JSON text}) -> the DevTools events
    ({"method", "params"}) of the Network domain, in order."""
    out = []
    for e in log_entries:
        try:
            m = json.loads(e["message"])["message"]
        except (KeyError, TypeError, ValueError):
            continue
        if str(m.get("method", "")).startswith("Network."):
            out.append(m)
    return out


def _iso(wall_s: float) -> str:
    return datetime.datetime.fromtimestamp(wall_s, datetime.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _headers(h: dict | None) -> list[dict]:
    return [{"name": str(k), "value": str(v)} for k, v in (h or {}).items()]


def _phase(t: dict, start: str, end: str) -> float:
    a, b = t.get(start, -1), t.get(end, -1)
    return round(b - a, 3) if a is not None and b is not None and a >= 0 and b >= 0 else -1


def timings(timing: dict | None, finished_s: float | None) -> dict:
    """HAR timings (ms) from a response's DevTools ResourceTiming and the monotonic time its
    loading finished (s). blocked: until the first phase; receive: headers to the last byte."""
    if not timing:
        return {"blocked": -1, "dns": -1, "connect": -1, "ssl": -1, "send": 0, "wait": 0, "receive": 0}
    firsts = [timing.get(k, -1) for k in ("dnsStart", "connectStart", "sendStart")]
    first = next((x for x in firsts if x is not None and x >= 0), 0.0)
    headers_end = timing.get("receiveHeadersEnd", 0.0)
    receive = (finished_s - timing["requestTime"]) * 1000.0 - headers_end if finished_s else 0.0
    return {"blocked": round(first, 3), "dns": _phase(timing, "dnsStart", "dnsEnd"),
            "connect": _phase(timing, "connectStart", "connectEnd"), "ssl": _phase(timing, "sslStart", "sslEnd"),
            "send": max(0.0, _phase(timing, "sendStart", "sendEnd")),
            "wait": max(0.0, round(headers_end - timing.get("sendEnd", headers_end), 3)),
            "receive": max(0.0, round(receive, 3))}


def entry_time_ms(t: dict) -> float:
    """An entry's total time: the sum of its phases (ssl is within connect)."""
    return round(sum(v for k, v in t.items() if k != "ssl" and v > 0), 3)


def finished_requests(events: list[dict]) -> list[str]:
    """The request ids whose loading finished (those with a body to read)."""
    return list(dict.fromkeys(ev["params"]["requestId"] for ev in events
                              if ev.get("method") == "Network.loadingFinished" and "requestId" in ev.get("params", {})))


NETWORK_SCHEMES = ("http:", "https:")  # what a HAR entry's request is (the rest reached no server)


def build(events: list[dict], browser: str, nav: dict | None = None, page_title: str = "",
          bodies: dict[str, tuple[str, bool]] | None = None) -> dict:
    """The HAR log of one trial from its Network events (events_of) and, when the load had one,
    its Navigation Timing entry (the page's onContentLoad and onLoad). bodies: {request id: (body,
    base64?)} from the browser (a recording's), kept as each entry's content.text. A redirect's hop
    is an entry of its own (its status and Location), as DevTools writes it."""
    reqs: dict[str, dict] = {}
    order: list[str] = []
    for ev in events:
        p, method = ev.get("params", {}), ev.get("method")
        rid = p.get("requestId")
        if rid is None:
            continue
        if method == "Network.requestWillBeSent":
            if rid in reqs and p.get("redirectResponse"):  # the hop before: an entry of its own
                hop = f"{rid}#redirect{len(order)}"
                reqs[hop] = {**reqs[rid], "response": p["redirectResponse"]}
                order.insert(order.index(rid), hop)
                order.remove(rid)
            if rid not in order:
                order.append(rid)
            reqs[rid] = {"sent": p, "data": 0, "id": rid}
        elif rid not in reqs:
            continue
        elif method == "Network.responseReceived":
            reqs[rid]["response"] = p["response"]
        elif method == "Network.dataReceived":
            reqs[rid]["data"] += int(p.get("dataLength", 0))
        elif method == "Network.loadingFinished":
            reqs[rid]["finished"] = p
        elif method == "Network.loadingFailed":
            reqs[rid]["failed"] = p
    started = [reqs[r]["sent"].get("wallTime") for r in order if reqs[r]["sent"].get("wallTime")]
    page_start = min(started) if started else 0.0
    # a request of the network only: a page's file:// reference (MkDocs' highlight.js in Debian's mkdocs-doc,
    # which the browser refuses to load from an https page), a data: or blob: URL never reached a server
    entries = [_entry(reqs[r], (bodies or {}).get(r)) for r in order
               if ("response" in reqs[r] or "failed" in reqs[r])
               and str(reqs[r]["sent"].get("request", {}).get("url", "")).lower().startswith(NETWORK_SCHEMES)]
    return _log(entries, browser, page_start, nav, page_title, "Chromium")


def _log(entries: list[dict], browser: str, page_start_s: float, nav: dict | None, page_title: str,
         default_name: str) -> dict:
    """The HAR log around a trial's entries: its one page, timed by its Navigation Timing entry."""
    page_timings = {"onContentLoad": -1, "onLoad": -1}
    if nav:
        page_timings = {"onContentLoad": round(nav.get("domContentLoadedEventEnd", -1), 3),
                        "onLoad": round(nav.get("loadEventEnd", -1), 3)}
    name, _, version = browser.partition(" ")
    return {"log": {"version": HAR_VERSION, "creator": {"name": "plt-bench", "version": "1"},
                    "browser": {"name": name or default_name, "version": version or "unknown"},
                    "pages": [{"startedDateTime": _iso(page_start_s), "id": "page_1", "title": page_title,
                               "pageTimings": page_timings}],
                    "entries": entries}}


def _entry(r: dict, content: tuple[str, bool] | None = None) -> dict:
    sent, resp, fin = r["sent"], r.get("response") or {}, r.get("finished")
    request = sent["request"]
    url = request["url"]
    proto = resp.get("protocol") or "unknown"
    t = timings(resp.get("timing"), fin["timestamp"] if fin else None)
    transfer = int(fin["encodedDataLength"]) if fin else 0
    headers_bytes = int(resp.get("encodedDataLength", -1) or -1)
    body = transfer - headers_bytes if fin and headers_bytes >= 0 and transfer >= headers_bytes else -1
    entry = {
        "pageref": "page_1",
        "startedDateTime": _iso(sent.get("wallTime", 0.0)),
        "time": entry_time_ms(t),
        "request": {"method": request.get("method", "GET"), "url": url, "httpVersion": proto, "cookies": [],
                    "headers": _headers(request.get("headers")),
                    "queryString": [{"name": k, "value": v} for k, v in parse_qsl(urlsplit(url).query,
                                                                                  keep_blank_values=True)],
                    "headersSize": -1, "bodySize": 0},
        "response": {"status": int(resp.get("status", 0)), "statusText": resp.get("statusText", ""),
                     "httpVersion": proto, "cookies": [], "headers": _headers(resp.get("headers")),
                     "content": {"size": r["data"], "mimeType": resp.get("mimeType", "x-unknown")},
                     "redirectURL": "", "headersSize": -1, "bodySize": body, "_transferSize": transfer},
        "cache": {},
        "timings": t,
    }
    if content is not None:
        entry["response"]["content"]["text"] = content[0]
        if content[1]:
            entry["response"]["content"]["encoding"] = "base64"
    location = {k.lower(): v for k, v in (resp.get("headers") or {}).items()}.get("location")
    if location and 300 <= entry["response"]["status"] < 400:
        entry["response"]["redirectURL"] = str(location)
    if resp.get("remoteIPAddress"):
        entry["serverIPAddress"] = resp["remoteIPAddress"]
    if resp.get("connectionId") is not None:
        entry["connection"] = str(resp["connectionId"])
    if "failed" in r:
        entry["_error"] = r["failed"].get("errorText", "failed")
    return entry


# -- Firefox: its Performance Timeline, read after the load -----------------------------------------
# Read by the worker after the trial's figures: every entry whole, and the clock they count from.
TIMELINE_JS = ("return [performance.timeOrigin, "
               "performance.getEntriesByType('navigation').map(e => e.toJSON()), "
               "performance.getEntriesByType('resource').map(e => e.toJSON())];")


def timeline_timings(e: dict) -> dict:
    """HAR timings (ms) from a Navigation or Resource Timing entry (ms from the navigation's start):
    blocked, from the entry's start to its first phase; dns, connect and ssl where they took time (a
    reused connection's marks all sit at fetchStart: -1, as HAR asks; ssl lies within connect); send
    0 (the timeline has no end of the request's sending); wait, request to first byte; receive, first
    byte to last."""
    def at(k: str) -> float:
        v = e.get(k)
        return float(v) if isinstance(v, (int, float)) and v > 0 else 0.0

    def span(a: str, b: str) -> float:
        x, y = at(a), at(b)
        return round(y - x, 3) if x > 0 and y > x else -1

    dns, connect = span("domainLookupStart", "domainLookupEnd"), span("connectStart", "connectEnd")
    ssl = span("secureConnectionStart", "connectEnd") if connect > 0 else -1
    first = at("domainLookupStart") if dns > 0 else at("connectStart") if connect > 0 else at("requestStart")
    start, req, resp, end = at("startTime"), at("requestStart"), at("responseStart"), at("responseEnd")
    return {"blocked": round(first - start, 3) if first >= start and first > 0 else -1,
            "dns": dns, "connect": connect, "ssl": ssl, "send": 0,
            "wait": round(resp - req, 3) if req > 0 and resp >= req else 0,
            "receive": round(end - resp, 3) if resp > 0 and end >= resp else 0}


def build_from_timeline(time_origin_ms: float, navigation: list[dict], resources: list[dict], browser: str,
                        page_title: str = "") -> dict:
    """The HAR log of one trial from the page's Performance Timeline (TIMELINE_JS: the clock's origin
    in ms of the wall clock, the navigation entry, the resource entries), as Firefox gives it after
    the load. Each entry: its URL, the protocol it went over (nextHopProtocol), its status, sizes
    (content.size the decoded body; bodySize the body over the wire, 0 from the cache; `_transferSize`
    headers and body) and phases; no headers (the timeline has none) and no request that did not
    complete. What the timeline does not hold is not in it: a redirect's hop, a failed request, an
    iframe's or a worker's requests."""
    entries = []
    for e in [*navigation[:1], *sorted(resources, key=lambda r: r.get("startTime") or 0)]:
        url = str(e.get("name", ""))
        if not url.lower().startswith(NETWORK_SCHEMES):
            continue
        t = timeline_timings(e)
        proto = e.get("nextHopProtocol") or "unknown"
        transfer = int(e.get("transferSize") or 0)
        entry = {
            "pageref": "page_1",
            "startedDateTime": _iso((time_origin_ms + float(e.get("startTime") or 0)) / 1000.0),
            "time": entry_time_ms(t),
            "request": {"method": "GET", "url": url, "httpVersion": proto, "cookies": [], "headers": [],
                        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(urlsplit(url).query,
                                                                                      keep_blank_values=True)],
                        "headersSize": -1, "bodySize": 0},
            "response": {"status": int(e.get("responseStatus") or 0), "statusText": "", "httpVersion": proto,
                         "cookies": [], "headers": [],
                         "content": {"size": int(e.get("decodedBodySize") or 0), "mimeType": "x-unknown"},
                         "redirectURL": "", "headersSize": -1,
                         "bodySize": int(e.get("encodedBodySize") or 0) if transfer else 0, "_transferSize": transfer},
            "cache": {},
            "timings": t,
            "_initiatorType": str(e.get("initiatorType") or ""),
        }
        entries.append(entry)
    nav = navigation[0] if navigation else None
    return _log(entries, browser, time_origin_ms / 1000.0, nav, page_title, "Firefox")


SCHEMA_PATH = Path(__file__).with_name("har-1.2.schema.json")


def validate(log: dict) -> None:
    """Raise jsonschema.ValidationError unless the log is HAR 1.2 (SCHEMA_PATH)."""
    import jsonschema
    jsonschema.validate(log, json.loads(SCHEMA_PATH.read_text()))
