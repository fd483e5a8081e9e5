"""The link's pure parts, without root: the command builders (tcconfig's own, dry run, in-process),
the read-back parsers and checks, and the choice of backend and placement."""
import re

import pytest

from plt_bench import link, topology
from plt_bench.conditions import Conditions
from plt_bench.errors import LinkError, UsageError
from plt_bench.link import commands, origins, readback
from plt_bench.link.base import router_directions
from plt_bench.link.aqm import parse as aqm_parse

HTB_CLASSES = """class htb 1cc1:1 root prio 0 rate 10Gbit ceil 10Gbit burst 0b cburst 0b 
class htb 1cc1:2 root prio 0 rate 123456Kbit ceil 123456Kbit burst 1604b cburst 1604b 
"""
FILTERS = """filter parent 1cc1: protocol ip pref 5 u32 chain 0 
filter parent 1cc1: protocol ip pref 5 u32 chain 0 fh 800: ht divisor 1 
filter parent 1cc1: protocol ip pref 5 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 1cc1:2 not_in_hw 
"""
QDISCS = """qdisc htb 1cc1: root refcnt 3 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000
qdisc netem 2114: parent 1cc1:2 limit 1000
"""


def test_tc_parsers():
    assert readback.parse_tc_rate("100Mbit") == 10**8 and readback.parse_tc_rate("8Kbit") == 8000
    assert readback.parse_tc_rate("1Gbit") == 10**9 and readback.parse_tc_rate("2500bit") == 2500
    classes = readback.parse_htb_classes(HTB_CLASSES)
    assert classes["1cc1:2"]["rate_bps"] == 123_456_000 and classes["1cc1:1"]["rate_bps"] == 10**10
    assert readback.parse_filter_flowids(FILTERS) == ["1cc1:2"]
    q = readback.parse_qdiscs(QDISCS)
    assert q[0] == {"kind": "htb", "handle": "1cc1:", "parent": "root", "default": 1}
    assert q[1]["kind"] == "netem" and q[1]["limit"] == 1000


def test_netem_read_back_parser_and_check():
    text = ("qdisc htb 1a1a: root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000\n"
            "qdisc netem 2114: parent 1a1a:2 limit 4129 delay 56ms  10ms loss 1%\n"
            "qdisc pfifo 10: parent 1:1 limit 64p\n")
    q = readback.parse_qdiscs(text)
    assert q[1] == {"kind": "netem", "handle": "2114:", "parent": "1a1a:2", "limit": 4129, "delay_ms": 56.0,
                    "jitter_ms": 10.0, "loss_pct": 1.0}
    assert q[2]["limit"] == 64
    state = readback.DirectionState("pb0-rc", "htb", 10**7, 10**7, ("netem",), None, q[1])
    readback.check_netem(state, 56, 10, 1, 4129, "downlink")
    for args, msg in (((50, 10, 1, 4129), "delay"), ((56, 5, 1, 4129), "jitter"), ((56, 10, 2, 4129), "loss"),
                      ((56, 10, 1, 100), "limit")):
        with pytest.raises(LinkError, match=msg):
            readback.check_netem(state, *args, "downlink")
    with pytest.raises(LinkError, match="sch_netem"):
        readback.check_netem(readback.DirectionState("pb0-rc", "htb", 10**7, 10**7, ()), 56, 10, 1, 4129, "downlink")


def test_check_rate_and_queue_trust_only_the_kernel():
    ok = readback.DirectionState("pb0-rc", "htb", 10**8, 10**8, ("pfifo",), 200)
    readback.check_rate(ok, 10**8, "downlink")
    readback.check_queue(ok, 200, "downlink")
    with pytest.raises(LinkError, match="asked for"):
        readback.check_rate(ok, 10**7, "downlink")
    with pytest.raises(LinkError, match="queue of 100 packets"):
        readback.check_queue(ok, 100, "downlink")
    with pytest.raises(LinkError, match="no htb rate"):  # a tool said 0, the kernel has nothing
        readback.check_rate(readback.DirectionState("pb0-rc", "noqueue", None, None, ()), 10**8, "downlink")
    with pytest.raises(LinkError, match="should be unshaped"):
        readback.check_rate(ok, None, "downlink")
    readback.check_rate(readback.DirectionState("pb0-rc", "noqueue", None, None, ()), None, "downlink")
    # delay without a rate: the class that carries netem limits nothing (tcconfig: 32 Gbit/s, ours: 10)
    for unlimited in (32 * 10**9, commands.UNSHAPED_HTB_BPS):
        readback.check_rate(readback.DirectionState("pb0-rc", "htb", unlimited, unlimited, ("netem",)), None, "x")
    with pytest.raises(LinkError, match="should be unshaped"):
        readback.check_rate(readback.DirectionState("pb0-rc", "htb", 10**9, 10**9, ("netem",)), None, "x")


def _only(cmds, pred):
    found = [c for c in cmds if pred(c)]
    assert len(found) == 1, cmds
    return " ".join(found[0])


