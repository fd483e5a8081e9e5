"""Which browser a testbed runs, and the chromedriver that matches it.

The browser is Debian's Chromium unless a user names another binary (--browser-binary, the
campaign key browser_binary: Google Chrome, a Chromium build of their own). Its driver, in this
order:
  1. the distro's chromedriver (/usr/bin/chromedriver, Debian's chromium-driver), when its major
     version is the browser's;
  2. webdriver-manager's cache (.tools/webdriver-manager), when it holds a driver for the
     browser's version;
  3. webdriver-manager's download (Chrome for Testing's index), into that cache.
What ran, its version and how it was found go into every campaign's metadata. Offline (as on
this project's machines), step 3 fails with a message that says what to install.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess

from .. import cmd
from ..errors import EnvironmentProblem, UsageError

# Debian's /usr/bin/chromium is a shell wrapper that adds flags of its own (remote extensions,
# GPU rasterization); the testbed starts the real binary with exactly its own flags.
CHROMIUM = "/usr/lib/chromium/chromium" if os.path.exists("/usr/lib/chromium/chromium") else "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CACHE_DIR = cmd.PROJECT_ROOT / ".tools" / "webdriver-manager"
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)\.(\d+)")


@dataclasses.dataclass(frozen=True)
class ChromiumBuild:
    """The Chromium build a testbed runs and its chromedriver (resolve)."""

    binary: str
    name: str            # as the binary says: "Chromium", "Google Chrome"
    version: str         # 142.0.7444.59
    driver: str          # the chromedriver's path
    driver_version: str
    driver_source: str   # distro package | webdriver-manager cache | webdriver-manager download

    def metadata(self) -> dict:
        return {"browser_binary": self.binary, "chromium": f"{self.name} {self.version}",
                "chromedriver": f"ChromeDriver {self.driver_version}", "chromedriver_path": self.driver,
                "chromedriver_source": self.driver_source}


def parse_version(text: str) -> tuple[str, str]:
    """`chromium --version` or `chromedriver --version` output -> (name, version): 'Chromium
    142.0.7444.59 built on Debian ...' -> ('Chromium', '142.0.7444.59'). ValueError if none."""
    m = _VERSION.search(text)
    if not m:
        raise ValueError(f"no version in {text.strip()[:80]!r}")
    return text[:m.start()].strip() or "unknown", m.group(0)


def major(version: str) -> int:
    return int(version.split(".")[0])


# How long `BINARY --version` may take. 30 s was too short inside the netem VM (software emulation,
# the 200 MB binary read cold over 9p while the host was busy): a first probe timed out there.
VERSION_TIMEOUT_S = 120


def _version_of(path: str, what: str) -> tuple[str, str]:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S)
        return parse_version(out.stdout or out.stderr)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{what}: {path} did not answer --version within {VERSION_TIMEOUT_S} s (a machine this slow "
                         "cannot measure page loads); expected the path of a Chromium or Google Chrome binary") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{what}: {path} does not run as a Chromium-based browser ({e}); expected the path of "
                         "a Chromium or Google Chrome binary") from None


def first_line(argv: list[str], timeout_s: float = 20.0) -> str:
    """The first line a program prints (its --version), or "unknown"."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def choose_driver(browser_version: str, distro_version: str | None) -> str:
    """Which route finds the driver (pure): 'distro' when the distro's driver has the browser's
    major version, else 'webdriver-manager'."""
    if distro_version and major(distro_version) == major(browser_version):
        return "distro"
    return "webdriver-manager"


def resolve(binary: str | None = None, distro_driver: str = CHROMEDRIVER, cache_dir=CACHE_DIR,
            http_client=None) -> ChromiumBuild:
    """The browser (Debian's Chromium by default) and its driver; UsageError for a binary that is
    no browser, EnvironmentProblem when no matching driver can be had. http_client: a
    webdriver-manager HttpClient (the tests' stand-in for Chrome for Testing's index)."""
    binary = binary or CHROMIUM
    if not os.path.isfile(binary) or not os.stat(binary).st_mode & 0o111:  # (root may "access" any file)
        raise UsageError(f"--browser-binary: {binary} is not an executable file; expected the path of a Chromium or "
                         "Google Chrome binary")
    name, version = _version_of(binary, "--browser-binary")
    distro_version = None
    if os.path.isfile(distro_driver):
        try:
            distro_version = _version_of(distro_driver, "chromedriver")[1]
        except UsageError:
            distro_version = None
    if choose_driver(version, distro_version) == "distro":
        return ChromiumBuild(binary, name, version, distro_driver, distro_version, "distro package (chromium-driver)")
    path, source = _from_webdriver_manager(name, version, cache_dir, http_client)
    return ChromiumBuild(binary, name, version, path, _version_of(path, "chromedriver")[1], source)


def _from_webdriver_manager(name: str, version: str, cache_dir, http_client) -> tuple[str, str]:
    from webdriver_manager.chrome import ChromeDriverManager
    from webdriver_manager.core.download_manager import WDMDownloadManager
    from webdriver_manager.core.driver_cache import DriverCacheManager
    from webdriver_manager.core.os_manager import ChromeType, OperationSystemManager

    class ThisBrowser(OperationSystemManager):
        """The browser's version as its binary said it, not as webdriver-manager guesses it."""

        def get_browser_version_from_os(self, browser_type=None):
            return version

    os.environ.setdefault("WDM_LOG", "0")  # webdriver-manager's own log lines stay out of ours
    system = ThisBrowser()
    chrome_type = ChromeType.GOOGLE if "chrome" in name.lower() and "chromium" not in name.lower() else ChromeType.CHROMIUM
    manager = ChromeDriverManager(driver_version=version, chrome_type=chrome_type,
                                  download_manager=WDMDownloadManager(http_client) if http_client else None,
                                  # a cached driver stays good for ten years: it is the browser's version that decides
                                  cache_manager=DriverCacheManager(root_dir=str(cache_dir), valid_range=3650,
                                                                   os_system_manager=system),
                                  os_system_manager=system)
    cached = manager._cache_manager.find_driver(manager.driver)
    if cached:
        os.chmod(cached, 0o755)
        return cached, "webdriver-manager cache"
    try:
        return manager.install(), "webdriver-manager download"
    except Exception as e:  # noqa: BLE001 - webdriver-manager raises many kinds; each means no driver
        raise EnvironmentProblem(
            f"no chromedriver for {name} {version}: the distro's {CHROMEDRIVER} is not of major {major(version)}, "
            f"and webdriver-manager could not fetch one ({type(e).__name__}: {str(e).splitlines()[0][:200]}). "
            f"Install a chromedriver of major {major(version)} (for Debian's chromium: apt install chromium-driver, "
            f"the same version as chromium), or run once where Chrome for Testing's index can be reached so "
            f"webdriver-manager caches it in {cache_dir}") from None
