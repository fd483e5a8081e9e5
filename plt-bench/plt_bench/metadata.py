"""The stamp every campaign carries: what ran, where, when. Trials whose key metadata differ
are not comparable (KEY_FIELDS)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
from importlib import metadata as importlib_metadata

from . import __version__, cmd
from .cpu import cpu_list, own_cpus

KEY_FIELDS = ("host", "kernel", "cpus_used", "link_backend", "link_placement", "browser", "chromium", "chromedriver",
              "firefox", "geckodriver", "http_server", "caddy_version", "quinnserve_version", "discovery",
              "browser_sandbox", "browser_start")  # congestion control is a
#              trial's own field (Trial.cc) since schema 13, the browser too since schema 18 (metadata's browser: the
#              campaign's, comma-separated)
# what a campaign's metadata held before a key field was recorded (every campaign before 2026-11-26 ran Chromium,
# and every one before 2026-11-26's second server Caddy)
KEY_DEFAULTS = {"browser": "chromium", "http_server": "caddy", "discovery": "forced",
                "browser_sandbox": "off",  # every campaign before 2026-11-27 ran its browsers as root, unsandboxed
                "browser_start": "fresh"}  # ... and before 2026-11-28 a fresh browser for every trial


def key_value(metadata: dict, field: str):
    """A key field of a campaign's (or host's) metadata, as it was where the field is missing."""
    return metadata.get(field, KEY_DEFAULTS.get(field))


def key_diff(a: dict, b: dict) -> list[str]:
    """The key fields (KEY_FIELDS) in which two metadata differ: their trials are not pooled."""
    return [k for k in KEY_FIELDS if key_value(a, k) != key_value(b, k)]


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def git_state() -> dict:
    root = str(cmd.PROJECT_ROOT)
    head = cmd.run(["git", "-C", root, "rev-parse", "HEAD"], check=False)
    if head.returncode != 0:
        return {"git_commit": None, "git_dirty": None}
    dirty = cmd.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"], check=False)
    return {"git_commit": head.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}


def package_version(name: str) -> str | None:
    try:
        return importlib_metadata.version(name)
    except importlib_metadata.PackageNotFoundError:
        return None


def machine() -> dict:
    load1, load5, load15 = os.getloadavg()
    own = own_cpus()
    return {
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpus": cpu_list(own),      # the CPUs this run's processes may use (a pinned worker's own)
        "cpus_used": len(own),      # a key field: runs on sets of one size pool, whichever CPUs they are
        "loadavg": [load1, load5, load15],
        "python": platform.python_version(),
        "plt_bench": __version__,
        "tcconfig": package_version("tcconfig"),
        "selenium": package_version("selenium"),
        "psutil": package_version("psutil"),
        "utc": utc_now(),
        **git_state(),
    }
