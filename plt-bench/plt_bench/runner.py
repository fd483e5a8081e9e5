"""One trial on a testbed (load, judge, store), and applying conditions with their verification."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Callable

from . import browsers, bulk, latency, protocols
from .browser import (connections, connections_per_origin, from_cache, is_error_page, judge, judge_archive, judge_bulk,
                      judge_objects, judge_requests, paint_fields, protocol_mix, resumed_connections, timings, url_host,
                      url_path, zero_rtt_summary)
from .conditions import Cell, transfer_seconds
from .capture import TrialCapture, trial_folder
from .cpu import Sampler, cpu_by_role, fixed_sources
from .cpu import BOUND_SHARE, bound as cpu_bound
from .cpu import cpu_list, own_cpus
from .device.budget import budget_bound, budget_problem, quota_for
from .errors import LinkError, ServerError, TestbedBroken
from .link.counters import DeliveryCounter
from .metadata import utc_now
from .servers import overlapping, own_entries
from .records import Trial, WorkerAnswer
from .store import Store
from .testbed import Testbed


def page_timeout_s(size_bytes: int, rate_bps: int | None, rtt_ms: float = 0.0, objects: int = 0) -> float:
    """Generous page-load timeout: 3x the ideal transfer time plus 20 s (unshaped: as if 100 Mbit/s),
    plus 3x the round trips of a many-object page over HTTP/1.1's six connections (and four more
    for the handshakes)."""
    ideal = transfer_seconds(size_bytes, rate_bps if rate_bps else 100 * 10**6)
    round_trips = 3.0 * (objects / 6 + 4) * rtt_ms / 1000.0 if objects else 0.0
    return 3.0 * ideal + 20.0 + round_trips


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


def link_delta(before: dict | None, after: dict | None) -> dict | None:
    """The emulator's counters during one trial: after - before for counts; for maxima, the trial's
    own (linkem's "since_mark": the worst since the snapshot taken before the trial), never the
    lifetime ones, which would carry one trial's stall into every later trial's figures."""
    if not before or not after:
        return after
    out = {"cpu_s": round(after.get("cpu_s", 0) - before.get("cpu_s", 0), 6),
           "enobufs": after.get("enobufs", 0) - before.get("enobufs", 0),
           "cpu_dma_latency_us": after.get("cpu_dma_latency_us"), "dirs": {}}
    for name, a in after.get("dirs", {}).items():
        b = before.get("dirs", {}).get(name, {})
        d = {k: a[k] - b.get(k, 0) for k in ("packets", "bytes", "dropped", "released", "reordered", "early") if k in a}
        d.update({k: a[k] for k in ("max_depth", "late_max_us", "early_max_us") if k in a})
        d.update(a.get("since_mark") or {})
        d["late_hist_us"] = {k: v - b.get("late_hist_us", {}).get(k, 0) for k, v in a.get("late_hist_us", {}).items()}
        if "ecn" in a:  # the packets of the trial by ECN codepoint: whether its endpoints asked for ECN
            d["ecn"] = {k: v - b.get("ecn", {}).get(k, 0) for k, v in a["ecn"].items()}
        ta, tb = a.get("trace") or {}, b.get("trace") or {}
        if ta.get("path"):  # the trace's part: what its opportunities carried and its queue refused in the trial
            d["trace"] = {"epoch_ns": ta["epoch_ns"], "opportunities": ta["opportunities"],
                          "served_bytes": ta["served_bytes"] - tb.get("served_bytes", 0),
                          "queue_drops": ta["queue_drops"] - tb.get("queue_drops", 0)}
        ba, bb = a.get("bottleneck") or {}, b.get("bottleneck") or {}
        if ba.get("aqm", "none") != "none":  # the bottleneck's discipline (--aqm): what it did in the trial
            dq = ba["dequeued"] - bb.get("dequeued", 0)
            d["bottleneck"] = {"aqm": ba["aqm"], **{k: ba[k] - bb.get(k, 0) for k in
                                                    ("aqm_drops", "marks", "overlimit_drops", "dequeued")},
                               "sojourn_mean_us": round((ba["sojourn_sum_us"] - bb.get("sojourn_sum_us", 0)) / dq, 1)
                               if dq > 0 and "sojourn_sum_us" in ba else None}  # the kernel's keeps no sum
        if d.get("released"):
            d["late_mean_us"] = round((a.get("late_sum_us", 0) - b.get("late_sum_us", 0)) / d["released"], 2)
        out["dirs"][name] = d
    return out


def with_cross(stats: dict | None, flows, samples: list[tuple[float, int]] | None, answer: dict | None = None) -> dict | None:
    """The trial's link counters with what the competing flows (link.cross) did: their Mbit/s at
    their receiver's interface during the page's load (from the navigation's start, the worker's
    nav_t0, to its load event), else over the whole trial where the load has no such figures, and
    whether one of them died (the trial then fails)."""
    from .link.cross import window_mbps
    if flows is None or not samples:
        return stats
    nav_t0, end_ms = (answer or {}).get("nav_t0"), ((answer or {}).get("nav") or {}).get("loadEventEnd")
    load = window_mbps(samples, nav_t0, nav_t0 + end_ms / 1000) if nav_t0 and end_ms else None
    whole = window_mbps(samples, samples[0][0], samples[-1][0])
    cross = {"spec": flows.spec.text, "mbps": round(load if load is not None else (whole or 0.0), 3),
             "window": "load" if load is not None else "trial"}
    died = flows.died()
    if died:
        cross["died"] = f"cross traffic {flows.spec.text}: {died} during the trial; it did not run under its conditions"
    return {**(stats or {}), "cross": cross}


def trace_phase_ms(stats: dict | None, nav_t0: float | None) -> float | None:
    """Where the navigation began in the link's trace: ms after the trace last started over (the
    worker's mark; both on CLOCK_MONOTONIC), from the trial's link counters (link_delta); None
    without a trace or a navigation time."""
    epochs = [d["trace"]["epoch_ns"] for d in ((stats or {}).get("dirs") or {}).values() if d.get("trace")]
    if not epochs or not isinstance(nav_t0, (int, float)):
        return None
    return round(nav_t0 * 1000 - max(epochs) / 1e6, 3)


def trace_starved(conditions, wall_s: float, page_bytes: int, known: dict) -> str | None:
    """A failed load's cause when a direction follows a trace that offered less than the page in the
    trial's time (a trace with long silences, or one opportunity a minute): the trace named with what it
    offered, so that Chromium's own error (ERR_QUIC_PROTOCOL_ERROR, a timeout) is not taken for the
    protocol's. None when no traced direction starved the page."""
    from .conditions import TraceRate
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


UPLINK_NEED_BYTES = 64 * 1500


def page_hosts(bed, page) -> set[str]:
    """The hosts of a replayed recording's, or of the folders served as they are (a url: page's)."""
    if page.archived:
        return {o.host for o in page.archive.origins}
    return {h for x in bed.server.statics for h, _ in x.origins}


def replayed_entries(entries: list[dict], hosts: set[str], since_unix: float) -> list[dict]:
    """A replayed recording's trial's own log entries: its recorded hosts' requests that began after
    the trial did (an entry without times counts)."""
    out = []
    for e in entries:
        if e.get("host") not in hosts:
            continue
        end, dur = e.get("end_unix_s"), e.get("duration_s")
        if isinstance(end, (int, float)) and isinstance(dur, (int, float)) and end - dur < since_unix:
            continue
        out.append(e)
    return out


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
    answer: WorkerAnswer                      # the browser's side (browser_worker)
    server_entries: list[dict] | None         # the trial's own entries of the server's log (None: unread)
    foreign: list[dict] = dataclasses.field(default_factory=list)  # others' responses during the trial
    link_stats: dict | None = None            # the emulator's counters during the trial (link_delta)
    link_dead: str | None = None              # why the link died during it
    delivered: list[tuple[float, int]] | None = None  # a bulk page's link counter, sampled
    delivery_dev: str | None = None           # the device that counter is read on
    stalled: str | None = None                # a part of the testbed was stopped (cpu.Sampler.stall_problem)
    traces: dict = dataclasses.field(default_factory=dict)  # the traces the conditions follow, by hash
    extra: dict = dataclasses.field(default_factory=dict)  # the trial's other fields (attempt, gate, CPU, cc)


def make_trial(campaign_id: int, seq: int, run_index: int, cell: Cell, ev: Evidence) -> Trial:
    """Build the immutable record of one load from its evidence: the worker's answer and the
    server's log (the trial's own entries, servers.own_entries: its page's and its objects';
    `foreign`: responses to other requests that overlapped the trial). A bulk page's figures come
    from its script (the answer's workload) and from `delivered`, the link's transmit counter
    sampled meanwhile; a request page's from its requests' Resource Timing entries."""
    url, answer, server_entries, wall_s = ev.url, ev.answer, ev.server_entries, ev.wall_s
    page, uri = cell.page, url_path(url)
    # a discovery trial's h3 cell: the browser found its protocols, each request proven over its own
    discovered = ev.extra.get("discovery", "forced") != "forced" and protocols.get(cell.proto).transport == "QUIC"
    page_entries = None if server_entries is None else [e for e in server_entries if e["uri"] == uri]
    others = None if server_entries is None else [e for e in server_entries if e["uri"] != uri]
    objects_ok = None
    replayed = {}
    if page.archived:
        from .pages import DEFAULT_SITES
        from .archive import declared_icons
        from .replayd import served_bytes
        a = page.archive
        name = (answer.get("nav") or {}).get("name") or url
        status, reason, objects_ok, evidence = judge_archive(
            cell.proto, {o.host for o in a.origins}, served_bytes(a, DEFAULT_SITES, url_host(name), url_path(name)),
            answer, server_entries or [], spoke={o.host: o.protocol for o in a.origins},
            own=declared_icons(a, DEFAULT_SITES))
        asked = {(e.get("host"), e.get("uri")) for e in server_entries or []}
        evidence["recorded_not_asked"] = sum((r.host, r.target) not in asked for r in a.responses)  # counted only
        replayed = {"unrecorded": len(evidence["unrecorded"]), "replay_json": json.dumps(evidence)}
        page_entries = [e for e in page_entries or [] if e.get("host") == url_host(url)]
    elif page.url:  # served as it is: proven as a replay is, whatever it asks for
        status, reason, objects_ok, evidence = judge_archive(
            cell.proto, {e.get("host") for e in server_entries or []} | {url_host(url)}, None, answer,
            server_entries or [], replayed=False)
        replayed = {"replay_json": json.dumps(evidence)}
        page_entries = [e for e in page_entries or [] if e.get("host") == url_host(url)]
    else:
        status, reason = judge(cell.proto, page.html_bytes, answer, page_entries,
                               revalidated=page.visit == "repeat-warm", discovered=discovered)
    if page.fetched and not page.archived:  # (a url: page fetches nothing it declares)
        objects_ok, why = judge_objects(cell.proto, page, answer.get("resources"), others, discovered=discovered)
        if status == "ok" and why:
            status, reason = "failed", why
    workload_fields = {}
    if page.bulk_ms:
        work = answer.get("workload")
        why = judge_bulk(cell.proto, page, work, others)
        if status == "ok" and why:
            status, reason = "failed", why
        workload_fields = bulk.figures(page, work, ev.delivered, ev.delivery_dev)
    if page.requests:  # each request's proof is judge_objects'; here the script's own word
        why = judge_requests(page, answer.get("workload"))
        if status == "ok" and why:
            status, reason = "failed", why
        workload_fields = latency.figures(page, answer.get("resources"))
    budget = budget_fields(answer)
    cross = (ev.link_stats or {}).get("cross") or {}
    problem = ev.link_dead or cross.get("died") or foreign_traffic_problem(ev.foreign) or link_fidelity_problem(
        ev.link_stats, cell.conditions.delay_ms, 1000.0 * wall_s) or ev.stalled or (
        budget_problem(quota_for(group["budget_cores"], group["cores"]) if (group := answer.get("cpu_group")) else None,
                       answer.get("cpu_loop"), group, budgeted=True)
        if (cell.cpu is not None or cell.device) and status == "ok" else None)
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
        objects_ok=objects_ok, connections=connections(server_entries), origins=page.origins,
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
        **workload_fields, **t, **replayed, **budget,
        **ev.extra)


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


