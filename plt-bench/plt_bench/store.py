"""The results store: SQLite under results/, one row per trial, written as each trial ends.

Schema history (SCHEMA_VERSION):
  1 - campaigns (metadata as JSON), trials (conditions, every timing, status, reason, the full
      Navigation Timing entry, the server's view), link_checks (the link read back per condition).
  2 - trials gain the link's conditions as columns (rtt_ms, jitter_ms, jitter_dist, loss_pct,
      loss_direction, reorder, queue_pkts) and link_json (the emulator's counters during the
      trial); a version 1 store is migrated in place.
  3 - campaigns gain spec_hash (a rerun of the same campaign resumes it); trials gain attempt
      (retries keep every attempt), warmup, busy_pct and load1 (the machine before the trial)
      and idle_wait_s (how long the idle gate waited).
  4 - trials gain cpu_json: CPU seconds per role (browser, renderer, network, gpu, ... from the
      browser's process tree; caddy and linkem across the trial).
  5 - cpu_json becomes {"roles": ..., "launch": ..., "sampler": ...}: the browser's roles count from
      the start of the navigation (its start-up is under "launch"); version 4 rows stay flat
      (cpu.roles_of reads both). New tables: cpu_samples (the CPU time series of capture runs) and
      artifacts (capture files beside the trial: pcap, keylog, qlog, netlog).
  6 - the table trials is made from the record (plt_bench.records.Trial); trials gain
      conditions_name (a named profile's name: until now only inside the label), so a trial's
      conditions are whole in their columns and cells are found by fields, not by the label.
  7 - multi-object pages: trials gain objects and object_bytes (the page's N images of S bytes;
      0 for a single-object page), objects_ok, connections and resources_json (the objects' proof
      and Resource Timing); `page` becomes the page's label (5KB, 200x5KB) instead of the file's
      name (index_5KB.html), and size_bytes counts every body of the page.
  8 - bulk pages (throughput over time): trials gain bulk_ms and interval_ms (0 for other pages),
      bulk_bytes, goodput_bps (the browser's), throughput_bps (the link's own counter) and
      series_json (bytes per interval, both); request pages (request latency): requests and streams
      (0 for other pages), req_p50_ms, req_p90_ms and req_p99_ms.
  9 - trials gain cpu_bound and cpu_bound_share: the role (or the machine) that limited the trial
      by CPU, and for what share of the load; None for older trials (their figures cannot say).
 10 - trials gain host: which machine (and testbed) of a cluster measured it; None on one machine.
 11 - trials gain cpus: the CPUs the trial's processes could run on (a pinned cluster worker's
      own set, or every CPU of the machine); None for older trials.
 12 - a slot (campaign, conditions, run, page, protocol) is stored at most once per attempt: the
      trigger trials_one_per_slot refuses a second row (two runs of one campaign at once stored
      11 slots twice); rows stored before stay as they are. Trials gain prelaunched (the browser
      was started during the previous trial's bookkeeping; None for older trials), and the idle
      gate's figures (busy_pct, load1, idle_wait_s) are taken after the launch.
 13 - three HTTP versions (plt_bench.protocols): trials store h3, h2 or h1. Older stores wrote quic
      (HTTP/3) and tcp (HTTP/1.1 over TLS); the migration rewrites them to h3 and h1, in the trials
      and in each campaign's stored grid, so old trials keep the protocol they ran with. Trials gain
      cc, the TCP congestion control (an axis of the grid now): older trials get their campaign's
      (its metadata's congestion_control, else cubic); a slot is one per cc too (the rule is made
      anew with the column).
 14 - pages like the web's: trials gain fcp_ms, lcp_ms, lcp_element, lcp_url and paint_reason (the
      page's paint metrics; NULL for older trials, which did not read them), origins (a multi-object
      page's origins; 1 for every older trial, which had one), connections_json (connections per
      origin, from Caddy's log), and repeat visits' figures: visit (first for every older trial, a
      fresh browser's load), first_plt_ms, resumed_connections, zero_rtt, cached_objects and visit_json.
 15 - links that move: trials gain trace_down, trace_down_sha256, trace_up, trace_up_sha256 (the trace a
      direction's rate followed, by name and hash; NULL for older trials, whose rates were constant)
      and trace_phase_ms (where the navigation began in the trace).
 16 - recordings replayed as recorded (plt_bench.archive): trials gain unrecorded (requests the
      recording did not hold, answered 404; NULL for every other page and older trial) and replay_json
      (the replay's evidence per trial: responses served, proven by both ends, matched by query).
 17 - visual progress (capture kind visual, plt_bench.visual): trials gain first_visual_change_ms,
      speed_index_ms and visually_complete_ms (NULL without the capture, and for older trials).
 18 - a second browser (plt_bench.browsers): trials gain browser (chromium | firefox); older trials
      are Chromium's, and say so.
 19 - the browser as an axis (--browser chromium,firefox): a slot is one browser's, so the trigger that
      keeps one row per slot and attempt holds the browser too (made anew; no row changes).
 20 - a second server (plt_bench.servers): trials gain server (caddy | quinn; older trials are Caddy's,
      and say so) and server_cc (the congestion controller the page's connection ran, as the server's
      log says; NULL where it does not, as for every older trial).
 21 - the server as an axis (--http-server caddy,quinn): a slot is one server's, so the trigger that
      keeps one row per slot and attempt holds the server too (made anew; no row changes).
 22 - HTTP/3 as browsers find it (--discovery, plt_bench.dns): trials gain discovery (forced for every
      older trial, the only way then) and protocol_mix_json (what carried each request of a discovery
      trial's h3 cell; NULL otherwise).
 23 - paint metrics read once the page has settled (browsers.worker.PAINT_JS): trials gain
      paint_wait_ms (how long after the load; NULL for every older trial, read 50 ms after its last
      LCP record).
 24 - the browser's CPU budget (plt_bench.device), an axis (--cpu): trials gain cpu_budget, cpu_cores,
      cpu_quota_us, cpu_period_us, cpu_slowdown, cpu_group_ms, cpu_throttled_periods, cpu_throttled_ms
      and udp_rcvbuf_errors (NULL for every older trial: no budget, the machine's whole CPU); the rule
      of one row per slot and attempt holds the budget (made anew).
 25 - the visitor's device (--device, plt_bench.device.profiles): trials gain device, device_host_index
      and device_index (NULL for every older trial: no device) and viewport (the window the page was
      laid out in; NULL for every older trial, the fixed 1280x800 then); the rule of one row per slot and
      attempt holds the device (made anew).
 26 - the bottleneck's queue discipline (--aqm, plt_bench.link.aqm) and competing traffic (--cross,
      plt_bench.link.cross): trials gain aqm (NULL for every older trial: the kernel's FIFO), ecn (0),
      cross (NULL: none) and cross_mbps (what the flows carried during the load; NULL); a slot's
      conditions hold the first three, so the rule of one row per slot and attempt is made anew.
 27 - a browser kept across trials (--browser-start kept, plt_bench.browsers.base.START_MODES): trials
      gain browser_start (fresh for every older trial: a browser and profile of its own) and
      browser_loads (the kept browser's loads before the trial; 0).
 28 - the browsers' sandbox in each campaign's metadata (key metadata since 2026-11-27, never written
      until 2026-11-29, so every campaign read as unsandboxed and sandboxed ones pooled with those
      before): where a campaign's metadata (and each cluster host's) lacks browser_sandbox, its
      campaign file's or option's value (grid browser_sandbox: off where given), else on for a
      campaign begun since the sandbox became the default (SANDBOX_DEFAULT_SINCE_UTC), off before. No
      trial row changes.
 29 - each origin at its own distance (--origin-rtt, plt_bench.link.origins): trials gain origin_rtt
      (NULL for every older trial: every origin at the link's RTT) and origin_rtts_json (each origin's
      distance proven; NULL); a slot's conditions hold origin_rtt, so the rule of one row per slot and
      attempt is made anew.
 30 - think time (--think, plt_bench.pages.timing): trials gain think (NULL for every older trial: every
      response at once) and think_json (the think proven from the server's log; NULL); a slot's
      conditions hold think, so the rule of one row per slot and attempt is made anew.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import os
import sqlite3
from pathlib import Path
from typing import Iterable, TextIO

from . import records
from .conditions import CONGESTION_CONTROLS
from .device.profiles import PROFILES
from .errors import StoreError, UsageError
from .link import aqm as aqm_mod, cross as cross_mod, origins as origins_mod
from .pages import Page, timing as timing_mod
from .records import Trial

SCHEMA_VERSION = 30
# when the browsers' sandbox became the default (commit 387687a): a campaign begun since ran sandboxed
# unless its definition said off (schema 28)
SANDBOX_DEFAULT_SINCE_UTC = "2026-11-27T01:40:59+00:00"
V24_COLUMNS = ("cpu_budget", "cpu_cores", "cpu_quota_us", "cpu_period_us", "cpu_slowdown", "cpu_group_ms",
               "cpu_throttled_periods", "cpu_throttled_ms", "udp_rcvbuf_errors")
V25_COLUMNS = ("device", "device_host_index", "device_index", "viewport")
V26_COLUMNS = ("aqm", "ecn", "cross", "cross_mbps")
V27_COLUMNS = ("browser_start", "browser_loads")
V29_COLUMNS = ("origin_rtt", "origin_rtts_json")
V30_COLUMNS = ("think", "think_json")


@dataclasses.dataclass(frozen=True)
class Migration:
    """One step of a store's schema, from version to - 1 to version to: the trial columns it adds
    (declared as records.columns() declares them today, or, for the first steps, as they were),
    a method of Store that rewrites what is there (call), SQL run after, and whether the
    one-row-per-slot trigger is made anew (the schema's own makes it over the slot's new fields)."""
    to: int
    what: str
    columns: tuple[str, ...] = ()
    trial_decls: tuple[str, ...] = ()
    campaign_decls: tuple[str, ...] = ()
    call: str | None = None
    sql: tuple[str, ...] = ()
    remake_slot_trigger: bool = False


MIGRATIONS = (
    Migration(2, "the link's conditions as columns", trial_decls=(
        "rtt_ms REAL DEFAULT 0", "jitter_ms REAL DEFAULT 0", "jitter_dist TEXT DEFAULT 'uniform'",
        "loss_pct REAL DEFAULT 0", "loss_direction TEXT DEFAULT 'both'", "reorder INTEGER DEFAULT 1",
        "queue_pkts INTEGER", "link_json TEXT")),
    Migration(3, "resumable campaigns, attempts, warm-ups, the machine's state", campaign_decls=("spec_hash TEXT",),
              trial_decls=("attempt INTEGER NOT NULL DEFAULT 1", "warmup INTEGER NOT NULL DEFAULT 0", "busy_pct REAL",
                           "load1 REAL", "idle_wait_s REAL")),
    Migration(4, "CPU per role", trial_decls=("cpu_json TEXT",)),
    Migration(5, "new tables only (made with the schema); old cpu_json rows stay readable"),
    Migration(6, "the profile's name as a column ('Cable (10mbit rtt28ms)' -> Cable)",
              trial_decls=("conditions_name TEXT",),
              sql=("UPDATE trials SET conditions_name = substr(conditions, 1, instr(conditions, ' (') - 1) "
                   "WHERE conditions LIKE '% (%)'",)),
    Migration(7, "multi-object pages; every older trial loaded one HTML file",
              columns=("objects", "object_bytes", "objects_ok", "connections", "resources_json"), call="_v7_page_labels"),
    Migration(8, "bulk and request pages; every older trial loaded a page",
              columns=("bulk_ms", "interval_ms", "bulk_bytes", "goodput_bps", "throughput_bps", "series_json",
                       "requests", "streams", "req_p50_ms", "req_p90_ms", "req_p99_ms")),
    Migration(9, "CPU-bound trials flagged", columns=("cpu_bound", "cpu_bound_share")),
    Migration(10, "the measuring host, for campaigns run on a cluster", columns=("host",)),
    Migration(11, "the CPUs a trial could run on (cluster workers pinned to their own)", columns=("cpus",)),
    Migration(12, "one row per slot and attempt (the trigger is made with the schema)", columns=("prelaunched",)),
    Migration(13, "the protocols by their HTTP version (quic -> h3, tcp -> h1); cc a column", columns=("cc",),
              call="_v13_protocols_and_cc", remake_slot_trigger=True),
    Migration(14, "paint metrics, origins, connections per origin, repeat visits",
              columns=("fcp_ms", "lcp_ms", "lcp_element", "lcp_url", "paint_reason", "origins", "connections_json",
                       "visit", "first_plt_ms", "resumed_connections", "zero_rtt", "cached_objects", "visit_json")),
    Migration(15, "trace-driven rates",
              columns=("trace_down", "trace_down_sha256", "trace_up", "trace_up_sha256", "trace_phase_ms")),
    Migration(16, "recordings replayed as recorded", columns=("unrecorded", "replay_json")),
    Migration(17, "visual progress", columns=("first_visual_change_ms", "speed_index_ms", "visually_complete_ms")),
    Migration(18, "the browser of each trial; every older one was Chromium's", columns=("browser",),
              sql=("UPDATE trials SET browser = 'chromium'",)),
    Migration(19, "one row per slot and attempt of each browser", remake_slot_trigger=True),
    Migration(20, "the server of each trial (every older one was Caddy's) and its controller",
              columns=("server", "server_cc"), sql=("UPDATE trials SET server = 'caddy'",)),
    Migration(21, "one row per slot and attempt of each server", remake_slot_trigger=True),
    Migration(22, "how the browser found HTTP/3 (every older trial was forced) and the mix",
              columns=("discovery", "protocol_mix_json"), sql=("UPDATE trials SET discovery = 'forced'",)),
    Migration(23, "how long the paint metrics waited for the page to settle", columns=("paint_wait_ms",)),
    Migration(24, "the browser's CPU budget and its proof (none for every older trial)", columns=V24_COLUMNS,
              remake_slot_trigger=True),
    Migration(25, "the visitor's device (none for every older trial)", columns=V25_COLUMNS, remake_slot_trigger=True),
    Migration(26, "the bottleneck's queue discipline (the kernel's FIFO for every older trial)", columns=V26_COLUMNS,
              remake_slot_trigger=True),
    Migration(27, "how the trial's browser started (a fresh browser for every older trial)",
              columns=V27_COLUMNS,
              sql=("UPDATE trials SET browser_start = 'fresh', browser_loads = 0",)),
    Migration(28, "each campaign's browsers' sandbox in its metadata (never written before)",
              call="_v28_browser_sandbox"),
    Migration(29, "each origin's own distance (every older trial's origins at the link's RTT)", columns=V29_COLUMNS,
              remake_slot_trigger=True),
    Migration(30, "think time (every older trial's responses at once)", columns=V30_COLUMNS, remake_slot_trigger=True),
)

SCHEMA_TEMPLATE = """
CREATE TABLE IF NOT EXISTS schema_info (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS campaigns (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  started_utc TEXT NOT NULL,
  finished_utc TEXT,
  status TEXT NOT NULL,              -- running | finished | failed | interrupted
  grid_json TEXT NOT NULL,
  metadata_json TEXT NOT NULL,
  spec_hash TEXT                     -- the campaign's definition; equal hashes resume
);
{trials}
CREATE INDEX IF NOT EXISTS trials_campaign ON trials(campaign_id);
CREATE TABLE IF NOT EXISTS cpu_samples (
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  role TEXT NOT NULL,                -- browser, renderer, network, gpu, ..., caddy, linkem
  t_s REAL NOT NULL,                 -- seconds since the navigation began
  user_s REAL NOT NULL,              -- CPU seconds since the navigation began (cumulative)
  system_s REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS cpu_samples_trial ON cpu_samples(trial_id);
CREATE TABLE IF NOT EXISTS artifacts (
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  kind TEXT NOT NULL,                -- pcap | keylog | qlog | netlog
  path TEXT NOT NULL,                -- relative to the store's folder
  bytes INTEGER NOT NULL,
  note TEXT                          -- e.g. tcpdump's packet counts
);
CREATE INDEX IF NOT EXISTS artifacts_trial ON artifacts(trial_id);
CREATE TABLE IF NOT EXISTS link_checks (
  id INTEGER PRIMARY KEY,
  campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
  conditions TEXT NOT NULL,
  checked_utc TEXT NOT NULL,
  result_json TEXT NOT NULL
);
"""


def trials_table() -> str:
    """CREATE TABLE trials, made from the record (plt_bench.records.Trial): one column per field,
    the conditions' fields as columns of their own, each field's documentation as a comment."""
    lines = ["  id INTEGER PRIMARY KEY,"]
    cols = records.columns()
    for i, (name, decl, text) in enumerate(cols):
        if name == "campaign_id":
            decl += " REFERENCES campaigns(id)"
        lines.append(f"  {name} {decl}{',' if i < len(cols) - 1 else ''}  -- {text}")
    return "CREATE TABLE IF NOT EXISTS trials (\n" + "\n".join(lines) + "\n);"


def slot_constraint(without: tuple[str, ...] = ()) -> str:
    """The store's own rule that a slot is stored at most once per attempt: a trigger (NULL-safe,
    since an unshaped rate or an automatic queue is NULL) over the slot's columns, with its index.
    without: columns an older version's slot did not hold (a test's older store)."""
    cols = [c for c in ["campaign_id", *records.CONDITION_COLUMNS, "run_index", "page", "proto", "cc", "browser",
                        "server", "cpu_budget", "device", "attempt"] if c not in without]
    # a trial without a browser is Chromium's (records.Trial.browser), as every row before schema 18; one
    # without a server Caddy's (records.Trial.server), as every row before schema 20
    default = {"browser": "chromium", "server": "caddy"}
    same = " AND ".join(f"{c} IS NEW.{c}" if c not in default else f"coalesce({c}, '{default[c]}') IS "
                        f"coalesce(NEW.{c}, '{default[c]}')" for c in cols)
    return ("CREATE INDEX IF NOT EXISTS trials_slot ON trials(campaign_id, run_index, page, proto, attempt);\n"
            "CREATE TRIGGER IF NOT EXISTS trials_one_per_slot BEFORE INSERT ON trials\n"
            f"  WHEN EXISTS (SELECT 1 FROM trials WHERE {same})\n"
            f"  BEGIN SELECT RAISE(ABORT, '{SLOT_TAKEN}'); END;")


SLOT_TAKEN = "this attempt of this slot is stored already"
SCHEMA = SCHEMA_TEMPLATE.replace("{trials}", trials_table()) + slot_constraint()


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot change the file: mode=ro, or immutable=1 where even the WAL's
    shared-memory file cannot be made (a store on read-only media or in a folder we may not write)."""
    from urllib.parse import quote
    uri = f"file:{quote(str(path.resolve()))}"
    try:
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.OperationalError:
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=30)


