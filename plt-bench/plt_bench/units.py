"""Parsers for human units: rates, sizes, durations, percentages.

Every parser takes a string, returns a number in base units (bits per second, bytes,
milliseconds, percent) and raises UsageError naming the accepted form. Decimal prefixes
are used throughout: 1 KB = 1000 bytes, 1 Mbit = 10**6 bit, as in networking.
"""

from __future__ import annotations

import re

from .errors import UsageError

_NUM = r"(?P<num>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"  # ASCII digits only: "５KB" is refused

# tc units (case-insensitive in tc): bit, kbit, mbit, gbit, tbit; tcconfig units: Kbps, Mbps, Gbps, bps,
# and the explicit bit/s forms. tc reads "kbps"/"mbps" as *bytes* per second while tcconfig reads
# "Kbps"/"Mbps" as bits per second, so the all-lower-case spellings are refused as ambiguous.
_RATE_UNITS = {
    "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12,
    "bit/s": 1, "kbit/s": 10**3, "mbit/s": 10**6, "gbit/s": 10**9,
}
_TCCONFIG_RATE_UNITS = {"bps": 1, "Kbps": 10**3, "Mbps": 10**6, "Gbps": 10**9}
RATE_FORM = "a number with a unit: 500kbit, 100mbit, 1gbit (tc) or 100Mbps, 1Gbps (tcconfig, bits per second)"
MIN_RATE_BPS = 8_000
MAX_RATE_BPS = 100 * 10**9


def parse_rate(text: str, option: str = "--bw") -> int:
    """Parse a rate such as '100mbit' or '100Mbps' into bits per second."""
    s = str(text).strip()
    m = re.fullmatch(_NUM + r"\s*(?P<unit>[A-Za-z/]+)", s)
    if not m:
        raise UsageError(f"{option}: '{text}' is not a rate; expected {RATE_FORM}")
    num, unit = float(m["num"]), m["unit"]
    if unit in _TCCONFIG_RATE_UNITS:
        mult = _TCCONFIG_RATE_UNITS[unit]
    elif unit.lower() in _RATE_UNITS:
        mult = _RATE_UNITS[unit.lower()]
    elif unit.lower() in ("kbps", "mbps", "gbps", "bps"):
        raise UsageError(
            f"{option}: '{text}' is ambiguous: tc reads '{unit}' as bytes per second, tcconfig as bits per "
            f"second; write {m['num']}{unit[0].lower()}bit (bits) or {m['num']}{unit[0].upper()}{unit[1:]} "
            f"(tcconfig's bits per second)")
    else:
        raise UsageError(f"{option}: unknown rate unit '{unit}' in '{text}'; expected {RATE_FORM}")
    bps = num * mult
    if bps != int(bps):
        raise UsageError(f"{option}: '{text}' is not a whole number of bits per second")
    bps = int(bps)
    if bps % 1000:
        raise UsageError(f"{option}: '{text}' is not a whole number of kbit/s (tcconfig sets rates in kbit); "
                         f"expected {RATE_FORM}")
    if not MIN_RATE_BPS <= bps <= MAX_RATE_BPS:
        raise UsageError(f"{option}: '{text}' is out of range; expected 8kbit to 100gbit")
    return bps


def format_rate(bps: int) -> str:
    """Shortest exact tc-style spelling of a rate: 100000000 -> '100mbit'."""
    for unit, mult in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps % mult == 0:
            return f"{bps // mult}{unit}"
    return f"{bps}bit"


_SIZE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
SIZE_FORM = "a whole number with a unit: 5KB, 500KB, 10MB, 700MB (1 KB = 1000 bytes) or 64KiB, 1MiB"


def parse_size(text: str, option: str = "--size") -> int:
    """Parse a page size such as '500KB' into bytes (KB = 1000 bytes, KiB = 1024 bytes)."""
    s = str(text).strip()
    m = re.fullmatch(_NUM + r"\s*(?P<unit>[A-Za-z]+)", s)
    if not m or m["unit"].upper() not in _SIZE_UNITS:
        raise UsageError(f"{option}: '{text}' is not a size; expected {SIZE_FORM}")
    n = float(m["num"]) * _SIZE_UNITS[m["unit"].upper()]
    if n != int(n) or n <= 0:
        raise UsageError(f"{option}: '{text}' is not a positive whole number of bytes")
    return int(n)


def format_size(nbytes: int) -> str:
    """Canonical label of a size: 5000 -> '5KB', 10**7 -> '10MB', 1536 -> '1536B'."""
    for unit, mult in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if nbytes % mult == 0:
            return f"{nbytes // mult}{unit}"
    for unit, mult in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes % mult == 0:
            return f"{nbytes // mult}{unit}"
    return f"{nbytes}B"


def format_sig(x: float, digits: int = 3) -> str:
    """A figure with `digits` significant digits, never rounded to 0 unless it is 0:
    1030000.4 -> '1,030,000', 12.345 -> '12.3', 0.004987 -> '0.00499', 0 -> '0'."""
    if x == 0:
        return "0"
    if abs(x) >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    return f"{x:.{digits}g}" if abs(x) >= 1e-4 else f"{x:.{digits - 1}e}"


_TIME_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}
TIME_FORM = "a number with a unit: 25ms, 0.5ms, 1s, 500us"


def format_element(element: str | None) -> str:
    """An element as people read one in a table: <h1>, <img#hero> (a bare h1 reads as the protocol);
    '-' for none."""
    return f"<{element}>" if element else "-"


def parse_duration_ms(text: str, option: str) -> float:
    """Parse '25ms', '1s', '500us' into milliseconds."""
    s = str(text).strip()
    m = re.fullmatch(_NUM + r"\s*(?P<unit>us|ms|s)", s)
    if not m:
        raise UsageError(f"{option}: '{text}' is not a duration; expected {TIME_FORM}")
    return float(m["num"]) * _TIME_UNITS[m["unit"]]


def parse_percent(text: str, option: str, most: float = 100.0) -> float:
    """Parse '1%', '0.1%' into percent, within [0, most]."""
    s = str(text).strip()
    m = re.fullmatch(_NUM + r"\s*%", s)
    if not m:
        raise UsageError(f"{option}: '{text}' is not a percentage; expected a number with %: 0.1%, 5%")
    p = float(m["num"])
    if p > most:
        raise UsageError(f"{option}: '{text}' is over {most:g}%")
    return p


def split_list(text: str, option: str | None = None) -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']. With the option a user gave the list in, an empty item ('h3,,h1',
    'h3,') is refused by that name; without one, empty items are dropped. Every list option keeps one
    rule for a repeated value: it counts once (the callers drop duplicates, keeping the first)."""
    parts = [part.strip() for part in str(text).split(",")]
    if option is not None and any(not p for p in parts) and any(parts):
        raise UsageError(f"{option}: '{text}' has an empty item; expected comma-separated values with none empty")
    return [p for p in parts if p]
