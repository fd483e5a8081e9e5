"""What plt-bench asks of a browser: one interface, one implementation per browser (chromium.py,
firefox.py), chosen by name from the table in browsers/__init__.py.

A browser has two sides. The testbed's (pure, in the measuring process): the launch of one trial as
a worker request, for a protocol and a set of origins. The worker's (browsers.worker, in the client
namespace): starting the browser and its WebDriver from that request, with a fresh profile. What
every browser shares, the worker does once: the navigation, Navigation and Resource Timing, the
paint metrics, the CPU of the driver's process tree (cpu.role names each process's role), the
end of every process of a trial.
"""

from __future__ import annotations

import os

from ..errors import UsageError

# The window every trial renders in, whatever the browser: fixed, since the largest contentful
# paint is the largest element in it (and an image filling it would not count).
WINDOW = (1280, 800)
WINDOW_ARGS = ("--window-size=", "--width=", "--height=")  # the window's arguments (Browser.emulation replaces them)


# the capture kinds a browser writes itself (the others, pcap and cpu, are the testbed's)
CAPTURE_FEATURES = frozenset({"har", "keylog", "netlog", "visual"})


# How a trial's browser starts (--browser-start): kept, a browser kept across the trials of one set of
# flags, each trial in a fresh context of its own (its cache, cookies, connections, TLS sessions and
# alternative services new; Browser.new_context), where the browser can and the trial asks nothing of
# its process (kept_refusals); fresh, a new browser and profile for every trial, as before 2026-11-28.
START_MODES = ("kept", "fresh")
START_DEFAULT = "kept"


def parse_mode(text: str | None, modes: tuple[str, str], default: str, option: str, meanings: str) -> str:
    """One of two modes of an option (pure): the text's, else the default; UsageError naming the option,
    the two forms and what they mean."""
    mode = (text or default).strip().lower()
    if mode not in modes:
        raise UsageError(f"{option}: '{text}' is not {modes[0]} or {modes[1]} ({meanings})")
    return mode


def parse_start(text: str | None, option: str = "--browser-start") -> str:
    """--browser-start's mode (START_MODES)."""
    return parse_mode(text, START_MODES, START_DEFAULT, option, "kept: a browser kept across trials, a fresh context "
                      "each; fresh: a new browser and profile each trial")


def kept_refusals(repeat: bool, capture=(), screen: bool = False, benchmark: bool = False) -> list[str]:
    """Why a trial runs in a fresh browser even where --browser-start kept (pure): what it asks of the
    browser's own process (its log, key log or HAR from the driver's log, a screencast, a repeat visit's
    closed connections, a device's emulated screen, a calibration's benchmark). [] where a kept
    browser's fresh context serves it."""
    why = [f"capture {k}" for k in sorted(CAPTURE_FEATURES & set(capture))]
    return why + (["a repeat visit"] if repeat else []) + (["a device's screen"] if screen else []) + (
        ["a calibration"] if benchmark else [])


def asked(repeat: bool, origins: bool, per_origin: bool, capture=(), recordings: bool = False,
          discovery: bool = False) -> set[str]:
    """The features (Browser.features) a load asks of its browser (pure): a repeat visit, several
    origins, each origin over its own protocol, the browser's own capture files, a recorded page
    (a replayed recording's or a served folder's: hosts that resolve per page, not per testbed), HTTP/3
    found as a visitor's browser finds it (dns.MODES but forced)."""
    return ({"repeat"} if repeat else set()) | ({"origins"} if origins else set()) | (
        {"per-origin"} if per_origin else set()) | (CAPTURE_FEATURES & set(capture)) | (
        {"recordings"} if recordings else set()) | ({"discovery"} if discovery else set())