def stored_version(path: Path) -> int | None:
    """The schema version of an existing store, read without changing anything; None if it has none."""
    db = _connect_read_only(path)
    try:
        row = db.execute("SELECT version FROM schema_info").fetchone()
        return row[0] if row else None
    except sqlite3.OperationalError:
        return None
    finally:
        db.close()


def check_kind(path: Path, option: str = "--results") -> None:
    """Refuse, before anything opens it, a store path that is a folder, or anything but a regular
    file (a FIFO would block open() past every signal, a device such as /dev/full would get a
    journal beside it), also through a symbolic link."""
    import stat
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise UsageError(f"{option}: cannot read {path}: {e.strerror or e}") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{option}: {path} is a folder; expected the path of a results file, e.g. {path}/plt-bench.sqlite")
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        via = f" (a link to {path.resolve()})" if path.is_symlink() else ""
        raise UsageError(f"{option}: {path}{via} is {kind}; a results store is a regular file, e.g. "
                         "results/plt-bench.sqlite")


def check_writable(path: Path, option: str = "--results") -> None:
    """Refuse, changing nothing, a store path that cannot be written (the nearest existing folder is
    not writable, or the path is a folder, a FIFO, a device), or an existing store of a newer schema."""
    path = Path(path)
    check_kind(path, option)
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    try:  # root passes access(2) everywhere, even in /proc: only trying tells (and leaves nothing)
        if not folder.is_dir():
            raise NotADirectoryError(folder)
        import tempfile
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise UsageError(f"{option}: cannot write the results store {path}: {folder} is not a writable folder "
                         f"({e.strerror or e})") from None
    if path.exists():
        _check_version(path, option, writing=True)


