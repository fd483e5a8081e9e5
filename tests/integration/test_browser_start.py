"""A browser kept across trials (--browser-start kept, the default: plt_bench.browsers.base.START_MODES):
each trial in a fresh context of its own, which must share nothing with the trials before it. Judged
on what the trials' own ends saw: the server a new connection per trial, the load its handshake's
round trips (a connection, a TLS session or a QUIC 0-RTT carried over from the last trial would save
them), the kept browser's count of loads; and nothing of it left once the testbed lets it go."""
import pytest

from plt_bench import protocols
from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Cell, Conditions
from plt_bench.pages import Page
from plt_bench.testbed import Setup, Testbed
from plt_bench.topology import pids_in
from plt_bench.trial.run import run_cell_once

from ..conftest import machine_refused, system_state
from .conftest import until_ok

pytestmark = [pytest.mark.root, pytest.mark.slow]

COND = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=50)


def test_a_kept_browser_gives_each_trial_a_fresh_context_that_shares_nothing_and_leaves_nothing(store, campaign):
    before = system_state()
    cells = [Cell(proto, Page(5000), COND) for proto in ("h3", "h2", "h3", "h2", "h3")]
    got, firsts, ui = [], [], []
    with Testbed(Setup(PROJECT_ROOT / "sites", browser_start="kept")) as bed:
        bed.sites.ensure([5000])
        bed.set_conditions(COND)
        for i, cell in enumerate(cells):
            nxt = cells[i + 1] if i + 1 < len(cells) else None
            t, reasons = until_ok(lambda k: run_cell_once(bed, store, campaign, 10 * i + k, i, cell, gate=True,
                                                          extra={"attempt": k + 1}, next_cell=nxt))
            if machine_refused(t, reasons):
                return
            assert t.status == "ok", reasons
            got.append(t)
            if nxt is not None:  # the next trial's context, opened while this one was stored: its window's processes
                bed.worker.settle()
                ui += _browser_ui(bed.worker.proc.pid)
            firsts.append(len(reasons) == 1)  # a retry's context is opened in its trial (the failed one prepared the next cell's)
        # between trials the kept browsers live below the worker; let go, nothing of them is left
        worker = bed.worker.proc.pid
        assert len([p for p in pids_in(bed.plan.client_ns) if p != worker]) > 0
        bed.discard_prepared()
        assert [p for p in pids_in(bed.plan.client_ns) if p != worker] == []
    assert system_state() == before
    # no context's window started a renderer for the browser's own UI (chromium.NO_BROWSER_UI: its omnibox
    # popup's renderer took 0.7-0.8 s of CPU per context, which the idle gate waited out before each load)
    assert ui == [], ui
    # each next trial's context opened while the last was stored
    assert all(t.prelaunched for t, first in zip(got[1:], firsts[1:]) if first), [(t.proto, t.prelaunched, f, t.browser_loads) for t, f in zip(got, firsts)]
    for t in got:
        p = protocols.get(t.proto)
        assert t.browser_start == "kept", t
        # a connection of its own (the server saw it opened for this trial) and every round trip of its
        # handshake in the load: no connection, TLS session or 0-RTT came from an earlier trial's context
        assert (t.next_hop_protocol, t.server_proto, t.connections) == (p.next_hop, p.http_version, 1), t
        assert t.ttfb_ms >= p.first_byte_rtts * COND.rtt_ms and t.plt_ms >= p.first_byte_rtts * COND.rtt_ms, t
    # one browser per protocol's flags, each counting its loads; the first of each started for it
    for proto in ("h3", "h2"):
        loads = [t.browser_loads for t in got if t.proto == proto]
        assert loads == sorted(loads) and loads[0] == 0 and loads[-1] >= 1, loads


def _browser_ui(worker: int, within_s: float = 0.3) -> list[str]:
    """The renderers of the browser's own WebUI (--top-chrome-webui) below the worker, looked for over
    within_s (a window's renderers start as it opens). Below the worker, not in the client namespace: a
    sandboxed Chromium's renderers have namespaces of their own."""
    import time

    from plt_bench import procs
    seen: set[str] = set()
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        table = procs.table()  # {pid: (ppid, state, command line)}
        below = procs.descendants({p: row[0] for p, row in table.items()}, worker)
        seen |= {table[p][2][:160] for p in below if "--top-chrome-webui" in table[p][2]}
        time.sleep(0.05)
    return sorted(seen)
