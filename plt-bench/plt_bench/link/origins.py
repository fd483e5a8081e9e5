"""Each origin at its own distance (--origin-rtt): the link every origin shares (its rate, queue,
loss and RTT) plus an origin's own path delay, and the proof of it in each trial. Pure but for
nothing: the link backends apply the paths (LinkemLink.set_paths), the trial asks for the proof.

    --origin-rtt off | recorded | HOST=MS[+HOST=MS...]     an axis: comma-separated values

- off (the default): every origin at the link's RTT, as before.
- HOST=MS: that origin's connections see the link's RTT plus MS more (a round trip's worth: half
  each way in the router; on a two-machine client, where all delay sits on the downlink, all of
  it there). An origin not named stays at the link's RTT.
- recorded: each origin's path delay as its recording measured it (pages.timing: an origin's RTT
  as recorded, less the recording machine's own access link, taken as the nearest origin's); a
  recording keeps its origins' round trips where its HAR had timings (archive.recorded_rtts).

A delay is given to an origin's addresses (each origin of a testbed has its own: topology.Plan):
linkem holds a packet from or to one of them that much longer after the link's own delay
(linkem --origin-delay), each origin's packets in their order, and packets of a near origin pass
those of a far one as they would on the web.

The proof, per trial (proof()): each origin the browser opened a connection to, its handshake
round trip from the browser's Resource Timing (over TCP, TLS 1.3's one round trip, connectEnd -
secureConnectionStart: Chromium's connectStart for a cross-origin object is not the SYN's, it came
25-35 ms late at 120 ms, so the SYN's round trip reads short; over QUIC, its one-round-trip
handshake, connectEnd - connectStart), the shortest of each origin's, against the link's RTT plus
the origin's path delay, within tolerance(); and linkem's count of each far origin's packets in
the trial. A trial an origin of which was not at its distance fails with the reason.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from ..errors import LinkError, UsageError

MODES = ("off", "recorded")
MAX_DELAY_MS = 10_000.0  # an origin's path delay beyond this is refused as absurd
FORM = "off, recorded, or HOST=MS[+HOST=MS...] (static.pkg.test=100+api.pkg.test=40)"
# The proof's tolerance. A handshake's round trip as the browser times it is the link's RTT plus the
# origin's path delay plus what the hosts add: never less (packets cannot come sooner than the link
# lets them), so below it only the clocks' error is allowed (BELOW_MS, or BELOW_SHARE of the round
# trip asked); above it, the hosts' work: a TLS or QUIC handshake's key exchange and signature, and
# the browser's own turn in a busy load, which the browser seam says (Browser.handshake_slack_ms:
# Chromium 30 ms, Firefox 50 ms, from up to 18.6 ms and 28 ms measured), or ABOVE_SHARE of the round
# trip asked where that is more. So the proof is tight below (a far origin's delay not applied is
# caught whatever its size) and loose above (a near origin pushed away is caught beyond the slack). The link's jitter is allowed on both sides, once a leg.
BELOW_MS, BELOW_SHARE = 3.0, 0.05
ABOVE_MS, ABOVE_SHARE = 15.0, 0.15


@dataclasses.dataclass(frozen=True)
class OriginRtt:
    """One value of the --origin-rtt axis: recorded, or given (each host's path delay, ms). Off is None
    where Conditions holds it."""

    mode: str = "given"  # recorded | given
    delays_ms: tuple[tuple[str, float], ...] = ()

    @property
    def text(self) -> str:
        """Its canonical text: 'recorded', or the given hosts in order (a.test=100+b.test=40)."""
        if self.mode != "given":
            return self.mode
        return "+".join(f"{h}={_num(ms)}" for h, ms in self.delays_ms)

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(h for h, _ in self.delays_ms)


def _num(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _delay(text: str, option: str) -> float:
    t = text.strip().removesuffix("ms")
    try:
        ms = float(t)
    except ValueError:
        ms = math.nan
    if not math.isfinite(ms) or not t.replace(".", "", 1).isdigit():
        raise UsageError(f"{option}: '{text}' is not a path delay in ms; expected {FORM}")
    if ms > MAX_DELAY_MS:
        raise UsageError(f"{option}: {text} ms is more than {MAX_DELAY_MS:g} ms; expected a path delay of 0 to "
                         f"{MAX_DELAY_MS:g} ms")
    return ms


def parse(text: str, option: str = "--origin-rtt") -> OriginRtt | None:
    """One value of --origin-rtt (pure): None for off; UsageError naming the option and the form."""
    t = str(text).strip()
    if t.lower() == "off":
        return None
    if t.lower() == "recorded":
        return OriginRtt("recorded")
    delays: dict[str, float] = {}
    for part in t.split("+"):
        host, sep, ms = part.partition("=")
        host = host.strip().lower()
        if not sep or not host or not all(c.isalnum() or c in ".-" for c in host):
            raise UsageError(f"{option}: '{part}' in '{text}'; expected {FORM}")
        if host in delays:
            raise UsageError(f"{option}: {host} is given twice in '{text}'")
        delays[host] = _delay(ms, option)
    return OriginRtt("given", tuple(sorted(delays.items())))


def parse_list(text: str | None, option: str = "--origin-rtt") -> tuple[OriginRtt | None, ...]:
    """The axis (pure): its values comma-separated, each once; (None,) when not given."""
    if text is None or not str(text).strip():
        return (None,)
    out: list[OriginRtt | None] = []
    for item in str(text).split(","):
        v = parse(item, option)
        if v in out:
            raise UsageError(f"{option}: '{item.strip()}' is given twice")
        out.append(v)
    return tuple(out)


def stored(text: str) -> OriginRtt:
    """A stored value's text back into its record (the store's reader); ValueError where it is none."""
    try:
        v = parse(text, "stored")
    except UsageError as e:
        raise ValueError(str(e)) from None
    if v is None:
        raise ValueError("stored: 'off' is stored as NULL")
    return v


def check_hosts(asked: OriginRtt | None, page_hosts: set[str], page: str, option: str = "--origin-rtt") -> None:
    """Refuse a host the page does not use (before anything starts)."""
    unknown = [h for h in (asked.hosts if asked else ()) if h not in page_hosts]
    if unknown:
        raise UsageError(f"{option}: {', '.join(unknown)} is no origin of {page}; its origins: "
                         f"{', '.join(sorted(page_hosts))}")


def host_delays(asked: OriginRtt | None, recorded: dict[str, float] | None = None) -> dict[str, float]:
    """Each origin's path delay (ms) a load is to see: the given ones, or the recording's (recorded:
    pages.timing.RecordedTiming.path_delays_ms); {} for off. LookupError for recorded without a
    recording's timing (the campaign refuses that before it starts)."""
    if asked is None:
        return {}
    if asked.mode == "recorded":
        if recorded is None:
            raise LookupError("--origin-rtt recorded: this page has no recorded timing")
        return {h: ms for h, ms in recorded.items() if ms > 0}
    return {h: ms for h, ms in asked.delays_ms if ms > 0}


