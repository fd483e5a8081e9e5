from plt_bench.doctor import Check, format_checks


def test_format_says_what_to_do_and_whether_it_is_ready():
    checks = [Check("root", "ok", "running as root"),
              Check("sch_netem", "warn", "no netem", "nothing to do: linkem stands in", essential=False),
              Check("chromedriver", "missing", "/usr/bin/chromedriver not found", "apt install chromium-driver")]
    text = format_checks(checks)
    assert "-> apt install chromium-driver" in text and "-> nothing to do" in text
    assert text.endswith("not ready: chromedriver missing")
    assert format_checks(checks[:2]).endswith("ready: plt-bench can run here")


def test_a_program_that_does_not_answer_is_not_called_missing(tmp_path, monkeypatch):
    """Seen in the netem VM: Chromium's --version outlived a 20 s timeout and doctor said 'not found'."""
    from plt_bench import doctor
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    monkeypatch.setattr(doctor, "VERSION_TIMEOUT_S", 0.5)
    check, version = doctor.program_check("Chromium", str(slow), "apt install chromium")
    assert version is None and check.status == "missing" and "did not print its version within" in check.detail
    check, _ = doctor.program_check("Chromium", str(tmp_path / "absent"), "apt install chromium")
    assert check.detail.endswith("not found") and check.fix == "apt install chromium"
