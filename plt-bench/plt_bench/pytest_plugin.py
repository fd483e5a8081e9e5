"""pytest plugin: `pytest --proto quic --bw 100mbit` measures a grid; plain `pytest` runs the tests.

The plugin is in measurement mode only when one of --proto, --bw, --up-bw, --size or --runs
is given. Then the collected tests are deselected and replaced by one item per trial (cell x
repetition, protocols alternating), each a real page load on the embedded testbed; the
session ends with a table of median, min and max PLT per cell.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import cmd, conditions as cond_mod
from .conditions import Cell, DEFAULT_SIZES, PROTO_CHOICES
from .errors import PltBenchError, UsageError
from .link import LINK_CHOICES

MEASURE_OPTIONS = ("proto", "bw", "up_bw", "size", "runs")
DEFAULT_RESULTS = cmd.PROJECT_ROOT / "results" / "plt-bench.sqlite"


def pytest_addoption(parser):
    g = parser.getgroup("plt-bench", "plt-bench page-load measurement (any of --proto/--bw/--up-bw/--size/--runs "
                                     "switches to measurement mode)")
    g.addoption("--proto", default=None, help=f"protocol(s): {', '.join(PROTO_CHOICES)} (default: both)")
    g.addoption("--bw", default=None, help="downlink rate(s): 500kbit, 100mbit, 1gbit, 100Mbps, unshaped "
                                           "(default: 100mbit)")
    g.addoption("--up-bw", dest="up_bw", default=None, help="uplink rate if not the same as --bw")
    g.addoption("--size", default=None, help=f"page size(s), 1 KB = 1000 bytes (default: {','.join(DEFAULT_SIZES)})")
    g.addoption("--runs", default=None, help="repetitions of every cell (default: 3)")
    g.addoption("--rtt", default=None, help="round-trip time: " + cond_mod.NOT_YET)
    g.addoption("--jitter", default=None, help="jitter: " + cond_mod.NOT_YET)
    g.addoption("--loss", default=None, help="loss: " + cond_mod.NOT_YET)
    g.addoption("--cc", default="cubic", help="TCP congestion control: cubic (default), bbr, reno")
    g.addoption("--link", default="auto", help=f"link backend: {', '.join(LINK_CHOICES)}")
    g.addoption("--results", default=str(DEFAULT_RESULTS), help="results store")


class Measurement:
    """Per-session state of measurement mode: the grid, the store, the testbed (opened lazily)."""

    def __init__(self, config):
        o = config.option
        self.grid = cond_mod.make_grid(o.proto or "both", o.bw or "100mbit", o.size or ",".join(DEFAULT_SIZES),
                                       o.runs or 3, o.up_bw)
        self.cc = cond_mod.parse_cc(o.cc)
        if o.link not in LINK_CHOICES:
            raise UsageError(f"--link: unknown backend '{o.link}'; expected one of {', '.join(LINK_CHOICES)}")
        self.link = o.link
        self.results = Path(o.results)
        self.store = None
        self.bed = None
        self.campaign_id = None
        self.seq = 0
        self.broken: str | None = None

    def ensure_open(self):
        if self.broken:
            raise PltBenchError(self.broken)
        if self.bed is not None:
            return
        from .metadata import utc_now
        from .runner import grid_dict
        from .store import Store
        from .testbed import Testbed
        try:
            cmd.require_root()
            self.store = Store(self.results)
            self.bed = Testbed(cmd.PROJECT_ROOT / "sites", cc=self.cc, link=self.link)
            self.bed.__enter__()
            self.bed.sites.ensure(self.grid.sizes)
            self.campaign_id = self.store.new_campaign("pytest", utc_now(), grid_dict(self.grid), self.bed.metadata())
        except BaseException as e:
            self.broken = f"testbed could not be brought up: {e}"
            raise

    def close(self, status: str):
        from .metadata import utc_now
        if self.bed is not None:
            self.bed.__exit__(None, None, None)
            self.bed = None
        if self.store is not None:
            if self.campaign_id is not None:
                self.store.finish_campaign(self.campaign_id, status, utc_now())


_KEY = pytest.StashKey[Measurement]()


def pytest_configure(config):
    o = config.option
    if not any(getattr(o, k, None) is not None for k in MEASURE_OPTIONS):
        for name in ("rtt", "jitter", "loss"):
            if getattr(o, name) is not None:
                raise pytest.UsageError(f"--{name} {cond_mod.NOT_YET}")
        return
    try:
        cond_mod.reject_unsupported(o.rtt, o.jitter, o.loss)
        config.stash[_KEY] = Measurement(config)
    except UsageError as e:
        raise pytest.UsageError(str(e)) from None


class TrialItem(pytest.Item):
    def __init__(self, *, cell: Cell, run_index: int, **kw):
        super().__init__(**kw)
        self.cell, self.run_index = cell, run_index

    def runtest(self):
        from .runner import run_cell_once
        m = self.config.stash[_KEY]
        m.ensure_open()
        if m.bed.conditions != self.cell.conditions:
            check = m.bed.set_conditions(self.cell.conditions)
            from .metadata import utc_now
            m.store.add_link_check(m.campaign_id, self.cell.conditions.label, utc_now(), check)
        trial = run_cell_once(m.bed, m.store, m.campaign_id, m.seq, self.run_index, self.cell)
        m.seq += 1
        self.user_properties.append(("plt_ms", trial.plt_ms))
        if trial.status != "ok":
            raise TrialFailed(trial.reason)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, (TrialFailed, PltBenchError)):
            return f"{self.name}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, self.name


class TrialFailed(Exception):
    pass


def pytest_collection_modifyitems(session, config, items):
    m = config.stash.get(_KEY, None)
    if m is None:
        return
    config.hook.pytest_deselected(items=list(items))
    new = []
    for c in m.grid.conditions:
        for r in range(m.grid.runs):
            for s in m.grid.sizes:
                for p in m.grid.protos:
                    cell = Cell(p, s, c)
                    new.append(TrialItem.from_parent(session, name=f"plt[{c.label}-{cell.size_label}-{p}-run{r}]",
                                                     cell=cell, run_index=r))
    items[:] = new


def pytest_sessionfinish(session, exitstatus):
    m = session.config.stash.get(_KEY, None)
    if m is not None:
        m.close("finished" if exitstatus == 0 else ("interrupted" if exitstatus == 2 else "failed"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    m = config.stash.get(_KEY, None)
    if m is None or m.store is None or m.campaign_id is None:
        return
    from .summary import format_table, summarize
    terminalreporter.section("plt-bench: page-load time per cell")
    terminalreporter.write_line(f"campaign {m.campaign_id} in {m.results}")
    terminalreporter.write_line(format_table(summarize(m.store.trials([m.campaign_id]))))
    m.store.close()
    m.store = None
