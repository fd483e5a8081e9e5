"""Replayed pages: a recorded page (a HAR 1.2 file) turned into a page set plt-bench serves over
h1, h2 and h3 and proves request by request (`plt-bench pages --from-har FILE NAME`, then
`--size har:NAME`).

What is kept of the recording, in its order: the page's document and every object it loaded
(each GET answered 200 over http or https), each object's origin, type (its MIME type) and size
(the decoded body: the replay serves bodies uncompressed). Each recorded origin becomes one of the
testbed's origins (pages.origin_host: the document's is plt.test, the others plt-o1.test, ... in
order of first appearance, each on its own address), so connections per origin are as the
recording's. Object k is served at https://<its origin>/replay/NAME/<k>-<its file name><its query>.

Bodies come from the HAR where it holds them whole (content.text, base64 or not, of the recorded
size), else they are made of the same size: a padded PNG for an image, a comment for a stylesheet
or a script, filler for anything else. Active bodies (HTML, CSS, JavaScript) are always made, never
copied: a recorded script would run and ask for what the recording does not list (no request of
the replay could then be proven), and a stylesheet would fetch its own url()s twice. The page is
plt-bench's own HTML, padded to the recorded document's size: each object in order as its element
(element_for): an <img> for an image, a <link rel=stylesheet>, a <script>, an <iframe> for a
sub-document, and for whatever has no element of its own (fonts, JSON, media) a preload as a fetch,
which reads the body whole and caches it; an <img> (as before issue 36) cut such a body off at the
first bytes that were no image, and a repeat visit found nothing whole in its cache.

Refused, with the entry's number, exit 2 and nothing written outside the new page set:
malformed files (not JSON, no log.entries, a field of the wrong type, a body that is not valid
base64), huge ones (over MAX_HAR_BYTES, more than pages.MAX_OBJECTS objects, more than
pages.MAX_ORIGINS origins, more than pages.MAX_PAGE_BYTES in all) and hostile ones: a scheme other
than http or https, a path with a `..` segment (also percent-encoded or with backslashes), a host
that is an address, `localhost` or carries user information, or a redirect to a host the
recording does not hold.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urljoin, urlsplit

from .errors import UsageError
from .pages import (MAX_OBJECTS, MAX_ORIGINS, MAX_PAGE_BYTES, MIN_OBJECT_BYTES, REPLAY_MANIFEST, REPLAY_NAME_RE,
                    ReplayObject, ReplaySet, _FILL_LINE, iter_png, replay_html, replay_root)

FORMAT_VERSION = 1
MAX_HAR_BYTES = 200 * 10**6
FILE_RE = re.compile(r"[A-Za-z0-9._-]{1,60}")
ACTIVE = ("text/html", "text/css", "application/javascript", "text/javascript", "application/x-javascript")
EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp",
              "image/avif": ".avif", "image/svg+xml": ".svg", "image/x-icon": ".ico", "image/vnd.microsoft.icon": ".ico",
              "text/css": ".css", "application/javascript": ".js", "text/javascript": ".js",
              "application/x-javascript": ".js", "application/json": ".json", "font/woff2": ".woff2",
              "font/woff": ".woff", "font/ttf": ".ttf", "text/html": ".html", "text/plain": ".txt",
              "application/wasm": ".wasm", "video/mp4": ".mp4", "audio/mpeg": ".mp3"}
OPTION = "--from-har"



def check_name(name: str, option: str = "NAME") -> str:
    if not REPLAY_NAME_RE.fullmatch(name or ""):
        raise UsageError(f"{option}: '{name}' is not a page set name; expected 1 to 40 of a-z, 0-9, '_' and '-', "
                         "starting with a letter or digit (e.g. news-home)")
    return name


# -- reading a recording -------------------------------------------------------------------------------------
def _bad(what: str) -> UsageError:
    return UsageError(f"{OPTION}: {what}")


def _get(d, key, kind, where):
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise _bad(f"{where}: '{key}' is missing or not {kind.__name__ if isinstance(kind, type) else 'valid'}: "
                   "not a HAR 1.2 file")
    return v


def _origin(url: str, where: str) -> tuple[str, str]:
    """(origin, path) of a recorded URL; hostile forms refused."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        raise _bad(f"{where}: '{url[:80]}' is not a URL") from None
    if u.scheme not in ("http", "https"):
        raise _bad(f"{where}: '{url[:80]}' has the scheme '{u.scheme}'; a page set replays http and https only "
                   "(hostile or not a web page's request)")
    host = (u.hostname or "").lower()
    if u.username is not None or u.password is not None or "@" in u.netloc:
        raise _bad(f"{where}: '{url[:80]}' carries user information; refused (hostile)")
    if not host or not re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*", host) \
            or re.fullmatch(r"[0-9.]+", host) or host == "localhost" or host.endswith(".localhost"):
        raise _bad(f"{where}: '{url[:80]}' names the host '{host}', an address or not a public name; a recording "
                   "names web hosts (hostile)")
    path = u.path or "/"
    segments = re.split(r"[/\\]", unquote(unquote(path)))
    if "\x00" in unquote(unquote(path)) or "\x00" in url:
        raise _bad(f"{where}: {url[:80]!r} has a NUL character in its path; refused (hostile)")
    if ".." in segments or "\\" in path:
        raise _bad(f"{where}: '{url[:80]}' has a '..' segment or a backslash in its path; refused (hostile)")
    default = 443 if u.scheme == "https" else 80
    return f"{u.scheme}://{host}{'' if port in (None, default) else f':{port}'}", path


