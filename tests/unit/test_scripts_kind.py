"""The scripts kind (pages.scripts: jsNxS), the kind added through the interface alone: its item, its
files exact to the byte, its page, the paths every server serves for it, and its judgement."""
import re

import pytest

from plt_bench import pages
from plt_bench.errors import UsageError
from plt_bench.pages import Load, Page, parse_page, scripts
from plt_bench.servers import SERVED_PATHS


def test_an_item_names_a_page_of_scripts_that_reads_back_the_same():
    page = parse_page("js20x10KB")
    assert page.page_kind is scripts.SCRIPTS and page.measures == "page" and page.form == "scripts"
    assert (page.label, page.html_name, page.object_name) == ("js20x10KB", "scripts_20x10KB.html", "js_10KB.js")
    assert parse_page(page.label) == page and page != Page(10_000, 20)  # not the page of 20 images
    assert page.object_bytes == 200_000 and page.total_bytes == page.html_bytes + 200_000
    for bad, why in (("js0x5KB", "0 scripts; expected 1 to 1000"), ("js2x10B", "at least 16 bytes"),
                     ("jsfoo", "expected jsNxS"), ("js2000x5KB", "expected 1 to 1000")):
        with pytest.raises(UsageError, match=why):
            parse_page(bad)
    with pytest.raises(UsageError, match="repeat visits are of pages"):
        parse_page("js2x5KB@repeat")


def test_its_files_are_exact_and_its_page_blocks_on_every_script():
    page = parse_page("js5x1000B")
    (html_name, html_size, html), (js_name, js_size, js) = page.files()
    body = b"".join(js())
    assert (js_name, js_size, len(body)) == ("js_1KB.js", 1000, 1000)
    assert body.startswith(b"/*") and body.endswith(b"*/\n") and b"*/" not in body[2:-3]  # one comment: runs, does nothing
    text = b"".join(html()).decode()
    assert len(text) == html_size == page.html_bytes
    head = text.split("</head>")[0]
    assert re.findall(r'<script src="([^"]+)"></script>', head) == [f"js_1KB.js?i={k}" for k in range(5)]
    assert "async" not in head and "defer" not in head  # parser-blocking: nothing painted before they ran
    assert [u for _, u, _ in page.object_specs()] == [f"/js_1KB.js?i={k}" for k in range(5)]


def test_every_server_serves_its_files_and_nothing_beside():
    served = re.compile(SERVED_PATHS)
    assert served.fullmatch("/scripts_20x10KB.html") and served.fullmatch("/js_10KB.js")
    assert not served.fullmatch("/js_10KB.js.bak") and not served.fullmatch("/scripts_x.html")
    assert pages.base.served_paths() == SERVED_PATHS


def test_it_is_judged_as_a_page_and_its_objects():
    page = parse_page("js2x1000B")
    url = pages.page_url(pages.HOST, f"/{page.html_name}?trial=t1")
    nav = {"responseStatus": 200, "nextHopProtocol": "h3", "decodedBodySize": page.html_bytes, "loadEventEnd": 90.0,
           "startTime": 0.0}
    res = [{"name": pages.page_url(pages.HOST, u), "nextHopProtocol": "h3", "responseStatus": 200,
            "decodedBodySize": 1000, "initiatorType": "script"} for _, u, _ in page.object_specs()]
    log = [{"uri": f"/{page.html_name}?trial=t1", "proto": "h3", "status": 200, "size": page.html_bytes}] + [
        {"uri": u, "host": pages.HOST, "proto": "h3", "status": 200, "size": 1000} for _, u, _ in page.object_specs()]
    judged = page.page_kind.judge(Load(page, "h3", url, {"nav": nav, "resources": res}, log, pages.DEFAULT_SITES))
    assert (judged.status, judged.reason, judged.objects_ok) == ("ok", None, 2)
    short = [dict(res[0], decodedBodySize=999), res[1]]  # a script cut short fails the trial, named
    judged = page.page_kind.judge(Load(page, "h3", url, {"nav": nav, "resources": short}, log, pages.DEFAULT_SITES))
    assert judged.status == "failed" and "1 of 2 objects not proven; first: /js_1KB.js?i=0" in judged.reason
