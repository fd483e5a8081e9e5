"""Browser worker: runs in the client namespace, one JSON request per line on stdin, one JSON
answer per line on stdout. (Imports inside functions: start-up time; it is a process of its own,
started with every testbed, and imports Selenium and each browser's seam when a load asks.) Each
request starts a fresh driver and browser (plt_bench.browsers:
chromedriver + Chromium, or geckodriver + Firefox) with a fresh profile, loads one URL, reads the
Navigation Timing entry, and quits.

Request: {"url", "browser": chromium | firefox (chromium when absent), "args": [...], "prefs": {...}, "timeout_s", "profile_dir", "cpu_interval_s", "cpu_series",
          "visit": a repeat visit's {"cache": "cleared" | "kept", "settle_s", "netlog": the path of the
                   browser's own log (Chromium's net-log, Firefox's HTTP log), "keep_netlog": that log is
                   the trial's capture}, or absent,
          "paint_quiet_ms": the quiet window after which the page counts as settled and its paint
                   metrics are read (paint_quiet_ms(): PAINT_QUIET_MS and two round trips), or absent,
          "await_s": seconds to wait after the load for the page's own figures (window.pltBench), or 0,
          "expect_resources": ["host/path?query", ...]: objects that need not hold the load event (a
                   replay's fetches) whose Resource Timing entries are waited for, RESOURCE_WAIT_MS at most,
                   before the entries are read (absent: read at once),
          "settle_s": seconds the browser stays up once its figures are read (a QUIC bulk download's
                      abort reaching the server: bulk.settle_s), or 0,
          "har_path": where to write the trial's HAR 1.2 (plt_bench.har), or absent,
          "har_bodies": true to keep every response's body in it (a recording: plt-bench record),
          "graceful_quit": true when Chromium writes files that it completes only when it closes (the
          net-log, the key log): the browser is then quit through chromedriver, else killed}
Answer:  {"nav": {...} | null, "resources": [{RESOURCE_FIELDS}] (the page's sub-resources), "final_url", "error", "error_code", "launch_s", "load_s",
          "quit_s": the browser's end, every process of the trial gone (quit or killed),
          "launch_attempts": 1, or 2 where chromedriver could not create the first session,
          "har": {"entries": n} or {"error": why} when har_path was given (the HAR written there),
          "visual": {first_visual_change_ms, speed_index_ms, visually_complete_ms, frames, error} when asked,
          "workload": what window.pltBench resolved to (a bulk page's byte counts), when await_s is given,
          "paint": the page's paint metrics (PAINT_JS: fcp_ms, lcp {start_ms, element, url, ...}) after a load,
          "first_visit": a repeat visit's first load ({"nav", "load_s", "boundary_unix"}, or {"error"}),
          "visit_evidence": its repeat's connections from the browser's log (Browser.visit_evidence:
                            {"quic_zero_rtt": [state, ...], "tcp_tls_resumed": [bool, ...], ...} or with "error"),
          "nav_t0": monotonic s when the navigation began,
          "cpu": {"roles": {role: {"user_s", "system_s", "processes"}} from the navigation on,
                  "launch": the same for the browser's start-up, "sampler": {interval, samples, own cost}},
          "cpu_series": [{"t_s", "role", "user_s", "system_s"}] (when cpu_series is asked for),
          "strays_killed": processes of the trial killed at its end, "strays_left": ones that would not die,
          "prelaunched": true when the browser had been started by a prepare request,
          "prepare_error": why the prepare request before this one failed (the trial started its own),
          "gate": the idle gate's figures (cpu.wait_idle), when the request asks for it ("gate": true)}

A request {"prepare": {request}} starts the next trial's chromedriver + Chromium (its own fresh
profile and flags, on about:blank) and answers {"prepared": true, "launch_s"} or {"prepared": false,
"error"}; the next request with the same profile_dir and args then navigates that browser, and any
other request (or {"discard": true}, or the worker's end) first ends it, every process and its
profile. So the runner can have the next browser start while it judges and stores the last trial,
and nothing but a fresh, idle browser is carried from one request to the next. With "gate": true
the worker waits for the idle gate between the launch and the navigation, so the launch's own CPU
burst is over before the page is asked for.

Every process of a trial is gone before the answer is sent: the worker is a child subreaper, so
a Chromium whose chromedriver died is reparented to it rather than to PID 1, and after each trial
it kills whatever is below it or names the trial's profile folder. That kill is also how a trial
ends its browser, unless Chromium has files to complete: a quit through chromedriver took 0.10 s
here, the kill 0.01 s, and the profile is thrown away either way. A killed chromedriver once left
its Chromium downloading 10 MB through the next trial, which measured 13.9 s instead of 8.5 s.

The CPU totals come from a full walk of chromedriver's process tree just before the navigation
and just before quitting (the processes' totals vanish with them); the sampler reads the same
tree every cpu_interval_s in between for the time series.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

# What each sub-resource's Resource Timing entry gives a trial: which object, over what, whole or
# not, and its own timeline (ms from the navigation's start).
RESOURCE_FIELDS = ("name", "initiatorType", "nextHopProtocol", "responseStatus", "decodedBodySize", "encodedBodySize",
                   "transferSize", "startTime", "connectStart", "connectEnd", "secureConnectionStart", "requestStart",
                   "responseStart", "responseEnd")
# The navigation entry, the error code when Chromium shows its error page instead (it may keep the
# page's URL, so the URL alone does not tell), and the sub-resources' entries.
NAV_JS = ("const e = performance.getEntriesByType('navigation')[0]; "
          "const c = document.querySelector('.error-code'); "
          f"const f = {list(RESOURCE_FIELDS)!r}; "
          "const r = performance.getEntriesByType('resource').map(x => Object.fromEntries(f.map(k => [k, x[k]]))); "
          "return [e ? e.toJSON() : null, c ? c.textContent.trim() : null, r];")
# The page's paint metrics, read once the page has settled, as the field's tools read them (web-vitals
# takes the last candidate before input or hide; browsertime reads after its page-complete check,
# the network quiet): first-contentful-paint from the paint timeline; the largest-contentful-paint
# from a buffered observer's last record (getEntriesByType gives nothing for it). After the load
# event a page's script may still fetch its data and draw its largest element (swagger-ui draws its
# heading 0.2-0.35 s after FCP, once its JSON has come: read 50 ms after the last record, as until
# 2026-11-27, its LCP was FCP's text with no element, the node detached by the re-render). So the
# script waits for a quiet window: no new LCP record, no new Resource Timing entry (a response
# ended), and the page's main thread never busy (a gap between two of the script's frames over
# PAINT_BUSY_MS is a long task: the page's script running, perhaps about to fetch). The window is
# PAINT_QUIET_MS plus two round trips of the link (the request asks it: paint_quiet_ms): a script
# that fetches once it has run shows nothing for one round trip and its response's transfer, and the
# render then comes within a frame or two. PAINT_WAIT_MS at most past the window (a page that never
# settles, or paints nothing contentful, says so: settled false). The wait comes after the load
# event (the load's times are the Navigation Timing entry's, read apart), and is recorded (waited_ms:
# the trial's paint_wait_ms). Nothing touches the page: any input would stop LCP.
# A page none of whose scripts draws after its load (pages.PageKind.draws_after_load: the pages plt-bench
# makes) has every candidate by then: its window is PAINT_SETTLED_MS, as every page's was until 2026-11-27.
PAINT_QUIET_MS, PAINT_WAIT_MS, PAINT_BUSY_MS, PAINT_SETTLED_MS = 500, 5000, 100, 50
PAINT_JS = """
const done = arguments[arguments.length - 1];
const QUIET = %(quiet)d, CAP = %(cap)d, BUSY = %(busy)d;
const out = {fp_ms: null, fcp_ms: null, lcp: null, lcp_candidates: 0, visibility: document.visibilityState,
             viewport: [window.innerWidth, window.innerHeight, window.devicePixelRatio, navigator.userAgent],
             waited_ms: 0, quiet_ms: QUIET, settled: false, error: null};
