"""Campaigns' definitions: a whole grid, from a TOML file or a built-in preset, with the options of
any front end (plt_bench.options) as overrides. How a campaign runs is plt_bench.session.

- Order (Spec.plan): conditions change least often (each is verified once); within a repetition
  the pages come in a random order and, for each page, the protocols in a random order,
  so slow drift cannot favour one protocol. The order is seeded (seed) and recorded.
- The definition (Spec.as_dict, hashed) decides which unfinished campaign a rerun resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
import tomllib
from pathlib import Path
from typing import NamedTuple

from . import axes, browsers, cmd, conditions as cond_mod, dns, protocols, servers, traces, units
from .browsers import base as browser_base, sandbox
from .capture import DEFAULT_INTERVAL_S, DEFAULT_LIMIT_BYTES, parse_interval_s, parse_kinds
from .conditions import Cell, Conditions, Grid
from .cpu import own_cpus
from .device.budget import quota_for
from .device.profiles import PROFILES
from .errors import UsageError
from .link import canonical, host as hostnet, origins as link_origins
from .pages import DEFAULT_SITES, VISITS, Page, parse_page, real as realpages, timing as timing_mod
from .pages.recording import archive_of
from .recorder import parse_folders
from .records import AXES, METRICS
from .units import parse_percent, parse_size, split_list

PRESETS_DIR = cmd.PACKAGE_DIR / "presets"  # the built-in campaigns (package data; campaigns/ in a checkout)
TOP_KEYS = {"name", "description", "protos", "sizes", "runs", "precision", "max_runs", "warmup", "retries", "seed",
            "link", "profile", "capture", "cpu_interval", "capture_limit", "server_machine", "server", "iface",
            "server_token_file",
            "browser", "browser_binary", "reference", "compare", "metric", "visit", "folder", "serve", "http_server", "discovery",
            "browser_sandbox", "browser_start", "cpu", "device", "cores", "think"}
LINK_KEYS = {"bw", "up_bw", "rtt", "jitter", "loss", "jitter_dist", "loss_direction", "reorder", "queue", "cc",
             "backend", "verify", "trace_down", "trace_up", "aqm", "ecn", "cross", "origin_rtt"}
PROFILE_KEYS = {"name", "bw", "up_bw", "rtt", "jitter", "loss"}

# What applies when neither an option nor the campaign file says: the one place these are written
# (plt_bench.options shows them in every front end's help).
DEFAULTS = {"campaign": "quick", "proto": "both", "bw": "100mbit", "size": ",".join(cond_mod.DEFAULT_SIZES), "runs": 3,
            "max_runs": 30, "warmup": 0, "retries": 1, "seed": 1, "jitter_dist": "uniform", "loss_direction": "both",
            "reorder": True,
            "cc": "cubic", "link": "auto", "verify": "stop", "cpu_interval": f"{DEFAULT_INTERVAL_S * 1000:g}ms",
            "capture_limit": f"{DEFAULT_LIMIT_BYTES / 1e9:g}GB", "test": "welch", "correction": "holm", "compare": "proto",
            "metric": "plt", "visit": "first", "browser": "chromium", "http_server": "caddy", "discovery": "forced",
            "browser_sandbox": "on", "browser_start": "kept", "cores": 1,
            "results": str(cmd.PROJECT_ROOT / "results" / "plt-bench.sqlite")}


@dataclasses.dataclass(frozen=True)
class Spec:
    """A campaign's definition: everything that decides which trials it holds."""

    name: str
    description: str
    grid: Grid
    warmup: int                       # repetitions (run index < warmup) kept but left out of the statistics
    retries: int                      # further attempts of a failed trial
    seed: int                         # of the trial order
    cc: str                           # the first of grid.ccs: what the testbed's routes start with
    link: str                         # backend asked for (auto, netem, linkem)
    verify: str                       # stop | warn | off
    source: str                       # the preset or file it came from
    capture: tuple[str, ...]          # capture kinds (plt_bench.capture.KINDS)
    cpu_interval_s: float
    capture_limit_bytes: int
    server_machine: str | None        # two machines: the server machine's address ('plt-bench serve --addr')
    iface: str | None                 # two machines: this machine's interface towards it
    server_token_file: str | None     # two machines: where the control token is (not part of the definition)
    browser_binary: str | None = None  # the browser measured (None: Debian's Chromium; plt_bench.browsers.drivers)
    folders: tuple[tuple[str, str], ...] = ()  # folders served as they are: (host, folder) (--folder; url: pages)
    precision_pct: float | None = None  # run each cell until its medians' 95% CI half-widths are within this
    #                                     percent of the medians (grid.runs the least, max_runs the most runs)
    max_runs: int | None = None
    within: Grid | None = None         # one cell of a campaign (plt_bench.cluster): the campaign's whole grid,
    #                                    so that the cell's plan keeps the campaign's order
    overridden: tuple[str, ...] = ()   # grid keys given as options over the file's (not part of the definition)
    reference: str | None = None       # the value the report compares the others against (None: h3 where it
    #                                    runs, else the first listed; stats.reference_for)
    compare: str = "proto"             # what the report compares: proto, or cc, browser or server (within each protocol)
    metric: str = "plt"                # the time the report compares cells by (records.METRICS)
    discovery: str = "forced"          # how the browsers find the origins and h3 (plt_bench.dns.MODES)
    browser_sandbox: str = "on"        # the browser as an unprivileged user, its sandbox on (browsers.sandbox)
    browser_start: str = "kept"        # a browser kept across trials, a fresh context each, or fresh (browsers.START_MODES)
    traces: tuple = dataclasses.field(default=(), compare=False)  # the traces.Trace the conditions name (by
    #                                    hash): what a cluster's worker registers to run them

    @property
    def trial_count(self) -> int:
        """The plan's length, without making it."""
        g = self.grid
        return len(g.conditions) * self.planned_runs * len(g.pages) * len(g.variants())

    @property
    def browser(self) -> str:
        """The first browser of the grid: the one a testbed prepares for first."""
        return self.grid.browsers[0]

    @property
    def http_server(self) -> str:
        """The first server of the grid: the one a testbed starts with."""
        return self.grid.servers[0]

    @property
    def what(self) -> str:
        """The campaign in words: the file's description, unless options changed its grid."""
        if not self.overridden:
            return self.description or self.source
        return f"{Path(self.source).stem} with {', '.join('--' + k.replace('_', '-') for k in self.overridden)} given"

    @property
    def planned_runs(self) -> int:
        """Runs per cell in the plan: the most a cell may take (grid.runs without a precision target)."""
        return self.max_runs if self.precision_pct is not None and self.max_runs else self.grid.runs

    def as_dict(self) -> dict:
        # a single-object page by its bytes (as before multi-object pages: older campaigns' hashes hold, and with
        # them, as they were written, a recording of no objects by its bytes too)
        sizes = [p.label if p.objects or p.measures != "page" or p.page_kind.name == "folder" else p.size_bytes
                 for p in self.grid.pages]
        return {"name": self.name, "protos": list(self.grid.protos), "sizes": sizes,
                "conditions": [_cond_dict(c) for c in self.grid.conditions], "runs": self.grid.runs,
                "warmup": self.warmup, "retries": self.retries, "seed": self.seed,
                "cc": self.cc if len(self.grid.ccs) == 1 else list(self.grid.ccs), "link": self.link,
                **({"capture": list(self.capture)} if self.capture else {}),
                **({"server_machine": self.server_machine} if self.server_machine else {}),
                # (older campaigns' hashes hold: Chromium alone is not written, one browser by its name)
                **({"browser": self.browser if len(self.grid.browsers) == 1 else list(self.grid.browsers)}
                   if self.grid.browsers != ("chromium",) else {}),
                **({"browser_binary": self.browser_binary} if self.browser_binary else {}),
                # (older campaigns' hashes hold: Caddy is not written)
                **({"http_server": self.http_server if len(self.grid.servers) == 1 else list(self.grid.servers)}
                   if self.grid.servers != ("caddy",) else {}),
                # (older campaigns' hashes hold: no budget is not written)
                **({"cpu": cpus} if (cpus := [str(b) for b in self.grid.budgets if not b.device]) and (
                    cpus != [cond_mod.NO_BUDGET] or len(cpus) < len(self.grid.budgets)) else {}),
                **({"device": devices} if (devices := [b.device for b in self.grid.budgets if b.device]) else {}),
                **({"cores": self.grid.cores} if self.grid.cores != 1 else {}),
                # (under its name before --folder: the definitions of campaigns begun before keep their hash)
                **({"serve": [f"{h}={d}" for h, d in self.folders]} if self.folders else {}),
                **({"reference": self.reference} if self.reference else {}),
                **({"compare": self.compare} if self.compare != "proto" else {}),
                **({"metric": self.metric} if self.metric != DEFAULTS["metric"] else {}),
                # (older campaigns' hashes hold: forced is not written)
                **({"discovery": self.discovery} if self.discovery != DEFAULTS["discovery"] else {}),
                # (the default is not written: a campaign from before it, which ran without, is refused on
                # resume by its key metadata, browser_sandbox)
                **({"browser_sandbox": self.browser_sandbox} if self.browser_sandbox != DEFAULTS["browser_sandbox"]
                   else {}),
                # (the default is not written: a campaign from before it, whose browsers were fresh, is refused on
                # resume by its key metadata, browser_start)
                **({"browser_start": self.browser_start} if self.browser_start != DEFAULTS["browser_start"] else {}),
                # a replayed page's set by its recording too: a set made again of another recording is another campaign
                **({"replays": made_of} if (made_of := {p.replay: src.get("sha256") for p in self.grid.pages
                                                        if (src := p.page_kind.sources(p))}) else {}),
                **({"precision_pct": self.precision_pct, "max_runs": self.max_runs}
                   if self.precision_pct is not None else {})}

    @property
    def spec_hash(self) -> str:
        """The definition's identity: a rerun resumes the unfinished campaign of the same hash. h3 and
        h1 are hashed by the names stores before schema 13 gave them (quic, tcp), so a campaign begun
        before three protocols came resumes after; the server machine by its key before 2026-11-28 (server)."""
        legacy = {new: old for old, new in protocols.STORED_BEFORE_13.items()}
        ident = {**self.as_dict(), "protos": [legacy.get(p, p) for p in self.grid.protos]}
        ident.pop("metric", None)  # what the report compares by: the same trials either way
        if "server_machine" in ident:  # hashed by its key before the rename, so a campaign begun then resumes
            ident["server"] = ident.pop("server_machine")
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]

    def plan(self) -> list["Slot"]:
        """Every trial, in the order it runs (Slot: conditions, run index, page, protocol, congestion
        control, browser, server). Within a run each page's protocols (and congestion controls, browsers
        and servers) come in a seeded random order; with one congestion control, browser and server the
        order is the one campaigns always had, with several congestion controls the one they had since --cc."""
        out = []
        grid = self.within or self.grid
        for ci, cond in enumerate(grid.conditions):
            for r in range(self.planned_runs):
                rng = random.Random(f"{self.seed}/{ci}/{r}")
                pages = list(grid.pages)
                rng.shuffle(pages)
                for page in pages:
                    one = len(grid.browsers) == 1 and len(grid.servers) == 1 and len(grid.budgets) == 1
                    fixed = (grid.browsers[0], grid.servers[0], grid.budgets[0], grid.cores)
                    if len(grid.ccs) == 1 and one:
                        protos = list(grid.protos)
                        rng.shuffle(protos)
                        out += [Slot(cond, r, page, p, grid.ccs[0], *fixed) for p in protos]
                    elif one:
                        pairs = [(p, cc) for p in grid.protos for cc in grid.ccs]
                        rng.shuffle(pairs)
                        out += [Slot(cond, r, page, p, cc, *fixed) for p, cc in pairs]
                    else:
                        variants = grid.variants()
                        rng.shuffle(variants)
                        out += [Slot(cond, r, page, *v, grid.cores) for v in variants]
        if self.within:
            out = [s for s in out if s.conditions in self.grid.conditions and s.page in self.grid.pages]
        # a device's budget is one core's worth (device.calibrate), whatever --cores says of --cpu's
        return [s._replace(cores=1) if s.budget.device else s for s in out]


