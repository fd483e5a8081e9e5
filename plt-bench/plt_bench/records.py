"""The typed records of a measurement, documented field by field (units in the names).

Trial is one page load as the store keeps it: the SQL table `trials` is made from it (columns(),
with each field's documentation as the column's comment), and the store gives back Trial records,
never bare rows. A trial embeds its Conditions: their fields become columns of their own (the
profile name as conditions_name) beside the `conditions` label, which is for people only: cells
are found by the fields.

Campaign and LinkCheck are the store's other rows. The shapes of what other processes hand over
are here too: WorkerAnswer (the browser worker's answer, one JSON line, checked by check_answer)
and CpuFigures (CPU seconds per role); linkem's are in plt_bench.link.stats.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import TypedDict

from .conditions import Budget, Conditions


def doc(text: str, default=dataclasses.MISSING) -> dataclasses.Field:
    """A field documented for people and for the SQL schema."""
    return dataclasses.field(default=default, metadata={"doc": text})


# -- what other processes hand over -------------------------------------------------------------------
class RoleCpu(TypedDict, total=False):
    user_s: float
    system_s: float
    processes: int          # processes of that role seen during the trial
    self_reported_s: float  # linkem: its own count of CPU seconds, for comparison


class CpuFigures(TypedDict, total=False):
    """A trial's CPU (trials.cpu_json): seconds per role from the navigation's start; the browser's
    start-up apart; the samplers' own cost."""
    roles: dict[str, RoleCpu]        # browser, renderer, network, gpu, utility, ..., caddy, linkem
    launch: dict[str, RoleCpu] | None  # the browser's start-up, before the navigation
    sampler: dict                    # the worker's sampler: interval_s, samples, own_cpu_s, window_s
    server_sampler: dict             # the runner's sampler of Caddy and linkem: the same figures


class WorkerAnswer(TypedDict, total=False):
    """The browser worker's answer to one load (browsers.worker; one JSON line)."""
    browser: str                # which browser loaded it (plt_bench.browsers: chromium | firefox)
    nav: dict | None            # the PerformanceNavigationTiming entry, or None
    resources: list[dict] | None  # the PerformanceResourceTiming entries (browsers.worker.RESOURCE_FIELDS)
    final_url: str | None
    error: str | None           # why the load failed, as the worker saw it
    error_code: str | None      # e.g. net::ERR_QUIC_PROTOCOL_ERROR
    launch_s: float | None      # Chromium's start-up (both attempts, where there were two)
    launch_attempts: int        # 2 where chromedriver could not create the first session
    har: dict                   # {"entries": n} or {"error": why}, when the trial captures a HAR
    load_s: float | None        # driver.get until the load event
    quit_s: float | None
    nav_t0: float               # the navigation's start on the monotonic clock
    workload: BulkFigures       # what the page's script measured after the load, when awaited
    paint: PaintFigures         # the page's paint metrics, read after a load (browsers.worker.PAINT_JS)
    first_visit: dict           # a repeat visit's first load: {"nav", "load_s", "boundary_unix"} or {"error"}
    visit_evidence: dict        # the repeat's connections from the browser's log: {"quic_zero_rtt": [...], ...}
    cpu: CpuFigures | None      # the browser's roles (and its sampler)
    cpu_series: list[dict]      # [{"t_s", "role", "user_s", "system_s"}] when asked for
    strays_killed: int          # how many processes of the trial were killed at its end (the browser, unless quit)
    strays_left: list[int]      # ... that would not die (the testbed is then broken)
    prelaunched: bool           # the browser was started before the request, during the previous trial's
    #                             bookkeeping (browsers.worker: prepare); launch_s is that start's
    browser_start: str          # kept (a kept browser's fresh context: --browser-start) | fresh
    browser_loads: int          # a kept browser's trials before this one (0: started for it)
    kept_started: bool          # the kept browser was started for this trial (its launch in launch_s)
    context_s: float            # a kept browser: the trial's context opened in (its renderer's start)
    context_error: str          # a kept browser could not end the trial's context: it was ended itself
    prepare_error: str          # why the prepare request before this trial failed (it started its own)
    gate: dict                  # the idle gate between the launch and the navigation (cpu.wait_idle), when asked
    visual: dict                # the load's visual progress (plt_bench.visual.metrics) or {"error"}, when asked
    resources_waited: dict      # objects whose entries were waited for (expect_resources): {"missing", "waited_ms"}
    cpu_loop: dict              # under a CPU budget: a fixed JavaScript loop's times after the load
    #                             (browsers.worker.CPU_LOOP_JS): {"times_ms": [...]} or {"error"}
    cpu_group: dict             # under a CPU budget: its quota and the group's counters over the trial
    #                             (Testbed.load: usage_ms, periods, throttled_periods, throttled_ms)
    benchmark: dict             # a device's calibration: Lighthouse's BenchmarkIndex runs after the load
    #                             (device.calibrate.BENCHMARK_JS): {"runs": [...]} or {"error"}
    device: dict                # the device in use: its calibration (device.calibrate.Calibration.as_dict)


class PaintFigures(TypedDict, total=False):
    """What the paint script hands over (browsers.worker.PAINT_JS); times in ms from the navigation's start."""
    fp_ms: float | None          # first-paint
    fcp_ms: float | None         # first-contentful-paint
    lcp: dict | None             # the last largest-contentful-paint record: start_ms (its time: render
    #                              time, else load time), render_ms, load_ms, size_px, url, element
    lcp_candidates: int          # records the observer saw
    visibility: str              # document.visibilityState (a hidden page reports no LCP)
    viewport: list               # the window the page was laid out in: [innerWidth, innerHeight (CSS px),
    #                              devicePixelRatio, navigator.userAgent]
    waited_ms: float             # how long the script waited for the page to settle after the load
    quiet_ms: float              # the quiet window it waited for (browsers.worker.paint_quiet_ms)
    settled: bool                # the window came (False: PAINT_WAIT_MS ran out first)
    error: str | None