class Browser:
    """One browser as plt-bench drives it. Subclasses fill in the names and the two sides."""

    name = ""    # what options and stores say: chromium | firefox
    label = ""   # for people: Chromium
    netlog_file = "netlog.json"  # the browser's own network log in a trial's folder (capture kind netlog)
    # what a trial may ask beyond a load that this browser can give (capture kinds, repeat visits,
    # as-recorded origins): a request for anything else is refused by name (unsupported)
    features: frozenset[str] = frozenset()
    keeps_contexts = False  # a kept browser gives each trial a fresh context of its own (new_context)
    # its names resolve through the client namespace's hosts file (which the testbed writes for each
    # load that replays or serves a folder), not through its launch (Chromium's resolver rules)
    resolves_by_hosts_file = False
    # how much later than the link's round trip its Resource Timing may put a connection's handshake
    # (ms): its own turn in a busy page's load (link.origins.proof's slack above; measured: Chromium
    # 1.2-5.6 ms over in 36 handshakes, 20 objects on 4 origins at 20 ms of RTT, and 18.6 ms in a
    # browser's first load on a new testbed)
    handshake_slack_ms = 30.0

    def launch(self, proto: str, origins: list[tuple[str, str]], spki_b64: str, profile_dir: str,
               spoke: dict[str, str] | None = None, extra=(), discovery: str = "forced") -> dict:
        """The worker request's launch part for one trial (pure): {"browser", "args", "prefs"}.
        origins: (host, address) of every origin the testbed serves, the test host first; each must
        resolve to its address alone and be forced to the protocol. discovery (dns.MODES): other than
        forced, the names are the testbed's name server's and h3 is found, not forced."""
        raise NotImplementedError

    def sandboxed(self, args: list[str]) -> list[str]:
        """Its flags for a launch as the unprivileged user with its own sandbox on (browsers.sandbox)."""
        return args

    def capture_args(self, kinds: tuple[str, ...], folder, filenames: dict[str, str]) -> list[str]:
        """Command-line arguments that write a capture run's files of the browser's own (pure)."""
        return []

    def capture_env(self, kinds: tuple[str, ...], folder, filenames: dict[str, str]) -> dict[str, str]:
        """Environment variables that write a capture run's files of the browser's own (pure)."""
        return {}

    def untimed(self, nav: dict) -> list[str]:
        """The fields of a Navigation Timing entry this browser did not time (they repeat an earlier
        mark), so that no duration is made of them (pure). None by default."""
        return []

    def repeat_launch(self, evidence: str, captured: bool) -> dict:
        """What a repeat visit adds to a trial's launch (pure): {"args": [...], "env": {...}}, the means
        to close the first visit's connections in the same browser and a log of the repeat's
        connections at evidence (a path; captured: the trial's capture writes that log already)."""
        return {}

    def emulation(self, screen) -> dict:
        """What a launch adds to look like a device's screen (device.profiles.Screen) (pure):
        {"args": window arguments that replace the fixed window's, "prefs": {...}, and Chromium's
        "mobile_emulation"}. Every browser must give one."""
        raise NotImplementedError

    def one_address(self, address: str) -> dict:
        """Prefs that resolve every name to one address (pure): for a browser that resolves by the
        hosts file (resolves_by_hosts_file) where the testbed has no namespace of its own to hold one
        (two machines: every origin is the server machine's address). {} where its launch maps names."""
        return {}

    def unsupported(self, wanted: set[str]) -> list[str]:
        """The features asked for that this browser cannot give, sorted (pure)."""
        return sorted(wanted - self.features)

    # -- the worker's side (in the client namespace) ------------------------------------------------
    def start(self, req: dict, out: dict, cleanup) -> object:
        """The browser and its WebDriver, started from a request (a Selenium driver); records
        launch_attempts in out. cleanup(): ends a failed attempt's processes and profile."""
        raise NotImplementedError

    def new_context(self, driver) -> object:
        """In a kept browser: a fresh context for one trial, as separate from every earlier trial's as a
        new profile is (its cache, cookies, connections, TLS sessions, alternative services), its
        window the driver's current one; returns what end_context takes. Only where keeps_contexts."""
        raise NotImplementedError

    def end_context(self, driver, context) -> None:
        """End a trial's context (its window closed, everything it held gone); the driver back on the
        browser's own window."""
        raise NotImplementedError

    def versions(self) -> dict:
        """The browser's and its driver's versions, by name."""
        raise NotImplementedError

    def installed(self) -> bool:
        """Whether this machine has the browser and its driver (what a cluster's worker declares)."""
        return all(os.path.isfile(p) and os.access(p, os.X_OK) for p in self.binaries())

    def end_first_visit(self, driver, clear_cache: bool) -> None:
        """After a repeat visit's first load: close every connection of the browser (the repeat opens
        new ones, resuming their TLS sessions) and, where asked, clear its HTTP cache."""
        raise NotImplementedError

    def frames(self, driver, req: dict):
        """Before the navigation of a trial that captures `visual`: what takes the page's frames from
        now on, an object whose finish(driver, loaded, frames_path) gives the load's figures once its
        paints are read (plt_bench.visual.judge: {first_visual_change_ms, speed_index_ms,
        visually_complete_ms, frames, ...} or {"error": why}) and whose close() ends it on any path.
        Only where "visual" is in features."""
        raise NotImplementedError

    def har_prepare(self, driver, bodies: bool) -> None:
        """Before the navigation of a trial that captures `har` (bodies: every response's body kept
        too, a recording's): what the browser needs to record its requests. Nothing by default."""

    def har_log(self, driver, nav: dict | None, title: str, bodies: bool) -> dict:
        """After the load: the trial's HAR 1.2 log (plt_bench.har), which the worker writes. Raises on
        what cannot be read (the worker says so in its answer; the trial stands). Only where "har" is
        in features."""
        raise NotImplementedError

    def own_log_files(self, path: str) -> list[str]:
        """Every file the browser writes for its own log at path (a process may write its own beside it)."""
        return [str(path)]

    def quic_ecn(self, path: str):
        """QUIC's ECN as the browser's own log at path tells it (link.ecn.QuicSide): the ECN counts its
        ACK frames reported. This browser's log carries none, and says so."""
        from ..quic_ecn import QuicSide
        return QuicSide(source=None, why=f"{self.name}'s log carries no ECN counts")

    def visit_evidence(self, path: str, boundary_unix: float) -> dict:
        """The repeat's connections from the browser's log at path, from boundary_unix (wall clock) on:
        {"quic_zero_rtt": [Chromium's net-log words for each QUIC session's 0-RTT: AttemptedAndSucceeded,
        AttemptedAndRejected, NotAttempted], "tcp_tls_resumed": [bool per TLS-over-TCP handshake]}, and
        what else the browser tells. Raises OSError or ValueError on a log that cannot be read."""
        raise NotImplementedError
