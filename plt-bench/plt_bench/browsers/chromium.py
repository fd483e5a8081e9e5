"""Chromium (Debian's chromium and chromedriver, or a binary the user names: drivers.py), forced to
one protocol by its command line.

Forcing: h3 with --origin-to-force-quic-on for every origin (no Alt-Svc, no race with TCP); h2
with QUIC off; h1 with QUIC and HTTP/2 off (forcing_flags). Names resolve
through --host-resolver-rules to the testbed's addresses and nowhere else; the testbed's own
certificate is trusted by its SPKI hash alone.

Discovery (dns.py: alt-svc, https-rr): h3 is not forced; the origins' names are left to Chromium's
own resolver (the testbed's name server, over the link) and every other name fails inside it.
Chromium refuses QUIC to an origin whose certificate does not chain to a root built into it
(ProofVerifierChromium: ERR_QUIC_CERT_ROOT_NOT_KNOWN, seen here as "TLS handshake failure ...
certificate unknown" and the alternative service marked broken), unless the host is one it was told
to force QUIC on: its allow-list is made of those origins' hosts, whatever their port. So each
origin is forced on port 9 (discard), which no page uses: the host's certificate is then accepted
for QUIC on 443, where nothing is forced (measured 2026-11-26, Chromium 156: without it, h2 on every
load; with it, the second connection raced QUIC against TCP and went h3, and with an HTTPS record
the first did). A repeat visit closes its connections through
chrome.benchmarking (--enable-net-benchmarking) and reads 0-RTT from the net-log.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import protocols
from .base import WINDOW, Browser
from .sandbox import driver_launch

# Profile preferences of every trial:
# - network prediction off (2 = never): otherwise Chromium preconnects TCP+TLS before the
#   navigation and the handshake vanishes from the page-load time;
# - start on about:blank (restore_on_startup 4 = open startup_urls): otherwise the first tab is
#   the new-tab page of Debian's default search engine, an outside host, and chromedriver waits
#   ~13 s for it to fail before it navigates.
PREFS = {
    "net": {"network_prediction_options": 2},
    "session": {"restore_on_startup": 4, "startup_urls": ["about:blank"]},
}

# What takes the other versions away from a TCP protocol (h2: QUIC, whose Alt-Svc from Caddy would
# move the page to h3; h1: QUIC and HTTP/2); h3 is forced on its origins instead (forcing_flags)
TCP_OFF = {"h2": ("--disable-quic",), "h1": ("--disable-quic", "--disable-http2")}


def forcing_flags(proto: str, origins: list[str]) -> list[str]:
    """The flags that force a protocol on every origin ("host:443") (pure)."""
    if protocols.get(proto).transport == "QUIC":
        return ["--enable-quic", f"--origin-to-force-quic-on={','.join(origins)}"]
    return list(TCP_OFF[protocols.get(proto).name])


# The port of discovery's known-root exemption (the module's words): discard, which no page uses
UNKNOWN_ROOT_PORT = 9


def discovery_args(proto: str, origins: list[tuple[str, str]]) -> list[str]:
    """The flags of a discovery trial beside the profile and the certificate (pure): the origins'
    names to Chromium's own resolver and every other name nowhere; h3 found, not forced (each origin's
    host exempted from the known-root rule on UNKNOWN_ROOT_PORT); h2 and h1 as forced as ever."""
    hosts = list(dict.fromkeys(h for h, _ in origins))
    rules = "MAP * ~NOTFOUND, " + ", ".join(f"EXCLUDE {h}" for h in hosts)
    p = protocols.get(proto)
    if p.transport == "QUIC":
        tail = ["--enable-quic", f"--origin-to-force-quic-on={','.join(f'{h}:{UNKNOWN_ROOT_PORT}' for h in hosts)}"]
    else:
        tail = forcing_flags(p.name, [])
    return [f"--host-resolver-rules={rules}", *tail]


def chromium_args(proto: str, origins: list[tuple[str, str]], spki_b64: str, profile_dir: str,
                  extra: tuple[str, ...] = (), spoke: dict[str, str] | None = None,
                  discovery: str = "forced") -> list[str]:
    """Command-line flags for one trial (pure; unit-tested). origins: (host, address) of every
    origin the testbed serves, the test host first; each resolves to its address and is forced to
    the protocol. extra: flags a kind of trial adds (a repeat visit's). As recorded (per_origin):
    spoke gives each host's own protocol; QUIC is forced on the h3 ones alone, and the others'
    servers offer theirs alone (ALPN: h2 or http/1.1), so neither QUIC nor HTTP/2 is turned off."""
    protocol = protocols.get(proto)  # ValueError for an unknown one
    if discovery != "forced":
        if protocol.per_origin:
            raise ValueError("chromium_args: a recording's own protocols are forced; discovery finds h3")
        return [*web_args(profile_dir), f"--ignore-certificate-errors-spki-list={spki_b64}", *extra,
                *discovery_args(proto, origins)]
    rules = ", ".join(f"MAP {h} {ip}" for h, ip in origins)
    args = [
        *web_args(profile_dir),
        # The test hosts resolve to the server's addresses; every other name fails inside Chromium,
        # so no lookup ever leaves the testbed.
        f"--host-resolver-rules={rules}, MAP * ~NOTFOUND",
        f"--ignore-certificate-errors-spki-list={spki_b64}",
        *extra,
    ]
    if protocol.per_origin:
        quic = [f"{h}:443" for h, _ in origins if (spoke or {}).get(h) in protocols.NAMES
                and protocols.get(spoke[h]).transport == "QUIC"]
        return args + (forcing_flags("h3", quic) if quic else ["--disable-quic"])
    return args + forcing_flags(protocol.name, [f"{h}:443" for h, _ in origins])


# The browser window's own omnibox popup, which Chromium 156 draws with WebUI: every new window (a
# fresh browser's first, and each kept browser's context, a window of its own) starts a renderer of
# its own for it (chrome://omnibox-popup.top-chrome/, its --top-chrome-webui process), which took
# 0.69-0.79 s of CPU in the 0.5-0.6 s after the window opened (measured per process, 2026-11-29),
# and the idle gate waited it out before every navigation. A headless browser never shows the popup;
# with these off, a new context's renderers took 0.05-0.06 s of CPU (the browser process 0.13-0.15 s,
# making it), and all were quiet within 0.1-0.2 s.
# (chromedriver merges the list with its own --disable-features.)
NO_BROWSER_UI = "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,WebUIOmniboxFullPopup"


def web_args(profile_dir: str) -> list[str]:
    """The flags of every load (pure): headless, a fresh profile, the fixed window, nothing of
    Chromium's own in the background (nor its window's own WebUI: NO_BROWSER_UI). Alone, they load a
    page from the web as a browser does (plt-bench record without --folder: its own resolver,
    certificates and protocols)."""
    return ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", "--disable-default-apps", "--mute-audio", NO_BROWSER_UI,
            f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--user-data-dir={profile_dir}"]


def chromium_emulation(screen) -> dict:
    """A device's screen in Chromium (pure): ChromeDriver's mobileEmulation (the viewport in CSS
    pixels, the pixel ratio, a mobile layout and touch, the user agent, with its client hints), the
    window at the viewport's size."""
    metrics = {"width": screen.width_px, "height": screen.height_px, "pixelRatio": screen.pixel_ratio,
               "mobile": screen.mobile, "touch": screen.touch}
    emu: dict = {"deviceMetrics": metrics}
    if screen.user_agent:
        emu["userAgent"] = screen.user_agent
    return {"args": [f"--window-size={screen.width_px},{screen.height_px}"], "prefs": {}, "mobile_emulation": emu}


