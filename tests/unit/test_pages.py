import dataclasses
import hashlib
from html.parser import HTMLParser

import pytest

from plt_bench import pages
from plt_bench.pages import generated
from plt_bench.errors import UsageError


class _Counter(HTMLParser):
    def __init__(self):
        super().__init__()
        self.comments, self.text, self.tags = [], [], []

    def handle_comment(self, data):
        self.comments.append(len(data) + 7)

    def handle_data(self, data):
        if data.strip():
            self.text.append(data.strip())

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


@pytest.mark.parametrize("size", [1000, 1001, 5000, 500_000, 2**20 - 1, 2**20, 2**20 + 1, 2**20 + 300,
                                  3 * 2**20 + 5, 10**7])
def test_pages_are_exact_valid_and_padded_with_small_comments(size):
    data = b"".join(pages.content.iter_page(size))
    assert len(data) == size
    assert data.startswith(b"<!DOCTYPE html>") and data.endswith(b"</html>\n")
    p = _Counter()
    p.feed(data.decode("ascii"))
    assert p.tags[:4] == ["html", "head", "meta", "title"] and "body" in p.tags
    assert "plt-bench test page" in p.text and "end of page" in p.text
    assert p.comments and max(p.comments) <= pages.base.CHUNK_BYTES
    assert b"--" not in data.replace(b"<!--", b"").replace(b"-->", b"").replace(b"plt-bench", b"")


def test_pages_are_deterministic():
    a = hashlib.sha256(b"".join(pages.content.iter_page(123_456))).hexdigest()
    assert a == pages.content.expected_digest(123_456) == pages.content.expected_digest(123_456)
    assert a != pages.content.expected_digest(123_457)


def test_sites_generate_and_repair(tmp_path):
    sites = pages.Sites(tmp_path)
    path = sites.ensure([5000])[5000]
    assert path.name == "index_5KB.html" and path.stat().st_size == 5000
    mtime = path.stat().st_mtime_ns
    sites.ensure([5000])
    assert path.stat().st_mtime_ns == mtime  # a good page is not rewritten
    path.write_bytes(path.read_bytes()[:-1] + b"X")  # right size, wrong checksum
    sites.ensure([5000])
    assert pages.base.file_digest(path) == pages.content.expected_digest(5000)
    path.write_bytes(b"short")  # wrong size
    sites.ensure([5000])
    assert path.stat().st_size == 5000


def test_frame_larger_than_page_is_refused():
    with pytest.raises(Exception, match="smaller than the page frame"):
        list(pages.content.iter_page(100))


def _png_chunks(data):
    """(type, data) of every chunk, each CRC checked: the PNG's own structure, read independently."""
    import struct
    import zlib
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    out, i = [], 8
    while i < len(data):
        (n,) = struct.unpack(">I", data[i:i + 4])
        kind, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
        (crc,) = struct.unpack(">I", data[i + 8 + n:i + 12 + n])
        assert crc == zlib.crc32(kind + body), kind
        out.append((kind, body))
        i += 12 + n
    return out


@pytest.mark.parametrize("size", [pages.content.MIN_OBJECT_BYTES, pages.content.MIN_OBJECT_BYTES + 1, 2, 5000, 10**5, 2**20 + 7,
                                  3 * 10**6])
def test_objects_are_exact_valid_pngs(size):
    if size < pages.content.MIN_OBJECT_BYTES:
        with pytest.raises(UsageError, match="smallest PNG"):
            list(pages.content.iter_png(size))
        return
    import io
    from PIL import Image
    data = b"".join(pages.content.iter_png(size))
    assert len(data) == size
    assert [k for k, _ in _png_chunks(data)] == [b"IHDR", b"IDAT", b"plTb", b"IEND"]
    with Image.open(io.BytesIO(data)) as im:  # a real decoder skips the padding and reads the pixel
        im.load()
        assert im.size == (1, 1) and im.getpixel((0, 0)) == 0x80


