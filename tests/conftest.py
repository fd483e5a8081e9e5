"""Shared fixtures. Integration tests need root: they build real namespaces, Caddy and Chromium."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "plt_bench.cli"]


def run_cli(*args, timeout=300, **kw):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw)


# What a busy, shared machine may refuse, for the machine's sake and not the product's: the link
# emulator fell behind or stalled (its trial did not run under its conditions). Anything else is a
# failure of what the test guards.
MACHINE_REFUSALS = ("link emulator fell behind", "link emulator stalled")


def ok_slots(trials, key) -> set:
    """The slots (key(trial)) with an ok trial, once every failed attempt is shown to be one the
    machine refused (MACHINE_REFUSALS), never a broken load, protocol or server."""
    bad = [(t["proto"], t["status"], t["reason"]) for t in trials
           if t["status"] != "ok" and not (t["reason"] or "").startswith(MACHINE_REFUSALS)]
    assert not bad, bad
    return {key(t) for t in trials if t["status"] == "ok"}


def system_state(ns: str | None = None) -> dict:
    """What plt-bench could change on this machine (or in namespace ns, a stand-in machine):
    namespaces, links and their qdiscs and GRO, iptables rules (filter and mangle), our run folder,
    our processes, sysctls (root only: iptables -S needs it)."""
    def out(argv):
        argv = argv if ns is None else ["ip", "netns", "exec", ns, *argv]
        return subprocess.run(argv, capture_output=True, text=True).stdout
    links = sorted(l.split(":")[1].strip().split("@")[0] for l in out(["ip", "-o", "link"]).splitlines())
    return {
        "netns": sorted(l.split()[0] for l in out(["ip", "netns", "list"]).splitlines()),
        "links": links,
        "qdiscs": out(["tc", "qdisc", "show"]),
        "gro": {dev: [l for l in out(["ethtool", "-k", dev]).splitlines() if l.startswith("generic-receive")]
                for dev in links},
        "iptables": out(["iptables", "-S"]) + out(["iptables", "-t", "mangle", "-S"]),
        "run": sorted(p.name for p in Path("/run/plt-bench").glob("*")) if Path("/run/plt-bench").exists() else None,
        "procs": sorted(l for l in out(["pgrep", "-af", "caddy run|linkem|chromedriver|tcpdump -i|iperf3 -s"]).splitlines()
                        if "pgrep" not in l),
        # the sysctls the testbed sets inside its namespaces: the host's must not move
        "sysctls": {k: out(["cat", f"/proc/sys/{k}"]).strip() for k in HOST_SYSCTLS},
    }


HOST_SYSCTLS = ("net/ipv4/ip_forward", "net/ipv4/tcp_rmem", "net/ipv4/tcp_wmem", "net/ipv4/tcp_congestion_control",
                "net/core/rmem_max", "net/core/wmem_max", "net/ipv6/conf/all/disable_ipv6")


def pytest_configure(config):
    """The suite checks what a user's signals do to plt-bench (Ctrl-C, SIGHUP, SIGQUIT): the runs it
    starts must not inherit signals ignored by the way the suite itself was started (nohup ignores
    SIGHUP; a background job of a shell without job control ignores SIGINT and SIGQUIT, and
    plt-bench rightly keeps an ignored signal ignored). A terminal's defaults, for this process and
    so for its children."""
    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGQUIT, signal.SIG_DFL),
                         (signal.SIGHUP, signal.SIG_DFL)):
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, default)


def pytest_addoption(parser):
    parser.addoption("--link-backends", default="available",
                     help="the link backends the integration tests run on: 'available' (every one this kernel "
                          "can run: netem needs sch_netem; the VM test covers netem where it is missing) or a "
                          "comma-separated list of netem, linkem")


def link_backends(config) -> list[str]:
    want = config.getoption("--link-backends")
    if want != "available":
        return want.split(",")
    if os.geteuid() != 0:
        return ["linkem"]
    from plt_bench.link import netem_available
    return ["netem", "linkem"] if netem_available() else ["linkem"]


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: run the suite with scripts/test as root (CI does)")
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(skip)


_KEPT = pytest.StashKey[frozenset]()  # the live testbeds of ours the suite found at its start


def pytest_sessionstart(session):
    """Testbeds of ours that were abandoned before the suite (a run killed earlier, say the README's
    first command cut short) are not the suite's to judge: `clean` removes them now and the header
    says so; otherwise the tests that run `clean`, which rightly removes every abandoned testbed,
    would find more gone than they made. Live ones (a running plt-bench's, one brought `up`) are
    kept, and the end-of-suite check leaves them out."""
    session.config.stash[_KEPT] = frozenset()
    if os.geteuid() != 0 or session.config.option.collectonly:
        return
    from plt_bench import topology
    report = topology.clean()
    if report["removed"]:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"plt-bench: removed testbeds abandoned before the suite: {', '.join(report['removed'])}", yellow=True)
    session.config.stash[_KEPT] = frozenset(report["kept"] + report["up"])


def pytest_sessionfinish(session, exitstatus):
    """After the whole suite nothing of ours may remain (besides the live testbeds it found): fail
    the run if something does."""
    if os.geteuid() != 0 or session.config.option.collectonly:
        return
    from plt_bench import topology
    left = topology.leftovers(besides=session.config.stash.get(_KEPT, frozenset()))
    if any(left.values()):
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"LEFTOVER testbed state after the suite: {left}", red=True)
        session.exitstatus = 1
