"""Signals (plt_bench.signals), in a child process of their own: no root, no testbed."""
import subprocess
import sys
import textwrap

import pytest

from ..conftest import ROOT

# The signal lands while a weakref callback runs (as the import machinery's module-lock callback
# does): Python prints the handler's exception as "Exception ignored" and drops it. The suite saw a
# Ctrl-C 0.15 s into a run lost that way (2026-11-24): the run went on to its end.
SWALLOWED = textwrap.dedent("""
    import os, signal, sys, time, weakref
    sys.path.insert(0, {path!r})
    from plt_bench import signals
    signals.install({raise_as})
    class X: pass
    def cb(ref):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000): pass
    x = X(); r = weakref.ref(x, cb)
    try:
        del x
        for _ in range(200):
            time.sleep(0.01)
        print("not interrupted")
    except {caught} as e:
        print("interrupted", type(e).__name__)
""")


@pytest.mark.parametrize("raise_as,caught", [("", "signals.Interrupted"), ("lambda n: KeyboardInterrupt()", "KeyboardInterrupt")])
def test_an_ending_swallowed_by_a_callback_is_delivered_again(raise_as, caught):
    code = SWALLOWED.format(path=str(ROOT / "plt-bench"), raise_as=raise_as, caught=caught)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith("interrupted"), (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr


EVERY = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {path!r})
    from plt_bench import signals
    signals.install()
    try:
        os.kill(os.getpid(), signal.{name})
        time.sleep(5)
        print("not interrupted")
    except signals.Interrupted as e:  # to a file: after SIGHUP the pipes are the terminal's, detached
        open({out!r}, "w").write(f"interrupted {{e.signum == signal.{name}}} {{e.exit_code}}")
""")


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"])
def test_every_terminating_signal_ends_the_same_way(name, tmp_path):
    """Each of the four raises Interrupted with its own number and exit code (128 + it), the one path
    every cleanup runs on: the CLI's endings (test_cli: test_every_ending_leaves_the_host_as_it_was)
    need not be tried with each signal that takes it (SIGHUP, which also leaves the terminal, is)."""
    import signal
    out = tmp_path / "said"
    code = EVERY.format(path=str(ROOT / "plt-bench"), name=name, out=str(out))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    said = out.read_text().split() if out.exists() else r.stdout.split()
    assert said == ["interrupted", "True", str(128 + getattr(signal, name))], (said, r.stdout, r.stderr)
