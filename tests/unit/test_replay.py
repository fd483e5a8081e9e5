"""Replayed pages (plt_bench.replay): a recording turned into a page set; hostile, malformed and
huge recordings refused with nothing written. Pure: HAR files written here, no browser."""

import base64
import json

import pytest

from plt_bench import pages
from plt_bench.pages import standin as replay
from plt_bench.errors import UsageError
from plt_bench.pages import harfile

PNG = b"".join(pages.content.iter_png(300))


def url(host: str, path: str = "/") -> str:
    """A recorded URL on a host of the reserved .test domain (RFC 2606): fixture data, never fetched."""
    return f"https://{host}.rec.test{path}"


def entry(address, mime="image/png", size=300, status=200, method="GET", text=None, encoding=None, redirect=""):
    content = {"size": size, "mimeType": mime}
    if text is not None:
        content["text"] = text
    if encoding:
        content["encoding"] = encoding
    return {"pageref": "page_1", "request": {"method": method, "url": address},
            "response": {"status": status, "content": content, "redirectURL": redirect}}


def har(*entries, doc=url("www", "/index.html")):
    return {"log": {"version": "1.2", "creator": {"name": "test"}, "pages": [{"id": "page_1"}],
                    "entries": [entry(doc, "text/html", 5000), *entries]}}


def write(tmp_path, data, name="page.har"):
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return p


GOOD = har(entry(url("www", "/a.png?v=1"), text=base64.b64encode(PNG).decode(), encoding="base64"),
           entry(url("cdn", "/style.css"), "text/css; charset=utf-8", 1200, text="body{background:url(x.png)}"),
           entry(url("cdn", "/app.js"), "application/javascript", 800, text=f"fetch('{url('evil')}')"),
           entry(url("fonts", "/f.woff2"), "font/woff2", 2000),
           entry(url("www", "/beacon"), "text/plain", 0, status=204),
           entry(url("www", "/form"), "text/html", 10, method="POST"))


def test_a_recording_becomes_a_page_set_in_its_order_origins_types_and_sizes(tmp_path, monkeypatch):
    monkeypatch.setattr(pages.base, "DEFAULT_SITES", tmp_path / "sites")
    rs, notes = replay.make(write(tmp_path, GOOD), "news", tmp_path / "sites")
    assert rs.origins == (url("www", ""), url("cdn", ""), url("fonts", ""))
    assert [(o.origin, o.mime, o.size, o.element, o.body) for o in rs.objects] == [
        (0, "image/png", 300, "img", "har"), (1, "text/css", 1200, "link", "made"),
        (1, "application/javascript", 800, "script", "made"), (2, "font/woff2", 2000, "fetch", "made")]
    assert sorted(notes) == ["1 entry left out: not a GET", "1 entry left out: status 204"]
    folder = pages.replay_root(tmp_path / "sites", "news")
    # bodies: the recorded image byte for byte; the active ones made inert, of the recorded size
    assert (folder / rs.objects[0].file).read_bytes() == PNG and rs.objects[0].file == "0-a.png"
    css = (folder / rs.objects[1].file).read_bytes()
    js = (folder / rs.objects[2].file).read_bytes()
    assert len(css) == 1200 and css.startswith(b"/*") and css.endswith(b"*/") and b"url(" not in css
    assert len(js) == 800 and b"evil" not in js and (folder / rs.objects[3].file).stat().st_size == 2000
    # the page: every object in order, on its testbed origin, padded to the recorded document's size
    page = (folder / "index.html").read_bytes()
    assert len(page) == 5000 == rs.html_bytes
    assert page.index(b"https://plt.test/replay/news/0-a.png?v=1") < page.index(b"https://plt-o1.test/replay/news/2-app.js")
    assert b'<link rel="stylesheet" href="https://plt-o1.test/replay/news/1-style.css">' in page
    assert b"https://plt-o2.test/replay/news/3-f.woff2" in page
    # as a page of the grid: har:NAME, its objects proven one by one at their own sizes
    p = pages.Page(rs.object_bytes, 4, origins=3, replay="news")
    assert pages.parse_page("har:news") == p and pages.parse_page("har:news@repeat").visit == "repeat"
    assert p.label == "har:news" and p.html_name == "replay/news/index.html" and p.total_bytes == 5000 + 4300
    assert p.object_specs()[1] == ("plt-o1.test", "/replay/news/1-style.css", 1200)
    pages.standin.check_replay("news", tmp_path / "sites")
    (folder / rs.objects[3].file).write_bytes(b"x" * 2000)
    with pytest.raises(UsageError, match="changed since the page set was made"):
        pages.standin.check_replay("news", tmp_path / "sites")


