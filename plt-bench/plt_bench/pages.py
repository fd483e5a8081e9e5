"""Deterministic test pages, exact to the byte.

A single-object page ("5KB") is valid HTML5 with a visible body, padded to its size with HTML
comments of at most 1 MiB each: one giant comment crashes a Chromium tab above ~510 MiB, and <p>
padding costs gigabytes of renderer memory. A multi-object page ("200x5KB", the Long Look at
QUIC's "N x S") is a small HTML page embedding N images of S bytes each (see Page). A bulk page
("bulk30s", "bulk30s_100ms") is a small HTML page whose script, once the page has loaded, downloads
/bulk.bin for a fixed time and counts the bytes per interval (the seeds' throughput over time); a
request page ("req100x1KB_c10") makes K requests for an object after its load (request latency).
Sizes are decimal: 1 KB = 1000 bytes, 1 MB = 10**6 bytes. Files are generated on demand into
sites/ and regenerated when size or checksum is wrong.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import struct
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator

from . import cmd, units
from .errors import UsageError

# The test host (.test is reserved, RFC 2606: it can never mean a real site), and a many-origin page's
# other origins: sites of their own (plt-o1.test, ...), each with its own address on the server, as a
# third party's would be (one address for all would let Chromium pool HTTP/2 and HTTP/3 connections
# across them, which real third parties on other addresses do not allow)
HOST = "plt.test"
MAX_ORIGINS = 16


def origin_host(k: int) -> str:
    """Origin k of a many-origin page: 0 is the page's own (plt.test), 1..MAX_ORIGINS-1 others."""
    if not 0 <= k < MAX_ORIGINS:
        raise ValueError(f"origin {k}: expected 0 to {MAX_ORIGINS - 1}")
    return HOST if k == 0 else f"plt-o{k}.test"


# A visit: a fresh browser's first load of the page (the default), or a repeat visit in the browser
# that loaded it a moment before, with its connections closed and its HTTP cache cleared ("repeat")
# or kept ("repeat-warm": the page revalidated, its images from the cache). Labels: 20x5KB@repeat.
VISITS = ("first", "repeat", "repeat-warm")


GENERATOR_VERSION = 1  # the single-object pages' bytes; multi-object files are new names, not a new version
CHUNK_BYTES = 1 << 20  # largest comment, including its delimiters
_OPEN, _CLOSE = b"<!--", b"-->\n"
_MIN_COMMENT = len(_OPEN) + len(_CLOSE)
_FILL_LINE = b"plt-bench padding: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"


def url_path(url: str | None) -> str:
    """'https://plt.test/obj_5KB.png?i=3' -> '/obj_5KB.png?i=3'."""
    rest = (url or "").split("://", 1)[-1]
    return "/" + rest.split("/", 1)[1] if "/" in rest else "/"


def url_host(url: str | None) -> str:
    """'https://plt-o1.test/obj_5KB.png?i=3' -> 'plt-o1.test' (a port, if any, dropped)."""
    netloc = (url or "").split("://", 1)[-1].split("/", 1)[0]
    return netloc.rsplit(":", 1)[0] if ":" in netloc else netloc


def page_name(size_bytes: int) -> str:
    return f"index_{units.format_size(size_bytes)}.html"


def _frame(size_bytes: int) -> tuple[bytes, bytes]:
    label = units.format_size(size_bytes)
    head = (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>plt-bench {label}</title>\n</head>\n<body>\n"
        f"<h1>plt-bench test page</h1>\n<p id=\"size\">{label}: {size_bytes} bytes</p>\n"
    ).encode()
    tail = b"<p id=\"end\">end of page</p>\n</body>\n</html>\n"
    return head, tail


