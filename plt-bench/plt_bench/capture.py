"""Capture runs: what a trial leaves beside its row for later analysis.

Kinds (`--capture KINDS`, `capture = [...]` in a campaign):
  cpu     the CPU time series per role (the sampler's readings, kept in the store)
  pcap    tcpdump in the client namespace, on its link to the router: every packet of the trial
  keylog  the browser's TLS key log (SSLKEYLOGFILE format; TLS over TCP and QUIC), which lets
          Wireshark and tshark decrypt the pcap
  qlog    Caddy's qlog (quic-go, QLOGDIR) of the trial's QUIC connection
  netlog  the browser's own network log: Chromium's net-log (chrome://net-export format), Firefox's
          HTTP log (MOZ_LOG, text: netlog.moz_log and each content process's netlog.child-N.moz_log)
  har     a HAR 1.2 file of the trial from Chromium's DevTools Network events or Firefox's Performance
          Timeline (plt_bench.har): every request's timings, protocol and sizes (and in Chromium its
          headers and connection), for any HAR viewer's waterfall
  visual  the load's visual progress from a screencast of its frames (plt_bench.visual): first
          visual change, SpeedIndex and visually complete, stored in the trial; and the frames
          themselves where the page changed (frames.zip: a JPEG per change, named by its ms from the
          navigation's start), which the report's filmstrips show

Files live in results/captures/<store>/<campaign>/<seq>-<proto>-<page>/ (<store>: the results
store's file name without .sqlite) and the store lists them (table artifacts, paths relative to the
store's folder).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from . import cmd, protocols
from .errors import CaptureError, UsageError

KINDS = ("cpu", "pcap", "keylog", "qlog", "netlog", "har", "visual")
FILE_KINDS = ("pcap", "keylog", "qlog", "netlog", "har", "visual")
DEFAULT_LIMIT_BYTES = 2 * 10**9
DEFAULT_INTERVAL_S = 0.1
FILENAMES = {"pcap": "client.pcap", "keylog": "keys.log", "netlog": "netlog.json", "har": "trial.har",
             "visual": "frames.zip"}

# Bytes written per byte of page, measured here (10MB page at 100 Mbit: pcap 10.7 MB for either
# protocol, qlog 4.0 MB, net-log 7.1 MB over QUIC and 1.2 MB over TCP): a full-size pcap holds
# every frame plus a record header; quic-go's qlog has a JSON line per packet; Chromium's net-log
# logs every QUIC packet but only socket reads over TCP.
BYTES_PER_PAGE_BYTE = {"pcap": 1.08, "qlog": 0.40, ("netlog", "QUIC"): 0.71, ("netlog", "TCP"): 0.12, "keylog": 0.0, "har": 0.0,
                       "visual": 0.0}
# a HAR entry is about 1.5 KB (headers as sent and received, timings): 800 KB covers a page of
# 500 objects, the Long Look's largest count
# a page's frames (frames.zip): up to visual.MAX_KEPT_FRAMES changes of 20-60 KB each as JPEG
FIXED_BYTES = {"pcap": 50_000, "qlog": 20_000, "netlog": 600_000, "keylog": 2_000, "har": 800_000,
               "visual": 1_500_000}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a testbed captures: the kinds, where the files go, the CPU sampling interval."""

    kinds: tuple[str, ...] = ()
    root: Path | None = None          # results/captures
    cpu_interval_s: float = DEFAULT_INTERVAL_S
    limit_bytes: int = DEFAULT_LIMIT_BYTES

    @property
    def files(self) -> bool:
        return any(k in FILE_KINDS for k in self.kinds)


def parse_kinds(text: str | list | None, option: str = "--capture") -> tuple[str, ...]:
    """'all', 'none' or a comma-separated list of KINDS (a list from a campaign file)."""
    if text is None:
        return ()
    from .units import split_list
    items = [str(x).strip().lower() for x in text] if isinstance(text, list) else [x.lower() for x in split_list(text, option)]
    items = [x for x in items if x]
    if items in (["all"], ["yes"], ["true"]):
        return KINDS
    if items in (["none"], ["no"], ["false"], []):
        return ()
    bad = [x for x in items if x not in KINDS]
    if bad:
        raise UsageError(f"{option}: unknown capture kind(s) {', '.join(bad)}; expected 'all', 'none' or a "
                         f"comma-separated list of {', '.join(KINDS)}")
    return tuple(k for k in KINDS if k in items)


def parse_interval_s(text: str | None, option: str = "--cpu-interval") -> float:
    """The CPU sampling interval, 10 ms to 10 s (None: DEFAULT_INTERVAL_S)."""
    if text is None:
        return DEFAULT_INTERVAL_S
    from .units import parse_duration_ms
    ms = parse_duration_ms(text, option)
    if not 10 <= ms <= 10_000:
        raise UsageError(f"{option}: '{text}' is outside 10ms to 10s")
    return ms / 1000.0


