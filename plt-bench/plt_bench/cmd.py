"""Running argv lists (never a shell), optionally inside a network namespace."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Sequence

from .errors import EnvironmentProblem, PltBenchError

PACKAGE_DIR = Path(__file__).resolve().parent  # the presets and the Caddyfile template are package data


def _project_root() -> Path:
    """Where plt-bench keeps what it makes (generated pages in sites/, results/, .tools/): the checkout
    (plt-bench/plt_bench/cmd.py -> parents[2], where scripts/setup is) when run from one; for a
    package installed by pip, $PLT_BENCH_HOME, else $XDG_DATA_HOME/plt-bench (~/.local/share/plt-bench)."""
    checkout = PACKAGE_DIR.parents[1]
    if (checkout / "scripts" / "setup").is_file() and (checkout / "linkem").is_dir():
        return checkout
    if os.environ.get("PLT_BENCH_HOME"):
        return Path(os.environ["PLT_BENCH_HOME"])
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "plt-bench"


PROJECT_ROOT = _project_root()
IN_CHECKOUT = PROJECT_ROOT == PACKAGE_DIR.parents[1]
TOOLS_BIN = PROJECT_ROOT / ".tools" / "bin"


def linkem_binary() -> Path | None:
    """linkem: the one setup built (.tools/bin), else one on PATH (cargo install), else None."""
    built = TOOLS_BIN / "linkem"
    if built.is_file():
        return built
    found = shutil.which("linkem")
    return Path(found) if found else None


@dataclasses.dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandFailed(PltBenchError):
    def __init__(self, result: Result):
        self.result = result
        err = (result.stderr or result.stdout).strip().splitlines()
        tail = err[-1] if err else "no output"
        super().__init__(f"command failed (exit {result.returncode}): {' '.join(result.argv)}: {tail}")


OWN_FILES_SCRIPT = 'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 125; shift 2; done; shift; exec "$@"'


def with_own_files(binds: Sequence[tuple[str, str]], argv: Sequence[str]) -> list[str]:
    """argv in a mount namespace of its own in which each (ours, theirs) file of ours is bind-mounted
    over the machine's (pure), as `ip netns exec NS` does with /etc/netns/NS: the machine's files are
    left as they are, and the mounts end with the last process that sees them. A mount that fails
    exits 125 before argv starts."""
    flat = [x for ours, theirs in binds for x in (str(ours), str(theirs))]
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", OWN_FILES_SCRIPT, "sh",
            *flat, "--", *argv]


def in_netns(ns: str | None, argv: Sequence[str]) -> list[str]:
    """Prefix argv with 'ip netns exec NS' (no prefix when ns is None: the current namespace)."""
    return list(argv) if ns is None else ["ip", "netns", "exec", ns, *argv]


def run_each(commands: Iterable[tuple[str | None, Sequence[str]]]) -> None:
    """Run (namespace, argv) pairs in order (the pure builders' form: Plan.create_commands and the like)."""
    for ns, argv in commands:
        run(argv, ns=ns)


def run(argv: Sequence[str], *, ns: str | None = None, check: bool = True, timeout: float = 60.0,
        input: str | None = None, env: dict | None = None) -> Result:
    full = in_netns(ns, argv)
    try:
        # a session of its own: Ctrl-C at the terminal reaches plt-bench alone, which cleans up; a
        # `tc` or `ip netns del` of that cleanup is never killed half-way by the same keypress
        p = subprocess.run(full, capture_output=True, text=True, timeout=timeout, input=input,
                           env=env, check=False, start_new_session=True)
    except FileNotFoundError:
        raise EnvironmentProblem(f"'{full[0]}' is not installed; run scripts/setup") from None
    except subprocess.TimeoutExpired:
        raise PltBenchError(f"command timed out after {timeout:.0f}s: {' '.join(full)}") from None
    res = Result(tuple(full), p.returncode, p.stdout, p.stderr)
    if check and p.returncode != 0:
        raise CommandFailed(res)
    return res


def run_all(commands: Sequence[Sequence[str]], **kw) -> None:
    for argv in commands:
        run(argv, **kw)


def stop_process(proc: subprocess.Popen | None, grace_s: float = 5.0) -> None:
    """SIGTERM a child, SIGKILL it if it is still there after grace_s, and reap it."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace_s)


def require_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("plt-bench needs root (namespaces, tc, iptables): run it with sudo")


def which(name: str) -> str | None:
    return shutil.which(name)
