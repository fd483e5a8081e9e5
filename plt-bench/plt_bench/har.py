"""A trial's HAR 1.2 file, so any HAR viewer draws the trial's waterfall: every request with its
timings, protocol (h3, h2 or http/1.1) and sizes. Built from one of two sources:
- Chromium: its DevTools Network events (chromedriver's performance log): build(). The browser
  worker asks chromedriver for the log (PERF_LOG_CAPABILITY) when the trial captures `har`.
- Firefox: its WebDriver BiDi network events (BIDI_NETWORK_EVENTS, over the session's own
  WebSocket, which geckodriver opens where the launch asks for BIDI_CAPABILITY): build_bidi().
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


# -- Firefox: WebDriver BiDi's network module -----------------------------------------------------
BIDI_CAPABILITY = {"webSocketUrl": True}
BIDI_NETWORK_EVENTS = ("network.beforeRequestSent", "network.responseCompleted", "network.fetchError")


def bidi_header_values(headers: list[dict] | None) -> dict[str, str]:
    """BiDi's [{"name", "value": {"type": "string", "value"}}] -> {name: value} (a repeated name's
    values joined by ", ", as HTTP folds them); a base64 value (bytes) is kept as its text."""
    out: dict[str, str] = {}
    for h in headers or []:
        v = h.get("value")
        text = str(v.get("value", "")) if isinstance(v, dict) else str(v or "")
        name = str(h.get("name", ""))
        out[name] = f"{out[name]}, {text}" if name in out else text
    return out


def bidi_timings(t: dict | None) -> dict:
    """HAR timings (ms) from BiDi's FetchTimingInfo (Firefox gives each mark as ms of the wall clock;
    0: the phase did not happen). blocked: from the request to its first phase; dns, connect, ssl
    where they took time (a reused connection's marks all sit at fetchStart: -1, as HAR asks);
    send 0 (BiDi has no end of the request's sending); wait: request to the response's first byte;
    receive: first byte to last."""
    t = t or {}
    start = t.get("requestTime") or 0

    def span(a: str, b: str) -> float:
        x, y = t.get(a) or 0, t.get(b) or 0
        return round(y - x, 3) if x > 0 and y > x else -1

    first = next((t[k] for k in ("fetchStart", "dnsStart", "connectStart", "requestStart") if (t.get(k) or 0) > 0), 0)
    req, resp, end = t.get("requestStart") or 0, t.get("responseStart") or 0, t.get("responseEnd") or 0
    return {"blocked": round(first - start, 3) if first and start and first >= start else -1,
            "dns": span("dnsStart", "dnsEnd"), "connect": span("connectStart", "connectEnd"),
            "ssl": span("tlsStart", "tlsEnd"), "send": 0,
            "wait": round(resp - req, 3) if req > 0 and resp >= req else 0,
            "receive": round(end - resp, 3) if resp > 0 and end >= resp else 0}


def build_bidi(events: list[dict], browser: str, nav: dict | None = None, page_title: str = "") -> dict:
    """The HAR log of one trial from its BiDi network events (params of BIDI_NETWORK_EVENTS, as
    {"method", "params"}, in order) and its Navigation Timing entry. One entry per request and
    redirect hop (BiDi gives each hop its own beforeRequestSent, the same request id and a higher
    redirectCount); a request that failed (fetchError) keeps its error; one with neither a response
    nor an error (still under way at the end) is left out, as build() leaves it. Sizes: content.size
    the decoded body where Firefox gives it, else the body as it came; bodySize the body over the
    wire; `_transferSize` BiDi's bytesReceived (headers and body); a response from the cache 0."""
    hops: dict[tuple[str, int], dict] = {}
    order: list[tuple[str, int]] = []
    for ev in events:
        method, p = ev.get("method"), ev.get("params") or {}
        r = p.get("request") or {}
        rid = r.get("request")
        if rid is None:
            continue
        key = (str(rid), int(p.get("redirectCount") or 0))
        if key not in hops:
            hops[key] = {"request": r, "sent_ms": (r.get("timings") or {}).get("requestTime") or p.get("timestamp")}
            order.append(key)
        if method == "network.responseCompleted":
            hops[key].update(request=r, response=p.get("response") or {})
        elif method == "network.fetchError":
            hops[key].update(request=r, error=p.get("errorText") or "failed")
    keep = [k for k in order if ("response" in hops[k] or "error" in hops[k])
            and str(hops[k]["request"].get("url", "")).lower().startswith(NETWORK_SCHEMES)]
    entries = [_bidi_entry(hops[k]) for k in keep]
    started = [hops[k]["sent_ms"] for k in keep if hops[k]["sent_ms"]]
    return _log(entries, browser, min(started) / 1000.0 if started else 0.0, nav, page_title, "Firefox")


def _bidi_entry(h: dict) -> dict:
    request, resp = h["request"], h.get("response") or {}
    url = str(request.get("url", ""))
    proto = resp.get("protocol") or "unknown"
    t = bidi_timings(request.get("timings"))
    cached = bool(resp.get("fromCache"))
    transfer = 0 if cached else int(resp.get("bytesReceived") or 0)
    wire_body = int(resp.get("bodySize") or 0) if "bodySize" in resp and resp.get("bodySize") is not None else -1
    decoded = int((resp.get("content") or {}).get("size") or 0)
    rheaders = bidi_header_values(resp.get("headers"))
    entry = {
        "pageref": "page_1",
        "startedDateTime": _iso((h["sent_ms"] or 0) / 1000.0),
        "time": entry_time_ms(t),
        "request": {"method": request.get("method", "GET"), "url": url, "httpVersion": proto, "cookies": [],
                    "headers": _headers(bidi_header_values(request.get("headers"))),
                    "queryString": [{"name": k, "value": v} for k, v in parse_qsl(urlsplit(url).query,
                                                                                  keep_blank_values=True)],
                    "headersSize": int(request.get("headersSize") or -1), "bodySize": int(request.get("bodySize") or 0)},
        "response": {"status": int(resp.get("status", 0) or 0), "statusText": resp.get("statusText", ""),
                     "httpVersion": proto, "cookies": [], "headers": _headers(rheaders),
                     "content": {"size": decoded or max(wire_body, 0), "mimeType": resp.get("mimeType") or "x-unknown"},
                     "redirectURL": "", "headersSize": int(resp.get("headersSize") or -1),
                     "bodySize": 0 if cached else wire_body, "_transferSize": transfer},
        "cache": {},
        "timings": t,
    }
    location = {k.lower(): v for k, v in rheaders.items()}.get("location")
    if location and 300 <= entry["response"]["status"] < 400:
        entry["response"]["redirectURL"] = location
    if cached:
        entry["_fromCache"] = "disk"
    if "error" in h:
        entry["_error"] = h["error"]
    return entry


SCHEMA_PATH = Path(__file__).with_name("har-1.2.schema.json")


def validate(log: dict) -> None:
    """Raise jsonschema.ValidationError unless the log is HAR 1.2 (SCHEMA_PATH)."""
    import jsonschema
    jsonschema.validate(log, json.loads(SCHEMA_PATH.read_text()))
