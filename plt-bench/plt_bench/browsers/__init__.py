"""The browsers plt-bench drives: one module each behind one interface (base.Browser), one table.

    chromium  Debian's Chromium and chromedriver (or a binary the user names: drivers.py)
    firefox   Debian's Firefox ESR and geckodriver (built from its crate by scripts/setup)
    worker    the browser worker, in the client's namespace: a fresh browser (or context) per load, one
              answer a line; pipe its parent's end (BrowserWorker)

A new browser is a module with a Browser subclass and a line in BROWSERS (and its tests).
"""

from __future__ import annotations

from .base import START_DEFAULT, START_MODES, WINDOW, WINDOW_ARGS, Browser, asked, kept_refusals, parse_start
from .chromium import CHROMIUM
from .firefox import FIREFOX

BROWSERS: dict[str, Browser] = {b.name: b for b in (CHROMIUM, FIREFOX)}
NAMES = tuple(BROWSERS)
DEFAULT = "chromium"  # what stores written before the browser was recorded ran
CHROMIUM_NAME = CHROMIUM.name  # the browser whose build a testbed resolves (--browser-binary: drivers.py)

__all__ = ["metadata_of", "BROWSERS", "CHROMIUM_NAME", "DEFAULT", "NAMES", "START_DEFAULT", "START_MODES", "WINDOW", "WINDOW_ARGS", "Browser", "asked", "get",
           "kept_refusals", "parse_start"]


def get(name: str) -> Browser:
    """The browser of a name; ValueError for any other."""
    try:
        return BROWSERS[name]
    except KeyError:
        raise ValueError(f"unknown browser {name!r}; expected one of {', '.join(NAMES)}") from None


def metadata_of(names: tuple[str, ...], worker_versions: dict, build, start: str, sandboxed: str) -> dict:
    """A campaign's metadata of the browsers that loaded its pages: their names, comma-separated;
    Chromium's and its driver's versions as the worker read them, the others' by each browser;
    Chromium's build (drivers.ChromiumBuild, or None); how they were started (browser_start: fresh
    for every campaign before it) and whether sandboxed (browser_sandbox: key metadata since
    2026-11-27, but written only since 2026-11-29: store schema 28 fills it in for the campaigns
    between)."""
    return {"browser_start": start, "browser_sandbox": sandboxed,
            "chromium": worker_versions.get("chromium"), "chromedriver": worker_versions.get("chromedriver"),
            "browser": ",".join(names),
            **{k: v for b in names if b != DEFAULT for k, v in get(b).versions().items()},
            **(build.metadata() if build else {})}