def element_for(mime: str) -> str:
    """How the replayed page loads an object of a type (pages.replay_html renders each)."""
    if mime == "text/css":
        return "link"
    if mime in ACTIVE[2:]:
        return "script"
    if mime in ("text/html", "application/xhtml+xml"):
        return "iframe"
    return "img" if mime.startswith("image/") else "fetch"


def _mime(entry: dict) -> str:
    content = (entry.get("response") or {}).get("content") or {}
    return str(content.get("mimeType") or "application/octet-stream").split(";")[0].strip().lower()


def _har_body(entry: dict, size: int, where: str) -> bytes | None:
    """The recorded body where the HAR holds it whole, else None."""
    content = (entry.get("response") or {}).get("content") or {}
    text = content.get("text")
    if not isinstance(text, str):
        return None
    if content.get("encoding") == "base64":
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise _bad(f"{where}: its body is marked base64 but is not valid base64 (malformed)") from None
    else:
        data = text.encode("utf-8", "surrogatepass")
    return data if len(data) == size else None


def read_bytes(path: Path) -> bytes:
    """A recording's bytes: a regular file (a link to one is followed) read to at most MAX_HAR_BYTES,
    whatever its size claims (/proc/self/mem says 0 and cannot be read)."""
    import stat
    path = Path(path)
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:  # a FIFO does not block here
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise _bad(f"{path} is not a file")
            data = f.read(MAX_HAR_BYTES + 1)
    except OSError as e:
        raise _bad(f"{path}: {e.strerror or e}; expected a HAR 1.2 file that can be read") from None
    if len(data) > MAX_HAR_BYTES:
        raise _bad(f"{path} is over {MAX_HAR_BYTES // 10**6} MB; a recording is at most {MAX_HAR_BYTES // 10**6} MB "
                   "(huge)")
    return data


