"""Shared fixtures. Integration tests need root: they build real namespaces, Caddy and Chromium."""
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "plt_bench.cli"]


TEST_TARGET_ROOT = "/var/cache/plt-bench/cargo-test"  # cargo test's builds, a folder per checkout


def cargo_tests_pass(crate: str) -> None:
    """A Rust crate of the checkout (linkem, quinnserve) passes its own tests, built as setup builds it."""
    import shutil
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    assert os.path.exists(cargo), f"cargo is needed to build {crate}: run scripts/setup"
    # the dependencies' builds kept machine-wide beside setup's binaries (scripts/bincache.sh), as setup keeps
    # those: a clean clone's test build of quinnserve took 109 s, nearly all of it compiling quinn, hyper, rustls
    shared = Path(TEST_TARGET_ROOT)
    env = dict(os.environ)
    manifest = str(ROOT / crate / "Cargo.toml")
    if os.access(shared.parent if not shared.exists() else shared, os.W_OK):
        shared.mkdir(parents=True, exist_ok=True)
        # one folder per checkout (a CI's stays where it is, so its builds are kept from run to run): cargo took
        # another checkout's build of the crate for fresh when this one's files were older, and a run in one
        # checkout that cleaned the crate removed the test binary another checkout's run was about to start
        key = hashlib.sha256(str(ROOT.resolve()).encode()).hexdigest()[:12]
        env["CARGO_TARGET_DIR"] = str(shared / f"{crate}-{key}")
    r = subprocess.run([cargo, "test", "--release", "--locked", "--manifest-path", manifest],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "test result: ok." in r.stdout and " 0 failed" in r.stdout


CLEANUP_S = 60.0  # how long an interrupted run may take to take its testbed down before it is killed


def run_cli(*args, timeout=300, **kw):
    """The CLI as a user runs it (subprocess.run's answer). When the suite is interrupted (Ctrl-C) or
    the run outlives its timeout, the run is ended as its user would end it, with SIGINT, and given
    CLEANUP_S to take its testbed down before it is killed: subprocess.run kills it at once (SIGKILL),
    which left its testbed behind when the suite was interrupted beside a campaign (2026-11-26)."""
    with subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          **kw) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except BaseException:
            p.send_signal(signal.SIGINT)
            try:
                p.communicate(timeout=CLEANUP_S)
            except BaseException:
                p.kill()
                p.communicate()
            raise
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


# What a busy, shared machine may refuse, for the machine's sake and not the product's: the link
# emulator fell behind or stalled (its trial did not run under its conditions). Anything else is a
# failure of what the test guards.
MACHINE_REFUSALS = ("link emulator fell behind", "link emulator stalled",
                    "the machine held the browser below its CPU budget",  # plt_bench.device.budget.MACHINE_HELD_BACK
                    "the machine held the server past its think time")  # plt_bench.pages.timing.MACHINE_HELD_THINK
# a device's calibration (plt_bench.device.calibrate) that the machine's other load did not let through
CALIBRATION_REFUSALS = ("cannot be measured now", "may be interfering", "this host is slower than the device")


UNJUDGED = "unjudged: "  # how a test whose claim the machine did not let it judge is reported (skipped)
_UNJUDGED: list[str] = []  # the current test's claims left unjudged (unjudged())


def unjudged(reason: str) -> bool:
    """The one ritual for a claim the busy machine did not let this test judge (a trial it refused on
    every try, a timing taken while its CPUs were saturated, a link it failed to carry): the test goes
    on judging its other claims, and when it passes it is reported as skipped, 'unjudged: <reason>',
    never as passed (pytest_runtest_makereport below). scripts/test counts them and fails the suite
    when more than --max-unjudged of the integration tests were. Returns True, so a test whose
    remaining claims all hang on this one says `if ...: return unjudged(...)`."""
    _UNJUDGED.append(reason)
    return True


