"""The replay server: recorded responses (pages.archive) served as they were recorded.

It runs in the testbed's server namespace on its loopback, behind Caddy: Caddy terminates h3, h2 and
h1 for every recorded host name on the replay addresses (each origin its own) and passes each
request on, Host kept, over HTTP/1.1 keep-alive; so each response is proven by Caddy's access log
as a generated page's is, and the browser's protocol is Caddy's.

Several recordings replayed by one testbed may share a host (the same site recorded on two days):
each is served its own responses alone. With more than one, the testbed names the recording it is
measuring now in a file (--active; write_active before each load), read at each request; a request
while none is named is a miss.

A request is matched as Web Page Replay matches (match): the exact method, host, path and query
first; else, among the recorded requests of the same method, host and path, the one sharing the
most query parameters (a cache-buster or a session token differs, the rest agrees). No match: 404
at once, never a request outside the testbed. Every response says how it was matched in the
header X-PLT-Replay (exact | query | miss | preflight), which Caddy's log keeps for the trial's count
of unrecorded requests.

Think time (--think, pages.timing): where the testbed's control file (--think-file) asks it, each
response waits before its first byte: a fixed wait for every response, or recorded, each recorded
response its own recorded think (archive.recorded_thinks: what its server said it thought, else its
wait less its origin's round trip; none for one without, nor for a request the recording does not
hold). The response says what it
was asked and what it waited in the header X-Plt-Think, which the front server's log keeps (the
trial's proof).

What is served (respond): the recorded status, the kept headers (archive.KEPT_HEADERS), and the
recorded body's bytes; a conditional GET (a repeat visit's revalidation) of a recorded 200 whose
validators it names is answered 304 Not Modified with the recorded headers and no body
(not_modified: If-None-Match against the recorded ETag, else If-Modified-Since against its
Last-Modified), as an HTTP server answers it. Two changes, both said here:
- Timing-Allow-Origin: * is added where the recording has none: the browser's Resource Timing
  then shows a cross-origin response's protocol and sizes, which the trial's proof needs (it
  changes no load: the header only opens timing to scripts).
- An HTML document answered 200 carries deterministic_script() first in its <head>: time starts at
  the recording's and moves with the page's clock; Math.random, crypto.getRandomValues and
  crypto.randomUUID are seeded; a Content-Security-Policy that limits scripts is given the
  script's hash. Scripts that build URLs from the time or random numbers then ask for the same
  URLs on every load (and the query match above finds the recorded ones).
Compressed bodies: a HAR holds the decoded body. A response recorded with a Content-Encoding
(gzip, br, deflate, zstd) is served gzip-compressed (level 6) when the browser accepts gzip, else
plain: gzip is the encoding every browser takes and Python compresses without a package; a
recording's Brotli bodies are a few per cent smaller than these (the archive keeps the recorded
wire size beside ours). Bodies recorded plain are served plain.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import http.server
import json
import re
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qsl

from . import archive as archive_mod, timing
from .base import replay_root

COMPRESSED = ("gzip", "br", "deflate", "zstd", "x-gzip")
GZIP_LEVEL = 6
HEADER = "X-PLT-Replay"
MISS_BODY = b"plt-bench replay: this request is not in the recording\n"


def deterministic_script(recorded_ms: int) -> str:
    """The script every replayed document runs first (pure): the recording's time, moving with the
    page's own clock (performance.now), and seeded random numbers."""
    return ("(function(){'use strict';var T0=%d,D=Date,s=0x2545f491;"
            "function r(){s^=s<<13;s>>>=0;s^=s>>>17;s^=s<<5;s>>>=0;return s}"
            "function now(){return T0+Math.floor(performance.now())}"
            "Math.random=function(){return r()/4294967296};"
            "if(self.crypto){crypto.getRandomValues=function(a){var b=new Uint8Array(a.buffer,a.byteOffset,a.byteLength);"
            "for(var i=0;i<b.length;i++)b[i]=r()&255;return a};"
            "crypto.randomUUID=function(){var h='';for(var i=0;i<16;i++)h+=(256+(r()&255)).toString(16).slice(1);"
            "return h.slice(0,8)+'-'+h.slice(8,12)+'-4'+h.slice(13,16)+'-'+((parseInt(h[16],16)&3)|8).toString(16)"
            "+h.slice(17,20)+'-'+h.slice(20,32)}}"
            "class F extends D{constructor(){if(arguments.length===0)super(now());else super(...arguments)}"
            "static now(){return now()}}"
            "self.Date=new Proxy(F,{apply:function(){return new D(now()).toString()}})})();" % recorded_ms)


