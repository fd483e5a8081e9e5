"""Real page loads through the namespace testbed."""
import dataclasses
import os

import pytest

from plt_bench import cmd, link
from plt_bench.link import readback
from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Cell, Conditions, transfer_seconds
from plt_bench.cpu import BOUND_SHARE, cpu_list, own_cpus, pin_threads
from plt_bench.errors import LinkError
from plt_bench.pages import Page
from plt_bench.testbed import Setup, Testbed
from plt_bench.trial.run import run_cell_once
from plt_bench import pages

from ..conftest import machine_refused, machine_saturated
from .conftest import shaped, until_ok


FORCED = [("h3", "h3", "HTTP/3.0"), ("h2", "h2", "HTTP/2.0"), ("h1", "http/1.1", "HTTP/1.1")]


@pytest.mark.parametrize("size", [5000, 500_000])
@pytest.mark.parametrize("proto,hop,server_proto", FORCED)
def test_small_pages_load_over_the_forced_protocol(bed, store, campaign, proto, hop, server_proto, size):
    cond = shaped(bed, 100 * 10**6)
    t, reasons = until_ok(lambda i: run_cell_once(bed, store, campaign, 0, i, Cell(proto, Page(size), cond)))
    if machine_refused(t, reasons):
        return
    assert (t.status, t.reason) == ("ok", None), reasons
    assert t.next_hop_protocol == hop and t.server_proto == server_proto
    assert t.response_status == 200 and t.decoded_body_bytes == size == t.server_bytes
    assert 0 < t.ttfb_ms <= t.response_end_ms <= t.plt_ms
    assert t.connect_ms > 0  # no preconnect: the handshake is inside the measured load
    # the response's header block as the browser counted it (issue 36: 16 copies of Alt-Svc over TCP)
    assert 0 < t.transfer_bytes - t.encoded_body_bytes < HEADER_BOUND_BYTES, (t.transfer_bytes, t.encoded_body_bytes)


def test_a_page_of_render_blocking_scripts_paints_after_every_script_came_proven(bed, store, campaign):
    """The scripts kind (js5x10KB, pages.scripts), through the same trial as every kind: each script
    proven at both ends over h3, and nothing painted before the last of them had come (they block
    the parser), nor the load event fired."""
    page = pages.parse_page("js5x10KB")
    bed.sites.ensure([page])
    cond = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=50)
    if bed.conditions != cond:
        bed.set_conditions(cond)
    t, reasons = until_ok(lambda i: run_cell_once(bed, store, campaign, 0, i, Cell("h3", page, cond)))
    if machine_refused(t, reasons):
        return
    assert (t.status, t.reason, t.page, t.objects, t.objects_ok) == ("ok", None, "js5x10KB", 5, 5), reasons
    js = [r for r in t.resources if r["initiatorType"] == "script"]
    assert sorted(pages.url_path(r["name"]) for r in js) == sorted(page.object_uris())
    assert all(r["nextHopProtocol"] == "h3" and r["decodedBodySize"] == 10_000 for r in js)
    # (the first paint may follow the load event: with no image left to wait for, the load ends first)
    assert max(r["responseEnd"] for r in js) <= min(t.fcp_ms, t.plt_ms), (t.fcp_ms, [r["responseEnd"] for r in js])