@pytest.mark.parametrize("cond", [
    Conditions(10**7, 10**7),
    Conditions(500_000, 500_000, rtt_ms=50),
    Conditions(10**8, 10**8, rtt_ms=112, jitter_ms=10, jitter_dist="normal"),
    Conditions(10**8, 10**8, rtt_ms=112, jitter_ms=10),  # uniform
    Conditions(10**9, 10**9, rtt_ms=100, loss_pct=1),
    Conditions(10**7, 10**6, rtt_ms=40, jitter_ms=5, loss_pct=7, loss_direction="down", queue_pkts=500),
    Conditions(None, None, rtt_ms=20, loss_pct=0.1),
])
def test_tcconfig_builds_every_condition(cond):
    """tcconfig itself (dry run, in-process), per router direction: rate, burst, delay (RTT/2), jitter and
    its distribution, loss, limit; programs by name, every command for that device only."""
    for what, dev, rate, loss in router_directions(topology.Plan(0), cond):
        cmds = commands.tcset_commands(dev, rate, cond.delay_ms, cond.jitter_ms, cond.jitter_dist, loss,
                                       cond.queue_for(rate))
        assert all(c[0] == "tc" and dev in c for c in cmds), cmds
        assert not any(c[2] == "del" for c in cmds)  # removal is tcdel's, run first
        if rate is not None:
            cls = _only(cmds, lambda c: c[:3] == ["tc", "class", "add"] and "ceil" in c)
            m = re.search(r"rate (\S+?)Kbit ceil (\S+?)Kbit burst (\d+)b", cls, re.I)
            assert float(m.group(1)) * 1000 == rate and float(m.group(2)) * 1000 == rate
            assert int(m.group(3)) >= commands.htb_burst_bytes(rate)
        n = _only(cmds, lambda c: "netem" in c)
        if cond.delay_ms:
            assert f"delay {cond.delay_ms:.1f}ms" in n
        if cond.jitter_ms:
            assert f" {cond.jitter_ms:.1f}ms" in n
            assert ("distribution normal" in n) == (cond.jitter_dist == "normal")  # uniform: netem's default
        assert "distribution" not in n or cond.jitter_dist == "normal"
        assert (re.search(rf"loss {loss:.6f}%", n) is not None) if loss else "loss" not in n
        assert f"limit {cond.queue_for(rate)}" in n


def test_tcdel_removes_only_the_device_it_is_given():
    cmds = commands.tcdel_commands("pb0-rc")
    assert cmds and all("pb0-rc" in c for c in cmds)
    assert ["tc", "qdisc", "del", "dev", "pb0-rc", "root"] in cmds


def test_one_htb_shape_with_quantum_burst_and_leaf():
    cmds = commands.htb_commands("pb0-rc", 10**9, commands.pfifo_leaf(4129))
    assert cmds[0] == ["tc", "qdisc", "add", "dev", "pb0-rc", "root", "handle", "1:", "htb", "default", "1"]
    cls = " ".join(cmds[1])
    assert "rate 1000000000bit ceil 1000000000bit quantum 1514 burst 62500b cburst 62500b" in cls
    assert cmds[2][:8] == ["tc", "qdisc", "add", "dev", "pb0-rc", "parent", "1:1", "handle"]
    assert cmds[2][-3:] == ["pfifo", "limit", "4129"]
    assert commands.htb_burst_bytes(10**7) == 3028 and commands.htb_burst_bytes(10**9) == 62500
    netem = commands.htb_commands("pb0-ifb", None, commands.netem_leaf(25, 2, "normal", 1, 300))
    assert "rate 10000000000bit" in " ".join(netem[1])  # unshaped class: delay only
    assert netem[2][-10:] == ["netem", "limit", "300", "delay", "25000us", "2000us", "distribution", "normal",
                              "loss", "1%"]
    assert commands.netem_leaf(25, 2, "uniform", 0, 300) == ["netem", "limit", "300", "delay", "25000us", "2000us"]


def test_router_nfqueue_rule_never_bypasses():
    rule = commands.router_nfqueue_rule("pb0-rs", 0)
    assert rule == ["-i", "pb0-rs", "-j", "NFQUEUE", "--queue-num", "0"]


