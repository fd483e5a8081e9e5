"""One trial on a testbed, whatever its page's kind: ready, load (with what the link, the server's and
the browser's CPU did meanwhile), the evidence (the server's log read for the trial's own entries),
the judgement (trial.evidence.make_trial), the store; and applying conditions with their verification.
What differs between kinds of page is asked of the page's kind (pages.PageKind)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Callable

from .. import browsers, protocols
from ..conditions import Cell, transfer_seconds
from ..capture import TrialCapture, trial_folder
from ..cpu import Sampler, cpu_by_role, fixed_sources
from ..cpu import BOUND_SHARE, bound as cpu_bound
from ..cpu import cpu_list, own_cpus
from ..device.budget import budget_bound
from ..device.visitor import Visitor
from ..errors import LinkError, ServerError, TestbedBroken
from ..link import ecn
from ..link.counters import DeliveryCounter
from ..metadata import utc_now
from ..pages import url_host
from ..servers import overlapping, own_entries
from ..records import Trial, WorkerAnswer
from ..store import Store
from ..testbed import Testbed, place_origins
from .evidence import Evidence, make_trial


def page_timeout_s(size_bytes: int, rate_bps: int | None, rtt_ms: float = 0.0, objects: int = 0) -> float:
    """Generous page-load timeout: 3x the ideal transfer time plus 20 s (unshaped: as if 100 Mbit/s),
    plus 3x the round trips of a many-object page over HTTP/1.1's six connections (and four more
    for the handshakes)."""
    ideal = transfer_seconds(size_bytes, rate_bps if rate_bps else 100 * 10**6)
    round_trips = 3.0 * (objects / 6 + 4) * rtt_ms / 1000.0 if objects else 0.0
    return 3.0 * ideal + 20.0 + round_trips


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
        if a.get("paths"):  # each far origin's packets on its own path (link.origins)
            was = {p["addr"]: p["packets"] for p in b.get("paths") or []}
            d["paths"] = {p["addr"]: p["packets"] - was.get(p["addr"], 0) for p in a["paths"]}
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
    from ..link.cross import window_mbps
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
    placed = place_origins(bed, cell)
    m = _measure(bed, cell, timeout_s, gate, (campaign_id, seq))
    if next_cell is not None and not bed.capture.files and next_cell.conditions == cell.conditions and not m.dead:
        # from here on, nothing of this trial is measured
        bed.prepare(next_cell.proto, next_cell.page, next_cell.browser)
    ev = dataclasses.replace(_evidence(bed, cell, m, extra), origins=placed, jitter_legs=bed.link.jitter_legs)
    trial = make_trial(campaign_id, seq, run_index, cell, ev, bed.sites.root)
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
    may still be loading; the cell's server serves (testbeds of several switch between trials), the
    routes carry the cell's congestion control (read back) and the server thinks as the cell asks."""
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
    if bed.setup.think:  # the servers' wait before each first byte (--think, pages.timing)
        bed.server.set_think(cell.conditions.think)
    try:  # the browser's CPU budget, and a named device's screen and memory (plt_bench.device)
        visitor = Visitor.of_cell(cell, bed.calibrations)
    except LookupError as e:
        raise TestbedBroken(str(e)) from None
    if bed.visitor != visitor:
        bed.set_visitor(visitor)


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
    page, kind = cell.page, cell.page.page_kind
    timeout = timeout_s or page_timeout_s(cell.size_bytes, cell.conditions.rate_down_bps, cell.conditions.rtt_ms,
                                          cell.page.objects)
    if timeout_s is None and bed.visitor.quota is not None:  # a CPU budget slows a whole load by up to its factor
        timeout *= bed.visitor.quota.factor  # (measured: 20 MB over h3 at 200 Mbit/s took 21.6 s at 0.17 of a core)
    if timeout_s is None and cell.conditions.cross is not None:  # N competing flows leave the page 1/(N+1) of the rate
        timeout *= max(cell.conditions.cross_flows, 1) + 1  # a web background (0 flows) counts as one  # (measured: 10 MB beside 4 flows at 20 Mbit/s took 18-25 s)
    await_s = kind.await_s(page, cell.conditions)
    settings = bed.capture
    cap = None
    if settings.files:
        cap = TrialCapture(settings.kinds, trial_folder(settings.root, *folder, cell.proto, page.html_name),
                           bed.plan.client_ns, bed.plan.client_if, bed.qlogs, bed.pcap_filter)
        cap.start()
    point = bed.link.delivery_point() if kind.counts_delivery else None
    counter = cross0 = None
    watches = ecn.watches(bed.plan) if cell.conditions.ecn else []  # who negotiated ECN (link.ecn)
    try:
        for w in watches:
            w.start()
        if point:  # what the link delivers, sampled across the bulk download
            counter = DeliveryCounter(*point, sample_s=kind.sample_s(page)).start()
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
                               await_s=await_s, gate=gate, browser=cell.browser,
                               settle_s=kind.settle_s(page, protocols.get(cell.proto).transport, cell.conditions.rtt_ms),
                               # objects whose fetches do not hold the load event (a stand-in page's)
                               expect=kind.expect(page))
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
    from ..link import ecn
    qlogs = [a.path for a in artifacts if a.kind == "qlog"]
    browser_seam = browsers.get(cell.browser or bed.setup.browser_name)
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
    answer, uri, page = m.answer, m.uri, cell.page
    kind = page.page_kind
    nav_t0 = answer.get("nav_t0")
    nav_s = ((answer.get("cpu") or {}).get("sampler") or {}).get("window_s")
    cpu = cpu_by_role(answer.get("cpu"), m.cpu0, m.cpu1, m.link_stats,
                      m.sampler.info(nav_t0, nav_t0 + nav_s if nav_t0 and nav_s else None))
    own = kind.own_requests(page)
    boundary = (answer.get("first_visit") or {}).get("boundary_unix")  # a repeat visit's first load ended before
    # a repeat visit: its first load's entries too (all of them), then the repeat's (a kept cache: the page's alone)
    expect = own + ({"repeat": own, "repeat-warm": 1}.get(cell.page.visit, 0) if boundary else 0)
    nav_unix = m.t0_unix + (nav_t0 - m.t0) if isinstance(nav_t0, (int, float)) and nav_t0 >= m.t0 else m.t0_unix
    wait_s = 2.0 if answer.get("nav") else 0.2
    if kind.served_as_recorded:  # its hosts' requests since the trial began, or its repeat's first load ended
        hosts = kind.recorded_hosts(page, bed.sites.root, {h for x in bed.server.statics for h, _ in x.origins})
        since = boundary if isinstance(boundary, (int, float)) else m.t0_unix  # (no Referer to go by)
        expect = 1 + sum(1 for r in answer.get("resources") or []
                         if url_host(r.get("name")) in hosts and (r.get("transferSize") or 0) > 0)
        logged = bed.server.access_entries(uri, wait_s=wait_s, expect=expect,
                                           own=lambda found: replayed_entries(found, hosts, since))
        entries = replayed_entries(logged, hosts, since)
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
    url = bed.url(page) + (uri[uri.index("?"):] if not kind.served_as_recorded else "")
    return Evidence(url=url, started_utc=m.started_utc, wall_s=m.wall_s, answer=answer, server_entries=entries,
                    foreign=foreign, link_stats=m.link_stats, link_dead=m.dead, delivered=m.delivered,
                    delivery_dev=m.delivery_dev, stalled=m.sampler.stall_problem(), traces=bed.link.traces,
                    extra={**(extra or {}), **_gate_fields(answer.get("gate")),
                           "prelaunched": bool(answer.get("prelaunched")),
                           "browser_start": answer.get("browser_start") or "fresh",
                           "browser_loads": answer.get("browser_loads") or 0,
                           "trace_phase_ms": trace_phase_ms(m.link_stats, nav_t0),
                           "cc": bed.cc_in_use(),
                           "server": bed.server.name,
                           "discovery": bed.setup.discovery,
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
    from ..link.verify import verify
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
