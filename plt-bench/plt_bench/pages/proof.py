"""The proofs the kinds of page share: a load's document proven on both ends, its objects proven one
by one, and a page served as recorded (a recording, a served folder) proven response by response.

The client's word (Navigation Timing, Resource Timing) and the server's (its access log, in
protocol terms: servers.base) must both say each response came whole, with its status, over the
protocol that was asked for (or, discovered, the one the browser found).
"""

from __future__ import annotations

from .. import protocols
from .base import HOST, Judged, Load, Page, page_url, url_host, url_path


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
    what = "requests" if page.measures == "requests" else "objects"
    return proven, f"{len(problems)} of {page.fetched} {what} not proven; first: {problems[0]}"


FAVICON = "/favicon.ico"  # Chromium asks for it when a page names no icon: a recording (DevTools') never holds it
UNRECORDED_MAX = 0  # a replayed trial with more requests the recording did not hold is not a clean ok


def opaque(entry: dict, logged: dict, document_host: str) -> bool:
    """A response the browser read as opaque (a cross-origin script, style sheet or image fetched
    without CORS), whose body sizes Firefox's Resource Timing gives as 0 whatever Timing-Allow-Origin
    says (the Fetch standard's opaque response; Chromium gives them): its entry says it came over the
    network (transferSize > 0) with no body size, from another origin than the document's, where the
    server sent a body. The server's log then holds its size alone (pure)."""
    return (url_host(entry.get("name")) != document_host and (entry.get("transferSize") or 0) > 0
            and not entry.get("encodedBodySize") and not entry.get("decodedBodySize") and (logged.get("size") or 0) > 0
            and entry.get("initiatorType") in ("script", "link", "img", "css", "other"))


def judge_archive(proto: str, hosts: set[str], document_bytes: int | None, load: dict,
                  server_entries: list[dict], replayed: bool = True,
                  spoke: dict[str, str] | None = None,
                  own: frozenset[tuple[str, str]] = frozenset(), revisit: bool = False) -> tuple[str, str | None, int, dict]:
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
    h1), and the evidence counts the responses served per protocol ("protocols": the mix).
    A cross-origin response the browser read as opaque (opaque: Firefox gives no body size for it) is
    proven by the protocol and the server's bytes alone, and counted ("opaque").
    A repeat visit (revisit; server_entries the repeat's alone): a response answered 304 is proven
    where the browser's entry exchanged headers and the server sent no body ("revalidated"), one the
    browser took from its cache with no request is counted ("cached"), and the document may say 304."""
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
    if nav.get("responseStatus") not in (200, 304 if revisit else 200):  # a revisit's document may be revalidated
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
    doc_host = url_host(nav.get("name"))
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
            path = url_path(page_url(e.get("host") or "", e.get("uri") or "/"))
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
        elif e.get("status") == 304:  # a repeat's revalidation: headers exchanged, the body the browser's cache's
            if (r.get("transferSize") or 0) > 0 and not e.get("size"):
                evidence["revalidated"] = evidence.get("revalidated", 0) + 1
                evidence["proven"] += 1
                evidence["document_proven"] = evidence.get("document_proven") or r.get("initiatorType") == "navigation"
            else:
                problems.append(f"{where}: answered 304 with {e.get('size')} bytes, the browser's entry moved "
                                f"{r.get('transferSize')} (a revalidation moves headers and no body)")
        elif opaque(r, e, doc_host):  # a cross-origin no-cors response: Firefox hides its body's size
            evidence["opaque"] = evidence.get("opaque", 0) + 1
            evidence["proven"] += 1
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


def split_entries(load: Load) -> tuple[list[dict] | None, list[dict] | None]:
    """(the page's own entries, the others) of a load's server entries, told apart by the page's URI
    (with its trial's tag); (None, None) where the log was not read."""
    uri, entries = url_path(load.url), load.server_entries
    if entries is None:
        return None, None
    return [e for e in entries if e["uri"] == uri], [e for e in entries if e["uri"] != uri]


def document_and_objects(load: Load) -> Judged:
    """The judgement of a page plt-bench made: its document (judge), then each object it knows of
    (judge_objects)."""
    page = load.page
    page_entries, others = split_entries(load)
    status, reason = judge(load.proto, page.html_bytes, load.answer, page_entries,
                           revalidated=page.visit == "repeat-warm", discovered=load.discovered)
    judged = Judged(status, reason, page_entries=page_entries)
    if page.fetched:
        judged.objects_ok, why = judge_objects(load.proto, page, load.answer.get("resources"), others,
                                               discovered=load.discovered)
        judged.fail(why)
    return judged
