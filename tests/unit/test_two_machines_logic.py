"""Two machines, the pure parts: the command builders of the client's shaping, option checks, and the
control channel's login (on loopback, with a real socket)."""
import pytest

from plt_bench import hostnet
from plt_bench.conditions import Conditions
from plt_bench.control import Control, ControlServer, answer_for, new_token
from plt_bench.errors import ServerError, UsageError
from plt_bench.remote import HostLinkem, RemoteSites, make_ref, parse_pin, parse_port

PIN = "2r1iJ0T0zs93/lZNjz/oiobphZ3j5fOPKDzm2p1dTSI="


def test_the_ingress_redirect_takes_only_the_servers_test_ports_and_icmp():
    cmds = hostnet.ingress_redirect_commands("eth1", "pb3-ifb", "10.0.0.1")
    assert cmds[0] == ["tc", "qdisc", "add", "dev", "eth1", "handle", "ffff:", "ingress"]
    filters = cmds[1:]
    assert len(filters) == 5 and len({f[f.index("prio") + 1] for f in filters}) == 5
    for f in filters:
        assert f[:7] == ["tc", "filter", "add", "dev", "eth1", "parent", "ffff:"]
        assert f[-6:] == ["action", "mirred", "egress", "redirect", "dev", "pb3-ifb"]
        text = " ".join(f)
        assert "match ip src 10.0.0.1/32" in text
    ports = sorted(" ".join(f).split("match ip sport ")[1].split()[0] for f in filters if "sport" in " ".join(f))
    assert ports == ["443", "443", "5201", "5201"]
    assert not any("22 " in " ".join(f) for f in filters)
    assert sum("protocol 1 0xff" in " ".join(f) for f in filters) == 1  # ICMP, for the link check's ping


def test_the_uplink_rate_classifies_test_packets_and_lets_the_rest_pass_unshaped():
    cmds = hostnet.egress_rate_commands("eth1", "10.0.0.1", 20 * 10**6, 100)
    root = cmds[0]
    assert root == ["tc", "qdisc", "add", "dev", "eth1", "root", "handle", "5042:", "htb"]  # no default: direct, unshaped
    assert "rate" in cmds[1] and cmds[1][cmds[1].index("rate") + 1] == "20000000bit"
    assert cmds[2][-2:] == ["limit", "100"]
    for f in cmds[3:]:
        text = " ".join(f)
        assert "match ip dst 10.0.0.1/32" in text and text.endswith("flowid 5042:1")


def test_nfqueue_rules_match_the_server_only_and_never_bypass():
    rules = hostnet.nfqueue_rules("10.0.0.1", 20549)
    assert len(rules) == 5
    for r in rules:
        assert r[:2] == ["-s", "10.0.0.1"] and r[-4:] == ["-j", "NFQUEUE", "--queue-num", "20549"]
        assert "--queue-bypass" not in r
    assert hostnet.jump_rule("eth1", "PLTB-pb3") == ["PREROUTING", "-i", "eth1", "-j", "PLTB-pb3"]


@pytest.mark.parametrize("name", ["eth0;reboot", "", "a" * 16, "-x", "eth 1", "../x"])
def test_interface_names_are_validated(name):
    with pytest.raises(UsageError, match="--iface"):
        hostnet.check_iface_name(name)


@pytest.mark.parametrize("text", ["10.0.0", "0.0.0.0", "127.0.0.1", "224.0.0.1", "255.255.255.255", "host", "::1"])
def test_host_addresses_are_validated(text):
    with pytest.raises(UsageError, match="--server"):
        hostnet.parse_ipv4(text, "--server")


def test_pin_token_and_port_forms():
    assert parse_pin(PIN) == PIN
    for bad in ("", "abc", PIN[:-1], "!" * 44):
        with pytest.raises(UsageError, match="--server-pin"):
            parse_pin(bad)
    for bad in ("22", "443", "5201", "70000", "x"):
        with pytest.raises(UsageError, match="--control-port"):
            parse_port(bad)
    assert parse_port("4443") == 4443
    assert make_ref(None, None, None, None, None) is None
    with pytest.raises(UsageError, match="--iface: only with --server"):
        make_ref(None, None, None, None, "eth1")
    with pytest.raises(UsageError, match="--server-token: required"):
        make_ref("10.0.0.1", PIN, None, None, None)
    ref = make_ref("10.0.0.1", PIN, "ab" * 32, None, "eth1")
    assert (ref.addr, ref.control_port) == ("10.0.0.1", 4443)


