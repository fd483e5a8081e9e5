"""A page's timing (issue 61): each origin's round trip and each response's think time, read from a
HAR's `timings`; the option that asks for think time; how a server is told it and says what it did;
the proof. Pure but for the control file (ThinkFile), which a server reads as requests arrive.

    --think off | recorded | MS     the server's wait before each first byte, an axis
(--origin-rtt, each origin's own path delay beside the link, is the link's: link.origins.)

How the wait is made and proven (servers: each HTTP server's own way, one rule):
- Before each load the testbed writes the think it asks (its canonical text: off, recorded or MS)
  into the server's control file (THINK_FILE in its run folder); the think stage reads it as each
  request arrives (ThinkFile: re-read when the file changes).
- The stage waits before the response's first byte and says so in the response's header
  X-Plt-Think (header: "asked=MS; waited=MS", the wait measured on the stage's monotonic clock),
  which the server's access log keeps: replayd for a replayed recording (whichever server fronts
  it), Caddy's think stage (servers.think) before its file server for generated pages and served
  folders, quinnserve itself for its files.
- The proof (proof): every response the trial's server log holds carries that header, asked the
  trial's think (fixed: MS; recorded: each response its own, which replayd computes from the
  recording), waited no less than asked (less MEASURE_SLACK_MS) and not longer than asked plus the
  tolerance (OVER_MS or OVER_SHARE of asked, the greater), and the front server's own duration for
  the response is no shorter than the wait. A response held otherwise fails the trial with why.

How a recorded handshake becomes a path delay (the definitions the replay will use):
- A connection's handshake round trip: over TCP (h1, h2) `connect - ssl`, the SYN's round trip
  alone (browsers count TLS's inside `connect` and again as `ssl`; where `ssl` is missing, -1 or
  not below `connect`, the whole `connect`); over QUIC (h3) `connect`, its one-round-trip handshake.
  An entry that opened no connection (`connect` -1 or 0: a reused one) says nothing.
- An origin's recorded RTT: the median of its connections' handshake round trips.
- The recording machine's own access link is in every one of them. Its share is taken as the
  nearest origin's RTT (`access_rtt_ms`, overridable): an origin's path delay is its RTT less that,
  never below 0. A replay then puts each origin at the visitor's link RTT plus its path delay.
- A response's think time: what its server said it thought where it said it (a recording of
  folders served by plt-bench's think stage: SERVER_THINK_FIELD); else its `wait` (request sent to
  first byte) less its origin's recorded RTT (the round trip inside every wait), never below 0. A
  wait also holds the time its first byte queued behind other bytes on the recording's link (over
  one TCP connection, a round trip of slow start each): the estimate is an upper bound.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import statistics
from pathlib import Path
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
        """Its canonical text (what conditions, labels and stores hold, and the control file says)."""
        return _num(self.ms) if self.mode == "fixed" else self.mode

    @property
    def on(self) -> bool:
        return self.mode != "off"


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


def parse_list(text: str | None, option: str = "--think") -> tuple[str | None, ...]:
    """--think, an axis (values separated by commas): each value's canonical text, None for off (the
    conditions' field: every response at once, as before --think); duplicates once (pure)."""
    if text is None:
        return (None,)
    items = [x.strip() for x in str(text).split(",")]
    if not any(items) or not all(items):
        raise UsageError(f"{option}: '{text}' has an empty value; expected values separated by commas, each "
                         f"{THINK_FORM}")
    out = [parse_think(x, option) for x in items]
    return tuple(dict.fromkeys(t.label if t.on else None for t in out))


def of_text(text: str | None) -> Think:
    """A stored or planned think (the conditions' text; None: off) as its record."""
    return Think() if text is None else parse_think(text, "a stored think")


# ---- a server told the think, and what it says of each response ----

THINK_FILE = "think"  # in a server's run folder: the think asked of the loads to come (its canonical text)
HEADER = "X-Plt-Think"
_HEADER_RE = re.compile(r"\s*asked=([0-9]+(?:\.[0-9]+)?)\s*;\s*waited=([0-9]+(?:\.[0-9]+)?)\s*")


