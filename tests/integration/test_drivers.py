"""The webdriver-manager route for the driver, against a local stand-in for Chrome for Testing's
index (a server on this machine's loopback that serves Debian's own chromedriver, zipped, as the
index's download for the browser's version): downloaded once, then found in the cache without
the index; offline with an empty cache, a message that says what to install."""

import http.server
import json
import shutil
import subprocess
import threading
import zipfile
from urllib.parse import urlsplit

import pytest
import requests

from plt_bench.browsers import drivers
from plt_bench.errors import EnvironmentProblem

pytestmark = pytest.mark.skipif(not shutil.which(drivers.CHROMEDRIVER), reason="needs Debian's chromedriver")


@pytest.fixture
def index(tmp_path):
    """The stand-in: known-good-versions-with-downloads.json and the zip, on 127.0.0.1."""
    version = drivers.parse_version(
        subprocess.run([drivers.CHROMIUM, "--version"], capture_output=True, text=True).stdout)[1]
    files = tmp_path / "index"
    (files / version / "linux64").mkdir(parents=True)
    with zipfile.ZipFile(files / version / "linux64" / "chromedriver-linux64.zip", "w") as z:
        z.write(drivers.CHROMEDRIVER, "chromedriver-linux64/chromedriver")
    served = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(files), **kw)

        def log_message(self, *a):
            served.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    (files / "known-good-versions-with-downloads.json").write_text(json.dumps({"versions": [
        {"version": version, "revision": "1", "downloads": {"chromedriver": [
            {"platform": "linux64", "url": f"{base}/{version}/linux64/chromedriver-linux64.zip"}]}}]}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"base": base, "version": version, "served": served}
    server.shutdown()
    server.server_close()


def client(base: str | None):
    """webdriver-manager's HTTP client: every index URL to the stand-in (by the file's name), or
    offline (base None): no request leaves this machine either way."""
    from webdriver_manager.core.http import WDMHttpClient

    class StandIn(WDMHttpClient):
        def get(self, url, **kwargs):
            if base is None:
                raise requests.exceptions.ConnectionError("Could not reach host. Are you offline?")
            parts = urlsplit(url)
            local = url if parts.hostname == "127.0.0.1" else f"{base}/{parts.path.rsplit('/', 1)[-1]}"
            return super().get(local, **kwargs)
    return StandIn()


def test_the_driver_comes_from_webdriver_manager_then_from_its_cache(tmp_path, index):
    cache = tmp_path / "cache"
    got = drivers.resolve(distro_driver=str(tmp_path / "no-distro-driver"), cache_dir=cache,
                          http_client=client(index["base"]))
    assert got.driver_source == "webdriver-manager download" and got.driver.startswith(str(cache))
    assert got.driver_version == drivers.parse_version(
        subprocess.run([drivers.CHROMEDRIVER, "--version"], capture_output=True, text=True).stdout)[1]
    assert any(p.endswith("chromedriver-linux64.zip") for p in index["served"])
    again = drivers.resolve(distro_driver=str(tmp_path / "no-distro-driver"), cache_dir=cache, http_client=client(None))
    assert again.driver_source == "webdriver-manager cache" and again.driver == got.driver
    meta = again.metadata()
    assert meta["chromedriver_source"] == "webdriver-manager cache" and meta["chromium"].endswith(index["version"])


def test_offline_with_an_empty_cache_says_what_to_install(tmp_path):
    with pytest.raises(EnvironmentProblem, match="apt install chromium-driver"):
        drivers.resolve(distro_driver=str(tmp_path / "no-distro-driver"), cache_dir=tmp_path / "empty",
                        http_client=client(None))


def test_the_distros_driver_when_its_major_matches():
    got = drivers.resolve()
    assert got.driver == drivers.CHROMEDRIVER and got.driver_source == "distro package (chromium-driver)"


def test_a_campaign_with_a_browser_binary_records_it_and_its_driver(tmp_path):
    """--browser-binary (here Debian's Chromium, named): the trial runs with it, and the metadata
    says which binary and which driver, found how."""
    import sqlite3

    from ..conftest import ok_slots, run_cli
    results = tmp_path / "b.sqlite"
    r = run_cli("run", "--proto", "h3", "--bw", "100mbit", "--size", "5KB", "--runs", "1", "--verify", "off",
                "--browser-binary", drivers.CHROMIUM, "--results", str(results), "--testbed", "226", timeout=300)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    db = sqlite3.connect(results)
    meta, grid = db.execute("SELECT metadata_json, grid_json FROM campaigns").fetchone()
    meta, grid = json.loads(meta), json.loads(grid)
    assert meta["browser_binary"] == drivers.CHROMIUM and grid["browser_binary"] == drivers.CHROMIUM
    assert meta["chromedriver_source"] == "distro package (chromium-driver)"
    assert meta["chromedriver_path"] == drivers.CHROMEDRIVER and meta["chromium"].startswith("Chromium")
    rows = [dict(zip(("proto", "status", "reason", "next_hop_protocol"), x))
            for x in db.execute("SELECT proto, status, reason, next_hop_protocol FROM trials")]
    ok_slots(rows, lambda t: t["proto"])  # an attempt before the ok one only where the busy machine refused it
    assert [(t["status"], t["next_hop_protocol"]) for t in rows if t["status"] == "ok"] == [("ok", "h3")], rows
