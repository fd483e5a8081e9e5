"""Finding and ending processes by more than their parent: /proc's parent links, a marker in the
command line, the network namespace, and the start time that tells a recycled PID from ours.

A trial's Chromium outlives a killed chromedriver (it is reparented), and a cleanup must never
kill a stranger's process that merely mentions one of our paths; both need these facts.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Iterable

from . import cmd

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper(on: bool = True) -> None:
    """Orphaned descendants are reparented to this process (not PID 1), so it can still find them
    (on=False: no longer)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if gone."""
    f = _stat_fields(pid)
    return f[19] if f else None


def same_process(pid: int, start: str | None) -> bool:
    """pid still names the process that had this start time (not a recycled PID)."""
    return start is not None and start_time(pid) == str(start)


def all_pids() -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]


def table() -> dict[int, tuple[int, str, str]]:
    """Every process as {pid: (ppid, state letter, command line)}, in one walk of /proc."""
    out = {}
    for pid in all_pids():
        f, line = _stat_fields(pid), cmdline(pid)
        if f and line is not None:
            out[pid] = (int(f[1]), f[0], line)
    return out


def descendants(parents: dict[int, int], root: int) -> set[int]:
    """Every process below root in a {pid: ppid} map (pure; unit-tested)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out and c != root:
                out.add(c)
                todo.append(c)
    return out


def cmdline(pid: int) -> str | None:
    try:
        return (Path(f"/proc/{pid}") / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def netns_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def kill_and_reap(pids: Iterable[int], grace_s: float = 0.0, timeout_s: float = 10.0, reap: bool = False,
                  until_reaped: bool = False) -> list[int]:
    """SIGTERM (when grace_s > 0) then SIGKILL each process; return the ones still there after
    timeout_s (a process stuck in the kernel), which the caller must not ignore. A zombie counts as
    gone, unless until_reaped: then it is waited for until its parent (or init) reaps it, so that
    nothing of ours is listed when the caller returns (teardown). reap: also wait for every exited child of this process (a subreaper's duty; a process that
    keeps Popen objects of its own must not, or they lose their exit codes)."""
    pids = set(pids)
    starts = {p: start_time(p) for p in pids}
    pids = {p for p in pids if starts[p] is not None}
    for sig in ((signal.SIGTERM,) if grace_s > 0 else ()) + (signal.SIGKILL,):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else timeout_s)
        pause = 0.001  # a killed browser is gone in a few ms: poll fast at first, then back off
        while True:
            if reap:
                reap_children()
            alive = {p for p in pids if same_process(p, starts[p]) and (until_reaped or not _zombie(p))}
            if not alive or time.monotonic() >= deadline:
                break
            time.sleep(pause)
            pause = min(2 * pause, 0.02)
        pids = alive
    return sorted(pids)


def alive(pid: int) -> bool:
    """Running (or stopped), not exited: a zombie waits only for its parent to read its status."""
    f = _stat_fields(pid)
    return f is not None and f[0] != "Z"


def _zombie(pid: int) -> bool:
    f = _stat_fields(pid)
    return f is not None and f[0] == "Z"


def reap_children() -> None:
    """Collect every exited child (a subreaper inherits orphans and must wait for them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def me() -> dict:
    """This process as an owner record: host, PID and start time (a recycled PID is not us)."""
    import socket
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": start_time(os.getpid())}


def owner_alive(owner: dict) -> bool:
    """The owner record's process still runs; on another host nobody here can tell, so yes."""
    import socket
    if owner.get("host") != socket.gethostname():
        return True
    return same_process(int(owner.get("pid") or 0), owner.get("start"))


def pids_in(ns: str) -> list[int]:
    """The processes inside a network namespace (`ip netns pids`)."""
    res = cmd.run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in res.stdout.split() if x.isdigit()]