def check_out_file(path: Path, option: str) -> Path:
    """An output file's path, refused before anything is read or made if it cannot be one."""
    if path.is_dir() or not path.parent.is_dir():
        raise UsageError(f"{option}: {path} is a folder; expected a file path" if path.is_dir() else
                         f"{option}: the folder {path.parent} does not exist")
    return path


def _check_version(path: Path, option: str, writing: bool) -> None:
    try:
        version = stored_version(path)
    except sqlite3.DatabaseError as e:
        raise UsageError(f"{option}: {path} is not a plt-bench results store ({e})") from None
    if version is not None and version > SCHEMA_VERSION:
        raise UsageError(f"{option}: {path} has schema version {version}, newer than this plt-bench's "
                         f"{SCHEMA_VERSION}: use the plt-bench that wrote it, or choose another --results path")
    if version is not None and version < SCHEMA_VERSION and not writing:
        raise UsageError(f"{option}: {path} has the older schema version {version} and cannot be written to bring it "
                         f"to {SCHEMA_VERSION}: copy it somewhere writable and open it once with this plt-bench")


# The tables every version of the store has had: a store holding some of them and not the others is
# damaged (a campaigns table dropped by hand), never a new store to fill in around the rows it has.
CORE_TABLES = ("schema_info", "campaigns", "trials")


