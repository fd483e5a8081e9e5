import pytest

from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Conditions
from plt_bench.store import Store
from plt_bench.testbed import Testbed


from ..conftest import link_backends


def pytest_generate_tests(metafunc):
    """Every test on the shared testbed runs on each link backend selected (--link-backends)."""
    if "link_backend" in metafunc.fixturenames:
        metafunc.parametrize("link_backend", link_backends(metafunc.config), scope="session")


@pytest.fixture(scope="session")
def bed(link_backend):
    with Testbed(PROJECT_ROOT / "sites", link=link_backend) as b:
        b.sites.ensure([5000, 500_000, 10**7])
        yield b


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    with Store(tmp_path_factory.mktemp("results") / "t.sqlite") as s:
        yield s


@pytest.fixture(scope="session")
def campaign(store, bed):
    return store.new_campaign("tests", "now", {}, bed.metadata())


def shaped(bed, rate_bps):
    c = Conditions(rate_bps, rate_bps)
    if bed.conditions != c:
        bed.set_conditions(c)
    return c


def until_ok(trial, tries=3):
    """A trial whose success is the point, tried again when the machine refused it (the link
    emulator fell behind or stalled on a busy machine: correct behaviour, recorded as failed)."""
    done = [trial(0)]
    while done[-1].status != "ok" and len(done) < tries and (done[-1].reason or "").startswith("link emulator"):
        done.append(trial(len(done)))
    return done[-1], [t.reason for t in done]