def machine_refused(t, reasons=()) -> bool:
    """A trial the busy machine refused on every try (the link emulator fell behind or stalled while
    another plt-bench or CI's neighbours held the CPU): recorded as failed with its reason, which is the
    product's answer; the test that needed CPU headroom takes it as unjudged (unjudged()) rather than
    failing. Any other failure is not this: False."""
    if t.status == "ok" or not (t.reason or "").startswith(MACHINE_REFUSALS):
        return False
    assert t.status == "failed" and t.reason, t
    return unjudged(f"the machine refused the trial on each of {max(1, len(reasons))} tries ({t.reason})")


def machine_saturated(t) -> bool:
    """A trial during which the whole machine's CPUs were saturated (cpu_bound 'machine': busy beyond
    what the trial's own processes used, as beside another campaign): the product's own flag, and the
    machine's answer to a test whose claim is a timing: that claim is unjudged. A role of the trial's
    own (browser, caddy, linkem) is not this: False."""
    if getattr(t, "cpu_bound", None) != "machine":
        return False
    return unjudged(f"the machine's CPUs were saturated during the trial ({t.cpu_bound_share:.0%} of its load): "
                    "its timing")


def link_refused(returncode: int, stderr: str) -> bool:
    """A run the busy machine refused before measuring: its link failed the check against its
    conditions (an emulator short of CPU cannot carry 1 Gbit/s beside another campaign), said so,
    exit 1. The product's answer, recorded in the store's link checks; the test's claim is unjudged."""
    if returncode != 1 or "the link is out of tolerance" not in stderr:
        return False
    return unjudged(f"the machine refused the run: {stderr.strip()[-300:]}")


def ok_slots(trials, key) -> set:
    """The slots (key(trial)) with an ok trial, once every failed attempt is shown to be one the
    machine refused (MACHINE_REFUSALS), never a broken load, protocol or server."""
    bad = [(t["proto"], t["status"], t["reason"]) for t in trials
           if t["status"] != "ok" and not (t["reason"] or "").startswith(MACHINE_REFUSALS)]
    assert not bad, bad
    return {key(t) for t in trials if t["status"] == "ok"}


def slots_refused(trials, key, wanted) -> bool:
    """Whether a slot of `wanted` has no ok trial, every attempt of it refused by the busy machine (a
    campaign's exit 1 beside another campaign): the machine's answer, warned in the summary. Any
    other failure fails here, with its reason (ok_slots)."""
    missing = set(wanted) - ok_slots(trials, key)
    if missing:
        unjudged(f"the machine refused every attempt of {sorted(missing)} (recorded as failed)")
    return bool(missing)