def chromium_capture_args(kinds: tuple[str, ...], folder: Path, filenames: dict[str, str]) -> list[str]:
    """Chromium flags writing the key log and the net-log of one trial into its folder (pure)."""
    args = []
    if "keylog" in kinds:
        args.append(f"--ssl-key-log-file={folder / filenames['keylog']}")
    if "netlog" in kinds:
        args += [f"--log-net-log={folder / filenames['netlog']}", "--net-log-capture-mode=Default"]
    return args


HAR_BODIES_BUFFER = 400 * 10**6  # a recording keeps every body in the browser until the HAR is written


class Chromium(Browser):
    name, label = "chromium", "Chromium"
    features = frozenset({"har", "keylog", "netlog", "visual", "repeat", "per-origin", "origins", "recordings",
                          "discovery"})
    keeps_contexts = True

    def launch(self, proto, origins, spki_b64, profile_dir, spoke=None, extra=(), discovery="forced") -> dict:
        return {"browser": self.name, "prefs": PREFS,
                "args": chromium_args(proto, origins, spki_b64, profile_dir, tuple(extra), spoke=spoke,
                                      discovery=discovery)}

    def capture_args(self, kinds, folder, filenames) -> list[str]:
        return chromium_capture_args(kinds, folder, filenames)

    def emulation(self, screen) -> dict:
        return chromium_emulation(screen)

    def sandboxed(self, args: list[str]) -> list[str]:
        """Chromium's own sandbox (its user namespaces) on: web_args' --no-sandbox left out."""
        return [a for a in args if a != "--no-sandbox"]

    def repeat_launch(self, evidence, captured) -> dict:
        """chrome.benchmarking (closeConnections, clearCache) and, unless the capture writes one, a
        net-log of the trial for the repeat's evidence."""
        args = ["--enable-net-benchmarking"]
        if not captured:
            args += [f"--log-net-log={evidence}", "--net-log-capture-mode=Default"]
        return {"args": args}

    # -- the worker's side ------------------------------------------------------------------------
    @staticmethod
    def binaries() -> tuple[str, str]:
        """The browser and driver the worker starts: as the testbed chose them (drivers.ChromiumBuild,
        through PLT_BENCH_BROWSER and PLT_BENCH_DRIVER), else Debian's."""
        from .drivers import CHROMEDRIVER, CHROMIUM
        return os.environ.get("PLT_BENCH_BROWSER", CHROMIUM), os.environ.get("PLT_BENCH_DRIVER", CHROMEDRIVER)

    def versions(self) -> dict:
        from .drivers import first_line
        browser, driver = self.binaries()
        return {"chromium": first_line([browser, "--version"]), "chromedriver": first_line([driver, "--version"])}

    def options(self, req: dict):
        from selenium.webdriver.chrome.options import Options
        opts = Options()
        opts.binary_location = self.binaries()[0]
        for a in req["args"]:
            opts.add_argument(a)
        opts.add_experimental_option("prefs", req.get("prefs", {}))
        if req.get("mobile_emulation"):  # a device's screen (chromium_emulation)
            opts.add_experimental_option("mobileEmulation", req["mobile_emulation"])
        opts.page_load_strategy = "normal"
        if req.get("har_path"):  # the DevTools Network events, for the trial's HAR
            from ..har import PERF_LOG_CAPABILITY
            for k, v in PERF_LOG_CAPABILITY.items():
                opts.set_capability(k, v)
        return opts

    def start(self, req: dict, out: dict, cleanup):
        """chromedriver and Chromium, started; a second attempt where the session was not created.
        Under a starved machine (a TCG guest beside a busy host) Chromium once missed chromedriver's
        start-up window on a trial's first attempt. Nothing has been sent over the link yet, so a
        second start measures the same; the attempts are in the answer (launch_attempts) and launch_s
        covers both. The driver's log path (next to the profile, in the testbed's run folder) marks
        chromedriver as ours, so `plt-bench clean` finds it even outside a namespace of ours."""
        from selenium import webdriver
        from selenium.common.exceptions import SessionNotCreatedException
        from selenium.webdriver.chrome.service import Service
        driver_path = self.binaries()[1]
        from ..device.cgroup import joining
        Service = joining(Service, req.get("cgroup_procs"))  # noqa: N806 - under a CPU budget, the driver in its group
        popen_kw, env = driver_launch(req)  # under the sandbox, chromedriver and Chromium are its user's
        for attempt in (1, 2):
            out["launch_attempts"] = attempt
            service = Service(driver_path, service_args=["--log-level=SEVERE",
                                                         f"--log-path={req['profile_dir']}.chromedriver.log"],
                              env={**os.environ, **env}, popen_kw=dict(popen_kw))
            try:
                return webdriver.Chrome(service=service, options=self.options(req))
            except SessionNotCreatedException:
                if attempt == 2:
                    raise
                cleanup()  # the failed attempt's processes and profile, gone


    def new_context(self, driver) -> "KeptContext":
        """A browser context of its own (DevTools' Target.createBrowserContext: an off-the-record profile
        of its own, with its own network context: HTTP cache, cookies, socket pools, QUIC and TLS session
        caches, alternative services), a window in it on about:blank, and the driver on that window.
        Target's browser-wide commands are refused on a page's session (chromedriver's), so they go
        over the browser's own DevTools socket. Measured 2026-11-29 with NO_BROWSER_UI: 0.12-0.15 s."""
        dev = DevTools.browser(driver)
        try:
            ctx = dev.call("Target.createBrowserContext", disposeOnDetach=False)["browserContextId"]
            target = dev.call("Target.createTarget", url="about:blank", browserContextId=ctx)["targetId"]
            _switch_when_known(driver, target)  # chromedriver's window handles are the targets' ids
        except Exception:
            dev.close()
            raise
        return KeptContext(dev, ctx, target)

    def end_context(self, driver, context: "KeptContext") -> None:
        try:
            home = [h for h in driver.window_handles if h != context.target]
            context.devtools.call("Target.disposeBrowserContext", browserContextId=context.context_id)
            if home:
                driver.switch_to.window(home[0])
        finally:
            context.devtools.close()

    def har_prepare(self, driver, bodies) -> None:
        """The Network events come in chromedriver's performance log (PERF_LOG_CAPABILITY, asked at the
        launch); a recording's bodies are kept in the browser, whole, until the HAR is written."""
        if bodies:
            driver.execute_cdp_cmd("Network.enable", {"maxTotalBufferSize": HAR_BODIES_BUFFER,
                                                      "maxResourceBufferSize": HAR_BODIES_BUFFER})

    def frames(self, driver, req):
        """Its screencast (Screencast): a frame at each paint, stamped with the paint's swap time."""
        return Screencast(driver)

    def har_log(self, driver, nav, title, bodies) -> dict:
        """From chromedriver's performance log; bodies read by DevTools' Network.getResponseBody."""
        from selenium.common.exceptions import WebDriverException
        from .. import har
        events = har.events_of(driver.get_log("performance"))
        got: dict = {}
        if bodies:
            for rid in har.finished_requests(events):
                try:
                    b = driver.execute_cdp_cmd("Network.getResponseBody", {"requestId": rid})
                    got[rid] = (b.get("body", ""), bool(b.get("base64Encoded")))
                except WebDriverException:
                    pass  # no body (a redirect, a 204) or one the browser did not keep: the entry says its size
        return har.build(events, f"Chromium {driver.capabilities.get('browserVersion', '')}".strip(), nav, title,
                         bodies=got)

    def end_first_visit(self, driver, clear_cache) -> None:
        driver.execute_script("chrome.benchmarking.closeConnections();"
                              + ("chrome.benchmarking.clearCache();" if clear_cache else ""))

    def visit_evidence(self, path, boundary_unix) -> dict:
        """From the net-log, after the boundary: each QUIC session's 0-RTT state
        (QUIC_SESSION_ZERO_RTT_STATE) and each TLS-over-TCP handshake's resumption (SSL_CONNECT's
        is_resumed)."""
        ev: dict = {"quic_zero_rtt": [], "tcp_tls_resumed": [], "netlog_bytes": os.path.getsize(path)}
        log = read_netlog(path)
        try:
            types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
            offset_ms = int(log["constants"]["timeTickOffset"])
            for e in log["events"]:
                if int(e["time"]) + offset_ms < boundary_unix * 1000:
                    continue
                kind, params = types.get(e["type"]), e.get("params") or {}
                if kind == "QUIC_SESSION_ZERO_RTT_STATE":
                    ev["quic_zero_rtt"].append(params.get("state"))
                elif kind == "SSL_CONNECT" and e.get("phase") == 2 and "is_resumed" in params:
                    ev["tcp_tls_resumed"].append(bool(params["is_resumed"]))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a net-log: {type(e).__name__}: {e}") from None
        return ev


    def quic_ecn(self, path: str):
        """From the net-log: each QUIC session's ECN counts (ECT0, ECT1, CE) as its ACK frames sent
        carried them (QUIC_SESSION_ACK_FRAME_SENT; the counts only grow within a packet number space,
        so a session's largest is its data's)."""
        return netlog_quic_ecn(read_netlog(path))


