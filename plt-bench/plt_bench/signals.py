"""The signals a user can end plt-bench with, and one way to end on all of them.

Ctrl-C (SIGINT), SIGTERM, SIGHUP (an SSH session that drops) and SIGQUIT (Ctrl-\\) all raise
`Interrupted` in the main thread, so every cleanup runs as for an exception: the testbed is
taken down, the campaign is marked interrupted. The first signal starts the cleanup; every
later one is noted and otherwise ignored, so pressing Ctrl-C again cannot cut a cleanup short
and leave namespaces behind. Only the front ends (CLI, pytest plugin) install the handlers.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading

TERMINATING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Interrupted(BaseException):
    """A terminating signal; BaseException, so `except Exception` in a cleanup never swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process ended by it (Ctrl-C: 130)."""
        return 128 + self.signum


_first: int | None = None


def _say(text: str) -> None:
    try:
        os.write(2, text.encode())
    except OSError:  # the terminal is gone (SIGHUP): nobody to tell
        pass


def _detach_from_terminal() -> None:
    """After SIGHUP the terminal (or the SSH session's pipe) is gone and writing to it fails (EIO,
    EPIPE): cleanup must not trip on a print. A regular file (a log) keeps the last words."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        try:
            mode = os.fstat(fd).st_mode
            if os.isatty(fd) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)


def _handler(signum, frame):
    global _first
    if _first is None:
        _first = signum
        if signum == signal.SIGHUP:
            _detach_from_terminal()
        raise Interrupted(signum)
    _say(f"\n{signal.Signals(signum).name}: plt-bench is cleaning up; it stops as soon as everything it made is gone\n")


# A handler's exception raised where Python cannot pass it on (a weakref callback, a __del__) is
# printed as "Exception ignored in ..." and dropped: a Ctrl-C 0.15 s into a run, landing in the import
# machinery's module-lock callback, was lost that way, and the run went on to its end. Such a
# swallowed ending is taken back and the signal delivered again a moment later, from outside the
# callback (a handler always runs in the main thread, at a point where its exception propagates).
REDELIVER_S = 0.05
_MARK = "_plt_bench_signum"


def _unraisable_hook(previous):
    def hook(unraisable):
        global _first
        signum = getattr(unraisable.exc_value, _MARK, None)
        if signum is None:
            previous(unraisable)
            return
        _first = None  # not an ending yet: it never reached the code that ends
        threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum)).start()
    return hook


def install(raise_as=None) -> None:
    """Handle every terminating signal. raise_as(signum) builds the exception to raise instead of
    Interrupted (the pytest plugin raises KeyboardInterrupt, which pytest unwinds cleanly)."""
    global _first
    _first = None

    def marked(signum, frame):
        try:
            _handler(signum, frame)
        except Interrupted as e:
            out = e if raise_as is None else raise_as(e.signum)
            setattr(out, _MARK, e.signum)
            raise out from None
    handler = marked
    if not getattr(sys.unraisablehook, "_plt_bench", False):
        sys.unraisablehook = _unraisable_hook(sys.unraisablehook)
        sys.unraisablehook._plt_bench = True
    for sig in TERMINATING:
        if signal.getsignal(sig) is signal.SIG_IGN:  # nohup, a background job: the user chose to ignore it
            continue
        signal.signal(sig, handler)


def settle() -> None:
    """The ending is done (everything cleaned up): ignore every later terminating signal for the last
    steps. Python's shutdown puts its handlers back to the default, and one more Ctrl-C there ended
    the process by the signal itself (seen by its parent as -2, not as the exit code 130)."""
    for sig in TERMINATING:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, signal.SIG_IGN)


def first() -> int | None:
    """The signal that started the ending, if any."""
    return _first
