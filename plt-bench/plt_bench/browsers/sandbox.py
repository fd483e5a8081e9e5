"""The browsers run as an unprivileged user with their own sandbox on (--browser-sandbox on, the
default): a page is untrusted content (a recorded third party's scripts), and a browser run as root
without its sandbox gives whatever breaks out of the renderer the machine.

How: the browser worker (root, in the client namespace) starts the WebDriver (chromedriver,
geckodriver) as USER (its uid and gid, no supplementary groups, no capabilities, umask 077: the
Popen's own user and group), with its home, temporary and configuration folders USER's in the
testbed's run folder; the browser it starts is USER's too. Chromium's sandbox is its own (user
namespaces, seccomp: no --no-sandbox); Firefox's content processes are sandboxed as for any user.
The browser writes only where USER may: its profile (the run folder's profiles/, USER's), its home,
and a staging folder for a trial's captures (net-log, key log), which the testbed moves into the
results afterwards (a results folder under /root is not USER's to reach). The worker, root, still
reads every process's CPU, speaks to the WebDriver, and ends every process of the trial. A local
user who reaches a WebDriver's port (an unauthenticated HTTP API that starts any binary) gets
USER's rights, not root's.

--browser-sandbox off: as before 2026-11-27, the WebDriver and browser as root, Chromium with
--no-sandbox; key metadata, so the two are never pooled (a campaign from before it ran without)."""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

from ..errors import EnvironmentProblem

USER = "plt-browser"  # a system user of its own (scripts/setup makes it): no login, no home of its own
MODES = ("on", "off")
DEFAULT = "on"


def parse(text: str | None, option: str = "--browser-sandbox") -> str:
    from .base import parse_mode
    return parse_mode(text, MODES, DEFAULT, option, f"on: the browser as the unprivileged user {USER}, its sandbox on; "
                      "off: as root without its sandbox")


def user_ids() -> tuple[int, int]:
    """USER's uid and gid; EnvironmentProblem naming the fix when there is no such user."""
    try:
        p = pwd.getpwnam(USER)
    except KeyError:
        raise EnvironmentProblem(f"the browsers' unprivileged user {USER} does not exist: run scripts/setup (it makes "
                                 f"it: useradd --system {USER}), or measure with --browser-sandbox off") from None
    return p.pw_uid, p.pw_gid


def give(ids: tuple[int, int], *paths: Path, mode: int = 0o700) -> None:
    """Make each folder (and its parents up to the first that exists) and hand it to USER."""
    for p in paths:
        p.mkdir(parents=True, exist_ok=True, mode=mode)
        os.chown(p, *ids)
        os.chmod(p, mode)


def home_folders(home: Path) -> list[Path]:
    """USER's home and the folders the wrapper points the browser at (pure)."""
    return [home, home / "tmp", home / "config", home / "cache"]


def worker_env(home: Path) -> dict[str, str]:
    """What the worker (and so its WebDriver and the wrapper) is told (pure)."""
    return {"PLT_BENCH_SANDBOX_USER": USER, "PLT_BENCH_SANDBOX_HOME": str(home)}


def driver_launch(req: dict) -> tuple[dict, dict[str, str]]:
    """The worker's side (pure but for a look-up of USER): (popen_kw, environment) for the WebDriver's
    process of a sandboxed load (req's "sandbox"): USER's uid and gid, no supplementary groups, umask
    077, and USER's folders (worker_env told the worker where); ({}, {}) for an unsandboxed one."""
    if not req.get("sandbox"):
        return {}, {}
    p = pwd.getpwnam(os.environ.get("PLT_BENCH_SANDBOX_USER", USER))
    home = os.environ["PLT_BENCH_SANDBOX_HOME"]
    return ({"user": p.pw_uid, "group": p.pw_gid, "extra_groups": [], "umask": 0o077},
            {"HOME": home, "TMPDIR": f"{home}/tmp", "XDG_CONFIG_HOME": f"{home}/config", "XDG_CACHE_HOME": f"{home}/cache"})


def move_staged(stage: Path, dest: Path) -> list[str]:
    """A trial's capture files the browser wrote into its staging folder, moved to the trial's capture
    folder (root's again); returns their names."""
    moved = []
    if not stage.is_dir():
        return moved
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(stage.iterdir()):
        target = dest / f.name
        shutil.move(str(f), str(target))
        try:
            os.chown(target, 0, 0)
        except OSError:
            pass
        moved.append(f.name)
    shutil.rmtree(stage, ignore_errors=True)
    return moved


def ready_worker(ids: tuple[int, int], run_dir: Path) -> dict[str, str]:
    """The run folder readied for a worker whose browsers run as USER: its home and the profiles USER's,
    the run folder passable; returns the worker's environment (worker_env)."""
    home = run_dir / "browser"
    give(ids, *home_folders(home), run_dir / "profiles")
    run_dir.chmod(0o711)
    return worker_env(home)


def staging(ids: tuple[int, int], run_dir: Path, tag: str) -> Path:
    """Where USER's browser writes a trial's capture files (made here), moved into the results after
    the load (move_staged): a results folder under /root is not USER's to reach."""
    stage = run_dir / "browser" / "captures" / tag
    if not stage.is_dir():
        give(ids, stage.parent, stage)
    return stage
