"""The suite's count of tests that could not judge their claim (tests/conftest.py: unjudged())."""
from ..conftest import unjudged_verdict

pytest_plugins = ["pytester"]


def test_the_verdict_fails_past_its_share_and_says_how_many():
    line, fail = unjudged_verdict({"ran": 20, "unjudged": ["a", "b"]}, 0.10)
    assert not fail and line.startswith("unjudged: 2 of 20 integration tests") and "at most 10% may be" in line
    line, fail = unjudged_verdict({"ran": 20, "unjudged": ["a", "b", "c"]}, 0.10)
    assert fail and "FAILED" in line
    assert unjudged_verdict({"ran": 20, "unjudged": ["a"] * 20}, None)[1] is False  # no share asked: counted only


def test_a_test_that_left_its_claim_unjudged_is_skipped_and_counted(pytester):
    """A real pytest run with the suite's conftest: the unjudged test is reported skipped with its
    reason, a judged one passes, a failing one still fails, and more than the share fails the run."""
    import shutil
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "conftest.py", pytester.path / "conftest.py")
    pytester.mkpydir("integration")
    pytester.path.joinpath("integration", "test_claims.py").write_text(
        "from conftest import unjudged\n"
        "def test_judged():\n    assert 1 + 1 == 2\n"
        "def test_refused():\n    if unjudged('the machine refused the trial'):\n        return\n    assert False\n"
        "def test_partly():\n    unjudged('its timing')\n    assert 'other claim'\n"
        "def test_wrong():\n    unjudged('its timing')\n    assert False, 'the claim that was judged failed'\n")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "--max-unjudged", "0.10", "integration")
    r.assert_outcomes(passed=1, skipped=2, failed=1)
    out = r.stdout.str()
    assert "unjudged: the machine refused the trial" in out and "unjudged: its timing" in out
    assert "unjudged: 2 of 4 integration tests left their claim unjudged" in out and "FAILED, the suite" in out
    assert r.ret == 1
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "integration/test_claims.py::test_judged",
                                      "--max-unjudged", "0.10")
    r.assert_outcomes(passed=1)
    assert "unjudged: 0 of 1 integration tests" in r.stdout.str() and r.ret == 0
