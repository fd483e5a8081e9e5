"""Command builders and parsers: topology plan, tc read-back, tcconfig (real, --tc-command), Caddy, Chromium."""
import json
import re
import subprocess

import pytest

from plt_bench import browser, link, server, topology
from plt_bench.conditions import Conditions
from plt_bench.errors import LinkError, UsageError


def test_plan_names_fit_linux_limits_and_carry_the_prefix():
    for i in (0, 7, 255):
        p = topology.Plan(i)
        for dev in (p.client_if, p.router_client_if, p.router_server_if, p.server_if):
            assert len(dev) <= 15 and dev.startswith(f"pb{i}-")
        assert all(topology.NS_RE.match(ns).group(1) == f"pb{i}" for ns in p.namespaces)
        assert p.client_ip.startswith("198.18.") and p.server_ip.startswith("198.19.")
    with pytest.raises(UsageError, match="--testbed"):
        topology.Plan(256)


def test_plan_commands_build_three_namespaces_with_offloads_off_and_congctl():
    p = topology.Plan(3, cc="reno")
    cmds = p.create_commands()
    argvs = [" ".join(a) for _, a in cmds]
    assert argvs[:3] == ["ip netns add pb3-client", "ip netns add pb3-router", "ip netns add pb3-server"]
    assert "ip link add pb3-c netns pb3-client type veth peer name pb3-rc netns pb3-router" in argvs
    assert "ip link add pb3-s netns pb3-server type veth peer name pb3-rs netns pb3-router" in argvs
    # every veth end: offloads off, so qdiscs see wire-size packets
    offl = [(ns, a[2]) for ns, a in cmds if a[:2] == ["ethtool", "-K"]]
    assert sorted(offl) == sorted([("pb3-client", "pb3-c"), ("pb3-router", "pb3-rc"), ("pb3-router", "pb3-rs"),
                                   ("pb3-server", "pb3-s")])
    routes = [(ns, a) for ns, a in cmds if a[:3] == ["ip", "route", "add"]]
    assert len(routes) == 4 and all(a[-2:] == ["congctl", "reno"] for _, a in routes)
    assert ("pb3-router", ["sysctl", "-qw", "net.ipv4.ip_forward=1"]) in cmds
    # nothing is run in the root namespace except creating namespaces and veths inside them
    assert all(ns is not None or a[:3] in (["ip", "netns", "add"], ["ip", "link", "add"]) for ns, a in cmds)


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
    assert link.parse_tc_rate("100Mbit") == 10**8 and link.parse_tc_rate("8Kbit") == 8000
    assert link.parse_tc_rate("1Gbit") == 10**9 and link.parse_tc_rate("2500bit") == 2500
    classes = link.parse_htb_classes(HTB_CLASSES)
    assert classes["1cc1:2"]["rate_bps"] == 123_456_000 and classes["1cc1:1"]["rate_bps"] == 10**10
    assert link.parse_filter_flowids(FILTERS) == ["1cc1:2"]
    q = link.parse_qdiscs(QDISCS)
    assert q[0] == {"kind": "htb", "handle": "1cc1:", "parent": "root", "default": 1}
    assert q[1]["kind"] == "netem" and q[1]["limit"] == 1000


def test_netem_read_back_parser():
    text = ("qdisc htb 1a1a: root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000\n"
            "qdisc netem 2114: parent 1a1a:2 limit 4129 delay 56ms  10ms loss 1%\n"
            "qdisc pfifo 10: parent 1:1 limit 64p\n")
    q = link.parse_qdiscs(text)
    assert q[1] == {"kind": "netem", "handle": "2114:", "parent": "1a1a:2", "limit": 4129, "delay_ms": 56.0,
                    "jitter_ms": 10.0, "loss_pct": 1.0}
    assert q[2]["limit"] == 64
    state = link.DirectionState("pb0-rc", "htb", 10**7, 10**7, ("netem",), None, q[1])
    link.check_netem(state, 56, 10, 1, 4129, "downlink")
    for args, msg in (((50, 10, 1, 4129), "delay"), ((56, 5, 1, 4129), "jitter"), ((56, 10, 2, 4129), "loss"),
                      ((56, 10, 1, 100), "limit")):
        with pytest.raises(LinkError, match=msg):
            link.check_netem(state, *args, "downlink")
    with pytest.raises(LinkError, match="sch_netem"):
        link.check_netem(link.DirectionState("pb0-rc", "htb", 10**7, 10**7, ()), 56, 10, 1, 4129, "downlink")