def check_intact(db: sqlite3.Connection, path: Path, option: str = "--results") -> None:
    """Refuse a store that has some of CORE_TABLES and lacks others, naming what is missing."""
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [t for t in CORE_TABLES if t not in have]
    if missing and len(missing) < len(CORE_TABLES):
        raise UsageError(f"{option}: {path} is damaged: it has no {' and no '.join(repr(t) for t in missing)} table "
                         f"(it has {', '.join(sorted(t for t in CORE_TABLES if t in have))}); plt-bench neither reads "
                         "nor adopts its rows: restore it from a copy, or choose another --results path")


def _file_identity(path: Path, what: str = "identity") -> tuple[int, int] | None:
    """(device, inode) of the file at path now, or with what="content" its (size, mtime in ns);
    None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if what == "identity" else (st.st_size, st.st_mtime_ns)


SIDECARS = ("-wal", "-shm")  # SQLite's files beside a store in WAL mode, found by the store's name


def _writing(method):
    """A write to the store: a full disk or an I/O error is a message naming the store (what was
    committed before stays), not sqlite's traceback. The store's file is checked first: changed in
    place by another program, StoreError and nothing written; removed or replaced, everything saved
    (rescue) and this write made in the saved copy, the StoreError kept for the next look
    (ensure_present, between trials; finish_campaign), so that the trial at hand is reported as the
    rest. Its state is kept after (_seen)."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            self._check_in_place()
            lost = self.rescue()
            out = method(self, *args, **kwargs)
            self._seen()
        except sqlite3.Error as e:
            try:
                self.db.rollback()
            except sqlite3.Error:
                pass
            raise StoreError(f"the results store {self.path} could not be written ({e}); everything stored before "
                             "this is kept") from None
        if lost:
            self._lost = self._rescue_words()  # the write above counted
        return out
    return wrapper


