import os
import signal

import pytest

from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Conditions
from plt_bench.store import Store
from plt_bench.testbed import Setup, Testbed


from ..conftest import MACHINE_REFUSALS, link_backends


def pytest_generate_tests(metafunc):
    """Every test on the shared testbed runs on each link backend selected (--link-backends)."""
    if "link_backend" in metafunc.fixturenames:
        metafunc.parametrize("link_backend", link_backends(metafunc.config), scope="session")


@pytest.fixture(scope="session")
def bed(link_backend):
    with Testbed(Setup(PROJECT_ROOT / "sites", link=link_backend)) as b:
        b.sites.ensure([5000, 500_000, 10**7])
        yield b


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    with Store(tmp_path_factory.mktemp("results") / "t.sqlite") as s:
        yield s


@pytest.fixture(scope="session")
def bed_metadata(bed):
    return bed.metadata()


@pytest.fixture
def campaign(store, bed_metadata):
    """A campaign of the test's own: the store holds a slot once per attempt, and tests' trials reuse
    run indices."""
    return store.new_campaign("tests", "now", {}, bed_metadata)


def shaped(bed, rate_bps):
    c = Conditions(rate_bps, rate_bps)
    if bed.conditions != c:
        bed.set_conditions(c)
    return c


def until_ok(trial, tries=3):
    """A trial whose success is the point, tried again when the machine refused it (the link
    emulator fell behind or stalled on a busy machine, or another of MACHINE_REFUSALS: correct
    behaviour, recorded as failed)."""
    done = [trial(0)]
    while done[-1].status != "ok" and len(done) < tries and (done[-1].reason or "").startswith(MACHINE_REFUSALS):
        done.append(trial(len(done)))
    return done[-1], [t.reason for t in done]


def rendered_figures(page, profile_dir, tables: list | None = None) -> dict[str, float]:
    """Open an HTML file in the real headless Chromium and screenshot each <figure>: its id -> the
    share of the figure's pixels that are not white (a blank figure: 0). tables, given a list, gets
    each <table> as it rendered: (its heading, rows, columns of its first row, its height in px)."""
    import io

    import numpy as np
    from PIL import Image
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from plt_bench.browsers.drivers import CHROMEDRIVER, CHROMIUM
    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", f"--user-data-dir={profile_dir}", "--window-size=1400,1000",
              "--disable-gpu"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.get(page.resolve().as_uri())
        out = {}
        for fig in driver.find_elements(By.CSS_SELECTOR, "figure"):
            svg = fig.find_element(By.CSS_SELECTOR, "svg")
            driver.execute_script("arguments[0].scrollIntoView()", svg)
            px = np.asarray(Image.open(io.BytesIO(svg.screenshot_as_png)).convert("L"))
            out[fig.get_attribute("id")] = float((px < 250).mean())
        if tables is not None:
            tables += [tuple(x) for x in driver.execute_script(
                "return [...document.querySelectorAll('table')].map(t => [t.previousElementSibling && "
                "t.previousElementSibling.previousElementSibling ? t.previousElementSibling.previousElementSibling"
                ".textContent : '', t.rows.length, t.rows[0] ? t.rows[0].cells.length : 0, "
                "t.getBoundingClientRect().height])")]
        return out
    finally:
        driver.quit()


FOREIGN_INDEX = 250  # a testbed no test uses: another plt-bench's, as a colleague's campaign would be


@pytest.fixture(scope="module")
def foreign_campaign(tmp_path_factory):
    """Another plt-bench's campaign running beside the tests that use this (issue 36: 23 of 827 tests
    failed beside one, judging the whole machine). Started detached (setsid -f: not a descendant of
    the suite, as a colleague's run is not), on testbed pb250, loading pages until the module ends;
    then ended with SIGINT, as its user would. Yields its store; afterwards it must have measured
    while the tests ran, and left nothing."""
    import sqlite3
    import subprocess
    import time
    from plt_bench import topology
    from ..conftest import CLI, ROOT
    folder = tmp_path_factory.mktemp("foreign")
    results, log = folder / "f.sqlite", folder / "f.log"
    argv = [*CLI, "run", "--testbed", str(FOREIGN_INDEX), "--proto", "h3,h1", "--size", "5KB", "--bw", "20mbit",
            "--rtt", "20ms", "--runs", "1000", "--verify", "off", "--results", str(results)]
    subprocess.run(["setsid", "-f", "sh", "-c", 'exec "$@" > "$0" 2>&1', str(log), *argv], cwd=ROOT, check=True)
    prefix = f"pb{FOREIGN_INDEX}"

    def trials():
        if not results.exists():
            return 0
        db = sqlite3.connect(results, timeout=30)
        try:
            return db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        except sqlite3.OperationalError:
            return 0
        finally:
            db.close()
    deadline = time.monotonic() + 120
    while trials() < 1:
        assert time.monotonic() < deadline, f"the foreign campaign did not start: {log.read_text()[-2000:]}"
        time.sleep(0.5)
    at_start = trials()
    yield results
    owner = topology.read_state(prefix).get("owner_pid")
    measured = trials() - at_start
    if owner:
        os.kill(int(owner), signal.SIGINT)
    deadline = time.monotonic() + 120
    while prefix in topology.our_prefixes() and time.monotonic() < deadline:
        time.sleep(0.5)
    text = log.read_text()
    assert prefix not in topology.our_prefixes(), f"the foreign campaign left its testbed: {text[-2000:]}"
    assert not topology._our_processes(prefix)
    assert owner and "interrupted" in text, f"the foreign campaign had ended before the tests did: {text[-3000:]}"
    assert measured > 0, "the foreign campaign measured nothing while the tests ran"
