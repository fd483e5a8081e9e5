"""Link traces in Mahimahi's format: reading them (every rule checked, with the line number),
their identity (name and SHA-256), what they promise per window, and making them from rates.

The format (Mahimahi's mm-link): one whole number of milliseconds per line, never decreasing;
each line is one delivery opportunity of 1500 bytes at that time (a timestamp repeated n times is
n opportunities); the trace loops with its last timestamp as its period; an opportunity that finds
the queue empty is lost. A file holding the single line `1` is 1500 bytes a millisecond: 12 Mbit/s.

The traces published with Mahimahi (cellular drives: ATT, T-Mobile, Verizon LTE and others) are
GPL-3+ and are not shipped here: give any path. `from_rates` turns a rate series (time, Mbit/s)
into a trace, and `plt-bench trace` does it from a CSV file.

A trace travels with the data that names it: the conditions carry its name and hash only, the grid
that read it carries the trace itself (Grid.traces), a campaign its own (Spec.traces: what a
cluster's worker is sent), a testbed and its link theirs (by hash: by_hash), where the link looks
the opportunities up when it applies the conditions. Nothing is kept in the process.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import itertools
import math
import os
import re
from pathlib import Path

from .errors import UsageError

OPPORTUNITY_BYTES = 1500
MAX_TRACE_BYTES = 200 * 2**20
MAX_PERIOD_MS = 24 * 3600 * 1000
MAX_OPPORTUNITIES = 20_000_000
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
TRACE_FORM = ("a Mahimahi trace file: one whole number of milliseconds per line, never decreasing, each a "
              "1500-byte delivery opportunity, the last one > 0 (the trace's period)")


@dataclasses.dataclass(frozen=True)
class Trace:
    """One trace file, read and checked. `ms` is every opportunity's time within one period."""

    name: str        # the file's name without its extension: what labels and reports show
    path: str        # where it was read (not part of its identity: the hash is)
    sha256: str      # of the file's bytes
    ms: tuple[int, ...]
    period_ms: int

    @property
    def opportunities(self) -> int:
        return len(self.ms)

    @property
    def mean_bps(self) -> int:
        """The rate the trace offers on average over its period (1500-byte opportunities)."""
        return round(self.opportunities * OPPORTUNITY_BYTES * 8 * 1000 / self.period_ms)

    def window_bytes(self, window_ms: int, start_ms: int, count: int) -> list[int]:
        """Bytes the trace offers in each of `count` windows of `window_ms`, from `start_ms` after its
        start (the trace loops). An opportunity at t ms belongs to the window holding t - 1 ms: at time
        t it has carried its bytes, i.e. the window ending at t."""
        out = [0] * count
        end = start_ms + window_ms * count
        cycle = 0
        while True:
            base = cycle * self.period_ms
            if base >= end:
                break
            for m in self.ms:
                t = base + m
                if t <= start_ms:
                    continue
                if t > end:
                    break
                out[(t - 1 - start_ms) // window_ms] += OPPORTUNITY_BYTES
            cycle += 1
        return out

    def peak_bps(self, window_ms: int = 100) -> int:
        """The highest rate over any window of `window_ms` in one period (looping)."""
        n = max(1, math.ceil(self.period_ms / window_ms))
        return max(self.window_bytes(window_ms, 0, n)) * 8 * 1000 // window_ms


def parse(text: str, where: str) -> tuple[tuple[int, ...], int]:
    """(opportunity times, period) of a trace's text; UsageError naming `where` and the line."""
    ms: list[int] = []
    last, last_text = 0, None
    n = 0
    for n, line in enumerate(io.StringIO(text, newline=None), 1):  # a line at a time, not a list of them
        t = line.strip()
        if not t:
            continue
        if t == last_text:  # a repeated timestamp: the same int object, not millions of copies
            ms.append(last)
            if len(ms) > MAX_OPPORTUNITIES:
                raise UsageError(f"{where}: line {n}: more than {MAX_OPPORTUNITIES:,} opportunities")
            continue
        if not (t.isascii() and t.isdigit()):
            # the line is not quoted: a path given by mistake (/etc/passwd) is not echoed
            raise UsageError(f"{where}: line {n}: not a whole number of milliseconds; expected {TRACE_FORM}")
        v = int(t)
        if v < last:
            raise UsageError(f"{where}: line {n}: {v} comes after {last}; timestamps never decrease ({TRACE_FORM})")
        if v > MAX_PERIOD_MS:
            raise UsageError(f"{where}: line {n}: {v} ms is more than 24 hours; expected a trace of at most "
                             f"{MAX_PERIOD_MS} ms")
        ms.append(v)
        last, last_text = v, t
        if len(ms) > MAX_OPPORTUNITIES:
            raise UsageError(f"{where}: line {n}: more than {MAX_OPPORTUNITIES:,} opportunities")
    if not ms:
        raise UsageError(f"{where}: no timestamps (an empty trace); expected {TRACE_FORM}")
    if last == 0:
        raise UsageError(f"{where}: line {n}: the last timestamp is 0, so the trace lasts no time; its last "
                         "timestamp is its period and must be > 0")
    return tuple(ms), last


GEN_FORM = ("gen:constant:RATE, gen:onoff:RATE:ON:OFF (off first, then on) or gen:ramp:FROM:TO:DURATION "
            "(10 equal steps), e.g. gen:onoff:24mbit:500ms:500ms")


def generate(spec: str, option: str) -> Trace:
    """A synthetic trace from its description (GEN_FORM): made here, never read from a file."""
    from . import units
    where = f"{option}: {spec}"
    kind, *args = spec.split(":")[1:] or [""]
    rate = lambda x: units.parse_rate(x, where) / 1e6  # noqa: E731
    secs = lambda x: units.parse_duration_ms(x, where) / 1000.0  # noqa: E731
    shapes = {"constant": (1, lambda a: constant(rate(a[0]), 1.0)),
              "onoff": (3, lambda a: on_off(rate(a[0]), secs(a[1]), secs(a[2]))),
              "ramp": (3, lambda a: ramp(rate(a[0]), rate(a[1]), secs(a[2])))}
    if kind not in shapes or len(args) != shapes[kind][0]:
        raise UsageError(f"{where}: expected {GEN_FORM}")
    try:
        ms = shapes[kind][1](args)
    except UsageError as e:
        if str(e).startswith(where):
            raise
        raise UsageError(f"{where}: {e}") from None
    text = render(ms).encode()
    name = "-".join([kind, *args]).replace("/", "_")
    return Trace(name, spec, hashlib.sha256(text).hexdigest(), tuple(ms), ms[-1])


def read(path: str | os.PathLike, option: str) -> Trace:
    """A trace file (or a gen: description), checked. UsageError naming `option`. The caller carries
    it on (Grid.traces, Spec.traces, a testbed's and its link's traces): conditions name it by hash."""
    if str(path).startswith("gen:"):
        return generate(str(path), option)
    p = Path(path).expanduser()
    where = f"{option}: {path}"
    try:
        size = p.stat().st_size
        if not p.is_file():
            raise UsageError(f"{where}: not a file; expected {TRACE_FORM}")
        if size > MAX_TRACE_BYTES:
            raise UsageError(f"{where}: {size:,} bytes; expected a trace of at most {MAX_TRACE_BYTES // 2**20} MB")
        data = p.read_bytes()
    except OSError as e:
        raise UsageError(f"{where}: cannot be read ({e.strerror}); expected {TRACE_FORM}") from None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise UsageError(f"{where}: line {line}: not ASCII text; expected {TRACE_FORM}") from None
    ms, period = parse(text, where)
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", p.stem)[:64] or "trace"
    if not name[0].isalnum():
        name = "t" + name[1:]
    return Trace(name, str(p.resolve()), hashlib.sha256(data).hexdigest(), ms, period)


def by_hash(known) -> dict[str, Trace]:
    """Traces (any iterable of Trace) by their SHA-256: what a testbed's link looks them up in."""
    return {t.sha256: t for t in known}


# --- making traces -------------------------------------------------------------------------------

RATES_FORM = "CSV rows of time_s,mbit (seconds from the start, Mbit/s); a header row is allowed"


def parse_rates_csv(text: str, where: str) -> list[tuple[float, float]]:
    """A rate series from CSV text: (time s, Mbit/s) rows, times increasing from 0."""
    rows: list[tuple[float, float]] = []
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        cells = [c.strip() for c in row]
        if not cells or all(not c for c in cells) or cells[0].startswith("#"):
            continue
        if len(cells) < 2:
            raise UsageError(f"{where}: line {n}: {len(cells)} column(s); expected {RATES_FORM}")
        try:
            t, r = float(cells[0]), float(cells[1])
        except ValueError:
            if not rows and n == 1:
                continue  # a header
            # the line is not quoted: a file given by mistake is not echoed
            raise UsageError(f"{where}: line {n}: not two numbers; expected {RATES_FORM}") from None
        if not (math.isfinite(t) and math.isfinite(r)) or r < 0 or t < 0:
            raise UsageError(f"{where}: line {n}: time {t:g} and rate {r:g} must be finite and not negative")
        if r > 100_000:
            raise UsageError(f"{where}: line {n}: {r:g} Mbit/s; expected at most 100000 (100 Gbit/s)")
        if rows and t <= rows[-1][0]:
            raise UsageError(f"{where}: line {n}: time {t:g} s does not come after {rows[-1][0]:g} s")
        if not rows and t != 0:
            raise UsageError(f"{where}: line {n}: the series starts at {t:g} s; expected its first row at 0")
        rows.append((t, r))
    if len(rows) < 1:
        raise UsageError(f"{where}: no rows; expected {RATES_FORM}")
    return rows


def from_rates(series: list[tuple[float, float]], end_s: float | None = None) -> list[int]:
    """A trace's timestamps for a rate series: each rate holds from its time to the next row's (the
    last one until `end_s`, else for as long as the step before it, else 1 s). Opportunity k falls at
    the first whole millisecond by which the series has offered k x 1500 bytes, so the trace's mean
    over its period (which ends at its last opportunity) is the series' mean to one opportunity."""
    if end_s is None:
        end_s = series[-1][0] + (series[-1][0] - series[-2][0] if len(series) > 1 else 1.0)
    if end_s <= series[-1][0]:
        raise UsageError(f"the series ends at {end_s:g} s, not after its last row at {series[-1][0]:g} s")
    check_limits(series, end_s)
    out: list[int] = []
    bits = 0.0  # offered so far, in units of one opportunity
    per_opp = OPPORTUNITY_BYTES * 8
    bounds = [t for t, _ in series[1:]] + [end_s]
    for (t0, mbit), t1 in zip(series, bounds):
        start_ms, end_ms = round(t0 * 1000), round(t1 * 1000)
        per_ms = mbit * 1e6 / 1000 / per_opp  # opportunities a millisecond
        for ms in range(start_ms + 1, end_ms + 1):
            before = bits
            bits += per_ms
            out.extend([ms] * (int(bits + 1e-9) - int(before + 1e-9)))
    if not out:
        raise UsageError("the series offers less than one 1500-byte opportunity in all: no trace")
    if series[-1][1] == 0:
        # the period is the last timestamp: a series that ends in silence cannot keep its silence
        raise UsageError(f"the series ends at {series[-1][0]:g} s on a rate of 0, and a trace's period is its last "
                         "opportunity: end the series on a rate above zero (or put the silence first)")
    # the period ends at the last opportunity, at most one opportunity's time before end_s
    return out


def check_limits(series: list[tuple[float, float]], end_s: float) -> None:
    """Refuse a series whose trace would break a trace file's limits (its period, its opportunities,
    its bytes) before a single timestamp is made: a two-row CSV can describe billions of them."""
    period_ms = round(end_s * 1000)
    if period_ms > MAX_PERIOD_MS:
        raise UsageError(f"the series lasts {end_s:g} s; a trace lasts at most {MAX_PERIOD_MS // 1000} s (24 hours)")
    bounds = [t for t, _ in series[1:]] + [end_s]
    opportunities = sum(mbit * 1e6 * (t1 - t0) / (OPPORTUNITY_BYTES * 8) for (t0, mbit), t1 in zip(series, bounds))
    if opportunities > MAX_OPPORTUNITIES:
        raise UsageError(f"the series offers {opportunities:,.0f} opportunities of 1500 bytes; a trace holds at most "
                         f"{MAX_OPPORTUNITIES:,} (lower the rate or the duration)")
    text_bytes = opportunities * (len(str(period_ms)) + 1)  # at most this many digits and a newline each
    if text_bytes > MAX_TRACE_BYTES:
        raise UsageError(f"the series' trace would take about {text_bytes / 2**20:,.0f} MB; a trace file holds at most "
                         f"{MAX_TRACE_BYTES // 2**20} MB (lower the rate or the duration)")


def render(ms) -> str:
    """A trace's text: one line per opportunity (a repeated timestamp written as one string per run of
    it, so a trace of millions of lines costs its text and no more)."""
    return "".join(f"{m}\n" * len(list(run)) for m, run in itertools.groupby(ms))


def constant(mbit: float, seconds: float) -> list[int]:
    return from_rates([(0.0, mbit)], end_s=seconds)


def on_off(mbit: float, on_s: float, off_s: float, cycles: int = 1) -> list[int]:
    """Off for off_s, then on at `mbit` for on_s, `cycles` times (ending on, so the period keeps
    every off step: the trace's period is its last timestamp)."""
    period = on_s + off_s
    rows = [row for k in range(cycles) for row in ((k * period, 0.0), (k * period + off_s, mbit))]
    return from_rates(rows, end_s=cycles * period)


def ramp(lo_mbit: float, hi_mbit: float, seconds: float, steps: int = 10) -> list[int]:
    """From lo to hi in equal steps over `seconds`."""
    return from_rates([(seconds * i / steps, lo_mbit + (hi_mbit - lo_mbit) * i / (steps - 1)) for i in range(steps)],
                      end_s=seconds)


def write(path: Path, ms: list[int]) -> None:
    """Write a trace atomically; never over an existing file."""
    path = Path(path)
    taken = (f"{path}: exists (a symbolic link, even one to nothing, counts); a trace is identified by its content, "
             "so plt-bench does not overwrite one: choose another name or remove it")
    if os.path.lexists(path):
        raise UsageError(taken)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(render(ms))
        os.link(tmp, path)  # fails if the name was taken meanwhile
    except FileExistsError:
        raise UsageError(taken) from None
    except OSError as e:  # a full disk, a read-only folder: nothing is left written
        raise UsageError(f"{path}: cannot be written ({e.strerror or e}); nothing was written") from None
    finally:
        tmp.unlink(missing_ok=True)