def test_linkem_argv_carries_every_condition(tmp_path):
    from plt_bench.link.linkem import linkem_argv
    cond = Conditions(10**7, 10**7, rtt_ms=100, jitter_ms=10, jitter_dist="normal", loss_pct=1.5,
                      loss_direction="down", reorder=False)
    argv = linkem_argv("/x/linkem", cond, tmp_path / "s.json", seed=7)
    assert argv[0] == "/x/linkem"
    dirs = [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
    assert dirs == ["down:queue=0,delay_us=50000,jitter_us=10000,dist=normal,loss=0.015,reorder=0",
                    "up:queue=1,delay_us=50000,jitter_us=10000,dist=normal,loss=0,reorder=0"]
    assert argv[argv.index("--seed") + 1] == "7" and argv[argv.index("--maxlen") + 1] == "65536"
    assert int(argv[argv.index("--fifo") + 1]) > 0
    assert argv[argv.index("--cpu-dma-latency-us") + 1] == "0"  # idle CPUs wake at once while linkem runs


def test_linkem_argv_gives_linkem_the_rate_and_the_queue_discipline_with_aqm(tmp_path):
    """--aqm: linkem holds each constant rate's bottleneck itself (rate_bps, the queue's limit), under
    the discipline with its parameters in linkem's units; ECN where asked. Without --aqm, none."""
    from plt_bench.link.linkem import linkem_argv, needs_linkem
    cond = Conditions(20 * 10**6, 5 * 10**6, rtt_ms=50, aqm=aqm_parse("codel:target=10ms"), ecn=True)
    dirs = [a for i, a in enumerate(linkem_argv("l", cond, tmp_path / "s.json")) if i and a.startswith(("down:", "up:"))]
    q_down, q_up = cond.queue_for(20 * 10**6), cond.queue_for(5 * 10**6)
    assert dirs == [f"down:queue=0,delay_us=25000,jitter_us=0,dist=uniform,loss=0,reorder=1,rate_bps=20000000,"
                    f"limit={q_down},aqm=codel,target_us=10000,interval_us=100000,ecn=1",
                    f"up:queue=1,delay_us=25000,jitter_us=0,dist=uniform,loss=0,reorder=1,rate_bps=5000000,"
                    f"limit={q_up},aqm=codel,target_us=10000,interval_us=100000,ecn=1"]
    assert needs_linkem(Conditions(10**7, 10**7, aqm=aqm_parse("droptail")))  # a rate alone, under linkem's own queue
    assert not needs_linkem(Conditions(10**7, 10**7))
    # the router's egress has no htb for a direction whose bottleneck is linkem's
    from plt_bench.link.base import router_directions
    plan = type("P", (), {"down_if": "d", "up_if": "u"})()
    assert [r[2] for r in router_directions(plan, cond)] == [None, None]
    assert [r[2] for r in router_directions(plan, Conditions(10**7, 10**7))] == [10**7, 10**7]
    assert commands.ce_mark_rule() == ["-m", "mark", "--mark", "0x4345", "-j", "TOS", "--set-tos", "0x03/0x03"]


def test_a_queue_discipline_is_parsed_to_its_canonical_text_and_linkems_keys():
    from plt_bench.link import aqm
    a = aqm.parse("CoDel:interval=200ms")
    assert (a.name, a.get("target"), a.get("interval"), a.text) == ("codel", 5.0, 200.0, "codel:interval=200ms")
    assert a.linkem_keys() == ["aqm=codel", "target_us=5000", "interval_us=200000"]
    assert aqm.parse("fq_codel:flows=256").linkem_keys()[-2:] == ["flows=256", "quantum=1514"]
    assert aqm.parse("pie").target_ms == 15.0 and aqm.parse("droptail").target_ms is None
    assert aqm.parse("codel:target=5ms").text == "codel"  # the defaults are not written
    assert aqm.parse_list(None) == (None,) and [a.text for a in aqm.parse_list("droptail, pie")] == ["droptail", "pie"]
    assert Conditions(10**7, 10**7, aqm=aqm.parse("pie"), ecn=True).label == "10mbit pie+ecn"
    for bad, msg in [("codel:flows=2", "not a parameter of codel"), ("codel:target", "not a parameter"),
                     ("pie:burst=20s", "out of range"), ("codel:target=1ms:target=2ms", "given twice")]:
        with pytest.raises(UsageError, match=msg):
            aqm.parse(bad)
    with pytest.raises(UsageError, match="codel is given twice"):
        aqm.parse_list("codel,codel:target=5ms")


def test_the_aqm_check_judges_the_standing_delay_against_the_target_and_fq_codel_s_sparse_flow():
    from plt_bench.link.verify import check_aqm
    codel = Conditions(20 * 10**6, 20 * 10**6, rtt_ms=50, aqm=aqm_parse("codel"))
    standing, sparse = check_aqm(codel, 20 * 10**6, 2.7, [52.7] * 5, [50.0] * 5)
    assert (standing["ok"], standing["expected"], sparse["ok"]) == (True, 5.0, None)  # one queue: shown only
    assert check_aqm(codel, 20 * 10**6, 40.0, [], [])[0]["ok"] is False  # a FIFO's delay is no CoDel's
    assert check_aqm(codel, 20 * 10**6, 0.6, [], [])[0]["ok"] is True  # below its target: CoDel did not need to act
    fq = Conditions(20 * 10**6, 20 * 10**6, rtt_ms=50, aqm=aqm_parse("fq_codel"))
    assert [c["ok"] for c in check_aqm(fq, 20 * 10**6, 2.4, [50.1] * 5, [50.0] * 5)] == [True, True]
    assert check_aqm(fq, 20 * 10**6, 2.4, [60.0] * 5, [50.0] * 5)[1]["ok"] is False  # the sparse flow waited 10 ms
    drop = Conditions(20 * 10**6, 20 * 10**6, rtt_ms=50, aqm=aqm_parse("droptail"))
    buffer_ms = drop.queue_for(20 * 10**6) * 1514 * 8 / 20e6 * 1000
    got = check_aqm(drop, 20 * 10**6, 33.4, [81.5] * 5, [50.0] * 5)[0]
    assert got["ok"] and got["expected"] == round(buffer_ms, 2)
    assert check_aqm(drop, 20 * 10**6, 2.0, [], [])[0]["ok"] is False  # an empty buffer is no droptail under load
    assert check_aqm(codel, 20 * 10**6, None, [], [])[0]["ok"] is False  # not read: failed, never passed
    ecn = Conditions(20 * 10**6, 20 * 10**6, rtt_ms=50, aqm=aqm_parse("codel"), ecn=True)
    assert check_aqm(ecn, 20 * 10**6, 2.5, [], [], marks=2, drops=0)[-1]["ok"] is True
    assert check_aqm(ecn, 20 * 10**6, 2.5, [], [], marks=0, drops=5)[-1]["ok"] is False  # dropped: no ECN seen
    # a few drops beside many marks: the flow's retransmissions, sent Not-ECT (RFC 3168 6.1.5)
    assert check_aqm(ecn, 5 * 10**6, 6.5, [], [], marks=58, drops=9)[-1]["ok"] is True
    assert check_aqm(ecn, 5 * 10**6, 6.5, [], [], marks=3, drops=3)[-1]["ok"] is False
    from plt_bench.topology import Plan
    assert Plan(7).ecn_commands(True) == [("pb7-client", ["sysctl", "-qw", "net.ipv4.tcp_ecn=1"]),
                                          ("pb7-server", ["sysctl", "-qw", "net.ipv4.tcp_ecn=1"])]
    assert {argv[-1] for _, argv in Plan(7).ecn_commands(False)} == {"net.ipv4.tcp_ecn=2"}  # the kernel's default


def test_a_rate_under_a_discipline_is_judged_by_what_the_receiver_s_interface_took():
    from plt_bench.link.counters import received_ip_bytes
    from plt_bench.link.verify import check_udp_rate
    assert check_udp_rate("downlink", 20 * 10**6, 19.9e6)["ok"] is True
    assert check_udp_rate("uplink", 20 * 10**6, 18.0e6)["ok"] is False  # 10% short
    assert check_udp_rate("uplink", 20 * 10**6, 24.0e6)["ok"] is False  # the offered 1.2 x passed unshaped
    assert check_udp_rate("uplink", 20 * 10**6, None)["ok"] is False
    text = "Inter-|   Receive\n face |bytes packets\n  pb3-c: 1514000 1000 0 0 0 0 0 0 2000 2 0 0 0 0 0 0\n"
    assert received_ip_bytes(text, "pb3-c") == 1514000 - 14 * 1000  # an Ethernet header a packet off


def test_a_trial_s_link_counters_carry_what_its_discipline_did():
    from plt_bench.trial.run import link_delta
    def snap(drops, marks, dq, soj):
        b = {"aqm": "codel", "aqm_drops": drops, "marks": marks, "overlimit_drops": 0, "dequeued": dq,
             "sojourn_sum_us": soj}
        return {"cpu_s": 0, "dirs": {"down": {"packets": dq, "released": dq, "bottleneck": b}}}
    d = link_delta(snap(1, 2, 100, 1000.0), snap(4, 2, 300, 5000.0))["dirs"]["down"]["bottleneck"]
    assert d == {"aqm": "codel", "aqm_drops": 3, "marks": 0, "overlimit_drops": 0, "dequeued": 200,
                 "sojourn_mean_us": 20.0}


# -- which backend, where ---------------------------------------------------------------------------
JITTER_IN_ORDER = Conditions(10**7, 10**7, rtt_ms=50, jitter_ms=5, reorder=False)
DELAY = Conditions(10**7, 10**7, rtt_ms=50)
RATE = Conditions(10**7, 10**7)
C = link.Capabilities
FAR = Conditions(10**7, 10**7, rtt_ms=20, origin_rtt=origins.parse("plt-o1.test=100"))


@pytest.mark.parametrize("topo,requested,conds,caps,want", [
    ("embedded", "auto", [DELAY], C(netem=True), ("netem", "router")),
    ("embedded", "auto", [DELAY], C(netem=False), ("linkem", "router")),
    ("embedded", "auto", [JITTER_IN_ORDER], C(netem=True), ("linkem", "router")),
    ("embedded", "tcconfig", [RATE], C(netem=True), ("netem", "router")),
    ("embedded", "linkem", [DELAY], C(netem=True), ("linkem", "router")),
    ("two-machines", "auto", [DELAY], C(netem=True, server_may_shape=True), ("netem", "server")),
    ("two-machines", "auto", [DELAY], C(netem=False, server_may_shape=True), ("linkem", "client")),
    ("two-machines", "auto", [RATE], C(netem=False, server_may_shape=True), ("netem", "server")),
    ("two-machines", "auto", [DELAY], C(netem=True, server_may_shape=False), ("linkem", "client")),
    ("two-machines", "netem", [RATE], C(netem=False, server_may_shape=True), ("netem", "server")),
    # a discipline: the kernel's beneath netem where the kernel has netem, linkem's elsewhere
    ("embedded", "auto", [Conditions(10**7, 10**7, aqm=aqm_parse("codel"))], C(netem=True), ("netem", "router")),
    ("embedded", "netem", [Conditions(10**7, 10**7, aqm=aqm_parse("fq_codel"), ecn=True)], C(netem=True), ("netem", "router")),
    ("embedded", "auto", [Conditions(10**7, 10**7, aqm=aqm_parse("codel"))], C(netem=False), ("linkem", "router")),
    # competing flows share either's bottleneck; a PIE of another burst is linkem's alone
    ("embedded", "auto", [Conditions(10**7, 10**7, aqm=aqm_parse("droptail"), cross="1xtcp-cubic")], C(netem=True),
     ("netem", "router")),
    ("embedded", "auto", [Conditions(10**7, 10**7, aqm=aqm_parse("pie:burst=50ms"))], C(netem=True), ("linkem", "router")),
    # each origin at its own distance: either backend in the router; two machines' is linkem's on the client
    ("embedded", "auto", [FAR], C(netem=True), ("netem", "router")),
    ("embedded", "auto", [FAR], C(netem=False), ("linkem", "router")),
    ("two-machines", "auto", [FAR], C(netem=True, server_may_shape=True), ("linkem", "client")),
])
def test_resolve_picks_backend_and_placement(topo, requested, conds, caps, want):
    assert link.resolve(topo, requested, conds, caps) == link.Choice(*want)


@pytest.mark.parametrize("topo,requested,conds,caps,msg", [
    ("embedded", "dummynet", [RATE], C(netem=True), "--link: unknown backend 'dummynet'"),
    ("embedded", "netem", [RATE], C(netem=False), "this kernel has no sch_netem.*netem-vm"),
    ("embedded", "tcconfig", [JITTER_IN_ORDER], C(netem=True), "--no-reorder"),
    ("two-machines", "netem", [RATE], C(netem=True, server_may_shape=False), "serve --addr ADDR --iface"),
    ("two-machines", "tcconfig", [DELAY], C(netem=False, server_may_shape=True), "server's kernel has no sch_netem"),
    ("two-machines", "netem", [JITTER_IN_ORDER], C(netem=True, server_may_shape=True), "--no-reorder"),
    ("embedded", "netem", [Conditions(10**7, 10**7, aqm=aqm_parse("pie:burst=50ms"))], C(netem=True),
     "--link netem: .*needs linkem .*fixed 150 ms burst.*--link linkem or auto"),
    ("embedded", "netem", [Conditions(10**7, 10**7, aqm=aqm_parse("codel"))], C(netem=False), "this kernel has no sch_netem"),
    ("two-machines", "auto", [Conditions(10**7, 10**7, aqm=aqm_parse("codel"))], C(netem=True), "--aqm/--cross: .*--server-machine"),
    ("two-machines", "netem", [FAR], C(netem=True, server_may_shape=True), "--link netem: each origin .*--server-machine"),
])
def test_resolve_refuses_with_the_option_and_the_fix(topo, requested, conds, caps, msg):
    with pytest.raises(UsageError, match=msg):
        link.resolve(topo, requested, conds, caps)


def test_every_choice_has_one_backend_with_honest_names():
    for topo, placements in link.resolve.__globals__["PLACEMENTS"].items():
        for backend, placement in placements.items():
            cls = link.BACKENDS[(backend, placement)]
            assert (cls.backend, cls.placement) == (backend, placement) and cls.tool and cls.detail
    assert link.BACKENDS[("netem", "router")].tool == "tcconfig" and link.BACKENDS[("netem", "server")].tool == "tc"
    assert router_directions(topology.Plan(0), Conditions(10**8, 10**7, loss_pct=5, loss_direction="up")) == [
        ("downlink", "pb0-rc", 10**8, 0.0), ("uplink", "pb0-rs", 10**7, 5.0)]


# -- a real host's interface: only the test traffic ---------------------------------------------------
def test_the_ingress_redirect_takes_only_the_servers_test_ports_and_icmp():
    cmds = commands.ingress_redirect_commands("eth1", "pb3-ifb", commands.u32_matches("10.0.0.1", "src"))
    assert cmds[0] == ["tc", "qdisc", "add", "dev", "eth1", "handle", "ffff:", "ingress"]
    filters = cmds[1:]
    assert len(filters) == 7 and len({f[f.index("prio") + 1] for f in filters}) == 7
    for f in filters:
        assert f[:7] == ["tc", "filter", "add", "dev", "eth1", "parent", "ffff:"]
        assert f[-6:] == ["action", "mirred", "egress", "redirect", "dev", "pb3-ifb"]
        text = " ".join(f)
        assert "match ip src 10.0.0.1/32" in text
    ports = sorted(" ".join(f).split("match ip sport ")[1].split()[0] for f in filters if "sport" in " ".join(f))
    assert ports == ["443", "443", "5201", "5201", "53", "53"]
    assert not any("22 " in " ".join(f) for f in filters)
    assert sum("protocol 1 0xff" in " ".join(f) for f in filters) == 1  # ICMP, for the link check's ping


def test_the_uplink_rate_classifies_test_packets_and_lets_the_rest_pass_unshaped():
    cmds = commands.host_egress_commands("eth1", 20 * 10**6, commands.pfifo_leaf(100), commands.u32_matches("10.0.0.1", "dst"))
    root = cmds[0]
    assert root == ["tc", "qdisc", "add", "dev", "eth1", "root", "handle", "5042:", "htb"]  # no default: direct, unshaped
    assert "rate" in cmds[1] and cmds[1][cmds[1].index("rate") + 1] == "20000000bit"
    assert cmds[2][-2:] == ["limit", "100"]
    for f in cmds[3:]:
        text = " ".join(f)
        assert "match ip dst 10.0.0.1/32" in text and text.endswith("flowid 5042:1")


def test_nfqueue_rules_match_the_server_only_and_never_bypass():
    rules = commands.host_nfqueue_rules("10.0.0.1", 20549)
    assert len(rules) == 7
    for r in rules:
        assert r[:2] == ["-s", "10.0.0.1"] and r[-4:] == ["-j", "NFQUEUE", "--queue-num", "20549"]
        assert "--queue-bypass" not in r
    assert commands.jump_rule("eth1", "PLTB-pb3") == ["PREROUTING", "-i", "eth1", "-j", "PLTB-pb3"]


def test_the_servers_netem_link_classifies_the_clients_test_traffic_both_ways():
    cond = Conditions(20 * 10**6, 10 * 10**6, rtt_ms=50.0, jitter_ms=2.0, jitter_dist="normal", loss_pct=1.0,
                      loss_direction="up")
    cmds = commands.server_netem_commands("eth1", "pb2-ifb", "10.0.0.2", cond)
    text = [" ".join(c) for c in cmds]
    down_leaf = next(t for t in text if "dev eth1 parent 5042:1" in t)
    assert "netem limit" in down_leaf and "delay 25000us 2000us distribution normal" in down_leaf
    assert "loss" not in down_leaf  # the loss is the uplink's only
    up_leaf = next(t for t in text if "dev pb2-ifb parent 1:1" in t)
    assert "delay 25000us 2000us distribution normal loss 1%" in up_leaf
    assert any("dev pb2-ifb parent 1: classid 1:1 htb rate 10000000bit" in t for t in text)
    egress = [t for t in text if "filter add dev eth1 parent 5042:" in t]
    ingress = [t for t in text if "filter add dev eth1 parent ffff:" in t]
    assert len(egress) == len(ingress) == 7
    assert all("match ip dst 10.0.0.2/32" in t and "flowid 5042:1" in t for t in egress)
    assert sorted(t.split("sport ")[1].split()[0] for t in egress if "sport" in t) == ["443", "443", "5201", "5201", "53", "53"]
    assert all("match ip src 10.0.0.2/32" in t and t.endswith("redirect dev pb2-ifb") for t in ingress)
    assert sorted(t.split("dport ")[1].split()[0] for t in ingress if "dport" in t) == ["443", "443", "5201", "5201", "53", "53"]


def test_a_rate_only_server_link_needs_no_netem():
    cmds = commands.server_netem_commands("eth1", "pb2-ifb", "10.0.0.2", Conditions(10**8, 10**8))
    assert not any("netem" in c for c in cmds) and sum("pfifo" in c for c in cmds) == 2
    assert commands.server_netem_commands("eth1", "pb2-ifb", "10.0.0.2", Conditions(None, None)) == []


def test_the_report_s_bottleneck_table_says_what_the_discipline_did_per_direction():
    import json

    from plt_bench.analysis import stats

    from .trials import trial
    cond = Conditions(2 * 10**7, 2 * 10**7, rtt_ms=50, aqm=aqm_parse("codel"), ecn=True)

    def link(drops, marks, soj_us, ect0, not_ect):
        d = {"bottleneck": {"aqm": "codel", "aqm_drops": drops, "marks": marks, "overlimit_drops": 0,
                            "dequeued": 100, "sojourn_mean_us": soj_us},
             "ecn": {"not_ect": not_ect, "ect1": 0, "ect0": ect0, "ce": 0}}
        return json.dumps({"dirs": {"down": d}})
    ts = [trial(seq=0, cond=cond, link_json=link(2, 1, 4000.0, 90, 10)),
          trial(seq=1, cond=cond, link_json=link(0, 3, 6000.0, 100, 0))]
    (row,) = stats.bottleneck_table(ts)
    assert (row["direction"], row["n"], row["aqm_drops"], row["marks"], row["sojourn_ms"]) == ("down", 2, 1.0, 2.0, 5.0)
    assert row["ecn_capable_share"] == 190 / 200
    assert stats.bottleneck_table([trial(seq=0)]) == []  # the kernel's FIFO: no table
    # two budgets of one cell are two rows, and the report's table says which is which (it printed two
    # rows alike: 'h3' for both, found reading a report of --cpu full,0.5 --aqm codel)
    from plt_bench.analysis import report
    both = ts + [trial(seq=2, cond=cond, link_json=link(0, 0, 1000.0, 50, 50), cpu_budget=0.5)]
    rows = stats.bottleneck_table(both)
    (section,) = report._bottleneck({"bottleneck": rows, "trials": both, "budgets": ["full", "cpu0.5"]})
    assert len(rows) == 2 and len({tuple(r[:4]) for r in section[2][1:]}) == 2, section[2]


def test_cross_traffic_is_parsed_to_its_canonical_text_and_its_flows_command():
    from plt_bench.link import cross
    c = cross.parse("2xTCP")
    assert (c.flows, c.transport, c.cc, c.direction, c.text) == (2, "tcp", "cubic", "down", "2xtcp-cubic")
    assert c.client_argv("198.19.7.250")[:10] == ["iperf3", "-c", "198.19.7.250", "-p", str(cross.CROSS_PORT), "-P",
                                                  "2", "-C", "cubic", "-t"]
    assert "-R" in c.client_argv("x")  # downloading: the cross server sends
    up = cross.parse("1xtcp-bbr:up")
    assert up.text == "1xtcp-bbr:up" and "-R" not in up.client_argv("x")
    assert up.server_argv("198.19.7.250") == ["iperf3", "-s", "-B", "198.19.7.250", "-p", str(cross.CROSS_PORT)]
    # QUIC: quinnserve's bulk mode, the sender's controller quinn's; the client trusts the server's certificate
    q = cross.parse("1xquic-bbr:up")
    assert q.text == "1xquic-bbr:up" and cross.parse("3xquic").cc == "cubic"
    assert q.client_argv("198.19.7.250", 60, "/b/quinnserve", "/r/cert.pem") == [
        "/b/quinnserve", "--bulk-client", f"198.19.7.250:{cross.CROSS_PORT}", "1", "bbr", "up", "/r/cert.pem", "60"]
    assert q.server_argv("198.19.7.250", "/b/quinnserve", "/r/cert.pem", "/r/key.pem") == [
        "/b/quinnserve", "--bulk-server", f"198.19.7.250:{cross.CROSS_PORT}", "bbr", "/r/cert.pem", "/r/key.pem"]
    # a web background: Poisson arrivals, Pareto sizes of the given mean, one seed (quinnserve's web mode)
    w = cross.parse("WEB-10-100KB")
    assert (w.transport, w.flows, w.rate_per_s, w.mean_bytes, w.text) == ("web", 0, 10.0, 100_000, "web-10-100KB")
    assert w.offered_mbps == 8.0 and cross.parse("2xtcp").offered_mbps is None
    assert w.client_argv("198.19.7.250", 60, "/b/quinnserve") == [
        "/b/quinnserve", "--web-client", f"198.19.7.250:{cross.CROSS_PORT}", "10", "100000", str(cross.WEB_SEED), "60"]
    assert w.server_argv("198.19.7.250", "/b/quinnserve") == ["/b/quinnserve", "--web-server",
                                                              f"198.19.7.250:{cross.CROSS_PORT}"]
    assert Conditions(10**7, 10**7, aqm=aqm_parse("droptail"), cross="web-0.5-1MB").cross_flows == 0
    for bad, msg in (("web-10", "expected web-RATE-MEAN"), ("web-0-1MB", "more than 0, at most 1000"),
                     ("web-5-lots", "expected web-RATE-MEAN"), ("web-5-3xb", "not a size")):
        with pytest.raises(UsageError, match=msg):
            cross.parse(bad)
    for bad, msg in (("1xquic-reno", "quic flows run cubic, bbr, newreno"), ("1xtcp-newreno", "tcp flows run cubic"),
                     ("1xudp", "competing flows are tcp, quic"), ("17xtcp", "expected 1 to 16")):
        with pytest.raises(UsageError, match=msg):
            cross.parse(bad)
    assert cross.parse("0") is None and cross.parse_list(None) == (None,)
    assert cross.parse_list("0,2xtcp-cubic") == (None, "2xtcp-cubic")
    with pytest.raises(UsageError, match="2xtcp-cubic is given twice"):
        cross.parse_list("2xtcp,2xtcp-cubic")
    from plt_bench.topology import NS_RE, Plan
    cmds = Plan(7).cross_commands()
    assert (None, ["ip", "netns", "add", "pb7-xclient"]) in cmds and (None, ["ip", "netns", "add", "pb7-xserver"]) in cmds
    assert ("pb7-xclient", ["ip", "route", "add", "default", "via", "198.18.7.249"]) in cmds
    assert ("pb7-router", ["ip", "addr", "add", "198.19.7.249/30", "dev", "pb7-rxs"]) in cmds
    assert NS_RE.match("pb7-xclient") and NS_RE.match("pb7-xserver")  # clean finds them by the testbed's prefix


def test_a_trial_records_what_the_competing_flows_carried_and_fails_when_one_died():
    from plt_bench.link.cross import parse
    from plt_bench.trial.run import with_cross

    class Flows:
        spec = parse("2xtcp-cubic")

        def __init__(self, died=None):
            self._died = died

        def died(self):
            return self._died
    # 20 Mbit/s for the first second (the browser starting), 10 during the load (1.0 to 2.0 s)
    samples = [(0.0, 0), (1.0, 2_500_000), (2.0, 3_750_000), (3.0, 6_250_000)]
    got = with_cross({"dirs": {}}, Flows(), samples, {"nav_t0": 1.0, "nav": {"loadEventEnd": 1000.0}})
    assert got["cross"] == {"spec": "2xtcp-cubic", "mbps": 10.0, "window": "load"} and got["dirs"] == {}
    whole = with_cross(None, Flows(), samples, {})["cross"]  # no load figures: the whole trial's
    assert whole["window"] == "trial" and whole["mbps"] == round(6_250_000 * 8 / 3 / 1e6, 3)
    dead = with_cross(None, Flows("its flows' iperf3 client exited (1)"), samples)["cross"]["died"]
    assert dead.startswith("cross traffic 2xtcp-cubic: its flows' iperf3 client exited (1) during the trial")
    assert with_cross({"a": 1}, None, None) == {"a": 1}
    from plt_bench.analysis.stats import jain
    from plt_bench.analysis.stats import cross_table
    from plt_bench.pages import real as realpages
    from plt_bench.pages import parse_page
    from .trials import trial
    toolbelt = next(p for p in realpages.PAGES if p.name == "toolbelt")
    url = parse_page(f"url:{toolbelt.url}")  # a served folder's page: its bytes unknown beforehand, no rate, not 0
    c = Conditions(2 * 10**7, 2 * 10**7, aqm=aqm_parse("droptail"), cross="2xtcp-cubic")
    (row,) = cross_table([trial(seq=0, page=url, cond=c, cross_mbps=15.0, plt=900.0)])
    assert (row["page_mbps"], row["page_share"], row["jain"], row["cross_mbps"]) == (None, None, None, 15.0)
    # beside a web background (short transfers, no long flows): no fair share, no Jain's index, the rest shown
    web = Conditions(2 * 10**7, 2 * 10**7, aqm=aqm_parse("droptail"), cross="web-10-100KB")
    (row,) = cross_table([trial(seq=0, page=parse_page("500KB"), cond=web, cross_mbps=7.5, plt=1000.0)])
    assert (row["fair_share"], row["jain"], row["cross_mbps"]) == (None, None, 7.5) and row["page_share"] > 0
    assert jain([5.0, 5.0, 5.0]) == 1.0 and jain([9.0, 0.0, 0.0]) == pytest.approx(1 / 3) and jain([]) is None


# -- a queue discipline beneath netem (the netem backend's --aqm) -------------------------------------
def test_a_discipline_sits_beneath_netem_and_htb_with_every_parameter_and_ecn_said():
    cmds = commands.netem_aqm_commands("pb1-rc", 20 * 10**6, 25.0, 0.0, "uniform", 1.0,
                                       aqm_parse("codel:target=10ms"), True, 84)
    assert cmds[0] == ["tc", "qdisc", "add", "dev", "pb1-rc", "root", "handle", "1:", "netem", "limit",
                       str(commands.NETEM_LINE_LIMIT), "delay", "25000us", "loss", "1%"]
    assert cmds[1][:9] == ["tc", "qdisc", "add", "dev", "pb1-rc", "parent", "1:1", "handle", "2:"]
    assert "rate" in cmds[2] and cmds[2][cmds[2].index("rate") + 1] == "20000000bit" and cmds[2][6] == "2:"
    assert cmds[3][:8] == ["tc", "qdisc", "add", "dev", "pb1-rc", "parent", "2:1", "handle"] and cmds[3][8] == "3:"
    assert cmds[3][9:] == ["codel", "limit", "84", "target", "10000us", "interval", "100000us", "ecn"]


@pytest.mark.parametrize("text,ecn,want", [
    ("droptail", False, ["pfifo", "limit", "50"]),
    ("fq_codel:flows=256", False, ["fq_codel", "limit", "50", "target", "5000us", "interval", "100000us",
                                   "flows", "256", "quantum", "1514", "noecn"]),
    ("pie", True, ["pie", "limit", "50", "target", "15000us", "tupdate", "15000us", "ecn"]),
])
def test_each_kernel_discipline_is_built_from_its_canonical_text(text, ecn, want):
    assert commands.aqm_leaf(aqm_parse(text), ecn, 50) == want


def test_the_kernels_pie_refuses_a_burst_it_cannot_hold():
    with pytest.raises(UsageError, match="--aqm pie:burst=50ms: .*150 ms.*--link linkem"):
        commands.aqm_leaf(aqm_parse("pie:burst=50ms"), False, 50)


def test_the_disciplines_are_read_back_from_tc_with_their_parameters_and_counters():
    shown = (
        "qdisc netem 1: root refcnt 2 limit 100000 delay 25ms loss 1%\n"
        "qdisc htb 2: parent 1:1 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000\n"
        "qdisc fq_codel 3: parent 2:1 limit 84p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb "
        "ecn drop_batch 64\n")
    q = readback.parse_qdiscs(shown)
    leaf = next(x for x in q if x["handle"] == "3:")
    assert leaf == {"kind": "fq_codel", "handle": "3:", "parent": "2:1", "limit": 84, "target_ms": 5.0,
                    "interval_ms": 100.0, "flows": 1024, "quantum": 1514, "ecn": True}
    codel = readback.parse_qdiscs("qdisc codel 3: parent 2:1 limit 84p target 10ms interval 100ms\n")[0]
    assert codel["target_ms"] == 10.0 and codel["ecn"] is False
    stats = readback.parse_qdisc_stats(
        "qdisc netem 1: root refcnt 2 limit 100000 delay 25ms\n Sent 9000 bytes 6 pkt (dropped 0, overlimits 0 "
        "requeues 0)\n backlog 0b 0p requeues 0\n"
        "qdisc codel 3: parent 2:1 limit 84p target 5ms interval 100ms ecn\n Sent 1514000 bytes 1000 pkt (dropped 7, "
        "overlimits 0 requeues 0)\n backlog 30280b 20p requeues 0\n  count 1 lastcount 0 ldelay 6.1ms drop_next 0us\n"
        "  maxpacket 1514 ecn_mark 12 drop_overlimit 0\n")
    assert stats["3:"] == {"kind": "codel", "sent_pkts": 1000, "dropped": 7, "backlog_bytes": 30280,
                           "backlog_pkts": 20, "ecn_mark": 12, "overlimit_drops": 0}
    assert "ecn_mark" not in stats["1:"] and stats["1:"]["sent_pkts"] == 6
    # in linkem's terms, as a trial's link counters carry them (no sojourn: the kernel keeps no sum)
    from plt_bench.link.netem import bottleneck_counters
    from plt_bench.trial.run import link_delta
    a = bottleneck_counters(aqm_parse("codel"), stats["3:"])
    assert a == {"aqm": "codel", "dequeued": 1000, "marks": 12, "overlimit_drops": 0, "aqm_drops": 7}
    before = {"dirs": {"down": {"bottleneck": bottleneck_counters(aqm_parse("codel"), {"sent_pkts": 400, "dropped": 2})}}}
    d = link_delta(before, {"dirs": {"down": {"bottleneck": a}}})["dirs"]["down"]["bottleneck"]
    assert d == {"aqm": "codel", "aqm_drops": 5, "marks": 12, "overlimit_drops": 0, "dequeued": 600,
                 "sojourn_mean_us": None}
    pie = readback.parse_qdisc_stats("qdisc pie 3: parent 2:1 limit 84p target 15ms tupdate 15ms\n Sent 10 bytes 9 pkt "
                                     "(dropped 4, overlimits 0 requeues 0)\n backlog 0b 0p requeues 0\n  prob 0 delay 0us\n"
                                     "  pkts_in 13 overlimit 1 dropped 4 maxq 0 ecn_mark 0\n")["3:"]
    assert bottleneck_counters(aqm_parse("pie"), pie) == {"aqm": "pie", "dequeued": 9, "marks": 0, "overlimit_drops": 1,
                                               "aqm_drops": 3}
    assert bottleneck_counters(aqm_parse("droptail"), {"sent_pkts": 5, "dropped": 2})["overlimit_drops"] == 2


def test_several_egresses_share_one_bottleneck_through_an_ifb_read_back_from_tc():
    cmds = commands.egress_redirect_commands(["pb1-rc", "pb1-rxc"], "pb1-qd")
    assert cmds[0] == ["tc", "qdisc", "add", "dev", "pb1-rc", "clsact"]
    assert cmds[1][:6] == ["tc", "filter", "add", "dev", "pb1-rc", "egress"] and cmds[1][-2:] == ["dev", "pb1-qd"]
    assert " ".join(cmds[1]).count("match u32 0 0 action mirred egress redirect") == 1 and cmds[3][4] == "pb1-rxc"
    shown = ("filter protocol ip pref 1 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 terminal flowid not_in_hw\n"
             "  match 00000000/00000000 at 0\n\taction order 1: mirred (Egress Redirect to device pb1-qd) stolen\n")
    assert readback.parse_redirects(shown) == ["pb1-qd"] and readback.parse_redirects("") == []
    assert topology.Plan(1).down_ifb == "pb1-qd" and topology.Plan(1).up_ifb == "pb1-qu"
    assert len(topology.Plan(topology.MAX_INDEX).down_ifb) <= 15  # an interface name's limit