def header(asked_ms: float, waited_ms: float) -> str:
    """The header's value a think stage sends (pure)."""
    return f"asked={asked_ms:.3f}; waited={waited_ms:.3f}"


def read_header(value: object) -> tuple[float, float] | None:
    """(asked ms, waited ms) from the header's value; None where it is not one (pure)."""
    m = _HEADER_RE.fullmatch(str(value)) if isinstance(value, str) else None
    return (float(m.group(1)), float(m.group(2))) if m else None


def write_think(path: Path, think: str | None) -> None:
    """Tell a server the think of the loads to come (its canonical text; None: off): written whole,
    then renamed into place, so a request arriving meanwhile reads the old or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text((think or "off") + "\n")
    tmp.replace(path)


class ThinkFile:
    """The think a server's control file asks, read again only when the file changes (a think stage
    reads it as each request arrives). A file missing or unreadable asks none."""

    def __init__(self, path: Path | None):
        self.path = path
        self._seen: tuple | None = None
        self._think = Think()

    def current(self) -> Think:
        if self.path is None:
            return Think()
        try:
            st = os.stat(self.path)
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if key != self._seen:
                self._think = parse_think(self.path.read_text().strip(), str(self.path))
                self._seen = key
        except (OSError, UsageError):
            self._seen, self._think = None, Think()
        return self._think


# ---- the proof ----

MEASURE_SLACK_MS = 1.0   # a stage's clock and its rounding: a wait this much short of asked is still the asked one
OVER_MS = 25.0           # a wait may run over by the scheduler's delay: this much, or ...
OVER_SHARE = 0.10        # ... this share of the asked wait, the greater


# a trial whose every response waited what it was asked, some longer than the tolerance: the machine's other
# load held the think stage (a refusal of the busy machine's, as a link emulator that fell behind is)
MACHINE_HELD_THINK = "the machine held the server past its think time"


def over_tolerance_ms(asked_ms: float) -> float:
    return max(OVER_MS, OVER_SHARE * asked_ms)


def proof(think: Think, entries: list[dict]) -> tuple[dict, str | None]:
    """The trial's think time proven from its server log's entries (pure): each entry's 'think' (the
    header X-Plt-Think as the log kept it) and its 'duration_s'. Returns (figures as stored, the
    problem or None): responses, asked and waited (min, median, max ms), the greatest shortfall and
    overrun against asked, the tolerance, and ok."""
    pairs, missing, short, over, inside = [], [], [], [], []
    for e in entries:
        got = read_header(e.get("think"))
        if got is None:
            missing.append(str(e.get("uri") or "?"))
            continue
        asked, waited = got
        if think.mode == "fixed" and abs(asked - think.ms) > 0.001:
            short.append(f"{e.get('uri')} was asked {asked:g} ms, not {think.ms:g}")
            continue
        pairs.append((asked, waited))
        if waited < asked - MEASURE_SLACK_MS:
            short.append(f"{e.get('uri')} waited {waited:.1f} ms of {asked:g}")
        elif waited > asked + over_tolerance_ms(asked):
            over.append(f"{e.get('uri')} waited {waited:.1f} ms for {asked:g}")
        d = e.get("duration_s")
        if isinstance(d, (int, float)) and d * 1000.0 < waited - MEASURE_SLACK_MS:
            inside.append(f"{e.get('uri')} took {d * 1000:.1f} ms at the server, less than its {waited:.1f} ms wait")

    def spread(xs: list[float]) -> dict | None:
        return {"min": round(min(xs), 3), "median": round(statistics.median(xs), 3), "max": round(max(xs), 3)} if xs else None
    figures = {"think": think.label, "responses": len(entries), "held": len(pairs),
               "asked_ms": spread([a for a, _ in pairs]), "waited_ms": spread([w for _, w in pairs]),
               "short_ms": round(max([a - w for a, w in pairs] + [0.0]), 3),
               "over_ms": round(max([w - a for a, w in pairs] + [0.0]), 3),
               "tolerance": f"-{MEASURE_SLACK_MS:g} ms, +max({OVER_MS:g} ms, {OVER_SHARE:.0%})"}
    problems = []
    if not entries:
        problems.append("the server's log holds none of the trial's responses")
    if missing:
        problems.append(f"{len(missing)} of {len(entries)} responses passed no think stage ({', '.join(missing[:3])})")
    for what, xs in (("short", short), ("outside the server", inside)):
        if xs:
            problems.append(f"{len(xs)} response(s) {what}: {'; '.join(xs[:3])}")
    figures["ok"] = not problems and not over
    if problems:  # a claim the server's own log contradicts
        return figures, "think time not as asked: " + "; ".join(problems + ([f"{len(over)} over"] if over else []))
    if over:  # every response waited what it was asked, some longer: the busy machine's, a refusal
        return figures, f"{MACHINE_HELD_THINK}: {len(over)} response(s) over: {'; '.join(over[:3])}"
    return figures, None


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

    servers_ms: tuple[float | None, ...] = ()  # each response's think as its server said it, where it did

    def think_ms(self, hosts: list[str]) -> list[float | None]:
        """Each response's think time: what its server said it thought, where it said it (a recording of
        plt-bench's served folders); else its wait less its origin's RTT (never below 0); None where
        neither was recorded. hosts: each response's host, in the HAR's order."""
        out: list[float | None] = []
        said = list(self.servers_ms) + [None] * (len(hosts) - len(self.servers_ms))
        for host, wait, server in zip(hosts, self.waits_ms, said):
            rtt = self.origin_rtts_ms.get(host)
            out.append(server if server is not None else None if wait is None or rtt is None else max(0.0, wait - rtt))
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


SERVER_THINK_FIELD = "_plt_think_ms"  # a HAR entry's custom field: its server's own think time, where it said it


def server_think_ms(entry: dict) -> float | None:
    """A HAR entry's think time as its server said it (ms; SERVER_THINK_FIELD: a recording of folders
    served by plt-bench's think stage), or None."""
    return _ms(entry.get(SERVER_THINK_FIELD))


