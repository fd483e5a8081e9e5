"""Firefox (Debian's firefox-esr, driven by geckodriver built from its crate by scripts/setup),
forced to one protocol by its preferences.

Forcing (prefs of a fresh profile per trial):
- h3: network.http.http3.enable, and every origin mapped to its own h3 alternative from the first
  request (network.http.http3.alt-svc-mapping-for-testing with ...force-use-alt-svc-mapping-for-
  testing): no Alt-Svc to learn, no race with TCP. network.http.http3.disable_when_third_party_roots_found
  is false: without it Firefox silently turns HTTP/3 off whenever a certificate it was told to accept
  is not of its built-in roots;
  network.http.http3.backup_timer_delay is an hour: no TCP connection races QUIC;
- h2: HTTP/3 off; h1: HTTP/2 off as well.
Names: Firefox asks the system, and the client namespace's own hosts file answers (topology:
/etc/netns/pbN-client/hosts, every origin of the testbed on its own address; its resolv.conf names
no server that answers, so no lookup leaves the testbed); DNS over HTTPS is off (network.trr.mode
5). The testbed's own certificate is accepted by the session (acceptInsecureCerts): every name
resolves to the testbed alone, so no other certificate can be met. Speculative connections and
prefetching are off, as Chromium's network prediction is: a handshake made before the navigation
would leave the load time.

Repeat visits: the first load's connections closed and its caches emptied through Marionette's
chrome context (geckodriver --allow-system-access), 0-RTT read from Firefox's HTTP log (MOZ_LOG).
Captures: the key log (NSS's SSLKEYLOGFILE) and that HTTP log (netlog). Recordings and served folders:
names through the client namespace's hosts file, which the testbed writes for each such load
(resolves_by_hosts_file). As recorded (per-origin): h3 mapped onto the recording's h3 hosts alone,
the other servers offering their own by ALPN. The HAR from the page's Performance Timeline after
the load (har.build_from_timeline). Visual progress: headed on a virtual display of the trial's own,
recorded 30 times a second (browsers.display; Firefox has no screencast).
"""

from __future__ import annotations

import os
import re
import shutil

from .. import cmd, protocols
from .base import WINDOW, Browser
from .sandbox import driver_launch

# Every trial's preferences, whatever the protocol: a quiet browser that loads what it is asked.
QUIET_PREFS = {
    "network.trr.mode": 5,                       # no DNS over HTTPS: the system's answers (the testbed's hosts)
    "network.proxy.type": 0,
    "network.predictor.enabled": False,          # no speculative handshakes before the navigation
    "network.http.speculative-parallel-limit": 0,
    "network.prefetch-next": False,
    "network.dns.disablePrefetch": True,
    # a generated page asks for the full Referer on every origin (<meta name="referrer" content="unsafe-url">):
    # the server's log tells a trial's objects by it. Firefox drops such a relaxed policy across sites
    # unless told not to; Chromium honours it
    "network.http.referer.disallowCrossSiteRelaxingDefault": False,
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.homepage": "about:blank",
    "browser.newtabpage.enabled": False,
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "toolkit.telemetry.enabled": False,
    "app.update.auto": False,
    "extensions.update.enabled": False,
}


NO_BACKUP_MS = 3_600_000