class Store:
    """The results store. read_only opens an existing store without changing it in any way (reports of
    an archived store); otherwise a newer schema is refused before anything is written."""

    def __init__(self, path: Path, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        self._identity = None
        self._lost: str | None = None  # a removal or replacement saved at a write, said at the next look
        if read_only:
            check_kind(self.path)
            if not self.path.exists():
                raise UsageError(f"--results: {self.path} does not exist")
            self._migrate_in_place()
            _check_version(self.path, "--results", writing=False)
            try:
                self.db = _connect_read_only(self.path)
                check_intact(self.db, self.path)
                self.db.execute("SELECT version FROM schema_info").fetchone()
            except sqlite3.Error as e:
                raise UsageError(f"--results: {self.path} is not a plt-bench results store ({e})") from None
            return
        check_writable(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=30)
            check_intact(self.db, self.path)  # before anything is written to it
            self.db.execute("PRAGMA journal_mode=WAL")
            self._migrate()
            self.db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as e:
            raise UsageError(f"--results: cannot write the results store {self.path}: {e}") from None
        self._identity = _file_identity(self.path)  # ensure_present: still this file?
        self._seen()
        row = self.db.execute("SELECT version FROM schema_info").fetchone()
        if row is None:
            self.db.execute("INSERT INTO schema_info VALUES (?)", (SCHEMA_VERSION,))
            self.db.commit()
        elif row[0] != SCHEMA_VERSION:
            raise UsageError(f"--results: {self.path} has schema version {row[0]}; this plt-bench writes "
                             f"version {SCHEMA_VERSION}: choose another --results path")

    def _migrate_in_place(self) -> None:
        """Before a read: a store of an older schema is brought to this one where it can be written
        (as a run would), so that every reader reads every version; read-only media are refused."""
        try:
            version = stored_version(self.path)
        except sqlite3.DatabaseError:
            return  # not a store: _check_version says so
        if version is None or version >= SCHEMA_VERSION:
            return
        try:
            check_writable(self.path)
            Store(self.path).close()
        except UsageError:
            return  # _check_version refuses it with the reason

    def _migrate(self) -> None:
        """Bring an older store up to SCHEMA_VERSION, one step (MIGRATIONS) at a time."""
        try:
            row = self.db.execute("SELECT version FROM schema_info").fetchone()
        except sqlite3.OperationalError:
            return  # a new store
        version = row[0] if row else SCHEMA_VERSION
        declared = dict((name, decl) for name, decl, _ in records.columns())
        for step in MIGRATIONS:
            if version != step.to - 1:
                continue
            table_columns = [("campaigns", c) for c in step.campaign_decls] + [("trials", c) for c in step.trial_decls]
            table_columns += [("trials", f"{c} {declared[c]}") for c in step.columns]
            for table, decl in table_columns:
                self.db.execute(f"ALTER TABLE {table} ADD COLUMN {decl}")
            if step.call:
                getattr(self, step.call)()
            for sql in step.sql:
                self.db.execute(sql)
            if step.remake_slot_trigger:  # made anew (with the schema) over the slot with what the step adds
                self.db.execute("DROP TRIGGER IF EXISTS trials_one_per_slot")
            version = step.to
        if row and version != row[0]:
            self.db.execute("UPDATE schema_info SET version = ?", (version,))
            self.db.commit()

    def _v7_page_labels(self) -> None:
        """6 -> 7: every older trial loaded one HTML file: its page's label from its size."""
        for (size,) in self.db.execute("SELECT DISTINCT size_bytes FROM trials").fetchall():
            self.db.execute("UPDATE trials SET page = ? WHERE size_bytes = ?", (Page(size).label, size))

    def _v13_protocols_and_cc(self) -> None:
        """12 -> 13: the protocols by their HTTP version (quic -> h3, tcp -> h1); each trial's congestion
        control from its campaign's metadata."""
        self._rename_protocols()
        for cid, meta in self.db.execute("SELECT id, metadata_json FROM campaigns").fetchall():
            cc = (json.loads(meta or "{}") or {}).get("congestion_control")
            self.db.execute("UPDATE trials SET cc = ? WHERE campaign_id = ?",
                            (cc if cc in CONGESTION_CONTROLS else "cubic", cid))

    def _v28_browser_sandbox(self) -> None:
        """27 -> 28: the browsers' sandbox of each campaign that does not say it (its metadata's, or a
        cluster's each host's): as its definition gave it, else on since the sandbox was the default, off
        before."""
        import datetime
        since = datetime.datetime.fromisoformat(SANDBOX_DEFAULT_SINCE_UTC)
        for cid, started, grid, meta in self.db.execute(
                "SELECT id, started_utc, grid_json, metadata_json FROM campaigns").fetchall():
            try:
                g, m = json.loads(grid or "{}") or {}, json.loads(meta or "{}") or {}
            except ValueError:
                continue  # a damaged record stays as it is: its reader says so
            if not isinstance(m, dict):
                continue
            try:
                begun = datetime.datetime.fromisoformat(str(started).replace("Z", "+00:00"))
                if begun.tzinfo is None:
                    begun = begun.replace(tzinfo=datetime.timezone.utc)
                default = "on" if begun >= since else "off"
            except ValueError:
                default = "off"  # an undated campaign: as KEY_DEFAULTS reads one
            given = g.get("browser_sandbox") if isinstance(g, dict) else None
            value = given if given in ("on", "off") else default
            hosts = m.get("hosts") if isinstance(m.get("hosts"), dict) else {}
            # a cluster's key metadata is each host's (a head's own names none: Testbed.metadata writes no head's)
            wheres = list(hosts.values()) if m.get("mode") == "cluster" else [m]
            missing = [w for w in wheres if isinstance(w, dict) and "browser_sandbox" not in w]
            for w in missing:
                w["browser_sandbox"] = value
            if missing:
                self.db.execute("UPDATE campaigns SET metadata_json = ? WHERE id = ?",
                                (json.dumps(m, sort_keys=True), cid))

    def _rename_protocols(self) -> None:
        from .protocols import STORED_BEFORE_13
        for old, new in STORED_BEFORE_13.items():
            self.db.execute("UPDATE trials SET proto = ? WHERE proto = ?", (new, old))
        for cid, grid in self.db.execute("SELECT id, grid_json FROM campaigns").fetchall():
            g = json.loads(grid or "{}") or {}
            if g.get("protos"):
                g["protos"] = [STORED_BEFORE_13.get(p, p) for p in g["protos"]]
                self.db.execute("UPDATE campaigns SET grid_json = ? WHERE id = ?", (json.dumps(g, sort_keys=True), cid))

    def close(self) -> None:
        """Close; a store replaced since the last look (rescue) loses nothing of the new file: SQLite's
        files beside it that are this run's (by their inode) go with this connection."""
        if self.read_only or self._identity is None or _file_identity(self.path) == self._identity:
            self.db.close()
            return
        self.db.close()
        self._remove_own_sidecars()

    def _seen(self) -> None:
        """What the store's file and its sidecars are after this connection's own write: their
        identities, the file's size and time, and SQLite's count of other connections' commits."""
        if self.read_only or self._identity is None:
            return
        self._sidecars = {s: _file_identity(Path(f"{self.path}{s}")) for s in SIDECARS}
        self._state = (_file_identity(self.path, "content"), self.db.execute("PRAGMA data_version").fetchone()[0])

    def _remove_own_sidecars(self) -> list[str]:
        """Remove this connection's -wal and -shm beside the store's path (by inode: a replacing
        file's own are left), so that they never overlay the file that took its place."""
        out = []
        for s, ident in getattr(self, "_sidecars", {}).items():
            p = Path(f"{self.path}{s}")
            if ident is not None and _file_identity(p) == ident:
                p.unlink(missing_ok=True)
                out.append(p.name)
        return out

    def _check_in_place(self) -> None:
        """StoreError when the store's file (the same inode) was written by another program since this
        connection's last write: truncated, or its size or time moved while no SQLite connection
        committed (PRAGMA data_version did not move). Nothing more is written to it: its pages are
        detached (detach) so that closing writes nothing into it."""
        if self.read_only or self._identity is None or not hasattr(self, "_state"):
            return
        if _file_identity(self.path) != self._identity:
            return  # removed or replaced: rescue's (between trials)
        (before, version), now = self._state, _file_identity(self.path, "content")
        if now == before or now is None or before is None:
            return
        if now[0] >= before[0] and self.db.execute("PRAGMA data_version").fetchone()[0] != version:
            return  # another plt-bench's connection committed (a second campaign in the same store)
        how = "truncated" if now[0] < before[0] else "overwritten"
        self.detach()
        raise StoreError(f"the results store {self.path} was {how} in place by another program during the run "
                         f"({before[0]} bytes then, {now[0]} now); plt-bench stops and writes nothing more to it (what "
                         "this run had stored is in the file as the other program left it)")

    def detach(self) -> None:
        """Close without writing another byte into the store's file (its checkpoint on close would
        write this connection's pages over what another program put there): the connection's
        descriptors of the file are pointed at /dev/null first, its own sidecars then removed."""
        ino = self._identity
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in os.listdir("/proc/self/fd"):
                try:
                    st = os.stat(f"/proc/self/fd/{fd}")
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) == ino:
                    os.dup2(null, int(fd))
        finally:
            os.close(null)
        try:
            self.db.close()
        except sqlite3.Error:
            pass
        self._remove_own_sidecars()
        self._identity = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @_writing
    def new_campaign(self, name: str, started_utc: str, grid: dict, metadata: dict, spec_hash: str | None = None) -> int:
        cur = self.db.execute(
            "INSERT INTO campaigns (name, started_utc, status, grid_json, metadata_json, spec_hash) VALUES (?,?,?,?,?,?)",
            (name, started_utc, "running", json.dumps(grid, sort_keys=True), json.dumps(metadata, sort_keys=True),
             spec_hash))
        self.db.commit()
        return cur.lastrowid

    def resumable(self, name: str, spec_hash: str) -> int | None:
        """The latest unfinished campaign with this name and definition, if any."""
        row = self.db.execute("SELECT id FROM campaigns WHERE name=? AND spec_hash=? AND status != 'finished' "
                              "ORDER BY id DESC LIMIT 1", (name, spec_hash)).fetchone()
        return row[0] if row else None

    @_writing
    def mark_abandoned(self, owner_alive) -> list[int]:
        """Campaigns still 'running' whose run is gone (SIGKILL, a power cut): marked 'interrupted'.
        owner_alive(metadata['owner']) tells; a campaign without an owner record is left as it is."""
        out = []
        for cid, meta in self.db.execute("SELECT id, metadata_json FROM campaigns WHERE status = 'running'").fetchall():
            owner = (json.loads(meta or "{}") or {}).get("owner")
            if owner and not owner_alive(owner):
                self.db.execute("UPDATE campaigns SET status = 'interrupted' WHERE id = ?", (cid,))
                out.append(cid)
        self.db.commit()
        return out

    @_writing
    def claim(self, campaign_id: int, owner: dict, owner_alive) -> dict | None:
        """Make `owner` the live owner of a campaign to resume, atomically (two runs started at once
        cannot both win): refused, returning the owner record, while another owner's run is alive."""
        self.db.execute("BEGIN IMMEDIATE")
        status, meta = self.db.execute("SELECT status, metadata_json FROM campaigns WHERE id = ?",
                                       (campaign_id,)).fetchone()
        meta = json.loads(meta or "{}")
        held = meta.get("owner")
        if status == "running" and held and held != owner and owner_alive(held):
            self.db.rollback()
            return held
        meta["owner"] = owner
        self.db.execute("UPDATE campaigns SET status='running', finished_utc=NULL, metadata_json=? WHERE id=?",
                        (json.dumps(meta, sort_keys=True), campaign_id))
        self.db.commit()
        return None

    def unfinished_named(self, name: str) -> list[int]:
        """Every unfinished campaign with this name, whatever its definition."""
        return [r[0] for r in self.db.execute("SELECT id FROM campaigns WHERE name=? AND status != 'finished' ORDER BY id",
                                              (name,))]

    def latest_named(self, name: str) -> int | None:
        row = self.db.execute("SELECT id FROM campaigns WHERE name=? ORDER BY id DESC LIMIT 1", (name,)).fetchone()
        return row[0] if row else None

    @_writing
    def update_metadata(self, campaign_id: int, metadata: dict) -> None:
        self.db.execute("UPDATE campaigns SET metadata_json=? WHERE id=?", (json.dumps(metadata, sort_keys=True), campaign_id))
        self.db.commit()

    @_writing
    def finish_campaign(self, campaign_id: int, status: str, finished_utc: str) -> None:
        """The campaign's end; a store removed or replaced meanwhile is saved first (ensure_present),
        its end written into what was saved, and then the StoreError raised."""
        self.db.execute("UPDATE campaigns SET status=?, finished_utc=? WHERE id=?", (status, finished_utc, campaign_id))
        self.db.commit()
        if self._lost:
            raise StoreError(self._lost)

    def ensure_present(self) -> None:
        """Between trials: StoreError if the store's file was removed or replaced since it was opened
        (a results folder deleted mid-run), after saving all it holds (rescue)."""
        lost = self.rescue() or self._lost
        if lost:
            raise StoreError(lost)

    def rescue(self) -> str | None:
        """None while the store's path is still the file opened. Else what this connection holds (it
        still reads the removed file) is copied with SQLite's backup API: to the path itself when
        nothing is there now (its folder made again), beside it when another file took its place; the
        store goes on in that copy, and the words for the StoreError are returned, naming where
        everything went, or, if it could not be saved, exactly which trials were lost."""
        now = None if self.read_only or self._identity is None else _file_identity(self.path)
        if now == self._identity or self._identity is None:
            return None
        gone = now is None
        how = "removed" if gone else "replaced by another file"
        target = self.path if gone else self.path.with_name(f"{self.path.stem}.rescued-{os.getpid()}{self.path.suffix}")
        what = self._held()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            copy = sqlite3.connect(target, timeout=30)
            self.db.backup(copy)
            copy.execute("PRAGMA journal_mode=WAL")
        except (OSError, sqlite3.Error) as e:
            self._identity = None  # said once: the trials below are lost with the file
            return (f"the results store {self.path} was {how} during the run and what it held could not be saved to "
                    f"{target} ({getattr(e, 'strerror', None) or e}): lost: {what}; the run stops")
        self.db.close()
        left = self._remove_own_sidecars()  # never overlaid on the file that took its place
        self.db, self.path, self._identity = copy, target, _file_identity(target)
        self._seen()
        self._rescued = (how, target, left, gone)
        return self._rescue_words()

    def _held(self) -> str:
        """What this store holds, per campaign, in words (for a rescue's message)."""
        held = self.db.execute("SELECT campaign_id, COUNT(*), MIN(seq), MAX(seq) FROM trials GROUP BY campaign_id "
                               "ORDER BY campaign_id").fetchall()
        return "; ".join(f"campaign {c}: {n} trial(s), seq {lo} to {hi}" for c, n, lo, hi in held) or "no trial"

    def _rescue_words(self) -> str:
        """A rescue's message, counted in the saved copy as it is now: the write that found the store
        gone is made there first, and counted (said before it: one trial short)."""
        how, target, left, gone = self._rescued
        return (f"the results store was {how} during the run; everything it held ({self._held()}) was saved to {target}"
                + (f" (this run's {' and '.join(left)} beside it removed"
                   + ("" if gone else "; the new file is as it was put there") + ")" if left else "")
                + "; the run stops (run the same command again to resume)")

    @_writing
    def add_trial(self, t: Trial) -> int:
        row = t.row()
        cur = self.db.execute(f"INSERT INTO trials ({','.join(row)}) VALUES ({','.join('?' for _ in row)})",
                              list(row.values()))
        self.db.commit()
        return cur.lastrowid

    @_writing
    def add_cpu_samples(self, trial_id: int, rows: list[dict]) -> None:
        self.db.executemany("INSERT INTO cpu_samples (trial_id, role, t_s, user_s, system_s) VALUES (?,?,?,?,?)",
                            [(trial_id, r["role"], r["t_s"], r["user_s"], r["system_s"]) for r in rows])
        self.db.commit()

    def cpu_samples(self, trial_id: int) -> list[dict]:
        cur = self.db.execute("SELECT role, t_s, user_s, system_s FROM cpu_samples WHERE trial_id=? "
                              "ORDER BY role, t_s", (trial_id,))
        return [{"role": r, "t_s": t, "user_s": u, "system_s": s} for r, t, u, s in cur]

    def sampled(self, trial_ids: Iterable[int]) -> set[int]:
        """The trials among these that have a CPU time series."""
        ids = list(trial_ids)
        if not ids:
            return set()
        marks = ",".join("?" for _ in ids)
        return {r[0] for r in self.db.execute(f"SELECT DISTINCT trial_id FROM cpu_samples WHERE trial_id IN ({marks})",
                                              ids)}

    @_writing
    def add_artifacts(self, trial_id: int, artifacts) -> None:
        """Capture files of a trial; paths are stored relative to the store's folder."""
        base = self.path.parent.resolve()
        rows = []
        for a in artifacts:
            p = Path(a.path).resolve()
            rows.append((trial_id, a.kind, str(p.relative_to(base)) if p.is_relative_to(base) else str(p), a.bytes,
                         a.note))
        self.db.executemany("INSERT INTO artifacts (trial_id, kind, path, bytes, note) VALUES (?,?,?,?,?)", rows)
        self.db.commit()

    def artifacts(self, trial_id: int) -> list[dict]:
        """A trial's capture files, with absolute paths."""
        base = self.path.parent.resolve()
        cur = self.db.execute("SELECT kind, path, bytes, note FROM artifacts WHERE trial_id=? ORDER BY kind, path",
                              (trial_id,))
        return [{"kind": k, "path": str(base / p), "bytes": b, "note": n} for k, p, b, n in cur]

    def trial_ids(self, campaign_id: int) -> dict[int, int]:
        """seq -> trial id of a campaign."""
        return dict(self.db.execute("SELECT seq, id FROM trials WHERE campaign_id=?", (campaign_id,)).fetchall())

    @_writing
    def add_link_check(self, campaign_id: int, conditions: str, checked_utc: str, result: dict) -> None:
        self.db.execute("INSERT INTO link_checks (campaign_id, conditions, checked_utc, result_json) VALUES (?,?,?,?)",
                        (campaign_id, conditions, checked_utc, json.dumps(result, sort_keys=True)))
        self.db.commit()

    def campaign(self, campaign_id: int) -> records.Campaign:
        row = self.db.execute("SELECT id, name, started_utc, finished_utc, status, grid_json, metadata_json, spec_hash "
                              "FROM campaigns WHERE id=?", (campaign_id,)).fetchone()
        if row is None:
            raise UsageError(f"--campaign: no campaign {campaign_id} in {self.path}")
        parsed = {}
        for key, column, text in (("grid", "grid_json", row[5]), ("metadata", "metadata_json", row[6])):
            try:
                parsed[key] = json.loads(text)
            except (TypeError, ValueError, RecursionError):
                parsed[key] = None
            if not isinstance(parsed[key], dict):
                raise UsageError(f"--results: {self.path}: campaign {campaign_id}'s {column} is damaged (not a JSON object): its "
                                 "conditions and key metadata cannot be known, so its trials are not reported; restore "
                                 "the store from a copy")
        return {"id": row[0], "name": row[1], "started_utc": row[2], "finished_utc": row[3], "status": row[4],
                "grid": parsed["grid"], "metadata": parsed["metadata"], "spec_hash": row[7]}

    def campaign_ids(self) -> list[int]:
        return [r[0] for r in self.db.execute("SELECT id FROM campaigns ORDER BY id")]

    def resolve_campaign(self, spec: str) -> list[int]:
        """'latest', 'all' or a number -> campaign ids."""
        ids = self.campaign_ids()
        if spec == "all":
            return ids
        if spec == "latest":
            if not ids:
                raise UsageError(f"--campaign: {self.path} holds no campaign yet")
            return [ids[-1]]
        try:
            cid = int(spec)
        except ValueError:
            raise UsageError(f"--campaign: '{spec}' is not a campaign; expected a number, 'latest' or 'all'") from None
        if cid not in ids:
            raise UsageError(f"--campaign: no campaign {cid} in {self.path}")
        return [cid]

    def trials(self, campaign_ids: Iterable[int]) -> list[Trial]:
        """The campaigns' trials as records, in the order they ran."""
        ids = list(campaign_ids)
        if not ids:
            return []
        marks = ",".join("?" for _ in ids)
        cur = self.db.execute(f"SELECT id, {','.join(records.COLUMNS)} FROM trials WHERE campaign_id IN ({marks}) "
                              f"ORDER BY campaign_id, seq", ids)
        return [Trial.from_row(dict(zip(["id", *records.COLUMNS], row)), STORED_CHECKS, READERS) for row in cur]

    def link_checks(self, campaign_id: int) -> list[records.LinkCheck]:
        cur = self.db.execute("SELECT conditions, checked_utc, result_json FROM link_checks WHERE campaign_id=? "
                              "ORDER BY id", (campaign_id,))
        return [{"conditions": c, "checked_utc": t, "result": json.loads(r)} for c, t, r in cur]

    def export_csv(self, campaign_ids: Iterable[int], out: TextIO | Path, with_nav: bool = False) -> int:
        """Trials as CSV to a stream or a file (check_out_file first); how many were written."""
        if isinstance(out, Path):
            try:
                with open(out, "w", newline="") as f:
                    return self.export_csv(campaign_ids, f, with_nav)
            except OSError as e:
                raise UsageError(f"--out: cannot write {out}: {e.strerror or e}") from None
        fields = ["id"] + [f for f in records.COLUMNS if with_nav or f != "nav_json"]
        w = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        n = 0
        for t in self.trials(campaign_ids):
            w.writerow({"id": t.trial_id, **t.row()})
            n += 1
        return n


