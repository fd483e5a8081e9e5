"""The netem backend, for real, on a machine whose kernel lacks sch_netem: every integration test
marked `vm` runs inside Debian's own kernel (scripts/netem-vm) on the netem backend, and this test
passes only if all of them ran and passed there.

A VM that cannot boot is a failure naming what is missing, never a skip. The one skip is where it
has nothing to add: this kernel has sch_netem, and the [netem] tests already ran on the host.
Under the VM's software emulation user space is 10-50x slower: those tests prove function (the
commands, the read-back, live delay/loss/jitter against the VM's own measured timing, an h3 trial
with its proof, the two-machine server placement with its link check, cleanup), never performance."""
import os
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

from plt_bench import link

from ..conftest import ROOT, UNJUDGED, unjudged

# (the trace tests ran here until 2026-11-26: a trace is linkem's on every kernel, so the VM added nothing)
VM_TESTS = ["tests/integration/test_link.py", "tests/integration/test_cli.py", "tests/integration/test_two_machines.py",
            "tests/integration/test_aqm.py", "tests/integration/test_origins.py", "tests/integration/test_think.py"]
# the vm tests that have nothing to do on netem (the kernel's: no emulator process to kill)
NOT_FOR_NETEM = {"test_a_dying_emulator_fails_the_trial_and_stops_the_next[netem]",
                 "test_a_linkem_snapshot_holds_the_worst_since_the_one_before[netem]",
                 # one protocol's trial through netem (h3), the emulation being slow
                 "test_500kb_under_delay_and_loss_proves_its_protocol[netem-h1-http/1.1]",
                 # verify on netem: the server-side placement's campaign (test_two_machines) runs it there
                 "test_verify_passes_a_true_link_and_catches_a_false_claim[netem]"}


def test_the_netem_backend_passes_inside_a_netem_kernel():
    if link.netem_available():
        pytest.skip("this kernel has sch_netem: the netem backend's tests ran on the host, as [netem]")
    junit = ROOT / ".tools" / "vm" / f"junit-{os.getpid()}.xml"
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    t0 = time.monotonic()
    r = subprocess.run([str(ROOT / "scripts" / "netem-vm"), str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest",
                        "-p", "no:cacheprovider", "-q", "-rA", "-m", "vm", "--link-backends", "netem",
                        f"--junitxml={junit}", *VM_TESTS], cwd=ROOT, capture_output=True, text=True, timeout=2700)
    wall = time.monotonic() - t0
    print(r.stdout[-6000:], r.stderr[-3000:], f"VM part: {wall:.0f} s", sep="\n")
    assert junit.is_file(), (f"the VM ran no tests (exit {r.returncode}); netem-vm said: {r.stderr[-2000:]} "
                             f"{r.stdout[-2000:]}")
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    slowest = sorted(((float(c.get("time") or 0), c.get("name")) for c in cases), reverse=True)[:12]
    print("slowest inside the VM:", *(f"  {t:7.1f} s  {name}" for t, name in slowest), sep="\n")  # where its time goes
    outcome, why = {}, {}
    for c in cases:
        kinds = {child.tag for child in c}
        skip = next((child.get("message") or "" for child in c if child.tag == "skipped"), None)
        outcome[c.get("name")] = ("failed" if kinds & {"failure", "error"} else
                                  "unjudged" if skip is not None and UNJUDGED in skip else
                                  "skipped" if skip is not None else "passed")
        if outcome[c.get("name")] == "unjudged":
            why[c.get("name")] = skip[:300]
        for child in c:  # each failure's own message, whole: the VM's output tail cuts them short
            if child.tag in ("failure", "error"):
                why[c.get("name")] = (child.get("message") or "")[:1500]
    junit.unlink()
    assert r.returncode == 0 and outcome, (r.returncode, why or r.stdout[-3000:])
    bad = {k: why.get(k, v) for k, v in outcome.items() if v == "failed"}
    assert not bad, bad
    skipped = {k for k, v in outcome.items() if v == "skipped"}
    assert skipped <= NOT_FOR_NETEM, f"skipped inside the VM: {skipped - NOT_FOR_NETEM}"
    for must in ("test_read_back_is_exactly_what_was_asked", "test_rtt_50ms_against_the_machines_own_timing",
                 "test_jitter_follows_its_distribution_live", "test_500kb_under_delay_and_loss_proves_its_protocol",
                 "test_closing_a_testbed_leaves_nothing",
                 "test_the_servers_side_shapes_with_netem_and_undoes_it_when_the_client_leaves",
                 "test_each_discipline_keeps_its_standing_delay_and_the_check_catches_a_false_claim",
                 "test_run_records_the_backend_that_shaped_and_clean_removes_a_killed_run",
                 "test_a_far_origin_sits_at_its_distance_the_others_at_the_link_s_and_the_trial_proves_both",
                 "test_think_200_holds_every_response_200_ms_proven_by_the_server_and_seen_by_the_browser"):
        assert any(k.startswith(must) and v in ("passed", "unjudged") for k, v in outcome.items()), (must, outcome)
    left = {k: why[k] for k, v in outcome.items() if v == "unjudged"}
    if left:  # the VM's tests that could not judge their claim: so is this one, for them
        unjudged(f"inside the VM, {len(left)} test(s) left their claim unjudged: {left}")
