"""Replay archives: a recorded page kept as the web served it, to be replayed faithfully.

An archive is a folder, sites/replay/NAME/, holding `archive.json` (the format below) and
`bodies/<sha256>`, each recorded body's exact bytes (binary ones too; one file for a body served
several times). It is made from a HAR 1.2 file with bodies (`plt-bench pages --from-har`; DevTools,
browsertime, WebPageTest and plt-bench's own `--capture har` write them) and replayed by
pages.replayd behind the testbed's Caddy, which speaks h3, h2 or h1 to the browser.

What is kept of each request and response (Response): the method, the URL (host, path, query), the
status, the headers that change how a browser loads (KEPT_HEADERS: types, caching, CORS, redirects,
security policies, cookies), the body's exact bytes and size, the recorded Content-Encoding and wire
size. Of each origin (Origin): the protocol it spoke when recorded (h3, h2, h1, or '' when the
recording does not say) and its address family. Everything else (Date, Content-Length, Alt-Svc,
Connection, ...) is the replay server's to send.

Refused, with the entry's number, exit 2 and nothing written outside the new archive: what
harfile.read refuses (malformed, huge, hostile files), and an entry whose URL is hostile (harfile._origin),
whose origin is not https on port 443 (the testbed serves https on 443: a plain-http page's
requests could not be served), or whose header carries a line break. Left out, and counted in the
archive's source: requests a recording holds but no replay can serve (status 0: blocked or failed
when recorded; 304: the recording's browser had a cached copy; data:, blob: and WebSocket URLs).

Format history: 2 (2026-11-25) the first archive (page sets of format 1, replay.json, are same-weight
stand-ins made by pages.standin).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import UsageError
from . import base
from .base import MAX_OBJECTS, MAX_PAGE_BYTES, replay_root
from .harfile import OPTION, _har_body, _origin, check_name, read_recording, write_whole
from .timing import RecordedTiming, from_har, server_think_ms, wait_ms

FORMAT = 2
ARCHIVE_FILE = "archive.json"
BODIES = "bodies"
MAX_ORIGINS = 32  # each on its own testbed address (topology.Plan.replay_origins)
MAX_HEADERS = 64  # per response, of the kept ones
MAX_HEADER_BYTES = 16_384  # one header's value
# the response headers a replay keeps (lower case): what decides how a browser parses, caches,
# shares, redirects and secures a response; the rest is the replay server's (Date, Content-Length,
# Connection, Alt-Svc: the testbed's Caddy says which protocols it speaks)
KEPT_HEADERS = frozenset((
    "content-type", "cache-control", "expires", "last-modified", "etag", "vary", "location", "link",
    "access-control-allow-origin", "access-control-allow-credentials", "access-control-allow-methods",
    "access-control-allow-headers", "access-control-expose-headers", "access-control-max-age",
    "timing-allow-origin", "content-security-policy", "x-content-type-options", "x-frame-options",
    "cross-origin-resource-policy", "cross-origin-opener-policy", "cross-origin-embedder-policy",
    "content-disposition", "content-language", "set-cookie", "refresh", "service-worker-allowed", "pragma",
    "accept-ranges",
))
# what a HAR's response.httpVersion says -> the protocols' names (protocols.NAMES)
_VERSIONS = {"h3": "h3", "http/3": "h3", "http/3.0": "h3", "h2": "h2", "http/2": "h2", "http/2.0": "h2",
             "http/1.1": "h1", "http/1.0": "h1", "h1": "h1"}
LEFT_OUT_SCHEMES = ("data", "blob", "ws", "wss", "chrome-extension", "about")


@dataclasses.dataclass(frozen=True)
class Origin:
    """One recorded origin (always https on 443)."""
    host: str
    protocol: str   # what it spoke when recorded: h3 | h2 | h1 | '' (the recording does not say)
    address: str    # its address family when recorded: ipv4 | ipv6 | ''


@dataclasses.dataclass(frozen=True)
class Response:
    """One recorded request and its response."""
    index: int          # its place in the recording (0: the page's own navigation)
    method: str
    url: str
    host: str           # lower case
    path: str           # as requested (percent-encoding kept)
    query: str          # without its '?'; '' when none
    status: int
    headers: tuple[tuple[str, str], ...]  # the kept ones (KEPT_HEADERS), in order, names in lower case
    body: str           # its body file's name (SHA-256 of the bytes), '' for no body
    size_bytes: int     # the body's bytes (decoded: as the page's scripts and parser see them)
    encoding: str       # the recorded Content-Encoding (lower case), '' when identity
    wire_bytes: int | None  # the body's bytes on the wire when recorded (HAR bodySize), None if unknown
    recorded_body: bool  # False: the recording kept no body; one of size_bytes is made (zeros)

    @property
    def target(self) -> str:
        return self.path + (f"?{self.query}" if self.query else "")


@dataclasses.dataclass(frozen=True)
class Archive:
    name: str
    origins: tuple[Origin, ...]      # in order of first request: the page's own first
    responses: tuple[Response, ...]  # in recorded order; responses[0] is the navigation
    source: dict                     # the HAR's file name, SHA-256, creator, what was left out

    @property
    def url(self) -> str:
        return self.responses[0].url

    @property
    def body_bytes(self) -> int:
        return sum(r.size_bytes for r in self.responses)

    def origin(self, host: str) -> Origin:
        return next(o for o in self.origins if o.host == host)

    def mix(self) -> dict[str, int]:
        """Origins per recorded protocol ('' as 'unknown')."""
        return dict(collections.Counter(o.protocol or "unknown" for o in self.origins))


def protocol_of(http_version: object) -> str:
    """A HAR's response.httpVersion as a protocol name ('' when it says none we know)."""
    v = str(http_version or "").strip().lower()
    if v.startswith("h3-"):  # draft versions: h3-29
        return "h3"
    return _VERSIONS.get(v, "")