def run_cell_once(bed: Testbed, store: Store, campaign_id: int, seq: int, run_index: int, cell: Cell,
                  timeout_s: float | None = None, extra: dict | None = None, gate: bool = False,
                  next_cell: Cell | None = None) -> Trial:
    """One trial: load, judge, store. `extra` adds fields such as attempt or warmup; gate: the idle
    gate runs between the browser's launch and the navigation, and what it saw is stored (busy_pct,
    load1, idle_wait_s). next_cell: the load expected next; its browser is started as soon as this
    load's figures are taken, so that it launches while this trial is judged and stored (not in a
    capture run, nor across a change of conditions).

    The steps: _ready (nothing dead, nothing still loading), _measure (the load, with what the link,
    the server's and the browser's CPU did meanwhile), _evidence (the server's log read for the
    trial's own entries and others'), make_trial (the judgement), the store."""
    _ready(bed, cell)
    m = _measure(bed, cell, timeout_s, gate, (campaign_id, seq))
    if next_cell is not None and not bed.capture.files and next_cell.conditions == cell.conditions and not m.dead:
        # from here on, nothing of this trial is measured
        bed.prepare(next_cell.proto, next_cell.page.html_name, next_cell.page.visit, next_cell.browser)
    ev = _evidence(bed, cell, m, extra)
    trial = make_trial(campaign_id, seq, run_index, cell, ev)
    trial_id = store.add_trial(trial)
    trial = dataclasses.replace(trial, trial_id=trial_id)
    if "cpu" in bed.capture.kinds:
        nav_t0 = m.answer.get("nav_t0") or m.t0
        store.add_cpu_samples(trial_id, (m.answer.get("cpu_series") or []) + m.sampler.series(since=nav_t0))
    if m.artifacts:
        store.add_artifacts(trial_id, m.artifacts)
    return trial