def captures_root(results: Path) -> Path:
    """Where a results store's capture files go: <its folder>/captures/<its name without .sqlite>.
    Per store: two stores of one folder both have a campaign 1, and with one captures/1/ for both
    the second campaign's files overwrote the first's, whose store still listed them (2026-11-28).
    A store's older campaigns keep the paths they stored (captures/<campaign>/...)."""
    results = Path(results).resolve()
    return results.parent / "captures" / results.name.removesuffix(".sqlite")


def estimate_bytes(kinds: tuple[str, ...], proto: str, size_bytes: int) -> int:
    """Bytes one trial's capture files will take, roughly (see BYTES_PER_PAGE_BYTE)."""
    total = 0
    p = protocols.get(proto)
    transport = "QUIC" if p.per_origin else p.transport  # as recorded: the larger, any origin may be h3
    for k in kinds:
        if k not in FILE_KINDS or (k == "qlog" and transport != "QUIC"):
            continue
        ratio = BYTES_PER_PAGE_BYTE.get(k, BYTES_PER_PAGE_BYTE.get((k, transport), 0.0))
        total += int(size_bytes * ratio) + FIXED_BYTES[k]
    return total


def planned(plan) -> list[tuple[str, int]]:
    """(protocol, bytes the page will take) of each trial of a plan (campaign.Slot), for check_space."""
    return [(x.proto, x.page.expected_bytes(x.conditions.rate_down_bps)) for x in plan]


def check_space(kinds: tuple[str, ...], trials: list[tuple[str, int]], folder: Path,
                limit_bytes: int = DEFAULT_LIMIT_BYTES) -> tuple[int, str | None]:
    """(estimated bytes, warning or None) for the planned trials [(proto, size)]. Raises when the
    estimate does not fit on the disk at all (with a margin of 1 GB for the store and pages)."""
    need = sum(estimate_bytes(kinds, p, s) for p, s in trials)
    if not need:
        return 0, None
    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    mb = lambda b: f"{b / 1e6:,.0f} MB"  # noqa: E731
    if need + 10**9 > free:
        raise UsageError(f"--capture: the captures would take about {mb(need)} but {probe} has {mb(free)} free; "
                         "capture fewer kinds (e.g. --capture cpu,keylog) or fewer/smaller pages")
    if need > limit_bytes:
        return need, (f"warning: the captures will take about {mb(need)}, over the {mb(limit_bytes)} limit "
                      f"(--capture-limit); {mb(free)} are free. The largest part is "
                      f"{'the pcap' if 'pcap' in kinds else 'the qlog' if 'qlog' in kinds else 'the net-log'}; "
                      "--capture cpu,keylog keeps the CPU series without it")
    return need, None


