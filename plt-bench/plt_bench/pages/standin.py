"""Stand-in pages: a recorded page (a HAR 1.2 file) turned into a page set plt-bench serves over
h1, h2 and h3 and proves request by request (`plt-bench pages --from-har FILE NAME`, then
`--size har:NAME`): the page's own HTML, each object a stand-in of its recorded size.

What is kept of the recording, in its order: the page's document and every object it loaded
(each GET answered 200 over http or https), each object's origin, type (its MIME type) and size
(the decoded body: the replay serves bodies uncompressed). Each recorded origin becomes one of the
testbed's origins (base.origin_host: the document's is plt.test, the others plt-o1.test, ... in
order of first appearance, each on its own address), so connections per origin are as the
recording's. Object k is served on its origin at /replay/NAME/<k>-<its file name><its query>.

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

A recording too large for the testbed is refused (more than base.MAX_OBJECTS objects, more than
base.MAX_ORIGINS origins, more than base.MAX_PAGE_BYTES in all), as harfile refuses malformed and
hostile ones. A recording replayed as recorded is the recording kind's, not this one's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urljoin, urlsplit

from ..errors import UsageError
from . import proof
from . import base
from .base import (MAX_OBJECTS, MAX_ORIGINS, MAX_PAGE_BYTES, REPLAY_NAME_RE, RESOURCE_BUFFER_SPARE,
                   Judged, Load, Page, PageKind, origin_host, page_url, register, replay_root)
from .content import FILL_LINE, MIN_OBJECT_BYTES, iter_png
from .harfile import _bad, _har_body, _mime, _origin, read_recording, write_whole

FORMAT_VERSION = 1
REPLAY_MANIFEST = "replay.json"
FILE_RE = re.compile(r"[A-Za-z0-9._-]{1,60}")
ACTIVE = ("text/html", "text/css", "application/javascript", "text/javascript", "application/x-javascript")
EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp",
              "image/avif": ".avif", "image/svg+xml": ".svg", "image/x-icon": ".ico", "image/vnd.microsoft.icon": ".ico",
              "text/css": ".css", "application/javascript": ".js", "text/javascript": ".js",
              "application/x-javascript": ".js", "application/json": ".json", "font/woff2": ".woff2",
              "font/woff": ".woff", "font/ttf": ".ttf", "text/html": ".html", "text/plain": ".txt",
              "application/wasm": ".wasm", "video/mp4": ".mp4", "audio/mpeg": ".mp3"}

@dataclasses.dataclass(frozen=True)
class ReplayObject:
    """One recorded object as the page set serves it."""
    index: int        # its place in the recording, from 0 (the document not counted)
    origin: int       # the testbed origin it is served from (pages.origin_host)
    recorded_url: str
    file: str         # its file in the page set's folder: <index>-<name><ext>
    query: str        # the recorded query, with its '?', or ''
    mime: str
    size: int         # decoded body bytes
    element: str      # img | link | script | iframe | fetch (replay.element_for)
    body: str         # har | made
    sha256: str

    @property
    def uri(self) -> str:
        return f"/{self.file}{self.query}"


@dataclasses.dataclass(frozen=True)
class ReplaySet:
    """A page set made from a recording (MANIFEST in its folder)."""
    name: str
    origins: tuple[str, ...]        # the recorded origins (scheme://host[:port]), in order: index = testbed origin
    objects: tuple[ReplayObject, ...]
    html_bytes: int                 # the page's HTML (the recorded document's size where it was larger than ours)
    recorded_document_bytes: int
    source: dict                    # the HAR's file name, SHA-256, creator, document URL, entries left out

    @property
    def object_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    def object_path(self, o: ReplayObject) -> str:
        return f"/replay/{self.name}/{o.file}"


def replay_html(rs: "ReplaySet") -> bytes:
    """The page: each object in the recorded order as its element, padded to the recorded document's
    size where that is larger."""
    head = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>plt-bench har:{rs.name}</title>\n<meta name=\"referrer\" content=\"unsafe-url\">\n"
            f"<script>performance.setResourceTimingBufferSize({len(rs.objects) + RESOURCE_BUFFER_SPARE})</script>\n")
    links, body = [], []
    for o in rs.objects:
        src = page_url(origin_host(o.origin), f"{rs.object_path(o)}{o.query}").replace("&", "&amp;").replace('"', "%22")
        if o.element == "link":
            links.append(f'<link rel="stylesheet" href="{src}">\n')
        elif o.element == "script":
            body.append(f'<script src="{src}"></script>\n')
        elif o.element == "fetch":  # read whole and cached, never decoded (the server allows any origin)
            links.append(f'<link rel="preload" as="fetch" crossorigin="anonymous" href="{src}">\n')
        elif o.element == "iframe":
            body.append(f'<iframe src="{src}" width="1" height="1" title="recorded sub-document"></iframe>\n')
        else:
            body.append(f'<img src="{src}" width="1" height="1" alt="">\n')
    text = (head + "".join(links) + "</head>\n<body>\n<h1>plt-bench replayed page</h1>\n"
            f"<p id=\"size\">har:{rs.name}: {len(rs.objects)} objects from {len(rs.origins)} origins</p>\n"
            + "".join(body) + "<p id=\"end\">end of page</p>\n").encode()
    tail = b"</body>\n</html>\n"
    pad = rs.recorded_document_bytes - len(text) - len(tail)
    if pad >= 8:
        inner = pad - 8
        text += b"<!--" + (b"x" * inner) + b"-->\n"
    return text + tail


_CACHE: dict[tuple, ReplaySet] = {}  # by folder and manifest (inode, time, size): a set made again is read again


def load_replay(name: str, sites: Path | None = None, option: str = "--size") -> ReplaySet:
    """A page set made before (its manifest), or a message saying how to make it."""
    if not REPLAY_NAME_RE.fullmatch(name or ""):
        raise UsageError(f"{option}: 'har:{name}': '{name}' is not a page set name; expected 1 to 40 of a-z, 0-9, '_' "
                         "and '-', starting with a letter or digit")
    folder = replay_root(sites or base.DEFAULT_SITES, name)
    try:
        st = (folder / REPLAY_MANIFEST).stat()
        key = (str(folder), st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key in _CACHE:
        return _CACHE[key]
    try:
        d = json.loads((folder / REPLAY_MANIFEST).read_text())
        rs = ReplaySet(name=d["name"], origins=tuple(d["origins"]),
                       objects=tuple(ReplayObject(**o) for o in d["objects"]), html_bytes=d["html_bytes"],
                       recorded_document_bytes=d["recorded_document_bytes"], source=d["source"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"{option}: 'har:{name}': no page set {name} in {folder.parent}; make it from a recording: "
                         f"plt-bench pages --from-har FILE {name}") from None
    if key:
        _CACHE[key] = rs
    return rs


def check_replay(name: str, sites: Path) -> None:
    """The page set's files are whole (sizes and checksums as made); a damaged set is named."""
    rs = load_replay(name, sites)
    folder = replay_root(sites, name)
    for o in rs.objects:
        p = folder / o.file
        if not p.is_file() or p.stat().st_size != o.size or _file_sha(p) != o.sha256:
            raise UsageError(f"--size: har:{name}: {p} is missing or changed since the page set was made; make it "
                             f"again (remove {folder}, then plt-bench pages --from-har FILE {name})")
    if (folder / "index.html").read_bytes() != replay_html(rs):
        raise UsageError(f"--size: har:{name}: {folder / 'index.html'} changed since the page set was made")


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def element_for(mime: str) -> str:
    """How the replayed page loads an object of a type (pages.replay_html renders each)."""
    if mime == "text/css":
        return "link"
    if mime in ACTIVE[2:]:
        return "script"
    if mime in ("text/html", "application/xhtml+xml"):
        return "iframe"
    return "img" if mime.startswith("image/") else "fetch"


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
        yield frame[0] + (FILL_LINE * (inner // len(FILL_LINE) + 1))[:inner].replace(b"*/", b"* ") + frame[1]
        return
    yield (b" " * size) if frame or mime.startswith("text/") else (FILL_LINE * (size // len(FILL_LINE) + 1))[:size]


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


def to_json(rs: ReplaySet) -> dict:
    return {"format": FORMAT_VERSION, "name": rs.name, "origins": list(rs.origins), "html_bytes": rs.html_bytes,
            "recorded_document_bytes": rs.recorded_document_bytes, "source": rs.source,
            "objects": [dataclasses.asdict(o) for o in rs.objects]}


class StandIn(PageKind):
    name = "standin"
    draws_after_load = False  # no script of its draws anything after the load
    repeatable = True
    item_form = "har:NAME (a recording, replayed as recorded, or a page set made from one: plt-bench pages --from-har FILE NAME)"
    served = r"replay/[a-z0-9][a-z0-9_-]*/(index\.html|[0-9]+-[A-Za-z0-9._-]+)"

    def claims(self, page: Page) -> bool:
        return bool(page.replay) and not page.archived and not page.url

    def parse(self, item: str, option: str) -> Page | None:
        """har:NAME where NAME is a page set (the recording kind, asked first, takes a recording)."""
        if not item.lower().startswith("har:"):
            return None
        rs = load_replay(item[4:], option=option)
        return Page(rs.object_bytes, len(rs.objects), origins=len(rs.origins), replay=rs.name)

    def label(self, page: Page) -> str:
        return f"har:{page.replay}"

    def html_name(self, page: Page) -> str:
        return f"replay/{page.replay}/index.html"

    def object_specs(self, page: Page) -> list[tuple[str, str, int]]:
        rs = load_replay(page.replay)
        return [(origin_host(o.origin), rs.object_path(o) + o.query, o.size) for o in rs.objects]

    def html(self, page: Page) -> bytes:
        return replay_html(load_replay(page.replay))

    def html_bytes(self, page: Page) -> int:
        return load_replay(page.replay).html_bytes

    def object_bytes(self, page: Page) -> int:
        return page.size_bytes

    def check(self, page: Page, sites: Path) -> None:
        check_replay(page.replay, sites)

    def sources(self, page: Page) -> dict:
        return load_replay(page.replay).source

    def expect(self, page: Page) -> tuple[str, ...]:
        """Its objects: their fetches (fonts, JSON) do not hold the load event."""
        return tuple(f"{h}{u}" for h, u, _ in page.object_specs())

    def judge(self, load: Load) -> Judged:
        return proof.document_and_objects(load)


STANDIN = register(StandIn())