def _ready(bed: Testbed, cell: Cell) -> None:
    """Never start a trial on a dead link, nor with any other part dead; nothing of an earlier trial
    may still be loading; the cell's server serves (testbeds of several switch between trials) and the
    routes carry the cell's congestion control (read back)."""
    if not bed.link.alive():
        raise LinkError(bed.link.died_reason())
    broken = bed.broken()
    if broken:
        raise TestbedBroken(broken)
    bed.quiesce()
    try:
        bed.use_server(cell.server)
    except ServerError as e:  # a server that would not start: the testbed cannot run the campaign on
        raise TestbedBroken(f"switching to {cell.server}: {e}") from e
    bed.set_cc(cell.cc)
    # the browser's CPU budget, and a named device's screen and memory (plt_bench.device)
    want = (cell.cpu, cell.cores, None, None, None)
    if cell.device:
        from .device.profiles import get as device_profile
        calibration, profile = bed.calibrations.get(cell.device), device_profile(cell.device)
        if calibration is None:
            raise TestbedBroken(f"the device {cell.device} was not calibrated on this host")
        want = (calibration.budget_cores, 1, profile.memory_bytes, profile.screen, calibration)
    if bed.visitor != want:
        bed.set_visitor(*want)


@dataclasses.dataclass
class Measured:
    """One load as _measure took it: the worker's answer and what went on around it."""

    answer: WorkerAnswer
    uri: str                    # what the server's log names the page by
    started_utc: str
    t0: float                   # monotonic s when the load was asked for
    t0_unix: float
    t1_unix: float              # when the worker answered
    wall_s: float
    link_stats: dict | None     # the emulator's counters during the load
    dead: str | None            # why the link died meanwhile
    sampler: Sampler            # Caddy's and linkem's CPU, sampled
    cpu0: dict                  # their totals (and two machines' remote ones) before ...
    cpu1: dict                  # ... and after
    delivered: list | None      # a bulk page's link counter samples
    delivery_dev: str | None
    artifacts: list             # a capture run's files


