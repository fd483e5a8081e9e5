from plt_bench.doctor import Check, format_checks


def test_format_says_what_to_do_and_whether_it_is_ready():
    checks = [Check("root", "ok", "running as root"),
              Check("sch_netem", "warn", "no netem", "nothing to do: linkem stands in", essential=False),
              Check("chromedriver", "missing", "/usr/bin/chromedriver not found", "apt install chromium-driver")]
    text = format_checks(checks)
    assert "-> apt install chromium-driver" in text and "-> nothing to do" in text
    assert text.endswith("not ready: chromedriver missing")
    assert format_checks(checks[:2]).endswith("ready: plt-bench can run here")
