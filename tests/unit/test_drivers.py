"""Which chromedriver goes with a browser (pure parts of plt_bench.browsers.drivers)."""

import pytest

from plt_bench.browsers import drivers
from plt_bench.errors import UsageError


@pytest.mark.parametrize("text,want", [
    ("Chromium 142.0.7444.59 built on Debian GNU/Linux 12 (bookworm)\n", ("Chromium", "142.0.7444.59")),
    ("Google Chrome 143.0.7499.4 \n", ("Google Chrome", "143.0.7499.4")),
    ("ChromeDriver 142.0.7444.59 (4b8153ab58d3c3f4c9f7e4baad9616ecf80db5fa-refs/branch-heads/7444_52@{#4})",
     ("ChromeDriver", "142.0.7444.59"))])
def test_versions_are_read_from_what_the_binaries_print(text, want):
    assert drivers.parse_version(text) == want


def test_no_version_is_an_error():
    with pytest.raises(ValueError):
        drivers.parse_version("bash: chromium: command not found")


@pytest.mark.parametrize("browser,distro,route", [("142.0.7444.59", "142.0.7444.59", "distro"),
                                                  ("142.0.7444.175", "142.0.7444.59", "distro"),
                                                  ("143.0.7499.4", "142.0.7444.59", "webdriver-manager"),
                                                  ("142.0.7444.59", None, "webdriver-manager")])
def test_the_distros_driver_only_for_the_same_major(browser, distro, route):
    assert drivers.choose_driver(browser, distro) == route


def test_a_browser_binary_that_is_not_one_is_refused_by_its_option(tmp_path):
    with pytest.raises(UsageError, match="--browser-binary: .* is not an executable file"):
        drivers.resolve(str(tmp_path / "nothing"))
    script = tmp_path / "not-a-browser"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    with pytest.raises(UsageError, match="--browser-binary: .* does not run as a Chromium-based browser"):
        drivers.resolve(str(script))