def address_kind(ip: object) -> str:
    v = str(ip or "").strip().strip("[]")
    if re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}", v):
        return "ipv4"
    return "ipv6" if ":" in v else ""


def kept_headers(entry: dict, where: str) -> tuple[tuple[tuple[str, str], ...], str]:
    """(the kept headers, the recorded Content-Encoding) of a HAR entry's response."""
    raw = entry["response"].get("headers")
    if raw is None:
        return (), ""
    if not isinstance(raw, list):
        raise UsageError(f"{OPTION}: {where} response: 'headers' is not a list: not a HAR 1.2 file (malformed)")
    out, encoding = [], ""
    for h in raw:
        name, value = (h.get("name"), h.get("value")) if isinstance(h, dict) else (None, None)
        if not isinstance(name, str) or not isinstance(value, str):
            raise UsageError(f"{OPTION}: {where} response: a header without a string name and value (malformed)")
        name = name.strip().lower()
        if any(c in name + value for c in "\r\n\x00") or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9a-z-]+", name or "-"):
            raise UsageError(f"{OPTION}: {where} response: header {name[:40]!r} has a line break, a NUL or a character "
                             "no header name holds (hostile)")
        if name == "content-encoding":
            encoding = value.strip().lower()
        elif name in KEPT_HEADERS:
            try:
                value.encode("latin-1")
            except UnicodeEncodeError:
                raise UsageError(f"{OPTION}: {where} response: header {name}'s value has characters outside Latin-1, "
                                 "which HTTP cannot carry (malformed)") from None
            if len(value) > MAX_HEADER_BYTES:
                raise UsageError(f"{OPTION}: {where} response: header {name} is {len(value)} bytes; at most "
                                 f"{MAX_HEADER_BYTES} (huge)")
            out.append((name, value))
    if len(out) > MAX_HEADERS:
        raise UsageError(f"{OPTION}: {where} response: {len(out)} headers kept; at most {MAX_HEADERS} (huge)")
    return tuple(out), ("" if encoding == "identity" else encoding)


