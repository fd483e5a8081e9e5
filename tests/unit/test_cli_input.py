"""Bad input: a message naming the option and the accepted form, exit 2, and nothing created."""
import subprocess
import sys

import pytest

from ..conftest import ROOT, run_cli


def _ours():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return sorted(l.split()[0] for l in out.splitlines() if l.startswith("pb"))


@pytest.mark.parametrize("args,fragment", [
    (["run", "--bw", "100"], "--bw: '100' is not a rate; expected a number with a unit"),
    (["run", "--bw", "100mbps"], "--bw: '100mbps' is ambiguous"),
    (["run", "--bw", "0mbit"], "--bw: '0mbit' is out of range"),
    (["run", "--proto", "udp"], "--proto: unknown protocol 'udp'; expected one of quic, tcp, both"),
    (["run", "--size", "5XB"], "--size: '5XB' is not a size; expected a whole number with a unit"),
    (["run", "--runs", "0"], "--runs: 0 is out of range"),
    (["run", "--rtt", "50"], "--rtt: '50' is not a duration; expected a number with a unit"),
    (["run", "--rtt", "20ms", "--jitter", "15ms"], "--jitter: 15ms of uniform jitter per direction does not fit"),
    (["run", "--rtt", "60ms", "--jitter", "15ms", "--jitter-dist", "normal"], "does not fit in a one-way delay of 30ms"),
    (["run", "--jitter-dist", "pareto"], "--jitter-dist: unknown distribution 'pareto'"),
    (["run", "--loss", "1"], "--loss: '1' is not a percentage"),
    (["run", "--loss", "150%"], "--loss: '150%' is over 100%"),
    (["run", "--loss", "100%"], "--loss: '100%' would drop every packet"),
    (["run", "--loss-direction", "sideways"], "--loss-direction: unknown direction 'sideways'"),
    (["run", "--queue", "many"], "--queue: 'many' is not a packet count"),
    (["run", "--verify", "maybe"], "--verify: invalid choice"),
    (["verify", "--probes", "3"], "--probes: '3' is not a whole number from 10 to 100000"),
    (["run", "--cc", "vegas"], "--cc: unknown congestion control 'vegas'"),
    (["run", "--link", "netem2"], "--link: invalid choice"),
    (["run", "--timeout", "soon"], "--timeout: 'soon' is not a duration"),
    (["up", "--bw", "1mbit,2mbit"], "'up' takes one value of each"),
    (["pages", "--size", "10B"], "--size: '10B' is too small"),
    (["export", "--results", "/nonexistent/r.sqlite"], "--results: /nonexistent/r.sqlite does not exist"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["run", "no-such-preset"], "CAMPAIGN: 'no-such-preset' is neither a preset"),
    (["run", "pages", "--bw", "1gb"], "--bw: unknown rate unit 'gb'"),
    (["report", "--results", "/nonexistent.sqlite"], "--results: /nonexistent.sqlite does not exist"),
    (["run", "--test", "chi2"], "--test: invalid choice"),
])
def test_bad_input_is_refused_before_anything_is_created(args, fragment):
    before = _ours()
    r = run_cli(*args, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert fragment in r.stderr, r.stderr
    assert r.stderr.count("Traceback") == 0
    assert _ours() == before


@pytest.mark.parametrize("args,fragment", [
    (["--bw", "fast"], "--bw: 'fast' is not a rate"),
    (["--proto", "sctp"], "--proto: unknown protocol 'sctp'"),
    (["--size", "5KB", "--rtt", "10"], "--rtt: '10' is not a duration"),
    (["--loss", "2"], "--loss: '2' is not a percentage"),
    (["--rtt", "10ms", "--jitter", "6ms"], "--jitter: 6ms of uniform jitter"),
    (["--verify", "later"], "--verify: 'later'"),
    (["--cc", "vegas"], "--cc: unknown congestion control 'vegas'"),
    (["--link", "dummynet"], "--link: unknown backend 'dummynet'"),
])
def test_pytest_plugin_refuses_bad_options(args, fragment):
    r = subprocess.run([sys.executable, "-m", "pytest", *args], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert fragment in r.stderr


def test_every_command_has_help():
    for sub in ("run", "report", "plot", "campaigns", "up", "verify", "down", "clean", "export", "summary", "pages",
                "bench", "bench-link"):
        r = run_cli(sub, "--help", timeout=30)
        assert r.returncode == 0 and "usage: plt-bench" in r.stdout
