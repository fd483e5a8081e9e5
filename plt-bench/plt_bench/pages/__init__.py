"""What a trial loads: pages of seven kinds behind one interface (base.PageKind), one module a kind.

    base        Page, the kind interface and its registry, host names and URLs, the pages folder
    content     the bytes plt-bench makes: padded HTML, padded PNGs
    proof       the judgements the kinds share: a document, its objects, a page served as recorded
    harfile     a recorded HAR read safely (the stand-in and recording kinds)
    archive     a recording's format; replayd the server that replays it
    kinds, in the order they read an item of --size:
    folder      url:ADDRESS, a page of a folder served as it is
    real        real:NAME, a real page from a package, by its recording
    recording   har:NAME, a recording replayed as recorded
    standin     har:NAME, a page set of stand-ins of a recording's sizes
    bulk        bulkD[_I], a download counted per interval
    requests    reqKxS[_cC], K requests after the load
    scripts     jsNxS, N render-blocking scripts of S bytes (the kind added through the interface alone)
    generated   5KB, 200x5KB, 4o:60x5KB: made here, exact to the byte

A kind imports the base and the shared modules, never another kind; the base imports no kind (a
Page finds its kind in the registry the kinds join as this package is imported). Adding a kind:
its module, its line below, its tests.
"""

from .base import (DEFAULT_SITES, HOST, KINDS, MAX_OBJECTS, MAX_ORIGINS, MAX_PAGE_BYTES, MIN_PAGE_BYTES,
                   VISITS, Judged, Load, Page, PageKind, Sites, as_page, format_ms, origin_host, page_form, page_url, parse_page,
                   replay_root, url_host, url_path)
from . import folder, real, recording, standin, bulk, requests, scripts, generated  # noqa: E402,F401 - their order is the registry's

__all__ = ["DEFAULT_SITES", "HOST", "KINDS", "MAX_OBJECTS", "MAX_ORIGINS", "MAX_PAGE_BYTES", "MIN_PAGE_BYTES",
           "VISITS", "Judged", "Load", "Page", "PageKind", "Sites", "as_page", "format_ms", "origin_host", "page_form", "page_url",
           "parse_page", "replay_root", "url_host", "url_path",
           "folder", "real", "recording", "standin", "bulk", "requests", "scripts", "generated"]