_HEAD = re.compile(rb"<head(\s[^>]*)?>", re.I)
_HTML = re.compile(rb"<html(\s[^>]*)?>", re.I)
_DOCTYPE = re.compile(rb"<!doctype[^>]*>", re.I)


def inject(body: bytes, script: str) -> bytes:
    """The document with the script first: after <head>, else after <html>, else after the doctype,
    else at its start (pure; as Web Page Replay places its own)."""
    tag = b"<script>" + script.encode() + b"</script>"
    window = body[:65536]
    for pattern in (_HEAD, _HTML, _DOCTYPE):
        m = pattern.search(window)
        if m:
            return body[:m.end()] + tag + body[m.end():]
    return tag + body


def csp_with_hash(value: str, script: str) -> str:
    """A Content-Security-Policy that lets the injected script run (pure): its hash added to
    script-src (or default-src when there is none). Left as it is when that directive allows
    inline scripts with no hash or nonce (a hash would then turn 'unsafe-inline' off) or is absent."""
    digest = "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"
    parts = [p.strip() for p in value.split(";")]
    names = [p.split()[0].lower() if p.split() else "" for p in parts]
    key = "script-src" if "script-src" in names else "default-src" if "default-src" in names else None
    if key is None:
        return value
    i = names.index(key)
    tokens = parts[i].split()
    lowered = [t.lower() for t in tokens]
    if "'unsafe-inline'" in lowered and not any(t.startswith(("'sha", "'nonce-")) for t in lowered):
        return value
    tokens = [t for t in tokens if t.lower() != "'none'"] + [digest]
    parts[i] = " ".join(tokens)
    return "; ".join(p for p in parts if p)


class Index:
    """The recorded responses of one or more archives, by (method, host, path)."""

    def __init__(self, archives: list[archive_mod.Archive]):
        self.by_key: dict[tuple[str, str, str], list[archive_mod.Response]] = {}
        for a in archives:
            for r in a.responses:
                self.by_key.setdefault((r.method, r.host, r.path), []).append(r)

    def match(self, method: str, host: str, target: str) -> tuple[archive_mod.Response | None, str]:
        """(the recorded response, 'exact' | 'query') or (None, 'miss')."""
        path, _, query = target.partition("?")
        candidates = self.by_key.get((method, host.lower(), path), [])
        for r in candidates:
            if r.query == query:
                return r, "exact"
        if not candidates:
            return None, "miss"
        want = set(parse_qsl(query, keep_blank_values=True))
        best = max(candidates, key=lambda r: (len(want & set(parse_qsl(r.query, keep_blank_values=True))),
                                              -r.index))
        return best, "query"


class Bodies:
    """Body bytes by file name, read once; gzip copies made once."""

    def __init__(self, folders: dict[str, Path]):
        self.folders = folders  # archive name -> its bodies folder
        self._plain: dict[str, bytes] = {}
        self._gzip: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def plain(self, name: str, digest: str) -> bytes:
        with self._lock:
            if digest not in self._plain:
                self._plain[digest] = (self.folders[name] / digest).read_bytes()
            return self._plain[digest]

    def gzipped(self, key: str, data: bytes) -> bytes:
        with self._lock:
            if key not in self._gzip:
                self._gzip[key] = gzip.compress(data, GZIP_LEVEL, mtime=0)
            return self._gzip[key]


def compressed(encoding: str) -> bool:
    """A recorded Content-Encoding that compressed the body, stacked ones included ('gzip, br') (pure)."""
    return any(token.strip().lower() in COMPRESSED for token in encoding.split(","))


def respond(r: archive_mod.Response, how: str, body: bytes, accept_encoding: str, script: str | None,
            bodies: Bodies | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) for a matched recorded response (pure but for the gzip cache)."""
    headers = list(r.headers)
    html = any(k == "content-type" and v.split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml")
               for k, v in headers)
    if script is not None and html and r.status == 200 and body:
        body = inject(body, script)
        headers = [(k, csp_with_hash(v, script) if k == "content-security-policy" else v) for k, v in headers]
    headers = with_timing(headers)
    if compressed(r.encoding) and body and "gzip" in accept_encoding.lower():
        key = hashlib.sha256(body).hexdigest()
        body = bodies.gzipped(key, body) if bodies else gzip.compress(body, GZIP_LEVEL, mtime=0)
        headers.append(("content-encoding", "gzip"))
    headers.append((HEADER.lower(), how))
    return r.status, headers, body


def with_timing(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers with Timing-Allow-Origin: * where the recording has none (the module's first change)."""
    return headers if any(k == "timing-allow-origin" for k, _ in headers) else [*headers, ("timing-allow-origin", "*")]


