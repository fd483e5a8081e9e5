"""The worker's launch: a second start where chromedriver could not create the first session
(nothing was sent over the link yet), never a third, and never for any other error."""

import pytest
from selenium.common.exceptions import SessionNotCreatedException, WebDriverException

from plt_bench import browser_worker


class StandIn:
    """webdriver and Service stand-ins: each Chrome() raises the next of `errors`, then succeeds."""

    def __init__(self, errors):
        self.errors, self.calls = list(errors), 0

    def Chrome(self, service, options):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "driver"

    @staticmethod
    def Service(path, service_args):
        return (path, service_args)


@pytest.fixture(autouse=True)
def no_sweep(monkeypatch):
    """The real sweep ends this process's children: not in a unit test."""
    swept = []
    monkeypatch.setattr(browser_worker, "_sweep", lambda profile_dir, out: swept.append(profile_dir))
    return swept


def launch(tmp_path, errors):
    wd, out = StandIn(errors), {}
    req = {"profile_dir": str(tmp_path / "profile")}
    try:
        return wd, out, browser_worker._launch(wd, StandIn.Service, "chromedriver", None, req, out)
    except WebDriverException as e:
        return wd, out, e


def test_a_session_not_created_is_started_once_more(tmp_path, no_sweep):
    wd, out, got = launch(tmp_path, [SessionNotCreatedException("session not created: DevToolsActivePort")])
    assert got == "driver" and wd.calls == 2 and out["launch_attempts"] == 2
    assert no_sweep == [str(tmp_path / "profile")]  # the first attempt's processes, ended before the second


def test_a_second_failure_is_the_answer(tmp_path):
    errors = [SessionNotCreatedException("first"), SessionNotCreatedException("second")]
    wd, out, got = launch(tmp_path, errors)
    assert isinstance(got, SessionNotCreatedException) and "second" in got.msg
    assert wd.calls == 2 and out["launch_attempts"] == 2


@pytest.mark.parametrize("errors,calls", [([], 1), ([WebDriverException("cannot find Chrome binary")], 1)])
def test_other_outcomes_are_not_retried(tmp_path, errors, calls):
    wd, out, got = launch(tmp_path, errors)
    assert wd.calls == calls and out["launch_attempts"] == 1
