"""pytest plugin: `pytest --proto h3 --bw 100mbit` measures; plain `pytest` runs the tests.

Any plt-bench option (plt_bench.options) switches to measurement mode: the tests are deselected for
one item per trial of the campaign the options describe, in its seeded order, each run through
plt_bench.session as 'plt-bench run' runs it. A trial a resumed campaign measured before is skipped.
"""

from __future__ import annotations

import pytest

from . import options
from .errors import PltBenchError, UsageError

KEYS = options.MEASUREMENT + options.REACH
_KEY = pytest.StashKey["object"]()


def pytest_addoption(parser):
    options.add_pytest(parser.getgroup("plt-bench", "plt-bench page-load measurement (any of these switches to "
                                                    "measurement mode)"), *KEYS)


def pytest_configure(config):
    values = options.values(config.option, KEYS, options.PYTEST_PREFIX)
    if all(v is None for v in values.values()):
        return
    from . import session, signals
    try:
        config.stash[_KEY] = session.from_options(values, {k: options.display(k, pytest=True) for k in KEYS},
                                                  out=lambda line: None)
    except UsageError as e:  # exit 2 like the CLI (pytest's own usage errors exit 4)
        pytest.exit(str(e), returncode=2)
    # SIGTERM, SIGHUP, SIGQUIT and a repeated Ctrl-C end the session as one Ctrl-C does: pytest
    # unwinds, the testbed is taken down (pytest_sessionfinish), later signals wait for that
    signals.install(raise_as=lambda signum: KeyboardInterrupt())


class TrialFailed(Exception):
    pass


class TrialItem(pytest.Item):
    def __init__(self, *, slot, **kw):
        super().__init__(**kw)
        self.slot = slot

    def runtest(self):
        s = self.config.stash[_KEY]
        try:
            t = s.run_slot(self.slot)  # the first item opens the session: testbed up, campaign new or resumed
        except UsageError as e:  # a refused resume: exit 2 like the CLI
            pytest.exit(str(e), returncode=2)
        if t is None:
            pytest.skip(s.skip_reason(self.slot))
        self.user_properties += [("plt_ms", t.plt_ms), ("attempt", t.attempt), ("seq", t.seq)]
        if not t.ok:
            raise TrialFailed(t.reason)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, (TrialFailed, PltBenchError)):
            return f"{self.name}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, self.name


def pytest_collection_modifyitems(session, config, items):
    s = config.stash.get(_KEY, None)
    if s is not None:
        config.hook.pytest_deselected(items=list(items))
        g = s.spec.grid
        items[:] = [TrialItem.from_parent(session, slot=x, name=f"plt[{i:04d}-{x.conditions.label}-{x.page.label}-"
                                                                f"{g.variant_words(x.proto, x.cc, x.browser, x.server, x.budget).replace(' ', '-')}"
                                                                f"-run{x.run_index}]")
                    for i, x in enumerate(s.plan)]


@pytest.hookimpl(tryfirst=True)  # take the testbed down before anyone checks for leftovers
def pytest_sessionfinish(session, exitstatus):
    s = session.config.stash.get(_KEY, None)
    if s is not None:
        s.close(interrupted=exitstatus == 2)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    s = config.stash.get(_KEY, None)
    if s is not None and s.campaign_id is not None:
        from .analysis.summary import campaign_sections
        for title, text in campaign_sections(s.results, s.campaign_id):
            terminalreporter.section(title)
            terminalreporter.write_line(text)
