"""The browsers as an unprivileged user with their sandbox on (plt_bench.browsers.sandbox): the pure
parts. The integration tests run every browser so (the default), and
tests/integration/test_browsers.py checks who runs what."""
import pwd

import pytest

from plt_bench import browsers, campaign
from plt_bench.browsers import sandbox
from plt_bench.errors import UsageError


def test_the_option_is_on_or_off_and_off_is_a_campaign_of_its_own():
    assert sandbox.parse(None) == "on" and sandbox.parse("OFF") == "off"
    with pytest.raises(UsageError, match="--browser-sandbox: 'maybe' is not on or off"):
        sandbox.parse("maybe")
    on, off = campaign.load("quick"), campaign.load("quick", {"browser_sandbox": "off"})
    assert on.browser_sandbox == "on" and off.browser_sandbox == "off"
    assert "browser_sandbox" not in on.as_dict() and off.as_dict()["browser_sandbox"] == "off"
    assert on.spec_hash != off.spec_hash
    with pytest.raises(UsageError, match="--browser-sandbox: .half. is not on or off"):
        campaign.load("quick", {"browser_sandbox": "half"})


def test_a_campaign_before_it_ran_unsandboxed_and_is_not_pooled_with_one_that_was():
    from plt_bench.metadata import key_diff, key_value
    assert key_value({}, "browser_sandbox") == "off"
    assert key_diff({"browser_sandbox": "on"}, {}) == ["browser_sandbox"]


def test_chromium_drops_no_sandbox_and_firefox_keeps_its_flags():
    args = ["--headless=new", "--no-sandbox", "--disable-gpu"]
    assert browsers.get("chromium").sandboxed(args) == ["--headless=new", "--disable-gpu"]
    assert browsers.get("firefox").sandboxed(["-headless"]) == ["-headless"]


def test_the_webdriver_is_started_as_the_user_with_its_own_folders(monkeypatch):
    monkeypatch.setenv("PLT_BENCH_SANDBOX_USER", "root")  # any user the machine has; the real one is plt-browser
    monkeypatch.setenv("PLT_BENCH_SANDBOX_HOME", "/run/plt-bench/pb1/browser")
    assert sandbox.driver_launch({}) == ({}, {})
    kw, env = sandbox.driver_launch({"sandbox": True})
    assert kw == {"user": 0, "group": pwd.getpwnam("root").pw_gid, "extra_groups": [], "umask": 0o077}
    assert env["HOME"] == "/run/plt-bench/pb1/browser" and env["TMPDIR"] == "/run/plt-bench/pb1/browser/tmp"
    assert sandbox.worker_env(sandbox.Path("/h")) == {"PLT_BENCH_SANDBOX_USER": sandbox.USER,
                                                       "PLT_BENCH_SANDBOX_HOME": "/h"}


def test_staged_capture_files_move_into_the_results_and_the_stage_goes(tmp_path):
    stage, dest = tmp_path / "stage", tmp_path / "captures" / "1"
    stage.mkdir()
    (stage / "netlog.json").write_text("{}")
    (stage / "keys.log").write_text("k")
    assert sandbox.move_staged(stage, dest) == ["keys.log", "netlog.json"]
    assert not stage.exists() and (dest / "netlog.json").read_text() == "{}"
    assert sandbox.move_staged(tmp_path / "none", dest) == []


def test_a_missing_user_is_refused_naming_the_fix(monkeypatch):
    from plt_bench.errors import EnvironmentProblem
    monkeypatch.setattr(sandbox, "USER", "plt-no-such-user")
    with pytest.raises(EnvironmentProblem, match="run scripts/setup .*or measure with --browser-sandbox off"):
        sandbox.user_ids()