def test_a_name_taken_or_malformed_is_refused_before_anything_is_written(tmp_path):
    sites = tmp_path / "sites"
    replay.make(write(tmp_path, GOOD), "one", sites)
    with pytest.raises(UsageError, match="exists already"):
        replay.make(write(tmp_path, GOOD), "one", sites)
    for bad in ("", "Big", "../x", "a/b", "-x", "x" * 41):
        with pytest.raises(UsageError, match="is not a page set name"):
            replay.make(write(tmp_path, GOOD), bad, sites)
    assert sorted(p.name for p in (sites / "replay").iterdir()) == ["one"]


@pytest.mark.parametrize("data, fragment", [
    ("{not json", "is not JSON"),
    ({"log": {"entries": []}}, "has no entries"),
    ({"entries": []}, "'log' is missing"),
    ({"log": {"entries": [{"request": {"url": 3}, "response": {"status": 200}}]}}, "'url' is missing or not str"),
    (har(entry(url("www", "/a.png"), size=-1)), "response.content.size is -1"),
    (har(entry(url("www", "/a.png"), text="%%%", encoding="base64")), "not valid base64"),
    ({"log": {"entries": [entry(url("www", "/a.png"))]}}, "entry 1 is not the page's document"),
])
def test_malformed_recordings_are_refused(tmp_path, data, fragment):
    with pytest.raises(UsageError, match="--from-har") as e:
        replay.make(write(tmp_path, data), "x", tmp_path / "sites")
    assert fragment in str(e.value)
    assert not (tmp_path / "sites" / "replay" / "x").exists()


@pytest.mark.parametrize("url, fragment", [
    ("file:///etc/passwd", "has the scheme 'file'"),
    ("javascript:alert(1)", "has the scheme 'javascript'"),
    ("data:image/png;base64,AAAA", "has the scheme 'data'"),
    (url("www", "/../../etc/passwd"), "'..' segment"),
    (url("www", "/a/%2e%2e/%2e%2e/b"), "'..' segment"),
    (url("www", "/a/%252e%252e/b"), "'..' segment"),
    (url("www", "/a\\..\\b"), "'..' segment"),
    ("https://127.0.0.1/x.png", "an address or not a public name"),
    ("https://localhost/x.png", "an address or not a public name"),
    (url("user:pw@www", "/x.png"), "user information"),
])
def test_hostile_recordings_are_refused_naming_the_entry(tmp_path, url, fragment):
    with pytest.raises(UsageError, match="entry 2") as e:
        replay.make(write(tmp_path, har(entry(url))), "x", tmp_path / "sites")
    assert fragment in str(e.value)
    assert not (tmp_path / "sites" / "replay").exists() or not any((tmp_path / "sites" / "replay").iterdir())


def test_a_redirect_to_a_host_the_recording_does_not_hold_is_hostile(tmp_path):
    bad = har(entry(url("www", "/go"), "text/html", 0, status=302, redirect=url("elsewhere", "/x")))
    with pytest.raises(UsageError, match="a host the recording does not hold"):
        replay.make(write(tmp_path, bad), "x", tmp_path / "sites")
    ok = har(entry(url("www", "/go"), "text/html", 0, status=302, redirect="/a.png"),
             entry(url("www", "/a.png")))
    rs, notes = replay.make(write(tmp_path, ok), "y", tmp_path / "sites")
    assert len(rs.objects) == 1 and notes == ["1 entry left out: status 302"]


def test_huge_recordings_are_refused(tmp_path, monkeypatch):
    many = har(*[entry(url("www", f"/{i}.png")) for i in range(pages.MAX_OBJECTS + 1)])
    with pytest.raises(UsageError, match="at most 1000 .huge"):
        replay.make(write(tmp_path, many), "x", tmp_path / "sites")
    origins = har(*[entry(url(f"o{i}", "/a.png")) for i in range(pages.MAX_ORIGINS)])
    with pytest.raises(UsageError, match="17 origins; the testbed serves at most 16"):
        replay.make(write(tmp_path, origins), "x", tmp_path / "sites")
    big = har(entry(url("www", "/a.bin"), "application/octet-stream", pages.MAX_PAGE_BYTES + 1))
    with pytest.raises(UsageError, match="huge"):
        replay.make(write(tmp_path, big), "x", tmp_path / "sites")
    monkeypatch.setattr(harfile, "MAX_HAR_BYTES", 100)
    with pytest.raises(UsageError, match="a recording is at most"):
        replay.make(write(tmp_path, GOOD), "x", tmp_path / "sites")
    assert not (tmp_path / "sites" / "replay" / "x").exists()