class BulkFigures(TypedDict, total=False):
    """What a bulk page's script hands over (pages._BULK_JS); times in ms of the page's clock."""
    duration_ms: int
    interval_ms: int
    bins: list[int]              # body bytes read in each interval from the response's headers on
    bytes: int                   # their sum
    status: int | None           # the response's HTTP status
    request_ms: float            # when the fetch was made
    start_ms: float | None       # when its headers arrived: the window's start
    end_ms: float | None         # when the reading stopped (the duration, then the abort)
    ended_ms: float | None       # when the body ended, from start_ms, if it ended before the duration
    error: str | None
    time_origin_ms: float        # performance.timeOrigin: the page's clock on the wall clock (Unix ms)


class BulkSeries(TypedDict):
    """A bulk trial's series (trials.series_json): bytes per interval over the same window, as the
    browser read them and as the link delivered them (link.counters; None where it cannot be read)."""
    start_unix_s: float          # the window's start: the bulk response's headers, on the wall clock
    interval_s: float
    browser_bytes: list[int]
    link_bytes: list[float] | None  # linear between the counter's samples: they add up to its total
    link_device: str | None      # the device whose transmit counter was read
    link_samples: list[list[float]]  # [[s from start_unix_s, bytes since the first sample], ...]


class Campaign(TypedDict):
    """A campaign as the store gives it back (one row of `campaigns`)."""
    id: int
    name: str
    started_utc: str
    finished_utc: str | None
    status: str                 # running | finished | failed | interrupted
    grid: dict                  # its definition (campaign.Spec.as_dict: the seed and the grid)
    metadata: dict              # the machine, browser, server and link it ran on (metadata.KEY_FIELDS decide pooling)
    spec_hash: str | None       # the definition's hash: an unfinished campaign with the same one resumes


class LinkCheck(TypedDict):
    """Conditions applied, read back from the kernel and (unless verify is off) measured."""
    conditions: str
    checked_utc: str
    result: dict                # the read-back, and under "verify" the measured report


def format_link_check(report: dict) -> str:
    """A measured link (LinkCheck's result["verify"], link.verify.verify's report) as lines for people:
    every check with what it measured, expected and allowed."""
    lines = [f"link {report['conditions']}: {'ok' if report['ok'] else 'OUT OF TOLERANCE: ' + ', '.join(report['failed'])}"
             f" ({report['seconds']} s)"]
    for c in report["checks"]:
        mark = {True: "ok  ", False: "FAIL", None: "info"}[c["ok"]]
        m = "-" if c["measured"] is None else c["measured"]
        e = "-" if c["expected"] is None else c["expected"]
        lines.append(f"  {mark} {c['name']:<46} measured {m!s:>9} {c['unit']:<2} expected {e!s:>8} {c['unit']:<2} "
                     f"({c['tolerance']})")
    return "\n".join(lines)


def check_answer(answer) -> WorkerAnswer:
    """The worker's answer, refused (ValueError) if it has a key the shape does not know: the worker
    and the runner cannot drift apart silently."""
    if not isinstance(answer, dict):
        raise ValueError(f"the browser worker answered {type(answer).__name__}, not an object")
    unknown = sorted(set(answer) - _ANSWER_KEYS)
    if unknown:
        raise ValueError(f"the browser worker's answer has unknown key(s) {', '.join(unknown)}")
    return answer


