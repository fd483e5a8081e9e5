"""Bulk pages: throughput over time (the seeds' 30 s sends under loss).

A bulk page ("bulk30s", "bulk30s_100ms") is a small HTML page whose script, once the page has
loaded, downloads /bulk.bin for a fixed time and counts the bytes per interval; meanwhile the
trial samples what the link delivers towards the client (link.counters). A trial's figures cover
the same window, which starts when the bulk response's headers arrive: the browser's goodput, the
link's throughput (its own counter: what the seeds' datarate is) and both series per interval.
"""

from __future__ import annotations

import json
import re

from .. import protocols, units
from ..errors import UsageError
from . import proof
from .base import Judged, Load, Page, PageKind, format_ms, match_form, register

# Bulk pages: the body is one file of zeros, made sparse (truncate: no disk used, no checksum to
# compute), larger than any run can read (100 GB: 26 s at 30 Gbit/s). Caddy serves it like any
# file; the page's script stops reading after the duration and aborts the request. A body that ends
# first fails the trial (judge_bulk).
BULK_NAME = "bulk.bin"
BULK_BYTES = 100 * 10**9
BULK_URI = f"/{BULK_NAME}"
MIN_BULK_MS, MAX_BULK_MS = 1000, 600_000
MIN_INTERVAL_MS, MAX_BINS = 10, 10_000
_BULK_RE = re.compile(r"bulk(?P<d>[0-9.]+(?:ms|s))(?:_(?P<i>[0-9.]+(?:ms|s)))?", re.IGNORECASE)


# The bulk page's script: after the load event, fetch the body, count its bytes per interval from
# the moment its headers arrive, abort after the duration, and leave the figures in window.pltBench
# (a promise the browser worker awaits). Times are ms of the page's clock (performance.now());
# time_origin_ms places them on the wall clock, where the link's counters are sampled.
_BULK_JS = """
window.pltBench = new Promise(done => addEventListener("load", () => setTimeout(() => bulk(done), 0)));
async function bulk(done) {
  const D = %(d)d, I = %(i)d, n = Math.ceil(D / I);
  const out = {duration_ms: D, interval_ms: I, bins: new Array(n).fill(0), bytes: 0, status: null,
               request_ms: performance.now(), start_ms: null, end_ms: null, ended_ms: null, error: null,
               time_origin_ms: performance.timeOrigin};
  const ctl = new AbortController();
  try {
    const r = await fetch("%(uri)s", {cache: "no-store", signal: ctl.signal});
    out.status = r.status;
    const t0 = out.start_ms = performance.now();
    const timer = setTimeout(() => ctl.abort(), D);
    const reader = r.body.getReader();
    try {
      for (;;) {
        const {done: end, value} = await reader.read();
        const now = performance.now();
        if (end) { out.ended_ms = now - t0; break; }  // the body ended before the duration
        const k = Math.floor((now - t0) / I);
        if (k >= n) break;
        out.bins[k] += value.length; out.bytes += value.length;
      }
    } catch (e) {
      if (e.name !== "AbortError") throw e;  // our own abort, at the duration, ends the read
    }
    clearTimeout(timer);
    out.end_ms = performance.now();
    ctl.abort();
  } catch (e) {
    out.error = String(e);
  }
  done(out);
}
"""


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


def parse_bulk(item: str, option: str = "--size") -> Page | None:
    """'bulk30s' -> a 30 s download counted per second; 'bulk10s_100ms' per 100 ms; None if the item
    is not of that form."""
    m = match_form(_BULK_RE, item, option, "bulk", "a bulk download; expected bulkD or bulkD_I with durations like "
                   "30s or 100ms: bulk30s, bulk10s_100ms")
    if not m:
        return None
    d = units.parse_duration_ms(m["d"], option)
    i = units.parse_duration_ms(m["i"], option) if m["i"] else 1000.0
    if d != int(d) or i != int(i):
        raise UsageError(f"{option}: '{item}': a duration and an interval are whole milliseconds")
    d, i = int(d), int(i)
    if not MIN_BULK_MS <= d <= MAX_BULK_MS:
        raise UsageError(f"{option}: '{item}': a bulk download lasts {format_ms(MIN_BULK_MS)} to {format_ms(MAX_BULK_MS)}")
    if i < MIN_INTERVAL_MS or i > d or d % i or d // i > MAX_BINS:
        raise UsageError(f"{option}: '{item}': the interval is {MIN_INTERVAL_MS} ms or more, divides the duration, "
                         f"and gives at most {MAX_BINS} intervals")
    return Page(0, 0, d, i)