def foreign(with_up: bool = True) -> dict:
    """What another plt-bench owns on this machine now, and so what no test here may judge: the
    testbeds (pbN) owned by a live process that is neither this test process nor one of its
    descendants (another campaign, a colleague's run), or brought 'up' by a user; their worker
    claims; a live netem probe of a process not ours; and the processes of those testbeds (below
    their owner, naming their run folder, or inside their namespaces). A testbed whose owner died
    is not foreign: it is a leak, whoever left it. with_up=False: a testbed 'up' made is not taken
    for another's (the end of the suite, which knows the ones that were there before it)."""
    from plt_bench import procs, topology
    table = procs.table()
    parents = {pid: ppid for pid, (ppid, _, _) in table.items()}
    mine = procs.descendants(parents, os.getpid()) | {os.getpid()}

    def theirs(state: dict) -> bool:
        pid = state.get("owner_pid")
        return bool(pid) and int(pid) not in mine and topology.owner_alive(state)
    prefixes = {p for p in topology.our_prefixes()
                if theirs(topology.read_state(p)) or (with_up and topology.read_state(p).get("up"))}
    prefixes |= {p for p, claim in topology.worker_claims().items() if theirs(claim)}
    owners = {int(topology.read_state(p).get("owner_pid") or 0) for p in prefixes} - {0}
    below = set().union(*[procs.descendants(parents, o) for o in owners]) if owners else set()
    inodes = set().union(*[topology._ns_inodes(p) for p in prefixes]) if prefixes else set()
    pids = {pid for pid, (_, _, line) in table.items()
            if pid in below or pid in owners or any(f"{topology.RUN_DIR}/{p}/" in line for p in prefixes)
            or (inodes and procs.netns_of(pid) in inodes)}
    # a live testbed of this suite (the session's shared one, pb0) keeps working between two snapshots
    # (its browser worker starts the next browser early): its processes are no test's leftovers, while
    # its namespaces and run folder stay in the snapshot
    live = {p for p in topology.our_prefixes() if p not in prefixes and topology.owner_alive(topology.read_state(p))}
    live_inodes = set().union(*[topology._ns_inodes(p) for p in live]) if live else set()
    pids |= {pid for pid, (_, _, line) in table.items()
             if any(f"{topology.RUN_DIR}/{p}/" in line for p in live) or (live_inodes and procs.netns_of(pid) in live_inodes)}
    # under pytest-xdist the unit tests run in sibling worker processes: what a sibling's test started
    # (a `chromedriver --version` of its own) is that test's to judge; what our own runs leave behind is
    # reparented to init, never below the controller, so it is still judged here
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pids |= procs.descendants(parents, os.getppid()) - mine
    probes = {ns for ns in topology.existing_namespaces() if (m := topology.PROBE_RE.match(ns))
              and int(m.group(1)) not in mine and Path(f"/proc/{m.group(1)}").exists()}
    # a live recording from the web of another's (record.WebNamespace): its namespace and its processes
    from plt_bench import recorder as record
    webns = {ns for ns in topology.existing_namespaces() if (m := record.WEB_NS_RE.fullmatch(ns))
             and int(m.group(1)) not in mine and procs.same_process(int(m.group(1)), m.group(2))}
    if webns:
        inodes = {f"net:[{os.stat(f'/run/netns/{ns}').st_ino}]" for ns in webns if Path(f"/run/netns/{ns}").exists()}
        pids |= {pid for pid, (_, _, line) in table.items()
                 if any(f"/run/netns/{ns} " in line + " " for ns in webns) or procs.netns_of(pid) in inodes}
    return {"prefixes": prefixes, "pids": pids, "probes": probes | webns, "alive": set(table)}


def _foreign_name(name: str, f: dict) -> bool:
    """A namespace or run-folder entry of a foreign testbed (pbN-client, pbN, worker-pbN.json) or probe."""
    if name in f["probes"]:
        return True
    from plt_bench import topology
    return topology.entry_prefix(name).split("-")[0] in f["prefixes"]


def _run_entries(run: list[str] | None, f: dict) -> list[str] | None:
    """Our run folder's entries that are no other plt-bench's: None when there is no folder, or when
    it holds only another's (it is theirs to remove); [] for an empty folder left behind."""
    if run is None:
        return None
    mine = [n for n in run if not _foreign_name(n, f) and (Path("/run/plt-bench") / n).exists()]
    return None if not mine and len(mine) != len(run) else mine