def firefox_prefs(proto: str, origins: list[tuple[str, str]], spoke: dict[str, str] | None = None) -> dict:
    """The preferences of one trial (pure; unit-tested): the origins forced to the protocol (their
    names resolve through the testbed's hosts file). As recorded (per_origin): spoke gives each host's
    own protocol; h3 is mapped onto the h3 hosts alone, and the others' servers offer theirs alone
    (ALPN: h2 or http/1.1), so HTTP/2 stays on, as Chromium's flags leave it."""
    protocol = protocols.get(proto)
    if protocol.per_origin:
        quic_hosts = [h for h, _ in origins if (spoke or {}).get(h) in protocols.NAMES
                      and protocols.get(spoke[h]).transport == "QUIC"]
        h2 = True
    else:
        quic_hosts = [h for h, _ in origins] if protocol.transport == "QUIC" else []
        h2 = protocol.name != "h1"
    quic = bool(quic_hosts)
    prefs = {**QUIET_PREFS,
             "network.http.http3.enable": quic,
             "network.http.http3.disable_when_third_party_roots_found": False,
             "network.http.http2.enabled": h2}
    if quic:
        prefs["network.http.http3.alt-svc-mapping-for-testing"] = ",".join(f"{h};h3=:443" for h in quic_hosts)
        prefs["network.http.http3.force-use-alt-svc-mapping-for-testing"] = True
        # no TCP "backup" connection racing QUIC: Firefox opens one for a request still waiting for
        # its HTTP/3 connection after this delay (100 ms by default: seen firing 25 ms into a repeat
        # visit, whose document then came over TCP). An hour: never within a trial
        prefs["network.http.http3.backup_timer_delay"] = NO_BACKUP_MS
    return prefs


def firefox_emulation(screen) -> dict:
    """A device's screen in Firefox (pure): its pixel ratio (layout.css.devPixelsPerPx), touch events
    and user agent as prefs, and the window in device pixels (the viewport in CSS pixels times the
    ratio). Firefox has no mobile layout mode outside its developer tools: a page's
    `<meta name=viewport>` is not applied, where Chromium's mobile emulation applies it."""
    prefs = {"layout.css.devPixelsPerPx": f"{screen.pixel_ratio:g}",
             "dom.w3c_touch_events.enabled": 1 if screen.touch else 0}
    if screen.user_agent:
        prefs["general.useragent.override"] = screen.user_agent
    return {"args": [f"--width={round(screen.width_px * screen.pixel_ratio)}",
                     f"--height={round(screen.height_px * screen.pixel_ratio)}"], "prefs": prefs}


def firefox_args(profile_dir: str) -> list[str]:
    """Firefox's command line (pure): headless, the fixed window, the trial's own fresh profile
    (its path in the command line marks the process as the trial's)."""
    return ["-headless", f"--width={WINDOW[0]}", f"--height={WINDOW[1]}", "-profile", profile_dir]


def on_display(args: list[str]) -> list[str]:
    """The command line for a load whose frames are recorded (pure): headed on the trial's virtual
    display (browsers.display), in kiosk mode (the page fills the screen: no toolbar or tab strip
    changes while it loads), the window as asked."""
    return ["--kiosk" if a == "-headless" else a for a in args]


# Firefox's HTTP log (MOZ_LOG): nsHttp at its debug level (each transaction's 0-RTT), every line
# stamped with the wall clock and written at once. Firefox names the file it is given + ".moz_log"
# (the parent process, where the network stack runs) and + ".child-N.moz_log" (the content processes)
HTTP_LOG_MODULES = "timestamp,sync,nsHttp:4"
HTTP_LOG_SUFFIX = ".moz_log"


def http_log_env(path) -> dict[str, str]:
    """The environment that has Firefox write its HTTP log to path, which ends in .moz_log (pure)."""
    path = str(path)
    if not path.endswith(HTTP_LOG_SUFFIX):
        raise ValueError(f"Firefox's log file must end in {HTTP_LOG_SUFFIX}: {path}")
    return {"MOZ_LOG": HTTP_LOG_MODULES, "MOZ_LOG_FILE": path[:-len(HTTP_LOG_SUFFIX)]}


# run in the parent's chrome context (arguments[0]: clear the HTTP cache too)
END_FIRST_VISIT_JS = """
Services.obs.notifyObservers(null, "net:prune-all-connections");
Cc["@mozilla.org/image/tools;1"].getService(Ci.imgITools).getImgCacheForDocument(null).clearCache(false);
if (arguments[0]) {
  Services.cache2.clear();
  // the in-memory caches a new document takes style sheets and scripts from with no request
  ChromeUtils.clearResourceCache();
}
"""