def judge_bulk(proto: str, page: "Page", work: dict | None, server_entries: list[dict] | None) -> str | None:
    """Why a bulk page's download does not count, or None: the script read the body over the whole
    duration (it did not end first), and the server's log has the one request of the trial for it,
    over the asked protocol, with at least the bytes the browser counted."""
    if not work:
        return "the bulk page's script gave no figures"
    if work.get("error"):
        return f"bulk download: {work['error']}"
    if work.get("status") != 200:
        return f"bulk download: status {work.get('status')}, not 200"
    if work.get("ended_ms") is not None:
        return (f"bulk download: the body ended after {work['ended_ms'] / 1000:.1f} s, before the "
                f"{page.bulk_ms / 1000:g} s asked")
    if not work.get("bytes"):
        return f"bulk download: no byte arrived in {page.bulk_ms / 1000:g} s"
    if server_entries is not None:
        got = [e for e in server_entries if (e.get("uri") or "").split("?")[0] == BULK_URI]
        if len(got) != 1:
            return f"bulk download: the server logged {len(got)} requests of {BULK_URI} for the trial, expected 1"
        want_proto = protocols.get(proto).name
        if got[0].get("proto") != want_proto:
            return f"bulk download: the server saw {got[0].get('proto')}, expected {want_proto}"
        if not isinstance(got[0].get("size"), int) or got[0]["size"] < work["bytes"]:
            return (f"bulk download: the server logged {got[0].get('size')} bytes sent, fewer than the "
                    f"{work['bytes']} the browser read")
    return None



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
    from ..link.counters import per_interval  # (the link package imports conditions, which imports pages)
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


class Bulk(PageKind):
    name = "bulk"
    draws_after_load = False  # no script of its draws anything after the load
    item_form = ("bulkD[_I] (a download for D, bytes counted per interval I, 1s unless given: bulk30s, "
                 "bulk10s_100ms)")
    measures = "bulk"
    counts_delivery = True
    served = r"bulk[0-9]+m?s(_[0-9]+m?s)?\.html|bulk\.bin"

    def claims(self, page: Page) -> bool:
        return bool(page.bulk_ms) and not (page.url or page.replay)

    def parse(self, item: str, option: str) -> Page | None:
        return parse_bulk(item, option)

    def label(self, page: Page) -> str:
        every = "" if page.interval_ms == 1000 else f"_{format_ms(page.interval_ms)}"
        return f"bulk{format_ms(page.bulk_ms)}{every}"

    def html(self, page: Page) -> bytes:
        head = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<title>plt-bench {page.base_label}</title>\n")
        return (f"{head}</head>\n<body>\n<h1>plt-bench bulk download</h1>\n"
                f"<p id=\"size\">{page.base_label}: {BULK_URI} for {page.bulk_ms} ms, bytes per {page.interval_ms} ms</p>\n"
                f"<script>{_BULK_JS % {'d': page.bulk_ms, 'i': page.interval_ms, 'uri': BULK_URI}}</script>\n"
                "</body>\n</html>\n").encode()

    def object_bytes(self, page: Page) -> int:
        return 0

    def after_load_bytes(self, page: Page, rate_bps: int | None) -> int:
        return page.bulk_ms * (rate_bps or 10**9) // 8000

    def files(self, page: Page) -> list:
        html = page.html()
        return [(page.html_name, len(html), lambda: iter([html])), (BULK_NAME, BULK_BYTES, None)]

    def own_requests(self, page: Page) -> int:
        return 2  # the page and its download

    def await_s(self, page: Page, conditions) -> float:
        """The duration, AWAIT_SPARE_S and four round trips more."""
        return page.bulk_ms / 1000.0 + AWAIT_SPARE_S + 4 * conditions.rtt_ms / 1000.0

    def settle_s(self, page: Page, transport: str, rtt_ms: float) -> float:
        return SETTLE_S + 10 * rtt_ms / 1000.0 if transport == "QUIC" else 0.0

    def sample_s(self, page: Page) -> float:
        """A quarter of the interval, at most every 10 ms and at least every 100 ms (the series is
        linear between samples)."""
        return min(0.1, max(0.01, page.interval_ms / 4000.0))

    def judge(self, load: Load) -> Judged:
        judged = proof.document_and_objects(load)
        work = load.answer.get("workload")
        judged.fail(judge_bulk(load.proto, load.page, work, proof.split_entries(load)[1]))
        judged.fields = figures(load.page, work, load.delivered, load.delivery_dev)
        return judged


BULK = register(Bulk())
