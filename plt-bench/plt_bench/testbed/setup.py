"""A testbed's settings, one record: what every part it composes is set up with.

Each part checks its own value once, here, before anything is made (the browsers' names, the
servers', the discovery mode, the sandbox, the browsers' start); the testbed hands each part its
own. A campaign's testbed is built from its spec by one function (Setup.of_spec), the same for one
machine and for two, so that a setting cannot be threaded to one and forgotten for the other.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .. import browsers, dns, servers
from ..browsers import sandbox
from ..capture import Settings


@dataclasses.dataclass(frozen=True)
class Setup:
    """sites_dir: the pages folder (generated pages, page sets and recordings). conditions: every one
    the testbed will be set to (the link is chosen for them all); traces: the traces they follow
    (traces.Trace, as read), handed to the link. browser_names: the browsers that load the pages (a
    load names its own, the first by default); server_names: the servers that serve them, one at a
    time (use_server), the first from the start. discovery: how browsers find the origins and h3
    (dns.MODES: other than forced, the testbed runs a name server of its own). browser_sandbox: on,
    the browsers run as the unprivileged user with their sandbox (browsers.sandbox), or off.
    browser_start: kept, a browser kept across trials with a fresh context each where it can, or
    fresh. replays: recordings replayed as recorded (pages.recording). folders: folders served as they
    are, (host, folder, protocol) each: every protocol ('') or the one given alone. record_bodies:
    HARs keep every body (a recording: plt_bench.recorder)."""

    sites_dir: Path
    cc: str = "cubic"
    link: str = "auto"
    index: int | None = None
    persistent: bool = False
    with_browser: bool = True
    conditions: tuple = ()
    traces: tuple = ()
    capture: Settings = dataclasses.field(default_factory=Settings)
    browser_binary: str | None = None  # None: Debian's Chromium (browsers.drivers)
    browser_names: tuple[str, ...] = (browsers.DEFAULT,)
    browser_sandbox: str = sandbox.DEFAULT
    browser_start: str = browsers.START_DEFAULT
    server_names: tuple[str, ...] = (servers.DEFAULT,)
    discovery: str = "forced"
    replays: tuple[str, ...] = ()
    folders: tuple = ()
    record_bodies: bool = False

    def __post_init__(self):
        fix = {"sites_dir": Path(self.sites_dir), "conditions": tuple(self.conditions), "traces": tuple(self.traces),
               "capture": self.capture or Settings(),
               "browser_names": tuple(browsers.get(b).name for b in self.browser_names),
               "server_names": tuple(dict.fromkeys(servers.get(n).name for n in self.server_names)),
               "discovery": dns.parse(self.discovery, "discovery"),
               "browser_sandbox": sandbox.parse(self.browser_sandbox),
               "browser_start": browsers.parse_start(self.browser_start),
               "replays": tuple(dict.fromkeys(self.replays)),
               "folders": tuple((x[0], x[1], x[2] if len(x) > 2 else "") for x in self.folders)}
        for name, value in fix.items():
            object.__setattr__(self, name, value)

    @property
    def think(self) -> bool:
        """Some of its conditions ask think time (--think): its servers then have a think stage."""
        return any(c.think is not None for c in self.conditions)

    @property
    def browser_name(self) -> str:
        """The browser of a load that names none."""
        return self.browser_names[0]

    @classmethod
    def of_spec(cls, spec, sites: Path, index: int | None = None, capture: Settings | None = None,
                browser_names: tuple[str, ...] | None = None) -> "Setup":
        """A campaign's testbed (campaign.Spec): its link, congestion control, conditions and traces, its
        browsers (browser_names: those and any the campaign needs besides, a device's calibration's
        Chromium) and how they run, its servers, its discovery, the recordings it replays and the
        folders it serves."""
        return cls(sites, cc=spec.cc, link=spec.link, index=index, conditions=spec.grid.conditions,
                   traces=spec.traces, capture=capture or Settings(), browser_binary=spec.browser_binary,
                   browser_names=browser_names or spec.grid.browsers, browser_sandbox=spec.browser_sandbox,
                   browser_start=spec.browser_start, server_names=spec.grid.servers, discovery=spec.discovery,
                   replays=tuple(r for p in spec.grid.pages if (r := p.page_kind.recording_name(p))),
                   folders=tuple((h, Path(d)) for h, d in spec.folders))