def test_check_rate_trusts_only_the_kernel():
    ok = link.DirectionState("pb0-rc", "htb", 10**8, 10**8, ())
    link.check_rate(ok, 10**8, "downlink")
    with pytest.raises(LinkError, match="asked for"):
        link.check_rate(ok, 10**7, "downlink")
    with pytest.raises(LinkError, match="no htb rate"):  # tcset said 0, kernel has nothing
        link.check_rate(link.DirectionState("pb0-rc", "noqueue", None, None, ()), 10**8, "downlink")
    with pytest.raises(LinkError, match="should be unshaped"):
        link.check_rate(ok, None, "downlink")
    link.check_rate(link.DirectionState("pb0-rc", "noqueue", None, None, ()), None, "downlink")


@pytest.mark.parametrize("rate", [500_000, 10**7, 10**8, 10**9])
def test_tcconfig_generates_the_rate_we_ask_for(rate):
    """Real tcconfig, dry run (--tc-command): the htb class it would create has exactly our rate."""
    argv = link.TcconfigLink.tcset_argv("lo", rate) + ["--tc-command"]
    assert argv[1:3] == ["-m", "plt_bench._tcset"] and "--overwrite" in argv
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    classes = [l for l in out.stdout.splitlines() if " class add " in l and "ceil" in l]
    assert len(classes) == 1
    m = re.search(r"rate (\S+?)Kbit ceil (\S+?)Kbit", classes[0], re.I)
    assert float(m.group(1)) * 1000 == rate and float(m.group(2)) * 1000 == rate


def test_link_registry(monkeypatch):
    monkeypatch.setitem(link._NETEM, "v", True)
    assert link.resolve("auto") == "tcconfig"
    assert link.resolve("auto", need_no_reorder=True) == "linkem"
    monkeypatch.setitem(link._NETEM, "v", False)
    assert link.resolve("auto") == "linkem" and link.resolve("tcconfig") == "tcconfig"
    with pytest.raises(UsageError, match="--link"):
        link.resolve("dummynet")
    with pytest.raises(UsageError, match="--no-reorder"):
        link.resolve("tcconfig", need_no_reorder=True)
    d = link._directions(topology.Plan(0), Conditions(10**8, 10**7, loss_pct=5, loss_direction="up"))
    assert d == [("downlink", "pb0-rc", 10**8, 0.0), ("uplink", "pb0-rs", 10**7, 5.0)]


def test_htb_builder_sets_quantum_burst_and_queue():
    cmds = link.htb_commands("pb0-rc", 10**9, 4129)
    assert cmds[0] == ["tc", "qdisc", "add", "dev", "pb0-rc", "root", "handle", "1:", "htb", "default", "1"]
    cls = " ".join(cmds[1])
    assert "rate 1000000000bit ceil 1000000000bit quantum 1514 burst 62500b cburst 62500b" in cls
    assert cmds[2] == ["tc", "qdisc", "add", "dev", "pb0-rc", "parent", "1:1", "handle", "10:", "pfifo", "limit", "4129"]
    assert link.htb_burst_bytes(10**7) == 3028 and link.htb_burst_bytes(10**9) == 62500


def test_nfqueue_rules_never_bypass():
    rule = link.nfqueue_rule("pb0-rs", 0)
    assert rule == ["-i", "pb0-rs", "-j", "NFQUEUE", "--queue-num", "0"]
    assert not any("bypass" in x for x in rule)