def _cond_dict(c: Conditions) -> dict:
    """Conditions as a campaign's definition holds them: a constant-rate link without the trace fields,
    and the kernel's FIFO without the queue discipline's (which came later), so campaigns begun before
    traces, --aqm, --origin-rtt and --think keep their hash."""
    return {k: v for k, v in c.as_dict().items()
            if not ((k.startswith("trace_") or k in ("aqm", "cross", "origin_rtt", "think")) and v is None) and not (k == "ecn" and v is False)}


def page_of_label(label: str) -> "Page | str":
    """A stored trial's page, read back by the parser that planned it (pages.parse_page); the label
    itself where the parser no longer takes it (its recording deleted, its kind gone)."""
    try:
        return parse_page(label, "a stored trial's page")
    except (UsageError, LookupError, ValueError, OSError):
        return label


class Slot(NamedTuple):
    """One trial of a campaign's plan: the cell it measures and its run."""

    conditions: Conditions
    run_index: int
    page: Page
    proto: str
    cc: str = "cubic"
    browser: str = "chromium"
    server: str = "caddy"
    budget: cond_mod.Budget = cond_mod.FULL  # the browser's CPU budget or device, as read once (conditions.Budget)
    cores: int = 1

    @property
    def cell(self) -> Cell:
        b = self.budget
        return Cell(self.proto, self.page, self.conditions, self.cc, self.browser, self.server,
                    cpu=b.cpu, cores=1 if b.device else self.cores, device=b.device)

    @classmethod
    def of(cls, t, pages: "dict[str, Page | str] | None" = None) -> "Slot":
        """The slot a stored trial (records.Trial) measured: its conditions as stored (not their label), its
        page as the page parser reads its stored label (pages.parse_page, the parser that planned it: a
        page of every kind comes back as planned); cubic, Chromium and Caddy where a store before their
        columns has none. pages: the labels read so far (filled here: a campaign's trials share a few).
        A label the parser no longer takes (a recording since deleted) stays a string: it is no slot of
        any plan."""
        known = {} if pages is None else pages
        if t.page not in known:
            known[t.page] = page_of_label(t.page)
        return cls(t.conditions, t.run_index, known[t.page], t.proto, t.cc or "cubic", t.browser or "chromium",
                   t.server or "caddy", t.budget, t.cpu_cores or 1)

    @property
    def place(self) -> tuple[Conditions, Page]:
        """Where in the grid: the conditions and the page (what a precision target stops, a cluster sends)."""
        return (self.conditions, self.page)