def with_server_thinks(entries: list[dict], served: list[dict]) -> int:
    """Each HAR entry given its server's own think time where the server's log says it (served: the
    log's entries, their 'think' header as pages.timing's stages wrote it), matched by host and target
    in order; returns how many were given one. The think it was asked, not what its stage measured it
    waited: a replay's stage adds its own overrun as the live one did, and replaying the recorded
    overruns (0.1-1 ms apart) would fix the responses' order as one load drew it (measured: the
    replay's h2 PLT then came 10% over live's in 4 of 5 loads, a style sheet's first byte a round trip
    behind a script's)."""
    said: dict[tuple[str, str], list[float]] = {}
    for e in served:
        got = read_header(e.get("think"))
        if got is not None and e.get("host") and e.get("uri"):
            said.setdefault((str(e["host"]).lower(), str(e["uri"])), []).append(got[0])
    given = 0
    for e in entries:
        u = urlsplit(str((e.get("request") or {}).get("url") or ""))
        key = ((u.hostname or "").lower(), (u.path or "/") + (f"?{u.query}" if u.query else ""))
        if said.get(key):
            e[SERVER_THINK_FIELD] = round(said[key].pop(0), 3)
            given += 1
    return given


def wait_ms(entry: dict) -> float | None:
    """A HAR entry's wait (request sent to first byte, ms), or None where it has none."""
    return _ms((entry.get("timings") or {}).get("wait"))


def from_har(entries: list[dict]) -> RecordedTiming:
    """A HAR's entries -> the recording's timing (pure)."""
    per_origin: dict[str, list[float]] = {}
    waits: list[float | None] = []
    for e in entries:
        host = (urlsplit(str((e.get("request") or {}).get("url") or "")).hostname or "").lower()
        rtt = handshake_ms(e)
        if host and rtt is not None:
            per_origin.setdefault(host, []).append(rtt)
        waits.append(wait_ms(e))
    return RecordedTiming({h: statistics.median(v) for h, v in per_origin.items()}, tuple(waits))
