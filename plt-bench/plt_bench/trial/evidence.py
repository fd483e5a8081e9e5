"""A trial's evidence and its record: what one load left (Evidence), the judgement every kind of
page shares (the conditions held: the link kept time and carried nothing else, no part stalled, the
CPU budget held), and make_trial, which joins it to the page's kind's own judgement (pages) and
builds the stored record (records.Trial)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .. import browsers, protocols
from ..conditions import Cell
from ..device.budget import budget_problem, quota_for
from ..link import origins
from ..metadata import utc_now
from ..pages import Load, base, timing, url_host, url_path
from ..pages.proof import from_cache, is_error_page
from ..records import Trial, WorkerAnswer
from .judge import (connections, connections_per_origin, paint_fields, protocol_mix,
                    resumed_connections, timings, zero_rtt_summary)


# A trial is only valid if the emulator kept time: at most MAX_LATE_SHARE of the packets may be
# released late by max(1 ms, 10% of the one-way delay) or more (an overloaded emulator inflates
# the delay). The bound is rounded down to a boundary of linkem's histogram.
MAX_LATE_SHARE = 0.01
# lower bound in ms of a lateness -> the histogram buckets (keyed by upper bound in us) at or above it
_LATE_BUCKETS_FROM = {1: ("2000", "5000", "inf"), 2: ("5000", "inf"), 5: ("inf",)}


def late_bound_ms(one_way_delay_ms: float) -> int:
    want = max(1.0, 0.1 * one_way_delay_ms)
    return max(b for b in _LATE_BUCKETS_FROM if b <= want)


# ... and no packet may be held back long: a stall (the emulator descheduled or stopped) delays the
# whole page by up to its length while only a handful of packets are late. The worst lateness must
# stay under max(STALL_FLOOR_MS, STALL_SHARE of the trial's wall time): a 2 s stall in a 10 s trial
# is refused; a scheduling hiccup of a few ms on a busy machine is not.
STALL_FLOOR_MS = 20.0
STALL_SHARE = 0.05


def stall_bound_ms(trial_ms: float) -> float:
    return max(STALL_FLOOR_MS, STALL_SHARE * trial_ms)


def link_fidelity_problem(delta: dict | None, one_way_delay_ms: float = 0.0, trial_ms: float = 0.0) -> str | None:
    """Why the emulator did not deliver the conditions during a trial (its own figures: `delta` from
    link_delta), or None. Judged by the share of packets late and by the worst lateness."""
    if not delta:
        return None
    bound = late_bound_ms(one_way_delay_ms)
    stall = stall_bound_ms(trial_ms)
    for name, d in delta.get("dirs", {}).items():
        worst_ms = d.get("late_max_us", 0) / 1000.0
        if worst_ms >= stall:
            return (f"link emulator stalled: a {name} packet was released {worst_ms:.0f} ms late, over the "
                    f"{stall:.0f} ms a trial of {trial_ms:.0f} ms allows; the trial did not run under its conditions")
        released = d.get("released", 0)
        late = sum(d.get("late_hist_us", {}).get(k, 0) for k in _LATE_BUCKETS_FROM[bound])
        if released and late / released > MAX_LATE_SHARE:
            return (f"link emulator fell behind: {late / released:.1%} of {name} packets released >= {bound} ms late "
                    f"(mean lateness {d.get('late_mean_us', 0):.0f} us); the trial did not run under its conditions")
    if delta.get("enobufs"):
        return f"link emulator lost packets to a full netlink socket ({delta['enobufs']} ENOBUFS)"
    return None


UPLINK_NEED_BYTES = 64 * 1500


def trace_starved(conditions, wall_s: float, page_bytes: int, known: dict) -> str | None:
    """A failed load's cause when a direction follows a trace that offered less than the page in the
    trial's time (a trace with long silences, or one opportunity a minute): the trace named with what it
    offered, so that Chromium's own error (ERR_QUIC_PROTOCOL_ERROR, a timeout) is not taken for the
    protocol's. None when no traced direction starved the page."""
    from ..conditions import TraceRate
    window_ms = max(1, int(wall_s * 1000))
    # what each direction must carry at the least: the page down; requests and ACKs up (64 packets)
    for name, rate, need, what in (("downlink", conditions.down, page_bytes, f"less than the page's {page_bytes:,}"),
                                   ("uplink", conditions.up, UPLINK_NEED_BYTES, "too little for the requests")):
        if not isinstance(rate, TraceRate):
            continue
        try:
            offered = rate.trace(known).window_bytes(window_ms, 0, 1)[0]  # from the mark the trial's navigation set
        except LookupError:
            continue
        if offered < need:
            return (f"the {name} follows trace {rate.name} (mean {rate.mean_bps / 1e6:.3f} Mbit/s), which offered "
                    f"{offered:,} bytes in the trial's {wall_s:.1f} s, {what}: the trace starved the load")
    return None