# A campaign file's values, by key: the TOML types each may have. A value of another type is refused
# with the key (runs = "3" is a string, not a number); the value itself is then checked by the same
# parser as the option's, which names where it came from (Values.name).
_STR, _INT, _LIST = (str,), (int,), (str, list)
FILE_TYPES = {"name": _STR, "description": _STR, "protos": _LIST, "sizes": _LIST, "runs": _INT, "precision": _STR,
              "max_runs": _INT, "warmup": _INT, "retries": _INT, "seed": _INT, "capture": _LIST,
              "cpu_interval": _STR, "capture_limit": _STR, "server_machine": _STR, "server": _STR, "iface": _STR,
              "server_token_file": _STR, "http_server": _LIST, "browser": _LIST, "browser_binary": _STR, "reference": _STR, "compare": _STR,
              "metric": _STR, "visit": _LIST, "folder": _LIST, "serve": _LIST, "discovery": _STR, "browser_sandbox": _STR, "browser_start": _STR, "cpu": _LIST, "cores": _INT,
              # [link] and [[profile]]
              "bw": _LIST, "up_bw": _STR, "rtt": _LIST, "jitter": _LIST, "loss": _LIST, "jitter_dist": _STR,
              "loss_direction": _STR, "reorder": (bool,), "queue": (str, int), "cc": _LIST, "backend": _STR,
              "verify": _STR, "trace_down": _LIST, "trace_up": _LIST, "aqm": _LIST, "ecn": (bool,), "cross": _LIST,
              "origin_rtt": _LIST, "think": _LIST}
TYPE_WORDS = {_STR: "a string", _INT: "a whole number", _LIST: "a string or a list of strings",
              (bool,): "true or false", (str, int): "a whole number or a string"}
EXAMPLES = {"precision": "'2%'", "cpu_interval": "'100ms'", "capture_limit": "'10GB'", "bw": "['10mbit', '100mbit']",
            "up_bw": "'10mbit'", "rtt": "['50ms']", "jitter": "'10ms'", "loss": "['1%']", "protos": "['h3', 'h2']",
            "sizes": "['5KB', '200x5KB']", "trace_down": "['lte-down.txt', 'gen:onoff:24mbit:1s:1s']", "capture": "['pcap', 'keylog']", "cc": "['cubic', 'bbr']", "runs": "5",
            "browser": "['chromium', 'firefox']", "http_server": "['caddy', 'quinn']", "think": "['off', '200']"}
FILE_KEY = {"proto": "protos", "size": "sizes", "link": "backend"}  # option key -> its campaign file key
FILE_KEY_BEFORE = {"server_machine": "server", "folder": "serve"}  # a campaign file key's name before a rename, still read


class Values:
    """A campaign's values, each from where it was given: an option (overrides, keyed as in
    plt_bench.options), else the campaign file (top level or [link]), else DEFAULTS; and the name
    to give it in a message: the option's flag, or 'campaign file F: key'."""

    def __init__(self, overrides: dict, flags: dict, data: dict, link: dict, where: str):
        self.overrides, self.flags, self.data, self.link, self.where = overrides, flags, data, link, where

    def _file(self, key: str) -> tuple[str, dict] | None:
        fk = FILE_KEY.get(key, key)
        if fk in self.link:  # [link]'s keys; the load refuses them at the top level
            return fk, self.link
        old = FILE_KEY_BEFORE.get(key)
        if old in self.data and fk in self.data:
            raise UsageError(f"{self.where}: {fk} and {old}: the same setting twice ({old} is its name before a "
                             f"rename); keep {fk}")
        if old in self.data:
            return old, self.data
        return (fk, self.data) if fk in self.data and fk in TOP_KEYS else None

    def given(self, key: str) -> bool:
        return key in self.overrides or self._file(key) is not None

    def name(self, key: str) -> str:
        if key in self.overrides:
            return self.flags.get(key, "--" + key.replace("_", "-"))
        found = self._file(key)
        fk = found[0] if found else FILE_KEY.get(key, key)
        return f"{self.where}: {fk}"

    def whole(self, key: str, lo: int, hi: int) -> int:
        """A whole number from lo to hi (an option's ASCII digits, a file's integer), else DEFAULTS'."""
        n = self.get(key, DEFAULTS[key])
        if isinstance(n, str) and key in self.overrides:  # an option's text
            n = int(n) if n.isascii() and n.strip().isdigit() else n
        if isinstance(n, bool) or not isinstance(n, int) or not lo <= n <= hi:
            raise UsageError(f"{self.name(key)} = {n!r}; expected a whole number from {lo} to {hi}")
        return n

    def get(self, key: str, default=None):
        """The value as given (an option's string, a file's checked TOML value), or `default`."""
        if key in self.overrides:
            return self.overrides[key]
        found = self._file(key)
        if found is None:
            return default
        fk, table = found
        v = table[fk]
        return check_type(v, fk, self.name(key))

    def text(self, key: str, default=None) -> str | None:
        """The value as an option's string (a list joined with commas), or None."""
        v = self.get(key, default)
        return None if v is None else _as_list(v)