@pytest.mark.parametrize("proto,hop,server_proto", FORCED)
def test_a_multi_object_page_proves_every_object_over_the_forced_protocol(bed, store, campaign, proto, hop,
                                                                          server_proto):
    """50 images of 5 KB at 10 Mbit/s, 100 ms (issue 28's check): the load event waited for every
    image, and each came whole over the asked protocol in the browser's Resource Timing and in
    Caddy's log; HTTP/3 and HTTP/2 multiplexed them on one connection, HTTP/1.1 used several (at
    most six per host)."""
    page = Page(5000, 50)
    bed.sites.ensure([page])
    cond = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=100)
    if bed.conditions != cond:
        bed.set_conditions(cond)
    t, reasons = until_ok(lambda i: run_cell_once(bed, store, campaign, 0, i, Cell(proto, page, cond)))
    if machine_refused(t, reasons):
        return
    assert (t.status, t.reason) == ("ok", None), reasons
    assert (t.page, t.objects, t.object_bytes, t.objects_ok) == ("50x5KB", 50, 5000, 50)
    assert t.size_bytes == page.total_bytes and t.decoded_body_bytes == page.html_bytes == t.server_bytes
    assert t.next_hop_protocol == hop and t.server_proto == server_proto
    imgs = [r for r in t.resources if r["initiatorType"] == "img"]
    assert sorted(pages.url_path(r["name"]) for r in imgs) == sorted(page.object_uris())
    assert all(r["nextHopProtocol"] == hop and r["decodedBodySize"] == 5000 for r in imgs)
    assert max(r["responseEnd"] for r in imgs) <= t.plt_ms  # the load event waited for every object
    if proto in ("h3", "h2"):
        assert t.connections == 1, t.connections
    else:
        assert 2 <= t.connections <= 6, t.connections
    print(f"\n{proto}: 50x5KB at 10 Mbit/s, 100 ms: PLT {t.plt_ms:.0f} ms on {t.connections} connection(s)")
    assert store.trials([campaign])[-1] == t  # stored whole, resources and all


@pytest.mark.parametrize("proto", ["h3", "h2", "h1"])
def test_at_200ms_the_handshakes_take_the_round_trips_their_protocols_need(bed, store, campaign, proto):
    """5KB at RTT 200 ms: TCP + TLS 1.3 (h2 as h1) connects in 2 round trips and has the page's first
    byte after 3; QUIC in 1 and after 2 (protocols.Protocol). The figures are printed beside the need."""
    from plt_bench import protocols
    cond = Conditions(100 * 10**6, 100 * 10**6, rtt_ms=200)
    if bed.conditions != cond:
        bed.set_conditions(cond)
    t, reasons = until_ok(lambda i: run_cell_once(bed, store, campaign, 0, i, Cell(proto, Page(5000), cond)))
    if machine_refused(t, reasons):
        return
    assert t.status == "ok", reasons
    need = protocols.get(proto)
    connect, first = t.connect_ms / 200, t.ttfb_ms / 200
    print(f"\n{proto} at RTT 200 ms: connect {connect:.2f} RTT (need {need.connect_rtts}), first byte {first:.2f} RTT "
          f"(need {need.first_byte_rtts})")
    within = need.connect_rtts <= connect < need.connect_rtts + 0.5 and need.first_byte_rtts <= first < need.first_byte_rtts + 0.5
    if not within and machine_saturated(t):  # late beside another campaign: the machine's answer, not the protocol's
        return
    assert within, (connect, first, t.cpu_bound)


def test_quic_with_udp_blocked_is_a_failed_trial_not_an_exception(bed, store, campaign):
    cond = shaped(bed, 100 * 10**6)
    rule = ["FORWARD", "-p", "udp", "--dport", "443", "-j", "DROP"]
    cmd.run(["iptables", "-I", *rule], ns=bed.plan.router_ns)
    try:
        t = run_cell_once(bed, store, campaign, 0, 0, Cell("h3", Page(5000), cond), timeout_s=30)
    finally:
        cmd.run(["iptables", "-D", *rule], ns=bed.plan.router_ns)
    assert t.status == "failed" and t.plt_ms is None
    assert t.reason == "error page: ERR_QUIC_PROTOCOL_ERROR", t.reason
    stored = store.trials([campaign])[-1]
    assert stored.status == "failed" and stored.reason == t.reason and stored == t