def test_two_recordings_compare_by_requests_origins_types_and_sizes():
    a = har(entry(url("www", "/a.png?i=1")), entry(url("cdn", "/b.css"), "text/css", 10))
    # each object from the other's origin
    b = har(entry("https://plt.test/replay/n/1-b.css", "text/css", 10), entry("https://plt-o1.test/replay/n/0-a.png?i=1"),
            doc="https://plt.test/replay/n/index.html?trial=x")
    assert harfile.requests_of(a) == [(0, "a.png?i=1", "image/png", 300), (1, "b.css", "text/css", 10)]
    assert harfile.round_trip_differences(a, b) == [
        "recorded, not replayed: origin 0 a.png?i=1 image/png 300 bytes",
        "recorded, not replayed: origin 1 b.css text/css 10 bytes",
        "replayed, not recorded: origin 0 b.css text/css 10 bytes",
        "replayed, not recorded: origin 1 a.png?i=1 image/png 300 bytes"]
    # the same, asked in another order (a browser may ask for two objects in either), on the testbed's names
    c = har(entry("https://plt-o1.test/replay/n/1-b.css", "text/css", 10), entry("https://plt.test/replay/n/0-a.png?i=1"),
            doc="https://plt.test/replay/n/index.html?trial=x")
    assert harfile.round_trip_differences(a, c) == []


def test_a_missing_page_set_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setattr(pages.base, "DEFAULT_SITES", tmp_path)
    with pytest.raises(UsageError, match=r"--size: 'har:nosuchset': no page set nosuchset .*pages --from-har FILE"):
        pages.parse_page("har:nosuchset")


def test_a_campaign_of_a_replayed_page_is_tied_to_its_recording(tmp_path, monkeypatch):
    from plt_bench import campaign
    monkeypatch.setattr(pages.base, "DEFAULT_SITES", tmp_path / "sites")
    replay.make(write(tmp_path, GOOD), "news", tmp_path / "sites")
    first = campaign.load("quick", {"size": "har:news", "proto": "all"})
    assert [p.label for p in first.grid.pages] == ["har:news"] and "replays" in first.as_dict()
    first_hash = first.spec_hash
    # the same name made again from another recording: another campaign, never a resumed one
    import shutil
    shutil.rmtree(pages.replay_root(tmp_path / "sites", "news"))
    other = dict(GOOD, log=dict(GOOD["log"], entries=GOOD["log"]["entries"][:2]))
    replay.make(write(tmp_path, other, "other.har"), "news", tmp_path / "sites")
    again = campaign.load("quick", {"size": "har:news", "proto": "all"})
    assert again.spec_hash != first_hash and again.grid.pages[0].objects == 1


def _doc_sized(size):
    data = har()
    data["log"]["entries"][0]["response"]["content"]["size"] = size
    return data


def _content_as(value, key="content"):
    data = har(entry(url("www", "/a.png")))
    data["log"]["entries"][1]["response"][key] = value
    return data


@pytest.mark.parametrize("data, fragment", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (_doc_sized(10**15), "a page is at most"),
    (_doc_sized(10**30), "a page is at most"),
    ({"log": {"pages": [{"id": "p1"}], "entries": [{**entry(url("www", "/")), "pageref": "p2"}]}},
     "no entry belongs to the first page"),
    (_content_as("a string"), "entry 2 response: 'content' is not an object"),
    (_content_as(5, "redirectURL"), "entry 2 response: 'redirectURL' is not a string"),
])
def test_hostile_structures_are_refused_not_crashed_on(tmp_path, data, fragment):
    """Issue 36: deep nesting (RecursionError), a document of 10^15 or 10^30 bytes (MemoryError,
    OverflowError), no entry of the first page (IndexError), content as a string and an integer
    redirectURL (attribute and type errors): each refused by name, nothing written."""
    with pytest.raises(UsageError, match="--from-har") as e:
        replay.make(write(tmp_path, data), "x", tmp_path / "sites")
    assert fragment in str(e.value)
    assert not (tmp_path / "sites" / "replay" / "x").exists()