def _measure(bed: Testbed, cell: Cell, timeout_s: float | None, gate: bool, folder: tuple[int, int]) -> Measured:
    """The load, with what the link delivered (a bulk page), its counters, and Caddy's and linkem's
    CPU sampled at the worker's interval on the same (monotonic) clock (the worker samples the
    browser's tree). Capture runs keep the time series and the files (folder: the campaign's id and
    the trial's seq name them). A dead server or worker raises TestbedBroken (the trial says
    nothing of the link), as do processes of the trial that would not die."""
    page = cell.page.html_name
    timeout = timeout_s or page_timeout_s(cell.size_bytes, cell.conditions.rate_down_bps, cell.conditions.rtt_ms,
                                          cell.page.objects)
    if timeout_s is None and bed.budget is not None:  # a CPU budget slows a whole load by up to its factor
        timeout *= bed.budget.factor  # (measured: 20 MB over h3 at 200 Mbit/s took 21.6 s at 0.17 of a core)
    if timeout_s is None and cell.conditions.cross is not None:  # N competing flows leave the page 1/(N+1) of the rate
        timeout *= max(cell.conditions.cross_flows, 1) + 1  # a web background (0 flows) counts as one  # (measured: 10 MB beside 4 flows at 20 Mbit/s took 18-25 s)
    await_s = bulk.await_s(cell.page, cell.conditions.rtt_ms) or latency.await_s(cell.page, cell.conditions)
    settings = bed.capture
    cap = None
    if settings.files:
        cap = TrialCapture(settings.kinds, trial_folder(settings.root, *folder, cell.proto, page),
                           bed.plan.client_ns, bed.plan.client_if, bed.qlog_spool, bed.pcap_filter)
        cap.start()
    point = bed.link.delivery_point() if cell.page.bulk_ms else None
    counter = cross0 = None
    watches = bed.ecn_watches() if cell.conditions.ecn else []  # who negotiated ECN (link.ecn)
    try:
        for w in watches:
            w.start()
        if point:  # what the link delivers, sampled across the bulk download
            counter = DeliveryCounter(*point, sample_s=bulk.sample_s(cell.page)).start()
        before = bed.link.snapshot()  # the trial's counters start here (the worker starts any trace over)
        cross0 = bed.cross.counter() if bed.cross is not None else None  # the competing flows' bytes, sampled
        remote0 = bed.remote_cpu()  # two machines: Caddy's CPU from the server, before and after
        sampler = Sampler(fixed_sources({bed.server.meta_key: bed.server.proc.pid if bed.server.proc else None,
                                         "linkem": bed.link.pid()}),
                          settings.cpu_interval_s, keep_series="cpu" in settings.kinds, grows=False,
                          machine=True, watch={"browser worker": bed.worker.proc.pid if bed.worker and bed.worker.proc
                                               else None}).start()
        first = sampler.mark()
        started = utc_now()
        t0, t0_unix = time.monotonic(), time.time()
        answer, uri = bed.load(cell.proto, page, timeout, cap.folder if cap else None,
                               await_s=await_s, gate=gate, visit=cell.page.visit, browser=cell.browser,
                               settle_s=bulk.settle_s(cell.page, protocols.get(cell.proto).transport,
                                                      cell.conditions.rtt_ms),
                               # a replayed page's objects, whose fetches do not hold the load event
                               expect=tuple(f"{h}{u}" for h, u, _ in cell.page.object_specs())
                               if cell.page.replay and not cell.page.archived else ())
        wall = time.monotonic() - t0
        t1_unix = time.time()
        last = sampler.stop()
        delivered = counter.stop() if counter else None
        remote1 = bed.remote_cpu()
        tcp_ecn = {w.side: w.stop() for w in watches}
    except BaseException:
        for w in watches:
            w.abort()
        if cap:
            cap.abort()
        if counter:
            counter.stop()
        if cross0:
            cross0.stop()
        raise
    artifacts = cap.stop() if cap else []
    broken = bed.broken()
    if broken and not bed.link.died_reason():  # a dead server or worker: the trial says nothing of the link
        raise TestbedBroken(broken)
    if answer.get("strays_left"):
        raise TestbedBroken(f"processes {answer['strays_left']} of the trial would not die")
    link_stats = with_cross(link_delta(before, bed.link.snapshot()), bed.cross, cross0.stop() if cross0 else None,
                            answer)
    if watches:
        link_stats = {**(link_stats or {}), "endpoints_ecn": endpoints_ecn(bed, cell, tcp_ecn, artifacts)}
    return Measured(answer=answer, uri=uri, started_utc=started, t0=t0, t0_unix=t0_unix, t1_unix=t1_unix, wall_s=wall,
                    link_stats=link_stats,
                    dead=bed.link.died_reason(), sampler=sampler,
                    cpu0={**first[1], **remote0}, cpu1={**last[1], **remote1}, delivered=delivered,
                    delivery_dev=point[1] if point else None, artifacts=artifacts)


