"""Generated pages: one HTML file of a size ("5KB"), or a page of N images of S bytes each ("200x5KB",
the Long Look at QUIC's "N x S"), spread over G origins ("4o:60x5KB"). Files are made on demand into
sites/ and made again when their size or checksum is wrong (base.Sites).

The objects are images, because the load event waits for every <img> (not lazy) and they need no
script to be fetched, and PNG, because a PNG may carry a private ancillary chunk of any length that
every decoder skips: one valid image padded to the byte (content.iter_png). The N images are one
file requested under N URIs (obj_5KB.png?i=0 ... ?i=N-1): N distinct requests and responses, as a
page of N images makes, from one file on disk.
"""

from __future__ import annotations

import math
import re

from .. import units
from ..errors import UsageError
from . import proof
from .base import (HOST, MAX_OBJECTS, MAX_ORIGINS, MAX_PAGE_BYTES, MIN_PAGE_BYTES, RESOURCE_BUFFER_SPARE,
                   Judged, Load, Page, PageKind, origin_host, page_form, page_url, register)
from .content import MIN_OBJECT_BYTES, iter_page, iter_png

HERO_MAX_PX, HERO_MIN_BYTES = 300, 1000  # a multi-object page's first image: its side at most, its bytes at least
_ITEM_RE = re.compile(r"(?:(?P<o>[0-9]+)\s*o\s*:\s*)?(?P<n>[0-9]+)\s*[xX]\s*(?P<size>[0-9].*)")  # 5XB: a bad size


def page_name(size_bytes: int) -> str:
    return f"index_{units.format_size(size_bytes)}.html"


def origins_in_name(html_name: str) -> int:
    """How many of the testbed's origins a generated page's file (Page.html_name) asks for: N for
    objects_..._No.html, else 1 (pure)."""
    m = re.search(r"_(\d+)o\.html$", html_name)
    return int(m.group(1)) if m else 1


def hero_px(page: Page) -> int:
    """The side in pixels of a multi-object page's first image, its largest contentful paint, or 0
    where it has none (images under HERO_MIN_BYTES). The image is a PNG of that side shown at that
    side: Chrome counts an image by the smaller of its shown and its own size (a 1x1 image shown
    large counts as one pixel), only at 0.05 bits per shown pixel or more, and not when it fills the
    viewport; so the side keeps 0.1 bit per pixel (twice the floor), at most HERO_MAX_PX, well inside
    the fixed window (browsers.WINDOW). Without one, the page's heading is its largest paint."""
    if not page.objects or page.size_bytes < HERO_MIN_BYTES:
        return 0
    return min(HERO_MAX_PX, int(math.isqrt(page.size_bytes * 8 * 10)))


def hero_name(page: Page) -> str | None:
    """The first image's file: the objects' size, hero_px on a side (hero_5KB.png)."""
    return f"hero_{units.format_size(page.size_bytes)}.png" if hero_px(page) else None