def read_netlog(path: str) -> dict:
    """Chromium's net-log (JSON); one cut short (a browser killed) is closed as its viewer does."""
    import json
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(text.rstrip().rstrip(",") + "]}")


CHROMIUM = Chromium()


def _switch_when_known(driver, target: str, wait_s: float = 5.0) -> None:
    """The driver on a window DevTools just made: chromedriver learns of a new target on its own time,
    and until then refuses to switch to it (no such window); asked again every 20 ms, wait_s at most."""
    import time

    from selenium.common.exceptions import NoSuchWindowException
    deadline = time.monotonic() + wait_s
    while True:
        try:
            driver.switch_to.window(target)
            return
        except NoSuchWindowException:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


class DevTools:
    """A DevTools socket of the browser's own (not a page's), for the browser-wide commands."""

    def __init__(self, ws):
        self.ws, self._id = ws, 0

    @classmethod
    def browser(cls, driver, timeout_s: float = 10.0) -> "DevTools":
        import http.client
        import json

        import websocket
        address = driver.capabilities["goog:chromeOptions"]["debuggerAddress"]  # the namespace's loopback
        host, _, port = address.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
        try:
            conn.request("GET", "/json/version")
            url = json.loads(conn.getresponse().read())["webSocketDebuggerUrl"]
        finally:
            conn.close()
        return cls(websocket.create_connection(url, timeout=timeout_s, suppress_origin=True))

    def call(self, method: str, **params) -> dict:
        """One command's result; RuntimeError with DevTools' own error."""
        import json
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:  # events of the browser's own session come between (none are asked for)
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error'].get('message')}")
                return msg.get("result") or {}

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - the browser went first
            pass