def test_a_multi_object_page_embeds_n_distinct_images_and_asks_for_their_timings():
    page = pages.parse_page("200x5KB")
    assert (page.objects, page.size_bytes, page.label) == (200, 5000, "200x5KB")
    assert (page.html_name, page.object_name) == ("objects_200x5KB.html", "obj_5KB.png")
    html = page.html()
    p = _Counter()
    p.feed(html.decode("ascii"))
    assert p.tags.count("img") == 200 and "end of page" in p.text
    uris = page.object_uris()
    assert len(set(uris)) == 200 and all(f'src="{u[1:]}"'.encode() in html for u in uris)
    # its largest contentful paint: the first image, a 300x300 PNG shown at its size (Chrome counts an
    # image by the smaller of its shown and its own size, and at 0.05 bits per shown pixel or more)
    assert uris[0] == "/hero_5KB.png?i=0" and generated.hero_px(page) == 300 and 5000 * 8 / 300**2 >= 0.1
    assert b'<img id="hero" src="hero_5KB.png?i=0" width="300" height="300"' in html
    assert b'<meta name="referrer" content="unsafe-url">' in html  # the server tells a trial's requests by it
    assert b"setResourceTimingBufferSize(216)" in html  # more than the default 250 would drop entries
    assert page.html_bytes == len(html) and page.total_bytes == len(html) + 200 * 5000
    assert pages.parse_page("5KB") == pages.Page(5000) and pages.Page(5000).total_bytes == 5000
    assert pages.parse_page(" 1 x 1MB ") == pages.Page(10**6, 1)


@pytest.mark.parametrize("text, fragment", [
    ("0x5KB", "has 0 objects; expected a size"), ("1001x5KB", "has 1001 objects"), ("10x50B", "the smallest PNG"),
    ("10x5QB", "is not a size"), ("900B", "at least 1000 bytes"), ("1000x3GB", "at most 2GB in all"),
    ("x5KB", "is not a size"), ("5XB", "'5XB' is not a size"),
    ("17o:60x5KB", "has 17 origins; expected 1 to 16"), ("0o:60x5KB", "has 0 origins"),
    ("5o:3x5KB", "spreads 3 objects over 5 origins"), ("4o:", "is not a size"),
])
def test_bad_pages_are_refused_naming_the_option(text, fragment):
    with pytest.raises(UsageError, match="--size") as e:
        pages.parse_page(text)
    assert fragment in str(e.value)


