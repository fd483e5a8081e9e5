"""A browser, forced to one protocol, loading one page per fresh browser and profile: the
judgement of a trial from what both ends saw, and the parent's end of the worker's pipe.

The browser runs in the client namespace through a long-lived worker process
(plt_bench.browser_worker) that the testbed starts there with `ip netns exec`; the worker
starts a fresh driver, browser and profile for every trial and ends them after. What differs
between browsers (their launch, flags and prefs, their driver) is in plt_bench.browsers.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from . import cmd, protocols
from .errors import BrowserError
from .pages import HOST, url_host, url_path  # noqa: F401 - url_* are the browser's names too

if TYPE_CHECKING:
    from .browsers.drivers import ChromiumBuild
    from .pages import Page
    from .records import WorkerAnswer

def _ms(nav: dict, end: str, start: str = "startTime") -> float | None:
    a, b = nav.get(start), nav.get(end)
    if a is None or b is None or b <= 0:
        return None
    return float(b) - float(a)


def timings(nav: dict, untimed: list[str] = ()) -> dict:
    """Named durations in ms from a PerformanceNavigationTiming entry (None where not applicable, and
    where the browser did not time the field: untimed, browsers.base.Browser.untimed)."""
    nav = {k: v for k, v in nav.items() if k not in untimed}
    tls = None
    if nav.get("secureConnectionStart") and nav.get("connectEnd"):
        tls = float(nav["connectEnd"]) - float(nav["secureConnectionStart"])
    return {
        "plt_ms": _ms(nav, "loadEventEnd"),
        "dns_ms": _ms(nav, "domainLookupEnd", "domainLookupStart"),
        "connect_ms": _ms(nav, "connectEnd", "connectStart"),
        "tls_ms": tls,
        "ttfb_ms": _ms(nav, "responseStart"),
        "response_end_ms": _ms(nav, "responseEnd"),
        "dcl_ms": _ms(nav, "domContentLoadedEventEnd"),
    }


def is_error_page(load: dict) -> bool:
    """Chromium showed its error page (or the navigation raised) instead of the page."""
    return bool(load.get("error") or load.get("error_code")
                or (load.get("final_url") or "").startswith("chrome-error://"))


def _found(hop: str | None) -> tuple[str | None, str | None]:
    """(next hop, protocol) of a request whose protocol the browser found (discovery): its own, if it
    is one plt-bench knows; else (None, why)."""
    p = protocols.by_next_hop(hop)
    return (p.next_hop, p.name) if p else (None, f"carried over '{hop}', none of {', '.join(protocols.NAMES)}")


def judge(proto: str, expected_bytes: int, load: dict, server_entries: list[dict] | None,
          revalidated: bool = False, discovered: bool = False) -> tuple[str, str | None]:
    """('ok', None) or ('failed', reason) for one load; every check must pass for 'ok'.

    The client's word (Navigation Timing) and the server's (its access log, in protocol terms:
    servers.base) must both say
    the page came whole, with status 200, over the protocol that was asked for. revalidated: a
    repeat visit with its cache kept, where the server may answer 304 without a body (the page is
    then the browser's cached copy, whole). discovered: the browser found its protocol (dns.py):
    whichever it is, both ends must name the same one.
    """
    if load.get("error"):
        return "failed", load["error"]
    nav = load.get("nav")
    if is_error_page(load) or not nav:
        code = load.get("error_code") or "unknown error"
        return "failed", f"error page: {code}"
    status = nav.get("responseStatus")
    if status != 200:
        return "failed", f"responseStatus {status}, not 200"
    hop, want = nav.get("nextHopProtocol"), protocols.get(proto)
    if discovered:
        found, name = _found(hop)
        if found is None:
            return "failed", f"the page {name}"
        want = protocols.get(name)
    if hop != want.next_hop:
        return "failed", f"protocol mismatch: nextHopProtocol '{hop}', expected '{want.next_hop}'"
    body = nav.get("decodedBodySize")
    if body != expected_bytes:
        return "failed", f"body size {body} bytes, expected {expected_bytes}"
    if not nav.get("loadEventEnd"):
        return "failed", "load event never ended"
    if server_entries is not None:
        want_proto = want.name  # the server's entries are in protocol terms (servers.base)
        if not server_entries:
            return "failed", "the server logged no request for this trial"
        if len(server_entries) != 1:
            return "failed", f"the server logged {len(server_entries)} requests for this trial, expected 1"
        e = server_entries[0]
        if e["proto"] != want_proto:
            return "failed", f"server saw {e['proto']}, expected {want_proto}"
        if revalidated and e["status"] == 304 and not e["size"]:
            return "ok", None
        if e["status"] != 200 or e["size"] != expected_bytes:
            return "failed", f"server sent status {e['status']} with {e['size']} bytes, expected 200 with {expected_bytes}"
    return "ok", None


def protocol_mix(nav: dict, resources: list[dict] | None, page_host: str) -> dict:
    """What carried a discovery trial's requests, as the browser says (pure; judge and judge_objects
    hold the server to the same): the page's next hop, requests per protocol per origin (the page's
    own first; an object from the cache counts for none), and when the first request over h3 began
    (ms from startTime; None: no request went over h3)."""
    per: dict[str, dict[str, int]] = {}
    starts = []
    for host, hop, start in [(page_host, nav.get("nextHopProtocol"), 0.0)] + [
            (url_host(r.get("name")), r.get("nextHopProtocol"), r.get("startTime")) for r in resources or []]:
        p = protocols.by_next_hop(hop)
        if p is None:  # from the cache: no request
            continue
        per.setdefault(host, {}).setdefault(p.name, 0)
        per[host][p.name] += 1
        if p.name == "h3" and start is not None:
            starts.append(float(start))
    return {"page": nav.get("nextHopProtocol"), "per_origin": per, "first_h3_ms": min(starts) if starts else None}


def from_cache(entry: dict, size_bytes: int) -> bool:
    """A Resource Timing entry of an object the browser took whole from its own cache: nothing
    transferred, every byte decoded."""
    return entry.get("transferSize") == 0 and entry.get("decodedBodySize") == size_bytes


def revalidated(entry: dict, logged: list[dict], size_bytes: int, hop: str, proto: str) -> bool:
    """An object a repeat visit revalidated: the server logged its one request, answered 304 without a
    body over the asked protocol, and the browser's one entry holds every byte (from its cache), over
    that protocol, with the status of the cached response (200) or the 304 itself, having exchanged
    something with the server (transferSize > 0: its headers; 0 would say no request was made)."""
    return (len(logged) == 1 and logged[0].get("status") == 304 and not logged[0].get("size")
            and logged[0].get("proto") == proto and entry.get("nextHopProtocol") == hop
            and (entry.get("transferSize") or 0) > 0
            and entry.get("decodedBodySize") == size_bytes and entry.get("responseStatus") in (200, 304))


def judge_objects(proto: str, page: "Page", resources: list[dict] | None,
                  server_entries: list[dict] | None, discovered: bool = False) -> tuple[int, str | None]:
    """(objects proven, why the trial fails or None) for a multi-object page. An object is proven
    when the browser's word (its one Resource Timing entry: every byte, over the asked protocol, and
    status 200, or 0 where Chromium hides a cross-origin image's status) and, where the server's log
    is read, the server's (its URI once on its origin: 200, every byte, over the protocol) both say
    so. A many-origin page's objects are told apart by their host as well as their URI. On a
    repeat visit with the cache kept, an object may instead come whole from the browser's cache,
    with no request at all (from_cache; the server's log must then have none), or be revalidated:
    its one request answered 304 without a body over the asked protocol (a sub-document, which is
    served no-cache as a page is), the browser holding every byte (revalidated). discovered: each
    object over the protocol the browser found for it (dns.py), the server's log naming the same."""
    asked = protocols.get(proto).next_hop, protocols.get(proto).name
    problems: list[str] = []
    proven = 0
    by_url: dict[tuple[str, str], list[dict]] = {}
    for r in resources or []:
        by_url.setdefault((url_host(r.get("name")), url_path(r.get("name"))), []).append(r)
    logged: dict[tuple[str, str], list[dict]] = {}
    for e in server_entries or []:
        logged.setdefault((e.get("host") or HOST, e.get("uri")), []).append(e)
    for host, uri, size in page.object_specs():  # its images, or its requests
        seen, got = by_url.get((host, uri), []), logged.get((host, uri), [])
        where = uri if host == HOST else f"{host}{uri}"
        hop, want_proto = asked
        cached = len(seen) == 1 and page.visit == "repeat-warm" and not got and from_cache(seen[0], size)
        if discovered and len(seen) == 1 and not cached:
            hop, want_proto = _found(seen[0].get("nextHopProtocol"))
            if hop is None:
                problems.append(f"{where}: {want_proto}")
                continue
        status_ok = seen and (seen[0].get("responseStatus") == 200
                              or (host != HOST and seen[0].get("responseStatus") == 0))
        if cached:
            proven += 1
        elif (len(seen) == 1 and page.visit == "repeat-warm" and server_entries is not None
              and revalidated(seen[0], got, size, hop, want_proto)):
            proven += 1
        elif len(seen) != 1:
            problems.append(f"{where}: the browser has {len(seen)} Resource Timing entries for it, expected 1")
        elif seen[0].get("nextHopProtocol") != hop:
            problems.append(f"{where}: carried over '{seen[0].get('nextHopProtocol')}', expected '{hop}'")
        elif not status_ok or seen[0].get("decodedBodySize") != size:
            problems.append(f"{where}: the browser saw status {seen[0].get('responseStatus')} with "
                            f"{seen[0].get('decodedBodySize')} bytes, expected 200 with {size}")
        elif server_entries is not None and len(got) != 1:
            problems.append(f"{where}: the server logged {len(got)} requests for it, expected 1")
        elif server_entries is not None and got[0].get("proto") != want_proto:
            problems.append(f"{where}: the server saw {got[0].get('proto')}, expected {want_proto}")
        elif server_entries is not None and (got[0].get("status") != 200 or got[0].get("size") != size):
            problems.append(f"{where}: the server sent status {got[0].get('status')} with {got[0].get('size')} bytes, "
                            f"expected 200 with {size}")
        else:
            proven += 1
    if not problems:
        return proven, None
    what = "requests" if page.requests else "objects"
    return proven, f"{len(problems)} of {page.fetched} {what} not proven; first: {problems[0]}"


FAVICON = "/favicon.ico"  # Chromium asks for it when a page names no icon: a recording (DevTools') never holds it
UNRECORDED_MAX = 0  # a replayed trial with more requests the recording did not hold is not a clean ok


def judge_archive(proto: str, hosts: set[str], document_bytes: int | None, load: dict,
                  server_entries: list[dict], replayed: bool = True,
                  spoke: dict[str, str] | None = None,
                  own: frozenset[tuple[str, str]] = frozenset()) -> tuple[str, str | None, int, dict]:
    """(status, reason, objects proven (the document not counted), evidence) for a load of a recording replayed as recorded
    (plt_bench.archive; server_entries: Caddy's entries for the recorded hosts in the trial's time).

    The document: the browser's Navigation Timing says 200, the asked protocol, every byte served
    (document_bytes: the recorded body with the replay's script), and a load event. Each response the
    replay served (replayd matched it: exact or by query): the server saw the asked protocol, and where
    the top document's Resource Timing has its URL, the browser did too, with the bytes the server
    sent; a response the top document has no entry for (a redirect's hop, a request of an iframe or a
    worker) is counted as unseen, not failed. A browser entry on a recorded host that moved bytes
    with nothing in the server's log fails the trial. Requests the recording did not hold (404 at
    once) fail it when over UNRECORDED_MAX; those the browser asks for itself (own: the icons the
    document declares, as (host, path), and /favicon.ico), which no page asks for and a recording may
    lack (a recorded icon that does not decode makes Chromium ask for the next one declared), are
    counted and listed ("browser_own") and fail nothing. replayed=False: a page of a folder
    served as it is (url:), proven the same way, its server's answers taken as they come.
    As recorded (protocols.AS_RECORDED), each host's own protocol is asked (spoke: host -> h3 | h2 |
    h1), and the evidence counts the responses served per protocol ("protocols": the mix)."""
    def want_of(host):
        return protocols.for_origin(proto, (spoke or {}).get(host, ""))
    evidence: dict = {"served": 0, "proven": 0, "query_matched": [], "unseen": [], "unrecorded": [], "preflights": 0,
                      "cached": 0, "browser_own": []}
    if protocols.get(proto).per_origin:
        evidence["protocols"] = {}
    if load.get("error"):
        return "failed", load["error"], 0, evidence
    nav = load.get("nav")
    if is_error_page(load) or not nav:
        return "failed", f"error page: {load.get('error_code') or 'unknown error'}", 0, evidence
    problems: list[str] = []
    if nav.get("responseStatus") != 200:
        problems.append(f"the document: responseStatus {nav.get('responseStatus')}, not 200")
    try:
        want = want_of(url_host(nav.get("name")))
    except ValueError:
        return "failed", f"the document's host {url_host(nav.get('name'))}: no protocol recorded for it", 0, evidence
    if nav.get("nextHopProtocol") != want.next_hop:
        problems.append(f"the document: nextHopProtocol '{nav.get('nextHopProtocol')}', expected '{want.next_hop}'")
    if document_bytes is not None and nav.get("decodedBodySize") != document_bytes:
        problems.append(f"the document: {nav.get('decodedBodySize')} bytes, expected {document_bytes} as served")
    if not nav.get("loadEventEnd"):
        problems.append("the load event never ended")
    seen: dict[tuple[str, str], list[dict]] = {}
    for r in [dict(nav, initiatorType="navigation"), *(load.get("resources") or [])]:
        seen.setdefault((url_host(r.get("name")), url_path(r.get("name"))), []).append(r)
    logged: set[tuple[str, str]] = set()
    for e in server_entries:
        key, where = (e.get("host"), e.get("uri")), f"{e.get('host')}{e.get('uri')}"
        logged.add(key)
        if not replayed:
            e = {**e, "replay": "miss" if e.get("status") == 404 else "exact"}
        try:
            want = want_of(e.get("host"))
        except ValueError:
            problems.append(f"{where}: no protocol recorded for {e.get('host')}")
            continue
        if e.get("proto") != want.name:
            problems.append(f"{where}: the server saw {e.get('proto')}, expected {want.name}")
            continue
        if e.get("replay") == "miss":
            path = url_path(f"https://{e.get('host')}{e.get('uri') or '/'}")
            mine = path == FAVICON or (e.get("host"), path) in own
            evidence["browser_own" if mine else "unrecorded"].append(where[:300])
            continue
        if e.get("replay") == "preflight":
            evidence["preflights"] += 1
            continue
        if e.get("replay") not in ("exact", "query"):
            problems.append(f"{where}: answered by the generated pages' site, not the replay")
            continue
        evidence["served"] += 1
        if "protocols" in evidence:  # the server saw the origin's own protocol (and the browser, below, where it has the entry)
            evidence["protocols"][want.name] = evidence["protocols"].get(want.name, 0) + 1
        if e.get("replay") == "query":
            evidence["query_matched"].append(where[:300])
        entries = seen.get(key) or []
        if not entries:
            evidence["unseen"].append(f"{e.get('status')} {where[:300]}")
            continue
        r = entries[0]
        if r.get("nextHopProtocol") != want.next_hop:
            problems.append(f"{where}: the browser's entry says '{r.get('nextHopProtocol')}', expected '{want.next_hop}'")
        elif r.get("initiatorType") != "navigation" and (r.get("transferSize") or 0) > 0 and \
                r.get("encodedBodySize") != e.get("size"):
            problems.append(f"{where}: the browser received {r.get('encodedBodySize')} body bytes, the server sent "
                            f"{e.get('size')}")
        else:
            evidence["proven"] += 1
            evidence["document_proven"] = evidence.get("document_proven") or r.get("initiatorType") == "navigation"
    for key, entries in seen.items():
        if key[0] in hosts and key not in logged:
            if all((r.get("transferSize") or 0) == 0 for r in entries):
                evidence["cached"] += len(entries)  # the memory cache: one request served twice
            else:
                problems.append(f"{key[0]}{key[1][:200]}: the browser fetched it over the network, the server logged "
                                "nothing")
    n = len(evidence["unrecorded"])
    if not problems and n > UNRECORDED_MAX:
        problems.append(f"{n} request(s) the recording does not hold (answered 404; at most {UNRECORDED_MAX} for a "
                        f"clean trial): {', '.join(evidence['unrecorded'][:3])}")
    objects = evidence["proven"] - bool(evidence.get("document_proven"))  # the recording's objects, as objects_ok
    if problems:
        return "failed", (f"{len(problems)} problem(s) in the {'replay' if replayed else 'load'}; first: "
                          f"{problems[0]}"), objects, evidence
    return "ok", None, objects, evidence


def judge_bulk(proto: str, page: "Page", work: dict | None, server_entries: list[dict] | None) -> str | None:
    """Why a bulk page's download does not count, or None: the script read the body over the whole
    duration (it did not end first), and the server's log has the one request of the trial for it,
    over the asked protocol, with at least the bytes the browser counted."""
    from .pages import BULK_URI
    if not work:
        return "the bulk page's script gave no figures"
    if work.get("error"):
        return f"bulk download: {work['error']}"
    if work.get("status") != 200:
        return f"bulk download: status {work.get('status')}, not 200"
    if work.get("ended_ms") is not None:
        return (f"bulk download: the body ended after {work['ended_ms'] / 1000:.1f} s, before the "
                f"{page.bulk_ms / 1000:g} s asked")
    if not work.get("bytes"):
        return f"bulk download: no byte arrived in {page.bulk_ms / 1000:g} s"
    if server_entries is not None:
        got = [e for e in server_entries if (e.get("uri") or "").split("?")[0] == BULK_URI]
        if len(got) != 1:
            return f"bulk download: the server logged {len(got)} requests of {BULK_URI} for the trial, expected 1"
        want_proto = protocols.get(proto).name
        if got[0].get("proto") != want_proto:
            return f"bulk download: the server saw {got[0].get('proto')}, expected {want_proto}"
        if not isinstance(got[0].get("size"), int) or got[0]["size"] < work["bytes"]:
            return (f"bulk download: the server logged {got[0].get('size')} bytes sent, fewer than the "
                    f"{work['bytes']} the browser read")
    return None


def judge_requests(page: "Page", work: dict | None) -> str | None:
    """Why a request page's series does not count by its script's word, or None: every request
    answered 200 without an error (each request's proof over the protocol is judge_objects')."""
    if not work:
        return "requests: the page's script gave no figures"
    if work.get("error"):
        return f"requests: {work['error']}"
    if work.get("ok") != page.requests:
        return f"requests: {work.get('ok')} of {page.requests} answered 200"
    return None


def connections(server_entries: list[dict] | None) -> int | None:
    """How many connections carried a trial's requests: the client ports in the server's log (HTTP/1.1
    opens up to six per host; HTTP/2 and HTTP/3 one), or None when the log gives no ports."""
    ports = {e.get("remote_port") for e in server_entries or [] if e.get("remote_port")}
    return len(ports) or None


def resumed_connections(server_entries: list[dict] | None) -> int | None:
    """How many connections of a load resumed a TLS session, as the server's log says (its client
    ports whose requests say resumed); None where it says nothing."""
    said = {(e.get("host"), e.get("remote_port")): e["resumed"] for e in server_entries or []
            if e.get("resumed") is not None and e.get("remote_port")}
    return sum(bool(v) for v in said.values()) if said else None


def zero_rtt_summary(states: list[str]) -> str | None:
    """A repeat visit's QUIC sessions' 0-RTT states (net-log) in a word: succeeded, rejected, not
    attempted, or each with its count where they differ; None without a QUIC session."""
    words = {"AttemptedAndSucceeded": "succeeded", "AttemptedAndRejected": "rejected", "NotAttempted": "not attempted"}
    said = [words.get(s, str(s)) for s in states]
    if not said:
        return None
    if len(set(said)) == 1:
        return said[0]
    return ", ".join(f"{w} {said.count(w)}" for w in dict.fromkeys(said))


def connections_per_origin(server_entries: list[dict] | None) -> dict[str, int]:
    """{host: connections} of a trial's requests: the client ports per origin in the server's log
    (each origin has its own address, so a connection serves one origin); {} without ports."""
    ports: dict[str, set] = {}
    for e in server_entries or []:
        if e.get("remote_port"):
            ports.setdefault(e.get("host") or HOST, set()).add(e["remote_port"])
    return {h: len(p) for h, p in sorted(ports.items(), key=lambda kv: (kv[0] != HOST, kv[0]))}


def _waited(p: dict) -> str:
    return f"{p['waited_ms']:.0f} ms after the load" if isinstance(p.get("waited_ms"), (int, float)) else "after the load"


def paint_fields(paint: dict | None, loaded: bool) -> dict:
    """A trial's paint metrics (records.Trial: fcp_ms, lcp_ms, lcp_element, lcp_url, paint_reason)
    from the worker's figures (browser_worker.PAINT_JS). A metric Chromium did not report is None
    with the reason, never zero. Nothing for a load that failed (no page was painted)."""
    if not loaded:
        return {}
    p = paint or {}
    lcp = p.get("lcp") or {}
    why = []
    if p.get("error"):
        why.append(f"paint metrics not read: {p['error']}")
    elif p.get("visibility") not in (None, "visible"):
        why.append(f"the page was {p['visibility']}: Chromium reports no LCP for it")
    if p.get("fcp_ms") is None and not why:
        why.append(f"no first-contentful-paint entry {_waited(p)}: nothing contentful was painted")
    if not lcp and not p.get("error"):
        why.append(f"no largest-contentful-paint candidate {_waited(p)}: no text or image qualified (an image under "
                   "0.05 bits per pixel, or filling the viewport, does not count)")
    if p.get("settled") is False and not p.get("error"):
        why.append(f"the page never settled (no quiet {p.get('quiet_ms', 0):.0f} ms within {_waited(p)}): the "
                   "figures are its last records then")
    start = lcp.get("start_ms") or lcp.get("render_ms") or lcp.get("load_ms")
    waited = p.get("waited_ms")
    return {"fcp_ms": p.get("fcp_ms"), "lcp_ms": float(start) if start else None, "lcp_element": lcp.get("element"),
            "lcp_url": lcp.get("url") or None, "paint_reason": "; ".join(why) or None,
            "paint_wait_ms": round(float(waited), 1) if isinstance(waited, (int, float)) else None,
            "viewport": viewport_label(p.get("viewport"))}


def viewport_label(viewport) -> str | None:
    """The page's window as a trial stores it (pure): 412x823@1.75 from [innerWidth, innerHeight,
    devicePixelRatio, ...]; None without one."""
    if not isinstance(viewport, list) or len(viewport) < 3 or not all(isinstance(x, (int, float)) for x in viewport[:3]):
        return None
    return f"{viewport[0]:g}x{viewport[1]:g}@{viewport[2]:g}"


class BrowserWorker:
    """The parent's end of a browser worker running in a namespace (or here, when ns is None)."""

    def __init__(self, ns: str | None, log_path: Path, browser: "ChromiumBuild | None" = None):
        self.ns = ns
        self.log_path = log_path
        self.browser = browser  # the binary and driver the worker starts (None: Debian's)
        self.proc: subprocess.Popen | None = None
        self._preparing = False  # a prepare request's answer is still to be read (settle)
        self.env: dict[str, str] = {}  # more of the worker's environment (the sandbox's user and home)

    # The worker's hello (Python, Selenium's import, both binaries' --version) took over 30 s in a
    # TCG guest beside a busy host; only a hung worker waits this long.
    def start(self, timeout_s: float = 180.0) -> dict:
        # the log path in the argv marks the worker as this testbed's (clean finds it by its run folder)
        argv = cmd.in_netns(self.ns, [sys.executable, "-m", "plt_bench.browser_worker", str(self.log_path)])
        env = dict(os.environ)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
        # Chromium's own files in the run folder, which goes with the testbed: its temporary folders
        # (singleton socket, scoped dirs: one killed mid-trial left them in /tmp, 137 there after
        # the test suites) and its crash reporter's database (else ~/.config/chromium/Crash Reports)
        tmp = self.log_path.parent / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        env.update(TMPDIR=str(tmp), XDG_CONFIG_HOME=str(tmp / "config"), XDG_CACHE_HOME=str(tmp / "cache"))
        if self.browser:
            env.update(PLT_BENCH_BROWSER=self.browser.binary, PLT_BENCH_DRIVER=self.browser.driver)
        env.update(self.env)  # the browsers' user, when they run sandboxed (browsers.sandbox.worker_env)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env=env, start_new_session=True, text=True, bufsize=1)
        return self._read(timeout_s)  # the worker says hello with its versions

    def _read(self, timeout_s: float) -> dict:
        assert self.proc and self.proc.stdout
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            raise BrowserError(f"browser worker did not answer within {timeout_s:.0f}s (log: {self.log_path})")
        line = self.proc.stdout.readline()
        if not line:
            raise BrowserError(f"browser worker exited with {self.proc.wait()} (log: {self.log_path})")
        return json.loads(line)

    def _send(self, request: dict) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise BrowserError("browser worker is not running")
        assert self.proc.stdin
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise BrowserError(f"browser worker died (log: {self.log_path})") from None

    # a prepared launch that takes longer than this is a hung worker (a launch takes 0.3-0.5 s here)
    PREPARE_TIMEOUT_S = 180.0

    def prepare(self, request: dict) -> None:
        """Have the worker start the browser of a request to come (browser_worker.prepare) and
        return at once: the answer is read before the next request (settle)."""
        self.settle()
        self._send({"prepare": request})
        self._preparing = True

    def settle(self) -> dict | None:
        """The answer to a prepare request still unread, if any ({"prepared": bool, ...})."""
        if not self._preparing:
            return None
        self._preparing = False
        return self._read(self.PREPARE_TIMEOUT_S)

    def discard(self) -> None:
        """End a prepared browser no request took (a change of conditions comes first)."""
        self.settle()
        self._send({"discard": True})
        self._read(self.PREPARE_TIMEOUT_S)

    def load(self, request: dict, timeout_s: float) -> "WorkerAnswer":
        """Send one trial; return the worker's answer (checked against records.WorkerAnswer). Raises
        BrowserError only if the worker is broken or answers in another shape."""
        self.settle()
        self._send(request)
        from .records import check_answer
        try:
            return check_answer(self._read(timeout_s))
        except ValueError as e:
            raise BrowserError(f"{e} (log: {self.log_path})") from None

    def died_reason(self) -> str | None:
        """Why the worker is gone, or None while it runs (or before it started)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"the browser worker exited with {self.proc.returncode} (log: {self.log_path})"

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None and self.proc.stdin:
                self.proc.stdin.close()
                self.proc.wait(5)
        except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None
        self._log.close()