def plan(log: dict, entries: list[dict], name: str) -> tuple[Archive, list[bytes | None], list[str]]:
    """The archive a recording makes (pure): the Archive, each response's body bytes (None: none
    recorded), and what was left out (one line per kind). Every refusal names the entry."""
    responses: list[Response] = []
    bodies: list[bytes | None] = []
    protocols: dict[str, collections.Counter] = {}
    addresses: dict[str, str] = {}
    left: dict[str, int] = {}
    waits: list[float | None] = []  # each kept response's recorded wait (request sent to first byte), ms
    said: list[float | None] = []  # ... and its think as its server said it, where it did
    total = 0
    for i, e in enumerate(entries):
        where = f"entry {i + 1}"
        url = e["request"]["url"]
        scheme = url.split(":", 1)[0].lower()
        if scheme in LEFT_OUT_SCHEMES:
            if i == 0:
                raise UsageError(f"{OPTION}: entry 1 is a {scheme}: URL; a recording starts with the page it loaded")
            left[f"{scheme}: URL"] = left.get(f"{scheme}: URL", 0) + 1
            continue
        origin, path = _origin(url, where)
        u = urlsplit(url)
        if u.scheme != "https" or origin != f"https://{(u.hostname or '').lower()}":
            raise UsageError(f"{OPTION}: {where}: '{url[:80]}' is not https on port 443; a replay serves https on 443 "
                             "only (record the page over https)")
        status = e["response"]["status"]
        # an error answer whose body the browser stopped reading (Chromium aborts a script's or stylesheet's
        # 404: net::ERR_ABORTED) is still the server's answer, and a replay gives it as recorded
        why = ("status 0 (blocked or failed when recorded)" if status <= 0 else
               "failed or cancelled while recorded (its body was not kept whole)" if e.get("_error")
               and not 400 <= status <= 599 else
               "status 304 (the recording's browser had it cached: record with a fresh profile)" if status == 304
               else None)
        if why:
            if i == 0:
                raise UsageError(f"{OPTION}: entry 1 (the page's navigation) has {why}; nothing to replay")
            left[why] = left.get(why, 0) + 1
            continue
        if not 100 <= status <= 599:
            raise UsageError(f"{OPTION}: {where}: status {status} is not an HTTP status (malformed)")
        content = e["response"].get("content") or {}
        size = content.get("size", 0)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            size = 0
        if size and content.get("text") == "":
            # its size says bytes, its body is empty: the recording's browser did not keep it (a large image, a
            # file of another type than it was used as); never a 200 of 0 bytes, nor zeros of a size that may
            # be part of it
            if i == 0:
                raise UsageError(f"{OPTION}: entry 1 (the page's navigation) {NOT_KEPT}; nothing to replay")
            left[NOT_KEPT] = left.get(NOT_KEPT, 0) + 1
            continue
        headers, encoding = kept_headers(e, where)
        data = _har_body(e, len(_text_bytes(content)), where) if isinstance(content.get("text"), str) else None
        if data is not None:
            size = len(data)  # the bytes themselves, whatever the size field said
        wire = e["response"].get("bodySize")
        wire = wire if isinstance(wire, int) and not isinstance(wire, bool) and wire >= 0 else None
        host = (u.hostname or "").lower()
        try:
            check_host(host, f"{where}: the host")
        except ArchiveError as e:
            raise UsageError(f"{OPTION}: {e} (malformed)") from None
        v = protocol_of(e["response"].get("httpVersion"))
        protocols.setdefault(host, collections.Counter())
        if v:
            protocols[host][v] += 1
        if host not in addresses or not addresses[host]:
            addresses[host] = address_kind(e.get("serverIPAddress"))
        method = e["request"].get("method", "GET").upper()
        if not re.fullmatch(r"[A-Z]{1,16}", method):
            raise UsageError(f"{OPTION}: {where} request: method {method[:20]!r} is not an HTTP method (hostile)")
        total += size
        waits.append(wait_ms(e))
        said.append(server_think_ms(e))
        responses.append(Response(
            index=len(responses), method=method, url=url[:8000], host=host, path=u.path or "/", query=u.query,
            status=status, headers=headers, body="", size_bytes=size, encoding=encoding, wire_bytes=wire,
            recorded_body=data is not None or size == 0))
        bodies.append(data)
    if len(responses) > MAX_OBJECTS + 1:
        raise UsageError(f"{OPTION}: the recording has {len(responses)} requests; an archive holds at most "
                         f"{MAX_OBJECTS + 1} (huge)")
    if total > MAX_PAGE_BYTES:
        raise UsageError(f"{OPTION}: the recording's bodies hold {total} bytes; a page is at most {MAX_PAGE_BYTES} "
                         "(huge)")
    if len(protocols) > MAX_ORIGINS:
        raise UsageError(f"{OPTION}: the recording has {len(protocols)} origins; a replay serves at most {MAX_ORIGINS}, "
                         "each on its own address (huge)")
    first = responses[0]
    if not (200 <= first.status < 400):
        raise UsageError(f"{OPTION}: entry 1 (the page's navigation) has status {first.status}; a recording starts "
                         "with the page it loaded")
    origins = tuple(Origin(h, c.most_common(1)[0][0] if c else "", addresses.get(h, ""))
                    for h, c in protocols.items())
    made = sum(1 for r in responses if not r.recorded_body)
    # each origin's recorded round trip (pages.timing), where the HAR has its timings
    # and each response's wait, where the HAR has its timings
    rtts = {h: round(ms, 3) for h, ms in from_har(entries).origin_rtts_ms.items() if h in protocols}
    timing = {**({"origin_rtts_ms": rtts} if rtts else {}),
              **({"waits_ms": [None if w is None else round(w, 3) for w in waits]} if any(w is not None for w in waits)
                 else {}),
              **({"server_thinks_ms": said} if any(x is not None for x in said) else {})}
    archive = Archive(name=name, origins=origins, responses=tuple(responses), source={
        "document_url": first.url[:2000], "left_out": left, "made_bodies": made,
        "recorded_unix_ms": recorded_unix_ms(entries[0].get("startedDateTime")),
        "creator": (log.get("creator") or {}).get("name") if isinstance(log.get("creator"), dict) else None,
        **({"timing": timing} if timing else {})})
    notes = [f"{n} entr{'y' if n == 1 else 'ies'} left out: {why}" for why, n in left.items()]
    if made:
        notes.append(f"{made} response(s) without a recorded body: served as zeros of their recorded size (record "
                     "with bodies: plt-bench record, or DevTools' 'Save all as HAR with content')")
    return archive, bodies, notes