def _etags(field: str) -> list[str]:
    """The entity tags of an If-None-Match field, each without its weak prefix (W/)."""
    return [t.strip()[2:] if t.strip().startswith("W/") else t.strip() for t in field.split(",") if t.strip()]


def not_modified(recorded: tuple[tuple[str, str], ...] | list[tuple[str, str]], conditions: dict[str, str]) -> bool:
    """Whether a conditional GET of a recorded 200 is answered 304 Not Modified (RFC 9110, 13.1 and
    13.2.2; pure): If-None-Match, where sent, decides alone (any listed tag equal to the recorded ETag by
    the weak comparison, or *); else If-Modified-Since no earlier than the recorded Last-Modified. A
    response recorded with neither validator is never 304: a revisit's browser gets it whole, as
    the recorded server would have sent it."""
    import email.utils
    have = {k: v for k, v in recorded}
    got = {k.lower(): v for k, v in conditions.items()}
    if "if-none-match" in got:
        tags, mine = _etags(got["if-none-match"]), _etags(have.get("etag", ""))
        return "*" in tags or bool(mine) and mine[0] in tags
    since, last = got.get("if-modified-since"), have.get("last-modified")
    if not since or not last:
        return False
    try:
        return email.utils.parsedate_to_datetime(last) <= email.utils.parsedate_to_datetime(since)
    except (TypeError, ValueError, IndexError):
        return False


# a 304 carries the recorded headers but those that describe a body (RFC 9110, 15.4.5)
BODY_HEADERS = frozenset(("content-type", "content-length", "content-encoding", "content-disposition",
                          "content-language", "accept-ranges"))