def read(path: Path, data: bytes | None = None) -> tuple[dict, list[dict]]:
    """The HAR's log and its first page's entries, in order; malformed and huge files refused."""
    path = Path(path)
    data = read_bytes(path) if data is None else data
    try:
        data = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(f"{path} is not JSON ({e}); expected a HAR 1.2 file") from None
    except RecursionError:
        raise _bad(f"{path}: its JSON is nested too deeply for a HAR 1.2 file (hostile)") from None
    log = _get(data, "log", dict, str(path))
    entries = _get(log, "entries", list, f"{path}: log")
    if not entries:
        raise _bad(f"{path}: the recording has no entries")
    pages = log.get("pages") if isinstance(log.get("pages"), list) else []
    if pages:
        ref = pages[0].get("id") if isinstance(pages[0], dict) else None
        entries = [e for e in entries if not isinstance(e, dict) or e.get("pageref", ref) == ref]
        if not entries:
            raise _bad(f"{path}: no entry belongs to the first page ('pageref' {str(ref)[:40]!r}); a recording holds "
                       "its first page's requests")
    for i, e in enumerate(entries):
        where = f"entry {i + 1}"
        _get(e, "request", dict, where)
        _get(e, "response", dict, where)
        _get(e["request"], "url", str, f"{where} request")
        _get(e["response"], "status", int, f"{where} response")
        for key, kind in (("content", dict), ("redirectURL", str)):
            if e["response"].get(key) is not None and not isinstance(e["response"][key], kind):
                raise _bad(f"{where} response: '{key}' is not {'an object' if kind is dict else 'a string'}: not a "
                           "HAR 1.2 file (malformed)")
        if "method" in e["request"] and not isinstance(e["request"]["method"], str):
            raise _bad(f"{where} request: 'method' is not a string: not a HAR 1.2 file (malformed)")
    return log, entries


# -- making a page set --------------------------------------------------------------------------------------
def plan(log: dict, entries: list[dict], name: str) -> tuple[ReplaySet, list[bytes | None], list[str]]:
    """The page set a recording makes (pure): its ReplaySet, each object's recorded body or None,
    and what was left out (one line per kind). Every refusal names the entry."""
    doc = entries[0]
    doc_origin, _ = _origin(doc["request"]["url"], "entry 1 (the document)")
    if doc["response"]["status"] != 200 or not _mime(doc).startswith(("text/html", "application/xhtml")):
        raise _bad(f"entry 1 is not the page's document (status {doc['response']['status']}, {_mime(doc)}); a "
                   "recording starts with the page it loaded (malformed)")
    origins = [doc_origin]
    recorded_hosts = {doc_origin}
    kept: list[tuple[int, dict, str, str]] = []
    left: dict[str, int] = {}
    for i, e in enumerate(entries[1:], start=2):
        where = f"entry {i}"
        origin, path = _origin(e["request"]["url"], where)
        recorded_hosts.add(origin)
        status, method = e["response"]["status"], str(e["request"].get("method", "GET")).upper()
        redirect = e["response"].get("redirectURL") or ""
        if redirect and 300 <= status < 400:
            # resolved as a browser would: '//host/x' is another host, 'x' a path beside the request's
            target, _ = _origin(urljoin(e["request"]["url"], redirect), f"{where} redirect")
            kept_hosts = {urlsplit(x["request"]["url"]).hostname for x in entries if isinstance(x, dict)}
            if urlsplit(target).hostname not in kept_hosts:
                raise _bad(f"{where}: redirects to '{redirect[:80]}', a host the recording does not hold (hostile)")
        why = ("not a GET" if method != "GET" else f"status {status}" if status != 200 else None)
        if why:
            left[why] = left.get(why, 0) + 1
            continue
        kept.append((i, e, origin, path))
        if origin not in origins:
            origins.append(origin)
    if len(kept) > MAX_OBJECTS:
        raise _bad(f"the recording has {len(kept)} objects; a page set holds at most {MAX_OBJECTS} (huge)")
    if len(origins) > MAX_ORIGINS:
        raise _bad(f"the recording has {len(origins)} origins; the testbed serves at most {MAX_ORIGINS} (huge)")
    objects, bodies = [], []
    for k, (i, e, origin, path) in enumerate(kept):
        where = f"entry {i}"
        mime = _mime(e)
        size = (e["response"].get("content") or {}).get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise _bad(f"{where}: response.content.size is {size!r}; expected the body's bytes (malformed)")
        body = _har_body(e, size, where)  # a body marked base64 that is not is refused, kept or not
        if mime in ACTIVE:
            body = None  # made, never copied (the module's doc)
        base = path.rstrip("/").rsplit("/", 1)[-1] or "index"
        safe = "".join(c if FILE_RE.fullmatch(c) else "_" for c in unquote(base))[:50] or "object"
        ext = EXTENSIONS.get(mime, ".bin")
        if not safe.endswith(ext):
            safe += ext
        query = urlsplit(e["request"]["url"]).query
        element = element_for(mime)
        objects.append(ReplayObject(index=k, origin=origins.index(origin), recorded_url=e["request"]["url"][:2000],
                                    file=f"{k}-{safe}", query=f"?{query}" if query else "", mime=mime, size=size,
                                    element=element, body="har" if body is not None else "made", sha256=""))
        bodies.append(body)
    doc_size = (doc["response"].get("content") or {}).get("size")
    doc_size = doc_size if isinstance(doc_size, int) and not isinstance(doc_size, bool) and doc_size > 0 else 0
    total = sum(o.size for o in objects) + doc_size  # the document is padded to its recorded size: it counts
    if total > MAX_PAGE_BYTES:
        raise _bad(f"the recording's document and objects hold {total} bytes; a page is at most {MAX_PAGE_BYTES} "
                   "(huge)")
    rs = ReplaySet(name=name, origins=tuple(origins), objects=tuple(objects), html_bytes=0,
                   recorded_document_bytes=doc_size,
                   source={"document_url": doc["request"]["url"][:2000],
                           "creator": (log.get("creator") or {}).get("name") if isinstance(log.get("creator"), dict)
                           else None, "left_out": left})
    rs = dataclasses.replace(rs, html_bytes=len(replay_html(rs)))
    return rs, bodies, [f"{n} entr{'y' if n == 1 else 'ies'} left out: {why}" for why, n in left.items()]


