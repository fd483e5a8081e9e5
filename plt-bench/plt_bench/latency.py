"""Request latency and connection establishment (seeds 000/002): the figures and what the RFCs expect.

A request page (pages.Page with requests) makes K requests after its load over the connection the
page came on, one at a time or `streams` at once; a request's latency is its Resource Timing
entry's responseEnd - startTime (from the moment the script asked: queueing behind other requests
included, as an application sees it). A trial keeps its p50, p90 and p99; a cell pools the
requests of all its trials.

Establishment is read from every trial's navigation (a fresh browser, a fresh connection):
connect (TCP + TLS, or the QUIC handshake) and the first byte of the page, in round trips of the
link's RTT beside what the protocols need (protocols.Protocol.connect_rtts, first_byte_rtts):
TCP + TLS 1.3 (h1 and h2) connects in 2 RTT and has the first byte
after 3; QUIC (RFC 9000/9001, 1-RTT) connects in 1 and has the first byte after 2.
"""

from __future__ import annotations

import numpy as np

from .pages import Page

PERCENTILES = (50, 90, 99)


def await_s(page: Page, cond) -> float:
    """Seconds to wait after the load for a request page's figures (0: not a request page): 3x the
    ideal transfer of its responses plus 3 round trips per request that waits, and 30 s more."""
    if not page.requests:
        return 0.0
    rate = cond.rate_down_bps or 100 * 10**6
    waits = -(-page.requests // page.streams)  # requests one after another on each stream
    return 3.0 * (8.0 * page.object_bytes / rate + 3 * waits * cond.rtt_ms / 1000.0) + 30.0


def percentiles(values_ms: list[float]) -> dict[int, float] | None:
    """{50: p50, 90: p90, 99: p99} (numpy's linear interpolation), or None without values."""
    if not values_ms:
        return None
    x = np.asarray(values_ms, dtype=float)
    return {p: float(np.percentile(x, p)) for p in PERCENTILES}


def request_latencies(page: Page, resources: list[dict] | None) -> list[float]:
    """The latency of each of the page's requests that has a Resource Timing entry, in ms."""
    want = set(page.object_uris())
    out = []
    for r in resources or []:
        name = r.get("name") or ""
        path = "/" + name.split("://", 1)[-1].split("/", 1)[-1] if "://" in name else name
        if path in want and r.get("responseEnd"):
            out.append((float(r["startTime"]), float(r["responseEnd"]) - float(r["startTime"])))
    return [lat for _, lat in sorted(out)]


def figures(page: Page, resources: list[dict] | None) -> dict:
    """The Trial fields of a request trial: requests, streams and the latency percentiles. Pure."""
    p = percentiles(request_latencies(page, resources)) or {}
    return {"requests": page.requests, "streams": page.streams,
            **{f"req_p{k}_ms": p.get(k) for k in PERCENTILES}}