@pytest.mark.parametrize("proto", ["h3", "h1"])
def test_10mb_at_10mbit_is_close_to_the_payload_ideal(bed, store, campaign, proto):
    cond = shaped(bed, 10 * 10**6)
    t, reasons = until_ok(lambda i: run_cell_once(bed, store, campaign, 0, i, Cell(proto, Page(10**7), cond)))
    if machine_refused(t, reasons):
        return
    assert t.status == "ok", reasons
    ratio = t.plt_ms / 1000 / transfer_seconds(10**7, 10 * 10**6)
    if machine_saturated(t):  # others held the machine's CPUs: neither the ratio nor the limit is the link's
        return
    assert 1.0 <= ratio <= 1.15, f"{proto}: PLT {t.plt_ms:.0f} ms is {ratio:.3f} x the ideal"
    assert t.cpu_bound is None, (t.cpu_bound, t.cpu_bound_share, t.cpu_json)  # the link limits it, not the CPU


def test_a_load_its_cpu_holds_is_flagged_cpu_bound_and_says_by_what(link_backend, store, campaign):
    """A load the CPU holds is flagged, with the role (or the machine) that held it. Held by
    construction, not by the machine's speed: a testbed of its own pinned to one core (as a cluster
    worker pins itself), where Caddy's QUIC alone costs ~7 ms a MB (docs/results.md) and Chromium's
    network service about as much, so 50 MB over h3 at 1 Gbit/s (0.4 s on the wire) needs more than
    that core. (Unpinned, Chromium's QUIC held 100 MB to 230-360 Mbit/s on this 2-core machine, but
    CI's machine carried it at 533 Mbit/s with nothing saturated: a machine's speed is a benchmark's
    figure, not a test's claim.) test_10mb_at_10mbit_is_close_to_the_payload_ideal holds the other
    half: a load the link holds is not flagged."""
    import json
    mine = own_cpus()
    pin_threads(mine[-1:])
    try:
        with Testbed(Setup(PROJECT_ROOT / "sites", link=link_backend)) as one_core:
            page = Page(5 * 10**7)
            one_core.sites.ensure([page])
            cond = shaped(one_core, 10**9)
            t = run_cell_once(one_core, store, campaign, 0, 0, Cell("h3", page, cond))
    finally:
        pin_threads(mine)
    cpu = json.loads(t.cpu_json) if t.cpu_json else {}
    seen = (t.status, t.reason, t.plt_ms, t.cpus,
            {k: (cpu.get(k) or {}).get("saturated_s") for k in ("sampler", "server_sampler")})
    assert t.status == "ok", seen
    assert t.cpu_bound and t.cpu_bound_share >= BOUND_SHARE, seen
    # one core's state is the machine's while pinned: the runner judged that core alone
    assert t.cpus == cpu_list(mine[-1:]), seen


@pytest.mark.parametrize("proto", ["h3", "h1"])
def test_cpu_per_role_is_stored_with_each_trial(bed, store, campaign, proto):
    import json
    cond = shaped(bed, 100 * 10**6)
    t, reasons = until_ok(lambda i: run_cell_once(bed, store, campaign, 0, i, Cell(proto, Page(10**7), cond)))
    if machine_refused(t, reasons):
        return
    assert t.status == "ok", reasons
    full = json.loads(t.cpu_json)
    cpu = full["roles"]
    for r in ("browser", "renderer", "network", "chromedriver", "caddy"):
        assert r in cpu, (r, cpu)
    # loading and parsing 10 MB costs measurable CPU in the renderer, the network service and, over QUIC
    # (in user space: about 7 ms a MB, docs/results.md), Caddy. Over TCP Caddy spends about 1.5 ms a MB,
    # 15 ms here, a step and a half of /proc's 10 ms (CLK_TCK 100): an h1 trial read 0 in a clean-clone run
    # of the suite and one of 7 reruns failed alike (2026-11-26)
    assert cpu["renderer"]["user_s"] + cpu["renderer"]["system_s"] > 0.01
    assert cpu["network"]["user_s"] + cpu["network"]["system_s"] > 0.01
    if proto == "h3":
        assert cpu["caddy"]["user_s"] + cpu["caddy"]["system_s"] > 0.005
    assert all(v.get("user_s", 0) >= 0 and v.get("system_s", 0) >= 0 for v in cpu.values())
    # the browser's start-up is kept apart, not charged to the page: a fresh browser's under "launch", a
    # kept browser's (started for an earlier trial) nowhere in this trial (the roles count its processes'
    # growth from the navigation on)
    if t.browser_start == "kept":
        assert full["launch"] is None, full
    else:
        assert full["launch"]["browser"]["user_s"] + full["launch"]["browser"]["system_s"] > 0.01
    assert full["sampler"]["samples"] >= 2 and full["server_sampler"]["samples"] >= 2