def test_a_recording_that_is_a_link_to_process_memory_or_a_fifo_is_refused(tmp_path):
    """Issue 36: a path linked to /proc/self/mem crashed on read (it claims 0 bytes and cannot be read);
    a FIFO would block."""
    import os
    link = tmp_path / "mem.har"
    link.symlink_to("/proc/self/mem")
    fifo = tmp_path / "pipe.har"
    os.mkfifo(fifo)
    for path in (link, fifo):
        with pytest.raises(UsageError, match="--from-har: "):
            replay.make(path, "x", tmp_path / "sites")
    assert not (tmp_path / "sites" / "replay" / "x").exists()


def test_a_scheme_relative_redirect_to_another_host_is_hostile(tmp_path):
    """Issue 36: '//evil.example/x' was read as a path on the recorded host and accepted."""
    bad = har(entry(url("www", "/go"), "text/html", 0, status=302, redirect="//evil.rec.test/x"))
    with pytest.raises(UsageError, match="a host the recording does not hold"):
        replay.make(write(tmp_path, bad), "x", tmp_path / "sites")


def test_a_nul_in_a_path_is_called_a_nul(tmp_path):
    with pytest.raises(UsageError, match="NUL character") as e:
        replay.make(write(tmp_path, har(entry(url("www", "/a%00.png")))), "x", tmp_path / "sites")
    assert "'..'" not in str(e.value)


def test_a_full_disk_or_a_second_maker_leaves_nothing_and_is_refused(tmp_path, monkeypatch):
    """Issue 36: a full disk and two makers of one set at once (Directory not empty) were tracebacks."""
    import errno
    import builtins
    sites = tmp_path / "sites"
    real_open = builtins.open

    def full(path, mode="r", *a, **kw):
        if "w" in mode and ".part-" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *a, **kw)
    monkeypatch.setattr(builtins, "open", full)
    with pytest.raises(UsageError, match="cannot be written .*No space left on device.*nothing was written"):
        replay.make(write(tmp_path, GOOD), "x", sites)
    monkeypatch.setattr(builtins, "open", real_open)
    assert sorted(p.name for p in (sites / "replay").iterdir()) == []
    real_rename = harfile.os.rename

    def raced(src, dst):  # the other maker renames its set into place first
        pages.replay_root(sites, "x").mkdir()
        (pages.replay_root(sites, "x") / "theirs").write_text("")
        return real_rename(src, dst)
    monkeypatch.setattr(harfile.os, "rename", raced)
    with pytest.raises(UsageError, match="exists already"):
        replay.make(write(tmp_path, GOOD), "x", sites)
    assert sorted(p.name for p in (sites / "replay").iterdir()) == ["x"]
    assert [p.name for p in pages.replay_root(sites, "x").iterdir()] == ["theirs"]


def test_a_killed_maker_s_half_made_set_is_removed_by_the_next_maker(tmp_path):
    """Issue 36: SIGKILL during `pages --from-har` left sites/replay/.NAME.part-PID (994 MB). The next
    `pages` (and `clean`) removes those whose PID is dead, and keeps a live maker's."""
    import subprocess
    dead = subprocess.Popen(["true"])
    dead.wait()
    folder = tmp_path / "sites" / "replay"
    folder.mkdir(parents=True)
    (folder / f".news.part-{dead.pid}").mkdir()
    (folder / f".news.part-{dead.pid}" / "0-a.png").write_bytes(b"x" * 1000)
    import os
    (folder / f".live.part-{os.getpid()}").mkdir()
    replay.make(write(tmp_path, GOOD), "other", tmp_path / "sites")
    assert sorted(p.name for p in folder.iterdir()) == [f".live.part-{os.getpid()}", "other"]