def address_delays(delays: dict[str, float], origins: list[tuple[str, str]]) -> dict[str, float]:
    """Each address's path delay (ms) from each host's: every address a delayed host resolves to."""
    return {ip: delays[h] for h, ip in origins if h in delays}


def direction_us(paths: dict[str, float], split: bool) -> dict[str, dict[str, int]]:
    """Each linkem direction's share of these address delays (round trips, ms), in us: split, half on
    each direction (the router's down and up); else all on the downlink (a client's own ingress)."""
    out: dict[str, dict[str, int]] = {}
    for ip, ms in sorted(paths.items()):
        us = round(ms * 1000)
        shares = {"down": us // 2, "up": us - us // 2} if split else {"down": us}
        for d, x in shares.items():
            out.setdefault(d, {})[ip] = x
    return out


class Placed(NamedTuple):
    """A load's origins as placed on the link: each host's path delay (ms) and the addresses it has."""
    delays_ms: dict[str, float]
    addresses: dict[str, tuple[str, ...]]


def path_packets(link_stats: dict | None, addresses: dict[str, tuple[str, ...]]) -> dict[str, int] | None:
    """Each delayed host's packets on its own path in a trial (linkem's, from the trial's counters:
    trial.run.link_delta), both directions; None without linkem's figures."""
    dirs = (link_stats or {}).get("dirs") or {}
    if not any("paths" in d for d in dirs.values()):
        return None
    return {h: sum((d.get("paths") or {}).get(ip, 0) for d in dirs.values() for ip in ips) for h, ips in addresses.items()}


MAX_NETEM_DELAYS = 15  # a prio qdisc's 16 bands: the default one and one each delay


def netem_bands(paths: dict[str, float]) -> dict[float, int]:
    """Each distinct path delay's band of the prio qdisc (pure; 2 onwards: band 1 is every other packet's)."""
    delays = sorted(set(paths.values()))
    if len(delays) > MAX_NETEM_DELAYS:
        raise LinkError(f"--origin-rtt: {len(delays)} different path delays; the netem backend holds at most "
                        f"{MAX_NETEM_DELAYS} (use --link linkem)")
    return {ms: 2 + k for k, ms in enumerate(delays)}


def netem_commands(dev: str, paths: dict[str, float]) -> list[list[str]]:
    """The kernel's commands that hold each origin's packets its path delay on the server's egress (pure):
    a prio qdisc whose first band (every other packet) is a plain FIFO, one band a distinct delay with
    a netem leaf, a u32 filter a delayed address. The whole round trip's delay is on that one leg, ahead
    of the link's own shaping in the router. Removal first; nothing more for no paths."""
    out = [["tc", "qdisc", "del", "dev", dev, "root"]]
    if not paths:
        return out
    bands = netem_bands(paths)
    out.append(["tc", "qdisc", "add", "dev", dev, "root", "handle", f"{NETEM_HANDLE:x}:", "prio", "bands",
                str(len(bands) + 1), "priomap", *["0"] * 16])
    for ms, band in bands.items():
        out.append(["tc", "qdisc", "add", "dev", dev, "parent", f"{NETEM_HANDLE:x}:{band:x}", "handle",
                    f"{NETEM_HANDLE + band:x}:", "netem", "delay", f"{round(ms * 1000)}us", "limit", "100000"])
    for ip, ms in sorted(paths.items()):
        out.append(["tc", "filter", "add", "dev", dev, "parent", f"{NETEM_HANDLE:x}:", "protocol", "ip", "prio", "1",
                    "u32", "match", "ip", "src", f"{ip}/32", "flowid", f"{NETEM_HANDLE:x}:{bands[ms]:x}"])
    return out


NETEM_HANDLE = 0x50  # the prio qdisc's handle (tc reads handles in hex: 50:); its netem leaves 52: onwards


def netem_paths_read(leaves: dict[str, dict], filters: list[tuple[str, str]], paths: dict[str, float]) -> list[dict]:
    """What the kernel holds, judged against the paths asked (pure): leaves, each qdisc by handle with
    its 'delay_ms' (readback.parse_qdiscs) and 'sent_pkts' (readback.parse_qdisc_stats); filters,
    (address, flowid) pairs (readback.parse_src_filters). Each address's path in linkem's stats' form
    ({addr, extra_us, packets}); LinkError where one is not as asked, or an address is held unasked."""
    out = []
    for ip, ms in sorted(paths.items()):
        flow = next((f for a, f in filters if a == ip), None)
        band = int(flow.split(":")[1], 16) if flow and ":" in flow else None
        leaf = leaves.get(f"{NETEM_HANDLE + band:x}:") if band else None
        got = round((leaf or {}).get("delay_ms", -1) * 1000)
        if leaf is None or leaf.get("kind") != "netem" or abs(got - round(ms * 1000)) > 1:
            raise LinkError(f"--origin-rtt: the server's egress holds {ip} at {got} us, expected {round(ms * 1000)} us "
                            f"(filter {flow}, leaf {leaf})")
        out.append({"addr": ip, "extra_us": got, "packets": leaf.get("sent_pkts", 0)})
    unasked = sorted({a for a, _ in filters} - set(paths))
    if unasked:
        raise LinkError(f"--origin-rtt: the server's egress holds {', '.join(unasked)}, which no path asks for")
    return out


def linkem_args(paths: dict[str, float], split: bool) -> list[str]:
    """linkem's --origin-delay arguments (direction_us)."""
    return [a for d, per in direction_us(paths, split).items() for ip, us in per.items()
            for a in ("--origin-delay", f"{d}:{ip}={us}")]


def tolerance(expected_ms: float, jitter_ms: float = 0.0, jitter_legs: int = 2,
              slack_ms: float = ABOVE_MS) -> tuple[float, float]:
    """How far below and above the round trip asked a handshake's measured one may be (BELOW_MS ...;
    slack_ms: the browser's own, Browser.handshake_slack_ms)."""
    j = jitter_legs * jitter_ms
    return max(BELOW_MS, BELOW_SHARE * expected_ms) + j, max(slack_ms, ABOVE_SHARE * expected_ms) + j


def handshakes_ms(entries: list[dict], host_of, quic: bool) -> dict[str, list[float]]:
    """Each host's connection handshakes (ms) in Resource Timing entries (the navigation's and the
    resources'): over TCP, TLS's round trip (connectEnd - secureConnectionStart); over QUIC, its
    handshake (connectEnd - connectStart); an entry that opened no connection (equal times) says nothing."""
    out: dict[str, list[float]] = {}
    for e in entries:
        cs, ce, ss = (e.get(k) for k in ("connectStart", "connectEnd", "secureConnectionStart"))
        if not all(isinstance(x, (int, float)) for x in (cs, ce)) or ce <= cs or cs <= 0:
            continue
        if quic:
            rtt = ce - cs
        elif isinstance(ss, (int, float)) and cs <= ss < ce:
            rtt = ce - ss
        else:
            continue
        host = host_of(e.get("name"))
        if host:
            out.setdefault(host, []).append(float(rtt))
    return out


@dataclasses.dataclass(frozen=True)
class OriginFigure:
    """One origin in one trial: its path delay asked, the round trip expected (the link's RTT plus it),
    what the browser measured (the shortest of its connections' handshakes), how many, and within
    what (below, above: tolerance())."""

    host: str
    path_ms: float
    expected_ms: float
    measured_ms: float | None
    connections: int
    below_ms: float
    above_ms: float
    packets: int | None = None  # linkem's count of the origin's packets on its own path in the trial
    # the shortest handshake round trip the server measured on the origin's connections (ms; quinnserve's log:
    # the kernel's SYN-ACK sample over TCP, quinn's RTT at the handshake's end over QUIC); None: its server
    # says none (Caddy's log keeps no such figure)
    server_ms: float | None = None

    def within(self, ms: float | None) -> bool:
        return ms is not None and -self.below_ms <= ms - self.expected_ms <= self.above_ms

    @property
    def ok(self) -> bool:
        return self.within(self.measured_ms) and (self.server_ms is None or self.within(self.server_ms))


def proof(delays: dict[str, float], rtt_ms: float, handshakes: dict[str, list[float]], jitter_ms: float = 0.0,
          jitter_legs: int = 2, path_packets: dict[str, int] | None = None,
          slack_ms: float = ABOVE_MS, own_host: str | None = None,
          cpu_held: bool = False, server: dict[str, list[float]] | None = None) -> tuple[list[OriginFigure], str | None]:
    """Each origin's figures, and the problem where one was not at its distance (or a delayed origin
    the browser connected to was never timed, or linkem held none of its packets): every origin the
    browser timed is judged, near ones too (at the link's RTT). own_host: the page's own origin, whose
    first handshake (the load's first, on a browser not yet busy with the page) says what this machine
    adds to one: the slack above is at least twice that (a slow machine's, as the netem VM's software
    emulation), so that it judges the distance, not the CPU. cpu_held: the load was CPU-bound (cpu.bound):
    a handshake late beyond the slack then says nothing of the distance and fails nothing (the figures
    keep it, not ok); one sooner than the link allows always fails. server: each origin's handshake round
    trips as its server measured them (server_handshakes), judged alike where the server says them."""
    own = handshakes.get(own_host or "") or []
    if own:
        slack_ms = max(slack_ms, 2.0 * (min(own) - rtt_ms - delays.get(own_host, 0.0)))
    figures = []
    for host in sorted(set(handshakes) | set(delays)):
        path = delays.get(host, 0.0)
        expected = rtt_ms + path
        hs = handshakes.get(host) or []
        below, above = tolerance(expected, jitter_ms, jitter_legs, slack_ms)
        seen = (server or {}).get(host) or []
        figures.append(OriginFigure(host, path, expected, round(min(hs), 3) if hs else None, len(hs),
                                    round(below, 3), round(above, 3), (path_packets or {}).get(host),
                                    round(min(seen), 3) if seen else None))

    def late(f: OriginFigure, ms: float | None) -> bool:  # off, and not excused by a CPU-bound load
        return ms is not None and not f.within(ms) and not (cpu_held and ms > f.expected_ms)
    off = [(f, "its shortest handshake took", f.measured_ms) for f in figures if late(f, f.measured_ms)]
    off += [(f, "its server measured its shortest handshake at", f.server_ms) for f in figures
            if late(f, f.server_ms) and not late(f, f.measured_ms)]
    if off:
        f, how, ms = off[0]
        return figures, (f"origin {f.host} was not at its distance: {how} {ms:g} ms, "
                         f"expected {f.expected_ms:g} ms (the link's {rtt_ms:g} + its path's {f.path_ms:g}), from "
                         f"{f.below_ms:g} ms below to {f.above_ms:g} ms above"
                         + (f"; {len(off) - 1} more origin(s) off too" if len(off) > 1 else ""))
    untimed = [f.host for f in figures if f.path_ms > 0 and f.measured_ms is None and (f.packets or 0) > 0]
    if untimed:
        return figures, (f"origin(s) {', '.join(untimed)} carried packets on their own path but the browser timed no "
                         "handshake to them (no Resource Timing of a new connection): their distance is unproven")
    unheld = [f.host for f in figures if f.path_ms > 0 and f.measured_ms is not None and f.packets == 0]
    if unheld:
        return figures, (f"origin(s) {', '.join(unheld)} answered, but linkem held none of their packets on their "
                         "own path: the path delay was not applied")
    return figures, None


def server_handshakes(entries: list[dict]) -> dict[str, list[float]]:
    """Each host's handshake round trips as its server's log gives them (ms; an entry's rtt_ms, one per
    connection: quinnserve's), pure; {} where the log says none (Caddy's)."""
    out: dict[str, dict[object, float]] = {}
    for e in entries:
        ms = e.get("rtt_ms")
        if isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms > 0 and e.get("host"):
            out.setdefault(str(e["host"]).lower(), {})[(e.get("proto"), e.get("remote_port"))] = float(ms)
    return {h: list(v.values()) for h, v in out.items()}


def as_json(figures: list[OriginFigure]) -> dict:
    """The figures as a trial stores them (records.Trial.origin_rtts_json)."""
    return {f.host: {"path_ms": f.path_ms, "expected_ms": f.expected_ms, "measured_ms": f.measured_ms,
                     "connections": f.connections, "below_ms": f.below_ms, "above_ms": f.above_ms, "packets": f.packets,
                     "server_ms": f.server_ms, "ok": f.ok}
            for f in figures}