def endpoints_ecn(bed: Testbed, cell: Cell, tcp: dict, artifacts: list) -> dict:
    """A trial's ECN from its endpoints (link.ecn): TCP's from the kernel on both sides, QUIC's from
    the server's and the browser's own logs where the trial captured them, each read by its seam."""
    from .link import ecn
    qlogs = [a.path for a in artifacts if a.kind == "qlog"]
    browser_seam = browsers.get(cell.browser or bed.browser_name)
    netlog = next((a.path for a in artifacts if a.kind == "netlog" and a.path.name == browser_seam.netlog_file), None)
    quic = protocols.get(cell.proto).transport == "QUIC"

    def read(what, *args):
        try:
            side = what(*args)
        except (OSError, ValueError) as e:
            return ecn.QuicSide(source=None, why=f"its log could not be read: {e}")
        return side if side.connections or side.source is None else None

    browser = read(browser_seam.quic_ecn, str(netlog)) if netlog else None
    server = read(bed.server.quic_ecn, qlogs) if qlogs else None
    if quic:  # a QUIC trial says why a side has no figure
        browser = browser or ecn.QuicSide(source=None, why=ecn.NO_QUIC_LOG)
        server = server or ecn.QuicSide(source=None, why=ecn.NO_QUIC_LOG)
    else:  # a TCP trial has QUIC figures only where its log found QUIC connections
        browser, server = (s if s is not None and s.source is not None else None for s in (browser, server))
    return ecn.endpoints(tcp.get("browser"), tcp.get("server"), browser, server)