def check_type(v, key: str, name: str):
    """A campaign file's value of the TOML type its key takes (FILE_TYPES), or UsageError."""
    want = FILE_TYPES.get(key)
    ok = want is None or (isinstance(v, want) and not (isinstance(v, bool) and bool not in want))
    if ok and isinstance(v, list):
        ok = all(isinstance(x, str) for x in v) and bool(v)
    if not ok:
        raise UsageError(f"{name} = {v!r}; expected {TYPE_WORDS[want]}"
                         + (f", e.g. {key} = {EXAMPLES[key]}" if key in EXAMPLES else ""))
    return v


def _precision(values: Values, runs: int) -> tuple[float | None, int | None]:
    """The precision target (percent) and the most runs per cell, or (None, None) for fixed runs."""
    given = values.get("precision")
    if given is None:
        if values.given("max_runs"):
            option = "max_runs" in values.overrides
            raise UsageError(f"{values.name('max_runs')}: only with {'--' if option else ''}precision (a fixed number "
                             "of runs needs no most)")
        return None, None
    pct = parse_percent(str(given), values.name("precision"), most=50.0)
    if not 0 < pct <= 50:
        raise UsageError(f"{values.name('precision')}: '{given}' is out of range; expected more than 0% and at most "
                         "50%, e.g. 2%")
    most = cond_mod.parse_runs(values.get("max_runs", DEFAULTS["max_runs"]), values.name("max_runs"))
    if runs < 3 or most < runs:
        raise UsageError(f"{values.name('max_runs')}: {most} with runs {runs}; a precision target needs runs >= 3 (a "
                         f"median's interval needs three trials) and max_runs >= runs")
    return pct, most


# A campaign's size: past MAX_TRIALS it is refused unless --allow-large confirms it (at ~1 s a trial,
# 100,000 trials are more than a day); past HARD_MAX_TRIALS always (the plan is held in memory).
MAX_TRIALS = 100_000
HARD_MAX_TRIALS = 1_000_000


def check_size(n: int, allow_large: bool, what: str) -> None:
    if n > HARD_MAX_TRIALS:
        raise UsageError(f"{what}: {n:,} trials; plt-bench runs at most {HARD_MAX_TRIALS:,} in one campaign: split it")
    if n > MAX_TRIALS and not allow_large:
        raise UsageError(f"{what}: {n:,} trials, more than {MAX_TRIALS:,} (over a day at a second a trial); "
                         "give --allow-large to run it anyway")


NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_FORM = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"


def check_name(name, option: str) -> str:
    """A campaign name: it names report folders (results/<name>-<id>/), so nothing that could reach
    outside them ('..', '/', NUL) and nothing empty."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):  # [A-Za-z0-9] ranges: ASCII only
        raise UsageError(f"{option}: {name!r} is not a campaign name; expected {NAME_FORM}")
    return name


def presets() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PRESETS_DIR.glob("*.toml"))}


def _folders(v, grid, server) -> tuple[tuple[str, str], ...]:
    """--folder's folders (recorder.parse_folders), and every url: page on one of its hosts."""
    raw = v.get("folder")
    items = [] if raw is None else [str(x) for x in raw] if isinstance(raw, list) else split_list(str(raw), v.name("folder"))
    served = parse_folders(items, v.name("folder"), protocols_allowed=False)
    hosts = {h for h, *_ in served}
    if served and server is not None:
        raise UsageError(f"{v.name('folder')}: with --server-machine (two machines) the server machine serves the folders: "
                         f"plt-bench serve --folder {served[0][0]}=DIR there, and --size url:... here")
    for p in grid.pages:
        host = p.page_kind.served_host(p)
        if host is not None and host not in hosts and server is None:  # a server machine says what it serves
            raise UsageError(f"{v.name('size')}: '{p.label}': no --folder HOST=DIR serves {host}; serve its folder: "
                             f"--folder {host}=DIR")
    return tuple((h, str(d.resolve())) for h, d, _ in served)


def _origin_rtt(v, grid, folders) -> None:
    """--origin-rtt: every host it names is one the pages ask (each page that is not recorded yet is
    checked when it is), and recorded only for pages that keep a recording's timing."""
    asked = {c.origin_rtt for c in grid.conditions if c.origin_rtt is not None}
    if not asked:
        return
    pending = {realpages.RECORDING_PREFIX + n for n in realpages.UNRECORDED.get() or ()}
    served = {h for h, _ in folders}
    for p in grid.pages:
        if p.replay in pending:
            continue
        for a in asked:
            if a.mode == "recorded":
                if p.page_kind.recorded_path_delays(p, DEFAULT_SITES) is None:
                    raise UsageError(f"{v.name('origin_rtt')}: recorded: '{p.label}' keeps no recorded timing (a "
                                     "recording keeps its origins' handshakes where its HAR has timings, since "
                                     "schema 29's plt-bench; a generated page has none); expected "
                                     f"{link_origins.FORM.replace('recorded, ', '')}")
            else:
                link_origins.check_hosts(a, p.page_kind.hosts(p, DEFAULT_SITES, served), p.label, v.name("origin_rtt"))