try {
  let last = null;
  const t0 = performance.now();
  let lastAt = t0, prevTick = t0;
  const po = new PerformanceObserver(list => {
    for (const e of list.getEntries()) { last = e; out.lcp_candidates++; }
    lastAt = performance.now();
  });
  po.observe({type: 'largest-contentful-paint', buffered: true});
  const ro = new PerformanceObserver(() => { lastAt = performance.now(); });
  ro.observe({type: 'resource'});  // not buffered: a response that ends from now on
  const finish = settled => {
    for (const e of po.takeRecords()) { last = e; out.lcp_candidates++; }
    po.disconnect(); ro.disconnect();
    for (const e of performance.getEntriesByType('paint')) {
      if (e.name === 'first-paint') out.fp_ms = e.startTime;
      if (e.name === 'first-contentful-paint') out.fcp_ms = e.startTime;
    }
    if (last) {
      const el = last.element;
      out.lcp = {start_ms: last.startTime, render_ms: last.renderTime, load_ms: last.loadTime, size_px: last.size,
                 url: last.url || null, element: el ? (el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')) : null};
    }
    out.settled = settled;
    out.waited_ms = performance.now() - t0;
    done(out);
  };
  const tick = () => {
    const now = performance.now();
    if (now - prevTick > BUSY) lastAt = now;  // the page's main thread was busy in between
    prevTick = now;
    const fcp = performance.getEntriesByName('first-contentful-paint').length > 0;
    if (fcp && now - lastAt >= QUIET) { finish(true); return; }
    if (now - t0 >= QUIET + CAP) { finish(false); return; }
    requestAnimationFrame(() => setTimeout(tick, 10));
  };
  requestAnimationFrame(() => setTimeout(tick, 0));
} catch (e) {
  out.error = String(e);
  done(out);
}
"""


def paint_js(quiet_ms: float) -> str:
    """PAINT_JS with its quiet window (PAINT_QUIET_MS plus the link's two round trips: the request's
    paint_quiet_ms) and its bounds."""
    return PAINT_JS % {"quiet": round(quiet_ms), "cap": PAINT_WAIT_MS, "busy": PAINT_BUSY_MS}


def paint_quiet_ms(rtt_ms: float, draws_after_load: bool = True) -> float:
    """The quiet window after which a page counts as settled (pure): PAINT_QUIET_MS and two round trips,
    or PAINT_SETTLED_MS for a page whose scripts draw nothing after its load."""
    return PAINT_QUIET_MS + 2.0 * max(0.0, rtt_ms) if draws_after_load else float(PAINT_SETTLED_MS)


# A page with a workload after its load (pages.Page: bulk) leaves its figures in window.pltBench.
AWAIT_JS = ("const done = arguments[arguments.length - 1]; "
            "if (!window.pltBench) { done({error: 'the page has no workload (window.pltBench)'}); } "
            "else { window.pltBench.then(done, e => done({error: String(e)})); }")


def versions() -> dict:
    """The versions the worker's hello reports: Chromium's and chromedriver's (every campaign's
    metadata), and Selenium's."""
    from selenium import __version__ as selenium_version

    from plt_bench.browsers.chromium import CHROMIUM
    return {**CHROMIUM.versions(), "selenium": selenium_version}


_PREPARED: dict = {}  # the next trial's browser, started by a prepare request: {"key", "driver", "launch_s", ...}
_PREPARE_FAILED: dict = {}  # why the last prepare request failed ({"error"}), told by the next trial's answer


def _key(req: dict) -> tuple:
    """What a prepared browser must match to serve a request: its profile and every flag."""
    return (req.get("browser", "chromium"), req["profile_dir"], tuple(req["args"]),
            json.dumps(req.get("prefs", {}), sort_keys=True), bool(req.get("har_path")), bool(req.get("visual")))


# Kept browsers (a request's "keep": --browser-start kept): one per set of flags (a campaign's protocols
# interleave, each forced by its own flags), each trial in a fresh context of its own; the least
# recently used ends beyond MAX_KEPT. {kept_key: {"driver", "profile_dir", "launch_s", "loads"}}
_KEPT: dict = {}
MAX_KEPT = 4


def _kept_key(req: dict) -> tuple:
    """What a kept browser must match to serve a request: every flag but its profile, and how it runs."""
    return (req.get("browser", "chromium"), tuple(a for a in req["args"] if not a.startswith("--user-data-dir=")),
            json.dumps(req.get("prefs", {}), sort_keys=True), json.dumps(req.get("mobile_emulation"), sort_keys=True),
            json.dumps(req.get("cgroup_procs")), bool(req.get("sandbox")), json.dumps(req.get("env"), sort_keys=True))


def _kept_browser(req: dict, out: dict) -> tuple[dict, bool]:
    """The kept browser of the request's flags, started (on a profile of its own beside the trials')
    where there is none or it died; (its entry, whether it was started now)."""
    import hashlib
    key = _kept_key(req)
    got = _KEPT.pop(key, None)
    if got is not None and got["driver"].service.process.poll() is None:
        _KEPT[key] = got  # the most recently used last
        return got, False
    if got is not None:
        _end_kept(got)
    while len(_KEPT) >= MAX_KEPT:
        _end_kept(_KEPT.pop(next(iter(_KEPT))))
    profile = os.path.join(os.path.dirname(req["profile_dir"]), "kept-" + hashlib.sha1(repr(key).encode()).hexdigest()[:12])
    own = {**req, "profile_dir": profile,
           "args": [f"--user-data-dir={profile}" if a.startswith("--user-data-dir=") else a for a in req["args"]]}
    t0 = time.monotonic()
    driver = _start_browser(own, out)
    _KEPT[key] = {"driver": driver, "profile_dir": profile, "launch_s": time.monotonic() - t0, "loads": 0}
    return _KEPT[key], True


def _end_kept(entry: dict) -> int:
    """A kept browser ended: quit, then every process of its driver's tree (as it was before the quit:
    the driver's orphans come to the worker, beside other kept browsers') or naming its profile, and the
    profile gone."""
    from plt_bench import procs
    try:
        root = entry["driver"].service.process.pid
        tree = procs.descendants({p: row[0] for p, row in procs.table().items()}, root) | {root}
    except Exception:  # noqa: BLE001
        tree = set()
    try:
        entry["driver"].quit()
    except Exception:  # noqa: BLE001 - it died already: the sweep finds what is left
        pass
    out: dict = {}
    _sweep(entry["profile_dir"], out, below_too=False, also=tree)
    shutil.rmtree(entry["profile_dir"], ignore_errors=True)
    _unlink_driver_log(entry["profile_dir"])
    return out.get("strays_killed", 0)


def end_kept() -> int:
    """Every kept browser ended (a change of conditions or of visitor, the worker's end, a fresh trial)."""
    n = 0
    while _KEPT:
        n += _end_kept(_KEPT.pop(next(iter(_KEPT))))
    return n


def _open_context(req: dict, out: dict):
    """A kept browser's fresh context for the request: (driver, context, the browser's entry)."""
    from plt_bench import browsers
    entry, started = _kept_browser(req, out)
    t0 = time.monotonic()
    ctx = browsers.get(req.get("browser", browsers.DEFAULT)).new_context(entry["driver"])
    out["context_s"] = time.monotonic() - t0
    out["browser_loads"] = entry["loads"]
    out["kept_started"] = started
    entry["loads"] += 1
    return entry["driver"], ctx, entry


def prepare(req: dict) -> dict:
    """Start the browser of a request to come, on about:blank; it waits for that request. A kept
    browser's request (keep): its fresh context opened (the browser started first where there is none)."""
    _drop_prepared()
    out: dict = {}
    t0 = time.monotonic()
    if req.get("keep"):
        try:
            driver, ctx, entry = _open_context(req, out)
        except Exception as e:  # noqa: BLE001 - the request will open its own, and say why it had to
            _PREPARE_FAILED["error"] = f"{type(e).__name__}: {e}"[:300]
            return {"prepared": False, "error": _PREPARE_FAILED["error"]}
        _PREPARED.update(key=_key(req), driver=driver, context=ctx, launch_s=time.monotonic() - t0,
                         launch_attempts=out.get("launch_attempts", 1), profile_dir=None,
                         kept={k: out[k] for k in ("context_s", "browser_loads", "kept_started")})
        return {"prepared": True, "launch_s": _PREPARED["launch_s"]}
    end_kept()  # a fresh browser's trial: nothing of a kept one idles beside it
    try:
        driver = _start_browser(req, out)
    except Exception as e:  # noqa: BLE001 - the request will start its own browser, and say why it had to
        _sweep(req["profile_dir"], {})
        shutil.rmtree(req["profile_dir"], ignore_errors=True)
        _PREPARE_FAILED["error"] = f"{type(e).__name__}: {e}"[:300]
        return {"prepared": False, "error": _PREPARE_FAILED["error"]}
    _PREPARED.update(key=_key(req), driver=driver, launch_s=time.monotonic() - t0,
                     launch_attempts=out.get("launch_attempts", 1), profile_dir=req["profile_dir"])
    return {"prepared": True, "launch_s": _PREPARED["launch_s"]}


def _drop_prepared() -> int:
    """End what a prepare request started that no request took: a fresh browser (every process of it,
    and its profile), or a kept browser's context (the browser stays)."""
    if not _PREPARED:
        return 0
    got = dict(_PREPARED)
    _PREPARED.clear()
    if got.get("context") is not None:
        from plt_bench import browsers
        try:
            browsers.get(got["key"][0]).end_context(got["driver"], got["context"])
        except Exception:  # noqa: BLE001 - a browser that cannot end a context is not kept
            end_kept()
        return 0
    out: dict = {}
    _sweep(got["profile_dir"], out)
    shutil.rmtree(got["profile_dir"], ignore_errors=True)
    _unlink_driver_log(got["profile_dir"])
    return out.get("strays_killed", 0)


def discard() -> int:
    """End a prepared browser (or context) that no request took, and every kept browser: the runner's
    discard, before the link changes or the visitor does, and the worker's end."""
    return _drop_prepared() + end_kept()


def _take_prepared(req: dict):
    """The prepared browser if it was started for this request, else None (and it is ended)."""
    if _PREPARED and _PREPARED["key"] == _key(req):
        got = dict(_PREPARED)
        _PREPARED.clear()
        return got
    _drop_prepared()
    return None


def _start_browser(req: dict, out: dict):
    """The request's browser (plt_bench.browsers: req["browser"], Chromium when absent) and its driver,
    started on the request's fresh profile; a failed attempt's processes and profile are ended."""
    from plt_bench import browsers
    os.makedirs(os.path.dirname(req["profile_dir"]), exist_ok=True)

    def cleanup():
        _sweep(req["profile_dir"], {})
        shutil.rmtree(req["profile_dir"], ignore_errors=True)
    return browsers.get(req.get("browser", browsers.DEFAULT)).start(req, out, cleanup)


def _unlink_driver_log(profile_dir: str) -> None:
    for name in ("chromedriver", "geckodriver"):
        try:
            os.unlink(f"{profile_dir}.{name}.log")
        except OSError:
            pass


def one_trial(req: dict) -> dict:
    from selenium.common.exceptions import TimeoutException, WebDriverException

    from plt_bench import browsers
    out = {"browser": req.get("browser", "chromium"), "nav": None, "resources": None, "final_url": None,
           "error": None, "error_code": None, "launch_s": None, "load_s": None, "quit_s": None}
    t0 = time.monotonic()
    driver = sampler = cpu0 = cast = context = None
    kept = bool(req.get("keep"))
    out["browser_start"] = "kept" if kept else "fresh"
    if _PREPARE_FAILED:
        out["prepare_error"] = _PREPARE_FAILED.pop("error")
    try:
        ready = _take_prepared(req)
        if ready:
            driver, context = ready["driver"], ready.get("context")
            out.update(launch_s=ready["launch_s"], launch_attempts=ready["launch_attempts"], prelaunched=True,
                       **ready.get("kept", {}))
        elif kept:
            try:
                driver, context, _ = _open_context(req, out)
            except WebDriverException:
                raise
            except Exception as e:  # noqa: BLE001 - DevTools' socket timed out (a slow VM, 2026-11-28): said, not a
                end_kept()          # bare "worker error"; a browser that gives no context is not kept
                out["error"] = f"browser did not start: no fresh context in the kept browser: {_failed(e)}"[:600]
                return out
            out["launch_s"] = time.monotonic() - t0
        else:
            end_kept()  # a fresh browser's trial: nothing of a kept one idles beside it
            driver = _start_browser(req, out)
            out["launch_s"] = time.monotonic() - t0
        if req.get("visit"):  # a repeat visit: the first load in this browser, then its connections closed
            out["first_visit"] = _first_visit(driver, req)
            if out["first_visit"].get("error"):
                out["error"] = f"the first visit failed: {out['first_visit']['error']}"
                return out
        if req.get("gate"):  # after the launch: its CPU burst is not the page's
            from plt_bench.cpu import wait_idle
            out["gate"] = wait_idle()
        driver.set_page_load_timeout(req["timeout_s"])
        sampler, cpu0 = _start_cpu(driver, req)
        cast = browsers.get(req.get("browser", browsers.DEFAULT)).frames(driver, req) if req.get("visual") else None
        if req.get("har_path"):  # the browser records the trial's requests from here on
            _har_prepare(driver, req, out)
        if req.get("mark"):  # the link's traces start over with this navigation
            try:
                os.kill(*req["mark"])
            except OSError:
                pass  # the emulator is gone: the runner fails the trial with the link's own reason
        t1 = time.monotonic()
        out["nav_t0"] = t1
        try:
            driver.get(req["url"])
        except TimeoutException:
            out["error"] = f"timeout: the page did not load within {req['timeout_s']:g}s"
        except WebDriverException as e:
            msg = (e.msg or str(e)).strip().splitlines()[0]
            out["error"] = f"navigation error: {msg}"
        out["load_s"] = time.monotonic() - t1
        if out["error"] is None:
            out["paint"] = _paint(driver, float(req.get("paint_quiet_ms") or PAINT_QUIET_MS))
        if cast is not None:  # the frames up to the page as it stands once its paints are read
            out["visual"] = cast.finish(driver, out["error"] is None, req.get("frames_path"))
        if out["error"] is None and req.get("await_s"):
            out["workload"] = _await_workload(driver, req["await_s"])
        if out["error"] is None and req.get("expect_resources"):
            out["resources_waited"] = _page_script(driver, RESOURCES_JS % (json.dumps(req["expect_resources"]),
                                                                          RESOURCE_WAIT_MS),
                                                   RESOURCE_WAIT_MS / 1000 + 10,
                                                   "the page's entries", "the page's entries were not read")
        if out["error"] is None or out["error"].startswith("navigation error"):
            try:
                out["final_url"] = driver.current_url
                out["nav"], out["error_code"], out["resources"] = driver.execute_script(NAV_JS)
            except WebDriverException as e:
                out["error"] = out["error"] or f"could not read Navigation Timing: {(e.msg or str(e)).splitlines()[0]}"
        if req.get("har_path") and "har" not in out:
            out["har"] = _write_har(driver, req, out)
    except WebDriverException as e:
        # chromedriver's first line is often only "session not created": its causes follow it
        lines = [x.strip() for x in (e.msg or str(e)).strip().splitlines() if x.strip()]
        out["error"] = f"browser did not start: {' | '.join(lines[:3])[:600]}"
    finally:
        if cast is not None:
            cast.close()
        if driver is not None:  # the browser's CPU per role, read before quitting takes it away
            _end_cpu(driver, sampler, cpu0, out)
            if req.get("cpu_loop") and out["error"] is None:  # after the figures: its CPU is not the trial's
                out["cpu_loop"] = _cpu_loop(driver, req["cpu_loop"])
            if req.get("benchmark") and out["error"] is None:  # a device's calibration (device.calibrate)
                out["benchmark"] = _benchmark(driver, *req["benchmark"])
            if req.get("settle_s"):  # a bulk download's abort reaches the server before the browser dies
                time.sleep(req["settle_s"])
        t2 = time.monotonic()
        if kept and context is not None:  # the trial's context ends; its browser is kept for the next
            _end_trial_context(req, driver, context, out)
        elif kept:  # the kept browser would not give a context: it is not kept
            end_kept()
        if driver is not None and req.get("graceful_quit"):
            try:
                driver.quit()
            except Exception:
                pass
        if not kept:
            _sweep(req["profile_dir"], out)
        out["quit_s"] = time.monotonic() - t2
        shutil.rmtree(req["profile_dir"], ignore_errors=True)
        _unlink_driver_log(req["profile_dir"])
        if req.get("visit") and out.get("first_visit") and not out["first_visit"].get("error"):
            out["visit_evidence"] = _visit_evidence(req, out["first_visit"]["boundary_unix"])
        elif req.get("visit") and not req["visit"].get("keep_netlog"):
            _unlink(req["visit"].get("netlog"))
    return out


def _end_trial_context(req: dict, driver, context, out: dict) -> None:
    """A kept browser's trial context ended; a browser that cannot end it is ended itself."""
    from plt_bench import browsers
    try:
        browsers.get(req.get("browser", browsers.DEFAULT)).end_context(driver, context)
        out["strays_killed"], out["strays_left"] = 0, []
    except Exception as e:  # noqa: BLE001 - the next trial starts a new browser
        out["context_error"] = f"{type(e).__name__}: {e}"[:300]
        out["strays_killed"] = end_kept()
        out["strays_left"] = []


def _unlink(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


# A repeat visit's first load: its Navigation Timing's figures, read as a trial's are.
FIRST_NAV_JS = "const e = performance.getEntriesByType('navigation')[0]; return e ? e.toJSON() : null;"


def _first_visit(driver, req: dict) -> dict:
    """Load the page once in this browser, wait for its last requests (its favicon) to end, close
    its connections and clear its HTTP cache where asked (each browser its own way:
    Browser.end_first_visit), then leave it for about:blank: the next navigation is a repeat visit.
    boundary_unix: the wall-clock moment after which the server's log and the browser's belong to
    the repeat."""
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from plt_bench import browsers
    visit = req["visit"]
    driver.set_page_load_timeout(req["timeout_s"])
    t0 = time.monotonic()
    try:
        driver.get(req["url"])
        nav = driver.execute_script(FIRST_NAV_JS)
        load_s = time.monotonic() - t0
        time.sleep(visit.get("settle_s", 0.5))
        browsers.get(req.get("browser", browsers.DEFAULT)).end_first_visit(driver, visit.get("cache") == "cleared")
        # as long again: a closed QUIC connection drains for three PTOs (RFC 9000 10.2), and Firefox
        # opens no new connection to its origin until it is gone (measured at 100 ms RTT: the repeat's
        # page waited 306 ms for it, its TTFB 417 ms where 0-RTT gives one RTT). A visitor coming back
        # finds no connection draining
        time.sleep(visit.get("settle_s", 0.5))
        driver.get("about:blank")
    except TimeoutException:
        return {"error": f"timeout: the page did not load within {req['timeout_s']:g}s"}
    except WebDriverException as e:
        return {"error": (e.msg or str(e)).strip().splitlines()[0]}
    time.sleep(0.1)
    return {"nav": nav, "load_s": load_s, "boundary_unix": time.time()}


def _visit_evidence(req: dict, boundary_unix: float) -> dict:
    """What the repeat visit's connections did, from the browser's own log after the boundary
    (Browser.visit_evidence: 0-RTT per QUIC session, resumption per TLS-over-TCP handshake). The log
    is then removed unless it is the trial's capture."""
    from plt_bench import browsers
    visit = req["visit"]
    path = visit.get("netlog")
    b = browsers.get(req.get("browser", browsers.DEFAULT))
    try:
        return b.visit_evidence(path, boundary_unix)
    except (OSError, ValueError) as e:
        return {"quic_zero_rtt": [], "tcp_tls_resumed": [],
                "error": f"the browser's log could not be read: {type(e).__name__}: {e}"[:300]}
    finally:
        if not visit.get("keep_netlog"):
            for f in b.own_log_files(path):
                _unlink(f)


# A replay's fetched objects (fonts, JSON: replay.element_for) do not hold the load event: on a busy
# machine one ended after the entries were read, and the trial failed with "0 Resource Timing entries"
# for it (2026-11-26, beside a live campaign). The worker waits for every expected object's entry,
# RESOURCE_WAIT_MS at most (the judgement then says what is missing), before reading them.
RESOURCE_WAIT_MS = 3000
RESOURCES_JS = """
const done = arguments[arguments.length - 1];
const want = %s, t0 = performance.now();
const key = n => n.split('://').slice(1).join('://');
const check = () => {
  const have = new Set(performance.getEntriesByType('resource').map(x => key(x.name)));
  const missing = want.filter(w => !have.has(w));
  if (!missing.length || performance.now() - t0 > %d) { done({missing: missing, waited_ms: performance.now() - t0}); }
  else { setTimeout(check, 20); }
};
check();
"""


def _paint(driver, quiet_ms: float) -> dict:
    """The page's paint metrics once it has settled (PAINT_JS), or why there are none."""
    wait_s = 10 + (quiet_ms + PAINT_WAIT_MS) / 1000
    return _page_script(driver, paint_js(quiet_ms), wait_s, "the paint metrics",
                        f"the paint metrics were not read within {wait_s:g} s (no frame was drawn)")


def _await_workload(driver, await_s: float) -> dict:
    """The page's own figures, once its workload is done (a bulk download), or why there are none."""
    return _page_script(driver, AWAIT_JS, await_s, "the page's workload",
                        f"timeout: the page's workload did not end within {await_s:g}s")


def _page_script(driver, js: str, timeout_s: float, what: str, timed_out: str) -> dict:
    """What an asynchronous script of the page hands over (an object), or {"error": why not}."""
    from selenium.common.exceptions import TimeoutException, WebDriverException
    driver.set_script_timeout(timeout_s)
    try:
        got = driver.execute_async_script(js)
    except TimeoutException:
        return {"error": timed_out}
    except WebDriverException as e:
        return {"error": f"could not read {what}: {(e.msg or str(e)).strip().splitlines()[0]}"}
    return got if isinstance(got, dict) else {"error": f"{what} answered {type(got).__name__}"}


def _failed(e: Exception) -> str:
    """An exception said in one line with where it was raised (a capture's failure, in the answer)."""
    import traceback
    where = traceback.extract_tb(e.__traceback__)[-1]
    return f"{type(e).__name__}: {e} ({os.path.basename(where.filename)}:{where.lineno})"[:300]


def _har_prepare(driver, req: dict, out: dict) -> None:
    """What the browser needs to record the trial's requests (Browser.har_prepare); one that fails
    leaves the trial standing and its answer saying why ({"har": {"error"}})."""
    from plt_bench import browsers
    try:
        browsers.get(req.get("browser", browsers.DEFAULT)).har_prepare(driver, bool(req.get("har_bodies")))
    except Exception as e:  # noqa: BLE001 - said in the answer, the trial stands
        out["har"] = {"error": _failed(e)}


def _write_har(driver, req: dict, out: dict) -> dict:
    """The trial's HAR (Browser.har_log) written where the request asks: {"entries": n}, or {"error":
    why} (a capture that fails leaves the trial standing)."""
    from plt_bench import browsers
    try:
        log = browsers.get(req.get("browser", browsers.DEFAULT)).har_log(
            driver, out.get("nav"), out.get("final_url") or "", bool(req.get("har_bodies")))
        with open(req["har_path"], "w") as f:
            json.dump(log, f)
        return {"entries": len(log["log"]["entries"])}
    except Exception as e:  # noqa: BLE001 - said in the answer, the trial stands
        return {"error": _failed(e)}


def _sweep(profile_dir: str, out: dict, below_too: bool = True, also: set[int] = frozenset()) -> None:
    """End every process of the trial: the worker's descendants and whatever names the profile
    (below_too False: only what names it and the processes `also`, a kept browser's tree)."""
    from plt_bench import procs
    procs.reap_children()  # the browser's exited processes, reparented here
    table = procs.table()  # one walk of /proc: parents, states and command lines
    below = procs.descendants({p: row[0] for p, row in table.items()}, os.getpid()) if below_too else set()
    below |= {p for p in also if p in table}
    named = {p for p, row in table.items() if profile_dir in row[2] and p != os.getpid()} - below
    strays = {p for p in below | named if table[p][1] != "Z"}
    # what is below the worker is waited for until reaped, zombies too: a browser's process whose
    # parent (the driver) dies in this kill is reparented here after the kill's last wait; left a
    # zombie, it outlived the testbed where the machine's init does not reap (a container's)
    left = procs.kill_and_reap(below, reap=True, until_reaped=True) if below else []
    left += procs.kill_and_reap({p for p in named if table[p][1] != "Z"}, reap=True) if named else []
    out["strays_killed"] = len(strays)
    out["strays_left"] = left


# A fixed JavaScript loop, timed inside the page (issue 45): its time under a CPU budget over its time
# at full speed is the budget's slowdown as the page's own scripts feel it. A function warmed up first
# (called on small counts until the JIT has optimized it: timed cold, a loop at the top of a script ran
# 3-4x slower and kept speeding up run after run), then timed CPU_LOOP_RUNS times, each kept: about
# 200 ms a run at full speed on this machine in Chromium and 40 ms in Firefox. Chromium runs it 3x
# slower through chromedriver than from the page's own script (65 ms headless without a driver): the
# driver's DevTools session is attached; the same for every trial, so the ratio stands.
CPU_LOOP_JS = """
function work(n) { let x = 0; for (let i = 0; i < n; i++) { x = (x + Math.imul(i, 2654435761)) | 0; } return x; }
let s = 0;
for (let w = 0; w < 30; w++) { s ^= work(200000); }
const times = [];
for (let r = 0; r < arguments[1]; r++) {
  const t0 = performance.now();
  s ^= work(arguments[0]);
  times.push(performance.now() - t0);
}
return [times, s];
"""
CPU_LOOP_ITERATIONS = 30_000_000
CPU_LOOP_RUNS = 3


def _cpu_loop(driver, asked: dict) -> dict:
    """The loop's times in ms, and the group's CPU time over the whole script against its wall time:
    the loop is one thread, so at a full, uncontended core the two agree, and their ratio
    (slowdown) is the factor by which the budget (or anything else) held it back; or why there are
    none. asked: {"usage": [the group's usage file, its kind]} (device.cgroup.usage_ns)."""
    from selenium.common.exceptions import WebDriverException

    from plt_bench.device.cgroup import usage_ns
    path, kind = asked["usage"]

    def used() -> int:
        with open(path) as f:
            return usage_ns(kind, f.read())
    try:
        driver.set_script_timeout(120)
        u0, t0 = used(), time.monotonic()
        times, _ = driver.execute_script(CPU_LOOP_JS, CPU_LOOP_ITERATIONS, CPU_LOOP_RUNS)
        wall_s, cpu_s = time.monotonic() - t0, (used() - u0) / 1e9
        return {"times_ms": [round(float(t), 3) for t in times], "wall_ms": round(wall_s * 1000, 3),
                "group_cpu_ms": round(cpu_s * 1000, 3), "slowdown": round(wall_s / cpu_s, 4) if cpu_s > 0 else None}
    except (WebDriverException, OSError) as e:
        return {"error": f"{type(e).__name__}: {(getattr(e, 'msg', None) or str(e)).splitlines()[0]}"[:300]}


def _benchmark(driver, warmups: int, runs: int, strings: int, copies: int) -> dict:
    """Lighthouse's BenchmarkIndex, run in the page (device.calibrate.BENCHMARK_JS) on a fixed work
    (strings and copies repetitions): {"runs": [...]} after `warmups` runs thrown away, or {"error"}."""
    from selenium.common.exceptions import WebDriverException

    from plt_bench.device.calibrate import BENCHMARK_JS
    try:
        driver.set_script_timeout(600)  # a small budget's runs are long (a second at full speed, 100 at 0.01)
        return {"runs": [float(x) for x in driver.execute_script(BENCHMARK_JS, warmups, runs, strings, copies)]}
    except WebDriverException as e:
        return {"error": f"{type(e).__name__}: {(getattr(e, 'msg', None) or str(e)).splitlines()[0]}"[:300]}


def _start_cpu(driver, req: dict):
    """The tree's CPU before the navigation (the browser's start-up; a kept browser's, process by
    process), and the sampler started."""
    from plt_bench.cpu import Sampler, tree_cpu, tree_pids, tree_sources
    try:
        pid = driver.service.process.pid
        sampler = Sampler(tree_sources(pid), req.get("cpu_interval_s", 0.1),
                          keep_series=bool(req.get("cpu_series"))).start()
        sampler.mark()  # the series' origin: the navigation begins now
        # the totals' own reading, right after the sampler's (as at the end), so the two agree
        return sampler, (tree_pids(pid) if req.get("keep") else tree_cpu(pid))
    except Exception:  # CPU figures are informative; the trial stands without them
        return None, None


def _end_cpu(driver, sampler, cpu0, out: dict) -> None:
    """The trial's CPU per role from the navigation on; launch: a fresh browser's start-up (a kept
    browser's earlier trials are not this one's: None)."""
    from plt_bench.cpu import difference, pid_difference, tree_cpu, tree_pids
    kept = out.get("browser_start") == "kept"
    try:
        if sampler is not None:
            sampler.stop()
        pid = driver.service.process.pid
        cpu1 = tree_pids(pid) if kept else tree_cpu(pid)
    except Exception:
        out["cpu"] = None
        return
    if kept:
        out["cpu"] = {"roles": pid_difference(cpu0 or {}, cpu1), "launch": None}
    elif cpu0 is None:
        out["cpu"] = {"roles": cpu1, "launch": None}
        return
    else:
        out["cpu"] = {"roles": difference(cpu0, cpu1), "launch": cpu0}
    if sampler is not None:
        out["cpu"]["sampler"] = sampler.info()
        if sampler.keep_series:
            out["cpu_series"] = sampler.series()


def main() -> int:
    from plt_bench import procs
    procs.become_subreaper()
    print(json.dumps({"hello": True, "versions": versions()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:  # a load's answer is a records.WorkerAnswer; prepare's and discard's are their own
            if "prepare" in req:
                reply = prepare(req["prepare"])
            elif req.get("discard"):
                reply = {"discarded": discard()}
            else:
                reply = one_trial(req)
        except Exception as e:  # never leave the parent without an answer
            ans = {"nav": None, "error": f"worker error: {type(e).__name__}: {e}"}
            reply = ans
        print(json.dumps(reply), flush=True)
    discard()  # the parent closed the pipe: a prepared browser goes with the worker
    procs.reap_children()
    return 0


if __name__ == "__main__":
    sys.exit(main())
