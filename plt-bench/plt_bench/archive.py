"""Replay archives: a recorded page kept as the web served it, to be replayed faithfully.

An archive is a folder, sites/replay/NAME/, holding `archive.json` (the format below) and
`bodies/<sha256>`, each recorded body's exact bytes (binary ones too; one file for a body served
several times). It is made from a HAR 1.2 file with bodies (`plt-bench pages --from-har`; DevTools,
browsertime, WebPageTest and plt-bench's own `--capture har` write them) and replayed by
plt_bench.replayd behind the testbed's Caddy, which speaks h3, h2 or h1 to the browser.

What is kept of each request and response (Response): the method, the URL (host, path, query), the
status, the headers that change how a browser loads (KEPT_HEADERS: types, caching, CORS, redirects,
security policies, cookies), the body's exact bytes and size, the recorded Content-Encoding and wire
size. Of each origin (Origin): the protocol it spoke when recorded (h3, h2, h1, or '' when the
recording does not say) and its address family. Everything else (Date, Content-Length, Alt-Svc,
Connection, ...) is the replay server's to send.

Refused, with the entry's number, exit 2 and nothing written outside the new archive: what
replay.read refuses (malformed, huge, hostile files), and an entry whose URL is hostile (replay._origin),
whose origin is not https on port 443 (the testbed serves https on 443: a plain-http page's
requests could not be served), or whose header carries a line break. Left out, and counted in the
archive's source: requests a recording holds but no replay can serve (status 0: blocked or failed
when recorded; 304: the recording's browser had a cached copy; data:, blob: and WebSocket URLs).

Format history: 2 (2026-11-25) the first archive (page sets of format 1, replay.json, are same-weight
stand-ins made by plt_bench.replay).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

from .errors import UsageError
from .pages import MAX_OBJECTS, MAX_PAGE_BYTES, replay_root
from .replay import OPTION, _har_body, _origin, read_recording, write_whole

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
        why = ("status 0 (blocked or failed when recorded)" if status <= 0 else
               "status 304 (the recording's browser had it cached: record with a fresh profile)" if status == 304
               else None)
        if why:
            if i == 0:
                raise UsageError(f"{OPTION}: entry 1 (the page's navigation) has {why}; nothing to replay")
            left[why] = left.get(why, 0) + 1
            continue
        if not 100 <= status <= 599:
            raise UsageError(f"{OPTION}: {where}: status {status} is not an HTTP status (malformed)")
        headers, encoding = kept_headers(e, where)
        content = e["response"].get("content") or {}
        size = content.get("size", 0)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            size = 0
        data = _har_body(e, len(_text_bytes(content)), where) if isinstance(content.get("text"), str) else None
        if data is not None:
            size = len(data)  # the bytes themselves, whatever the size field said
        wire = e["response"].get("bodySize")
        wire = wire if isinstance(wire, int) and not isinstance(wire, bool) and wire >= 0 else None
        host = (u.hostname or "").lower()
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
    archive = Archive(name=name, origins=origins, responses=tuple(responses), source={
        "document_url": first.url[:2000], "left_out": left, "made_bodies": made,
        "recorded_unix_ms": recorded_unix_ms(entries[0].get("startedDateTime")),
        "creator": (log.get("creator") or {}).get("name") if isinstance(log.get("creator"), dict) else None})
    notes = [f"{n} entr{'y' if n == 1 else 'ies'} left out: {why}" for why, n in left.items()]
    if made:
        notes.append(f"{made} response(s) without a recorded body: served as zeros of their recorded size (record "
                     "with bodies: plt-bench record, or DevTools' 'Save all as HAR with content')")
    return archive, bodies, notes


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


def from_json(d: dict) -> Archive:
    if d.get("format") != FORMAT:
        raise ValueError(f"archive format {d.get('format')!r}, expected {FORMAT}")
    return Archive(name=d["name"], source=d["source"], origins=tuple(Origin(**o) for o in d["origins"]),
                   responses=tuple(Response(**{**r, "headers": tuple(tuple(h) for h in r["headers"])})
                                   for r in d["responses"]))


def is_archive(folder: Path) -> bool:
    return (Path(folder) / ARCHIVE_FILE).is_file()


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
            _CACHE[key] = from_json(json.loads((folder / ARCHIVE_FILE).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UsageError(f"{option}: 'har:{name}': {folder / ARCHIVE_FILE} cannot be read ({e}); make it again: "
                             f"plt-bench pages --from-har FILE {name}") from None
    return _CACHE[key]


def body_path(sites: Path, name: str, r: Response) -> Path | None:
    return replay_root(sites, name) / BODIES / r.body if r.body else None