def _think(v, grid) -> None:
    """--think: recorded only for pages whose recording keeps its responses' waits."""
    asked = {c.think for c in grid.conditions if c.think is not None}
    if "recorded" not in asked:
        return
    pending = {realpages.RECORDING_PREFIX + n for n in realpages.UNRECORDED.get() or ()}
    for p in grid.pages:
        if p.replay not in pending and p.page_kind.recorded_thinks(p, DEFAULT_SITES) is None:
            raise UsageError(f"{v.name('think')}: recorded: '{p.label}' keeps no recorded waits (only a recording "
                             "made since recordings keep them, or a HAR with timings, does); expected "
                             f"{timing_mod.THINK_FORM.replace('recorded, ', '')}")


def _as_recorded(v, grid) -> None:
    """--proto as-recorded: every page a recording (har:NAME) that says what each of its origins spoke."""
    if not any(protocols.get(p).per_origin for p in grid.protos):
        return
    pending = {realpages.RECORDING_PREFIX + n for n in realpages.UNRECORDED.get() or ()}  # checked once recorded
    pages = [p for p in grid.pages if p.replay not in pending]
    for p in pages:
        if p.page_kind.recording_name(p) is None:
            raise UsageError(f"{v.name('proto')}: as-recorded serves each origin of a recording over the protocol it "
                             f"spoke; '{p.label}' is not a recording (give har:NAME pages, or measure it with "
                             f"{', '.join(protocols.NAMES)})")
        unknown = [o.host for o in archive_of(p).origins if o.protocol not in protocols.NAMES]
        if unknown:
            raise UsageError(f"{v.name('proto')}: as-recorded: the recording {p.label} does not say which protocol "
                             f"{', '.join(unknown[:3])} spoke (its HAR has no httpVersion); measure it with "
                             f"{', '.join(protocols.NAMES)}")
    spoke: dict[str, tuple[str, str]] = {}  # host -> (protocol, the recording that says it)
    for p in pages:
        for o in archive_of(p).origins:
            was = spoke.setdefault(o.host, (o.protocol, p.label))
            if was[0] != o.protocol:  # one testbed address offers one protocol for a host
                raise UsageError(f"{v.name('proto')}: as-recorded: {o.host} spoke {was[0]} in {was[1]} and "
                                 f"{o.protocol} in {p.label}; one testbed serves a host over one protocol as "
                                 "recorded: measure these recordings in separate campaigns")


def _browsers(v: "Values", grid, capture: tuple[str, ...], server, binary: str | None) -> tuple[str, ...]:
    """--browser: browsers of plt_bench.browsers (an axis, as --cc is), and nothing asked of any that it
    cannot do yet (refused by name before anything is made)."""
    given = _as_list(v.get("browser", DEFAULTS["browser"]))
    names = tuple(dict.fromkeys(x.lower() for x in units.split_list(given, v.name("browser"))))
    if not names or any(n not in browsers.NAMES for n in names):
        raise UsageError(f"{v.name('browser')}: '{given}'; expected one or more of {', '.join(browsers.NAMES)} "
                         "(chromium,firefox: both, interleaved)")
    wanted = browsers.asked(any(p.visit != "first" for p in grid.pages),
                            any(p.origins > 1 or p.page_kind.served_as_recorded for p in grid.pages),
                            any(protocols.get(x).per_origin for x in grid.protos), capture,
                            recordings=any(p.page_kind.served_as_recorded for p in grid.pages),
                            discovery=dns.parse(v.get("discovery", DEFAULTS["discovery"]), v.name("discovery")) != "forced")
    for name in names:
        missing = browsers.get(name).unsupported(wanted)
        if missing:
            raise UsageError(f"{v.name('browser')} {name}: not supported yet with {', '.join(missing)} (recordings "
                             "and served folders, repeat visits, the har, keylog, netlog and visual captures, "
                             "as-recorded, discovery); docs/browsers.md says what it runs")
        if name != "chromium" and binary:
            raise UsageError(f"{v.name('browser')} {name}: --browser-binary names a Chromium")
    return names


def _http_servers(v: "Values", grid, capture: tuple[str, ...], server, folders) -> tuple[str, ...]:
    """--http-server: servers of plt_bench.servers (an axis, as --browser is), and nothing asked of any
    that it cannot do (refused by name before anything is made)."""
    given = _as_list(v.get("http_server", DEFAULTS["http_server"]))
    names = tuple(dict.fromkeys(x.lower() for x in units.split_list(given, v.name("http_server"))))
    if not names or any(n not in servers.NAMES for n in names):
        raise UsageError(f"{v.name('http_server')}: '{given}'; expected one or more of {', '.join(servers.NAMES)} "
                         "(caddy,quinn: both, interleaved)")
    able = lambda feature: ", ".join(s.label for s in servers.SERVERS.values() if feature in s.features)  # noqa: E731
    for name in names:
        cls = servers.get(name)
        if server and "two-machines" not in cls.features:
            raise UsageError(f"{v.name('http_server')} {name}: two machines serve with {able('two-machines')} "
                             "('plt-bench serve'), for now")
        if (folders or any(p.page_kind.served_host(p) for p in grid.pages)) and "folders" not in cls.features:
            raise UsageError(f"{v.name('http_server')} {name}: serves no folders as they are (--folder, url: pages): "
                             f"{able('folders')} does")
        if "qlog" in capture and "qlog" not in cls.features:
            raise UsageError(f"{v.name('http_server')} {name}: writes no qlog (--capture qlog is {able('qlog')}'s)")
        lacking = [cc for cc in grid.ccs if cls.quic_controllers is not None and cc not in cls.quic_controllers]
        if lacking:
            raise UsageError(f"{v.name('cc')}: {', '.join(lacking)}: {name} has no such QUIC controller; with "
                             f"{v.name('http_server')} {name} expected some of {', '.join(cls.quic_controllers)}")
    return names


def _discovery(v: "Values", grid, server, folders) -> str:
    """--discovery: a mode of plt_bench.dns, and nothing asked with it that is forced by nature (refused
    by name before anything is made): h3 is what is found, the other protocols stay forced."""
    mode = dns.parse(v.get("discovery", DEFAULTS["discovery"]), v.name("discovery"))
    if mode == "forced":
        return mode
    if folders or any(p.page_kind.served_as_recorded for p in grid.pages):
        raise UsageError(f"{v.name('discovery')} {mode}: a recording (har:NAME) or a served folder is replayed over "
                         "the protocols it was recorded with, forced; discovery measures generated pages")
    if "h3" not in grid.protos:
        raise UsageError(f"{v.name('discovery')} {mode}: h3 is what a browser discovers, and "
                         f"{v.name('proto')} {','.join(grid.protos)} has none; add h3 (h2 and h1 stay forced beside it)")
    return mode


