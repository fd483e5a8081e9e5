"""Pages of render-blocking scripts: "js20x10KB" is a page whose <head> holds 20 parser-blocking
<script src> of 10 KB each, then a heading and a line of text. Nothing of the page is painted before
every script has come and run, so FCP, LCP and the load all wait for them: what a page's scripts in
its head cost over each protocol (the literature's pages hold tens of them). The scripts are one
file, js_S.js, asked under N URIs (?i=k), each a JavaScript comment of exactly S bytes that runs and
does nothing; each is proven at both ends as a generated page's images are.

The kind added last, through the interface alone: this module, its line in pages/__init__.py and its
tests (docs/pages.md).
"""

from __future__ import annotations

import re

from .. import units
from ..errors import UsageError
from . import proof
from .base import (HOST, MAX_OBJECTS, MAX_PAGE_BYTES, RESOURCE_BUFFER_SPARE, Judged, Load, Page, PageKind, match_form,
                   register)
from .content import FILL_LINE

MIN_SCRIPT_BYTES = 16
_ITEM_RE = re.compile(r"js(?P<n>[0-9]+)[xX](?P<size>[0-9][0-9.]*\s*[A-Za-z]+)", re.IGNORECASE)


def iter_script(size_bytes: int):
    """A script of exactly size_bytes: one comment, its filler free of '*/'."""
    inner = size_bytes - 5  # "/*" and "*/\n"
    yield b"/*" + (FILL_LINE * (inner // len(FILL_LINE) + 1))[:inner] + b"*/\n"


class Scripts(PageKind):
    name = "scripts"
    draws_after_load = False  # no script of its draws anything after the load
    item_form = "jsNxS (N render-blocking scripts of S bytes each: js20x10KB)"
    served = r"scripts_[0-9]+x[0-9]+(B|KB|MB|GB|KiB|MiB|GiB)\.html|js_[0-9]+(B|KB|MB|GB|KiB|MiB|GiB)\.js"

    def claims(self, page: Page) -> bool:
        return page.form == self.name

    def parse(self, item: str, option: str) -> Page | None:
        m = match_form(_ITEM_RE, item, option, "js", "a page of scripts; expected jsNxS: N render-blocking scripts "
                       "of S bytes each (js20x10KB)")
        if not m:
            return None
        n, size = int(m["n"]), units.parse_size(m["size"], option)
        if not 1 <= n <= MAX_OBJECTS:
            raise UsageError(f"{option}: '{item}' has {n} scripts; expected 1 to {MAX_OBJECTS}")
        if size < MIN_SCRIPT_BYTES:
            raise UsageError(f"{option}: '{item}': a script is at least {MIN_SCRIPT_BYTES} bytes")
        if n * size > MAX_PAGE_BYTES:
            raise UsageError(f"{option}: '{item}' is too large; a page is at most {units.format_size(MAX_PAGE_BYTES)} "
                             "in all")
        return Page(size, n, form=self.name)

    def label(self, page: Page) -> str:
        return f"js{page.objects}x{units.format_size(page.size_bytes)}"

    def html_name(self, page: Page) -> str:
        return f"scripts_{page.objects}x{units.format_size(page.size_bytes)}.html"

    def object_name(self, page: Page) -> str | None:
        return f"js_{units.format_size(page.size_bytes)}.js"

    def object_specs(self, page: Page) -> list[tuple[str, str, int]]:
        return [(HOST, f"/{page.object_name}?i={k}", page.size_bytes) for k in range(page.objects)]

    def html(self, page: Page) -> bytes:
        scripts = "".join(f'<script src="{uri[1:]}"></script>\n' for _, uri, _ in page.object_specs())
        return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<title>plt-bench {page.base_label}</title>\n<meta name=\"referrer\" content=\"unsafe-url\">\n"
                f"<script>performance.setResourceTimingBufferSize({page.objects + RESOURCE_BUFFER_SPARE})</script>\n"
                f"{scripts}</head>\n<body>\n<h1>plt-bench scripts</h1>\n"
                f"<p id=\"size\">{page.base_label}: {page.objects} render-blocking scripts of {page.size_bytes} "
                "bytes</p>\n</body>\n</html>\n").encode()

    def files(self, page: Page) -> list:
        html = page.html()
        return [(page.html_name, len(html), lambda: iter([html])),
                (page.object_name, page.size_bytes, lambda: iter_script(page.size_bytes))]

    def judge(self, load: Load) -> Judged:
        return proof.document_and_objects(load)


SCRIPTS = register(Scripts())
