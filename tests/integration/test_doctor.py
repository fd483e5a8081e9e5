import json

from ..conftest import run_cli, system_state


def test_doctor_reports_every_piece_and_changes_nothing():
    before = system_state()
    r = run_cli("doctor", "--json", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr  # this machine (and CI's) has everything essential
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    for name in ("root", "sch_netem", "htb", "NFQUEUE", "IFB", "Chromium", "chromedriver", "Chromium = chromedriver",
                 "Caddy", "linkem", "disk", "Go", "cargo", "tcpdump", "tshark", "netem VM", "ip", "tc"):
        assert name in checks, name
    assert checks["root"]["status"] == "ok" and checks["NFQUEUE"]["status"] == "ok"
    assert checks["sch_netem"]["status"] in ("ok", "warn")  # this kernel: warn, with what to do
    assert all(c["fix"] for c in checks.values() if c["status"] in ("missing", "warn"))
    assert system_state() == before  # the probes' scratch namespaces are gone