COMPARE_ALIASES = {"cpu": "budget", "device": "budget"}  # the budget axis as its options name it


def _compare(v: "Values") -> str:
    axis = str(v.get("compare", DEFAULTS["compare"]))
    axis = COMPARE_ALIASES.get(axis, axis)
    if axis not in AXES:
        raise UsageError(f"{v.name('compare')}: '{axis}'; expected one of {', '.join(AXES)} (proto: the protocols "
                         "within each congestion control, browser and server; cc, browser or server: each against "
                         "the first, within each protocol)")
    return axis


def _visits(v: "Values", pages: tuple[Page, ...]) -> tuple[Page, ...]:
    """The pages with every visit asked (--visit first,repeat): each page whose kind builds repeat visits
    (pages.PageKind.repeatable, what --size X@repeat asks too) once per visit, in that order; a page
    that names its own visit (20x5KB@repeat) and the kinds without repeats (bulk, request, served-folder
    pages) stay as they are."""
    visits = list(dict.fromkeys(units.split_list(_as_list(v.get("visit", DEFAULTS["visit"])), v.name("visit"))))
    if not visits or any(x not in VISITS for x in visits):
        raise UsageError(f"{v.name('visit')}: '{_as_list(v.get('visit'))}'; expected one or more of {', '.join(VISITS)} "
                         "(first: a fresh browser; repeat: the same browser again, its connections closed and its "
                         "cache cleared; repeat-warm: the same with its cache kept)")
    if visits == ["first"]:
        return pages
    out: list[Page] = []
    for p in pages:
        more = [dataclasses.replace(p, visit=x) for x in visits] if p.page_kind.repeatable and p.visit == "first" \
            else [p]
        out += [q for q in more if q not in out]
    return tuple(out)


def _metric(v: "Values", capture: tuple[str, ...] = ()) -> str:
    metric = str(v.get("metric", DEFAULTS["metric"]))
    if metric not in METRICS:
        raise UsageError(f"{v.name('metric')}: '{metric}'; expected one of {', '.join(METRICS)} "
                         f"({'; '.join(f'{m.name}: {m.label}' for m in METRICS.values())})")
    if metric == "si" and "visual" not in capture:
        raise UsageError(f"{v.name('metric')}: si (SpeedIndex) is measured from a screencast of each load, which "
                         "is off by default (it costs load time): add --capture visual (capture = [\"visual\"] in a campaign "
                         "file)")
    return metric


def _budgets(v: "Values") -> tuple[cond_mod.Budget, ...]:
    """--cpu: the browser's CPU budgets (conditions.Budget), each a fraction of a core in (0, 1] that the
    kernel can enforce (device.budget.quota_for), or full (no budget): each read here, once."""
    given = v.get("cpu")
    if given is None:
        return (cond_mod.FULL,)
    form = "fractions of a core in (0, 1], comma-separated (1,0.5,0.25), or full"
    out: list[cond_mod.Budget] = []
    for item in units.split_list(",".join(given) if isinstance(given, list) else str(given), v.name("cpu")):
        if item.strip().lower() == cond_mod.NO_BUDGET:
            label = cond_mod.FULL
        elif item.strip().lower() in PROFILES:
            raise UsageError(f"{v.name('cpu')}: '{item}' is a device; give it as --device {item.strip().lower()} "
                             f"(device = \"{item.strip().lower()}\" in a campaign file: its budget is calibrated on "
                             f"each host); expected {form}")
        else:
            if not re.fullmatch(r"[0-9]+(\.[0-9]+)?|\.[0-9]+", item.strip()):  # float() takes 0.0_5, 1e-1, nan
                raise UsageError(f"{v.name('cpu')}: '{item}': not a number; expected {form}")
            share = float(item)
            try:
                quota_for(share)
            except ValueError as e:
                raise UsageError(f"{v.name('cpu')}: '{item}': {e}; expected {form}") from None
            if abs(share * 1000 - round(share * 1000)) > 1e-9:
                raise UsageError(f"{v.name('cpu')}: '{item}' is finer than a budget is set (a thousandth of a core); "
                                 f"expected a multiple of 0.001 (nearest {round(share, 3):g})")
            label = cond_mod.Budget(share)
        if label not in out:
            out.append(label)
    if not out:
        raise UsageError(f"{v.name('cpu')}: empty; expected {form}")
    return tuple(out)


def _devices(v: "Values") -> tuple[cond_mod.Budget, ...]:
    """--device: the visitors' devices (device.profiles), each a value of the budget axis beside --cpu's."""
    given = v.get("device")
    if given is None:
        return ()
    form = f"device names, comma-separated, of {', '.join(PROFILES)}"
    out: list[cond_mod.Budget] = []
    for item in units.split_list(",".join(given) if isinstance(given, list) else str(given), v.name("device")):
        name = item.strip().lower()
        if name not in PROFILES:
            raise UsageError(f"{v.name('device')}: '{item}' is no device; expected {form} (docs/device.md)")
        if name not in out:
            out.append(cond_mod.Budget(device=name))
    if not out:
        raise UsageError(f"{v.name('device')}: empty; expected {form}")
    return tuple(out)


def _reference(v: "Values", grid, axis: str) -> str | None:
    """The reference asked for, which must be one value the campaign runs of the axis compared
    (a protocol, or with compare = cc a congestion control, browser a browser, server a server;
    None: not asked)."""
    text = v.get("reference")
    if text is None:
        return None
    if axis == "budget":  # a budget as --cpu spells it (0.25) or as the report names it (cpu0.25)
        try:
            text = cond_mod.budget_label(float(str(text).strip()))
        except ValueError:
            pass
    if axis in cond_mod.VARIANT_AXES:
        ran = grid.axis(axis)
        what, option = {"cc": ("congestion control", "cc"), "browser": ("browser", "browser"),
                        "server": ("server", "http-server"), "budget": ("CPU budget", "cpu")}[axis]
        if str(text).strip().lower() not in ran:  # one rule for case, as --cc and --browser read their own
            raise UsageError(f"{v.name('reference')}: '{text}' is not one {what} this campaign runs; "
                             f"expected one of {', '.join(ran)} (--{option} {','.join(ran)})")
        return str(text).strip().lower()
    protos = grid.protos
    names = protocols.parse(str(text), v.name("reference"))
    if len(names) != 1 or names[0] not in protos:
        raise UsageError(f"{v.name('reference')}: '{text}' is not one protocol this campaign runs; expected one of "
                         f"{', '.join(protos)} (--proto {','.join(protos)})")
    return names[0]