def test_what_a_pages_worker_fetched_is_taken_from_the_servers_log_and_its_folder(tmp_path):
    """A served folder's recording: what the server served that the page's own HAR did not see (a
    worker's fetch: MkDocs' search worker, pdf.js's) is added from the folder, its body whole; what
    the HAR has, a 404, a POST, a host of no folder and a path out of its folder stay out."""
    from plt_bench.recorder import served_not_in_har
    site = tmp_path / "site"
    (site / "search").mkdir(parents=True)
    (site / "search" / "worker.js").write_text("onmessage = () => {};")
    (site / "index.html").write_text("<p>x</p>")
    (tmp_path / "secret").write_text("no")
    log = {"pages": [{"startedDateTime": "2026-11-28T05:00:00.000Z"}],
           "entries": [{"request": {"url": pages.page_url("m.pkg.test", "/index.html")}}]}
    served = [{"host": "m.pkg.test", "uri": "/index.html", "status": 200, "method": "GET", "proto": "h2"},
              {"host": "m.pkg.test", "uri": "/search/worker.js", "status": 200, "method": "GET", "proto": "h2"},
              {"host": "m.pkg.test", "uri": "/search/worker.js", "status": 200, "method": "GET", "proto": "h2"},
              {"host": "m.pkg.test", "uri": "/gone.js", "status": 404, "method": "GET"},
              {"host": "m.pkg.test", "uri": "/index.html?x", "status": 200, "method": "POST"},
              {"host": "other.pkg.test", "uri": "/a.js", "status": 200, "method": "GET"},
              {"host": "m.pkg.test", "uri": "/%2e%2e/secret", "status": 200, "method": "GET"}]
    got, filled = served_not_in_har(served, log, [("m.pkg.test", site, "")])
    assert filled == 0
    assert [e["request"]["url"] for e in got] == [pages.page_url("m.pkg.test", "/search/worker.js")]
    content = got[0]["response"]["content"]
    assert content["mimeType"] in ("application/javascript", "text/javascript") and content["size"] == 21
    assert base64.b64decode(content["text"]) == b"onmessage = () => {};"


def test_a_body_the_recording_browser_did_not_keep_is_taken_from_the_folder_or_left_out(tmp_path):
    """Issue 59, item 2: a 3 MB image recorded at 1 Mbit/s came back in the browser's HAR with
    content.size 8293 and an empty text, and was archived as a 200 of 0 bytes. A served folder's
    recording takes the body from the folder the server served it from; a HAR that holds no body
    for an entry whose size says bytes (a third party's) has it left out and counted, never stored
    as an empty 200 (nor as zeros of a size that may be a part of it)."""
    from plt_bench.recorder import served_not_in_har
    site = tmp_path / "site"
    site.mkdir()
    image = bytes(range(256)) * 12_000  # 3 MB
    (site / "big.bin").write_bytes(image)
    doc = pages.page_url("a.test", "/index.html")
    entry = {"request": {"url": pages.page_url("a.test", "/big.bin")},
             "response": {"status": 200, "content": {"size": 8293, "mimeType": "image/png", "text": ""}}}
    log = {"entries": [{"request": {"url": doc}}, entry]}
    served = [{"host": "a.test", "uri": "/index.html", "status": 200, "method": "GET"},
              {"host": "a.test", "uri": "/big.bin", "status": 200, "method": "GET"}]
    extra, filled = served_not_in_har(served, log, [("a.test", site, "")])
    assert (extra, filled) == ([], 1)
    assert base64.b64decode(entry["response"]["content"]["text"]) == image
    assert entry["response"]["content"]["size"] == len(image)
    # a HAR without the folder: left out and counted
    from plt_bench.pages import archive
    har = {"log": {"entries": [
        {"request": {"url": doc}, "response": {"status": 200, "content": {"size": 5, "mimeType": "text/html",
                                                                            "text": "<p>x"}}},
        {"request": {"url": pages.page_url("a.test", "/big.bin")},
         "response": {"status": 200, "content": {"size": 8293, "mimeType": "image/png", "text": ""}}},
        {"request": {"url": pages.page_url("a.test", "/empty.txt")},
         "response": {"status": 200, "content": {"size": 0, "mimeType": "text/plain", "text": ""}}}]}}
    a, bodies, notes = archive.plan(har["log"], har["log"]["entries"], "x")
    assert [r.path for r in a.responses] == ["/index.html", "/empty.txt"]  # an empty body that says 0 bytes stays
    assert a.source["left_out"] == {archive.NOT_KEPT: 1}
    assert any("1 entry left out: has no body though its size says bytes" in n for n in notes), notes
    with pytest.raises(UsageError, match="entry 1 .the page's navigation. has no body though its size says bytes"):
        archive.plan(har["log"], [har["log"]["entries"][1]], "x")
