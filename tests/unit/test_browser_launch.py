"""Chromium's launch (browsers.chromium.Chromium.start): a second start where chromedriver could not
create the first session (nothing was sent over the link yet), never a third, and never for any
other error; the failed attempt's processes and profile are ended before the second."""

import pytest
from selenium.common.exceptions import SessionNotCreatedException, WebDriverException

from plt_bench.browsers.chromium import CHROMIUM


class StandIn:
    """webdriver.Chrome and Service stand-ins: each Chrome() raises the next of `errors`, then succeeds."""

    def __init__(self, errors):
        self.errors, self.calls = list(errors), 0

    def Chrome(self, service, options):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "driver"

    @staticmethod
    def Service(path, service_args, **kw):  # env, popen_kw: the sandbox's (browsers.sandbox)
        return (path, service_args)


@pytest.fixture
def launch(tmp_path, monkeypatch):
    def run(errors):
        wd, out, cleaned = StandIn(errors), {}, []
        monkeypatch.setattr("selenium.webdriver.Chrome", wd.Chrome)
        monkeypatch.setattr("selenium.webdriver.chrome.service.Service", StandIn.Service)
        req = {"profile_dir": str(tmp_path / "profile"), "args": []}
        try:
            got = CHROMIUM.start(req, out, lambda: cleaned.append(req["profile_dir"]))
        except WebDriverException as e:
            got = e
        return wd, out, cleaned, got
    return run


def test_a_session_not_created_is_started_once_more(tmp_path, launch):
    wd, out, cleaned, got = launch([SessionNotCreatedException("session not created: DevToolsActivePort")])
    assert got == "driver" and wd.calls == 2 and out["launch_attempts"] == 2
    assert cleaned == [str(tmp_path / "profile")]  # the first attempt's processes, ended before the second


def test_a_second_failure_is_the_answer(launch):
    wd, out, _, got = launch([SessionNotCreatedException("first"), SessionNotCreatedException("second")])
    assert isinstance(got, SessionNotCreatedException) and "second" in got.msg
    assert wd.calls == 2 and out["launch_attempts"] == 2


@pytest.mark.parametrize("errors,calls", [([], 1), ([WebDriverException("cannot find Chrome binary")], 1)])
def test_other_outcomes_are_not_retried(launch, errors, calls):
    wd, out, cleaned, _ = launch(errors)
    assert wd.calls == calls and out["launch_attempts"] == 1 and cleaned == []
