"""Deterministic test pages, exact to the byte.

A page is valid HTML5 with a visible body, padded to its size with HTML comments of at
most 1 MiB each: one giant comment crashes a Chromium tab above ~510 MiB, and <p> padding
costs gigabytes of renderer memory. Sizes are decimal: 1 KB = 1000 bytes, 1 MB = 10**6 bytes.
Pages are generated on demand into sites/ and regenerated when size or checksum is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

from . import units
from .errors import UsageError

GENERATOR_VERSION = 1
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


def expected_digest(size_bytes: int) -> str:
    h = hashlib.sha256()
    for piece in iter_page(size_bytes):
        h.update(piece)
    return h.hexdigest()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES * 4):
            h.update(chunk)
    return h.hexdigest()


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

    def path(self, size_bytes: int) -> Path:
        return self.root / page_name(size_bytes)

    def ensure(self, sizes: tuple[int, ...] | list[int]) -> dict[int, Path]:
        """Make sure every page exists with the right size and checksum; (re)generate the others."""
        self.root.mkdir(parents=True, exist_ok=True)
        manifest = self._manifest()
        pages = manifest.setdefault("pages", {})
        out = {}
        for size in sizes:
            path = self.path(size)
            name = path.name
            want = pages.get(name, {}).get("sha256") if pages.get(name, {}).get("size") == size else None
            if want is None:
                want = expected_digest(size)
                pages[name] = {"size": size, "sha256": want}
            ok = path.is_file() and path.stat().st_size == size and file_digest(path) == want
            if not ok:
                self._write(path, size)
            out[size] = path
        self._save_manifest(manifest)
        return out

    def _write(self, path: Path, size: int) -> None:
        free = os_free_bytes(self.root)
        if free < size + (256 << 20):
            raise UsageError(f"--size: not enough free disk in {self.root} for {path.name} "
                             f"({size} bytes needed, {free} free)")
        tmp = path.with_suffix(".part")
        with open(tmp, "wb") as f:
            for piece in iter_page(size):
                f.write(piece)
        os.replace(tmp, path)


def os_free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
