"""One load's request to the browser worker, built by the browser seam from one visit record.

A Visit holds everything one load asks of its browser: the page and the protocol, the addresses the
browser resolves, the certificate it trusts, the captures it writes, the visitor's screen and CPU
budget, whether a kept browser may serve it. The testbed fills one from its parts (its servers, its
link's conditions, the visitor: testbed.Testbed.visit); `request` turns it into the worker's request
(browsers.worker), and nothing else builds one. Pure: no file is written here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from .. import protocols
from ..capture import FILENAMES
from ..errors import UsageError
from .base import WINDOW_ARGS, Browser, asked, kept_refusals
from .worker import paint_quiet_ms

if TYPE_CHECKING:  # the page seam's record and the visitor's screen, by their types alone
    from ..device.profiles import Screen
    from ..pages import Page


@dataclasses.dataclass(frozen=True)
class Visit:
    """One load as its browser sees it."""

    proto: str                # h3 | h2 | h1 | as-recorded (protocols)
    page: "Page"
    browser: Browser
    url: str                  # what the browser navigates to (tagged with the trial where the page's kind says)
    profile: Path             # the browser's fresh profile folder
    origins: tuple            # (host, address): what the browser resolves and forces its protocol on
    spki: str                 # the pin of the certificate it trusts
    spoke: dict               # host -> the one protocol it speaks (a recording's as recorded, a served folder's)
    discovery: str = "forced"  # how it finds the origins and h3 (dns.MODES)
    captures: tuple[str, ...] = ()  # the trial's capture kinds (capture.KINDS); () without a capture folder
    capture_dir: Path | None = None  # where the trial's capture files end up
    writes: Path | None = None  # where the browser writes them (capture_dir, or under the sandbox a staging folder)
    cpu_interval_s: float = 0.1
    rtt_ms: float = 0.0       # the link's, now: a repeat visit's settle time and the paint's quiet time scale with it
    sandboxed: bool = False   # the browser runs as the unprivileged user with its sandbox (browsers.sandbox)
    screen: "Screen | None" = None  # the visitor's device's screen, emulated (None: the fixed window)
    budget: dict = dataclasses.field(default_factory=dict)  # the worker's fields for the CPU budget (device.visitor)
    keep: bool = False        # a browser kept across trials may serve it with a fresh context (browser_start kept)
    har_bodies: bool = False  # the HAR keeps every body (a recording: plt_bench.recorder)
    benchmark: bool = False   # the device calibration's benchmark runs in the page after its figures
    # every name at this address, for a browser that resolves by a hosts file where the client's own is
    # the user's and never touched (two machines: the server machine's); None: its hosts file answers
    one_address: str | None = None

    @property
    def repeat(self) -> bool:
        return self.page.visit != "first"

    @property
    def browser_origins(self) -> tuple:
        """The origins this browser maps: a generated page's own where it cannot take more (Chromium
        maps every origin; a browser without the origins feature, the page's own alone)."""
        own = self.page.page_kind.own_origins(self.page)
        return self.origins if "origins" in self.browser.features or own is None else self.origins[:own]

    def refusals(self) -> list[str]:
        """What the load asks that its browser cannot do yet (browsers.base.Browser.features)."""
        return self.browser.unsupported(asked(self.repeat, len({ip for _, ip in self.browser_origins}) > 1,
                                              protocols.get(self.proto).per_origin, self.captures,
                                              recordings=self.page.page_kind.served_as_recorded,
                                              discovery=self.discovery != "forced"))


def request(v: Visit) -> dict:
    """The worker's request for one load (its timeout, await_s and the rest of its timing filled in by
    the testbed's load). A repeat visit (pages.VISITS) loads the page first in the same browser, which
    keeps its own log (the capture's, if the trial captures one) for the repeat's evidence of
    resumption and 0-RTT. What the browser cannot do yet is refused by name (UsageError)."""
    b = v.browser
    refused = v.refusals()
    if refused:
        raise UsageError(f"--browser {b.name}: not supported yet with {', '.join(refused)} "
                         f"(supported with {b.name}: {', '.join(sorted(b.features)) or 'one-origin loads only'})")
    captured = v.capture_dir is not None and "netlog" in v.captures  # the browser's own log, kept
    netlog = v.writes / b.netlog_file if captured else Path(f"{v.profile}.visit-{b.netlog_file}")
    visiting = b.repeat_launch(str(netlog), captured) if v.repeat else {}
    launch = b.launch(v.proto, list(v.browser_origins), v.spki, str(v.profile), spoke=v.spoke,
                      extra=tuple(visiting.get("args", ())), discovery=v.discovery)
    args = launch["args"] + (b.capture_args(v.captures, v.writes, FILENAMES) if v.capture_dir else [])
    env = {**visiting.get("env", {}), **(b.capture_env(v.captures, v.writes, FILENAMES) if v.capture_dir else {})}
    if v.sandboxed:
        args = b.sandboxed(args)
    if v.one_address and b.resolves_by_hosts_file:
        launch["prefs"] = {**launch.get("prefs", {}), **b.one_address(v.one_address)}
    req = {"url": v.url, "profile_dir": str(v.profile), **launch, "args": args, **({"env": env} if env else {}),
           "cpu_interval_s": v.cpu_interval_s, "cpu_series": "cpu" in v.captures, "visual": "visual" in v.captures,
           "paint_quiet_ms": paint_quiet_ms(v.rtt_ms, v.page.page_kind.draws_after_load),
           **({"sandbox": True} if v.sandboxed else {}), **v.budget}
    if v.screen is not None:  # a device's screen (device.profiles), in place of the fixed window
        emu = b.emulation(v.screen)
        req["args"] = [a for a in args if not a.startswith(WINDOW_ARGS)] + emu["args"]
        req["prefs"] = {**req.get("prefs", {}), **emu["prefs"]}
        if emu.get("mobile_emulation"):
            req["mobile_emulation"] = emu["mobile_emulation"]
    if any(a.startswith(("--log-net-log", "--ssl-key-log-file")) for a in args) or env:
        req["graceful_quit"] = True  # the browser completes these files as it closes
    if v.keep and b.keeps_contexts and not req.get("graceful_quit") and not kept_refusals(
            v.repeat, v.captures, screen=v.screen is not None, benchmark=v.benchmark):
        req["keep"] = True  # a kept browser's fresh context (browsers.worker); else a fresh browser
    if v.capture_dir is not None and "har" in v.captures:
        req["har_path"] = str(v.capture_dir / FILENAMES["har"])
        req["har_bodies"] = v.har_bodies
    if v.capture_dir is not None and "visual" in v.captures:
        req["frames_path"] = str(v.capture_dir / FILENAMES["visual"])
    if v.repeat:
        req["visit"] = {"cache": "kept" if v.page.visit == "repeat-warm" else "cleared",
                        "settle_s": 0.5 + 3 * v.rtt_ms / 1000.0, "netlog": str(netlog), "keep_netlog": captured}
    return req