UNTIMED_SLACK_MS = 2.0  # Firefox's Navigation Timing jitter: instants this close are one (Firefox.untimed)


class Firefox(Browser):
    name, label = "firefox", "Firefox"
    features = frozenset({"origins", "keylog", "repeat", "netlog", "recordings", "per-origin", "har", "visual"})
    resolves_by_hosts_file = True
    # its connection times come from its socket thread, late in a busy load: 3-28 ms over the link's round
    # trip measured in 40 handshakes (20 objects on 4 origins at 20 ms of RTT, h2 and h3), against
    # Chromium's 1.2-5.6 ms
    handshake_slack_ms = 50.0
    netlog_file = "netlog" + HTTP_LOG_SUFFIX

    def launch(self, proto, origins, spki_b64, profile_dir, spoke=None, extra=(), discovery="forced") -> dict:
        return {"browser": self.name, "prefs": firefox_prefs(proto, origins, spoke), "args": firefox_args(profile_dir)}

    def emulation(self, screen) -> dict:
        return firefox_emulation(screen)

    def one_address(self, address) -> dict:
        """Two machines: no client namespace, so no hosts file of the testbed's; Firefox's own override
        answers every lookup with the server machine's address (network.dns.forceResolve), so no
        lookup leaves the machine."""
        return {"network.dns.forceResolve": address}

    def capture_env(self, kinds, folder, filenames) -> dict[str, str]:
        """The key log: NSS writes every TLS secret, QUIC's (neqo's handshake is NSS's) and TCP's,
        to SSLKEYLOGFILE, in the format tshark reads (pure)."""
        env = {"SSLKEYLOGFILE": str(folder / filenames["keylog"])} if "keylog" in kinds else {}
        return {**env, **(http_log_env(folder / self.netlog_file) if "netlog" in kinds else {})}

    def repeat_launch(self, evidence, captured) -> dict:
        """Its HTTP log, unless the capture writes it (geckodriver's --allow-system-access, which the
        worker adds for a repeat visit, lets end_first_visit reach the network stack)."""
        return {} if captured else {"env": http_log_env(evidence)}

    def untimed(self, nav: dict) -> list[str]:
        """Firefox 153 does not time an HTTP/1.1 document's response: its entry gives responseStart and
        responseEnd as its requestStart (measured: all three at connectEnd, 269 ms, for a 500 KB page
        whose body took 400 ms at 10 Mbit/s). Those are not the response's; TTFB and the response's
        end stay unmeasured (None), never that instant. Firefox's timer jitter puts them up to a
        millisecond apart (measured on a 5 KB load at 50 ms: requestStart 127, responseStart 128, a
        response that took a round trip more): within UNTIMED_SLACK_MS they are the same instant. A
        real response that fast (an unshaped link) is then left unmeasured too, never mismeasured."""
        start, response = nav.get("requestStart"), nav.get("responseStart")
        if nav.get("nextHopProtocol") == "http/1.1" and start and response is not None and \
                abs(response - start) <= UNTIMED_SLACK_MS:
            return ["responseStart", "responseEnd"]
        return []

    # -- the worker's side ------------------------------------------------------------------------
    @staticmethod
    def binaries() -> tuple[str, str]:
        """Debian's Firefox ESR and the geckodriver scripts/setup built (else any on PATH)."""
        browser = shutil.which("firefox-esr") or shutil.which("firefox") or "/usr/bin/firefox-esr"
        built = cmd.TOOLS_BIN / "geckodriver"
        return browser, str(built) if built.is_file() else (shutil.which("geckodriver") or str(built))

    def versions(self) -> dict:
        from .drivers import first_line
        browser, driver = self.binaries()
        return {"firefox": first_line([browser, "--version"]), "geckodriver": first_line([driver, "--version"])}

    def start(self, req: dict, out: dict, cleanup):
        """geckodriver and Firefox on the trial's own profile (made here, empty; geckodriver writes
        the prefs into it). geckodriver's --profile-root names the run folder in its command line,
        so `plt-bench clean` finds it as it finds chromedriver."""
        from selenium import webdriver
        from selenium.webdriver.firefox.options import Options
        from selenium.webdriver.firefox.service import Service
        browser, driver_path = self.binaries()
        from ..device.cgroup import joining
        Service = joining(Service, req.get("cgroup_procs"))  # noqa: N806 - under a CPU budget, the driver in its group
        os.environ.setdefault("MOZ_CRASHREPORTER_DISABLE", "1")  # no crash reporter beside the trial
        profile = req["profile_dir"]
        os.makedirs(profile, mode=0o700, exist_ok=True)
        popen_kw, env = driver_launch(req)  # under the sandbox, geckodriver and Firefox are its user's
        if popen_kw:
            os.chown(profile, popen_kw["user"], popen_kw["group"])
        args, shown = req["args"], {}
        if req.get("visual"):  # its frames are recorded: headed, on a virtual display of its own
            from . import display
            window = display.window_size(args, WINDOW)
            shown = {"DISPLAY": display.start_display(*window)[1]}
            args = on_display(args)
        opts = Options()
        opts.binary_location = browser
        for a in args:
            opts.add_argument(a)
        for k, v in req.get("prefs", {}).items():
            opts.set_preference(k, v)
        opts.accept_insecure_certs = True
        opts.page_load_strategy = "normal"
        out["launch_attempts"] = 1
        # a capture's environment (capture_env) reaches Firefox through geckodriver, which it inherits
        service_args = ["--profile-root", os.path.dirname(profile), "--log", "error"]
        if req.get("visit"):  # end_first_visit runs in the parent process's privileged (chrome) context
            service_args.append("--allow-system-access")
        service = Service(driver_path, service_args=service_args, log_output=f"{profile}.geckodriver.log",
                          env={**os.environ, **req.get("env", {}), **env, **shown}, popen_kw=dict(popen_kw))
        try:
            driver = webdriver.Firefox(service=service, options=opts)
        except Exception:
            cleanup()  # the display too: a child of the worker, swept with the browser
            raise
        if shown:
            driver.plt_display = (shown["DISPLAY"], window)
        return driver

    def frames(self, driver, req):
        """A recording of the virtual display it runs on for this trial (start), 30 times a second:
        Firefox has no screencast (WebDriver BiDi's screenshots took 70-250 ms each here)."""
        from .display import DisplayFrames
        name, window = driver.plt_display
        return DisplayFrames(name, window, req["profile_dir"])

    def end_first_visit(self, driver, clear_cache) -> None:
        """Through Marionette's chrome context: the network stack's own "prune all connections" (idle
        ones closed, busy ones not reused); the image cache emptied in every process, always (a
        decoded image Firefox keeps in memory is shown again with no request and no Resource Timing
        entry, where Chromium reports its memory cache's hits); the HTTP cache cleared where asked, and
        with it the in-memory style sheet and script caches a new document takes from with no request
        (ChromeUtils.clearResourceCache) (kept: a warm repeat takes its objects from them, each with its
        entry)."""
        with driver.context(driver.CONTEXT_CHROME):
            driver.execute_script(END_FIRST_VISIT_JS, bool(clear_cache))

    def visit_evidence(self, path, boundary_unix) -> dict:
        return http_log_evidence(path, boundary_unix)

    def har_log(self, driver, nav, title, bodies) -> dict:
        """Nothing during the load: the HAR is read from the page's Performance Timeline after it
        (har.build_from_timeline). WebDriver BiDi's network events would give headers too, but
        subscribing to them slowed Firefox's loads by 7-61% and its FCP by 150-190 ms here
        (docs/results.md), where Chromium's DevTools events cost 0-10%. bodies: a recording is made
        in Chromium (plt-bench record)."""
        from .. import har
        if bodies:
            raise ValueError("Firefox's HAR keeps no bodies: a recording is made in Chromium")
        origin, navigation, resources = driver.execute_script(har.TIMELINE_JS)
        return har.build_from_timeline(float(origin), navigation or [], resources or [],
                                       f"Firefox {driver.capabilities.get('browserVersion', '')}".strip(), title)

    def own_log_files(self, path) -> list[str]:
        """The parent's log and every content process's beside it."""
        import glob
        stem = str(path)[:-len(HTTP_LOG_SUFFIX)]
        return [str(path), *sorted(glob.glob(glob.escape(stem) + ".child-*" + HTTP_LOG_SUFFIX))]


