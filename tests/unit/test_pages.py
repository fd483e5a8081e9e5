import hashlib
from html.parser import HTMLParser

import pytest

from plt_bench import pages


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
    data = b"".join(pages.iter_page(size))
    assert len(data) == size
    assert data.startswith(b"<!DOCTYPE html>") and data.endswith(b"</html>\n")
    p = _Counter()
    p.feed(data.decode("ascii"))
    assert p.tags[:4] == ["html", "head", "meta", "title"] and "body" in p.tags
    assert "plt-bench test page" in p.text and "end of page" in p.text
    assert p.comments and max(p.comments) <= pages.CHUNK_BYTES
    assert b"--" not in data.replace(b"<!--", b"").replace(b"-->", b"").replace(b"plt-bench", b"")


def test_pages_are_deterministic():
    a = hashlib.sha256(b"".join(pages.iter_page(123_456))).hexdigest()
    assert a == pages.expected_digest(123_456) == pages.expected_digest(123_456)
    assert a != pages.expected_digest(123_457)


def test_sites_generate_and_repair(tmp_path):
    sites = pages.Sites(tmp_path)
    path = sites.ensure([5000])[5000]
    assert path.name == "index_5KB.html" and path.stat().st_size == 5000
    mtime = path.stat().st_mtime_ns
    sites.ensure([5000])
    assert path.stat().st_mtime_ns == mtime  # a good page is not rewritten
    path.write_bytes(path.read_bytes()[:-1] + b"X")  # right size, wrong checksum
    sites.ensure([5000])
    assert pages.file_digest(path) == pages.expected_digest(5000)
    path.write_bytes(b"short")  # wrong size
    sites.ensure([5000])
    assert path.stat().st_size == 5000


def test_frame_larger_than_page_is_refused():
    with pytest.raises(Exception, match="smaller than the page frame"):
        list(pages.iter_page(100))