def test_link_read_back_sees_what_the_kernel_has(bed):
    shaped(bed, 10 * 10**6)
    state = readback.read_direction(bed.plan.router_ns, bed.plan.down_if)
    assert state.root_kind == "htb" and state.shaped_rate_bps == 10**7
    # change the rate behind the testbed's back: verification must notice
    classid = [c for c, v in readback.parse_htb_classes(
        cmd.run(["tc", "class", "show", "dev", bed.plan.down_if], ns=bed.plan.router_ns).stdout).items()
        if v["rate_bps"] == 10**7][0]
    cmd.run(["tc", "class", "change", "dev", bed.plan.down_if, "classid", classid,
             "htb", "rate", "20mbit", "ceil", "20mbit"], ns=bed.plan.router_ns)
    try:
        with pytest.raises(LinkError, match="asked for 10000000"):
            bed.link.verify(bed.conditions)
    finally:
        bed.conditions = None  # force a fresh apply for the next test


def test_netem_detection_and_metadata(bed):
    m = bed.metadata()
    assert m["link_backend"] == bed.link.backend and isinstance(m["netem_available"], bool)
    assert m["link_backend"] == link.resolve("embedded", "auto", [], link.Capabilities(m["netem_available"])).backend
    assert m["congestion_control"] == "cubic" and m["caddy_version"] and m["chromium"].startswith("Chromium")
    assert m["chromedriver"].startswith("ChromeDriver") and m["kernel"] and m["tcconfig"] == "0.30.1"
    assert "git_commit" in m and "git_dirty" in m
    # every key field this testbed sets is written (issue 60: browser_sandbox was key metadata that no
    # campaign's metadata held, so sandboxed campaigns pooled with unsandboxed ones): all but Firefox's and
    # the second server's, which a testbed of Chromium and Caddy does not run
    from plt_bench.metadata import KEY_FIELDS
    unset = {"firefox", "geckodriver", "quinnserve_version"}
    assert [k for k in KEY_FIELDS if k not in unset and m.get(k) in (None, "")] == [], m
    assert (m["browser_sandbox"], m["browser_start"], m["discovery"]) == (bed.setup.browser_sandbox,
                                                                          bed.setup.browser_start, bed.setup.discovery)


def _browsers_of(bed, profile_dir: str) -> list[int]:
    """Processes in the client namespace whose command line names this profile folder."""
    from plt_bench import procs
    from plt_bench.topology import pids_in
    return [p for p in pids_in(bed.plan.client_ns) if profile_dir in (procs.cmdline(p) or "")]


@pytest.fixture
def fresh_browsers(bed):
    """The session's testbed with --browser-start fresh for one test (kept is the default, its own
    test in test_browser_start.py); every browser of either mode ended before and after."""
    bed.discard_prepared()
    setup, bed.setup = bed.setup, dataclasses.replace(bed.setup, browser_start="fresh")
    try:
        yield bed
    finally:
        bed.discard_prepared()
        bed.setup = setup


