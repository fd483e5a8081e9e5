"""What linkem writes to its stats file, as typed shapes, and the strict reader that holds Python to it.

linkem (Rust, linkem/src/main.rs: stats_json) writes one JSON object: lifetime counters per
direction, plus each direction's maxima since the last snapshot ("since_mark"). The shapes below
are the contract: parse_stats refuses a file with a key missing, an unknown key or a wrong type,
so a linkem built from other sources cannot feed the trial judgement figures it misreads.
linkem/tests/stats-sample.json is stats_json's output for fixed counters, checked by a Rust test
and parsed by tests/unit/test_linkem_contract.py: neither side can change alone.
"""

from __future__ import annotations

import json
import types
from typing import TypedDict, get_type_hints

from ..errors import LinkError

# upper bounds of the lateness histogram's buckets, in microseconds (the last is open)
LATE_HIST_KEYS = ("10", "50", "100", "250", "500", "1000", "2000", "5000", "inf")
ECN_KEYS = ("not_ect", "ect1", "ect0", "ce")  # the IP header's ECN codepoints, in their order


class SinceMark(TypedDict):
    """A direction's worst since the snapshot before this one (one trial's own figures)."""
    late_max_us: float   # the latest a packet was released after its due time
    early_max_us: float  # the earliest (linkem releases up to one expected timer wake-up early)
    max_depth: int       # the most packets held at once


class TraceStats(TypedDict):
    """A direction's trace (all zero and an empty path when its rate is not a trace's)."""
    path: str
    period_ms: int                 # the trace's period (its last timestamp)
    opportunities_per_period: int
    limit: int                     # the droptail queue's limit, packets
    epoch_ns: int                  # CLOCK_MONOTONIC ns at which the trace last started over
    rewinds: int                   # marks that started it over (SIGUSR2)
    opportunities: int             # passed since the epoch (used or lost)
    idle_opportunities: int        # of those, lost whole: the queue was empty (the sender fell short)
    served_bytes: int              # carried out of the queue by opportunities (lifetime)
    queue_drops: int               # refused by the full queue (apart from random loss)
    qdepth: int                    # packets waiting for an opportunity now
    max_qdepth: int


class BottleneckStats(TypedDict):
    """A direction's bottleneck queue of linkem's (a constant rate's or a trace's) and its discipline
    (linkem/src/aqm.rs); aqm 'none' where the direction has none (a rate in the kernel's htb, or no rate)."""
    aqm: str                # none | droptail | codel | fq_codel | pie
    rate_bps: int           # a constant rate of linkem's; 0: none (a trace's, or no bottleneck)
    limit: int              # the queue's limit, packets
    ecn: bool               # marks ECN-capable packets where it would drop them
    aqm_drops: int          # the discipline's own drops (lifetime)
    marks: int              # CE marks in place of drops
    overlimit_drops: int    # a full queue's drops
    dequeued: int           # packets it sent
    sojourn_sum_us: float   # their time in the queue, summed (the standing delay: its mean per packet)
    sojourn_max_us: float
    qlen: int               # packets in the queue now
    drop_prob: float        # PIE's drop probability now (0 for the others)


class PathStats(TypedDict):
    """An origin's own path through a direction (--origin-rtt): its packets wait extra_us more."""
    addr: str            # the origin's address (an IPv4 one as such)
    extra_us: int        # its path delay's share in this direction, one way
    packets: int         # arrived from or to that address (lifetime)


class DirectionStats(TypedDict):
    """One direction's settings and lifetime counters."""
    queue: int           # its NFQUEUE number
    delay_us: int        # one-way delay
    jitter_us: int
    dist: str            # Uniform | Normal
    loss: float          # drop probability, 0 to 1
    reorder: bool        # False: a packet never overtakes the one before it (within its path)
    paths: list          # [PathStats]: origins at their own distance; [] for one distance
    packets: int         # arrived
    bytes: int
    dropped: int
    released: int
    depth: int           # held now
    max_depth: int
    reordered: int       # released before a packet of its path that arrived earlier
    ecn: dict            # arrivals by ECN codepoint {ECN_KEYS: packets}: whether the endpoints ask for ECN
    early: int           # released ahead of their due time
    early_max_us: float
    trace: TraceStats
    bottleneck: BottleneckStats
    late_mean_us: float  # mean lateness over released packets (early ones count negative)
    late_sum_us: float
    late_max_us: float
    late_hist_us: dict   # {LATE_HIST_KEYS: packets released that late}
    since_mark: SinceMark


class Stats(TypedDict):
    """The whole file."""
    pid: int
    running: bool        # False in the last write, at exit
    snapshot: int        # SIGUSR1 requests answered so far (the .snap file's own number)
    uptime_s: float
    cpu_s: float         # linkem's own user + system CPU time
    enobufs: int         # verdicts lost to a full netlink socket
    cpu_dma_latency_us: int | None  # the PM QoS wake-up bound linkem holds for idle CPUs; None: none held
    dirs: dict           # {direction name: DirectionStats}


def _check(obj, shape, where: str) -> None:
    if not isinstance(obj, dict):
        raise LinkError(f"linkem's stats: {where} is not an object")
    hints = get_type_hints(shape)
    missing, unknown = sorted(set(hints) - set(obj)), sorted(set(obj) - set(hints))
    if missing or unknown:
        raise LinkError(f"linkem's stats: {where} has {'missing ' + ', '.join(missing) if missing else ''}"
                        f"{'; ' if missing and unknown else ''}{'unknown ' + ', '.join(unknown) if unknown else ''}: "
                        "the linkem binary and plt-bench disagree (run scripts/setup to rebuild linkem)")
    for key, want in hints.items():
        v = obj[key]
        if isinstance(want, types.UnionType) and type(None) in want.__args__:  # an optional figure
            if v is None:
                continue
            want = next(a for a in want.__args__ if a is not type(None))
        ok = {int: isinstance(v, int) and not isinstance(v, bool), float: isinstance(v, (int, float))
              and not isinstance(v, bool), bool: isinstance(v, bool), str: isinstance(v, str),
              dict: isinstance(v, dict), list: isinstance(v, list)}.get(want)
        if ok is None:  # a nested shape
            _check(v, want, f"{where}.{key}")
        elif not ok:
            raise LinkError(f"linkem's stats: {where}.{key} = {v!r}, expected {want.__name__}")


def parse_stats(text: str) -> Stats:
    """linkem's stats file, checked against the shapes above; LinkError if it does not match."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise LinkError(f"linkem's stats are not JSON: {e}") from None
    _check(obj, Stats, "the file")
    for name, d in obj["dirs"].items():
        _check(d, DirectionStats, f"dirs.{name}")
        for i, path in enumerate(d["paths"]):
            _check(path, PathStats, f"dirs.{name}.paths[{i}]")
        hist = d["late_hist_us"]
        if list(hist) != list(LATE_HIST_KEYS) or not all(isinstance(n, int) for n in hist.values()):
            raise LinkError(f"linkem's stats: dirs.{name}.late_hist_us has buckets {list(hist)}, "
                            f"expected {list(LATE_HIST_KEYS)} with packet counts")
        if list(d["ecn"]) != list(ECN_KEYS) or not all(isinstance(n, int) for n in d["ecn"].values()):
            raise LinkError(f"linkem's stats: dirs.{name}.ecn has {list(d['ecn'])}, expected {list(ECN_KEYS)} with "
                            "packet counts")
    return obj
