"""Firefox (Debian's firefox-esr, driven by geckodriver built from its crate by scripts/setup),
forced to one protocol by its preferences.

Forcing (prefs of a fresh profile per trial):
- h3: network.http.http3.enable, and every origin mapped to its own h3 alternative from the first
  request (network.http.http3.alt-svc-mapping-for-testing with ...force-use-alt-svc-mapping-for-
  testing): no Alt-Svc to learn, no race with TCP. network.http.http3.disable_when_third_party_roots_found
  is false: without it Firefox silently turns HTTP/3 off whenever a certificate it was told to accept
  is not of its built-in roots;
- h2: HTTP/3 off; h1: HTTP/2 off as well.
Names: Firefox asks the system, and the client namespace's own hosts file answers (topology:
/etc/netns/pbN-client/hosts, every origin of the testbed on its own address; its resolv.conf names
no server that answers, so no lookup leaves the testbed); DNS over HTTPS is off (network.trr.mode
5). The testbed's own certificate is accepted by the session (acceptInsecureCerts): every name
resolves to the testbed alone, so no other certificate can be met. Speculative connections and
prefetching are off, as Chromium's network prediction is: a handshake made before the navigation
would leave the load time.

To come (issue 38): recordings (hosts that resolve per page), captures (key log, HAR, the
browser's own log), repeat visits and visual progress; a request for one of them is refused by
name (Browser.unsupported).
"""

from __future__ import annotations

import os
import shutil

from .. import cmd, protocols
from .base import WINDOW, Browser

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


def firefox_prefs(proto: str, origins: list[tuple[str, str]]) -> dict:
    """The preferences of one trial (pure; unit-tested): the origins forced to the protocol (their
    names resolve through the testbed's hosts file). ValueError for a protocol Firefox cannot be
    forced to per origin (as-recorded)."""
    protocol = protocols.get(proto)
    if protocol.per_origin:
        raise ValueError(f"firefox: --proto {proto} is not supported yet (one protocol for every origin)")
    quic = protocol.transport == "QUIC"
    prefs = {**QUIET_PREFS,
             "network.http.http3.enable": quic,
             "network.http.http3.disable_when_third_party_roots_found": False,
             "network.http.http2.enabled": protocol.name != "h1"}
    if quic:
        prefs["network.http.http3.alt-svc-mapping-for-testing"] = ",".join(f"{h};h3=:443" for h, _ in origins)
        prefs["network.http.http3.force-use-alt-svc-mapping-for-testing"] = True
    return prefs


def firefox_args(profile_dir: str) -> list[str]:
    """Firefox's command line (pure): headless, the fixed window, the trial's own fresh profile
    (its path in the command line marks the process as the trial's)."""
    return ["-headless", f"--width={WINDOW[0]}", f"--height={WINDOW[1]}", "-profile", profile_dir]


class Firefox(Browser):
    name, label = "firefox", "Firefox"
    features = frozenset({"origins", "keylog"})

    def launch(self, proto, origins, spki_b64, profile_dir, spoke=None, extra=()) -> dict:
        return {"browser": self.name, "prefs": firefox_prefs(proto, origins), "args": firefox_args(profile_dir)}

    def capture_env(self, kinds, folder, filenames) -> dict[str, str]:
        """The key log: NSS writes every TLS secret, QUIC's (neqo's handshake is NSS's) and TCP's,
        to SSLKEYLOGFILE, in the format tshark reads (pure)."""
        return {"SSLKEYLOGFILE": str(folder / filenames["keylog"])} if "keylog" in kinds else {}

    def untimed(self, nav: dict) -> list[str]:
        """Firefox 153 does not time an HTTP/1.1 document's response: its entry gives responseStart and
        responseEnd as its requestStart (measured: all three at connectEnd, 269 ms, for a 500 KB page
        whose body took 400 ms at 10 Mbit/s). Those are not the response's; TTFB and the response's
        end stay unmeasured (None), never that instant."""
        if nav.get("nextHopProtocol") == "http/1.1" and nav.get("requestStart") and \
                nav.get("responseStart") == nav.get("requestStart"):
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
        os.environ.setdefault("MOZ_CRASHREPORTER_DISABLE", "1")  # no crash reporter beside the trial
        profile = req["profile_dir"]
        os.makedirs(profile, mode=0o700, exist_ok=True)
        opts = Options()
        opts.binary_location = browser
        for a in req["args"]:
            opts.add_argument(a)
        for k, v in req.get("prefs", {}).items():
            opts.set_preference(k, v)
        opts.accept_insecure_certs = True
        opts.page_load_strategy = "normal"
        out["launch_attempts"] = 1
        # a capture's environment (capture_env) reaches Firefox through geckodriver, which it inherits
        service = Service(driver_path, service_args=["--profile-root", os.path.dirname(profile), "--log", "error"],
                          log_output=f"{profile}.geckodriver.log", env={**os.environ, **req.get("env", {})})
        try:
            return webdriver.Firefox(service=service, options=opts)
        except Exception:
            cleanup()
            raise


FIREFOX = Firefox()
