"""The judgement every trial shares, whatever its page's kind: its Navigation Timing as named
durations, its paint metrics, its connections and resumptions from the server's log, and what
carried a discovery trial's requests. A kind's own judgement (its document, its objects, its
script's figures) is its module's (plt_bench.pages); make_trial (trial.evidence) joins both.
"""

from __future__ import annotations

from .. import protocols
from ..pages import HOST, url_host


def _ms(nav: dict, end: str, start: str = "startTime") -> float | None:
    a, b = nav.get(start), nav.get(end)
    if a is None or b is None or b <= 0:
        return None
    return float(b) - float(a)


def timings(nav: dict, untimed: list[str] = ()) -> dict:
    """Named durations in ms from a PerformanceNavigationTiming entry (None where not applicable, and
    where the browser did not time the field: untimed, browsers.base.Browser.untimed)."""
    nav = {k: v for k, v in nav.items() if k not in untimed}
    tls = None
    if nav.get("secureConnectionStart") and nav.get("connectEnd"):
        tls = float(nav["connectEnd"]) - float(nav["secureConnectionStart"])
    return {
        "plt_ms": _ms(nav, "loadEventEnd"),
        "dns_ms": _ms(nav, "domainLookupEnd", "domainLookupStart"),
        "connect_ms": _ms(nav, "connectEnd", "connectStart"),
        "tls_ms": tls,
        "ttfb_ms": _ms(nav, "responseStart"),
        "response_end_ms": _ms(nav, "responseEnd"),
        "dcl_ms": _ms(nav, "domContentLoadedEventEnd"),
    }


def protocol_mix(nav: dict, resources: list[dict] | None, page_host: str) -> dict:
    """What carried a discovery trial's requests, as the browser says (pure; judge and judge_objects
    hold the server to the same): the page's next hop, requests per protocol per origin (the page's
    own first; an object from the cache counts for none), and when the first request over h3 began
    (ms from startTime; None: no request went over h3)."""
    per: dict[str, dict[str, int]] = {}
    starts = []
    for host, hop, start in [(page_host, nav.get("nextHopProtocol"), 0.0)] + [
            (url_host(r.get("name")), r.get("nextHopProtocol"), r.get("startTime")) for r in resources or []]:
        p = protocols.by_next_hop(hop)
        if p is None:  # from the cache: no request
            continue
        per.setdefault(host, {}).setdefault(p.name, 0)
        per[host][p.name] += 1
        if p.name == "h3" and start is not None:
            starts.append(float(start))
    return {"page": nav.get("nextHopProtocol"), "per_origin": per, "first_h3_ms": min(starts) if starts else None}


def connections(server_entries: list[dict] | None) -> int | None:
    """How many connections carried a trial's requests: the client ports in the server's log (HTTP/1.1
    opens up to six per host; HTTP/2 and HTTP/3 one), or None when the log gives no ports."""
    ports = {e.get("remote_port") for e in server_entries or [] if e.get("remote_port")}
    return len(ports) or None


def resumed_connections(server_entries: list[dict] | None) -> int | None:
    """How many connections of a load resumed a TLS session, as the server's log says (its client
    ports whose requests say resumed); None where it says nothing."""
    said = {(e.get("host"), e.get("remote_port")): e["resumed"] for e in server_entries or []
            if e.get("resumed") is not None and e.get("remote_port")}
    return sum(bool(v) for v in said.values()) if said else None


def zero_rtt_summary(states: list[str]) -> str | None:
    """A repeat visit's QUIC sessions' 0-RTT states (net-log) in a word: succeeded, rejected, not
    attempted, or each with its count where they differ; None without a QUIC session."""
    words = {"AttemptedAndSucceeded": "succeeded", "AttemptedAndRejected": "rejected", "NotAttempted": "not attempted"}
    said = [words.get(s, str(s)) for s in states]
    if not said:
        return None
    if len(set(said)) == 1:
        return said[0]
    return ", ".join(f"{w} {said.count(w)}" for w in dict.fromkeys(said))


def connections_per_origin(server_entries: list[dict] | None) -> dict[str, int]:
    """{host: connections} of a trial's requests: the client ports per origin in the server's log
    (each origin has its own address, so a connection serves one origin); {} without ports."""
    ports: dict[str, set] = {}
    for e in server_entries or []:
        if e.get("remote_port"):
            ports.setdefault(e.get("host") or HOST, set()).add(e["remote_port"])
    return {h: len(p) for h, p in sorted(ports.items(), key=lambda kv: (kv[0] != HOST, kv[0]))}


def _waited(p: dict) -> str:
    return f"{p['waited_ms']:.0f} ms after the load" if isinstance(p.get("waited_ms"), (int, float)) else "after the load"


def paint_fields(paint: dict | None, loaded: bool) -> dict:
    """A trial's paint metrics (records.Trial: fcp_ms, lcp_ms, lcp_element, lcp_url, paint_reason)
    from the worker's figures (browsers.worker.PAINT_JS). A metric Chromium did not report is None
    with the reason, never zero. Nothing for a load that failed (no page was painted)."""
    if not loaded:
        return {}
    p = paint or {}
    lcp = p.get("lcp") or {}
    why = []
    if p.get("error"):
        why.append(f"paint metrics not read: {p['error']}")
    elif p.get("visibility") not in (None, "visible"):
        why.append(f"the page was {p['visibility']}: Chromium reports no LCP for it")
    if p.get("fcp_ms") is None and not why:
        why.append(f"no first-contentful-paint entry {_waited(p)}: nothing contentful was painted")
    if not lcp and not p.get("error"):
        why.append(f"no largest-contentful-paint candidate {_waited(p)}: no text or image qualified (an image under "
                   "0.05 bits per pixel, or filling the viewport, does not count)")
    if p.get("settled") is False and not p.get("error"):
        why.append(f"the page never settled (no quiet {p.get('quiet_ms', 0):.0f} ms within {_waited(p)}): the "
                   "figures are its last records then")
    start = lcp.get("start_ms") or lcp.get("render_ms") or lcp.get("load_ms")
    waited = p.get("waited_ms")
    return {"fcp_ms": p.get("fcp_ms"), "lcp_ms": float(start) if start else None, "lcp_element": lcp.get("element"),
            "lcp_url": lcp.get("url") or None, "paint_reason": "; ".join(why) or None,
            "paint_wait_ms": round(float(waited), 1) if isinstance(waited, (int, float)) else None,
            "viewport": viewport_label(p.get("viewport"))}


def viewport_label(viewport) -> str | None:
    """The page's window as a trial stores it (pure): 412x823@1.75 from [innerWidth, innerHeight,
    devicePixelRatio, ...]; None without one."""
    if not isinstance(viewport, list) or len(viewport) < 3 or not all(isinstance(x, (int, float)) for x in viewport[:3]):
        return None
    return f"{viewport[0]:g}x{viewport[1]:g}@{viewport[2]:g}"