def foreign_traffic_problem(foreign: list[dict]) -> str | None:
    """Why a trial that shared the link with other requests' responses does not count, or None."""
    if not foreign:
        return None
    e = foreign[0]
    return (f"other traffic on the link during the trial: the server answered {len(foreign)} other request(s) "
            f"in its time (first: {e.get('uri')}, {e.get('size')} bytes); the trial did not run alone")


@dataclasses.dataclass
class Evidence:
    """What one load left, from both ends and the link: everything make_trial judges and stores."""

    url: str                                  # the URL the trial is stored under (with its tag)
    started_utc: str
    wall_s: float                             # the worker's whole turn: launch, load, quit
    answer: WorkerAnswer                      # the browser's side (browsers.worker)
    server_entries: list[dict] | None         # the trial's own entries of the server's log (None: unread)
    foreign: list[dict] = dataclasses.field(default_factory=list)  # others' responses during the trial
    link_stats: dict | None = None            # the emulator's counters during the trial (link_delta)
    link_dead: str | None = None              # why the link died during it
    delivered: list[tuple[float, int]] | None = None  # a bulk page's link counter, sampled
    delivery_dev: str | None = None           # the device that counter is read on
    stalled: str | None = None                # a part of the testbed was stopped (cpu.Sampler.stall_problem)
    traces: dict = dataclasses.field(default_factory=dict)  # the traces the conditions follow, by hash
    extra: dict = dataclasses.field(default_factory=dict)  # the trial's other fields (attempt, gate, CPU, cc)
    origins: "origins.Placed | None" = None   # each origin's path delay asked and its addresses (--origin-rtt; None: off)
    jitter_legs: int = 2                      # how many times a round trip draws the link's jitter (Link.jitter_legs)