def test_uplink_loss_is_refused_on_the_clients_ingress():
    HostLinkem.check_conditions([Conditions(10**7, 10**7, rtt_ms=20.0, loss_pct=1.0, loss_direction="down")])
    with pytest.raises(UsageError, match="--loss-direction"):
        HostLinkem.check_conditions([Conditions(10**7, 10**7, loss_pct=1.0)])


def test_missing_pages_on_the_server_are_named_with_the_fix():
    sites = RemoteSites({"index_5KB.html": 5000}, "10.0.0.1")
    sites.ensure([5000])
    with pytest.raises(UsageError, match=r"does not have index_10MB.html.*serve --addr 10.0.0.1 --size 10MB"):
        sites.ensure([5000, 10**7])
    with pytest.raises(UsageError, match="index_5KB.html"):  # the name is right but not the size
        RemoteSites({"index_5KB.html": 4999}, "10.0.0.1").ensure([5000])


@pytest.fixture
def control_server():
    token = new_token()
    srv = ControlServer("127.0.0.1", 0, token, {"echo": lambda **kw: {"got": kw},
                                                "boom": lambda: 1 / 0}).start()
    yield token, srv.server.server_address[1]
    srv.close()


def test_the_control_channel_serves_only_who_knows_the_token(control_server):
    token, port = control_server
    c = Control("127.0.0.1", port, token)
    try:
        assert c.call("echo", a=1)["got"] == {"a": 1}
        with pytest.raises(ServerError, match="ZeroDivisionError"):
            c.call("boom")
        with pytest.raises(ServerError, match="unknown operation"):
            c.call("rm -rf")
        assert c.call("echo")["got"] == {}  # the connection survives an operation's error
    finally:
        c.close()
    with pytest.raises(UsageError, match="--server-token: the server at 127.0.0.1"):
        Control("127.0.0.1", port, new_token())


def test_the_login_answer_depends_on_the_token_and_the_nonce():
    token, nonce = new_token(), "00" * 16
    mac = answer_for(token, nonce)
    assert mac != answer_for(token, "01" * 16) and mac != answer_for(new_token(), nonce)


def test_the_servers_netem_link_classifies_the_clients_test_traffic_both_ways():
    cond = Conditions(20 * 10**6, 10 * 10**6, rtt_ms=50.0, jitter_ms=2.0, jitter_dist="normal", loss_pct=1.0,
                      loss_direction="up")
    cmds = hostnet.server_shaping_commands("eth1", "pb2-ifb", "10.0.0.2", cond)
    text = [" ".join(c) for c in cmds]
    down_leaf = next(t for t in text if "dev eth1 parent 5042:1" in t)
    assert "netem limit" in down_leaf and "delay 25000us 2000us distribution normal" in down_leaf
    assert "loss" not in down_leaf  # the loss is the uplink's only
    up_leaf = next(t for t in text if "dev pb2-ifb parent 1:1" in t)
    assert "delay 25000us 2000us distribution normal loss 1%" in up_leaf
    assert any("dev pb2-ifb parent 1: classid 1:1 htb rate 10000000bit" in t for t in text)
    egress = [t for t in text if "filter add dev eth1 parent 5042:" in t]
    ingress = [t for t in text if "filter add dev eth1 parent ffff:" in t]
    assert len(egress) == len(ingress) == 5
    assert all("match ip dst 10.0.0.2/32" in t and "flowid 5042:1" in t for t in egress)
    assert sorted(t.split("sport ")[1].split()[0] for t in egress if "sport" in t) == ["443", "443", "5201", "5201"]
    assert all("match ip src 10.0.0.2/32" in t and t.endswith("redirect dev pb2-ifb") for t in ingress)
    assert sorted(t.split("dport ")[1].split()[0] for t in ingress if "dport" in t) == ["443", "443", "5201", "5201"]


def test_a_rate_only_server_link_needs_no_netem():
    cmds = hostnet.server_shaping_commands("eth1", "pb2-ifb", "10.0.0.2", Conditions(10**8, 10**8))
    assert not any("netem" in c for c in cmds) and sum("pfifo" in c for c in cmds) == 2
    assert hostnet.server_shaping_commands("eth1", "pb2-ifb", "10.0.0.2", Conditions(None, None)) == []