NOT_KEPT = "has no body though its size says bytes (the recording's browser did not keep it)"


def recorded_unix_ms(started: object) -> int:
    """A HAR entry's startedDateTime (ISO 8601) in ms since the epoch; 0 when it has none."""
    import datetime
    try:
        t = datetime.datetime.fromisoformat(str(started).replace("Z", "+00:00"))
    except ValueError:
        return 0
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp() * 1000)


def _text_bytes(content: dict) -> bytes:
    """The body a HAR's content.text holds (decoded where base64), for its length."""
    text = content.get("text")
    if content.get("encoding") == "base64":
        import base64
        import binascii
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return b""  # _har_body refuses it with the entry's number
    return text.encode("utf-8", "surrogatepass")


def make(har_path: Path, name: str, sites: Path) -> tuple[Archive, list[str]]:
    """Write the archive NAME of a recording under sites/replay/NAME: a new folder, made beside it and
    renamed into place whole, or nothing at all (replay.write_whole). Returns the archive and what
    was left out."""
    log, entries, source = read_recording(har_path, name, sites)
    archive, bodies, notes = plan(log, entries, name)
    archive = dataclasses.replace(archive, source={**archive.source, **source})

    def fill(tmp: Path) -> Archive:
        (tmp / BODIES).mkdir()
        responses = []
        for r, body in zip(archive.responses, bodies):
            if body is None and r.size_bytes:
                body = bytes(r.size_bytes)
            digest = hashlib.sha256(body).hexdigest() if body else ""
            if body and not (tmp / BODIES / digest).exists():
                (tmp / BODIES / digest).write_bytes(body)
            responses.append(dataclasses.replace(r, body=digest))
        done = dataclasses.replace(archive, responses=tuple(responses))
        (tmp / ARCHIVE_FILE).write_text(json.dumps(to_json(done), indent=1) + "\n")
        return done
    return write_whole(sites, name, fill), notes


def to_json(a: Archive) -> dict:
    return {"format": FORMAT, "name": a.name, "source": a.source,
            "origins": [dataclasses.asdict(o) for o in a.origins],
            "responses": [{**dataclasses.asdict(r), "headers": [list(h) for h in r.headers]} for r in a.responses]}


class ArchiveError(ValueError):
    """An archive.json that breaks the format's rules: the message names the field."""


TIMING_FORM = ('{"origin_rtts_ms": {host: ms}, "waits_ms": [ms or null, one per response], "server_thinks_ms": '
               '[ms or null, one per response]} (any may be missing), each 0 to 60000 ms')