def make_trial(campaign_id: int, seq: int, run_index: int, cell: Cell, ev: Evidence, sites: Path | None = None) -> Trial:
    """Build the immutable record of one load from its evidence: the fields every trial has, the
    page's kind's judgement and fields (pages.PageKind.judge: its document, its objects, its script's
    figures, from the worker's answer and the server's own entries for the trial), and the refusals
    that every kind shares: a link that died or fell behind, other traffic on it (`foreign`), a
    stalled part of the testbed, a CPU budget that did not hold."""
    url, answer, server_entries, wall_s = ev.url, ev.answer, ev.server_entries, ev.wall_s
    page = cell.page
    # a discovery trial's h3 cell: the browser found its protocols, each request proven over its own
    discovered = ev.extra.get("discovery", "forced") != "forced" and protocols.get(cell.proto).transport == "QUIC"
    judged = page.page_kind.judge(Load(page=page, proto=cell.proto, url=url, answer=answer,
                                       server_entries=server_entries, sites=sites or base.DEFAULT_SITES, discovered=discovered,
                                       delivered=ev.delivered, delivery_dev=ev.delivery_dev))
    status, reason, page_entries = judged.status, judged.reason, judged.page_entries
    budget = budget_fields(answer)
    cross = (ev.link_stats or {}).get("cross") or {}
    distances, far_problem = origin_proof(cell, ev, url) if ev.origins is not None else (None, None)
    think = timing.of_text(cell.conditions.think)  # each response's wait, proven from the server's log
    thought, think_problem = timing.proof(think, server_entries or []) if think.on else (None, None)
    problem = ev.link_dead or cross.get("died") or foreign_traffic_problem(ev.foreign) or link_fidelity_problem(
        ev.link_stats, cell.conditions.delay_ms, 1000.0 * wall_s) or ev.stalled or (
        budget_problem(quota_for(group["budget_cores"], group["cores"]) if (group := answer.get("cpu_group")) else None,
                       answer.get("cpu_loop"), group, budgeted=True)
        if (cell.cpu is not None or cell.device) and status == "ok" else None) or (
        (far_problem or think_problem) if status == "ok" else None)
    if problem:  # whatever the browser saw, this trial did not run under the conditions it claims
        status, reason = "failed", problem
    elif status == "failed" and cell.conditions.traced and (
            starved := trace_starved(cell.conditions, wall_s, page.total_bytes, ev.traces)):
        reason = f"{starved} (the browser: {reason})"
    nav = answer.get("nav") or {}
    # A failed navigation leaves the error page's own Navigation Timing entry: keep it raw
    # (nav_json) for forensics, never as timings of the page.
    untimed = browsers.get(answer.get("browser") or cell.browser).untimed(nav) if nav else []
    t = timings(nav, untimed) if nav and not is_error_page(answer) else {}
    t.update(paint_fields(answer.get("paint"), bool(t)))
    t.update(visit_fields(page, answer, server_entries))
    shown = answer.get("visual") or {}
    if t and not shown.get("error"):  # the screencast's figures (capture kind visual) of a loaded page
        t.update({k: shown.get(k) for k in ("first_visual_change_ms", "speed_index_ms", "visually_complete_ms")})
    per_origin = connections_per_origin(server_entries)
    srv = page_entries[0] if page_entries and len(page_entries) == 1 else {}
    resources = answer.get("resources")
    mix = protocol_mix(nav, resources, url_host(url)) if discovered and nav else None
    return Trial(
        campaign_id=campaign_id, seq=seq, run_index=run_index, proto=cell.proto, size_bytes=page.total_bytes,
        page=page.label, objects=page.objects, object_bytes=page.size_bytes if page.fetched else 0,
        objects_ok=judged.objects_ok, connections=connections(server_entries), origins=page.origins,
        connections_json=json.dumps(per_origin) if per_origin else None,
        resources_json=json.dumps(resources) if resources else None,
        conditions=cell.conditions, status=status, reason=reason,
        started_utc=ev.started_utc, finished_utc=utc_now(), wall_s=wall_s, url=url,
        launch_s=answer.get("launch_s"), load_s=answer.get("load_s"), quit_s=answer.get("quit_s"),
        next_hop_protocol=nav.get("nextHopProtocol"), response_status=nav.get("responseStatus"),
        decoded_body_bytes=nav.get("decodedBodySize"), encoded_body_bytes=nav.get("encodedBodySize"),
        transfer_bytes=nav.get("transferSize"), server_proto=protocols.http_version(srv.get("proto")), server_status=srv.get("status"),
        server_bytes=srv.get("size"), server_cc=srv.get("cc"), nav_json=json.dumps(nav) if nav else None,
        link_json=json.dumps(ev.link_stats) if ev.link_stats else None, browser=answer.get("browser") or cell.browser,
        protocol_mix_json=json.dumps(mix) if mix else None, cross_mbps=cross.get("mbps"),
        origin_rtts_json=json.dumps(distances) if distances is not None else None,
        think_json=json.dumps(thought) if thought is not None else None,
        **judged.fields, **t, **budget,
        **ev.extra)


