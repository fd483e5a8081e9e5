"""What every page a trial loads is, whatever its kind: the Page record, the kind interface every
kind implements (PageKind), the registry the kinds join, the testbed's host names, and the pages
folder (Sites).

A kind is one module of this package (generated, bulk, requests, standin, recording, folder, real)
holding everything about pages of that kind: how an item of --size names one, the files it needs,
its URL and hosts, what a load of it waits for, which of the server's log entries are its own, how
it is judged and which fields its trials store. This module imports no kind: a Page asks the
registry for its kind (Page.page_kind), and the kinds register themselves when the package is
imported (pages/__init__.py).

Sizes are decimal: 1 KB = 1000 bytes, 1 MB = 10**6 bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .. import cmd
from ..errors import UsageError

# The test host (.test is reserved, RFC 2606: it can never mean a real site), and a many-origin page's
# other origins: sites of their own (plt-o1.test, ...), each with its own address on the server, as a
# third party's would be (one address for all would let Chromium pool HTTP/2 and HTTP/3 connections
# across them, which real third parties on other addresses do not allow)
HOST = "plt.test"
MAX_ORIGINS = 16


def origin_host(k: int) -> str:
    """Origin k of a many-origin page: 0 is the page's own (plt.test), 1..MAX_ORIGINS-1 others."""
    if not 0 <= k < MAX_ORIGINS:
        raise ValueError(f"origin {k}: expected 0 to {MAX_ORIGINS - 1}")
    return HOST if k == 0 else f"plt-o{k}.test"


# A visit: a fresh browser's first load of the page (the default), or a repeat visit in the browser
# that loaded it a moment before, with its connections closed and its HTTP cache cleared ("repeat")
# or kept ("repeat-warm": the page revalidated, its images from the cache). Labels: 20x5KB@repeat.
VISITS = ("first", "repeat", "repeat-warm")

GENERATOR_VERSION = 1  # the single-object pages' bytes; multi-object files are new names, not a new version
MAX_OBJECTS = 1000
# Resource Timing keeps 250 entries unless the page asks for more: ours asks, before any <img>
RESOURCE_BUFFER_SPARE = 16
MIN_PAGE_BYTES = 1000  # smallest single-object page: its fixed HTML frame fits
MAX_PAGE_BYTES = 2 * 10**9  # largest the testbed generates (all of a page's objects together)

# page sets and recordings: sites/replay/NAME, by a name of this form (the stand-in and recording kinds)
REPLAY_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
# where the CLI, the testbed and --size har:NAME find page sets and recordings: the project's sites, or
# PLT_BENCH_SITES (a cluster's worker whose pages live elsewhere; the suite's worker of its own folder)
DEFAULT_SITES = Path(os.environ.get("PLT_BENCH_SITES") or cmd.PROJECT_ROOT / "sites")


def replay_root(sites: Path, name: str) -> Path:
    """A page set's or a recording's folder: sites/replay/NAME."""
    return Path(sites) / "replay" / name


SCHEME = "https"  # every page of the testbed, and every page it replays, is served over TLS


def page_url(host: str, target: str = "/") -> str:
    """The address of target (a path with its query, from its first '/') on a host (pure); url_host and
    url_path read it back."""
    return f"{SCHEME}://{host}{target}"


def url_path(url: str | None) -> str:
    """An address's path with its query: page_url(HOST, '/obj_5KB.png?i=3') -> '/obj_5KB.png?i=3'."""
    rest = (url or "").split("://", 1)[-1]
    return "/" + rest.split("/", 1)[1] if "/" in rest else "/"


def url_host(url: str | None) -> str:
    """An address's host, a port (if any) dropped: page_url(origin_host(1), '/x') -> origin_host(1)."""
    netloc = (url or "").split("://", 1)[-1].split("/", 1)[0]
    return netloc.rsplit(":", 1)[0] if ":" in netloc else netloc


