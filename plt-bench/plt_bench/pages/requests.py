"""Request pages (the .NET thesis's request/response latency, seeds 000/002): after the load, over
the connection the page came on, K requests for an object of S bytes (the generated pages' PNG,
under K URIs obj_S.png?r=k), one at a time or C at once ("streams"): "req100x1KB", "req100x1KB_c10".
A request's latency is its Resource Timing entry's responseEnd - startTime (from the moment the
script asked: queueing behind other requests included, as an application sees it). A trial keeps
its p50, p90 and p99; a cell pools the requests of all its trials. Each request's proof over the
protocol is proof.judge_objects'; the script's own word is judge_requests'.
"""

from __future__ import annotations

import re

from .. import units
from ..errors import UsageError
from . import proof
from .base import (MAX_OBJECTS, MAX_PAGE_BYTES, RESOURCE_BUFFER_SPARE, Judged, Load, Page, PageKind, match_form,
                   origin_host, register)
from .content import MIN_OBJECT_BYTES, iter_png

MAX_STREAMS = 100


_REQ_JS = """
window.pltBench = new Promise(done => addEventListener("load", () => setTimeout(() => requests(done), 0)));
async function requests(done) {
  const K = %(k)d, C = %(c)d, base = "%(base)s";
  const out = {requests: K, streams: C, ok: 0, failed: [], error: null, start_ms: performance.now(), end_ms: null};
  let next = 0;
  async function stream() {
    while (next < K) {
      const k = next++;
      try {
        const r = await fetch(base + k, {cache: "no-store"});
        await r.arrayBuffer();
        if (r.status === 200) out.ok++; else out.failed.push(k);
      } catch (e) {
        out.failed.push(k);
        out.error = String(e);
      }
    }
  }
  await Promise.all(Array.from({length: C}, stream));
  out.end_ms = performance.now();
  done(out);
}
"""


_REQ_RE = re.compile(r"req(?P<k>[0-9]+)[xX](?P<size>[0-9][0-9.]*\s*[A-Za-z]+)(?:_c(?P<c>[0-9]+))?", re.IGNORECASE)


def parse_requests(item: str, option: str = "--size") -> Page | None:
    """'req100x1KB' -> 100 requests of 1 KB one at a time; 'req100x1KB_c10' ten at once; None if the
    item is not of that form."""
    m = match_form(_REQ_RE, item, option, "req", "a request series; expected reqKxS or reqKxS_cC: K requests of S "
                   "bytes, C at once (1 unless given): req100x1KB, req100x64KB_c10")
    if not m:
        return None
    k, c = int(m["k"]), int(m["c"]) if m["c"] else 1
    size = units.parse_size(m["size"], option)
    if not 1 <= k <= MAX_OBJECTS:
        raise UsageError(f"{option}: '{item}' makes {k} requests; expected 1 to {MAX_OBJECTS}")
    if not 1 <= c <= min(k, MAX_STREAMS):
        raise UsageError(f"{option}: '{item}' asks for {c} requests at once; expected 1 to {min(k, MAX_STREAMS)} "
                         "(at most the requests, and at most 100)")
    if size < MIN_OBJECT_BYTES:
        raise UsageError(f"{option}: '{item}': a response is at least {MIN_OBJECT_BYTES} bytes (the smallest PNG)")
    if size > MAX_PAGE_BYTES // k:
        raise UsageError(f"{option}: '{item}' is too large; a page is at most {units.format_size(MAX_PAGE_BYTES)} in all")
    return Page(size, requests=k, streams=c)


PERCENTILES = (50, 90, 99)


def percentiles(values_ms: list[float]) -> dict[int, float] | None:
    """{50: p50, 90: p90, 99: p99} (numpy's linear interpolation), or None without values."""
    if not values_ms:
        return None
    import numpy as np  # here alone: the pages (and the options' help, which names their forms) load without it
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


def judge_requests(page: "Page", work: dict | None) -> str | None:
    """Why a request page's series does not count by its script's word, or None: every request
    answered 200 without an error (each request's proof over the protocol is judge_objects')."""
    if not work:
        return "requests: the page's script gave no figures"
    if work.get("error"):
        return f"requests: {work['error']}"
    if work.get("ok") != page.requests:
        return f"requests: {work.get('ok')} of {page.requests} answered 200"
    return None


class Requests(PageKind):
    name = "requests"
    draws_after_load = False  # no script of its draws anything after the load
    item_form = "reqKxS[_cC] (K requests of S, C at once, 1 unless given: req100x1KB, req100x64KB_c10)"
    measures = "requests"
    served = r"req[0-9]+x[0-9]+(B|KB|MB|GB|KiB|MiB|GiB)(_c[0-9]+)?\.html"  # its object: the generated pages' obj_S.png

    def claims(self, page: Page) -> bool:
        return bool(page.requests) and not (page.url or page.replay or page.bulk_ms)

    def parse(self, item: str, option: str) -> Page | None:
        return parse_requests(item, option)

    def label(self, page: Page) -> str:
        return f"req{page.requests}x{units.format_size(page.size_bytes)}" + (
            f"_c{page.streams}" if page.streams > 1 else "")

    def fetched(self, page: Page) -> int:
        return page.requests

    def object_name(self, page: Page) -> str | None:
        return f"obj_{units.format_size(page.size_bytes)}.png"

    def object_specs(self, page: Page) -> list[tuple[str, str, int]]:
        return [(origin_host(0), f"/{page.object_name}?r={k}", page.size_bytes) for k in range(page.requests)]

    def html(self, page: Page) -> bytes:
        head = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<title>plt-bench {page.base_label}</title>\n")
        timing = f"<script>performance.setResourceTimingBufferSize({page.requests + RESOURCE_BUFFER_SPARE})</script>\n"
        script = _REQ_JS % {"k": page.requests, "c": page.streams, "base": f"/{page.object_name}?r="}
        return (f"{head}{timing}</head>\n<body>\n<h1>plt-bench requests</h1>\n"
                f"<p id=\"size\">{page.base_label}: {page.requests} requests of {page.size_bytes} bytes, "
                f"{page.streams} at once</p>\n<script>{script}</script>\n</body>\n</html>\n").encode()

    def files(self, page: Page) -> list:
        html = page.html()
        return [(page.html_name, len(html), lambda: iter([html])),
                (page.object_name, page.size_bytes, lambda: iter_png(page.size_bytes))]

    def await_s(self, page: Page, conditions) -> float:
        """3x the ideal transfer of its responses plus 3 round trips per request that waits, and 30 s more."""
        rate = conditions.rate_down_bps or 100 * 10**6
        waits = -(-page.requests // page.streams)  # requests one after another on each stream
        return 3.0 * (8.0 * page.object_bytes / rate + 3 * waits * conditions.rtt_ms / 1000.0) + 30.0

    def judge(self, load: Load) -> Judged:
        judged = proof.document_and_objects(load)
        judged.fail(judge_requests(load.page, load.answer.get("workload")))
        judged.fields = figures(load.page, load.answer.get("resources"))
        return judged


REQUESTS = register(Requests())