def tcpdump_argv(iface: str, path: Path, buffer_kib: int = 65536, filter_file: Path | None = None) -> list[str]:
    """tcpdump writing every whole packet of an interface to a pcap (pure). -Z root: Debian's
    tcpdump otherwise drops to its own user, which cannot write under results/. Not immediate
    mode: waking per packet costs enough CPU at 100 Mbit to make linkem fall behind on 2 cores
    (measured); see Tcpdump.stop for the price."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", iface):
        raise UsageError(f"interface name {iface!r} is not valid")
    argv = ["tcpdump", "-i", iface, "-n", "-s", "0", "-B", str(buffer_kib), "-Z", "root", "-w", str(path)]
    return argv + (["-F", str(filter_file)] if filter_file else [])


_STATS_RE = re.compile(r"(\d+) packets? captured.*?(\d+) packets? received by filter.*?(\d+) packets? dropped by kernel",
                       re.S)


def parse_tcpdump_stats(stderr: str) -> dict | None:
    m = _STATS_RE.search(stderr)
    if not m:
        return None
    return {"captured": int(m.group(1)), "received": int(m.group(2)), "dropped": int(m.group(3))}


@dataclasses.dataclass
class Artifact:
    kind: str
    path: Path  # absolute
    bytes: int
    note: str | None = None


class Tcpdump:
    """One tcpdump in a namespace, started before the trial and stopped after it."""

    def __init__(self, ns: str | None, iface: str, path: Path, log_path: Path, filter_file: Path | None = None):
        self.argv = cmd.in_netns(ns, tcpdump_argv(iface, path, filter_file=filter_file))
        self.path, self.log_path = path, log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._log, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # tcpdump says "listening on" once the socket is bound
            if self.proc.poll() is not None:
                raise CaptureError(f"tcpdump exited with {self.proc.returncode}: {self._stderr()}")
            if "listening on" in self._stderr():
                return
            time.sleep(0.02)
        self.stop()
        raise CaptureError(f"tcpdump did not start listening within {timeout_s:.0f}s: {self._stderr()}")

    def _stderr(self) -> str:
        try:
            return self.log_path.read_text(errors="replace").strip()
        except OSError:
            return ""

    # The kernel hands packets to tcpdump in blocks, retired when full or after tcpdump's 1 s
    # timeout; a block still filling when tcpdump is stopped is lost (the end of the trial, seen
    # here). So stop() lingers past one timeout first.
    LINGER_S = 1.1

    def stop(self, linger: bool = True) -> dict | None:
        """Stop it (after the block timeout; SIGINT flushes the file) and return its packet counts."""
        if self.proc is None:
            return None
        if linger and self.proc.poll() is None:
            time.sleep(self.LINGER_S)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                cmd.stop_process(self.proc)
        self.proc = None
        self._log.close()
        return parse_tcpdump_stats(self._stderr())


class SpoolQlogs:
    """The server's qlogs in a spool folder of this machine: Caddy writes every QUIC connection's qlog
    into it (QLOGDIR, fixed when Caddy starts); each trial's browser is fresh, so the files that appear
    during a trial are its own. The spool is on the same file system as the trial folders, so a rename
    moves a file even while quic-go is still finishing it."""

    def __init__(self, spool: Path):
        self.spool = Path(spool)

    @classmethod
    def made(cls, settings: Settings, prefix: str, cleanups) -> "SpoolQlogs":
        """A testbed's spool, made in the captures' root (on their file system), removed by cleanups
        (an ExitStack) with the testbed."""
        spool = settings.root / f".qlog-spool-{prefix}"
        spool.mkdir(parents=True, exist_ok=True)
        cleanups.callback(shutil.rmtree, spool, True)
        return cls(spool)

    def before(self) -> set[str]:
        return set(os.listdir(self.spool))

    def take(self, before: set[str], folder: Path, wait_s: float) -> list[Artifact]:
        """The files that appeared since `before` (waiting up to wait_s for the first), moved into folder."""
        deadline = time.monotonic() + wait_s
        new: set[str] = set()
        while time.monotonic() < deadline:
            new = set(os.listdir(self.spool)) - before
            if new:
                break
            time.sleep(0.05)
        out = []
        for name in sorted(new):
            os.rename(self.spool / name, folder / name)
            out.append(Artifact("qlog", folder / name, (folder / name).stat().st_size))
        return out


class TrialCapture:
    """The capture of one trial: its folder, tcpdump around the load, the server's qlogs after.

    qlogs: where the server's qlog of each QUIC connection is had (SpoolQlogs on this machine, a
    server machine's through its control channel: remote.RemoteQlogs), or None."""

    def __init__(self, kinds: tuple[str, ...], folder: Path, client_ns: str | None, client_iface: str,
                 qlogs=None, pcap_filter: Path | None = None):
        self.kinds, self.folder, self.qlogs = kinds, folder, qlogs
        self.tcpdump = None
        if "pcap" in kinds:
            self.tcpdump = Tcpdump(client_ns, client_iface, folder / FILENAMES["pcap"], folder / "tcpdump.log",
                                   pcap_filter)
        self._qlogs_before: set[str] = set()
        self.pcap_stats: dict | None = None

    def start(self) -> None:
        old = os.umask(0o077)  # key logs decrypt the traffic: keep the folder private
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        finally:
            os.umask(old)
        if "qlog" in self.kinds and self.qlogs is not None:
            self._qlogs_before = self.qlogs.before()
        if self.tcpdump:
            self.tcpdump.start()

    def stop(self, wait_qlog_s: float = 1.0) -> list[Artifact]:
        """Stop the capture and list the trial's files."""
        if self.tcpdump:
            self.pcap_stats = self.tcpdump.stop()
        out: list[Artifact] = []
        if "qlog" in self.kinds and self.qlogs is not None:
            old = os.umask(0o077)
            try:
                out += self.qlogs.take(self._qlogs_before, self.folder, wait_qlog_s)
            finally:
                os.umask(old)
        from .browsers import BROWSERS
        own_logs = sorted({f for b in BROWSERS.values() for f in b.own_log_files(self.folder / b.netlog_file)})
        for kind, p in [(k, self.folder / FILENAMES[k]) for k in ("pcap", "keylog", "har", "visual")] + \
                [("netlog", Path(f)) for f in own_logs]:
            if kind in self.kinds and p.exists():
                note = None
                if kind == "pcap" and self.pcap_stats:
                    s = self.pcap_stats
                    note = f"{s['captured']} packets captured, {s['dropped']} dropped by the kernel"
                out.append(Artifact(kind, p, p.stat().st_size, note))
        (self.folder / "tcpdump.log").unlink(missing_ok=True)
        return out

    def abort(self) -> None:
        if self.tcpdump:
            self.tcpdump.stop(linger=False)


def trial_folder(captures_root: Path, campaign_id: int, seq: int, proto: str, page: str) -> Path:
    stem = page.rsplit(".", 1)[0].replace("replay/", "har-").replace("/index", "")  # replay/NAME/index.html: har-NAME
    return captures_root / str(campaign_id) / f"{seq:05d}-{proto}-{stem}"