def system_state(ns: str | None = None) -> dict:
    """What plt-bench could change on this machine (or in namespace ns, a stand-in machine):
    namespaces, links and their qdiscs and GRO, iptables rules (filter and mangle), our run folder,
    our processes, sysctls (root only: iptables -S needs it). What another plt-bench owns (foreign():
    a live campaign beside the suite) is left out: a test judges what it made, not the machine. The
    lists are read first and judged after (foreign() then knows every process and testbed they name);
    what ended in between is not left behind."""
    def out(argv):
        argv = argv if ns is None else ["ip", "netns", "exec", ns, *argv]
        return subprocess.run(argv, capture_output=True, text=True).stdout
    # a testbed's own devices (pbN-...) are judged through its run folder and namespaces, which it makes
    # first and which name their owner: in the root namespace another plt-bench's veth or IFB passes
    # through while it builds or ends a testbed, before or after the folder says whose it is
    ours = (lambda dev: not re.match(r"pb\d+-", dev)) if ns is None else (lambda dev: True)
    links = sorted(d for d in (l.split(":")[1].strip().split("@")[0] for l in out(["ip", "-o", "link"]).splitlines())
                   if ours(d))
    # the emulator by its binary's path ('/linkem '): a campaign's own command line may say '--link linkem'
    procs = out(["pgrep", "-af", "caddy run|/linkem |chromedriver|tcpdump -i|iperf3 -s|quinnserve --config|"
                                 "dnsmasq --keep-in-foreground|plt_bench[.]pages[.]replayd|plt_bench[.]servers[.]think|geckodriver|"
                                 "firefox-esr|slirp4netns"])
    netns = [l.split()[0] for l in out(["ip", "netns", "list"]).splitlines()]
    run = sorted(p.name for p in Path("/run/plt-bench").glob("*")) if Path("/run/plt-bench").exists() else None
    etc = sorted(p.name for p in Path("/etc/netns").glob("pb*")) if ns is None else []  # a client's hosts, resolv.conf
    f = foreign()
    return {
        "netns": sorted(n for n in netns if not _foreign_name(n, f) and Path(f"/run/netns/{n}").exists()),
        "netns_etc": sorted(n for n in etc if not _foreign_name(n, f) and Path(f"/etc/netns/{n}").exists()),
        "links": links,
        "qdiscs": "\n".join(l for l in out(["tc", "qdisc", "show"]).splitlines()
                             if ours((l.split(" dev ")[1].split()[0]) if " dev " in l else "")),
        "gro": {dev: [l for l in out(["ethtool", "-k", dev]).splitlines() if l.startswith("generic-receive")]
                for dev in links},
        "iptables": out(["iptables", "-S"]) + out(["iptables", "-t", "mangle", "-S"]),
        "run": _run_entries(run, f),
        # the browsers' CPU budget groups (plt_bench.device.cgroup), in every hierarchy, but another run's
        "cgroups": sorted(g for g in _our_groups() if not _foreign_name(g[len("plt-bench."):], f)),
        "procs": sorted(l for l in procs.splitlines() if "pgrep" not in l and int(l.split()[0]) in f["alive"]
                        and int(l.split()[0]) not in f["pids"]),
        # the sysctls the testbed sets inside its namespaces: the host's must not move
        "sysctls": {k: out(["cat", f"/proc/sys/{k}"]).strip() for k in HOST_SYSCTLS},
        # a stand-in machine's replay addresses (a server machine's) and its route to them (a client's):
        # remote.REPLAY_NET, in RFC 2544's range, which nothing else here uses
        "replay_net": sorted(l for l in out(["ip", "-4", "-o", "addr"]).splitlines() + out(["ip", "route"]).splitlines()
                             if "198.18." in l) if ns is not None else [],
    }


def state_unchanged(before: dict, ns: str | None = None, settle_s: float = 10.0) -> dict:
    """system_state() once it equals `before`, or after settle_s the last one read (to be compared
    with `before` by the caller). Another plt-bench beside the suite makes and removes testbeds: one
    caught between its folder and its state file (its owner not written yet), or in its teardown, is
    not yet, or no longer, known as another's; it settles within a second or two either way, where
    what this test left behind stays."""
    deadline = time.monotonic() + settle_s
    now = system_state(ns)
    while now != before and time.monotonic() < deadline:
        time.sleep(0.5)
        now = system_state(ns)
    return now


def _our_groups() -> list[str]:
    from plt_bench.device import cgroup
    try:
        return cgroup.leftover_groups(cgroup.machine_layout())
    except (cgroup.CgroupError, OSError):
        return []


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
    parser.addoption("--max-unjudged", type=float, default=None, metavar="SHARE",
                     help="fail the run when more than this share (0.10: a tenth) of the integration tests that ran "
                          "left their claim unjudged (unjudged(): the machine refused it); scripts/test sets 0.10")
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