# -- the trial -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Trial:
    """One page load, ok or failed, as stored (one row of `trials`)."""

    campaign_id: int = doc("the campaign it belongs to")
    seq: int = doc("order within the campaign, from 0: the order it ran in")
    run_index: int = doc("repetition of this cell, from 0")
    proto: str = doc("h3 | h2 | h1: the HTTP version asked for, or as-recorded: a recording's origins each over the "
                     "one it spoke (plt_bench.protocols; stores before schema 13 said quic and tcp)")
    size_bytes: int = doc("every body of the page: the HTML and all its objects")
    page: str = doc("what was loaded: 5KB (one HTML file), 200x5KB (an HTML page with 200 images of 5 KB), "
                    "bulk30s (a page that downloads for 30 s; bulk30s_100ms: counted per 100 ms) or "
                    "req100x1KB_c10 (a page that makes 100 requests of 1 KB, 10 at once)")
    conditions: Conditions = doc("the link during the trial (columns of their own)")
    status: str = doc("ok | failed")
    reason: str | None = doc("why it failed; NULL when ok")
    started_utc: str = doc("when the trial began, ISO 8601 UTC")
    finished_utc: str = doc("when it ended")
    wall_s: float = doc("the whole trial: browser start, load, quit")
    url: str = doc("the URL loaded, with the trial's own query")
    objects: int = doc("the page's embedded objects (images); 0 for a single-object page", 0)
    object_bytes: int = doc("each object's (or request's response's) size; 0 for a single-object or bulk page", 0)
    launch_s: float | None = doc("the browser's start-up", None)
    load_s: float | None = doc("from the navigation to the load event, as the driver saw it", None)
    quit_s: float | None = doc("the browser's end, every process of the trial gone: killed, or quit through chromedriver when Chromium has capture files to complete", None)
    plt_ms: float | None = doc("page-load time: loadEventEnd - startTime", None)
    dns_ms: float | None = doc("domainLookupEnd - domainLookupStart", None)
    connect_ms: float | None = doc("connectEnd - connectStart (QUIC: handshake included)", None)
    tls_ms: float | None = doc("connectEnd - secureConnectionStart", None)
    ttfb_ms: float | None = doc("responseStart - startTime", None)
    response_end_ms: float | None = doc("responseEnd - startTime", None)
    dcl_ms: float | None = doc("domContentLoadedEventEnd - startTime", None)
    fcp_ms: float | None = doc("first-contentful-paint: the first text or image painted, from startTime (NULL: none "
                               "reported, paint_reason says why; before schema 14: not read)", None)
    lcp_ms: float | None = doc("largest-contentful-paint: the last record of a buffered observer read once the page "
                               "settled (paint_wait_ms; before schema 23: 50 ms after the last record) (its render "
                               "time), from startTime; NULL: no candidate, paint_reason says why", None)
    lcp_element: str | None = doc("what the largest contentful paint was: img#hero (a multi-object page's first image), "
                                  "h1, p#size ...", None)
    lcp_url: str | None = doc("the largest contentful paint's image URL, or NULL for text", None)
    paint_reason: str | None = doc("why fcp_ms or lcp_ms is NULL on a loaded page (no candidate, the page hidden, "
                                   "the script failed), or that the page never settled; NULL when all is well", None)
    paint_wait_ms: float | None = doc("how long after the load the paint metrics waited for the page to settle (a "
                                      "quiet window of 500 ms and two RTTs: no new LCP record, no response ending, "
                                      "no long task; browsers.worker.PAINT_JS); NULL before schema 23", None)
    next_hop_protocol: str | None = doc("what carried the page, as the browser says: h3 | h2 | http/1.1", None)
    response_status: int | None = doc("HTTP status the browser saw", None)
    decoded_body_bytes: int | None = doc("the page's body as the browser decoded it", None)
    encoded_body_bytes: int | None = doc("the page's body as sent", None)
    transfer_bytes: int | None = doc("bytes over the network, headers included", None)
    server_proto: str | None = doc("what carried the page, as the server's log says (protocols.http_version): HTTP/3.0 | HTTP/2.0 | HTTP/1.1", None)
    server_status: int | None = doc("HTTP status Caddy logged", None)
    server_bytes: int | None = doc("body bytes Caddy logged", None)
    nav_json: str | None = doc("the full PerformanceNavigationTiming entry (JSON)", None)
    objects_ok: int | None = doc("objects (or requests) proven whole over the asked protocol by the browser and "
                                 "the server", None)
    connections: int | None = doc("connections that carried the trial's requests (client ports in Caddy's log)", None)
    origins: int = doc("the origins a multi-object page's objects come from (4o:60x5KB: 4); 1 for other pages", 1)
    connections_json: str | None = doc("connections per origin, {host: connections} from Caddy's log (JSON), or NULL",
                                       None)
    visit: str = doc("first (a fresh browser) | repeat (the same browser a moment after a first load, its "
                     "connections closed and its cache cleared) | repeat-warm (the same, its cache kept); "
                     "pages.VISITS", "first")
    first_plt_ms: float | None = doc("a repeat visit's first load's page-load time, in the same browser", None)
    resumed_connections: int | None = doc("connections of the (measured) load that resumed a TLS session, as Caddy's "
                                          "log says (request.tls.resumed), beside `connections`; NULL where its log "
                                          "says nothing", None)
    zero_rtt: str | None = doc("a repeat visit's QUIC 0-RTT, from the browser's own log (Chromium's net-log, "
                               "Firefox's HTTP log): succeeded | rejected | not attempted (every QUIC session; mixed: "
                               "'succeeded 3, not attempted 1'); NULL for a first visit and where no QUIC session "
                               "opened (h1, h2: Caddy's TLS, Go's, takes no early data over TCP)", None)
    cached_objects: int | None = doc("a repeat-warm visit's objects served from the browser's cache (no request), "
                                     "or NULL", None)
    visit_json: str | None = doc("a repeat visit's evidence (JSON): the browser's log's 0-RTT states (and Chromium's "
                                 "TLS resumptions) after the first load, the first load's own figures", None)
    resources_json: str | None = doc("the objects' PerformanceResourceTiming entries (JSON), or NULL", None)
    link_json: str | None = doc("the link's figures during this trial (JSON), or NULL: the emulator's counters per "
                                "direction (dirs; the discipline's under --aqm), the competing flows' (cross) and, "
                                "under --ecn, each endpoint's ECN (endpoints_ecn: link.ecn)", None)
    bulk_ms: int = doc("a bulk page's download time; 0 for other pages", 0)
    interval_ms: int = doc("a bulk page's counting interval; 0 for other pages", 0)
    bulk_bytes: int | None = doc("body bytes the bulk page's script read in bulk_ms", None)
    goodput_bps: float | None = doc("bulk_bytes x 8 / bulk_ms: the rate the browser read at", None)
    throughput_bps: float | None = doc("bytes the link delivered towards the client in the bulk window, x 8 / bulk_ms "
                                       "(the bottleneck's own counter: headers and retransmissions included); NULL "
                                       "where the link's counter cannot be read (on another machine)", None)
    series_json: str | None = doc("a bulk trial's bytes per interval, the browser's and the link's (BulkSeries; JSON)",
                                  None)
    requests: int = doc("a request page's requests after the load; 0 for other pages", 0)
    streams: int = doc("a request page's requests at once; 0 for other pages", 0)
    req_p50_ms: float | None = doc("a request page's median request latency (Resource Timing: responseEnd - "
                                   "startTime, over its requests)", None)
    req_p90_ms: float | None = doc("... its 90th percentile", None)
    req_p99_ms: float | None = doc("... its 99th percentile", None)
    attempt: int = doc("1, then 2, 3... for retries of a failed trial", 1)
    warmup: bool = doc("a warm-up trial: kept, left out of the statistics", False)
    busy_pct: float | None = doc("CPU busy (all cores) just before the navigation, as the idle gate saw it (since "
                                 "schema 12 after the browser's launch, before: before the launch)", None)
    load1: float | None = doc("1-minute load average just before the navigation", None)
    idle_wait_s: float | None = doc("time the idle gate waited before the navigation", None)
    cpu_json: str | None = doc("CPU seconds per role during the trial (CpuFigures; JSON)", None)
    cpu_bound: str | None = doc("the role that limited the trial by CPU (network, renderer, caddy, linkem, ... or "
                                "machine): saturated (a role >= 90% of one core, the machine >= 95% of all) "
                                "for at least half of the load (plt_bench.cpu.bound); budget: its CPU budget's "
                                "quota held the browser back in at least half of the trial's periods (the "
                                "experiment; device.budget.budget_bound); None: not CPU-bound", None)
    cpu_bound_share: float | None = doc("the share of the load that role was saturated (0-1)", None)
    host: str | None = doc("the machine and testbed that measured it (hostname/pbN) in a campaign run on a cluster "
                           "(plt_bench.cluster); None: the campaign's one machine", None)
    cpus: str | None = doc("the CPUs the measuring host's processes for the trial (the browser; Caddy and linkem "
                           "too on one machine) could run on, in the kernel's list form (0-3,6): every CPU, or a "
                           "pinned cluster worker's own set; None for trials before schema 11", None)
    prelaunched: bool | None = doc("the browser (fresh, its own profile) was started while the previous trial was "
                                   "judged and stored, so launch_s is not inside wall_s; None before schema 12", None)
    browser_start: str | None = doc("kept: the trial ran in a fresh context of its own (Chromium's browser context: "
                                    "its cache, cookies, connections, TLS sessions and alternative services new) of "
                                    "a browser kept across the trials of the same flags (--browser-start kept); "
                                    "fresh: in a browser started for it, with a new profile. Stores before schema "
                                    "27: fresh", None)
    browser_loads: int | None = doc("a kept browser's loads before this trial (0: it was started for it); 0 for a "
                                    "fresh browser", None)
    cc: str | None = doc("the TCP congestion control of the trial's connections (h1, h2): on the testbed's routes, "
                         "or the server's default on two machines; h3 runs quic-go's own CUBIC whatever it says. "
                         "Stores before schema 13: the campaign's", None)
    trace_phase_ms: float | None = doc("where the navigation began in the link's trace: ms after the trial's mark "
                                       "started the trace over; None without a trace (and before schema 15)", None)
    unrecorded: int | None = doc("a replayed recording's requests that it did not hold (answered 404 at once; "
                                 "Chromium's own /favicon.ico aside); NULL for other pages (and before schema 16)",
                                 None)
    replay_json: str | None = doc("a replayed recording's evidence (JSON): responses served, proven by both ends, "
                                  "matched by query, unseen by the top document, the unrecorded URLs; as-recorded: "
                                  "the responses served per protocol (protocols)", None)
    first_visual_change_ms: float | None = doc("the first frame that showed anything of the page, from startTime "
                                               "(capture kind visual: plt_bench.visual; NULL without it and before "
                                               "schema 17)", None)
    speed_index_ms: float | None = doc("SpeedIndex: the integral of (1 - visual progress) up to visually complete, in ms "
                                       "(capture kind visual)", None)
    visually_complete_ms: float | None = doc("the first frame from which the page looked as it ends, from startTime "
                                             "(capture kind visual)", None)
    browser: str | None = doc("the browser that loaded it: chromium | firefox (plt_bench.browsers); stores before "
                              "schema 18 read as chromium, the only one then", None)
    server: str | None = doc("the server that served it: caddy | quinn (plt_bench.servers); stores before schema 20 "
                             "read as caddy, the only one then", None)
    server_cc: str | None = doc("the congestion controller the page's connection ran, as the server's own log says "
                                "(quinnserve: quinn's for h3, the kernel's for h2 and h1); None where the log does not "
                                "say (Caddy: its h3 runs quic-go's own CUBIC, its TCP the routes' cc)", None)
    discovery: str | None = doc("how the browser found the origins and HTTP/3 (plt_bench.dns): forced | alt-svc | "
                                "https-rr; stores before schema 22 read as forced, the only way then", None)
    protocol_mix_json: str | None = doc("a discovery trial's h3 cell: what carried each request, as both ends agree: "
                                        "{\"page\": next hop of the page, \"per_origin\": {host: {protocol: requests}}, "
                                        "\"first_h3_ms\": the first request over h3, from startTime (null: none)}; "
                                        "None for a forced trial, whose protocol is the one asked", None)
    cpu_budget: float | None = doc("the browser's CPU budget (--cpu; plt_bench.device): the fraction of a core on each "
                                   "of its cpu_cores, every browser process and its WebDriver inside it; None: no "
                                   "budget (the machine's whole CPU), as for every trial before schema 24", None)
    cpu_cores: int | None = doc("the CPUs the budgeted browser could run on (--cores); None: no budget", None)
    cpu_quota_us: int | None = doc("the budget's CFS quota per period as applied (None with a budget: a full core "
                                   "on each CPU, no quota)", None)
    cpu_period_us: int | None = doc("the budget's CFS period (device.budget: the shortest whose quota the kernel "
                                    "takes, 1 ms / budget)", None)
    cpu_slowdown: float | None = doc("a fixed JavaScript loop's wall time over the browser group's CPU time while it "
                                     "ran, after the load (browsers.worker.CPU_LOOP_JS): 1 at a full core the machine "
                                     "leaves alone, the budget's factor (about 4 at 0.25) when the budget binds", None)
    cpu_group_ms: float | None = doc("CPU time the browser's group used over the trial, its launch and the loop "
                                     "included (the group's own counter)", None)
    cpu_throttled_periods: int | None = doc("periods of the trial in which the group ran out of its quota", None)
    cpu_throttled_ms: float | None = doc("time the group waited for its next period over the trial", None)
    udp_rcvbuf_errors: int | None = doc("UDP datagrams the client's kernel dropped for a full receive buffer during "
                                        "the trial (RcvbufErrors of /proc/net/snmp in the client's namespace): a "
                                        "quota's freezes can drop bursts a steadily slower CPU would not", None)
    device: str | None = doc("the visitor's device (--device; device.profiles): its CPU class calibrated into "
                             "cpu_budget on this host, its screen emulated and its RAM the browser's memory cap; None: "
                             "none, as for every trial before schema 25", None)
    device_host_index: float | None = doc("the device's calibration: this host's Lighthouse BenchmarkIndex at one full "
                                          "core (device.calibrate), which cpu_budget divides down to the device's", None)
    device_index: float | None = doc("the benchmark's index under the calibrated budget (the device's class, within "
                                     "device.calibrate.CALIBRATION_TOLERANCE)", None)
    viewport: str | None = doc("the window the page was laid out in, as its own script saw it: "
                               "WIDTHxHEIGHT@RATIO (CSS pixels, devicePixelRatio); a device's screen (--device) "
                               "or the fixed 1280x800 window; None before schema 25", None)
    cross_mbps: float | None = doc("what the competing flows (--cross) carried during the load, Mbit/s at their "
                                   "receiver's interface; None: no competing flows", None)
    origin_rtts_json: str | None = doc("each origin's distance in this trial, proven (--origin-rtt; link.origins.as_json): "
                                       "{host: {path_ms, expected_ms, measured_ms (the shortest of the browser's "
                                       "handshakes to it), connections, below_ms, above_ms (the tolerance), packets "
                                       "(linkem's on its own path), ok}}; None: every origin at the link's RTT", None)
    think_json: str | None = doc("the trial's think time, proven (--think; pages.timing.proof): {think, responses, "
                                 "held (those that passed a think stage), asked_ms and waited_ms ({min, median, max}), "
                                 "short_ms and over_ms (the worst against asked), tolerance, ok}; None: no think asked",
                                 None)
    trial_id: int | None = dataclasses.field(default=None, compare=False,
                                             metadata={"doc": "the row's id, once stored", "column": False})
    damaged: tuple[str, ...] = dataclasses.field(default=(), compare=False, metadata={
        "doc": "the columns of the stored row that could not be read as their type (a number that is not one, "
               "JSON that does not parse or is not its shape): read as NULL (from_row), and said by the report",
        "column": False})

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def budget(self) -> Budget:
        """The CPU budget as the budget axis holds it (conditions.Budget, named by its label): the device's
        for a device's (its calibrated share is its own), full without one."""
        return Budget(device=self.device) if self.device else Budget(self.cpu_budget)

    @property
    def counts(self) -> bool:
        """In the statistics: ok, with a page-load time, and not a warm-up (the one rule, used by
        plt_bench.analysis.stats and the summary alike)."""
        return self.status == "ok" and not self.warmup and self.plt_ms is not None

    @property
    def label(self) -> str:
        return self.conditions.label

    @property
    def body_bytes(self) -> int:
        """Every body byte the browser read in the trial: the page's (size_bytes) and a bulk
        page's download after it (bulk_bytes)."""
        return self.size_bytes + (self.bulk_bytes or 0)

    @property
    def measures(self) -> str:
        """page | bulk | requests (pages.Page.measures): what the trial measures."""
        return "bulk" if self.bulk_ms else "requests" if self.requests else "page"

    @property
    def series(self) -> "BulkSeries | dict":
        return json.loads(self.series_json) if self.series_json else {}

    @property
    def resources(self) -> list[dict]:
        return json.loads(self.resources_json) if self.resources_json else []

    @property
    def connections_per_origin(self) -> dict[str, int]:
        return json.loads(self.connections_json) if self.connections_json else {}

    @property
    def cpu(self) -> CpuFigures:
        return json.loads(self.cpu_json) if self.cpu_json else {}

    @property
    def link(self) -> dict:
        return json.loads(self.link_json) if self.link_json else {}

    @property
    def nav(self) -> dict:
        return json.loads(self.nav_json) if self.nav_json else {}

    def row(self) -> dict:
        """The trial as a flat row: column name -> value (for the store and CSV)."""
        out = {}
        for f in dataclasses.fields(self):
            if f.metadata.get("column") is False:
                continue
            v = getattr(self, f.name)
            if f.name == "conditions":
                out["conditions"] = v.label
                out.update({_cond_column(k): x for k, x in v.as_dict().items()})
            else:
                out[f.name] = v
        return out

    @classmethod
    def from_row(cls, row: dict, checks: "dict[str, typing.Callable] | None" = None,
                 readers: "dict[str, typing.Callable] | None" = None) -> "Trial":
        """A stored row back as a record (types restored: INTEGER 0/1 to bool). A column whose value
        is not of its type, or that its check (checks, by column; VALUE_CHECKS by default) says does
        not mean what the column says (a hand-edited or damaged store: SQLite keeps what it is given),
        is read as NULL and named in `damaged`, so that every reader reads every row. readers: a
        conditions column's text read back into the seam's record (the store's: aqm by link.aqm), a
        ValueError where it is not one (read as NULL and named, as a failed check is)."""
        checks = VALUE_CHECKS if checks is None else checks
        readers = readers or {}
        kw: dict = {}
        damaged = []
        hints, ch = _HINTS
        for f in dataclasses.fields(cls):
            if f.name == "conditions":
                cond = {}
                for cf in dataclasses.fields(Conditions):
                    value = row.get(_cond_column(cf.name))
                    if value is not None and cf.name in readers:  # the seam's record, or damaged where it is not one
                        try:
                            cond[cf.name] = readers[cf.name](value)
                            continue
                        except ValueError:
                            value = None
                            damaged.append(_cond_column(cf.name))
                    elif not _value_fits(cf.name, value, checks):
                        damaged.append(_cond_column(cf.name))
                        value = None
                    cond[cf.name] = _restore(ch[cf.name], value)
                kw["conditions"] = Conditions(**cond)
            elif f.name in row:
                value = row[f.name]
                if not _fits(f.name, hints[f.name], value) or not _value_fits(f.name, value, checks):
                    damaged.append(f.name)
                    value = None
                kw[f.name] = _restore(hints[f.name], value)
        if "id" in row:
            kw["trial_id"] = row["id"]
        return cls(**kw, damaged=tuple(damaged))