def _check_timing(timing, responses: int) -> None:
    """source.timing, where the recording kept it (pages.timing): each origin's round trip and each
    response's wait, in the responses' order."""
    if timing is None:
        return

    def ms(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 60_000
    rtts = timing.get("origin_rtts_ms", {}) if isinstance(timing, dict) else None
    lists = [timing.get(k, [None] * responses) for k in ("waits_ms", "server_thinks_ms")] if isinstance(timing, dict) \
        else [None]
    if (not isinstance(rtts, dict) or not all(isinstance(h, str) and ms(v) for h, v in rtts.items())
            or not all(isinstance(x, list) and len(x) == responses and all(w is None or ms(w) for w in x) for x in lists)
            or set(timing) - {"origin_rtts_ms", "waits_ms", "server_thinks_ms"}):
        raise ArchiveError(f"source.timing is {str(timing)[:200]!r}; expected {TIMING_FORM}")


def recorded_rtts(a: Archive) -> dict[str, float] | None:
    """Each origin's round trip as the recording measured it (ms), or None: it kept none (recorded before
    plt-bench kept them, or from a HAR without timings)."""
    return (a.source.get("timing") or {}).get("origin_rtts_ms") or None


def recorded_thinks(a: Archive) -> dict[int, float] | None:
    """Each response's think time as recorded (ms, by its index; pages.timing: what its server said it
    thought, else its wait less its origin's round trip, never below 0), or None: the recording kept
    neither. A response with neither has none (it is answered at once)."""
    timing = a.source.get("timing") or {}
    said = tuple(timing.get("server_thinks_ms") or ())
    if not said and (not timing.get("waits_ms") or not timing.get("origin_rtts_ms")):
        return None
    recorded = RecordedTiming(timing.get("origin_rtts_ms") or {},
                              tuple(timing.get("waits_ms") or [None] * len(a.responses)), said)
    return {r.index: t for r, t in zip(a.responses, recorded.think_ms([r.host for r in a.responses])) if t is not None}


HOST_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+")
BODY_RE = re.compile(r"[0-9a-f]{64}")
MAX_HOST_CHARS = 253  # RFC 1035: a name of at most 253 characters, each label at most 63
_ENCODING_RE = re.compile(r"[a-z0-9-]+(\s*,\s*[a-z0-9-]+)*")


def _field(d: dict, key: str, kind, where: str):
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        names = {int: "a whole number", str: "a string", list: "a list", dict: "an object", bool: "true or false"}
        raise ArchiveError(f"{where}.{key} is {type(v).__name__ if key in (d or {}) else 'missing'}; "
                           f"expected {names.get(kind, kind.__name__)}")
    return v


def check_host(host: object, where: str) -> str:
    """A recorded host name: a public DNS name of at most 253 characters and 63 per label (pure)."""
    if not isinstance(host, str) or len(host) > MAX_HOST_CHARS or not HOST_RE.fullmatch(host) \
            or re.fullmatch(r"[0-9.]+", host) or host.endswith(".localhost"):
        raise ArchiveError(f"{where} {str(host)[:80]!r} is not a host name (lower-case labels of a-z, 0-9 and '-', "
                           f"each at most 63 characters, with a dot, at most {MAX_HOST_CHARS} in all)")
    return host


def _header(h: object, where: str) -> tuple[str, str]:
    if not (isinstance(h, list) and len(h) == 2 and all(isinstance(x, str) for x in h)):
        raise ArchiveError(f"{where} is not a [name, value] pair of strings")
    name, value = h
    if name not in KEPT_HEADERS:
        raise ArchiveError(f"{where}: {name[:40]!r} is not a header an archive keeps (archive.KEPT_HEADERS, lower case)")
    if any(ord(c) < 0x20 and c != "\t" or ord(c) == 0x7f for c in value):
        raise ArchiveError(f"{where} ({name}): its value has a line break or a control character")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise ArchiveError(f"{where} ({name}): its value has characters outside Latin-1, which HTTP cannot carry"
                           ) from None
    if len(value) > MAX_HEADER_BYTES:
        raise ArchiveError(f"{where} ({name}): {len(value)} bytes; at most {MAX_HEADER_BYTES}")
    return name, value


def from_json(d: object, folder: Path | None = None, name: str | None = None) -> Archive:
    """An archive.json read back, every field checked as plan() makes it (a hand-edited file is not
    trusted): types; hosts as a recording names them; https URLs on 443 with no '..'; headers kept,
    without control characters, in Latin-1; body files named by their SHA-256 inside bodies/ (and,
    given the folder, present as plain files of the recorded size); the name its folder's (given
    name). Raises ArchiveError naming the field."""
    if not isinstance(d, dict):
        raise ArchiveError("the file is not a JSON object")
    if d.get("format") != FORMAT:
        raise ArchiveError(f"format is {d.get('format')!r}; expected {FORMAT}")
    a_name = _field(d, "name", str, "archive")
    try:
        check_name(a_name, "name")
    except UsageError as e:
        raise ArchiveError(f"name: {e}") from None
    if name is not None and a_name != name:
        raise ArchiveError(f"name is {a_name!r}, but the archive's folder is {name!r}; an archive names its own folder")
    source = _field(d, "source", dict, "archive")
    if "recorded_unix_ms" in source and (not isinstance(source["recorded_unix_ms"], int)
                                         or isinstance(source["recorded_unix_ms"], bool)
                                         or source["recorded_unix_ms"] < 0):
        raise ArchiveError(f"source.recorded_unix_ms is {source['recorded_unix_ms']!r}; expected a whole number of "
                           "ms since 1970 (0 when unknown)")
    checked: dict[str, str | None] = {}  # each body file's problem, once (several responses may share one)
    owner = _owner(folder)
    raw_origins = _field(d, "origins", list, "archive")
    if not 1 <= len(raw_origins) <= MAX_ORIGINS:
        raise ArchiveError(f"origins holds {len(raw_origins)}; expected 1 to {MAX_ORIGINS}")
    origins = []
    for i, o in enumerate(raw_origins):
        where = f"origins[{i}]"
        host = check_host(_field(o, "host", str, where), f"{where}.host")
        proto, family = _field(o, "protocol", str, where), _field(o, "address", str, where)
        if proto not in ("", "h3", "h2", "h1"):
            raise ArchiveError(f"{where}.protocol is {proto[:20]!r}; expected h3, h2, h1 or ''")
        if family not in ("", "ipv4", "ipv6"):
            raise ArchiveError(f"{where}.address is {family[:20]!r}; expected ipv4, ipv6 or ''")
        if host in (x.host for x in origins):
            raise ArchiveError(f"{where}.host {host} is listed twice")
        origins.append(Origin(host, proto, family))
    hosts = {o.host for o in origins}
    raw = _field(d, "responses", list, "archive")
    if not 1 <= len(raw) <= MAX_OBJECTS + 1:
        raise ArchiveError(f"responses holds {len(raw)}; expected 1 to {MAX_OBJECTS + 1} (the first is the page's "
                           "navigation)")
    responses = []
    for i, r in enumerate(raw):
        where = f"responses[{i}]"
        url = _field(r, "url", str, where)
        try:
            origin, path = _origin(url, f"{where}.url")
        except UsageError as e:
            raise ArchiveError(str(e).removeprefix(f"{OPTION}: ")) from None
        u = urlsplit(url)
        host = (u.hostname or "").lower()
        if u.scheme != "https" or origin != f"https://{host}":
            raise ArchiveError(f"{where}.url {url[:80]!r} is not https on port 443")
        fields = {k: _field(r, k, str, where) for k in ("method", "host", "path", "query", "body", "encoding")}
        if fields["host"] != host or host not in hosts:
            raise ArchiveError(f"{where}.host is {fields['host'][:80]!r}; expected its URL's host, one of the origins")
        if fields["path"] != (u.path or "/") or fields["query"] != u.query:
            raise ArchiveError(f"{where}.path and .query are not its URL's")
        if not re.fullmatch(r"[A-Z]{1,16}", fields["method"]):
            raise ArchiveError(f"{where}.method {fields['method'][:20]!r} is not an HTTP method")
        if fields["encoding"] and not _ENCODING_RE.fullmatch(fields["encoding"]):
            raise ArchiveError(f"{where}.encoding {fields['encoding'][:40]!r} is not a list of content codings")
        status = _field(r, "status", int, where)
        if not 100 <= status <= 599:
            raise ArchiveError(f"{where}.status is {status}; expected an HTTP status from 100 to 599")
        size = _field(r, "size_bytes", int, where)
        if size < 0:
            raise ArchiveError(f"{where}.size_bytes is {size}; expected 0 or more")
        wire = r.get("wire_bytes")
        if wire is not None and (not isinstance(wire, int) or isinstance(wire, bool) or wire < 0):
            raise ArchiveError(f"{where}.wire_bytes is {wire!r}; expected a whole number or null")
        if _field(r, "index", int, where) != i:
            raise ArchiveError(f"{where}.index is {r['index']}; expected {i} (its place in the recording)")
        body = fields["body"]
        if body and not BODY_RE.fullmatch(body):
            raise ArchiveError(f"{where}.body {body[:80]!r} is not a body file's name (64 hex digits: its SHA-256)")
        if bool(body) != bool(size):
            raise ArchiveError(f"{where}.body and .size_bytes disagree (a body file for a non-empty body, none for "
                               "an empty one)")
        if folder is not None and body:
            f = Path(folder) / BODIES / body
            try:
                st = f.lstat()
            except OSError:
                raise ArchiveError(f"{where}.body: {BODIES}/{body} is missing") from None
            import stat as stat_mod
            if not stat_mod.S_ISREG(st.st_mode):
                raise ArchiveError(f"{where}.body: {BODIES}/{body} is not a plain file (a link or a folder)")
            if st.st_size != size:
                raise ArchiveError(f"{where}.body: {BODIES}/{body} holds {st.st_size} bytes; size_bytes says {size}")
            if body not in checked:
                checked[body] = _body_problem(f, st, owner)
            if checked[body]:
                raise ArchiveError(f"{where}.body: {BODIES}/{body} {checked[body]}")
        headers = _field(r, "headers", list, where)
        if len(headers) > MAX_HEADERS:
            raise ArchiveError(f"{where}.headers holds {len(headers)}; at most {MAX_HEADERS}")
        recorded = _field(r, "recorded_body", bool, where)
        responses.append(Response(
            index=i, method=fields["method"], url=url, host=host, path=fields["path"], query=fields["query"],
            status=status, headers=tuple(_header(h, f"{where}.headers[{k}]") for k, h in enumerate(headers)),
            body=body, size_bytes=size, encoding=fields["encoding"], wire_bytes=wire, recorded_body=recorded))
    _check_timing(source.get("timing"), len(responses))
    return Archive(name=a_name, source=source, origins=tuple(origins), responses=tuple(responses))


def _owner(folder: Path | None) -> int | None:
    """Who owns a recording: its archive.json's owner (None without a folder or that file)."""
    try:
        return None if folder is None else (Path(folder) / ARCHIVE_FILE).stat().st_uid
    except OSError:
        return None


def _body_problem(path: Path, st, owner: int | None) -> str | None:
    """Why a local recording's body file is not the body its name says (None: it is): one link (a hard
    link to another file, a root-only one, would be served as the body), its archive.json's owner, and
    its bytes' SHA-256 the name. Read once per archive version and process (load caches it): measured
    2026-11-29, a 3.0 MB recording's bodies took 2.8 ms to read and hash (0.08 ms without), about
    0.9 ms a MB."""
    if st.st_nlink != 1:
        return f"has {st.st_nlink} links; a body file has one (another name of it may be another file's)"
    if owner is not None and st.st_uid != owner:
        return f"is owned by uid {st.st_uid}, the archive by uid {owner}; a recording's files have one owner"
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if h.hexdigest() != path.name:
        return "does not hold the bytes its name (their SHA-256) says: edited or damaged; make the recording again"
    return None


def is_archive(folder: Path) -> bool:
    return (Path(folder) / ARCHIVE_FILE).is_file()


def archive_exists(name: str, sites: Path | None = None) -> bool:
    """Whether a recording of that name is in the page sets (sites/replay/NAME/archive.json)."""
    return is_archive(replay_root(sites or base.DEFAULT_SITES, name))


_CACHE: dict[tuple, Archive] = {}


def load(name: str, sites: Path, option: str = "--size") -> Archive:
    """An archive made before, or a message saying how to make it."""
    folder = replay_root(sites, name)
    try:
        st = (folder / ARCHIVE_FILE).stat()
        key = (str(folder), st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        raise UsageError(f"{option}: 'har:{name}': no archive {name} in {folder.parent}; make it from a recording: "
                         f"plt-bench pages --from-har FILE {name}") from None
    if key not in _CACHE:
        try:
            _CACHE[key] = from_json(json.loads((folder / ARCHIVE_FILE).read_text()), folder, name)
        except ArchiveError as e:
            raise UsageError(f"{option}: 'har:{name}': {folder / ARCHIVE_FILE} is refused: {e}; make it again from "
                             f"its recording: plt-bench pages --from-har FILE {name}") from None
        except (OSError, ValueError, RecursionError) as e:
            raise UsageError(f"{option}: 'har:{name}': {folder / ARCHIVE_FILE} cannot be read ({e}); make it again: "
                             f"plt-bench pages --from-har FILE {name}") from None
    return _CACHE[key]


# -- a recording that travels (a cluster's head to its workers) -----------------------------------------
@dataclasses.dataclass(frozen=True)
class Packed:
    """A recording as it travels: its archive.json's bytes, whose SHA-256 names it (its bodies are
    named by theirs, so that hash pins every byte), and its bodies by digest."""
    name: str
    sha256: str
    archive: bytes
    bodies: dict[str, bytes]

    @property
    def size_bytes(self) -> int:
        return len(self.archive) + sum(len(b) for b in self.bodies.values())

    def to_bytes(self) -> bytes:
        """Its bytes for a channel that carries bytes (two machines' control channel): a length-
        prefixed archive.json, then each body as its digest and length-prefixed bytes (pure)."""
        out = [len(self.archive).to_bytes(8, "big"), self.archive]
        for digest, body in sorted(self.bodies.items()):
            out += [bytes.fromhex(digest), len(body).to_bytes(8, "big"), body]
        return b"".join(out)

    @classmethod
    def from_bytes(cls, name: str, sha256: str, data: bytes) -> "Packed":
        """The recording to_bytes made (pure); ArchiveError where the bytes are not whole. What they
        hold is verified where it is written (unpack)."""
        def take(n: int) -> bytes:
            nonlocal at
            if at + n > len(data):
                raise ArchiveError(f"{name}: its bytes end {at + n - len(data)} short (cut on the way)")
            at += n
            return data[at - n:at]
        at = 0
        archive = take(int.from_bytes(take(8), "big"))
        bodies = {}
        while at < len(data):
            digest = take(32).hex()
            bodies[digest] = take(int.from_bytes(take(8), "big"))
        return cls(name, sha256, archive, bodies)


def identity(name: str, sites: Path) -> str:
    """A recording's content hash: its archive.json's SHA-256."""
    return hashlib.sha256((replay_root(sites, name) / ARCHIVE_FILE).read_bytes()).hexdigest()


def pack(name: str, sites: Path) -> Packed:
    """The recording NAME of sites as it travels: what a replay reads (archive.json and the bodies it
    names), not the HAR kept beside it."""
    a = load(name, sites)
    folder = replay_root(sites, name)
    data = (folder / ARCHIVE_FILE).read_bytes()
    bodies = {r.body: (folder / BODIES / r.body).read_bytes() for r in a.responses if r.body}
    return Packed(name, hashlib.sha256(data).hexdigest(), data, bodies)


def unpack(p: Packed, sites: Path) -> bool:
    """Write a recording that travelled into sites/replay/NAME, once: False where the one there is
    the same (its hash); True where written, whole or not at all. Verified first: its archive.json
    against its hash, each body against its digest, the archive as a replay reads it (from_json);
    a recording of that name that differs is left alone and refused. ArchiveError says which."""
    if hashlib.sha256(p.archive).hexdigest() != p.sha256:
        raise ArchiveError(f"{p.name}: its archive.json does not match its hash {p.sha256[:12]} (damaged on the way)")
    bad = [d for d, b in p.bodies.items() if hashlib.sha256(b).hexdigest() != d]
    if bad:
        raise ArchiveError(f"{p.name}: {len(bad)} body(ies) do not match their digest, first {bad[0][:12]} (damaged "
                           "on the way)")
    try:
        a = from_json(json.loads(p.archive), None, p.name)
    except (ValueError, RecursionError) as e:
        raise ArchiveError(f"{p.name}: its archive is refused: {e}") from None
    missing = sorted({r.body for r in a.responses if r.body} - set(p.bodies))
    if missing:
        raise ArchiveError(f"{p.name}: {len(missing)} body(ies) its archive names did not come with it, first "
                           f"{missing[0][:12]}")
    folder = replay_root(sites, p.name)
    if (folder / ARCHIVE_FILE).is_file():
        have = identity(p.name, sites)
        if have == p.sha256:
            return False
        raise ArchiveError(f"{p.name}: {folder} holds another recording of that name (hash {have[:12]}, the "
                           f"campaign's {p.sha256[:12]}); it is left as it is: remove it or rename one of them")

    def fill(tmp: Path) -> None:
        (tmp / BODIES).mkdir()
        for d, b in p.bodies.items():
            (tmp / BODIES / d).write_bytes(b)
        (tmp / ARCHIVE_FILE).write_bytes(p.archive)
    try:
        write_whole(sites, p.name, fill)
    except UsageError:
        if (folder / ARCHIVE_FILE).is_file() and identity(p.name, sites) == p.sha256:
            return False  # another worker of this machine wrote the same first
        raise
    return True


_ICON_LINK = re.compile(rb"<link\b[^>]*>", re.I)
_ATTR = re.compile(rb"""\b(rel|href)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.I)
_ICONS: dict[tuple, frozenset] = {}


def declared_icons(a: Archive, sites: Path) -> frozenset[tuple[str, str]]:
    """The icons the recorded document declares (<link rel="icon" | "shortcut icon" | "apple-touch-icon"
    | "mask-icon" href=...), as (host, path) resolved against its URL: requests the browser makes for
    itself, which the page's own loading never asks for (proof.judge_archive). Read once per archive."""
    from urllib.parse import urljoin
    key = (a.name, a.responses[0].body, str(sites))
    if key not in _ICONS:
        first = a.responses[0]
        path = body_path(sites, a.name, first)
        try:
            html = path.read_bytes()[:262_144] if path else b""
        except OSError:
            html = b""
        out = set()
        for tag in _ICON_LINK.findall(html):
            attrs = {m.group(1).lower(): (m.group(2) or m.group(3) or m.group(4) or b"") for m in _ATTR.finditer(tag)}
            rel = attrs.get(b"rel", b"").decode("latin-1").lower().split()
            if attrs.get(b"href") and any(r in ("icon", "apple-touch-icon", "apple-touch-icon-precomposed", "mask-icon")
                                          for r in rel):
                u = urlsplit(urljoin(first.url, attrs[b"href"].decode("latin-1").strip()))
                if u.scheme == "https" and u.hostname:
                    out.add((u.hostname.lower(), u.path or "/"))
        _ICONS[key] = frozenset(out)
    return _ICONS[key]


def body_path(sites: Path, name: str, r: Response) -> Path | None:
    return replay_root(sites, name) / BODIES / r.body if r.body else None