class Screencast:
    """The page's frames while it loads (Chromium.frames): Page.startScreencast over the page's own
    DevTools socket, beside chromedriver's; each frame kept with its swap time and acknowledged at once
    (Chromium sends the next only then). Started before the navigation, ended once the paints are read."""

    def __init__(self, driver):
        import json
        import threading
        self.frames: list[tuple[float, bytes]] = []
        self.error: str | None = None
        self.ws = None
        try:
            import http.client

            import websocket
            address = driver.capabilities["goog:chromeOptions"]["debuggerAddress"]  # the namespace's loopback
            host, _, port = address.rpartition(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=5)  # DevTools' list of its targets
            try:
                conn.request("GET", "/json/list")
                targets = json.loads(conn.getresponse().read())
            finally:
                conn.close()
            page = next(t for t in targets if t.get("type") == "page")
            self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=5, suppress_origin=True)
            self._send(1, "Page.enable")
            self._send(2, "Page.startScreencast", {"format": "jpeg", "quality": 80, "everyNthFrame": 1})
        except Exception as e:  # noqa: BLE001 - the trial goes on without its visual figures, saying why
            self.error = f"screencast: {type(e).__name__}: {e}"[:300]
            self.close()
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _send(self, ident: int, method: str, params: dict | None = None) -> None:
        import json
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params or {}}))

    def _read(self) -> None:
        import base64
        import json
        import time
        ident = 10
        while self.ws is not None:
            try:
                msg = json.loads(self.ws.recv())
            except Exception:  # noqa: BLE001 - closed at the end (or the browser went)
                return
            if msg.get("method") == "Page.screencastFrame":
                p = msg["params"]
                self.frames.append((float(p["metadata"].get("timestamp") or time.time()), base64.b64decode(p["data"])))
                ident += 1
                try:
                    self._send(ident, "Page.screencastFrameAck", {"sessionId": p["sessionId"]})
                except Exception:  # noqa: BLE001
                    return

    def close(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001
                pass

    def finish(self, driver, loaded: bool, frames_path: str | None = None) -> dict:
        """The load's visual figures (visual.load_figures), or why there are none; with frames_path,
        the frames where the page changed written there."""
        import time

        from .. import visual
        if self.error:
            return {"error": self.error}
        time.sleep(visual.TAIL_S)  # a frame the last paint made is on its way
        frames = list(self.frames)
        self.close()
        return visual.load_figures(driver, loaded, frames, visual.histogram, frames_path)


class KeptContext:
    """One trial's context in a kept browser (Chromium.new_context)."""

    def __init__(self, devtools: DevTools, context_id: str, target: str):
        self.devtools, self.context_id, self.target = devtools, context_id, target


def netlog_quic_ecn(log: dict):
    """Pure: QuicSide from a parsed net-log; ValueError where it is not one."""
    from ..quic_ecn import QuicSide
    try:
        types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
        sessions: dict[int, dict[str, int]] = {}
        for e in log["events"]:
            kind = types.get(e["type"])
            if kind == "QUIC_SESSION":
                sessions.setdefault(e["source"]["id"], {"ECT0": 0, "CE": 0})
            elif kind == "QUIC_SESSION_ACK_FRAME_SENT":
                got = sessions.setdefault(e["source"]["id"], {"ECT0": 0, "CE": 0})
                params = e.get("params") or {}
                for k in got:
                    got[k] = max(got[k], int(params.get(k, 0)))
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"not a net-log: {type(err).__name__}: {err}") from None
    return QuicSide(source="netlog", connections=len(sessions), ect0=sum(s["ECT0"] for s in sessions.values()),
                    ce=sum(s["CE"] for s in sessions.values()))