def _as_list(v) -> str:
    return ",".join(str(x) for x in v) if isinstance(v, list) else str(v)


def load(name_or_path: str | None, overrides: dict | None = None, flags: dict | None = None) -> Spec:
    """A campaign from a preset name or a TOML file (None: DEFAULTS' preset); options (overrides,
    keyed as in plt_bench.options; None means not given) win over the file. `flags` names an
    option whose flag is not --<key> in this front end (pytest's --captures). Each value is checked
    by one parser whichever way it came, and a message names it as it was given (Values)."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None and v is not False}
    flags = flags or {}
    name_or_path = name_or_path or DEFAULTS["campaign"]
    path = presets().get(name_or_path) or Path(name_or_path)
    if not path.is_file():
        raise UsageError(f"CAMPAIGN: '{name_or_path}' is neither a preset ({', '.join(presets())}) nor a campaign file")
    where = f"campaign file {path}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{where}: not UTF-8 text (byte {e.start}); a campaign file is TOML, which is UTF-8") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"{where}: not valid TOML: {e}") from None
    return _spec(data, path, where, overrides, flags)


def bare(overrides: dict | None = None) -> Spec:
    """The conditions and pages that options alone describe, on DEFAULTS (no preset's file): for the
    commands that shape a link without running a campaign (up, verify, the benchmarks), which must
    not take the default campaign's RTT or pages."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None and v is not False}
    return _spec({"name": "options"}, Path("options"), "options", overrides, {})


def _traces_of(grid: Grid) -> tuple:
    """The traces (traces.Trace, read by the grid's parsing: Grid.traces) its conditions name, once each."""
    known = traces.by_hash(grid.traces)
    shas = dict.fromkeys(sha for c in grid.conditions for sha in (c.trace_down_sha256, c.trace_up_sha256) if sha)
    return tuple(known[sha] for sha in shas)


def _trace_paths(v: Values, key: str, path: Path) -> str | None:
    """A campaign's trace files as one option string: a campaign file's relative paths are relative to
    the file's folder (an option's to the working folder); gen: descriptions stay as they are."""
    text = v.text(key)
    if text is None or key in v.overrides or not path.parent.is_dir():
        return text
    return ",".join(x if x.startswith("gen:") or Path(x).expanduser().is_absolute() else str(path.parent / x)
                    for x in units.split_list(text))


def _spec(data: dict, path: Path, where: str, overrides: dict, flags: dict) -> Spec:
    """A campaign's definition from its file's data (checked: TOP_KEYS, [link], [[profile]]) and the
    options over it; each part reads its own values once (the link's grid, the machines, the
    browsers and servers, the visitor, the precision), in the order their checks depend on."""
    link, profiles = _tables(data, where)
    v = Values(overrides, flags, data, link, where)
    grid = _link_grid(v, profiles, path)
    ccs = cond_mod.parse_ccs(_as_list(v.get("cc", DEFAULTS["cc"])), v.name("cc"))
    grid = dataclasses.replace(grid, ccs=ccs, pages=_visits(v, grid.pages))
    backend = str(v.get("link", DEFAULTS["link"]))
    canonical(backend, v.name("link"))
    verify = str(v.get("verify", DEFAULTS["verify"]))
    if verify not in cond_mod.VERIFY_CHOICES:
        raise UsageError(f"{v.name('verify')}: '{verify}'; expected one of {', '.join(cond_mod.VERIFY_CHOICES)}")
    capture = parse_kinds(v.get("capture"), v.name("capture"))
    server, iface, token_file, browser = _machines(v, ccs)
    axis = _compare(v)
    grid = dataclasses.replace(grid, browsers=_browsers(v, grid, capture, server, browser))
    folders = _folders(v, grid, server)
    grid = _visitors(v, dataclasses.replace(grid, servers=_http_servers(v, grid, capture, server, folders)))
    discovery = _discovery(v, grid, server, folders)
    reference = _reference(v, grid, axis)
    warmup = v.whole("warmup", 0, 100)
    precision, max_runs = _precision(v, grid.runs)
    if warmup >= grid.runs:
        raise UsageError(f"{v.name('warmup')} = {warmup} with runs {grid.runs}: every run would be a warm-up and "
                         f"nothing would be measured; expected a warmup below runs (at most {grid.runs - 1})")
    _as_recorded(v, grid)
    _origin_rtt(v, grid, folders)
    _think(v, grid)
    spec = Spec(server_machine=server, iface=iface, server_token_file=token_file, browser_binary=browser,
                name=check_name(v.get("name", path.stem), v.name("name")), folders=folders,
                description=v.get("description", ""), grid=grid, precision_pct=precision, max_runs=max_runs,
                capture=capture, cpu_interval_s=parse_interval_s(v.get("cpu_interval", DEFAULTS["cpu_interval"]),
                                                                 v.name("cpu_interval")),
                capture_limit_bytes=parse_size(str(v.get("capture_limit", DEFAULTS["capture_limit"])),
                                               v.name("capture_limit")),
                warmup=warmup, retries=v.whole("retries", 0, 10), seed=v.whole("seed", 0, 2**31),
                cc=ccs[0], link=backend, verify=verify, source=str(path), reference=reference, compare=axis,
                metric=_metric(v, capture), traces=_traces_of(grid), discovery=discovery,
                browser_sandbox=sandbox.parse(v.get("browser_sandbox", DEFAULTS["browser_sandbox"]),
                                              v.name("browser_sandbox")),
                browser_start=browser_base.parse_start(v.get("browser_start", DEFAULTS["browser_start"]),
                                                       v.name("browser_start")),
                overridden=tuple(sorted(k for k in overrides if k in axes.GRID_KEYS + ("no_reorder", "cc", "browser",
                                                                                          "http_server", "cpu", "device", "cores"))))
    check_size(spec.trial_count, bool(overrides.get("allow_large")),
               f"{where}: the campaign" if not spec.overridden else ", ".join(v.name(k) for k in spec.overridden
                                                                       if k in axes.GRID_KEYS))
    return spec


def _tables(data: dict, where: str) -> tuple[dict, list]:
    """A campaign file's [link] table and [[profile]] tables, its keys checked (TOP_KEYS, LINK_KEYS)."""
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; expected {', '.join(sorted(TOP_KEYS))}")
    link = data.get("link", {})
    if not isinstance(link, dict):
        raise UsageError(f"{where}: link = {link!r}; expected a [link] table with keys {', '.join(sorted(LINK_KEYS))}")
    if set(link) - LINK_KEYS:
        raise UsageError(f"{where}: [link] has unknown key(s) {', '.join(sorted(set(link) - LINK_KEYS))}; "
                         f"expected {', '.join(sorted(LINK_KEYS))}")
    profiles = data.get("profile", [])
    if not isinstance(profiles, list):
        raise UsageError(f"{where}: profile = {profiles!r}; expected [[profile]] tables, each with name and bw")
    if profiles and any(k in link for k in ("bw", "up_bw", "rtt", "jitter", "loss")):
        raise UsageError(f"{where}: give either [[profile]] entries or bw/rtt/jitter/loss under [link], not both")
    return link, profiles


def _link_grid(v: "Values", profiles: list, path: Path) -> Grid:
    """The grid of the link's conditions, the pages and the protocols (axes.make_grid): from the
    [[profile]] tables, or from [link] and the options over it."""
    where, overrides = v.where, v.overrides
    reorder = v.get("reorder", DEFAULTS["reorder"]) and not overrides.get("no_reorder", False)
    grid_names = {k: v.name(k) for k in axes.GRID_KEYS}
    common = dict(jitter_dist=str(v.get("jitter_dist", DEFAULTS["jitter_dist"])),
                  loss_direction=str(v.get("loss_direction", DEFAULTS["loss_direction"])),
                  reorder=reorder, queue=v.text("queue"), names=grid_names, aqm=v.text("aqm"),
                  ecn=bool(v.get("ecn", False)), cross=v.text("cross"), origin_rtt=v.text("origin_rtt"),
                  think=v.text("think"))
    protos, sizes, runs = v.text("proto", DEFAULTS["proto"]), v.text("size", DEFAULTS["size"]), v.get("runs", DEFAULTS["runs"])
    if profiles and not any(k in overrides for k in ("bw", "rtt", "jitter", "loss", "trace_down", "trace_up")):
        conds = []
        for i, prof in enumerate(profiles):
            if not isinstance(prof, dict) or set(prof) - PROFILE_KEYS or "name" not in prof or "bw" not in prof:
                raise UsageError(f"{where}: profile {i + 1} needs name and bw, and may have up_bw, rtt, jitter, "
                                 f"loss; got {sorted(prof) if isinstance(prof, dict) else prof!r}")
            at = f"{where}: profile {i + 1}"
            for k, x in prof.items():
                check_type(x, k, f"{at} {k}") if k != "name" else check_type(x, "description", f"{at} name")
            g = axes.make_grid(protos, _as_list(prof["bw"]), sizes, runs, prof.get("up_bw"),
                               None if prof.get("rtt") is None else _as_list(prof["rtt"]),
                               None if prof.get("jitter") is None else _as_list(prof["jitter"]),
                               None if prof.get("loss") is None else _as_list(prof["loss"]),
                               **{**common, "names": {**grid_names, **{k: f"{at} {k}" for k in PROFILE_KEYS}}})
            conds += [dataclasses.replace(c, name=str(prof["name"])) for c in g.conditions]
        return dataclasses.replace(g, conditions=tuple(conds))
    trace_down = _trace_paths(v, "trace_down", path)
    if v.given("trace_down") and v.given("bw"):
        # an option over the file's value: the option's rate or trace is the downlink's
        opt_trace, opt_bw = "trace_down" in overrides, "bw" in overrides
        if opt_trace == opt_bw:
            raise UsageError(f"{v.name('trace_down')} and {v.name('bw')}: the downlink's rate follows the trace; "
                             "give one of them")
        if opt_bw:
            trace_down = None
    return axes.make_grid(protos, v.text("bw", DEFAULTS["bw"]), sizes, runs, v.text("up_bw"), v.text("rtt"),
                          v.text("jitter"), v.text("loss"), **common, trace_down=trace_down,
                          trace_up=_trace_paths(v, "trace_up", path))


def _machines(v: "Values", ccs: tuple[str, ...]) -> tuple:
    """(server machine, interface, token file, browser binary): where the campaign runs beside this
    machine, each checked (a list of congestion controls needs this machine's testbed)."""
    server = v.get("server_machine")
    server = None if server is None else hostnet.parse_ipv4(str(server), v.name("server_machine"))
    iface = v.get("iface")
    iface = None if iface is None else hostnet.check_iface_name(str(iface), v.name("iface"))
    browser = v.get("browser_binary")
    if browser is not None and not browser.startswith("/"):
        raise UsageError(f"{v.name('browser_binary')} = {browser!r}; expected the absolute path of a Chromium or "
                         "Google Chrome binary")
    if server is not None and len(ccs) > 1:
        raise UsageError(f"{v.name('cc')}: {', '.join(ccs)}: several congestion controls need this machine's testbed; "
                         "on two machines the server's own default applies (its net.ipv4.tcp_congestion_control)")
    return server, iface, v.get("server_token_file"), browser


def _visitors(v: "Values", grid: Grid) -> Grid:
    """The grid with its budget axis (--cpu's budgets and --device's devices, each read once:
    conditions.Budget) and the cores a budgeted browser may use (--cores)."""
    devices, budgets = _devices(v), _budgets(v)
    if devices and v.get("cpu") is None:
        budgets = ()  # a device alone: no unbudgeted cell beside it unless --cpu full asks for one
    grid = dataclasses.replace(grid, budgets=budgets + devices, cores=v.whole("cores", 1, len(own_cpus())))
    if grid.cores != 1 and not any(b.cpu for b in grid.budgets):
        raise UsageError(f"{v.name('cores')} = {grid.cores} without a CPU budget; expected --cpu FRACTIONS with it "
                         "(the cores a budgeted browser may use)")
    return grid