def _comment(nbytes: int) -> bytes:
    body = nbytes - _MIN_COMMENT
    fill = (_FILL_LINE * (body // len(_FILL_LINE) + 1))[:body]
    return _OPEN + fill + _CLOSE


def iter_page(size_bytes: int) -> Iterator[bytes]:
    """Yield the page's bytes in pieces of at most CHUNK_BYTES; they add up to exactly size_bytes."""
    head, tail = _frame(size_bytes)
    padding = size_bytes - len(head) - len(tail)
    if padding < 0:
        raise UsageError(f"--size: {size_bytes} bytes is smaller than the page frame ({len(head) + len(tail)} bytes)")
    yield head
    full = _comment(CHUNK_BYTES)
    while padding > 0:
        if padding < _MIN_COMMENT:
            yield b"\n" * padding  # whitespace between elements: still valid, still visible body
            break
        n = min(padding, CHUNK_BYTES)
        if 0 < padding - n < _MIN_COMMENT:
            n -= _MIN_COMMENT  # leave room for one more whole comment
        yield full if n == CHUNK_BYTES else _comment(n)
        padding -= n
    yield tail


def digest(pieces: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    return h.hexdigest()


def expected_digest(size_bytes: int) -> str:
    return digest(iter_page(size_bytes))


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES * 4):
            h.update(chunk)
    return h.hexdigest()


# Multi-object pages: the objects are images, because the load event waits for every <img> (not
# lazy) and they need no script to be fetched, and PNG, because a PNG may carry a private ancillary
# chunk of any length that every decoder skips: one valid 1x1 image padded to the byte. The N images
# are one file requested under N URIs (obj_5KB.png?i=0 ... ?i=N-1): N distinct requests and
# responses, as a page of N images makes, from one file on disk.
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PAD_CHUNK = b"plTb"  # ancillary (p), private (l), reserved bit clear (T), safe to copy (b)
MAX_OBJECTS = 1000
# Resource Timing keeps 250 entries unless the page asks for more: ours asks, before any <img>
RESOURCE_BUFFER_SPARE = 16
PAGE_FORM = (f"a size (one HTML file: 5KB, 500KB, 10MB), NxS (an HTML page with N images of S each, "
             f"N from 1 to {MAX_OBJECTS}: 200x5KB, 1x1MB), Go:NxS (the same images spread over G origins, "
             f"2 to {MAX_ORIGINS}: 4o:60x5KB), har:NAME (a page set made from a recording: plt-bench pages "
             f"--from-har FILE NAME), any of these @repeat or @repeat-warm (a repeat visit), bulkD[_I] (a download for D, bytes counted per "
             f"interval I, 1s unless given: bulk30s, bulk10s_100ms) or reqKxS[_cC] (K requests of S, C at once, "
             f"1 unless given: req100x1KB, req100x64KB_c10); 1 KB = 1000 bytes, 1 KiB = 1024")
MIN_PAGE_BYTES = 1000  # smallest single-object page: its fixed HTML frame fits
MAX_PAGE_BYTES = 2 * 10**9  # largest the testbed generates (all of a page's objects together)
HERO_MAX_PX, HERO_MIN_BYTES = 300, 1000  # a multi-object page's first image: its side at most, its bytes at least


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


_IHDR = _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))  # 1x1, 8-bit grey
_IDAT = _chunk(b"IDAT", zlib.compress(b"\x00\x80", 9))  # one scanline: filter 0, mid grey
_IEND = _chunk(b"IEND", b"")
MIN_OBJECT_BYTES = len(PNG_SIGNATURE) + len(_IHDR) + len(_IDAT) + 12 + len(_IEND)  # 12: the pad chunk's frame


def _png_head(side: int) -> bytes:
    """A side x side mid-grey PNG's signature, header and pixels (the pad chunk follows)."""
    if side == 1:
        return PNG_SIGNATURE + _IHDR + _IDAT
    ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0))
    return PNG_SIGNATURE + ihdr + _chunk(b"IDAT", zlib.compress((b"\x00" + b"\x80" * side) * side, 9))


def png_min_bytes(side: int = 1) -> int:
    """The smallest PNG iter_png makes of that side (its pad chunk empty)."""
    return len(_png_head(side)) + 12 + len(_IEND)


