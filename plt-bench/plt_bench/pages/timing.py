"""A recorded page's timing (issue 61, first part): each origin's round trip and each response's
think time, read from a HAR's `timings`, and the options that ask for them. Pure.

    --think off | recorded | MS     the server's wait before each first byte
(--origin-rtt, each origin's own path delay beside the link, is the link's: link.origins.)

How a recorded handshake becomes a path delay (the definitions the replay will use):
- A connection's handshake round trip: over TCP (h1, h2) `connect - ssl`, the SYN's round trip
  alone (browsers count TLS's inside `connect` and again as `ssl`; where `ssl` is missing, -1 or
  not below `connect`, the whole `connect`); over QUIC (h3) `connect`, its one-round-trip handshake.
  An entry that opened no connection (`connect` -1 or 0: a reused one) says nothing.
- An origin's recorded RTT: the median of its connections' handshake round trips.
- The recording machine's own access link is in every one of them. Its share is taken as the
  nearest origin's RTT (`access_rtt_ms`, overridable): an origin's path delay is its RTT less that,
  never below 0. A replay then puts each origin at the visitor's link RTT plus its path delay.
- A response's think time: its `wait` (request sent to first byte) less its origin's recorded
  RTT (the round trip inside every wait), never below 0.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from urllib.parse import urlsplit

from ..errors import UsageError

MODES = ("off", "recorded")
MAX_DELAY_MS = 10_000.0  # a server's wait beyond this is refused as absurd
THINK_FORM = "off, recorded, or a wait in ms (200)"


@dataclasses.dataclass(frozen=True)
class Think:
    """One value of the --think axis: off, recorded, or a fixed wait (ms) before each first byte."""

    mode: str = "off"  # off | recorded | fixed
    ms: float = 0.0

    @property
    def label(self) -> str:
        return _num(self.ms) if self.mode == "fixed" else self.mode


def _num(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _delay(text: str, option: str, what: str) -> float:
    try:
        ms = float(text)
    except ValueError:
        ms = math.nan
    if not math.isfinite(ms) or not text.strip().replace(".", "", 1).isdigit():
        raise UsageError(f"{option}: '{text}' is not a {what} in ms; expected {THINK_FORM}")
    if ms > MAX_DELAY_MS:
        raise UsageError(f"{option}: {text} ms is more than {MAX_DELAY_MS:g} ms; expected a {what} of 0 to {MAX_DELAY_MS:g} ms")
    return ms


def parse_think(text: str, option: str = "--think") -> Think:
    """One item of --think (pure); UsageError naming the option and the form."""
    t = str(text).strip().lower()
    if t in MODES:
        return Think(t)
    return Think("fixed", _delay(t.removesuffix("ms"), option, "wait"))


@dataclasses.dataclass(frozen=True)
class RecordedTiming:
    """A recording's timing as its HAR gave it: each origin's recorded RTT (ms, the median of its
    connections' handshakes) and each response's wait (ms), in the HAR's order (None: not recorded)."""

    origin_rtts_ms: dict[str, float]
    waits_ms: tuple[float | None, ...]

    def access_rtt_ms(self) -> float:
        """The recording machine's own access link's share of every RTT: the nearest origin's."""
        return min(self.origin_rtts_ms.values(), default=0.0)

    def path_delays_ms(self, access_rtt_ms: float | None = None) -> dict[str, float]:
        """Each origin's path delay beyond the access link (never below 0)."""
        access = self.access_rtt_ms() if access_rtt_ms is None else access_rtt_ms
        return {h: max(0.0, rtt - access) for h, rtt in self.origin_rtts_ms.items()}

    def think_ms(self, hosts: list[str]) -> list[float | None]:
        """Each response's think time: its wait less its origin's RTT (never below 0); None where its
        wait or its origin's RTT was not recorded. hosts: each response's host, in the HAR's order."""
        out: list[float | None] = []
        for host, wait in zip(hosts, self.waits_ms):
            rtt = self.origin_rtts_ms.get(host)
            out.append(None if wait is None or rtt is None else max(0.0, wait - rtt))
        return out


def handshake_ms(entry: dict) -> float | None:
    """A HAR entry's connection handshake round trip (ms), or None where the entry opened none."""
    t = entry.get("timings") or {}
    connect, ssl = _ms(t.get("connect")), _ms(t.get("ssl"))
    if connect is None or connect <= 0:
        return None
    version = str((entry.get("response") or {}).get("httpVersion") or "").lower()
    if version in ("h3", "http/3", "http/3.0", "h3-29") or ssl is None or ssl >= connect:
        return connect
    return connect - ssl


def _ms(value) -> float | None:
    """A HAR timing in ms; None for -1 (not applicable), a missing or a bad value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def from_har(entries: list[dict]) -> RecordedTiming:
    """A HAR's entries -> the recording's timing (pure)."""
    per_origin: dict[str, list[float]] = {}
    waits: list[float | None] = []
    for e in entries:
        host = (urlsplit(str((e.get("request") or {}).get("url") or "")).hostname or "").lower()
        rtt = handshake_ms(e)
        if host and rtt is not None:
            per_origin.setdefault(host, []).append(rtt)
        waits.append(_ms((e.get("timings") or {}).get("wait")))
    return RecordedTiming({h: statistics.median(v) for h, v in per_origin.items()}, tuple(waits))