def _evidence(bed: Testbed, cell: Cell, m: Measured, extra: dict | None) -> Evidence:
    """A measured load's evidence: the server's log read for the trial's own entries and for others'
    that overlapped it, the CPU per role over the browser's own window (the navigation to the end of
    its workload, not its start-up) and whether a CPU bound the load."""
    answer, uri, page = m.answer, m.uri, cell.page.html_name
    nav_t0 = answer.get("nav_t0")
    nav_s = ((answer.get("cpu") or {}).get("sampler") or {}).get("window_s")
    cpu = cpu_by_role(answer.get("cpu"), m.cpu0, m.cpu1, m.link_stats,
                      m.sampler.info(nav_t0, nav_t0 + nav_s if nav_t0 and nav_s else None))
    own = 1 + cell.page.fetched + (1 if cell.page.bulk_ms else 0)
    boundary = (answer.get("first_visit") or {}).get("boundary_unix")  # a repeat visit's first load ended before
    # a repeat visit: its first load's entries too (all of them), then the repeat's (a kept cache: the page's alone)
    expect = own + ({"repeat": own, "repeat-warm": 1}.get(cell.page.visit, 0) if boundary else 0)
    nav_unix = m.t0_unix + (nav_t0 - m.t0) if isinstance(nav_t0, (int, float)) and nav_t0 >= m.t0 else m.t0_unix
    wait_s = 2.0 if answer.get("nav") else 0.2
    if cell.page.archived or cell.page.url:  # its hosts' requests since the trial began (no Referer to go by)
        hosts = page_hosts(bed, cell.page)
        expect = 1 + sum(1 for r in answer.get("resources") or []
                         if url_host(r.get("name")) in hosts and (r.get("transferSize") or 0) > 0)
        logged = bed.server.access_entries(uri, wait_s=wait_s, expect=expect,
                                           own=lambda found: replayed_entries(found, hosts, m.t0_unix))
        entries = replayed_entries(logged, hosts, m.t0_unix)
        foreign = [e for e in overlapping(logged, uri, nav_unix, m.t1_unix) if e.get("host") not in hosts]
    else:
        logged = bed.server.access_entries(uri, wait_s=wait_s, expect=expect)
        if boundary:  # the first load's entries are not the trial's
            logged = [e for e in logged if not isinstance(e.get("end_unix_s"), (int, float))
                      or e["end_unix_s"] >= boundary]
        entries = own_entries(logged, uri)
        # others' traffic counts from the navigation on: during the browser's start-up the link may still carry
        # the previous trial's last request (its /favicon.ico, asked after its load: at 200 ms of RTT it
        # reached the server 40 ms into the next trial's start-up, which no figure of this trial covers)
        foreign = overlapping(logged, uri, nav_unix, m.t1_unix)
    limit = cpu_bound(cpu)
    held = budget_bound(answer.get("cpu_group"), answer.get("cpu_loop"))
    if held is not None and held >= BOUND_SHARE:  # bound by its CPU budget: the experiment, not a refusal
        limit = ("budget", round(held, 3))
    url = bed.url(page) + (uri[uri.index("?"):] if not (cell.page.archived or cell.page.url) else "")
    return Evidence(url=url, started_utc=m.started_utc, wall_s=m.wall_s, answer=answer, server_entries=entries,
                    foreign=foreign, link_stats=m.link_stats, link_dead=m.dead, delivered=m.delivered,
                    delivery_dev=m.delivery_dev, stalled=m.sampler.stall_problem(), traces=bed.link.traces,
                    extra={**(extra or {}), **_gate_fields(answer.get("gate")),
                           "prelaunched": bool(answer.get("prelaunched")),
                           "trace_phase_ms": trace_phase_ms(m.link_stats, nav_t0),
                           "cc": bed.cc_in_use(),
                           "server": bed.server.name,
                           "discovery": bed.discovery,
                           "cpu_json": json.dumps(cpu) if cpu else None,
                           "cpus": cpu_list(own_cpus()),
                           "cpu_bound": limit[0] if limit else None,
                           "cpu_bound_share": limit[1] if limit else None})