def format_ms(ms: int) -> str:
    """30000 -> '30s', 100 -> '100ms' (labels and file names)."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclasses.dataclass(frozen=True)
class Page:
    """What one trial loads. Its kind (page_kind, from the fields set) says what it is; the fields:
    - size_bytes alone: one HTML file of size_bytes ("5KB", generated);
    - objects == N: an HTML page embedding N images of size_bytes each ("200x5KB": N + 1 requests,
      the HTML's own size set by N); with origins == G > 1 ("4o:60x5KB") image k comes from origin
      k mod G (origin_host: 0 is the page's own, the others sites of their own) (generated);
    - bulk_ms > 0: a page that downloads /bulk.bin for bulk_ms after its load and counts the bytes
      per interval_ms ("bulk30s", "bulk30s_100ms"; size_bytes 0) (bulk);
    - requests == K: a page that, after its load, makes K requests for an object of size_bytes,
      `streams` at once ("req100x1KB", "req100x1KB_c10") (requests);
    - replay: a page set made from a recording, each object a stand-in of its size (har:NAME,
      standin), or with `archived` the recording itself replayed as recorded (recording);
    - url: a page of a folder served as it is (url:ADDRESS, folder).
    `measures` is the word a trial stores (page, bulk or requests); `page_kind` the module's kind."""

    size_bytes: int
    objects: int = 0
    bulk_ms: int = 0
    interval_ms: int = 0  # a bulk page's interval (1000 unless asked); 0 for other pages
    requests: int = 0
    streams: int = 0      # a request page's requests at once (1 unless asked); 0 for other pages
    origins: int = 1      # a multi-object page's origins: its objects round-robin over them (origin_host)
    visit: str = "first"  # first | repeat | repeat-warm (VISITS): which load of it a trial measures
    replay: str = ""      # a replayed page's page set (har:NAME); size_bytes is then all its objects' bytes
    #                       together, objects and origins the recording's
    # the set is a recording, replayed as recorded: objects counts its recorded requests after the navigation,
    # origins its recorded hosts. Not compared: a name is a recording or a stand-in, never both (one folder)
    archived: bool = dataclasses.field(default=False, compare=False)
    url: str = ""         # a page of a folder served as it is (url:ADDRESS, --folder HOST=DIR): its own
    #                       URL, its requests whatever it asks for (size_bytes 0: not known before the load)
    form: str = ""        # the kind by its name, where the fields alone do not tell it (a kind added since these
    #                       fields: pages.scripts); "": the kind that claims the fields

    @property
    def page_kind(self) -> "PageKind":
        """The kind this page is: the one its form names, else the first of KINDS that claims it."""
        if self.form:
            return kind_named(self.form)
        for k in KINDS:
            if k.claims(self):
                return k
        raise LookupError(f"no page kind claims {self!r}: is plt_bench.pages imported?")

    @property
    def measures(self) -> str:
        """What a trial of it measures, the word it stores: bulk, requests, or page (every other kind)."""
        return self.page_kind.measures

    @property
    def label(self) -> str:
        return self.base_label + ("" if self.visit == "first" else f"@{self.visit}")

    @property
    def base_label(self) -> str:
        """The page whatever the visit (20x5KB for 20x5KB@repeat)."""
        return self.page_kind.label(self)

    @property
    def html_name(self) -> str:
        """The file a load asks for (or what stands for it: a recording's, a served folder's URL)."""
        return self.page_kind.html_name(self)

    @property
    def fetched(self) -> int:
        """Sub-resources the page fetches that the testbed knows before the load (its images, or its
        requests)."""
        return self.page_kind.fetched(self)

    @property
    def object_name(self) -> str | None:
        """The one file a generated page's objects are (several URIs of it), or None."""
        return self.page_kind.object_name(self)

    def object_uris(self) -> list[str]:
        """The URIs the page asks for its objects under (relative to the site's root)."""
        return [u for _, u, _ in self.object_specs()]

    def object_urls(self) -> list[tuple[str, str]]:
        """(host, URI) of every object, in the page's order."""
        return [(h, u) for h, u, _ in self.object_specs()]

    def object_specs(self) -> list[tuple[str, str, int]]:
        """(host, URI, body bytes) of every object, in the page's order."""
        return self.page_kind.object_specs(self)

    def html(self) -> bytes:
        """The page's HTML, where the testbed writes it (a generated kind's)."""
        return self.page_kind.html(self)

    @property
    def html_bytes(self) -> int:
        return self.page_kind.html_bytes(self)

    @property
    def object_bytes(self) -> int:
        """Bytes of all the fetched objects together (0 for a single-object or bulk page)."""
        return self.page_kind.object_bytes(self)

    @property
    def total_bytes(self) -> int:
        """Every body the browser fetches (a bulk page: but its download): the HTML and all its objects."""
        return self.html_bytes + self.object_bytes

    def expected_bytes(self, rate_bps: int | None) -> int:
        """What a trial is expected to carry: every body, and what the page moves after its load (a bulk
        page's download at the link's rate; unshaped: as if 1 Gbit/s), for estimates such as the
        captures' size."""
        return self.total_bytes + self.page_kind.after_load_bytes(self, rate_bps)

    def sort_key(self) -> tuple:
        return (self.bulk_ms, self.requests, self.total_bytes, self.objects, self.interval_ms, self.streams,
                self.origins, VISITS.index(self.visit))

    def files(self) -> list[tuple[str, int, Callable[[], Iterator[bytes]] | None]]:
        """(file name, size, a function yielding its bytes) for every file the page needs in the
        pages folder; None for a sparse file of zeros (the bulk body)."""
        return self.page_kind.files(self)


class PageKind:
    """One kind of page: what every branch point of a trial asks of it. Subclasses override what
    differs from these defaults (a page the testbed generates, named by its file, served on the
    testbed's origins and told apart in the server's log by its trial's tag)."""

    name = ""              # the kind's word (its module's name)
    measures = "page"      # what a trial of it measures, the word it stores (records.Trial.measures)
    repeatable = False     # repeat visits (@repeat, @repeat-warm) of it are built
    repeat_later = False   # ... not yet, but they will be (a served folder's)
    served_as_recorded = False  # its own hosts and URL, untagged; its log entries told apart by host (a recording, a folder)
    replayed_hosts_first = False  # its hosts resolve to the replay's addresses before the generated pages'
    counts_delivery = False  # the link's delivery to the client is sampled during its load (a bulk page)
    draws_after_load = True  # its scripts may draw after the load: its paint metrics wait for it to settle
    item_form = ""         # how an item of --size names one, in words with examples (page_form)
    served = ""            # the paths of the pages folder its loads ask for: a regular expression (RE2 and Rust's
    #                        regex read it alike) of a path without its first '/'; every server serves these alone

    def parse(self, item: str, option: str) -> Page | None:
        """The page an item of --size names, None if the item is not of this kind's form; UsageError
        when it is but is wrong."""
        return None

    def claims(self, page: Page) -> bool:
        raise NotImplementedError

    def refuse_repeat(self, item: str, base: str, option: str) -> UsageError:
        if self.repeat_later:
            return UsageError(f"{option}: '{item}': repeat visits of a served folder's page are not "
                              f"built yet; measure its first visit ({base})")
        return UsageError(f"{option}: '{item}': repeat visits are of pages (5KB, 20x5KB, 4o:60x5KB), not of a "
                          f"{self.measures} page")

    # -- what it is ------------------------------------------------------------------------------------
    def label(self, page: Page) -> str:
        raise NotImplementedError

    def html_name(self, page: Page) -> str:
        return f"{page.base_label}.html"

    def fetched(self, page: Page) -> int:
        return page.objects

    def object_name(self, page: Page) -> str | None:
        return None

    def object_specs(self, page: Page) -> list[tuple[str, str, int]]:
        return []

    def html(self, page: Page) -> bytes:
        raise NotImplementedError(f"a {self.name} page's HTML is not made by plt-bench")

    def html_bytes(self, page: Page) -> int:
        return len(page.html())

    def object_bytes(self, page: Page) -> int:
        return page.fetched * page.size_bytes

    def after_load_bytes(self, page: Page, rate_bps: int | None) -> int:
        return 0

    def files(self, page: Page) -> list:
        return []

    def check(self, page: Page, sites: Path) -> None:
        """Raise UsageError where the page's files in sites are not whole (Sites.ensure)."""

    def sources(self, page: Page) -> dict:
        """What the page was made from, for a campaign's metadata ({} for a generated page)."""
        return {}

    # -- its load ----------------------------------------------------------------------------------------
    def url(self, page: Page, sites: Path, tag: str | None = None) -> str:
        """The URL a load asks for (with its trial's tag: the server's log tells trials apart by it)."""
        q = f"?trial={tag}" if tag else ""
        return page_url(HOST, f"/{page.html_name}{q}")

    def log_uri(self, page: Page, sites: Path, tag: str) -> str:
        """What the server's log names the page's own request by."""
        return f"/{page.html_name}?trial={tag}"

    def own_origins(self, page: Page) -> int | None:
        """How many of the testbed's origins the page asks for (a browser without the origins feature
        maps these alone); None: every one it may meet."""
        return page.origins

    def served_host(self, page: Page) -> str | None:
        """The host a folder served as it is (--folder HOST=DIR) must serve for the page (None: none)."""
        return None

    def recording_name(self, page: Page) -> str | None:
        """The recording the replay server answers from during its load (None: none)."""
        return None

    def recorded_hosts(self, page: Page, sites: Path, served: set[str]) -> set[str]:
        """The hosts whose log entries are the trial's (served_as_recorded kinds; served: the hosts of
        the folders the testbed serves as they are)."""
        return set()

    def recorded_path_delays(self, page: Page, sites: Path) -> dict[str, float] | None:
        """Each origin's path delay as its recording measured it (ms; pages.timing), for --origin-rtt
        recorded; None: the page keeps no recorded timing (every kind, until recordings keep it)."""
        return None

    def recorded_thinks(self, page: Page, sites: Path) -> dict[int, float] | None:
        """Each response's think time as its recording kept it (ms, by the response's index; pages.timing),
        for --think recorded; None: the page keeps no recorded waits (only a recording's may)."""
        return None

    def hosts(self, page: Page, sites: Path, served: set[str]) -> set[str]:
        """Every host a load of the page asks: its document's, its objects', and those whose log entries
        are the trial's (served: the hosts of the folders served as they are)."""
        own = self.served_host(page) or (HOST if not self.served_as_recorded else None)
        return ({own} if own else set()) | {h for h, _, _ in self.object_specs(page)} | self.recorded_hosts(
            page, sites, served)

    def expect(self, page: Page) -> tuple[str, ...]:
        """Objects ("host/path") whose Resource Timing entries the worker waits for after the load
        (fetches that do not hold the load event)."""
        return ()

    def await_s(self, page: Page, conditions) -> float:
        """Seconds to wait after the load for the page's own figures (its script's); 0: none."""
        return 0.0

    def settle_s(self, page: Page, transport: str, rtt_ms: float) -> float:
        """Seconds its browser stays up after its figures are read, before it is killed."""
        return 0.0

    def sample_s(self, page: Page) -> float:
        """How often the link's delivery is sampled (counts_delivery kinds)."""
        return 0.1

    def own_requests(self, page: Page) -> int:
        """Requests of the server's log that are one load's own (the page and its known fetches)."""
        return 1 + page.fetched

    # -- its judgement -----------------------------------------------------------------------------------
    def judge(self, load: "Load") -> "Judged":
        """The kind's judgement of one load, and the fields its trials store."""
        raise NotImplementedError


@dataclasses.dataclass
class Load:
    """What a kind judges one load by (trial.evidence.make_trial builds it)."""

    page: Page
    proto: str                           # the protocol asked for
    url: str                             # the URL the trial is stored under
    answer: dict                         # the browser worker's answer (records.WorkerAnswer)
    server_entries: list[dict] | None    # the trial's own entries of the server's log (None: unread)
    sites: Path
    discovered: bool = False             # the browser found its protocols (discovery), proven per request
    delivered: list[tuple[float, int]] | None = None  # the link's delivery counter, sampled (counts_delivery)
    delivery_dev: str | None = None      # the device that counter is read on


@dataclasses.dataclass
class Judged:
    """A kind's judgement of one load."""

    status: str                          # ok | failed
    reason: str | None
    objects_ok: int | None = None        # objects proven on both ends (None: the kind proves none)
    page_entries: list[dict] | None = None  # the server's entries for the page itself (None: unread)
    fields: dict = dataclasses.field(default_factory=dict)  # the kind's own Trial fields

    def fail(self, why: str | None) -> "Judged":
        """Failed for why (where it was ok and there is a why)."""
        if self.status == "ok" and why:
            self.status, self.reason = "failed", why
        return self


KINDS: list[PageKind] = []  # in the order they claim pages and parse items (pages/__init__.py)


def register(kind: PageKind) -> PageKind:
    """Add a kind to the registry (each kind's module, once)."""
    if any(k.name == kind.name for k in KINDS):
        raise ValueError(f"page kind {kind.name} registered twice")
    KINDS.append(kind)
    return kind


def kind_named(name: str) -> PageKind:
    for k in KINDS:
        if k.name == name:
            return k
    raise LookupError(f"no page kind named {name!r}; expected one of {', '.join(k.name for k in KINDS)}")


def page_form() -> str:
    """Every form an item of --size may take, in words: each kind's (its item_form), the generated
    pages' first."""
    forms = sorted((k for k in KINDS if k.item_form), key=lambda k: k.name != "generated")
    return ("; ".join(k.item_form for k in forms) + "; a generated page or a page set @repeat or @repeat-warm (a repeat "
            "visit); 1 KB = 1000 bytes, 1 KiB = 1024")


def served_paths() -> str:
    """The one expression of every path a server serves from the pages folder (servers.base.SERVED_PATHS):
    each kind's files; never MANIFEST.json, README.md or a page set's replay.json."""
    return "^/(" + "|".join(k.served for k in KINDS if k.served) + ")$"


def match_form(pattern: "re.Pattern", item: str, option: str, prefix: str, expected: str) -> "re.Match | None":
    """An item's match of a kind's form; None when the item is not of that kind; UsageError naming the
    form (expected) when it starts as the kind's items do (prefix) but is not one."""
    m = pattern.fullmatch(item)
    if m is None and item.lower().startswith(prefix):
        raise UsageError(f"{option}: '{item}' is not {expected}")
    return m


def parse_page(text: str, option: str = "--size") -> Page:
    """The page an item of --size names, by the first kind whose form it has: '500KB' one HTML file,
    '200x5KB' a page of 200 images, 'bulk30s' a 30 s download, 'req100x1KB_c10' 100 requests, 10 at
    once, 'har:NAME' a recording or a page set, 'real:NAME' a real page, 'url:ADDRESS' a
    served folder's page; any of the pages '@repeat' or '@repeat-warm' (a repeat visit)."""
    item = str(text).strip()
    if "@" in item and not item.lower().startswith("url:"):
        base, _, visit = item.rpartition("@")
        if visit not in VISITS[1:]:
            raise UsageError(f"{option}: '{item}': a visit is @repeat (connections closed, cache cleared) or "
                             "@repeat-warm (connections closed, cache kept), after a page: 20x5KB@repeat")
        page = parse_page(base, option)
        if not page.page_kind.repeatable:
            raise page.page_kind.refuse_repeat(item, base, option)
        return dataclasses.replace(page, visit=visit)
    for k in KINDS:
        page = k.parse(item, option)
        if page is not None:
            return page
    raise UsageError(f"{option}: '{item}': expected {page_form()}")


def as_page(item: "Page | int") -> Page:
    """A Page, or a bare number of bytes: a single-object page of that size."""
    return item if isinstance(item, Page) else Page(int(item))


# -- the pages folder -------------------------------------------------------------------------------------
CHUNK_BYTES = 1 << 20  # a generated file's largest piece (and its largest HTML comment)


def digest(pieces: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    return h.hexdigest()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES * 4):
            h.update(chunk)
    return h.hexdigest()


class Sites:
    """The pages folder and its manifest of expected checksums."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.manifest_path = self.root / "MANIFEST.json"

    def _manifest(self) -> dict:
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if data.get("generator_version") == GENERATOR_VERSION else {}

    def _save_manifest(self, data: dict) -> None:
        data["generator_version"] = GENERATOR_VERSION
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.manifest_path)

    def path(self, page: "Page | int") -> Path:
        return self.root / as_page(page).html_name

    def ensure(self, items: "Iterable[Page | int]") -> dict:
        """Make sure every file of every page exists with the right size and checksum; (re)generate
        the others. items: Pages, or bare sizes (single-object pages). Returns {item: its HTML's path}."""
        self.root.mkdir(parents=True, exist_ok=True)
        manifest = self._manifest()
        known = manifest.setdefault("pages", {})
        out = {}
        for item in items:
            page = as_page(item)
            page.page_kind.check(page, self.root)
            for name, size, pieces in page.files():
                path = self.root / name
                if pieces is None:  # the bulk body: zeros, sparse; its size is its check
                    self._sparse(path, size)
                    continue
                want = known.get(name, {}).get("sha256") if known.get(name, {}).get("size") == size else None
                if want is None:
                    want = digest(pieces())
                    known[name] = {"size": size, "sha256": want}
                if not (path.is_file() and path.stat().st_size == size and file_digest(path) == want):
                    self._write(path, size, pieces())
            out[item] = self.root / page.html_name
        self._save_manifest(manifest)
        return out

    def _sparse(self, path: Path, size: int) -> None:
        if path.is_file() and path.stat().st_size == size and not path.is_symlink():
            return
        tmp = path.with_suffix(".part")
        with open(tmp, "wb") as f:
            f.truncate(size)
        if os.stat(tmp).st_blocks * 512 > (1 << 20):
            tmp.unlink()
            raise UsageError(f"--size: {self.root} cannot hold a sparse file ({path.name}, a bulk body of "
                             f"{size} bytes of zeros); put the pages on a file system that can (ext4, xfs, tmpfs)")
        os.replace(tmp, path)

    def _write(self, path: Path, size: int, pieces: Iterator[bytes]) -> None:
        free = os_free_bytes(self.root)
        if free < size + (256 << 20):
            raise UsageError(f"--size: not enough free disk in {self.root} for {path.name} "
                             f"({size} bytes needed, {free} free)")
        tmp = path.with_suffix(".part")
        with open(tmp, "wb") as f:
            for piece in pieces:
                f.write(piece)
        os.replace(tmp, path)


def os_free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