# a line of Firefox's log with MOZ_LOG's timestamp option:
# "2026-11-26 11:15:49.060376 UTC - [Parent 26433: Socket Thread]: I/nsHttp text"
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) UTC - \[[^\]]*\]: \w/nsHttp (.*)$")
SESSION_INIT = re.compile(r"^Http3Session::Init origin=([^,]*),.*\[this=(\w+)\]")
SESSION_STREAM = re.compile(r"^Http3Session::AddStream (\w+) atrans=(\w+)\.")
FINISH_0RTT = re.compile(r"^nsHttpTransaction::Finish0RTT (\w+) aRestart=(\d)")


def http_log_evidence(path: str, boundary_unix: float) -> dict:
    """Each HTTP/3 session's 0-RTT in Firefox's HTTP log after the boundary, in Chromium's net-log
    words (pure but for reading the file). Measured in Firefox 153's log: Http3Session::Init opens a
    session ([this=S]); AddStream S atrans=T puts a transaction on it; a transaction sent as early
    data ends its 0-RTT with "Finish0RTT T aRestart=0" (accepted: the response also carries Firefox's
    own X-Firefox-Early-Data: accepted) or aRestart=1 (rejected, sent again). A session with a
    rejected transaction is AttemptedAndRejected, else one with an accepted one
    AttemptedAndSucceeded, else NotAttempted. A Finish0RTT counts for the session its transaction is
    on when it ends, read in order: Firefox gives a freed transaction's address to a later one, on
    any session (issue 44: read as a map, that moved the page's own 0-RTT to another origin's session
    in 3 of 20 repeats). TLS resumption is not in this log (the server's is)."""
    import datetime
    sessions: dict[str, dict] = {}   # S: {"origin", "restarts": [0|1]}
    of: dict[str, str] = {}          # T: the session it is on now (Firefox reuses a freed transaction's address)
    with open(path, errors="replace") as f:
        for line in f:
            m = LOG_LINE.match(line.rstrip("\n"))
            if not m:
                continue
            stamp, text = m.groups()
            if datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp() < boundary_unix:
                continue
            if (init := SESSION_INIT.match(text)):
                sessions[init[2]] = {"origin": init[1], "restarts": []}
            elif (add := SESSION_STREAM.match(text)) and add[1] in sessions:
                of[add[2]] = add[1]
            elif (fin := FINISH_0RTT.match(text)) and of.get(fin[1]) in sessions:
                sessions[of[fin[1]]]["restarts"].append(int(fin[2]))

    def state(restarts: list[int]) -> str:
        return ("AttemptedAndRejected" if 1 in restarts else "AttemptedAndSucceeded" if restarts else "NotAttempted")
    return {"quic_zero_rtt": [state(v["restarts"]) for v in sessions.values()],
            "http3_sessions": [{"origin": v["origin"], "zero_rtt": state(v["restarts"]),
                                "early_transactions": len(v["restarts"])} for v in sessions.values()],
            "http_log_bytes": os.path.getsize(path)}


FIREFOX = Firefox()
