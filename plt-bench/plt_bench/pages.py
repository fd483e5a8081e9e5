"""Deterministic test pages, exact to the byte.

A single-object page ("5KB") is valid HTML5 with a visible body, padded to its size with HTML
comments of at most 1 MiB each: one giant comment crashes a Chromium tab above ~510 MiB, and <p>
padding costs gigabytes of renderer memory. A multi-object page ("200x5KB", the Long Look at
QUIC's "N x S") is a small HTML page embedding N images of S bytes each (see Page). Sizes are
decimal: 1 KB = 1000 bytes, 1 MB = 10**6 bytes. Files are generated on demand into sites/ and
regenerated when size or checksum is wrong.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import struct
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator

from . import units
from .errors import UsageError

GENERATOR_VERSION = 1  # the single-object pages' bytes; multi-object files are new names, not a new version
CHUNK_BYTES = 1 << 20  # largest comment, including its delimiters
_OPEN, _CLOSE = b"<!--", b"-->\n"
_MIN_COMMENT = len(_OPEN) + len(_CLOSE)
_FILL_LINE = b"plt-bench padding: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"


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
PAGE_FORM = (f"a size (one HTML file: 5KB, 500KB, 10MB) or NxS (an HTML page with N images of S each, "
             f"N from 1 to {MAX_OBJECTS}: 200x5KB, 1x1MB); 1 KB = 1000 bytes, 1 KiB = 1024")
MIN_PAGE_BYTES = 1000  # smallest single-object page: its fixed HTML frame fits
MAX_PAGE_BYTES = 2 * 10**9  # largest the testbed generates (all of a page's objects together)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


_IHDR = _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))  # 1x1, 8-bit grey
_IDAT = _chunk(b"IDAT", zlib.compress(b"\x00\x80", 9))  # one scanline: filter 0, mid grey
_IEND = _chunk(b"IEND", b"")
MIN_OBJECT_BYTES = len(PNG_SIGNATURE) + len(_IHDR) + len(_IDAT) + 12 + len(_IEND)  # 12: the pad chunk's frame


def iter_png(size_bytes: int) -> Iterator[bytes]:
    """Yield a valid 1x1 PNG of exactly size_bytes: padded by one private chunk before IEND."""
    pad = size_bytes - MIN_OBJECT_BYTES
    if pad < 0:
        raise UsageError(f"--size: an image of {size_bytes} bytes is smaller than the smallest PNG "
                         f"({MIN_OBJECT_BYTES} bytes)")
    yield PNG_SIGNATURE + _IHDR + _IDAT + struct.pack(">I", pad) + PAD_CHUNK
    crc = zlib.crc32(PAD_CHUNK)
    line = (_FILL_LINE * (CHUNK_BYTES // len(_FILL_LINE) + 1))[:CHUNK_BYTES]
    left = pad
    while left > 0:
        piece = line[:min(left, CHUNK_BYTES)]
        crc = zlib.crc32(piece, crc)
        yield piece
        left -= len(piece)
    yield struct.pack(">I", crc) + _IEND


@dataclasses.dataclass(frozen=True)
class Page:
    """What one trial loads. objects == 0: one HTML file of size_bytes (a single-object page, "5KB").
    objects == N: an HTML page embedding N images of size_bytes each (a multi-object page, "200x5KB":
    N + 1 requests, the HTML's own size set by N)."""

    size_bytes: int
    objects: int = 0

    @property
    def label(self) -> str:
        size = units.format_size(self.size_bytes)
        return f"{self.objects}x{size}" if self.objects else size

    @property
    def html_name(self) -> str:
        return f"objects_{self.label}.html" if self.objects else page_name(self.size_bytes)

    @property
    def object_name(self) -> str | None:
        return f"obj_{units.format_size(self.size_bytes)}.png" if self.objects else None

    def object_uris(self) -> list[str]:
        """The N objects' URIs, as the page's <img> elements ask for them (relative to the site's root)."""
        return [f"/{self.object_name}?i={k}" for k in range(self.objects)]

    def html(self) -> bytes:
        """A multi-object page's HTML (a single-object page's bytes come from iter_page)."""
        imgs = "".join(f'<img src="{u[1:]}" width="1" height="1" alt="">\n' for u in self.object_uris())
        return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<title>plt-bench {self.label}</title>\n"
                f"<script>performance.setResourceTimingBufferSize({self.objects + RESOURCE_BUFFER_SPARE})</script>\n"
                "</head>\n<body>\n<h1>plt-bench test page</h1>\n"
                f"<p id=\"size\">{self.label}: {self.objects} images of {self.size_bytes} bytes</p>\n"
                f"{imgs}<p id=\"end\">end of page</p>\n</body>\n</html>\n").encode()

    @property
    def html_bytes(self) -> int:
        return len(self.html()) if self.objects else self.size_bytes

    @property
    def object_bytes(self) -> int:
        """Bytes of all the embedded objects together (0 for a single-object page)."""
        return self.objects * self.size_bytes

    @property
    def total_bytes(self) -> int:
        """Every body the browser fetches: the HTML and all its objects."""
        return self.html_bytes + self.object_bytes

    def sort_key(self) -> tuple[int, int]:
        return (self.total_bytes, self.objects)

    def files(self) -> list[tuple[str, int, Callable[[], Iterator[bytes]]]]:
        """(file name, size, a function yielding its bytes) for every file the page needs."""
        if not self.objects:
            return [(self.html_name, self.size_bytes, lambda: iter_page(self.size_bytes))]
        html = self.html()
        return [(self.html_name, len(html), lambda: iter([html])),
                (self.object_name, self.size_bytes, lambda: iter_png(self.size_bytes))]


def parse_page(text: str, option: str = "--size") -> Page:
    """'500KB' -> one HTML file of 500 KB; '200x5KB' -> a page of 200 images of 5 KB each."""
    item = str(text).strip()
    m = re.fullmatch(r"(?P<n>[0-9]+)\s*[xX]\s*(?P<size>[0-9].*)", item)  # 5XB is a bad size, not 5 x "B"
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
    return Page(size, n)


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
            for name, size, pieces in page.files():
                path = self.root / name
                want = known.get(name, {}).get("sha256") if known.get(name, {}).get("size") == size else None
                if want is None:
                    want = digest(pieces())
                    known[name] = {"size": size, "sha256": want}
                if not (path.is_file() and path.stat().st_size == size and file_digest(path) == want):
                    self._write(path, size, pieces())
            out[item] = self.root / page.html_name
        self._save_manifest(manifest)
        return out

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
