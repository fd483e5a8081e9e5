"""How the analysis writes its files (report, tables, figures): each whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path


def atomic(path: Path, write) -> Path:
    """A report file whole or not at all: write(tmp) fills a hidden file beside it, which is then renamed
    over it; a full disk (or any failure) leaves no 0-byte or cut file, nor the temporary."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