def made_body(mime: str, size: int) -> Iterator[bytes]:
    """A body of exactly size bytes for a type: a padded PNG for an image (where it fits), a comment
    for a stylesheet, a script or HTML, filler for the rest."""
    if mime.startswith("image/") and size >= MIN_OBJECT_BYTES:
        yield from iter_png(size)
        return
    frame = {"text/css": (b"/*", b"*/"), "text/html": (b"<!--", b"-->")}.get(mime)
    if mime in ACTIVE[2:]:
        frame = (b"/*", b"*/")
    if frame and size >= len(frame[0]) + len(frame[1]):
        inner = size - len(frame[0]) - len(frame[1])
        yield frame[0] + (_FILL_LINE * (inner // len(_FILL_LINE) + 1))[:inner].replace(b"*/", b"* ") + frame[1]
        return
    yield (b" " * size) if frame or mime.startswith("text/") else (_FILL_LINE * (size // len(_FILL_LINE) + 1))[:size]


def make(har_path: Path, name: str, sites: Path) -> tuple[ReplaySet, list[str]]:
    """Write the page set NAME of a recording under sites/replay/NAME: a new folder, made beside it
    and renamed into place whole, or nothing at all. Returns the set and what was left out."""
    log, entries, source = read_recording(har_path, name, sites)
    rs, bodies, notes = plan(log, entries, name)
    rs = dataclasses.replace(rs, source={**rs.source, **source})

    def fill(tmp: Path) -> ReplaySet:
        objects = []
        for o, body in zip(rs.objects, bodies):
            h = hashlib.sha256()
            with open(tmp / o.file, "wb") as f:
                for piece in ([body] if body is not None else made_body(o.mime, o.size)):
                    f.write(piece)
                    h.update(piece)
            objects.append(dataclasses.replace(o, sha256=h.hexdigest()))
        done = dataclasses.replace(rs, objects=tuple(objects))
        (tmp / "index.html").write_bytes(replay_html(done))
        (tmp / REPLAY_MANIFEST).write_text(json.dumps(to_json(done), indent=1) + "\n")
        return done
    return write_whole(sites, name, fill), notes


def read_recording(har_path: Path, name: str, sites: Path) -> tuple[dict, list[dict], dict]:
    """A recording to make the set NAME of (its name checked, not taken): its log, its first page's
    entries, and what the set records of its source (file name, SHA-256)."""
    check_name(name)
    refuse_existing(sites, name)
    data = read_bytes(Path(har_path))
    log, entries = read(har_path, data)
    return log, entries, {"file": Path(har_path).name, "sha256": hashlib.sha256(data).hexdigest()}


def refuse_existing(sites: Path, name: str) -> None:
    dest = replay_root(sites, name)
    if dest.exists():
        raise UsageError(f"NAME: a page set '{name}' exists already ({dest}); choose another name or remove it")


def write_whole(sites: Path, name: str, fill):
    """Make sites/replay/NAME whole or not at all: fill(a new folder beside it) writes it, which is then
    renamed into place; a full disk, a read-only folder, an interruption leave nothing of it (a
    killed maker's half is removed by the next: remove_dead_parts). Returns what fill returns."""
    dest = replay_root(sites, name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_parts(dest.parent)
    tmp = dest.parent / f".{name}{PART}{os.getpid()}"
    try:
        tmp.mkdir()
        out = fill(tmp)
        try:
            os.rename(tmp, dest)
        except OSError:
            if dest.exists():  # another maker of the same set finished first: theirs stands
                refuse_existing(sites, name)
            raise
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"NAME: the page set '{name}' cannot be written in {dest.parent} ({e.strerror or e}); nothing "
                         "was written") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


PART = ".part-"  # a set being made: .NAME.part-PID beside the sets, renamed into place whole


def remove_dead_parts(folder: Path) -> list[str]:
    """Half-made sets whose maker is gone (killed mid-write: SIGKILL runs no cleanup): removed, by
    name; a live maker's is kept. Returns the names removed."""
    removed = []
    try:
        found = [p for p in Path(folder).iterdir() if p.name.startswith(".") and PART in p.name]
    except OSError:
        return removed
    for p in found:
        pid = p.name.rsplit(PART, 1)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
    return removed


def to_json(rs: ReplaySet) -> dict:
    return {"format": FORMAT_VERSION, "name": rs.name, "origins": list(rs.origins), "html_bytes": rs.html_bytes,
            "recorded_document_bytes": rs.recorded_document_bytes, "source": rs.source,
            "objects": [dataclasses.asdict(o) for o in rs.objects]}




def requests_of(log: dict) -> list[tuple[int, str, str, int]]:
    """A recording's requests as a replay keeps them (pure), for comparing two recordings: per
    object answered 200 to a GET, after the document, in order: (its origin's place among the
    recording's origins, its file name (a replay's without its 'k-' prefix) and query, its MIME
    type, its body bytes)."""
    entries = [e for e in log["log"]["entries"] if isinstance(e, dict)]
    origins: list[str] = []
    out = []
    for i, e in enumerate(entries):
        origin, path = _origin(e["request"]["url"], f"entry {i + 1}")
        if origin not in origins:
            origins.append(origin)
        if i == 0 or e["response"]["status"] != 200 or str(e["request"].get("method", "GET")).upper() != "GET":
            continue
        name = path.rsplit("/", 1)[-1]
        if path.startswith("/replay/"):
            name = name.split("-", 1)[1] if "-" in name else name
        query = urlsplit(e["request"]["url"]).query
        out.append((origins.index(origin), name + (f"?{query}" if query else ""), _mime(e),
                    int((e["response"].get("content") or {}).get("size", -1))))
    return out


def round_trip_differences(recorded: dict, replayed: dict) -> list[str]:
    """What a replay's recording shows that the recording it was made of does not, or the other
    way round: requests, origins, types and sizes (order aside: a browser may ask for two images
    in either order); [] when they are the same."""
    a, b = sorted(requests_of(recorded)), sorted(requests_of(replayed))
    if a == b:
        return []
    gone, extra = [x for x in a if x not in b], [x for x in b if x not in a]
    return ([f"recorded, not replayed: origin {o} {n} {m} {s} bytes" for o, n, m, s in gone]
            + [f"replayed, not recorded: origin {o} {n} {m} {s} bytes" for o, n, m, s in extra])
