"""The bytes of the pages plt-bench makes, exact to the byte: a single-object page's HTML padded with
comments, and the padded PNG every generated object (and a stand-in image) is.

A single-object page ("5KB") is valid HTML5 with a visible body, padded to its size with HTML
comments of at most 1 MiB each: one giant comment crashes a Chromium tab above ~510 MiB, and <p>
padding costs gigabytes of renderer memory.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterator

from .. import units
from ..errors import UsageError
from .base import CHUNK_BYTES, digest

_OPEN, _CLOSE = b"<!--", b"-->\n"
_MIN_COMMENT = len(_OPEN) + len(_CLOSE)
FILL_LINE = b"plt-bench padding: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"


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
    fill = (FILL_LINE * (body // len(FILL_LINE) + 1))[:body]
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


def expected_digest(size_bytes: int) -> str:
    return digest(iter_page(size_bytes))


# Multi-object pages: the objects are images, because the load event waits for every <img> (not
# lazy) and they need no script to be fetched, and PNG, because a PNG may carry a private ancillary
# chunk of any length that every decoder skips: one valid 1x1 image padded to the byte. The N images
# are one file requested under N URIs (obj_5KB.png?i=0 ... ?i=N-1): N distinct requests and
# responses, as a page of N images makes, from one file on disk.
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PAD_CHUNK = b"plTb"  # ancillary (p), private (l), reserved bit clear (T), safe to copy (b)


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
    line = (FILL_LINE * (CHUNK_BYTES // len(FILL_LINE) + 1))[:CHUNK_BYTES]
    left = pad
    while left > 0:
        piece = line[:min(left, CHUNK_BYTES)]
        crc = zlib.crc32(piece, crc)
        yield piece
        left -= len(piece)
    yield struct.pack(">I", crc) + _IEND
