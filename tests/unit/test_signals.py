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
