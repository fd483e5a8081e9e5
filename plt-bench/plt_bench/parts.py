"""The parts of plt-bench that only some campaigns need, installed when one first needs them.

`scripts/setup` installs what the main job needs (Chromium, Caddy, linkem, the venv), so that the
first command on a new machine runs at once; each part below comes when a campaign (or a command)
first asks for it: the session says so and runs `scripts/setup PART` (as root, in a checkout).
Outside a checkout (plt-bench installed with pip), or not as root, a missing part is refused with
the command that installs it. `scripts/test` installs every part (`scripts/setup all`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from typing import Callable

from . import cmd
from .errors import EnvironmentProblem


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    what: str                        # what setup installs, in words
    present: Callable[[], bool]      # whether this machine has it
    lacks: Callable[[], str] | None = None  # what of it is missing, in words, where more can be said than `what`


def _firefox() -> bool:
    """Firefox and geckodriver, and the display its visual capture records (Xvfb, ffmpeg: browsers.display)."""
    from .browsers.firefox import FIREFOX
    return all(os.path.exists(p) for p in FIREFOX.binaries()) and all(cmd.which(x) for x in ("Xvfb", "ffmpeg"))


def _quinnserve() -> bool:
    from .servers import quinnserve
    return quinnserve.BINARY.is_file()


def _dnsmasq() -> bool:
    return bool(shutil.which("dnsmasq") or os.access("/usr/sbin/dnsmasq", os.X_OK))


def _pages() -> bool:
    return not _pages_missing()


def _pages_missing() -> str:
    from .pages import real
    return ", ".join(f"real:{p.name} ({d})" for p in real.PAGES for d in p.missing())


PARTS = {p.name: p for p in (
    Part("firefox", "Firefox ESR, geckodriver (built with cargo), Xvfb and ffmpeg (its visual capture)", _firefox),
    Part("quinnserve", "quinnserve, the second HTTP/3 server (built with cargo)", _quinnserve),
    Part("discovery", "dnsmasq, the testbed's name server", _dnsmasq),
    Part("pages", "the real test pages (Debian's and npm's packages)", _pages, _pages_missing),
    Part("capture", "tcpdump and tshark", lambda: bool(cmd.which("tcpdump"))),
    Part("record", "slirp4netns, a recording's way out to the web", lambda: bool(shutil.which("slirp4netns"))),
)}


def needed(spec) -> dict[str, str]:
    """{part: the option that needs it} for a campaign (campaign.Spec); pure but for the pages' kinds."""
    out = {}
    if "firefox" in spec.grid.browsers:
        out["firefox"] = "--browser firefox"
    if "quinn" in spec.grid.servers:
        out["quinnserve"] = "--http-server quinn"
    if spec.discovery != "forced":
        out["discovery"] = f"--discovery {spec.discovery}"
    if "pcap" in spec.capture:
        out["capture"] = "--capture pcap"
    return out


def ensure(wanted: dict[str, str], note: Callable[[str], None] = print) -> None:
    """Install the parts wanted ({part: why}) that this machine lacks, saying so; raise
    EnvironmentProblem naming the command where they cannot be installed from here."""
    missing = {n: why for n, why in wanted.items() if not PARTS[n].present()}
    if not missing:
        return
    setup = cmd.PROJECT_ROOT / "scripts" / "setup"
    argv = [str(setup), *missing]
    words = "; ".join(f"{PARTS[n].what} for {why}" for n, why in missing.items())
    if not (cmd.IN_CHECKOUT and setup.is_file()):
        raise EnvironmentProblem(f"not installed: {words}; install them (plt-bench doctor says how)")
    if os.geteuid() != 0:
        raise EnvironmentProblem(f"not installed: {words}; as root: {' '.join(argv)}")
    note(f"setup: installing {words} (first use on this machine): {' '.join(argv)}")
    res = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    still = [n for n in missing if not PARTS[n].present()]
    if res.returncode != 0 or still:
        said = res.stderr.strip()[-800:]
        lacking = "; ".join(f"still missing: {PARTS[n].lacks() if PARTS[n].lacks else PARTS[n].what}" for n in still)
        raise EnvironmentProblem(f"{' '.join(argv)} failed (exit {res.returncode})"
                                 + "".join(f": {x}" for x in (said, lacking) if x))
