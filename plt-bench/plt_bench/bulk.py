"""Throughput over time (the seeds' 30 s sends under loss): a bulk trial's figures.

A bulk page (pages.Page with bulk_ms) downloads /bulk.bin for bulk_ms once it has loaded and
counts the bytes it reads per interval; meanwhile the runner samples what the link delivers
towards the client (link.counters). This module turns both into the trial's figures over the same
window, which starts when the bulk response's headers arrive: the browser's goodput, the link's
throughput (its own counter: what the seeds' datarate is) and both series per interval.
"""

from __future__ import annotations

import json

from .link.counters import per_interval
from .pages import Page

# How long the runner waits, after the load event, for the page's script to finish: the duration
# and this much more (the response's first round trips, the abort, a busy machine).
AWAIT_SPARE_S = 30.0


# After the download's abort, a QUIC browser stays up this long (and 10 round trips more) before it is
# killed: the abort's STOP_SENDING is a frame like any other, lost with its packet and sent again a
# probe timeout later. A browser killed first leaves the server sending the rest of its 100 GB to a
# dead peer until QUIC's idle timeout, 30 s (a killed TCP client's kernel answers with a reset):
# the trial's download is logged only then, and the link carries it into the next trial. Seen once
# at 5% loss (CI, 2026-11-25: "the server logged 0 requests of /bulk.bin").
SETTLE_S = 1.0


def settle_s(page: Page, transport: str, rtt_ms: float = 0.0) -> float:
    """Seconds a bulk page's browser stays up after its download, before it is killed (0: none)."""
    return SETTLE_S + 10 * rtt_ms / 1000.0 if page.bulk_ms and transport == "QUIC" else 0.0


def await_s(page: Page, rtt_ms: float = 0.0) -> float:
    """Seconds to wait after the load for a bulk page's figures (0: not a bulk page)."""
    return page.bulk_ms / 1000.0 + AWAIT_SPARE_S + 4 * rtt_ms / 1000.0 if page.bulk_ms else 0.0


def sample_s(page: Page) -> float:
    """How often the link's counter is read: a quarter of the interval, at most every 10 ms and at
    least every 100 ms (the series is linear between samples)."""
    return min(0.1, max(0.01, page.interval_ms / 4000.0))


def figures(page: Page, work: dict | None, samples: list[tuple[float, int]] | None,
            device: str | None = None) -> dict:
    """The Trial fields of a bulk trial: bulk_ms, interval_ms, bulk_bytes, goodput_bps,
    throughput_bps and series_json (records.BulkSeries). Pure."""
    out = {"bulk_ms": page.bulk_ms, "interval_ms": page.interval_ms}
    if not work or work.get("start_ms") is None or not work.get("bins"):
        return out
    seconds, interval_s = page.bulk_ms / 1000.0, page.interval_ms / 1000.0
    n = page.bulk_ms // page.interval_ms
    start = (float(work["time_origin_ms"]) + float(work["start_ms"])) / 1000.0
    link = per_interval(samples or [], start, interval_s, n)
    b0 = samples[0][1] if samples else 0
    series = {"start_unix_s": start, "interval_s": interval_s, "browser_bytes": list(work["bins"]),
              "link_bytes": [round(x, 1) for x in link] if link is not None else None,
              "link_device": device if samples else None,
              "link_samples": [[round(t - start, 4), b - b0] for t, b in samples or []]}
    out.update(bulk_bytes=int(work.get("bytes") or 0), goodput_bps=8.0 * int(work.get("bytes") or 0) / seconds,
               throughput_bps=8.0 * sum(link) / seconds if link is not None else None,
               series_json=json.dumps(series))
    return out