def not_modified_response(r: archive_mod.Response, how: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """(304, headers, no body) for a matched recorded response its requester holds already."""
    headers = with_timing([(k, v) for k, v in r.headers if k not in BODY_HEADERS])
    return 304, headers + [(HEADER.lower(), how)], b""


_INDEXES: dict[int, tuple] = {}  # id(archive) -> (the archive, kept alive so the id stays its own, its Index)


def served_bytes(a: archive_mod.Archive, sites: Path, url_host: str, target: str, deterministic: bool = True) -> int | None:
    """The decoded body bytes the replay serves for a GET of host and target (its script injected
    where it is a document), as the browser decodes them; None when the recording has no such request."""
    if id(a) not in _INDEXES:  # an archive is loaded once (archive.load's cache): its index made once too
        _INDEXES[id(a)] = (a, Index([a]))
    r, _ = _INDEXES[id(a)][1].match("GET", url_host, target)
    if r is None:
        return None
    body = (replay_root(sites, a.name) / archive_mod.BODIES / r.body).read_bytes() if r.body else b""
    script = deterministic_script(int(a.source.get("recorded_unix_ms") or 0)) if deterministic else None
    return len(respond(r, "exact", body, "", script)[2])


ACTIVE_REPLAY = "replay-active"  # in a testbed's run folder: the recording being measured now (write_active)


def write_active(path: Path, name: str) -> None:
    """Name the recording measured now (replayd --active): written whole, then renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(name + "\n")
    tmp.replace(path)


class Active:
    """Which recording's responses are served now: the one archive, or the one the --active file names."""

    def __init__(self, indexes: dict[str, Index], path: Path | None):
        self.indexes, self.path = indexes, path
        self._seen: tuple | None = None
        self._name: str | None = next(iter(indexes)) if len(indexes) == 1 else None
        self._lock = threading.Lock()

    def index(self) -> Index | None:
        if len(self.indexes) == 1 or self.path is None:
            return self.indexes.get(self._name) if self._name else None
        with self._lock:
            try:
                st = self.path.stat()
                key = (st.st_ino, st.st_mtime_ns, st.st_size)
                if key != self._seen:
                    self._seen, self._name = key, self.path.read_text().strip()
            except OSError:
                self._seen, self._name = None, None
            return self.indexes.get(self._name) if self._name else None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "plt-bench-replayd"
    active: Active
    bodies: Bodies
    scripts: dict[str, str]   # archive name -> its document script ('' when not deterministic)
    owner: dict[int, str]     # id(Response) -> its archive's name
    thinking: timing.ThinkFile  # the think the testbed asks now (--think-file)
    thinks: dict[int, float]  # id(Response) -> its recorded think time (ms), where the recording has one
    _arrived: float = 0.0
    _response: "archive_mod.Response | None" = None

    def log_message(self, *args) -> None:  # Caddy's access log is the record
        pass

    def _think(self) -> list[tuple[str, str]]:
        """Wait as the think asks before this response's first byte; its header, or none when off."""
        think = self.thinking.current()
        if not think.on:
            return []
        r = self._response
        asked = think.ms if think.mode == "fixed" else self.thinks.get(id(r), 0.0) if r is not None else 0.0
        left = asked / 1000.0 - (time.monotonic() - self._arrived)
        if left > 0:
            time.sleep(left)
        return [(timing.HEADER.lower(), timing.header(asked, (time.monotonic() - self._arrived) * 1000.0))]

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        headers = [*headers, *self._think()]
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _serve(self) -> None:
        self._arrived, self._response = time.monotonic(), None
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)  # a recorded POST's body is not matched on: read and set aside
        host = re.sub(r":\d+$", "", self.headers.get("Host") or "")
        method = "GET" if self.command == "HEAD" else self.command
        index = self.active.index()
        r, how = index.match(method, host, self.path) if index else (None, "miss")
        self._response = r
        if r is None and self.command == "OPTIONS":  # a CORS preflight the recording did not keep
            allow = [("access-control-allow-origin", self.headers.get("Origin") or "*"),
                     ("access-control-allow-methods", self.headers.get("Access-Control-Request-Method") or "GET"),
                     ("access-control-allow-headers", self.headers.get("Access-Control-Request-Headers") or "*"),
                     ("access-control-allow-credentials", "true"), ("access-control-max-age", "600"),
                     (HEADER.lower(), "preflight")]
            self._send(204, allow, b"")
            return
        if r is None:
            self._send(404, [("content-type", "text/plain"), ("cache-control", "no-store"),
                             ("access-control-allow-origin", "*"), ("timing-allow-origin", "*"),
                             (HEADER.lower(), "miss")], MISS_BODY)
            return
        if method == "GET" and r.status == 200 and not_modified(r.headers, dict(self.headers.items())):
            self._send(*not_modified_response(r, how))  # a revisit's revalidation, as the recorded server answered
            return
        name = self.owner[id(r)]
        body = self.bodies.plain(name, r.body) if r.body else b""
        status, headers, body = respond(r, how, body, self.headers.get("Accept-Encoding") or "",
                                        self.scripts.get(name) or None, self.bodies)
        self._send(status, headers, body)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _serve


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(sites: Path, names: list[str], port: int, deterministic: bool = True,
                host: str = "127.0.0.1", active: Path | None = None, think: Path | None = None) -> Server:
    archives = [archive_mod.load(n, sites) for n in names]
    by_index = {a.name: archive_mod.recorded_thinks(a) or {} for a in archives}
    handler = type("BoundHandler", (Handler,), {
        "active": Active({a.name: Index([a]) for a in archives}, active),
        "bodies": Bodies({a.name: replay_root(sites, a.name) / archive_mod.BODIES for a in archives}),
        "scripts": {a.name: deterministic_script(int(a.source.get("recorded_unix_ms") or 0)) if deterministic else ""
                    for a in archives},
        "owner": {id(r): a.name for a in archives for r in a.responses},
        "thinking": timing.ThinkFile(think),
        "thinks": {id(r): by_index[a.name][r.index] for a in archives for r in a.responses if r.index in by_index[a.name]},
    })
    return Server((host, port), handler)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m plt_bench.replayd", description=__doc__.splitlines()[0])
    p.add_argument("--sites", required=True, type=Path)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--deterministic", choices=("on", "off"), default="on")
    p.add_argument("--active", type=Path, default=None,
                   help="a file naming the recording measured now (several recordings: each served alone)")
    p.add_argument("--think-file", type=Path, default=None,
                   help="a file naming the think time asked now (pages.timing: off, recorded or MS)")
    p.add_argument("names", nargs="+")
    a = p.parse_args(argv)
    return serve_announced(make_server(a.sites, a.names, a.port, a.deterministic == "on", active=a.active,
                                       think=a.think_file))


def serve_announced(server: http.server.HTTPServer) -> int:
    """Say where the server listens ({"port": N}, the line its parent reads), then serve until
    stopped; 0. (The replay server's and the think stage's main.)"""
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