def origin_proof(cell: Cell, ev: Evidence, url: str) -> tuple[dict, str | None]:
    """Each origin's distance in the trial (link.origins.proof): the browser's handshakes to it (the
    navigation's and every resource's Resource Timing) and the server's (its log, where it says them:
    quinnserve's) against the link's RTT plus its path delay, and linkem's packets on each far origin's
    own path. (figures as stored, the problem or None)"""
    answer = ev.answer
    entries = ([{**answer["nav"], "name": answer["nav"].get("name") or url}] if answer.get("nav") else []) + list(
        answer.get("resources") or [])
    quic = protocols.get(cell.proto).transport == "QUIC"
    shakes = origins.handshakes_ms(entries, url_host, quic)
    packets = origins.path_packets(ev.link_stats, ev.origins.addresses)
    slack = browsers.get(answer.get("browser") or cell.browser).handshake_slack_ms
    figures, problem = origins.proof(ev.origins.delays_ms, cell.conditions.rtt_ms, shakes, cell.conditions.jitter_ms,
                                     ev.jitter_legs, packets, slack, url_host(url), ev.extra.get("cpu_bound") is not None,
                                     origins.server_handshakes(ev.server_entries or []))
    return origins.as_json(figures), problem


def budget_fields(answer: WorkerAnswer) -> dict:
    """A budgeted trial's CPU budget and its proof (records.Trial: cpu_budget ... udp_rcvbuf_errors);
    nothing for a trial without one."""
    group, loop = answer.get("cpu_group"), answer.get("cpu_loop") or {}
    if not group:
        return {}
    device = answer.get("device") or {}
    if device:
        device = {"device": device["device"], "device_host_index": device["host_index"],
                  "device_index": device["measured_index"]}
    return {**device, "cpu_budget": group["budget_cores"], "cpu_cores": group["cores"], "cpu_quota_us": group["quota_us"],
            "cpu_period_us": group["period_us"], "cpu_slowdown": loop.get("slowdown"),
            "cpu_group_ms": round(group["usage_ms"], 3), "cpu_throttled_periods": group["throttled_periods"],
            "cpu_throttled_ms": round(group["throttled_ms"], 3), "udp_rcvbuf_errors": group.get("udp_rcvbuf_errors")}


def visit_fields(page, answer: WorkerAnswer, server_entries: list[dict] | None) -> dict:
    """A trial's visit (records.Trial: visit, first_plt_ms, resumed_connections, zero_rtt, cached_objects,
    visit_json): the server's word on TLS resumption for every load; for a repeat visit its first
    load's page-load time, the net-log's 0-RTT states and the objects its cache served."""
    out = {"visit": page.visit, "resumed_connections": resumed_connections(server_entries)}
    if page.visit == "first":
        return out
    first, evidence = answer.get("first_visit") or {}, answer.get("visit_evidence") or {}
    nav = first.get("nav") or {}
    if nav.get("loadEventEnd"):
        out["first_plt_ms"] = float(nav["loadEventEnd"]) - float(nav.get("startTime") or 0)
    if "quic_zero_rtt" in evidence and not evidence.get("error"):
        out["zero_rtt"] = zero_rtt_summary(evidence["quic_zero_rtt"])
    if page.visit == "repeat-warm" and page.fetched:
        sizes = {(h, u): n for h, u, n in page.object_specs()}
        out["cached_objects"] = sum(from_cache(r, sizes[key]) for r in answer.get("resources") or []
                                    if (key := (url_host(r.get("name")), url_path(r.get("name")))) in sizes)
    out["visit_json"] = json.dumps({"evidence": evidence, "first_load_s": first.get("load_s"),
                                    "boundary_unix": first.get("boundary_unix"),
                                    "first_nav": {k: nav.get(k) for k in ("connectStart", "connectEnd", "responseStart",
                                                                          "loadEventEnd", "transferSize")}})
    return out