def pytest_runtest_setup(item):
    _UNJUDGED.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that passed with a claim left unjudged (unjudged()) is reported as skipped, its reasons
    shown: a pass means every claim was judged."""
    outcome = yield
    rep = outcome.get_result()
    if call.when != "call":
        return
    reasons, _UNJUDGED[:] = list(_UNJUDGED), []
    if reasons and rep.passed:
        rep.outcome = "skipped"
        rep.longrepr = (str(item.path), (item.location[1] or 0) + 1, UNJUDGED + "; ".join(reasons))




_COUNTS_OF: dict = {}  # "c": {"ran": integration tests that ran, "unjudged": their node ids}


def pytest_runtest_logreport(report):
    """Counts the integration tests that ran (passed, failed, or left unjudged) and the unjudged."""
    if report.when != "call" or "integration" not in report.nodeid.split("::")[0].split("/"):
        return
    counts = _COUNTS_OF.setdefault("c", {"ran": 0, "unjudged": []})
    counts["ran"] += 1
    if report.skipped and UNJUDGED in str(report.longrepr):
        counts["unjudged"].append(report.nodeid)


def unjudged_verdict(counts: dict, share: float | None) -> tuple[str, bool]:
    """(the line the summary prints, whether the run fails) for the unjudged integration tests (pure)."""
    ran, n = counts.get("ran", 0), len(counts.get("unjudged", []))
    line = f"unjudged: {n} of {ran} integration tests left their claim unjudged (the machine refused it)"
    fail = share is not None and ran > 0 and n > share * ran
    if share is not None:
        line += f"; at most {share:.0%} may be" + (": FAILED, the suite could not judge enough" if fail else "")
    return line, fail


_KEPT = pytest.StashKey[frozenset]()  # the live testbeds of ours the suite found at its start


def pytest_sessionstart(session):
    """Testbeds of ours that were there before the suite are not the suite's to judge, nor to
    remove: live ones (a running plt-bench's, one brought `up`) and abandoned ones (a run killed
    earlier, perhaps a colleague's, which they may still want to look at) alike. The header names the
    abandoned ones (`plt-bench clean` removes them); the end-of-suite check leaves all of them out,
    and every test cleans its own testbed alone (`clean --testbed N`)."""
    session.config.stash[_KEPT] = frozenset()
    if os.geteuid() != 0 or session.config.option.collectonly:
        return
    from plt_bench import topology
    there = topology.our_prefixes()
    abandoned = [p for p in there if not topology.read_state(p).get("up")
                 and not topology.owner_alive(topology.read_state(p))]
    if abandoned:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"plt-bench: testbeds abandoned before the suite, left as they are (not the suite's to judge or remove; "
            f"plt-bench clean removes them): {', '.join(abandoned)}", yellow=True)
    claims = list(topology.worker_claims())
    session.config.stash[_KEPT] = frozenset(there) | frozenset(claims) | frozenset(f"worker-{p}.json" for p in claims)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counts = _COUNTS_OF.get("c")
    if not counts:
        return
    line, fail = unjudged_verdict(counts, config.getoption("--max-unjudged"))
    terminalreporter.write_line(line, red=fail, yellow=bool(counts["unjudged"]) and not fail)
    for nodeid in counts["unjudged"]:
        terminalreporter.write_line(f"  {nodeid}")


def pytest_sessionfinish(session, exitstatus):
    """After the whole suite nothing of ours may remain (besides the live testbeds it found): fail
    the run if something does. More unjudged integration tests than --max-unjudged allows fail it too."""
    counts = _COUNTS_OF.get("c")
    if counts and unjudged_verdict(counts, session.config.getoption("--max-unjudged"))[1]:
        session.exitstatus = 1
    if os.geteuid() != 0 or session.config.option.collectonly:
        return
    from plt_bench import topology
    # the live testbeds found at the start, and another plt-bench's that started during the suite
    theirs = foreign(with_up=False)
    left = topology.leftovers(besides=session.config.stash.get(_KEPT, frozenset()) | frozenset(theirs["prefixes"]))
    left["namespaces"] = [n for n in left["namespaces"] if n not in theirs["probes"]]
    left["processes"] = [p for p in left["processes"] if p not in theirs["pids"]]
    if any(left.values()):
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"LEFTOVER testbed state after the suite: {left}", red=True)
        session.exitstatus = 1
