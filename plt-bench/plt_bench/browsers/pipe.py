"""The parent's end of the browser worker's pipe.

The browser runs in the client namespace through a long-lived worker process (browsers.worker) that
the testbed starts there with `ip netns exec`; the worker starts a fresh driver, browser and
profile for every trial and ends them after. What differs between browsers (their launch, flags
and prefs, their driver) is in plt_bench.browsers.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .. import cmd, procs
from ..errors import BrowserError, TestbedBroken

if TYPE_CHECKING:
    from .drivers import ChromiumBuild
    from ..records import WorkerAnswer

WORKER_MODULE = "plt_bench.browsers.worker"  # what the worker runs as (python -m)


class BrowserWorker:
    """The parent's end of a browser worker running in a namespace (or here, when ns is None)."""

    def __init__(self, ns: str | None, log_path: Path, browser: "ChromiumBuild | None" = None):
        self.ns = ns
        self.log_path = log_path
        self.browser = browser  # the binary and driver the worker starts (None: Debian's)
        self.proc: subprocess.Popen | None = None
        self._preparing = False  # a prepare request's answer is still to be read (settle)
        self.ready: tuple | None = None  # (key, tag) of the browser started early for a load to come (prepare)
        self.kept = False  # a load has asked it to keep its browser: it may hold browsers between loads
        self.env: dict[str, str] = {}  # more of the worker's environment (the sandbox's user and home)
        # files of ours the worker sees over the machine's (cmd.with_own_files): a client on a real host
        # gives it its own /etc/resolv.conf and hosts as a namespace's worker has them (/etc/netns)
        self.own_files: list[tuple[str, str]] = []

    # The worker's hello (Python, Selenium's import, both binaries' --version) took over 30 s in a
    # TCG guest beside a busy host; only a hung worker waits this long.
    def start(self, timeout_s: float = 180.0) -> dict:
        # the log path in the argv marks the worker as this testbed's (clean finds it by its run folder)
        argv = cmd.in_netns(self.ns, [sys.executable, "-m", WORKER_MODULE, str(self.log_path)])
        if self.own_files:
            argv = cmd.with_own_files(self.own_files, argv)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
        # Chromium's own files in the run folder, which goes with the testbed: its temporary folders
        # (singleton socket, scoped dirs: one killed mid-trial left them in /tmp, 137 there after
        # the test suites) and its crash reporter's database (else ~/.config/chromium/Crash Reports)
        tmp = self.log_path.parent / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        env.update(TMPDIR=str(tmp), XDG_CONFIG_HOME=str(tmp / "config"), XDG_CACHE_HOME=str(tmp / "cache"))
        if self.browser:
            env.update(PLT_BENCH_BROWSER=self.browser.binary, PLT_BENCH_DRIVER=self.browser.driver)
        env.update(self.env)  # the browsers' user, when they run sandboxed (browsers.sandbox.worker_env)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env=env, start_new_session=True, text=True, bufsize=1)
        return self._read(timeout_s)  # the worker says hello with its versions

    def _read(self, timeout_s: float) -> dict:
        assert self.proc and self.proc.stdout
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            raise BrowserError(f"browser worker did not answer within {timeout_s:.0f}s (log: {self.log_path})")
        line = self.proc.stdout.readline()
        if not line:
            raise BrowserError(f"browser worker exited with {self.proc.wait()} (log: {self.log_path})")
        return json.loads(line)

    def _send(self, request: dict) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise BrowserError("browser worker is not running")
        assert self.proc.stdin
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise BrowserError(f"browser worker died (log: {self.log_path})") from None

    # a prepared launch that takes longer than this is a hung worker (a launch takes 0.3-0.5 s here)
    PREPARE_TIMEOUT_S = 180.0

    def prepare(self, request: dict, key: tuple, tag: str) -> None:
        """Have the worker start the browser of a request to come (browsers.worker.prepare) and
        return at once: the answer is read before the next request (settle). key: what a load must
        be to take it (take); tag: its trial's."""
        self.settle()
        self._send({"prepare": request})
        self._preparing = True
        self.ready, self.kept = (key, tag), self.kept or bool(request.get("keep"))

    def take(self, key: tuple) -> str | None:
        """The tag of the browser started early, where it was started for this load (key), else None;
        either way it is no longer ready for another."""
        ready, self.ready = self.ready, None
        return ready[1] if ready and ready[0] == key else None

    @property
    def holding(self) -> bool:
        """It may hold a browser between loads: one started early, or a kept one."""
        return bool(self.ready or self.kept)

    def settle(self) -> dict | None:
        """The answer to a prepare request still unread, if any ({"prepared": bool, ...})."""
        if not self._preparing:
            return None
        self._preparing = False
        return self._read(self.PREPARE_TIMEOUT_S)

    def discard(self) -> None:
        """End the browser started early that no request took, and every kept one (a change of
        conditions comes first); nothing to do where it holds none."""
        if not self.holding:
            return
        self.ready, self.kept = None, False
        self.settle()
        self._send({"discard": True})
        self._read(self.PREPARE_TIMEOUT_S)

    def load(self, request: dict, timeout_s: float) -> "WorkerAnswer":
        """Send one trial; return the worker's answer (checked against records.WorkerAnswer). Raises
        BrowserError only if the worker is broken or answers in another shape."""
        self.settle()
        self._send(request)
        self.kept = self.kept or bool(request.get("keep"))
        from ..records import check_answer
        try:
            return check_answer(self._read(timeout_s))
        except ValueError as e:
            raise BrowserError(f"{e} (log: {self.log_path})") from None

    def died_reason(self) -> str | None:
        """Why the worker is gone, or None while it runs (or before it started)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"the browser worker exited with {self.proc.returncode} (log: {self.log_path})"

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None and self.proc.stdin:
                self.proc.stdin.close()
                self.proc.wait(5)
        except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None
        self._log.close()


def quiesce(ns: str, worker: BrowserWorker | None = None) -> int:
    """Before a trial: every process in the namespace ns killed and reaped but the worker's own and the
    browser it holds (started early, or kept): the worker ends every trial's processes itself, and this
    is the check that it did. How many were killed; TestbedBroken if one would not die."""
    keep = {worker.proc.pid} if worker and worker.proc else set()
    if keep and worker.holding:  # its start done first: a driver the worker was starting while the table below was
        # read is not in it, and was killed as a stray (a kept browser's first prepare failed so, 'chromedriver
        # ... exited -9')
        worker.settle()
    listed = procs.pids_in(ns)  # before the table: every process listed is in it
    if keep and worker.holding:
        keep |= procs.descendants({p: row[0] for p, row in procs.table().items()}, worker.proc.pid)
    strays = [p for p in listed if p not in keep and procs.alive(p)]
    left = procs.kill_and_reap(strays) if strays else []
    if left:
        raise TestbedBroken(f"processes {left} in {ns} would not die; no trial can run beside them")
    return len(strays)
