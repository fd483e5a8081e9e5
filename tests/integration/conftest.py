import pytest

from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Conditions
from plt_bench.store import Store
from plt_bench.testbed import Testbed


@pytest.fixture(scope="session")
def bed():
    with Testbed(PROJECT_ROOT / "sites") as b:
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