JSON_SHAPES = {"resources_json": list}  # the JSON columns' top level: an object unless named here


def _fits(name: str, hint, value) -> bool:
    """A stored value is of its field's type (pure): a number where a number is, JSON of its shape in a
    *_json column. Required fields are not judged here (their NOT NULL holds them)."""
    if value is None:
        return True
    base = _base(hint)
    if base in (int, float) and isinstance(value, (str, bytes)):
        return hint is base  # a required field is left as it is; an optional one reads as NULL
    if name.endswith("_json") and base is str:
        try:
            return isinstance(json.loads(value), JSON_SHAPES.get(name, dict))
        except (TypeError, ValueError, RecursionError):
            return False
    return True


def _number_in(lo: float, hi: float | None = None, lo_open: bool = False):
    def check(v) -> bool:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v:
            return False
        return (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
    return check


def _link_shape(v) -> bool:
    """link_json's inner shape as its readers read it (the report's bottleneck and ECN tables): per
    direction an object, its bottleneck's counts and ECN classes' packets numbers (trial.run.link_delta
    makes it: the bottleneck names its discipline too)."""
    obj = json.loads(v)
    dirs = obj.get("dirs", {})
    if not isinstance(dirs, dict) or not all(isinstance(d, dict) for d in dirs.values()):
        return False
    def number(y) -> bool:
        return y is None or isinstance(y, (int, float)) and not isinstance(y, bool)
    for d in dirs.values():
        b, e = d.get("bottleneck") or {}, d.get("ecn") or {}
        if not isinstance(b, dict) or not isinstance(e, dict) or not all(number(y) for y in e.values()):
            return False
        if not all(number(b.get(k)) for k in ("aqm_drops", "marks", "overlimit_drops", "dequeued", "sojourn_mean_us")):
            return False
    ends = obj.get("endpoints_ecn")
    return ends is None or isinstance(ends, dict) and all(e is None or isinstance(e, dict) for e in ends.values())


# What a stored value must be beyond its type, where a reader relies on it (a damaged or hand-edited row
# read as NULL and said, as a value not of its type is): the texts another module parses, the numbers
# whose range means something, the JSON whose inner shape a table reads.
VALUE_CHECKS = {
    "cpu_budget": _number_in(0, 1, lo_open=True), "cpu_cores": _number_in(1), "cpu_quota_us": _number_in(1),
    "cpu_period_us": _number_in(1), "cpu_slowdown": _number_in(0), "cross_mbps": _number_in(0),
    "link_json": _link_shape,
}  # the store adds the checks that ask a part (store.STORED_CHECKS: a device's name, an aqm or cross text)


def _value_fits(name: str, value, checks: dict) -> bool:
    """A stored value means what its column says (its check among checks; pure); NULL always does."""
    check = checks.get(name)
    if value is None or check is None:
        return True
    try:
        return bool(check(value))
    except (TypeError, ValueError, AttributeError, RecursionError):
        return False


def _cond_column(name: str) -> str:
    return "conditions_name" if name == "name" else name


def _restore(hint, value):
    if value is None:
        return None
    base = _base(hint)
    return bool(value) if base is bool else value


def _base(hint):
    """int for `int | None`, and so on."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


_SQL = {int: "INTEGER", float: "REAL", str: "TEXT", bool: "INTEGER"}
_COND_DOCS = {"rate_down_bps": "downlink rate; NULL: unshaped", "rate_up_bps": "uplink rate; NULL: unshaped",
              "rtt_ms": "round-trip time added by the link", "jitter_ms": "jitter per direction",
              "jitter_dist": "uniform | normal", "loss_pct": "loss per packet, per direction it applies to",
              "loss_direction": "both | down | up", "reorder": "1: jitter may reorder packets",
              "queue_pkts": "bottleneck queue; NULL: automatic (>= one bandwidth-delay product)",
              "name": "a named profile's name (Cable, 3GFast...), if any",
              "trace_down": "the downlink's trace (its file's name) when its rate follows one; rate_down_bps is "
                            "then the trace's mean",
              "trace_down_sha256": "SHA-256 of the downlink's trace file",
              "trace_up": "the uplink's trace when its rate follows one; rate_up_bps is then its mean",
              "trace_up_sha256": "SHA-256 of the uplink's trace file",
              "aqm": "the bottleneck's queue discipline (--aqm; link.aqm: droptail, codel, fq_codel or pie with the "
                     "parameters that differ from their defaults), linkem's at the link's rate; NULL: the kernel's "
                     "FIFO (every trial before schema 26)",
              "ecn": "1: the discipline marked ECN-capable packets CE where it would drop them (--ecn)",
              "cross": "competing flows through the bottleneck (--cross; link.cross: 2xtcp-cubic, 1xtcp-bbr:up); "
                       "NULL: none (every trial before schema 26)",
              "origin_rtt": "each origin's own path delay beside the link (--origin-rtt; link.origins: recorded, or "
                            "HOST=MS+...); NULL: every origin at the link's RTT (every trial before schema 29)",
              "think": "the servers' wait before each response's first byte (--think; pages.timing: recorded, or "
                       "MS); NULL: every response at once (every trial before schema 30)"}


def _stored_hints() -> dict:
    """The conditions' fields as their columns hold them: a seam's record by its text (an Aqm as its
    canonical text, Conditions.as_dict)."""
    return typing.get_type_hints(Conditions, localns={"Aqm": str, "OriginRtt": str})


def columns() -> list[tuple[str, str, str]]:
    """(name, SQL declaration, documentation) of every column of `trials` but its id, in order."""
    hints = typing.get_type_hints(Trial)
    out = []
    for f in dataclasses.fields(Trial):
        if f.metadata.get("column") is False:
            continue
        if f.name == "conditions":
            out.append(("conditions", "TEXT NOT NULL", "label of the conditions, e.g. 100mbit rtt50ms loss1% "
                                                       "(for people: cells are found by the columns below)"))
            ch = _stored_hints()
            for cf in dataclasses.fields(Conditions):
                out.append((_cond_column(cf.name), _declare(ch[cf.name], cf.default), _COND_DOCS[cf.name]))
            continue
        out.append((f.name, _declare(hints[f.name], f.default), f.metadata["doc"]))
    return out


def _declare(hint, default) -> str:
    base = _base(hint)
    sql = _SQL[base]
    if hint is base and default is dataclasses.MISSING:
        return f"{sql} NOT NULL"
    if hint is base and default is not dataclasses.MISSING and default is not None:
        return f"{sql} NOT NULL DEFAULT {int(default) if isinstance(default, bool) else repr(default)}"
    return sql


COLUMNS = [name for name, _, _ in columns()]
CONDITION_COLUMNS = [_cond_column(f.name) for f in dataclasses.fields(Conditions)]  # a trial's conditions, whole
_HINTS = (typing.get_type_hints(Trial), _stored_hints())  # read once: from_row runs per stored row
_ANSWER_KEYS = frozenset(typing.get_type_hints(WorkerAnswer))


# -- what the analysis measures a cell by ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Metric:
    """A per-trial time the analysis can compare cells by (--metric)."""
    name: str    # what --metric takes
    field: str   # the Trial's field, in ms from the navigation's start
    label: str   # for people
    title: str   # a table's heading
    needs: str = ""  # what a campaign must do for trials to have it, when more than loading the page


METRICS = {m.name: m for m in (
    Metric("plt", "plt_ms", "page-load time (loadEventEnd)", "Page-load time"),
    Metric("fcp", "fcp_ms", "first contentful paint", "First contentful paint"),
    Metric("lcp", "lcp_ms", "largest contentful paint", "Largest contentful paint"),
    Metric("ttfb", "ttfb_ms", "time to first byte (responseStart)", "Time to first byte"),
    Metric("si", "speed_index_ms", "SpeedIndex (capture kind visual)", "SpeedIndex",
           "SpeedIndex comes from the load's screencast: measure with --capture visual (Chromium)"),
)}
DEFAULT_METRIC = "plt"
TESTS = ("welch", "mannwhitney")  # how two cells are compared (--test)
CORRECTIONS = ("holm", "bh")      # how a report's p-values are corrected for its many comparisons (--correction)


def metric_value(t: Trial, metric: str = DEFAULT_METRIC) -> float | None:
    """A trial's value of a metric (METRICS) in ms, or None where it has none."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {tuple(METRICS)}")
    v = getattr(t, METRICS[metric].field)
    return None if v is None else float(v)


# -- the analysis's records (plt_bench.analysis.stats makes them; report, plots and the CSVs read them) -----------
AXES = ("proto", "cc", "browser", "server", "budget")  # what a comparison may be along: a field of CellStats that varies in a group
CELL_FIELDS = ("conditions", "page", "proto", "cc", "browser", "server", "budget")  # what tells one cell from another (CellStats.key)


@dataclasses.dataclass(frozen=True)
class CellStats:
    """The page-load times of one cell (conditions x page x protocol) over its trials that count
    (Trial.counts: ok, timed, not a warm-up)."""

    conditions: str = doc("the conditions' label (100mbit rtt50ms loss1%)")
    page: str = doc("the page's label (5KB, 200x5KB)")
    size_bytes: int = doc("every body the page's load fetches, in bytes")
    objects: int = doc("the page's images (0: one HTML file)")
    proto: str = doc("h3 | h2 | h1 (plt_bench.protocols)")
    cc: str = doc("TCP congestion control (Trial.cc)")
    rate_down_bps: int | None = doc("the downlink rate; None: unshaped")
    rtt_ms: float = doc("the RTT the link added")
    jitter_ms: float = doc("jitter per direction")
    loss_pct: float = doc("loss per packet")
    n: int = doc("trials that count")
    median_ms: float = doc("median page-load time (loadEventEnd)")
    mean_ms: float = doc("mean page-load time")
    sd_ms: float = doc("sample standard deviation (nan below two trials)")
    ci_low_ms: float = doc("bootstrap 95% confidence interval of the median, low end (nan below three trials)")
    ci_high_ms: float = doc("... and high end")
    cv: float = doc("coefficient of variation, sd / mean (a warning above stats.CV_WARN)")
    n_cpu_bound: int = doc("trials flagged CPU-bound (Trial.cpu_bound)")
    cpu_bound_roles: str = doc("the roles that limited them, most frequent first ('machine x2, renderer')")
    n_cpu_unjudged: int = doc("trials with too few CPU readings to judge (cpu.MIN_READINGS)")
    warnings: tuple[str, ...] = doc("what to mind about the cell (instability, CPU limits)", ())
    metric: str = doc("what median_ms and the rest measure: plt, fcp, lcp or ttfb (records.METRICS)", DEFAULT_METRIC)
    n_no_metric: int = doc("trials that count but have no value of the metric (an LCP never reported: "
                           "Trial.paint_reason), left out of n", 0)
    trace_down: str | None = doc("the downlink's trace, when its rate followed one (rate_down_bps is then the "
                                 "trace's mean)", None)
    browser: str = doc("the browser that loaded it (Trial.browser; chromium for a store before schema 18)", "chromium")
    server: str = doc("the server that served it (Trial.server; caddy for a store before schema 20)", "caddy")
    budget: str = doc("the browser's CPU budget (Trial.budget: cpu0.25, cpu1, or full: none)", "full")

    @property
    def key(self) -> tuple[str, str, str, str, str, str]:
        return tuple(getattr(self, f) for f in CELL_FIELDS)

    def row(self) -> dict:
        """The cell as a flat row (cells.csv), its warnings apart."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "warnings"}


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One value of an axis against the reference value, in one cell of everything else (its
    conditions, page, and the other axes): e.g. h3 (the reference) against h1 at 100mbit for 5KB
    under cubic in Chromium, bbr against cubic for h2, or firefox against chromium for h3.

    diff_pct = (reference's median - other's median) / other's median x 100: negative, the reference
    loaded faster (a store of the seed experiment, QUIC against TCP, reads as h3 against h1 with
    the figures it always had). The p-values test the two cells' samples; p_adjusted is corrected
    over every comparison of the report."""

    axis: str = doc("what is compared: proto, cc, browser or server (records.AXES)")
    reference: CellStats = doc("the reference's cell (--reference; h3 by default)")
    other: CellStats = doc("the cell compared with it")
    diff_pct: float = doc("(reference - other) / other, in % of the other's median; negative: reference faster")
    diff_ci_low_pct: float = doc("bootstrap 95% confidence interval of diff_pct, low end (nan below three trials "
                                 "each)")
    diff_ci_high_pct: float = doc("... and high end")
    p_welch: float = doc("Welch's t-test, two-sided (nan below two trials each)")
    p_mannwhitney: float = doc("Mann-Whitney U test, two-sided")
    hedges_g: float = doc("effect size: difference of the means over the pooled sd, small-sample corrected")
    cliffs_delta: float = doc("effect size: P(reference > other) - P(reference < other), -1 to 1")
    test: str = doc("welch | mannwhitney: the test whose p-value is corrected", "welch")
    correction: str = doc("holm | bh: the correction over every comparison of the report", "holm")
    p_adjusted: float = doc("the test's p-value, corrected", float("nan"))
    p_ks: float = doc("two-sample Kolmogorov-Smirnov test, two-sided, uncorrected: whether the two samples could "
                      "come from one distribution, in shape as well as centre (a bimodal cell whose modes differ in "
                      "share); nan below two trials each", float("nan"))
    significant: bool = doc("p_adjusted < 0.05", False)
    faster: str = doc("the faster value where significant, else 'neither (not significant)'", "")

    @property
    def pair(self) -> str:
        """'h3 vs h1'; along cc or browser, with the protocol it is within: 'bbr vs cubic (h2)'."""
        return self.pair_in(())

    def pair_in(self, varying) -> str:
        """The pair with what it is within, among the axes that vary in the report (varying: of
        "cc", "browser", "server"): 'h3 vs h1 (firefox)', 'firefox vs chromium (h2 bbr)'; a protocol
        comparison with nothing else varying is just 'h3 vs h1'."""
        text = f"{self.reference_value} vs {self.other_value}"
        within = self.within_in(varying)
        return f"{text} ({within})" if within else text

    def within_in(self, varying) -> str:
        """The values both cells share of the other axes: the protocol of a cc, browser or server
        comparison always, the cc, the browser and the server where they vary (varying: of AXES)."""
        return " ".join(getattr(self.reference, a) for a in AXES if a != self.axis and (a == "proto" or a in varying))

    @property
    def within(self) -> str:
        """Every value both cells share of the other axes: 'cubic chromium caddy' of a protocol comparison."""
        return self.within_in(AXES)

    @property
    def reference_value(self) -> str:
        return getattr(self.reference, self.axis)

    @property
    def other_value(self) -> str:
        return getattr(self.other, self.axis)

    @property
    def p_test(self) -> float:
        """The chosen test's p-value, uncorrected."""
        return self.p_welch if self.test == "welch" else self.p_mannwhitney

    def __getattr__(self, name: str):
        """The group's own fields (conditions, page, size_bytes, rate_down_bps, ...) are the cells'."""
        if name in _GROUP_FIELDS and name != self.axis:
            return getattr(self.reference, name)
        raise AttributeError(name)

    def row(self) -> dict:
        """The comparison as a flat row (comparison.csv)."""
        r, o = self.reference, self.other
        group = {k: getattr(r, k) for k in _GROUP_FIELDS if k != self.axis}
        return {**group, "metric": r.metric, "axis": self.axis, "reference": self.reference_value,
                "other": self.other_value,
                "n_reference": r.n, "n_other": o.n, "median_reference_ms": r.median_ms, "median_other_ms": o.median_ms,
                "diff_pct": self.diff_pct, "diff_ci_low_pct": self.diff_ci_low_pct,
                "diff_ci_high_pct": self.diff_ci_high_pct, "p_welch": self.p_welch, "p_mannwhitney": self.p_mannwhitney,
                "p_ks": self.p_ks, "hedges_g": self.hedges_g, "cliffs_delta": self.cliffs_delta, "cpu_bound_reference": r.n_cpu_bound,
                "cpu_bound_other": o.n_cpu_bound, "p_adjusted": self.p_adjusted, "test": self.test,
                "correction": self.correction, "significant": self.significant, "faster": self.faster}


_GROUP_FIELDS = ("conditions", "page", "size_bytes", "objects", "proto", "cc", "browser", "server", "budget", "rate_down_bps", "rtt_ms",
                 "jitter_ms", "loss_pct")
