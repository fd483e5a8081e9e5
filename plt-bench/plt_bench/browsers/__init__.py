"""The browsers plt-bench drives: one module each behind one interface (base.Browser), one table.

    chromium  Debian's Chromium and chromedriver (or a binary the user names: drivers.py)
    firefox   Debian's Firefox ESR and geckodriver (built from its crate by scripts/setup)

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

__all__ = ["BROWSERS", "CHROMIUM_NAME", "DEFAULT", "NAMES", "START_DEFAULT", "START_MODES", "WINDOW", "WINDOW_ARGS", "Browser", "asked", "get",
           "kept_refusals", "parse_start"]


def get(name: str) -> Browser:
    """The browser of a name; ValueError for any other."""
    try:
        return BROWSERS[name]
    except KeyError:
        raise ValueError(f"unknown browser {name!r}; expected one of {', '.join(NAMES)}") from None