def _gate_fields(gate: dict | None) -> dict:
    """The idle gate's figures as the trial's fields (none when the trial ran without a gate)."""
    return {k: gate.get(k) for k in ("busy_pct", "load1", "idle_wait_s")} if gate else {}


def apply_and_verify(bed: Testbed, store: Store, campaign_id: int, cond, verify_mode: str = "stop",
                     on_verify: Callable[[dict], None] | None = None) -> dict:
    """Apply conditions (read back from the kernel), then measure the live link unless told not to.
    The figures are stored with the campaign; a link out of tolerance stops the run when verify_mode is 'stop'."""
    from .link.verify import verify
    check = bed.set_conditions(cond)
    if verify_mode != "off":
        report = verify(bed.plan, cond, **bed.verify_args())
        check = {**check, "verify": report}
        if on_verify:
            on_verify(report)
    try:
        cross = bed.start_cross(cond)  # after the check, which they would load; steady before the first trial
    except LinkError as e:
        check = {**check, "cross": {"error": str(e)}}
        store.add_link_check(campaign_id, cond.label, utc_now(), check)
        raise
    if cross:
        check = {**check, "cross": cross}
    store.add_link_check(campaign_id, cond.label, utc_now(), check)
    if verify_mode == "stop" and not check["verify"]["ok"]:
        raise LinkError(f"the link is out of tolerance for {cond.label}: {', '.join(check['verify']['failed'])} "
                        "(figures stored with the campaign; --verify warn runs anyway)")
    return check