def test_the_next_browser_starts_early_fresh_and_alone(fresh_browsers, store, campaign):
    """Issue 27 (--browser-start fresh): the next trial's browser is started while the last one is
    judged and stored. It is a fresh chromedriver + Chromium with its own profile, idle on about:blank;
    the load for the same protocol and page takes it (prelaunched, the idle gate after its launch), and
    any other load, a change of conditions, or the end ends it: its processes and profile are gone."""
    bed = fresh_browsers
    shaped(bed, 100 * 10**6)  # the link the loads below run on
    page = Page(5000)
    bed.prepare("h3", page)
    prepared = str(bed.plan.run_dir / "profiles" / bed.worker.ready[1])
    ans, uri = bed.load("h3", page, 30, gate=True)
    assert ans.get("prelaunched") is True and ans["launch_s"] > 0, ans
    assert set(ans["gate"]) >= {"busy_pct", "idle_wait_s", "load1"}, ans
    assert ans["nav"]["nextHopProtocol"] == "h3" and uri.endswith(prepared.rsplit("/", 1)[1])
    assert not _browsers_of(bed, prepared) and not os.path.exists(prepared)  # gone with the trial
    # a load for another protocol does not take it: it is ended, and the load starts its own browser
    bed.prepare("h1", page)
    other = str(bed.plan.run_dir / "profiles" / bed.worker.ready[1])
    bed.worker.settle()  # its launch is done: it idles in the namespace
    assert _browsers_of(bed, other)
    ans, _ = bed.load("h3", page, 30)
    assert not ans.get("prelaunched") and ans["nav"]["nextHopProtocol"] == "h3", ans
    assert not _browsers_of(bed, other) and not os.path.exists(other)
    # a change of conditions ends it too, before the link changes
    bed.prepare("h1", page)
    third = str(bed.plan.run_dir / "profiles" / bed.worker.ready[1])
    bed.set_conditions(Conditions(50 * 10**6, 50 * 10**6))
    assert not _browsers_of(bed, third) and not os.path.exists(third) and bed.worker.ready is None
    # through the runner: the next cell's browser starts early, and the trial it serves is proven as any
    a = run_cell_once(bed, store, campaign, 0, 0, Cell("h1", page, bed.conditions), gate=True,
                      next_cell=Cell("h1", page, bed.conditions))
    assert bed.worker.ready is not None and bed.worker.ready[0][0] == "h1"
    b = run_cell_once(bed, store, campaign, 1, 1, Cell("h1", page, bed.conditions), gate=True)
    for t in (a, b):
        assert t.status == "ok" or t.reason.startswith("link emulator"), t.reason
        assert t.busy_pct is not None and t.idle_wait_s is not None  # the gate's figures, stored
    assert a.url != b.url and bed.worker.ready is None


# a response's header block over TCP, without the 16 copies of Alt-Svc Caddy wrote (about 650 bytes
# over h1 before, about 230 after)
HEADER_BOUND_BYTES = 400


@pytest.mark.parametrize("version", ["--http1.1", "--http2"])
def test_a_response_carries_one_alt_svc_entry_and_a_header_block_of_a_real_server_s_size(bed, version):
    """Issue 36: every response carried 16 copies of its Alt-Svc entry (one per origin listener),
    8% of a 5 KB object over h1. A page and an object over h1 and h2: one entry, a bounded block.
    (h3 responses carry none; the h3 trial's header bytes are bounded in test_small_pages_...)"""
    shaped(bed, 100 * 10**6)
    bed.sites.ensure([Page(5000, objects=2)])
    for path in ("/index_5KB.html", "/obj_5KB.png"):
        r = cmd.run(["curl", "-sk", version, "--resolve", f"plt.test:443:{bed.plan.server_ip}", "-D", "-", "-o",
                     "/dev/null", f"https://plt.test{path}"], ns=bed.plan.client_ns)
        head = r.stdout.replace("\r\n", "\n").split("\n\n")[0]
        alt = [line for line in head.split("\n") if line.lower().startswith("alt-svc:")]
        assert alt == [alt[0]] and alt[0].lower().count("h3=") == 1, head
        assert len(head.encode()) < HEADER_BOUND_BYTES, head