@pytest.mark.parametrize("size", [1000, 5000, 10**6])
def test_the_hero_is_an_exact_valid_png_of_its_side(size):
    import io
    from PIL import Image
    side = generated.hero_px(pages.Page(size, 2))
    data = b"".join(pages.content.iter_png(size, side))
    assert len(data) == size and size * 8 / side**2 >= 0.1 and side <= pages.generated.HERO_MAX_PX
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        assert im.size == (side, side) and im.getpixel((side // 2, side // 2)) == 0x80
    assert generated.hero_px(pages.Page(999, 2)) == 0 and generated.hero_px(pages.Page(5000, requests=3)) == 0  # none: heading is the LCP


def test_a_many_origin_page_spreads_its_objects_round_robin_over_sites_of_their_own():
    page = pages.parse_page("4o:60x5KB")
    assert (page.label, page.origins, page.objects, page.html_name) == ("4o:60x5KB", 4, 60, "objects_60x5KB_4o.html")
    urls = page.object_urls()
    assert list(dict.fromkeys(h for h, _ in urls)) == ["plt.test", "plt-o1.test", "plt-o2.test", "plt-o3.test"]
    assert [h for h, _ in urls[:5]] == ["plt.test", "plt-o1.test", "plt-o2.test", "plt-o3.test", "plt.test"]
    assert sum(h == "plt-o3.test" for h, _ in urls) == 15
    html = page.html().decode()
    assert 'src="https://plt-o1.test/obj_5KB.png?i=1"' in html and 'src="obj_5KB.png?i=4"' in html
    assert pages.parse_page("1o:3x5KB") == pages.Page(5000, 3)  # one origin: the page as it always was
    assert page.total_bytes == page.html_bytes + 60 * 5000


def test_a_repeat_visit_is_the_same_page_loaded_again():
    p = pages.parse_page("4o:20x5KB@repeat")
    assert (p.visit, p.label, p.base_label, p.html_name) == ("repeat", "4o:20x5KB@repeat", "4o:20x5KB",
                                                            "objects_20x5KB_4o.html")
    first = dataclasses.replace(p, visit="first")
    assert [f[:2] for f in p.files()] == [f[:2] for f in first.files()]  # the same files: the same page
    assert p.html() == first.html() and pages.parse_page("5KB@repeat-warm").visit == "repeat-warm"
    for bad, fragment in (("5KB@again", "a visit is @repeat"), ("bulk10s@repeat", "not of a bulk page"),
                          ("req10x1KB@repeat-warm", "not of a requests page"), ("@repeat", "is not a size")):
        with pytest.raises(UsageError, match="--size") as e:
            pages.parse_page(bad)
        assert fragment in str(e.value), e.value


def test_sites_generate_a_multi_object_page_once(tmp_path):
    sites = pages.Sites(tmp_path)
    page = pages.Page(5000, 3)
    path = sites.ensure([page, 5000])[page]
    assert path.read_bytes() == page.html()
    obj = tmp_path / "obj_5KB.png"
    assert obj.stat().st_size == 5000 and (tmp_path / "index_5KB.html").stat().st_size == 5000
    mtime = obj.stat().st_mtime_ns
    sites.ensure([page])
    assert obj.stat().st_mtime_ns == mtime
    obj.write_bytes(b"x" * 5000)  # right size, wrong bytes: regenerated
    sites.ensure([page])
    assert obj.read_bytes() == b"".join(pages.content.iter_png(5000))


# -- real:NAME: a real page by name, its recording made by the first campaign that asks ---------------
def fake_recordings(monkeypatch, body_bytes=60_000, responses=9, response_bytes=10_000):
    """Every recording stands there (archive.is_archive, archive.load): a fake of the given bytes."""
    from types import SimpleNamespace

    from plt_bench.pages import archive
    monkeypatch.setattr(archive, "is_archive", lambda folder: True)
    monkeypatch.setattr(archive, "load", lambda name, sites, option="--size": SimpleNamespace(
        name=name, body_bytes=body_bytes, responses=[SimpleNamespace(size_bytes=response_bytes)] * responses,
        origins=[SimpleNamespace(host="toolbelt.pkg.test", protocol="h2", address="ipv4")]))


def test_a_real_page_by_name_is_its_recording_and_an_unknown_one_is_refused(monkeypatch):
    from plt_bench import pages
    from plt_bench.pages import real as realpages
    with pytest.raises(UsageError, match="real:nope: no such real page; expected one of real:swagger, real:toolbelt"):
        pages.parse_page("real:nope")
    monkeypatch.setattr(pages.archive, "archive_exists", lambda name, sites=None: False)
    with pytest.raises(realpages.NotRecorded, match="real:toolbelt is not recorded on this machine yet.*plt-bench "
                                                    "record .*--name real-toolbelt --folder toolbelt.pkg.test=") as e:
        pages.parse_page("real:toolbelt")
    assert e.value.name == "toolbelt"
    # once recorded: the recording, replayed as recorded (har:real-NAME)
    monkeypatch.setattr(pages.archive, "archive_exists", lambda name, sites=None: name == "real-toolbelt")
    fake_recordings(monkeypatch)
    p = pages.parse_page("real:Toolbelt")
    assert (p.replay, p.archived, p.size_bytes, p.objects) == ("real-toolbelt", True, 50_000, 8)


def test_a_campaign_checks_every_other_option_before_it_records_a_real_page(monkeypatch):
    from plt_bench import pages, session
    recorded = []
    monkeypatch.setattr(pages.archive, "archive_exists", lambda name, sites=None: name in recorded)
    bad = {"campaign": "quick", "size": "real:toolbelt,500KB", "bw": "fast"}
    with pytest.raises(UsageError, match="--bw"):
        session.spec_from_options(bad, record=lambda name: recorded.append(f"real-{name}"))
    assert recorded == []  # refused before anything was recorded
    fake_recordings(monkeypatch)
    spec = session.spec_from_options({"campaign": "quick", "size": "real:toolbelt,500KB"},
                                     record=lambda name: recorded.append(f"real-{name}"))
    assert recorded == ["real-toolbelt"] and [p.replay for p in spec.grid.pages if p.archived] == ["real-toolbelt"]
    with pytest.raises(UsageError, match="real:toolbelt is not recorded"):  # a front end that cannot record says how
        recorded.clear()
        session.spec_from_options({"campaign": "quick", "size": "real:toolbelt"})
    # as recorded: a real page not recorded yet is checked once it is (it was refused as "not a recording")
    recorded.clear()
    spec = session.spec_from_options({"campaign": "quick", "size": "real:toolbelt", "proto": "h3,as-recorded"},
                                     record=lambda name: recorded.append(f"real-{name}"))
    assert recorded == ["real-toolbelt"] and spec.grid.protos == ("h3", "as-recorded")
    with pytest.raises(UsageError, match="as-recorded serves each origin of a recording.*'500KB' is not a recording"):
        session.spec_from_options({"campaign": "quick", "size": "real:toolbelt,500KB", "proto": "as-recorded"},
                                  record=lambda name: recorded.append(f"real-{name}"))


def test_the_corpus_is_every_real_page_of_packages_that_setup_installs_by_name():
    """real:* stands for every real page (the corpus preset's pages); at least twelve, each served from
    a package's files (Debian's /usr/share, or npm's unpacked into .tools/pages), none of Python's or
    Rust's own documentation; setup's part pages installs exactly pages.real.PACKAGES."""
    import re

    from plt_bench.axes import parse_pages
    from plt_bench.pages import real
    assert real.expand("5KB, real:* ,har:x") == ",".join(["5KB", *(f"real:{p.name}" for p in real.PAGES), "har:x"])
    assert len(real.PAGES) >= 12 and len({p.name for p in real.PAGES}) == len(real.PAGES)
    for p in real.PAGES:
        for host, folder in p.folders:
            assert host.endswith(".pkg.test") and str(folder).startswith(("/usr/share/doc/", "/usr/share/javascript/",
                                                                          str(real.PAGES_DIR)))
            assert not re.search(r"python3(\.\d+)?-doc|rust-doc", str(folder)), folder
    from plt_bench.cmd import PROJECT_ROOT
    setup = (PROJECT_ROOT / "scripts" / "setup").read_text()
    block = re.search(r"if part pages; then\n  pkgs\+=\(([^)]*)\)", setup).group(1)
    assert tuple(block.split()) == real.PACKAGES
    with pytest.raises(UsageError, match="real:nope: no such real page"):
        parse_pages("real:nope")
    # a page of three origins: its files' references pointed at the hosts that serve them, nothing else
    cdn = real.by_name("cdn")
    assert [h for h, _ in cdn.folders] == ["site.pkg.test", "static.pkg.test", "images.pkg.test"]
    from plt_bench.pages import page_url
    static, images, away = page_url("static.pkg.test", "/_static/"), page_url("images.pkg.test", "/_images/"), \
        page_url("palletsprojects.com", "/")
    page = ('<link href="_static/flask.css"><script src="_static/jquery.js"></script><img src="_images/logo.png">'
            f'<a href="installation.html">x</a><a href="{away}">y</a>')
    assert real.on_origins(page, real.CDN_ORIGINS) == (
        f'<link href="{static}flask.css"><script src="{static}jquery.js"></script><img src="{images}logo.png">'
        f'<a href="installation.html">x</a><a href="{away}">y</a>')
