"""Typed, validated network conditions and the grid of a measurement.

Everything a user types is parsed here, before anything is created on the system.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Iterable

from typing import TYPE_CHECKING

from . import protocols, traces, units
from .errors import UsageError

if TYPE_CHECKING:  # the seams' records held here by their types alone: the model imports no seam
    from .link.aqm import Aqm
    from .link.origins import OriginRtt
    from .pages import Page

DEFAULT_SIZES = ("5KB", "500KB", "10MB", "50MB")
ALL_SIZES = ("5KB", "500KB", "10MB", "50MB", "700MB")
CONGESTION_CONTROLS = ("cubic", "bbr", "reno")
UNSHAPED = "unshaped"

# The axes a page is loaded with beside the protocol, each with the value every trial stored before it
# was an axis: one table for the grid, the store's slots, the statistics and the report (a cell is
# (conditions, page, protocol, *VARIANT_AXES)).
VARIANT_AXES = {"cc": "cubic", "browser": "chromium", "server": "caddy", "budget": "full"}
AXIS_KEYS = {"cc": "cc", "browser": "browser", "server": "http_server", "budget": "cpu"}  # each one's option and definition key
NO_BUDGET = "full"  # the budget axis's value without a budget: the machine's whole CPU (plt_bench.device)


def budget_label(cpu: float | None) -> str:
    """A CPU budget as the budget axis names it (pure): cpu0.25, cpu1 (one full core, pinned), or
    full (no budget)."""
    return NO_BUDGET if cpu is None else f"cpu{cpu:g}"


class Budget(str):
    """A value of the budget axis: who the browser's CPU is, read once where --cpu and --device are
    (campaign) and carried as it is to the visitor (device.visitor.Visitor.of_cell). cpu: a fraction
    of a core on each core; device: a named device (device.profiles), its budget calibrated per host;
    neither: the machine's whole CPU. It is its label too (cpu0.25, full, low-end-phone): what the
    grid, the plan's slots, the store's trials (records.Trial.budget) and reports name it by, and
    what compares and hashes it."""

    cpu: float | None
    device: str | None

    def __new__(cls, cpu: float | None = None, device: str | None = None) -> "Budget":
        if cpu is not None and device is not None:
            raise ValueError(f"Budget: a device ({device}) has its own budget, calibrated per host; not {cpu:g} beside it")
        self = super().__new__(cls, device or budget_label(cpu))
        self.cpu, self.device = cpu, device
        return self

    def __reduce__(self):  # a cluster's worker gets its slots pickled: made again from its fields
        return (Budget, (self.cpu, self.device))


FULL = Budget()


def budget_of(label: str) -> float | None:
    """The fraction of a core a stored budget label names (budget_label's inverse); None for full and
    for a device (whose budget each host calibrates: device.calibrate). For the store's readers: a
    campaign's own budgets are Budget values, read once."""
    return None if label == NO_BUDGET or device_of(label) else float(label[len("cpu"):])


def device_of(label: str) -> str | None:
    """The device a stored budget label names (a device.profiles name), or None for full and a budget
    (cpuX); for the store's readers, as budget_of."""
    return None if label == NO_BUDGET or _BUDGET.fullmatch(label) else label


_BUDGET = re.compile(r"cpu\d+(\.\d+)?(e-?\d+)?")  # budget_label's form of a fraction of a core



JITTER_DISTS = ("uniform", "normal")
LOSS_DIRECTIONS = ("both", "down", "up")
WIRE_PACKET_BYTES = 1514  # what the qdisc counts for a full-size Ethernet frame
MIN_QUEUE_PKTS = 64
# ... and at least this much time at the rate: with 64 packets (0.8 ms) at 1 Gbit/s, TCP reached
# only 0.80-0.93 of the rate here (one scheduling hiccup at the receiver overflows the queue);
# with 256 packets and more, 0.999-1.004 in every run.
MIN_QUEUE_MS = 4.0


@dataclasses.dataclass(frozen=True)
class ConstantRate:
    """A direction's rate, fixed (htb in the kernel, or linkem)."""

    bps: int
    shape = "constant"

    @property
    def label(self) -> str:
        return units.format_rate(self.bps)


@dataclasses.dataclass(frozen=True)
class TraceRate:
    """A direction's rate following a Mahimahi trace (traces.py), known here by its name and hash;
    its opportunities are in the traces that travel with the conditions (Grid.traces, Spec.traces,
    a testbed's traces), looked up by the hash. mean_bps is the trace's mean over its period."""

    name: str
    sha256: str
    mean_bps: int
    shape = "trace"

    @property
    def label(self) -> str:
        return f"trace:{self.name}"

    def trace(self, known: "dict[str, traces.Trace]") -> traces.Trace:
        """The trace's opportunities among the traces known (by hash: traces.by_hash); LookupError if
        they do not hold it."""
        t = known.get(self.sha256)
        if t is None:
            raise LookupError(f"trace {self.name} (sha256 {self.sha256[:12]}...) was not given with these conditions: "
                              "give its file again (--trace-down/--trace-up or the campaign's trace_down/trace_up)")
        return t


Rate = ConstantRate | TraceRate  # the kinds of rate a direction can have; None: unshaped


@dataclasses.dataclass(frozen=True)
class Conditions:
    """The link between client and server. A rate of None means unshaped.

    A direction whose rate follows a trace has trace_down/trace_up (the trace's name) and its
    SHA-256; its rate_*_bps is then the trace's mean rate (what ideals, queue sizes and plots use).
    `down` and `up` give each direction's rate as its kind (ConstantRate, TraceRate, None).

    rtt_ms is split evenly over the two directions; jitter_ms applies to each direction (uniform
    in [-j, +j] like netem, or normal with sd j); loss_pct is per packet, per direction it applies
    to. reorder=False keeps packets in order despite jitter (linkem only). queue_pkts is the
    bottleneck queue; None picks max(one bandwidth-delay product, 64 packets).
    """

    rate_down_bps: int | None
    rate_up_bps: int | None
    rtt_ms: float = 0.0
    jitter_ms: float = 0.0
    jitter_dist: str = "uniform"
    loss_pct: float = 0.0
    loss_direction: str = "both"
    reorder: bool = True
    queue_pkts: int | None = None
    name: str | None = None  # a named profile ("Cable", "3GFast"), if the conditions come from one
    trace_down: str | None = None
    trace_down_sha256: str | None = None
    trace_up: str | None = None
    trace_up_sha256: str | None = None
    # the bottleneck's queue discipline as the link parsed it once (link.aqm.Aqm: droptail, codel, fq_codel or
    # pie and every parameter; its canonical text, Aqm.text, is what labels, stores and definitions hold);
    # None: the kernel's FIFO, as before --aqm
    aqm: "Aqm | None" = None
    ecn: bool = False  # the discipline marks ECN-capable packets CE where it would drop them
    cross: str | None = None  # competing flows through the bottleneck (link.cross: 2xtcp-cubic, 1xtcp-bbr:up); None: none
    # each origin's own path delay beside the link (link.origins.OriginRtt: recorded, or given per host; its
    # canonical text, OriginRtt.text, is what labels and stores hold); None: every origin at the link's RTT
    origin_rtt: "OriginRtt | None" = None
    # the servers' wait before each response's first byte (pages.timing: its canonical text, recorded or a
    # fixed MS); None: every response at once, as before --think
    think: str | None = None

    def as_dict(self) -> dict:
        """Every field as plain data (JSON's): the discipline by its canonical text (Aqm.text), as the store,
        a campaign's definition and the control channel hold it (the seam's parser reads it back)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**out, "aqm": self.aqm.text if self.aqm is not None else None,
                "origin_rtt": self.origin_rtt.text if self.origin_rtt is not None else None}

    @property
    def link_only(self) -> "Conditions":
        """The link's part alone: the conditions without the servers' think time (a change of think
        alone leaves the link as applied and verified)."""
        return dataclasses.replace(self, think=None) if self.think is not None else self

    @property
    def down(self) -> Rate | None:
        return _rate(self.rate_down_bps, self.trace_down, self.trace_down_sha256)

    @property
    def up(self) -> Rate | None:
        return _rate(self.rate_up_bps, self.trace_up, self.trace_up_sha256)

    @property
    def cross_flows(self) -> int:
        """How many long-lived competing flows share the bottleneck (--cross; 0: none, or a web
        background's short transfers)."""
        if self.cross is None or self.cross.startswith("web"):
            return 0
        return int(self.cross.split("x", 1)[0])  # the canonical text's N (link.cross.Cross.text: NxKIND-CC)

    @property
    def traced(self) -> bool:
        """A direction's rate follows a trace."""
        return bool(self.trace_down_sha256 or self.trace_up_sha256)

    @property
    def delay_ms(self) -> float:
        """One-way delay added in each direction."""
        return self.rtt_ms / 2.0

    @property
    def loss_down_pct(self) -> float:
        return self.loss_pct if self.loss_direction in ("both", "down") else 0.0

    @property
    def loss_up_pct(self) -> float:
        return self.loss_pct if self.loss_direction in ("both", "up") else 0.0

    @property
    def impaired(self) -> bool:
        """Anything beyond a rate: delay, jitter or loss."""
        return bool(self.rtt_ms or self.jitter_ms or self.loss_pct)

    def queue_for(self, rate_bps: int | None) -> int:
        """Bottleneck queue in packets for one direction: the configured one, or >= one BDP."""
        if self.queue_pkts is not None:
            return self.queue_pkts
        if rate_bps is None:
            return MIN_QUEUE_PKTS
        pkts_per_ms = rate_bps / 8.0 / 1000.0 / WIRE_PACKET_BYTES
        bdp = pkts_per_ms * (self.rtt_ms + 2 * self.jitter_ms)
        return max(MIN_QUEUE_PKTS, int(bdp) + 1, int(pkts_per_ms * MIN_QUEUE_MS) + 1)

    @property
    def label(self) -> str:
        down, up = self.down, self.up
        if down is None and up is None:
            parts = [UNSHAPED]
        elif down == up:
            parts = [down.label]
        else:
            parts = [f"{down.label if down else UNSHAPED}/{up.label if up else UNSHAPED}"]
        if self.rtt_ms:
            parts.append(f"rtt{_num(self.rtt_ms)}ms")
        if self.jitter_ms:
            parts.append(f"jitter{_num(self.jitter_ms)}ms" + ("" if self.jitter_dist == "uniform" else "-normal")
                         + ("" if self.reorder else "-inorder"))
        if self.loss_pct:
            parts.append(f"loss{_num(self.loss_pct)}%" + ("" if self.loss_direction == "both" else f"-{self.loss_direction}"))
        if self.queue_pkts is not None:
            parts.append(f"q{self.queue_pkts}")
        if self.aqm is not None:  # its canonical text (link.aqm), '+ecn' where it marks
            parts.append(self.aqm.text + ("+ecn" if self.ecn else ""))
        if self.cross is not None:
            parts.append(f"cross{self.cross}")
        if self.origin_rtt is not None:  # its canonical text (link.origins)
            parts.append(f"origins:{self.origin_rtt.text}")
        if self.think is not None:
            parts.append(f"think:{self.think}")
        return f"{self.name} ({' '.join(parts)})" if self.name else " ".join(parts)


def _rate(bps: int | None, trace: str | None, sha256: str | None) -> Rate | None:
    if sha256:
        return TraceRate(trace or "trace", sha256, bps or 0)
    return None if bps is None else ConstantRate(bps)


def _num(x: float) -> str:
    """A condition's figure in a label, exact to the link's steps (never rounded to another value:
    59999.998 stays itself, where :g would print 60000)."""
    return f"{x:.6f}".rstrip("0").rstrip(".")


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell of a grid: a protocol, a page and conditions."""

    proto: str  # h3 | h2 | h1, or as-recorded for a recording (protocols.ALL_NAMES: what the trial stores)
    page: Page
    conditions: Conditions
    cc: str = "cubic"  # the TCP congestion control on the testbed's routes (h3 runs quic-go's own whatever it is)
    browser: str = "chromium"  # the browser that loads it (plt_bench.browsers)
    server: str = "caddy"  # the server that serves it (plt_bench.servers)
    cpu: float | None = None  # the browser's CPU budget, a fraction of a core per core (plt_bench.device); None: none
    cores: int = 1  # ... on this many CPUs
    device: str | None = None  # the visitor's device (device.profiles): its budget calibrated per host, its screen

    def __post_init__(self):
        if self.proto not in protocols.ALL_NAMES:
            raise ValueError(f"Cell: protocol {self.proto!r}; expected one of {', '.join(protocols.ALL_NAMES)}")
        if protocols.get(self.proto).per_origin and self.page.page_kind.recording_name(self.page) is None:
            raise ValueError(f"Cell: {self.proto} is a recording's (har:NAME), not {self.page.label}'s")
        if self.cc not in CONGESTION_CONTROLS:
            raise ValueError(f"Cell: congestion control {self.cc!r}; expected one of {', '.join(CONGESTION_CONTROLS)}")
        if self.cpu is not None and not (0 < self.cpu <= 1):
            raise ValueError(f"Cell: CPU budget {self.cpu!r}; expected a fraction of a core in (0, 1]")
        if self.cores < 1:
            raise ValueError(f"Cell: cores {self.cores!r}; expected 1 or more")
        if self.device is not None and self.cpu is not None:  # (its name checked where --device was read)
            raise ValueError(f"Cell: device {self.device!r} with a CPU budget of {self.cpu:g}; a device's budget is "
                             "calibrated per host, no --cpu beside it")

    @property
    def size_bytes(self) -> int:
        """Every body the page's load fetches (the HTML and all its objects)."""
        return self.page.total_bytes


@dataclasses.dataclass(frozen=True)
class Grid:
    protos: tuple[str, ...]
    pages: tuple[Page, ...]
    conditions: tuple[Conditions, ...]
    runs: int
    ccs: tuple[str, ...] = ("cubic",)  # TCP congestion controls, an axis like the protocols
    browsers: tuple[str, ...] = ("chromium",)  # the browsers that load the pages, an axis too
    servers: tuple[str, ...] = ("caddy",)  # the servers that serve them, an axis too
    budgets: tuple[Budget, ...] = (FULL,)  # the browser's CPU budgets and devices (Budget), an axis too
    cores: int = 1  # the CPUs a budgeted browser may use (--cores)
    # the traces its conditions follow, as read (by hash: TraceRate.trace), carried with the grid
    traces: tuple = dataclasses.field(default=(), compare=False, repr=False)

    def cells(self) -> list[Cell]:
        return [Cell(p, s, c, *v) for c, s, p, v in itertools.product(
            self.conditions, self.pages, self.protos, itertools.product(self.ccs, self.browsers, self.servers))]

    def axis(self, name: str) -> tuple[str, ...]:
        """The values an axis beside the protocol takes (VARIANT_AXES: cc, browser, server, budget)."""
        return {"cc": self.ccs, "browser": self.browsers, "server": self.servers, "budget": self.budgets}[name]

    def variants(self) -> list[tuple[str, str, str, str, str]]:
        """Every (protocol, congestion control, browser, server, budget) a page is loaded with under one condition."""
        return list(itertools.product(self.protos, self.ccs, self.browsers, self.servers, self.budgets))

    def variant_words(self, proto: str, cc: str, browser: str, server: str = "caddy", budget: str = NO_BUDGET) -> str:
        """A variant in words, naming only the axes that vary: 'h3', 'h3 bbr', 'h3 firefox', 'h3 quinn',
        'h3 cpu0.25' (what progress lines and the precision target tell apart)."""
        given = {"cc": cc, "browser": browser, "server": server, "budget": budget}
        return " ".join([proto, *(given[a] for a in VARIANT_AXES if len(self.axis(a)) > 1)])


def parse_list(text: str, option: str, form: str, parse_one) -> tuple:
    """A comma-separated list, each item parsed (and checked) by parse_one, duplicates dropped."""
    items = units.split_list(text, option)
    if not items:
        raise UsageError(f"{option}: empty; expected {form}")
    out: list = []
    for item in items:
        v = parse_one(item)
        if v not in out:
            out.append(v)
    return tuple(out)


def parse_rates(text: str, option: str = "--bw") -> tuple[int | None, ...]:
    """A comma-separated list of rates; 'unshaped' (or 'none') leaves the link unshaped."""
    return parse_list(text, option, f"{units.RATE_FORM}, or '{UNSHAPED}'",
                       lambda item: None if item.lower() in (UNSHAPED, "none") else units.parse_rate(item, option))


def _ascii_int(text) -> int:
    """A whole number written in ASCII digits ("５" and TOML's true are not numbers here)."""
    if isinstance(text, bool) or not str(text).strip().isascii():
        raise ValueError(text)
    return int(str(text).strip())


def parse_runs(text: str | int, option: str = "--runs") -> int:
    try:
        n = _ascii_int(text)
    except ValueError:
        raise UsageError(f"{option}: '{text}' is not a whole number; expected 1 to 1000") from None
    if not 1 <= n <= 1000:
        raise UsageError(f"{option}: {n} is out of range; expected 1 to 1000")
    return n


def parse_cc(text: str, option: str = "--cc") -> str:
    cc = str(text).strip().lower()
    if cc not in CONGESTION_CONTROLS:
        raise UsageError(f"{option}: unknown congestion control '{text}'; expected one or more of "
                         f"{', '.join(CONGESTION_CONTROLS)}, comma-separated")
    return cc


def parse_ccs(text: str, option: str = "--cc") -> tuple[str, ...]:
    """TCP congestion controls, comma-separated ('cubic,bbr'): an axis of the grid."""
    return parse_list(text, option, f"one or more of {', '.join(CONGESTION_CONTROLS)}, comma-separated",
                       lambda item: parse_cc(item, option))


# What the link applies, and so the finest a condition may be given (finer values would be stored
# and labelled apart while the link ran them alike): tc and linkem take each direction's delay and
# the jitter in whole microseconds (RTT/2 per direction: an RTT in steps of 2 us), and a loss with
# at most 6 significant digits (netem's 'loss X%' as tcconfig writes it, linkem's --dir loss=);
# 0.0001% is the finest loss plt-bench takes.
RTT_STEP_MS = 0.002
JITTER_STEP_MS = 0.001
LOSS_STEP_PCT = 0.0001


def _on_step(value: float, step: float) -> bool:
    return abs(value / step - round(value / step)) < 1e-6


def parse_durations(text: str, option: str, step_ms: float = JITTER_STEP_MS) -> tuple[float, ...]:
    """Durations in ms, each a whole number of steps (what the link can apply)."""
    def one(item):
        v = 0.0 if item == "0" else units.parse_duration_ms(item, option)
        if v > 60_000:
            raise UsageError(f"{option}: '{item}' is more than 60s")
        if not _on_step(v, step_ms):
            why = ("each direction's delay, RTT/2, is applied in whole microseconds" if step_ms == RTT_STEP_MS
                   else "the link applies it in whole microseconds")
            raise UsageError(f"{option}: '{item}' is finer than the link applies ({why}); expected a multiple of "
                             f"{_num(step_ms)}ms, e.g. {_num(round(v / step_ms) * step_ms)}ms")
        return round(round(v / step_ms) * step_ms, 6)
    return parse_list(text, option, units.TIME_FORM, one)


def parse_losses(text: str, option: str = "--loss") -> tuple[float, ...]:
    def one(item):
        v = 0.0 if item == "0" else units.parse_percent(item, option)
        if v >= 100:
            raise UsageError(f"{option}: '{item}' would drop every packet; expected less than 100%")
        if not _on_step(v, LOSS_STEP_PCT):
            raise UsageError(f"{option}: '{item}' is finer than the link applies; expected a multiple of "
                             f"{_num(LOSS_STEP_PCT)}%, e.g. {_num(round(v / LOSS_STEP_PCT) * LOSS_STEP_PCT)}%")
        return round(round(v / LOSS_STEP_PCT) * LOSS_STEP_PCT, 6)
    return parse_list(text, option, "a percentage: 0.1%, 5%", one)


def parse_queue(text: str | None, option: str = "--queue") -> int | None:
    if text is None or str(text).strip().lower() in ("auto", "bdp"):
        return None
    try:
        n = _ascii_int(text)
    except ValueError:
        raise UsageError(f"{option}: '{text}' is not a packet count; expected a whole number of packets "
                         f"(at least 2) or 'auto' (one bandwidth-delay product, at least {MIN_QUEUE_PKTS} packets "
                         f"and {MIN_QUEUE_MS:g} ms at the rate)") from None
    if not 2 <= n <= 1_000_000:
        raise UsageError(f"{option}: {n} is out of range; expected 2 to 1000000 packets or 'auto'")
    return n


def check_jitter(delay_ms: float, jitter_ms: float, dist: str, option: str = "--jitter") -> None:
    """Refuse jitter the one-way delay cannot hold (delays would be cut at zero, changing the law)."""
    limit = delay_ms if dist == "uniform" else delay_ms / 3.0
    if jitter_ms > limit + 1e-9:
        need = "the one-way delay (rtt/2)" if dist == "uniform" else "a third of the one-way delay (rtt/6)"
        raise UsageError(f"{option}: {_num(jitter_ms)}ms of {dist} jitter per direction does not fit in a one-way "
                         f"delay of {_num(delay_ms)}ms; {dist} jitter must be at most {need}: raise --rtt to at "
                         f"least {_num(2 * jitter_ms * (1 if dist == 'uniform' else 3))}ms or lower --jitter")


def rate_fields(rate, side: str) -> dict:
    """Conditions' fields for one direction's rate (an int, None or a trace)."""
    if isinstance(rate, traces.Trace):
        return {f"rate_{side}_bps": rate.mean_bps, f"trace_{side}": rate.name, f"trace_{side}_sha256": rate.sha256}
    return {f"rate_{side}_bps": rate}


VERIFY_CHOICES = ("stop", "warn", "off")


def transfer_seconds(size_bytes: int, rate_bps: int | None) -> float | None:
    """The payload's time at the rate: 8 x size / rate (no headers, no handshake); None unshaped.
    Timeouts, the progress model and the CPU note use it; tables and benchmarks divide by ideal_ms."""
    if rate_bps is None:
        return None
    return 8.0 * size_bytes / rate_bps


def ideal_ms(proto: str, size_bytes: int, rate_bps: int | None, rtt_ms: float, objects: int = 0) -> float | None:
    """The one ideal a page's load time is set against (the summary, pytest's table, bench): the
    protocol's round trips to the page's first byte on a fresh connection (protocols: QUIC 2, TCP
    with TLS 1.3 3), one more when the page asks for objects (they are asked once it arrives), and
    its bytes at the rate (payload only). A floor no load goes under on a link without loss. None
    with neither a rate nor a round trip (nothing to set it against)."""
    rtts = protocols.get(proto).first_byte_rtts + (1 if objects else 0)
    transfer = transfer_seconds(size_bytes, rate_bps)
    if transfer is None and not rtt_ms:
        return None
    return rtts * rtt_ms + 1000.0 * (transfer or 0.0)


def join(values: Iterable[object]) -> str:
    return ",".join(str(v) for v in values)