class Generated(PageKind):
    name = "generated"
    draws_after_load = False  # no script of its draws anything after the load
    repeatable = True
    item_form = (f"a size (one HTML file: 5KB, 500KB, 10MB), NxS (an HTML page with N images of S each, N from 1 to "
                 f"{MAX_OBJECTS}: 200x5KB, 1x1MB), Go:NxS (the same images spread over G origins, 2 to {MAX_ORIGINS}: "
                 "4o:60x5KB)")
    served = (r"index_[0-9]+(B|KB|MB|GB|KiB|MiB|GiB)\.html|objects_[0-9]+x[0-9]+(B|KB|MB|GB|KiB|MiB|GiB)(_[0-9]+o)?\.html"
              r"|(obj|hero)_[0-9]+(B|KB|MB|GB|KiB|MiB|GiB)\.png")

    def claims(self, page: Page) -> bool:
        return not (page.url or page.replay or page.bulk_ms or page.requests or page.form)

    def parse(self, item: str, option: str) -> Page:
        """The last kind asked: a size, NxS or Go:NxS, or a message naming every form."""
        m = _ITEM_RE.fullmatch(item)
        if not m:
            size = units.parse_size(item, option)
            if size < MIN_PAGE_BYTES:
                raise UsageError(f"{option}: '{item}' is too small; a page is at least {MIN_PAGE_BYTES} bytes")
            if size > MAX_PAGE_BYTES:
                raise UsageError(f"{option}: '{item}' is too large; a page is at most {units.format_size(MAX_PAGE_BYTES)}")
            return Page(size)
        n = int(m["n"])
        if not 1 <= n <= MAX_OBJECTS:
            raise UsageError(f"{option}: '{item}' has {n} objects; expected {page_form()}")
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

    def label(self, page: Page) -> str:
        size = units.format_size(page.size_bytes)
        if page.origins > 1:
            return f"{page.origins}o:{page.objects}x{size}"
        return f"{page.objects}x{size}" if page.objects else size

    def html_name(self, page: Page) -> str:
        if page.origins > 1:
            return f"objects_{page.objects}x{units.format_size(page.size_bytes)}_{page.origins}o.html"
        return f"objects_{page.base_label}.html" if page.objects else page_name(page.size_bytes)

    def object_name(self, page: Page) -> str | None:
        return f"obj_{units.format_size(page.size_bytes)}.png" if page.objects else None

    def object_specs(self, page: Page) -> list[tuple[str, str, int]]:
        """Object k on origin k mod origins; the first, where the page has one, its hero image."""
        hero = hero_name(page)
        return [(origin_host(k % page.origins), f"/{hero if k == 0 and hero else page.object_name}?i={k}",
                 page.size_bytes) for k in range(page.objects)]

    def html(self, page: Page) -> bytes:
        """A multi-object page's HTML (a single-object page's bytes come from content.iter_page)."""
        if not page.objects:
            return b"".join(iter_page(page.size_bytes))
        head = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<title>plt-bench {page.base_label}</title>\n")
        timing = f"<script>performance.setResourceTimingBufferSize({page.objects + RESOURCE_BUFFER_SPARE})</script>\n"
        imgs = "".join(self._img(page, k, host, uri) for k, (host, uri) in enumerate(page.object_urls()))
        # the full URL as Referer, across origins too: the server tells a trial's requests by it
        head += "<meta name=\"referrer\" content=\"unsafe-url\">\n"
        return (f"{head}{timing}</head>\n<body>\n<h1>plt-bench test page</h1>\n"
                f"<p id=\"size\">{page.base_label}: {page.objects} images of {page.size_bytes} bytes</p>\n"
                f"{imgs}<p id=\"end\">end of page</p>\n</body>\n</html>\n").encode()

    @staticmethod
    def _img(page: Page, k: int, host: str, uri: str) -> str:
        src = uri[1:] if host == HOST else page_url(host, uri)
        side = hero_px(page) if k == 0 and hero_px(page) else 1
        tag = ' id="hero"' if side > 1 else ""
        # another origin's image with CORS: its Resource Timing status and sizes (a no-cors response's
        # are 0 in Firefox; the server answers an Origin with Access-Control-Allow-Origin)
        cors = ' crossorigin="anonymous"' if host != HOST else ""
        return f'<img{tag} src="{src}"{cors} width="{side}" height="{side}" alt="">\n'

    def html_bytes(self, page: Page) -> int:
        return len(page.html()) if page.objects else page.size_bytes

    def files(self, page: Page) -> list:
        if not page.objects:
            return [(page.html_name, page.size_bytes, lambda: iter_page(page.size_bytes))]
        html = page.html()
        files = [(page.html_name, len(html), lambda: iter([html])),
                 (page.object_name, page.size_bytes, lambda: iter_png(page.size_bytes))]
        if hero_px(page):
            files.append((hero_name(page), page.size_bytes, lambda: iter_png(page.size_bytes, hero_px(page))))
        return files

    def judge(self, load: Load) -> Judged:
        return proof.document_and_objects(load)


GENERATED = register(Generated())