def test_linkem_argv_carries_every_condition(tmp_path):
    cond = Conditions(10**7, 10**7, rtt_ms=100, jitter_ms=10, jitter_dist="normal", loss_pct=1.5,
                      loss_direction="down", reorder=False)
    argv = link.linkem_argv("/x/linkem", cond, tmp_path / "s.json", seed=7)
    assert argv[0] == "/x/linkem"
    dirs = [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
    assert dirs == ["down:queue=0,delay_us=50000,jitter_us=10000,dist=normal,loss=0.015,reorder=0",
                    "up:queue=1,delay_us=50000,jitter_us=10000,dist=normal,loss=0,reorder=0"]
    assert argv[argv.index("--seed") + 1] == "7" and argv[argv.index("--maxlen") + 1] == "65536"
    assert int(argv[argv.index("--fifo") + 1]) > 0


@pytest.mark.parametrize("cond", [
    Conditions(10**7, 10**7),
    Conditions(10**8, 10**8, rtt_ms=50),
    Conditions(10**8, 10**8, rtt_ms=112, jitter_ms=10, jitter_dist="normal"),
    Conditions(10**9, 10**9, rtt_ms=100, loss_pct=1),
    Conditions(10**7, 10**6, rtt_ms=40, jitter_ms=5, loss_pct=7, loss_direction="down", queue_pkts=500),
    Conditions(None, None, rtt_ms=20, loss_pct=0.1),
])
def test_tcconfig_generates_every_condition(cond):
    """Real tcconfig, dry run (--tc-command), per direction: rate, burst, delay (rtt/2), jitter, loss, limit."""
    for what, dev, rate, loss in link._directions(topology.Plan(0), cond):
        argv = link.TcconfigLink.tcset_argv("lo", rate, cond.delay_ms, cond.jitter_ms, loss, cond.queue_for(rate))
        out = subprocess.run(argv + ["--tc-command"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        if rate is not None:
            cls = [l for l in lines if " class add " in l and "ceil" in l][0]
            m = re.search(r"rate (\S+?)Kbit ceil (\S+?)Kbit burst (\d+)b", cls, re.I)
            assert float(m.group(1)) * 1000 == rate and float(m.group(2)) * 1000 == rate
            assert int(m.group(3)) >= link.htb_burst_bytes(rate)
        netem = [l for l in lines if " netem" in l]
        assert len(netem) == 1
        n = netem[0]
        if cond.delay_ms:
            assert f"delay {cond.delay_ms:.1f}ms" in n
        if cond.jitter_ms:
            assert f" {cond.jitter_ms:.1f}ms distribution normal" in n
        if loss:
            assert re.search(rf"loss {loss:.6f}%", n)
        else:
            assert "loss" not in n
        assert f"limit {cond.queue_for(rate)}" in n


def test_uniform_jitter_fixup_has_no_distribution():
    argv = link.TcconfigLink.uniform_jitter_argv("pb0-rc", "1a1a:2", "2114:", 56, 10, 1, 4129)
    assert argv == ["tc", "qdisc", "change", "dev", "pb0-rc", "parent", "1a1a:2", "handle", "2114:", "netem",
                    "limit", "4129", "delay", "56000us", "10000us", "loss", "1%"]


def test_tcconfig_refuses_in_order_jitter():
    with pytest.raises(UsageError, match="linkem"):
        link.TcconfigLink(topology.Plan(0)).apply(Conditions(10**7, 10**7, rtt_ms=50, jitter_ms=5, reorder=False))


def test_caddy_config_binds_only_the_server_address(tmp_path):
    text = server.render_config(server.TEMPLATE.read_text(), host="plt.test", bind="198.19.4.2",
                                cert=tmp_path / "c.pem", key=tmp_path / "k.pem", sites=tmp_path,
                                access_log=tmp_path / "a.log")
    assert "admin off" in text and "protocols h1 h3" in text and "auto_https off" in text
    assert "bind 198.19.4.2" in text and "https://plt.test:443" in text
    assert f"tls {tmp_path}/c.pem {tmp_path}/k.pem" in text and "${" not in text  # every placeholder filled
    assert "@notpage not path_regexp ^/index_[0-9]+(B|KB|MB|GB|KiB|MiB|GiB)\\.html$\n" in text  # the pages only
    with pytest.raises(Exception, match="cannot hold"):
        server.render_config(server.TEMPLATE.read_text(), host="plt.test", bind="x", cert=tmp_path / "a b",
                             key=tmp_path, sites=tmp_path, access_log=tmp_path)


def test_spki_hash_matches_openssl(tmp_path):
    key = tmp_path / "k.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)], check=True)
    pub = subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout"], capture_output=True, text=True, check=True).stdout
    der = subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-outform", "DER"], capture_output=True, check=True).stdout
    import base64, hashlib
    assert server.spki_hash_from_pem_pubkey(pub) == base64.b64encode(hashlib.sha256(der).digest()).decode()


def test_access_log_parser():
    lines = [json.dumps({"request": {"uri": "/index_5KB.html?trial=ab", "proto": "HTTP/3.0"}, "status": 200, "size": 5000}),
             "not json", json.dumps({"request": {"uri": "/favicon.ico", "proto": "HTTP/1.1"}, "status": 404, "size": 0})]
    e = server.parse_access_log("\n".join(lines))
    assert e == [{"uri": "/index_5KB.html?trial=ab", "proto": "HTTP/3.0", "status": 200, "size": 5000},
                 {"uri": "/favicon.ico", "proto": "HTTP/1.1", "status": 404, "size": 0}]


def test_chromium_flags_per_protocol():
    q = browser.chromium_args("quic", "plt.test", "198.19.0.2", "HASH=", "/p")
    t = browser.chromium_args("tcp", "plt.test", "198.19.0.2", "HASH=", "/p")
    assert "--enable-quic" in q and "--origin-to-force-quic-on=plt.test:443" in q and "--disable-quic" not in q
    assert "--disable-quic" in t and not any("quic-on" in a for a in t)
    for a in (q, t):
        assert "--host-resolver-rules=MAP plt.test 198.19.0.2, MAP * ~NOTFOUND" in a
        assert "--ignore-certificate-errors-spki-list=HASH=" in a and "--user-data-dir=/p" in a
        assert "--headless=new" in a and not any("'" in x or '"' in x for x in a)
    assert browser.PREFS["net"]["network_prediction_options"] == 2
    with pytest.raises(ValueError):
        browser.chromium_args("sctp", "plt.test", "x", "h", "/p")


NAV = {"startTime": 0, "domainLookupStart": 1, "domainLookupEnd": 1, "connectStart": 2, "secureConnectionStart": 3,
       "connectEnd": 10, "responseStart": 20, "responseEnd": 50, "domContentLoadedEventEnd": 55, "loadEventEnd": 60,
       "responseStatus": 200, "nextHopProtocol": "h3", "decodedBodySize": 5000}
GOOD = {"nav": NAV, "final_url": "https://plt.test/index_5KB.html?trial=x", "error": None}
SRV = [{"uri": "/x", "proto": "HTTP/3.0", "status": 200, "size": 5000}]


def test_timings_from_navigation_timing():
    t = browser.timings(NAV)
    assert t == {"plt_ms": 60, "dns_ms": 0, "connect_ms": 8, "tls_ms": 7, "ttfb_ms": 20, "response_end_ms": 50,
                 "dcl_ms": 55}


@pytest.mark.parametrize("change,server_entries,reason", [
    ({}, SRV, None),
    ({"error": "timeout: the page did not load within 20s"}, SRV, "timeout"),
    ({"final_url": "chrome-error://chromewebdata/", "error_code": "ERR_QUIC_PROTOCOL_ERROR"}, [], "ERR_QUIC_PROTOCOL_ERROR"),
    ({"error_code": "ERR_CONNECTION_REFUSED", "nav": {**NAV, "responseStatus": 0}}, [], "error page: ERR_CONNECTION_REFUSED"),
    ({"nav": {**NAV, "responseStatus": 404}}, SRV, "responseStatus 404"),
    ({"nav": {**NAV, "nextHopProtocol": "h2"}}, SRV, "protocol mismatch"),
    ({"nav": {**NAV, "decodedBodySize": 4999}}, SRV, "body size 4999"),
    ({"nav": {**NAV, "loadEventEnd": 0}}, SRV, "load event"),
    ({}, [], "server logged no request"),
    ({}, [{**SRV[0], "proto": "HTTP/1.1"}], "server saw HTTP/1.1"),
    ({}, [{**SRV[0], "size": 10}], "server sent status 200 with 10 bytes"),
])
def test_judge_needs_every_proof(change, server_entries, reason):
    status, why = browser.judge("quic", 5000, {**GOOD, **change}, server_entries)
    if reason is None:
        assert (status, why) == ("ok", None)
    else:
        assert status == "failed" and reason in why