# What a stored value must mean, by column: the record's own checks (records.VALUE_CHECKS) and those
# that ask a part, which the model may not import: a device's name, competing flows' text as link.cross
# reads it, and a queue discipline's text, which its reader reads into the link's record (READERS). A
# value that fails reads as NULL and is named.
@functools.lru_cache(maxsize=256)  # a store's rows repeat a few texts: each parsed once
def _aqm(v):
    """A stored discipline's text read into link.aqm.Aqm; ValueError where it is not one."""
    if not isinstance(v, str):
        raise ValueError(v)
    try:
        return aqm_mod.parse(v, "stored")
    except UsageError as e:
        raise ValueError(str(e)) from None


@functools.lru_cache(maxsize=256)
def _cross_text(v) -> bool:
    return isinstance(v, str) and _parses(cross_mod.parse, v)


def _parses(parse, text: str) -> bool:
    try:
        parse(text, "stored")
    except (UsageError, ValueError):
        return False
    return True


@functools.lru_cache(maxsize=256)
def _origin_rtt(v):
    """A stored --origin-rtt text read into link.origins.OriginRtt; ValueError where it is not one."""
    if not isinstance(v, str):
        raise ValueError(v)
    return origins_mod.stored(v)


READERS = {"aqm": _aqm, "origin_rtt": _origin_rtt}  # a stored text read back into the seam's record, once per text
@functools.lru_cache(maxsize=256)
def _think_text(v) -> bool:
    """A stored think: its canonical text (pages.timing), never off (NULL is off)."""
    return isinstance(v, str) and _parses(timing_mod.parse_think, v) and timing_mod.parse_think(v).on


STORED_CHECKS = {**records.VALUE_CHECKS, "device": lambda v: isinstance(v, str) and v in PROFILES,
                 "cross": _cross_text, "think": _think_text}
