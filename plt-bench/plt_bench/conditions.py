"""Typed, validated network conditions and the grid of a measurement.

Everything a user types is parsed here, before anything is created on the system.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Iterable, Sequence

from . import units
from .errors import UsageError

PROTOCOLS = ("quic", "tcp")
PROTO_CHOICES = ("quic", "tcp", "both")
DEFAULT_SIZES = ("5KB", "500KB", "10MB", "50MB")
ALL_SIZES = ("5KB", "500KB", "10MB", "50MB", "700MB")
CONGESTION_CONTROLS = ("cubic", "bbr", "reno")
UNSHAPED = "unshaped"

# Delay, jitter and loss arrive with the link emulator; until then they are refused, never ignored.
NOT_YET = "is not supported yet: this version shapes only the rate (delay, jitter and loss come with the link emulator)"


@dataclasses.dataclass(frozen=True)
class Conditions:
    """The link between client and server. rate None means unshaped."""

    rate_down_bps: int | None
    rate_up_bps: int | None

    @property
    def label(self) -> str:
        if self.rate_down_bps is None:
            return UNSHAPED
        down = units.format_rate(self.rate_down_bps)
        if self.rate_up_bps == self.rate_down_bps:
            return down
        return f"{down}/{units.format_rate(self.rate_up_bps)}"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell of a grid: a protocol, a page size and conditions."""

    proto: str
    size_bytes: int
    conditions: Conditions

    @property
    def size_label(self) -> str:
        return units.format_size(self.size_bytes)


@dataclasses.dataclass(frozen=True)
class Grid:
    protos: tuple[str, ...]
    sizes: tuple[int, ...]
    conditions: tuple[Conditions, ...]
    runs: int

    def cells(self) -> list[Cell]:
        return [Cell(p, s, c) for c, s, p in itertools.product(self.conditions, self.sizes, self.protos)]


def parse_protos(text: str, option: str = "--proto") -> tuple[str, ...]:
    items = units.split_list(text)
    if not items:
        raise UsageError(f"{option}: empty; expected one of {', '.join(PROTO_CHOICES)}")
    out: list[str] = []
    for item in items:
        p = item.lower()
        if p not in PROTO_CHOICES:
            raise UsageError(f"{option}: unknown protocol '{item}'; expected one of {', '.join(PROTO_CHOICES)}")
        for q in (PROTOCOLS if p == "both" else (p,)):
            if q not in out:
                out.append(q)
    return tuple(out)


def parse_rates(text: str, option: str = "--bw") -> tuple[int | None, ...]:
    """A comma-separated list of rates; 'unshaped' (or 'none') leaves the link unshaped."""
    items = units.split_list(text)
    if not items:
        raise UsageError(f"{option}: empty; expected {units.RATE_FORM}, or '{UNSHAPED}'")
    out: list[int | None] = []
    for item in items:
        r = None if item.lower() in (UNSHAPED, "none") else units.parse_rate(item, option)
        if r not in out:
            out.append(r)
    return tuple(out)


def parse_sizes(text: str, option: str = "--size") -> tuple[int, ...]:
    items = units.split_list(text)
    if not items:
        raise UsageError(f"{option}: empty; expected {units.SIZE_FORM}")
    out: list[int] = []
    for item in items:
        s = units.parse_size(item, option)
        if s < MIN_PAGE_BYTES:
            raise UsageError(f"{option}: '{item}' is too small; a page is at least {MIN_PAGE_BYTES} bytes")
        if s > MAX_PAGE_BYTES:
            raise UsageError(f"{option}: '{item}' is too large; a page is at most {units.format_size(MAX_PAGE_BYTES)}")
        if s not in out:
            out.append(s)
    return tuple(out)


def parse_runs(text: str | int, option: str = "--runs") -> int:
    try:
        n = int(str(text).strip())
    except ValueError:
        raise UsageError(f"{option}: '{text}' is not a whole number; expected 1 to 1000") from None
    if not 1 <= n <= 1000:
        raise UsageError(f"{option}: {n} is out of range; expected 1 to 1000")
    return n


def parse_cc(text: str, option: str = "--cc") -> str:
    cc = str(text).strip().lower()
    if cc not in CONGESTION_CONTROLS:
        raise UsageError(f"{option}: unknown congestion control '{text}'; expected one of {', '.join(CONGESTION_CONTROLS)}")
    return cc


def reject_unsupported(rtt: str | None, jitter: str | None, loss: str | None) -> None:
    for option, value in (("--rtt", rtt), ("--jitter", jitter), ("--loss", loss)):
        if value is not None:
            raise UsageError(f"{option} {NOT_YET}; remove {option} {value}")


def make_grid(protos: str, rates: str, sizes: str, runs: str | int, up_rates: str | None = None) -> Grid:
    """Build a grid from the user's strings; raises UsageError before anything is created."""
    p = parse_protos(protos)
    downs = parse_rates(rates)
    s = parse_sizes(sizes)
    n = parse_runs(runs)
    if up_rates is not None:
        ups = parse_rates(up_rates, "--up-bw")
        if len(ups) != 1:
            raise UsageError("--up-bw: give one rate; it applies to every --bw")
        if ups[0] is not None and None in downs:
            raise UsageError("--up-bw: cannot shape the uplink while --bw leaves the link unshaped")
        conds = tuple(Conditions(d, ups[0] if d is not None else None) for d in downs)
    else:
        conds = tuple(Conditions(d, d) for d in downs)
    return Grid(p, s, conds, n)


def ideal_seconds(size_bytes: int, rate_bps: int | None) -> float | None:
    """Payload-only ideal transfer time: 8 x size / rate (no headers, no handshake)."""
    if rate_bps is None:
        return None
    return 8.0 * size_bytes / rate_bps


# Smallest page whose fixed HTML frame fits, largest the testbed generates.
MIN_PAGE_BYTES = 1000
MAX_PAGE_BYTES = 2 * 10**9


def join(values: Iterable[object]) -> str:
    return ",".join(str(v) for v in values)


def size_labels(sizes: Sequence[int]) -> list[str]:
    return [units.format_size(s) for s in sizes]
