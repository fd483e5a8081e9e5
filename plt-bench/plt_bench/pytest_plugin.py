"""pytest plugin: `pytest --proto quic --bw 100mbit` measures a grid; plain `pytest` runs the tests.

The plugin is in measurement mode only when one of --proto, --bw, --up-bw, --size, --runs,
--captures, --server, --rtt, --jitter, --loss or --queue is given. Then the collected tests are
deselected and replaced by one item per trial (cell x repetition, protocols alternating), each a
real page load on the embedded testbed (or, with --server, against 'plt-bench serve' on another
machine); the session ends with a table of median, min and max PLT per cell.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from . import cmd, conditions as cond_mod
from .conditions import Cell, DEFAULT_SIZES, PROTO_CHOICES
from .errors import PltBenchError, UsageError
from .link import canonical as link_canonical

MEASURE_OPTIONS = ("proto", "bw", "up_bw", "size", "runs", "plt_captures", "plt_server")
LINK_OPTIONS = ("rtt", "jitter", "loss", "queue")
DEFAULT_RESULTS = cmd.PROJECT_ROOT / "results" / "plt-bench.sqlite"


def pytest_addoption(parser):
    g = parser.getgroup("plt-bench", "plt-bench page-load measurement (any of --proto/--bw/--up-bw/--size/--runs/"
                                     "--rtt/--jitter/--loss/--queue switches to measurement mode)")
    g.addoption("--proto", default=None, help=f"protocol(s): {', '.join(PROTO_CHOICES)} (default: both)")
    g.addoption("--bw", default=None, help="downlink rate(s): 500kbit, 100mbit, 1gbit, 100Mbps, unshaped "
                                           "(default: 100mbit)")
    g.addoption("--up-bw", dest="up_bw", default=None, help="uplink rate if not the same as --bw")
    g.addoption("--size", default=None, help=f"page size(s), 1 KB = 1000 bytes (default: {','.join(DEFAULT_SIZES)})")
    g.addoption("--runs", default=None, help="repetitions of every cell (default: 3)")
    from .cli import LINK_HELP
    g.addoption("--rtt", default=None, help=LINK_HELP["rtt"])
    g.addoption("--jitter", default=None, help=LINK_HELP["jitter"])
    g.addoption("--jitter-dist", dest="jitter_dist", default="uniform", help=LINK_HELP["jitter_dist"])
    g.addoption("--loss", default=None, help=LINK_HELP["loss"])
    g.addoption("--loss-direction", dest="loss_direction", default="both", help=LINK_HELP["loss_direction"])
    g.addoption("--no-reorder", dest="no_reorder", action="store_true", help=LINK_HELP["no_reorder"])
    g.addoption("--queue", default=None, help=LINK_HELP["queue"])
    g.addoption("--cc", default="cubic", help=LINK_HELP["cc"])
    g.addoption("--link", default="auto", help=LINK_HELP["link"])
    g.addoption("--verify", dest="verify_link", default="stop", help=LINK_HELP["verify"])
    g.addoption("--results", default=str(DEFAULT_RESULTS), help="results store")
    from .cli import CAPTURE_HELP
    # pytest owns --capture (output capturing), so the capture run is --captures here
    g.addoption("--captures", dest="plt_captures", default=None, metavar="KINDS", help=CAPTURE_HELP["capture"])
    g.addoption("--cpu-interval", dest="cpu_interval", default=None, help=CAPTURE_HELP["cpu_interval"])
    from .cli import TWO_MACHINE_HELP
    g.addoption("--server", dest="plt_server", default=None, metavar="ADDR", help=TWO_MACHINE_HELP["server"])
    g.addoption("--server-pin", dest="server_pin", default=None, help=TWO_MACHINE_HELP["server_pin"])
    g.addoption("--server-token", dest="server_token", default=None, help=TWO_MACHINE_HELP["server_token"])
    g.addoption("--server-token-file", dest="server_token_file", default=None, help=TWO_MACHINE_HELP["server_token_file"])
    g.addoption("--control-port", dest="control_port", default=None, help=TWO_MACHINE_HELP["control_port"])
    g.addoption("--iface", dest="plt_iface", default=None, help=TWO_MACHINE_HELP["iface"])


class Measurement:
    """Per-session state of measurement mode: the grid, the store, the testbed (opened lazily)."""

    def __init__(self, config):
        o = config.option
        self.grid = cond_mod.grid_from_options(o)
        self.cc = cond_mod.parse_cc(o.cc)
        self.link, self.verify_mode = o.link, o.verify_link
        self.results = Path(o.results)
        from .store import check_writable
        check_writable(self.results)  # a path that cannot be written is bad input (exit 2), refused now
        from .capture import check_space, make_settings
        self.capture = make_settings(o.plt_captures, o.cpu_interval, None, self.results,
                                     ("--captures", "--cpu-interval", "--capture-limit"))
        trials = [(p, s) for p in self.grid.protos for s in self.grid.sizes] * self.grid.runs * len(self.grid.conditions)
        self.capture_warning = check_space(self.capture.kinds, trials, self.capture.root, self.capture.limit_bytes)[1]
        from .link import host as hostnet
        from .remote import make_ref
        server = None if o.plt_server is None else hostnet.parse_ipv4(o.plt_server, "--server")
        self.ref = make_ref(server, o.server_pin, o.server_token, o.control_port, o.plt_iface, o.server_token_file)
        if self.ref is not None and self.ref.token_source == "argv":
            from .remote import TOKEN_ARGV_WARNING
            print(TOKEN_ARGV_WARNING, file=sys.stderr)
        self.iface = o.plt_iface
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
        from .testbed import RemoteTestbed, Testbed
        try:
            cmd.require_root()
            if self.ref is not None:
                self.bed = RemoteTestbed(self.ref, self.iface, list(self.grid.conditions), link=self.link, cc=self.cc,
                                         capture=self.capture)
                self.bed.check()
            else:
                self.bed = Testbed(cmd.PROJECT_ROOT / "sites", cc=self.cc, link=self.link,
                                   conditions=self.grid.conditions, capture=self.capture)
            self.store = Store(self.results)
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
    try:
        # these have defaults, so they are checked on every run, measurement or not
        cond_mod.parse_cc(o.cc)
        from .capture import parse_interval_s
        parse_interval_s(o.cpu_interval)
        link_canonical(o.link)
        if o.verify_link not in cond_mod.VERIFY_CHOICES:
            raise UsageError(f"--verify: '{o.verify_link}'; expected one of {', '.join(cond_mod.VERIFY_CHOICES)}")
        if o.jitter_dist not in cond_mod.JITTER_DISTS:
            raise UsageError(f"--jitter-dist: unknown distribution '{o.jitter_dist}'; expected one of "
                             f"{', '.join(cond_mod.JITTER_DISTS)}")
        if o.loss_direction not in cond_mod.LOSS_DIRECTIONS:
            raise UsageError(f"--loss-direction: unknown direction '{o.loss_direction}'; expected one of "
                             f"{', '.join(cond_mod.LOSS_DIRECTIONS)}")
        if not any(getattr(o, k, None) is not None for k in MEASURE_OPTIONS + LINK_OPTIONS):
            for k, name in (("server_pin", "--server-pin"), ("server_token", "--server-token"),
                            ("server_token_file", "--server-token-file"), ("plt_iface", "--iface")):
                if getattr(o, k, None) is not None:
                    raise UsageError(f"{name}: only with --server ADDR (two machines); the embedded testbed needs none")
            return
        m = config.stash[_KEY] = Measurement(config)
        # SIGTERM, SIGHUP, SIGQUIT and a repeated Ctrl-C end the session as one Ctrl-C does: pytest
        # unwinds, the testbed is taken down (pytest_sessionfinish), later signals wait for that
        from . import signals
        signals.install(raise_as=lambda signum: KeyboardInterrupt())
        if m.capture_warning:
            print(m.capture_warning, file=sys.stderr)
    except UsageError as e:  # exit 2 like the CLI (pytest's own usage errors exit 4)
        pytest.exit(str(e), returncode=2)


class TrialItem(pytest.Item):
    def __init__(self, *, cell: Cell, run_index: int, **kw):
        super().__init__(**kw)
        self.cell, self.run_index = cell, run_index

    def runtest(self):
        from .runner import run_cell_once
        m = self.config.stash[_KEY]
        m.ensure_open()
        if m.bed.conditions != self.cell.conditions:
            from .runner import apply_and_verify
            apply_and_verify(m.bed, m.store, m.campaign_id, self.cell.conditions, m.verify_mode)
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


@pytest.hookimpl(tryfirst=True)  # take the testbed down before anyone checks for leftovers
def pytest_sessionfinish(session, exitstatus):
    m = session.config.stash.get(_KEY, None)
    if m is not None:
        m.close("finished" if exitstatus == 0 else ("interrupted" if exitstatus == 2 else "failed"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    m = config.stash.get(_KEY, None)
    if m is None or m.store is None or m.campaign_id is None:
        return
    from .summary import format_table, summarize
    from .link.verify import format_report
    checks = [c["result"]["verify"] for c in m.store.link_checks(m.campaign_id) if "verify" in c["result"]]
    if checks:
        terminalreporter.section("plt-bench: the link, measured")
        for report in checks:
            terminalreporter.write_line(format_report(report))
    terminalreporter.section("plt-bench: page-load time per cell")
    terminalreporter.write_line(f"campaign {m.campaign_id} in {m.results} (link backend: "
                                f"{m.store.campaign(m.campaign_id)['metadata'].get('link_backend')})")
    terminalreporter.write_line(format_table(summarize(m.store.trials([m.campaign_id]))))
    m.store.close()
    m.store = None