def iter_png(size_bytes: int, side: int = 1) -> Iterator[bytes]:
    """Yield a valid side x side PNG of exactly size_bytes: padded by one private chunk before IEND.
    Chrome weighs an image's entropy by its bytes (at least 0.05 bits per displayed pixel to be a
    largest contentful paint), so a padded grey image counts as a photograph of its size would."""
    head = _png_head(side)
    pad = size_bytes - len(head) - 12 - len(_IEND)
    if pad < 0:
        raise UsageError(f"--size: an image of {size_bytes} bytes is smaller than the smallest PNG "
                         f"({MIN_OBJECT_BYTES if side == 1 else png_min_bytes(side)} bytes)")
    yield head + struct.pack(">I", pad) + PAD_CHUNK
    crc = zlib.crc32(PAD_CHUNK)
    line = (_FILL_LINE * (CHUNK_BYTES // len(_FILL_LINE) + 1))[:CHUNK_BYTES]
    left = pad
    while left > 0:
        piece = line[:min(left, CHUNK_BYTES)]
        crc = zlib.crc32(piece, crc)
        yield piece
        left -= len(piece)
    yield struct.pack(">I", crc) + _IEND


# Bulk pages: the body is one file of zeros, made sparse (truncate: no disk used, no checksum to
# compute), larger than any run can read (100 GB: 26 s at 30 Gbit/s). Caddy serves it like any
# file; the page's script stops reading after the duration and aborts the request. A body that ends
# first fails the trial (judged in browser.judge_bulk).
BULK_NAME = "bulk.bin"
BULK_BYTES = 100 * 10**9
BULK_URI = f"/{BULK_NAME}"
MIN_BULK_MS, MAX_BULK_MS = 1000, 600_000
MIN_INTERVAL_MS, MAX_BINS = 10, 10_000
_BULK_RE = re.compile(r"bulk(?P<d>[0-9.]+(?:ms|s))(?:_(?P<i>[0-9.]+(?:ms|s)))?", re.IGNORECASE)


def format_ms(ms: int) -> str:
    """30000 -> '30s', 100 -> '100ms' (labels and file names)."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


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


# Request pages (the .NET thesis's request/response latency, seeds 000/002): after the load, over
# the connection the page came on, K requests for an object of S bytes (the multi-object pages'
# PNG, under K URIs obj_S.png?r=k), one at a time or C at once ("streams"); each one's latency is
# its Resource Timing entry's responseEnd - startTime, and its proof that entry's and the server's.
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


@dataclasses.dataclass(frozen=True)
class Page:
    """What one trial loads; one of four kinds (`kind`):
    - "page", objects == 0: one HTML file of size_bytes ("5KB");
    - "page", objects == N: an HTML page embedding N images of size_bytes each ("200x5KB": N + 1
      requests, the HTML's own size set by N); with origins == G > 1 ("4o:60x5KB") image k comes
      from origin k mod G (origin_host: 0 is the page's own, the others sites of their own);
    - "bulk", bulk_ms > 0: a page that downloads /bulk.bin for bulk_ms after its load and counts the
      bytes per interval_ms ("bulk30s", "bulk30s_100ms"; size_bytes 0);
    - "requests", requests == K: a page that, after its load, makes K requests for an object of
      size_bytes, `streams` at once ("req100x1KB", "req100x1KB_c10")."""

    size_bytes: int
    objects: int = 0
    bulk_ms: int = 0
    interval_ms: int = 0  # a bulk page's interval (1000 unless asked); 0 for other pages
    requests: int = 0
    streams: int = 0      # a request page's requests at once (1 unless asked); 0 for other pages
    origins: int = 1      # a multi-object page's origins: its objects round-robin over them (origin_host)
    visit: str = "first"  # first | repeat | repeat-warm (VISITS): which load of it a trial measures
    replay: str = ""      # a replayed page's page set (plt_bench.replay: har:NAME); size_bytes is then all its
    #                       objects' bytes together, objects and origins the recording's
    # the set is an archive (plt_bench.archive), replayed as recorded: objects counts its recorded requests
    # after the navigation, origins its recorded hosts. Not compared: a name is an archive or a stand-in, never
    # both (one folder), and a stored trial's page (records.Trial.page_spec) does not say which, so a campaign
    # of recordings resumes (until 2026-11-27 its stored slots never matched its plan's)
    archived: bool = dataclasses.field(default=False, compare=False)
    url: str = ""         # a page of a folder served as it is (url:https://HOST/PATH, --serve HOST=DIR): its own
    #                       URL, its requests whatever it asks for (size_bytes 0: not known before the load)

    @property
    def kind(self) -> str:
        return "bulk" if self.bulk_ms else "requests" if self.requests else "page"

    @property
    def label(self) -> str:
        return self.base_label + ("" if self.visit == "first" else f"@{self.visit}")

    @property
    def base_label(self) -> str:
        """The page whatever the visit (20x5KB for 20x5KB@repeat)."""
        if self.url:
            return f"url:{self.url}"
        if self.replay:
            return f"har:{self.replay}"
        size = units.format_size(self.size_bytes)
        if self.bulk_ms:
            every = "" if self.interval_ms == 1000 else f"_{format_ms(self.interval_ms)}"
            return f"bulk{format_ms(self.bulk_ms)}{every}"
        if self.requests:
            return f"req{self.requests}x{size}" + (f"_c{self.streams}" if self.streams > 1 else "")
        if self.origins > 1:
            return f"{self.origins}o:{self.objects}x{size}"
        return f"{self.objects}x{size}" if self.objects else size

    @property
    def html_name(self) -> str:
        """The file a load asks for (origins_in_name reads a generated one's origins back)."""
        if self.url:
            return self.url
        if self.archived:
            return f"{ARCHIVED}{self.replay}"
        if self.replay:
            return f"replay/{self.replay}/index.html"
        if self.bulk_ms or self.requests:
            return f"{self.base_label}.html"
        if self.origins > 1:
            return f"objects_{self.objects}x{units.format_size(self.size_bytes)}_{self.origins}o.html"
        return f"objects_{self.base_label}.html" if self.objects else page_name(self.size_bytes)

    @property
    def fetched(self) -> int:
        """Sub-resources the page fetches for the object file (its images, or its requests)."""
        return self.objects or self.requests

    @property
    def object_name(self) -> str | None:
        return f"obj_{units.format_size(self.size_bytes)}.png" if self.fetched else None

    def object_uris(self) -> list[str]:
        """The URIs the page asks for the object file under (relative to the site's root): its
        images' (?i=k), or its requests' (?r=k)."""
        if self.replay:
            return [u for _, u, _ in self.object_specs()]
        key = "r" if self.requests else "i"
        return [f"/{self.hero_name if k == 0 and self.hero_px else self.object_name}?{key}={k}"
                for k in range(self.fetched)]

    def object_urls(self) -> list[tuple[str, str]]:
        """(host, URI) of every object, in the page's order: object k on origin k mod origins (a
        replayed page's: on its recorded origin's)."""
        return [(h, u) for h, u, _ in self.object_specs()]

    def object_specs(self) -> list[tuple[str, str, int]]:
        """(host, URI, body bytes) of every object, in the page's order."""
        if self.archived:
            return [(r.host, r.target, r.size_bytes) for r in self.archive.responses[1:]]
        if self.replay:
            rs = self.replay_set
            return [(origin_host(o.origin), rs.object_path(o) + o.query, o.size) for o in rs.objects]
        return [(origin_host(k % self.origins), uri, self.size_bytes) for k, uri in enumerate(self.object_uris())]

    @property
    def replay_set(self):
        """A replayed page's page set (plt_bench.replay.ReplaySet)."""
        return load_replay(self.replay)

    @property
    def archive(self):
        """An archived page's recording (plt_bench.archive.Archive)."""
        from . import archive
        return archive.load(self.replay, DEFAULT_SITES)

    @property
    def hero_px(self) -> int:
        """The side in pixels of a multi-object page's first image, its largest contentful paint,
        or 0 where it has none (a request page; images under HERO_MIN_BYTES). The image is a PNG of
        that side shown at that side: Chrome counts an image by the smaller of its shown and its
        own size (a 1x1 image shown large counts as one pixel), only at 0.05 bits per shown pixel or
        more, and not when it fills the viewport; so the side keeps 0.1 bit per pixel (twice the
        floor), at most HERO_MAX_PX, well inside the fixed window (browsers.WINDOW). Without one, the
        page's heading is its largest paint."""
        if not self.objects or self.size_bytes < HERO_MIN_BYTES or self.replay:
            return 0
        return min(HERO_MAX_PX, int(math.isqrt(self.size_bytes * 8 * 10)))

    @property
    def hero_name(self) -> str | None:
        """The first image's file: the objects' size, hero_px on a side (hero_5KB.png)."""
        return f"hero_{units.format_size(self.size_bytes)}.png" if self.hero_px else None
    def html(self) -> bytes:
        """A multi-object, bulk, request or replayed page's HTML (a single-object page's bytes come
        from iter_page)."""
        if self.replay:
            return replay_html(self.replay_set)
        head = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<title>plt-bench {self.base_label}</title>\n")
        if self.bulk_ms:
            return (f"{head}</head>\n<body>\n<h1>plt-bench bulk download</h1>\n"
                    f"<p id=\"size\">{self.base_label}: {BULK_URI} for {self.bulk_ms} ms, bytes per {self.interval_ms} ms</p>\n"
                    f"<script>{_BULK_JS % {'d': self.bulk_ms, 'i': self.interval_ms, 'uri': BULK_URI}}</script>\n"
                    "</body>\n</html>\n").encode()
        timing = f"<script>performance.setResourceTimingBufferSize({self.fetched + RESOURCE_BUFFER_SPARE})</script>\n"
        if self.requests:
            script = _REQ_JS % {"k": self.requests, "c": self.streams, "base": f"/{self.object_name}?r="}
            return (f"{head}{timing}</head>\n<body>\n<h1>plt-bench requests</h1>\n"
                    f"<p id=\"size\">{self.base_label}: {self.requests} requests of {self.size_bytes} bytes, "
                    f"{self.streams} at once</p>\n<script>{script}</script>\n</body>\n</html>\n").encode()
        imgs = "".join(self._img(k, host, uri) for k, (host, uri) in enumerate(self.object_urls()))
        # the full URL as Referer, across origins too: the server tells a trial's requests by it
        head += "<meta name=\"referrer\" content=\"unsafe-url\">\n"
        return (f"{head}{timing}</head>\n<body>\n<h1>plt-bench test page</h1>\n"
                f"<p id=\"size\">{self.base_label}: {self.objects} images of {self.size_bytes} bytes</p>\n"
                f"{imgs}<p id=\"end\">end of page</p>\n</body>\n</html>\n").encode()

    def _img(self, k: int, host: str, uri: str) -> str:
        src = uri[1:] if host == HOST else f"https://{host}{uri}"
        side = self.hero_px if k == 0 and self.hero_px else 1
        tag = ' id="hero"' if side > 1 else ""
        # another origin's image with CORS: its Resource Timing status and sizes (a no-cors response's
        # are 0 in Firefox; the server answers an Origin with Access-Control-Allow-Origin)
        cors = ' crossorigin="anonymous"' if host != HOST else ""
        return f'<img{tag} src="{src}"{cors} width="{side}" height="{side}" alt="">\n'

    @property
    def html_bytes(self) -> int:
        if self.archived:
            return self.archive.responses[0].size_bytes
        if self.replay:
            return self.replay_set.html_bytes
        return len(self.html()) if self.kind != "page" or self.objects else self.size_bytes

    @property
    def object_bytes(self) -> int:
        """Bytes of all the fetched objects together (0 for a single-object or bulk page)."""
        if self.replay:
            return self.size_bytes
        return self.fetched * self.size_bytes

    @property
    def total_bytes(self) -> int:
        """Every body the browser fetches (a bulk page: but its download): the HTML and all its objects."""
        return self.html_bytes + self.object_bytes

    def expected_bytes(self, rate_bps: int | None) -> int:
        """What a trial is expected to carry: every body, and a bulk page's download at the link's
        rate (unshaped: as if 1 Gbit/s), for estimates such as the captures' size."""
        return self.total_bytes + (self.bulk_ms * (rate_bps or 10**9) // 8000 if self.bulk_ms else 0)

    def sort_key(self) -> tuple:
        return (self.bulk_ms, self.requests, self.total_bytes, self.objects, self.interval_ms, self.streams,
                self.origins, VISITS.index(self.visit))

    def files(self) -> list[tuple[str, int, Callable[[], Iterator[bytes]] | None]]:
        """(file name, size, a function yielding its bytes) for every file the page needs; None for
        the bulk body, a sparse file of zeros."""
        if self.replay or self.url:
            return []  # made once from its recording (plt-bench pages --from-har); Sites.ensure checks it
        if self.bulk_ms:
            html = self.html()
            return [(self.html_name, len(html), lambda: iter([html])), (BULK_NAME, BULK_BYTES, None)]
        if not self.fetched:
            return [(self.html_name, self.size_bytes, lambda: iter_page(self.size_bytes))]
        html = self.html()
        files = [(self.html_name, len(html), lambda: iter([html])),
                 (self.object_name, self.size_bytes, lambda: iter_png(self.size_bytes))]
        if self.hero_px:
            files.append((self.hero_name, self.size_bytes, lambda: iter_png(self.size_bytes, self.hero_px)))
        return files


# -- replayed pages: page sets made from recordings (plt_bench.replay makes them; here they are served) --------
REPLAY_MANIFEST = "replay.json"
ARCHIVED = "archive:"  # an archived page's html_name: no file of the site, the recording's own URL (testbed.url)
REPLAY_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
DEFAULT_SITES = cmd.PROJECT_ROOT / "sites"  # where the CLI, the testbed and --size har:NAME find page sets


@dataclasses.dataclass(frozen=True)
class ReplayObject:
    """One recorded object as the page set serves it."""
    index: int        # its place in the recording, from 0 (the document not counted)
    origin: int       # the testbed origin it is served from (pages.origin_host)
    recorded_url: str
    file: str         # its file in the page set's folder: <index>-<name><ext>
    query: str        # the recorded query, with its '?', or ''
    mime: str
    size: int         # decoded body bytes
    element: str      # img | link | script | iframe | fetch (replay.element_for)
    body: str         # har | made
    sha256: str

    @property
    def uri(self) -> str:
        return f"/{self.file}{self.query}"


@dataclasses.dataclass(frozen=True)
class ReplaySet:
    """A page set made from a recording (MANIFEST in its folder)."""
    name: str
    origins: tuple[str, ...]        # the recorded origins (scheme://host[:port]), in order: index = testbed origin
    objects: tuple[ReplayObject, ...]
    html_bytes: int                 # the page's HTML (the recorded document's size where it was larger than ours)
    recorded_document_bytes: int
    source: dict                    # the HAR's file name, SHA-256, creator, document URL, entries left out

    @property
    def object_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    def object_path(self, o: ReplayObject) -> str:
        return f"/replay/{self.name}/{o.file}"


def replay_root(sites: Path, name: str) -> Path:
    """A page set's folder: sites/replay/NAME."""
    return Path(sites) / "replay" / name


def replay_html(rs: "ReplaySet") -> bytes:
    """The page: each object in the recorded order as its element, padded to the recorded document's
    size where that is larger."""
    head = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>plt-bench har:{rs.name}</title>\n<meta name=\"referrer\" content=\"unsafe-url\">\n"
            f"<script>performance.setResourceTimingBufferSize({len(rs.objects) + RESOURCE_BUFFER_SPARE})</script>\n")
    links, body = [], []
    for o in rs.objects:
        src = f"https://{origin_host(o.origin)}{rs.object_path(o)}{o.query}".replace("&", "&amp;").replace('"', "%22")
        if o.element == "link":
            links.append(f'<link rel="stylesheet" href="{src}">\n')
        elif o.element == "script":
            body.append(f'<script src="{src}"></script>\n')
        elif o.element == "fetch":  # read whole and cached, never decoded (the server allows any origin)
            links.append(f'<link rel="preload" as="fetch" crossorigin="anonymous" href="{src}">\n')
        elif o.element == "iframe":
            body.append(f'<iframe src="{src}" width="1" height="1" title="recorded sub-document"></iframe>\n')
        else:
            body.append(f'<img src="{src}" width="1" height="1" alt="">\n')
    text = (head + "".join(links) + "</head>\n<body>\n<h1>plt-bench replayed page</h1>\n"
            f"<p id=\"size\">har:{rs.name}: {len(rs.objects)} objects from {len(rs.origins)} origins</p>\n"
            + "".join(body) + "<p id=\"end\">end of page</p>\n").encode()
    tail = b"</body>\n</html>\n"
    pad = rs.recorded_document_bytes - len(text) - len(tail)
    if pad >= 8:
        inner = pad - 8
        text += b"<!--" + (b"x" * inner) + b"-->\n"
    return text + tail


_CACHE: dict[tuple, ReplaySet] = {}  # by folder and manifest (inode, time, size): a set made again is read again


def recorded_corpus(option: str = "--size", sites: Path | None = None) -> list[str]:
    """Every archive made here (sites/replay/*/archive.json: plt-bench record, pages --from-har), by
    name: the corpus har:* stands for."""
    from .archive import ARCHIVE_FILE
    folder = Path(sites or DEFAULT_SITES) / "replay"
    names = sorted(p.parent.name for p in folder.glob(f"*/{ARCHIVE_FILE}") if REPLAY_NAME_RE.fullmatch(p.parent.name))
    if not names:
        raise UsageError(f"{option}: 'har:*': no recording in {folder}; record some: plt-bench record URL --name NAME "
                         "(docs/replay.md)")
    return names


def load_replay(name: str, sites: Path | None = None, option: str = "--size") -> ReplaySet:
    """A page set made before (its manifest), or a message saying how to make it."""
    if not REPLAY_NAME_RE.fullmatch(name or ""):
        raise UsageError(f"{option}: 'har:{name}': '{name}' is not a page set name; expected 1 to 40 of a-z, 0-9, '_' "
                         "and '-', starting with a letter or digit")
    folder = replay_root(sites or DEFAULT_SITES, name)
    try:
        st = (folder / REPLAY_MANIFEST).stat()
        key = (str(folder), st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key in _CACHE:
        return _CACHE[key]
    try:
        d = json.loads((folder / REPLAY_MANIFEST).read_text())
        rs = ReplaySet(name=d["name"], origins=tuple(d["origins"]),
                       objects=tuple(ReplayObject(**o) for o in d["objects"]), html_bytes=d["html_bytes"],
                       recorded_document_bytes=d["recorded_document_bytes"], source=d["source"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"{option}: 'har:{name}': no page set {name} in {folder.parent}; make it from a recording: "
                         f"plt-bench pages --from-har FILE {name}") from None
    if key:
        _CACHE[key] = rs
    return rs


def check_replay(name: str, sites: Path) -> None:
    """The page set's files are whole (sizes and checksums as made); a damaged set is named."""
    rs = load_replay(name, sites)
    folder = replay_root(sites, name)
    for o in rs.objects:
        p = folder / o.file
        if not p.is_file() or p.stat().st_size != o.size or _file_sha(p) != o.sha256:
            raise UsageError(f"--size: har:{name}: {p} is missing or changed since the page set was made; make it "
                             f"again (remove {folder}, then plt-bench pages --from-har FILE {name})")
    if (folder / "index.html").read_bytes() != replay_html(rs):
        raise UsageError(f"--size: har:{name}: {folder / 'index.html'} changed since the page set was made")


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def parse_bulk(item: str, option: str = "--size") -> Page | None:
    """'bulk30s' -> a 30 s download counted per second; 'bulk10s_100ms' per 100 ms; None if the item
    is not of that form."""
    m = _BULK_RE.fullmatch(item)
    if not m:
        return None if not item.lower().startswith("bulk") else _bad_bulk(item, option)
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


def _bad_bulk(item: str, option: str):
    raise UsageError(f"{option}: '{item}' is not a bulk download; expected bulkD or bulkD_I with durations "
                     "like 30s or 100ms: bulk30s, bulk10s_100ms")


_REQ_RE = re.compile(r"req(?P<k>[0-9]+)[xX](?P<size>[0-9][0-9.]*\s*[A-Za-z]+)(?:_c(?P<c>[0-9]+))?", re.IGNORECASE)


def parse_requests(item: str, option: str = "--size") -> Page | None:
    """'req100x1KB' -> 100 requests of 1 KB one at a time; 'req100x1KB_c10' ten at once; None if the
    item is not of that form."""
    m = _REQ_RE.fullmatch(item)
    if not m:
        if item.lower().startswith("req"):
            raise UsageError(f"{option}: '{item}' is not a request series; expected reqKxS or reqKxS_cC: K requests "
                             f"of S bytes, C at once (1 unless given): req100x1KB, req100x64KB_c10")
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


def parse_page(text: str, option: str = "--size") -> Page:
    """'500KB' -> one HTML file of 500 KB; '200x5KB' -> a page of 200 images of 5 KB each; 'bulk30s'
    -> a bulk download of 30 s (parse_bulk); 'req100x1KB_c10' -> 100 requests of 1 KB, 10 at once
    (parse_requests)."""
    item = str(text).strip()
    if item.lower().startswith("url:"):  # a page of a folder served as it is (--serve HOST=DIR)
        from urllib.parse import urlsplit
        url = item[4:].strip()
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = None
        if parts is None or parts.scheme != "https" or not parts.hostname or "@" in parts.netloc or parts.port:
            raise UsageError(f"{option}: '{item}': expected url:https://HOST/PATH, HOST one that --serve HOST=DIR "
                             "serves (url:https://docs.pkg.test/index.html)")
        return Page(0, url=url)
    if "@" in item:
        base, _, visit = item.rpartition("@")
        if visit not in VISITS[1:]:
            raise UsageError(f"{option}: '{item}': a visit is @repeat (connections closed, cache cleared) or "
                             "@repeat-warm (connections closed, cache kept), after a page: 20x5KB@repeat")
        page = parse_page(base, option)
        if page.archived or page.url:
            raise UsageError(f"{option}: '{item}': repeat visits of a recording or of a served folder's page are not "
                             f"built yet; measure its first visit ({base})")
        if page.kind != "page":
            raise UsageError(f"{option}: '{item}': repeat visits are of pages (5KB, 20x5KB, 4o:60x5KB), not of a "
                             f"{page.kind} page")
        return dataclasses.replace(page, visit=visit)
    if item.lower().startswith("real:"):  # a real page no one here wrote, by name: its recording on this machine
        from . import realpages
        name = item[5:].strip().lower()
        realpages.by_name(name, option)
        archived = REPLAY_NAME_RE.fullmatch(realpages.RECORDING_PREFIX + name) and archive_exists(
            realpages.RECORDING_PREFIX + name)
        if not archived:
            gathering = realpages.UNRECORDED.get()
            if gathering is None:
                raise realpages.NotRecorded(name, option)
            gathering.add(name)  # the rest of the campaign is checked first; this stands in meanwhile
            return Page(MIN_PAGE_BYTES, replay=realpages.RECORDING_PREFIX + name)
        return parse_page(f"har:{realpages.RECORDING_PREFIX}{name}", option)
    if item.lower().startswith("har:"):
        from . import archive
        if REPLAY_NAME_RE.fullmatch(item[4:]) and archive.is_archive(replay_root(DEFAULT_SITES, item[4:])):
            a = archive.load(item[4:], DEFAULT_SITES, option)
            return Page(a.body_bytes - a.responses[0].size_bytes, len(a.responses) - 1, origins=len(a.origins),
                        replay=a.name, archived=True)
        rs = load_replay(item[4:], option=option)
        return Page(rs.object_bytes, len(rs.objects), origins=len(rs.origins), replay=rs.name)
    special = parse_bulk(item, option) or parse_requests(item, option)
    if special:
        return special
    m = re.fullmatch(r"(?:(?P<o>[0-9]+)\s*o\s*:\s*)?(?P<n>[0-9]+)\s*[xX]\s*(?P<size>[0-9].*)", item)  # 5XB: a bad size
    if not m:
        size = units.parse_size(item, option)
        if size < MIN_PAGE_BYTES:
            raise UsageError(f"{option}: '{item}' is too small; a page is at least {MIN_PAGE_BYTES} bytes")
        if size > MAX_PAGE_BYTES:
            raise UsageError(f"{option}: '{item}' is too large; a page is at most {units.format_size(MAX_PAGE_BYTES)}")
        return Page(size)
    n = int(m["n"])
    if not 1 <= n <= MAX_OBJECTS:
        raise UsageError(f"{option}: '{item}' has {n} objects; expected {PAGE_FORM}")
    size = units.parse_size(m["size"], option)
    if size < MIN_OBJECT_BYTES:
        raise UsageError(f"{option}: '{item}': an object is at least {MIN_OBJECT_BYTES} bytes (the smallest PNG)")
    if n * size > MAX_PAGE_BYTES:
        raise UsageError(f"{option}: '{item}' is too large; a page is at most {units.format_size(MAX_PAGE_BYTES)} "
                         "in all")
    origins = int(m["o"]) if m["o"] else 1
    if not 1 <= origins <= MAX_ORIGINS:
        raise UsageError(f"{option}: '{item}' has {origins} origins; expected 1 to {MAX_ORIGINS} (4o:60x5KB)")
    if origins > n:
        raise UsageError(f"{option}: '{item}' spreads {n} objects over {origins} origins; each origin needs one "
                         "at least (4o:60x5KB)")
    return Page(size, n, origins=origins)


def archive_exists(name: str, sites: Path | None = None) -> bool:
    """Whether a recording of that name is in the page sets (sites/NAME/archive.json)."""
    from . import archive
    return archive.is_archive(replay_root(sites or DEFAULT_SITES, name))


def as_page(item: "Page | int") -> Page:
    """A Page, or a bare number of bytes: a single-object page of that size."""
    return item if isinstance(item, Page) else Page(int(item))


class Sites:
    """The pages folder and its manifest of expected checksums."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.manifest_path = self.root / "MANIFEST.json"

    def _manifest(self) -> dict:
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if data.get("generator_version") == GENERATOR_VERSION else {}

    def _save_manifest(self, data: dict) -> None:
        data["generator_version"] = GENERATOR_VERSION
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.manifest_path)

    def path(self, page: "Page | int") -> Path:
        return self.root / as_page(page).html_name

    def ensure(self, items: "Iterable[Page | int]") -> dict:
        """Make sure every file of every page exists with the right size and checksum; (re)generate
        the others. items: Pages, or bare sizes (single-object pages). Returns {item: its HTML's path}."""
        self.root.mkdir(parents=True, exist_ok=True)
        manifest = self._manifest()
        known = manifest.setdefault("pages", {})
        out = {}
        for item in items:
            page = as_page(item)
            if page.replay and not page.archived:
                check_replay(page.replay, self.root)
            for name, size, pieces in page.files():
                path = self.root / name
                if pieces is None:  # the bulk body: zeros, sparse; its size is its check
                    self._sparse(path, size)
                    continue
                want = known.get(name, {}).get("sha256") if known.get(name, {}).get("size") == size else None
                if want is None:
                    want = digest(pieces())
                    known[name] = {"size": size, "sha256": want}
                if not (path.is_file() and path.stat().st_size == size and file_digest(path) == want):
                    self._write(path, size, pieces())
            out[item] = self.root / page.html_name
        self._save_manifest(manifest)
        return out

    def _sparse(self, path: Path, size: int) -> None:
        if path.is_file() and path.stat().st_size == size and not path.is_symlink():
            return
        tmp = path.with_suffix(".part")
        with open(tmp, "wb") as f:
            f.truncate(size)
        if os.stat(tmp).st_blocks * 512 > (1 << 20):
            tmp.unlink()
            raise UsageError(f"--size: {self.root} cannot hold a sparse file ({path.name}, a bulk body of "
                             f"{size} bytes of zeros); put the pages on a file system that can (ext4, xfs, tmpfs)")
        os.replace(tmp, path)

    def _write(self, path: Path, size: int, pieces: Iterator[bytes]) -> None:
        free = os_free_bytes(self.root)
        if free < size + (256 << 20):
            raise UsageError(f"--size: not enough free disk in {self.root} for {path.name} "
                             f"({size} bytes needed, {free} free)")
        tmp = path.with_suffix(".part")
        with open(tmp, "wb") as f:
            for piece in pieces:
                f.write(piece)
        os.replace(tmp, path)


def os_free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def origins_in_name(html_name: str) -> int:
    """How many of the testbed's origins a generated page's file (Page.html_name) asks for: N for
    objects_..._No.html, else 1 (pure)."""
    m = re.search(r"_(\d+)o\.html$", html_name)
    return int(m.group(1)) if m else 1
