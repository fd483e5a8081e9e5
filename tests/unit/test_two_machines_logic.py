"""Two machines, the pure parts: the command builders of the client's shaping, option checks, and the
control channel's login (on loopback, with a real socket)."""
import pytest

from plt_bench.link import host as hostnet
from plt_bench.conditions import Conditions
from plt_bench.control import Control, ControlServer, answer_for, new_token
from plt_bench.errors import ServerError, UsageError
from plt_bench.pages import Page
from plt_bench.link import HostLinkem
from plt_bench.remote import RemoteSites, make_ref, parse_pin, parse_port

PIN = "2r1iJ0T0zs93/lZNjz/oiobphZ3j5fOPKDzm2p1dTSI="


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
    for bad in ("22", "443", "5201", "70000", "x", "4_443", "+4443", "٤٤٤٣"):  # int() took the last three
        with pytest.raises(UsageError, match="--control-port"):
            parse_port(bad)
    assert parse_port("4443") == 4443
    assert make_ref(None, None, None, None, None) is None
    with pytest.raises(UsageError, match="--iface: only with --server-machine"):
        make_ref(None, None, None, None, "eth1")
    with pytest.raises(UsageError, match="--server-token-file: required"):
        make_ref("10.0.0.1", PIN, None, None, None)
    ref = make_ref("10.0.0.1", PIN, "ab" * 32, None, "eth1")
    assert (ref.addr, ref.control_port) == ("10.0.0.1", 4443)


def test_uplink_loss_is_refused_on_the_clients_ingress():
    HostLinkem.check_conditions([Conditions(10**7, 10**7, rtt_ms=20.0, loss_pct=1.0, loss_direction="down")])
    with pytest.raises(UsageError, match="--loss-direction"):
        HostLinkem.check_conditions([Conditions(10**7, 10**7, loss_pct=1.0)])


def test_missing_pages_on_the_server_are_named_with_the_fix():
    sites = RemoteSites({"index_5KB.html": 5000}, "10.0.0.1")
    sites.ensure([Page(5000)])
    with pytest.raises(UsageError, match=r"does not have index_10MB.html.*serve --addr 10.0.0.1 --size 10MB"):
        sites.ensure([Page(5000), Page(10**7)])
    with pytest.raises(UsageError, match="index_5KB.html"):  # the name is right but not the size
        RemoteSites({"index_5KB.html": 4999}, "10.0.0.1").ensure([Page(5000)])
    page = Page(5000, 3)  # a multi-object page needs its HTML and its object
    with pytest.raises(UsageError, match=r"does not have objects_3x5KB.html.*--size 3x5KB"):
        RemoteSites({page.html_name: page.html_bytes}, "10.0.0.1").ensure([page])
    RemoteSites({page.html_name: page.html_bytes, "obj_5KB.png": 5000, "hero_5KB.png": 5000}, "10.0.0.1").ensure([page])
    # a many-origin page needs an address per origin: the embedded testbed's, refused before anything is asked
    many = Page(5000, 4, origins=2)
    with pytest.raises(UsageError, match=r"2o:4x5KB spread over several origins.*run them without --server-machine"):
        RemoteSites({name: size for name, size, _ in many.files()}, "10.0.0.1").ensure([many])


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


def test_the_token_comes_from_a_private_file_the_environment_or_argv_with_a_warning(tmp_path):
    import json
    import os
    import pytest
    from plt_bench.errors import UsageError
    from plt_bench.remote import TOKEN_ENV, make_ref
    pin = "2r1iJ0T0zs93/lZNjz/oiobphZ3j5fOPKDzm2p1dTSI="
    token = "ab" * 32
    bare, info = tmp_path / "token", tmp_path / "info.json"
    bare.write_text(token + "\n")
    info.write_text(json.dumps({"addr": "10.0.0.1", "token": token}))
    for f in (bare, info):
        os.chmod(f, 0o600)
        ref = make_ref("10.0.0.1", pin, None, None, None, str(f), environ={})
        assert (ref.token, ref.token_source) == (token, "file")
    assert make_ref("10.0.0.1", pin, None, None, None, environ={TOKEN_ENV: token}).token_source == "environment"
    assert make_ref("10.0.0.1", pin, token, None, None, environ={}).token_source == "argv"
    os.chmod(bare, 0o644)
    with pytest.raises(UsageError, match=r"can be read by other users \(mode 0644\); make it yours alone: chmod 600"):
        make_ref("10.0.0.1", pin, None, None, None, str(bare), environ={})
    with pytest.raises(UsageError, match="not with --server-token as well"):
        make_ref("10.0.0.1", pin, token, None, None, str(info), environ={})
    with pytest.raises(UsageError, match="--server-token-file: required with --server-machine"):
        make_ref("10.0.0.1", pin, None, None, None, environ={})
    with pytest.raises(UsageError, match="--server-token-file: cannot read"):
        make_ref("10.0.0.1", pin, None, None, None, str(tmp_path / "none"), environ={})
    with pytest.raises(UsageError, match=f"{TOKEN_ENV}: expected the 64 hex digits"):
        make_ref("10.0.0.1", pin, None, None, None, environ={TOKEN_ENV: "secret"})


def test_serve_takes_the_servers_that_serve_a_second_machine_and_the_client_finds_what_it_lacks():
    from plt_bench import remote
    assert remote.serve_servers(None) == ("caddy",) and remote.serve_servers("caddy,quinn,caddy") == ("caddy", "quinn")
    assert remote.serve_servers("QUINN") == ("quinn",)
    with pytest.raises(UsageError, match=r"^--http-server: 'nginx'; expected one or more of caddy, quinn"):
        remote.serve_servers("nginx")
    # what a serve says it runs; one from before it said so ran Caddy alone
    assert remote.missing_servers(("caddy", "quinn"), {"servers": {"caddy": {}}}) == ["quinn"]
    assert remote.missing_servers(("quinn",), {"caddy": {"version": "v2"}}) == ["quinn"]
    assert remote.missing_servers(("caddy",), {}) == []
    assert remote.missing_servers(("caddy", "quinn"), {"servers": {"caddy": {}, "quinn": {}}}) == []


def test_a_recording_crosses_the_control_channel_in_parts_and_comes_out_whole_or_refused():
    import base64
    import hashlib
    from plt_bench.pages.archive import ArchiveError, Packed
    from plt_bench.remote import replay_parts
    body = bytes(range(256)) * 5000
    packed = Packed("rec", hashlib.sha256(b"{}").hexdigest(), b"{}", {hashlib.sha256(body).hexdigest(): body, hashlib.sha256(b"").hexdigest(): b""})
    data = packed.to_bytes()
    parts = replay_parts(data, part_bytes=100_000)
    assert len(parts) == 13 and all(len(p) <= 140_000 for p in parts)  # each part fits a control line (1 MiB)
    again = Packed.from_bytes("rec", packed.sha256, b"".join(base64.b64decode(p) for p in parts))
    assert again == packed
    with pytest.raises(ArchiveError, match="rec: its bytes end 1 short"):
        Packed.from_bytes("rec", packed.sha256, data[:-1])
    assert replay_parts(b"") == [""]  # an empty recording is still one part


def test_a_server_machines_replay_lives_on_benchmarking_addresses_the_client_shapes_as_test_traffic():
    from plt_bench.link.commands import host_nfqueue_rules, u32_matches
    from plt_bench.remote import RemotePlan, replay_addresses, replay_net
    from plt_bench.remote import static_addresses
    every, own = replay_addresses(3)
    served = static_addresses(3)
    assert replay_net(3) == "198.18.3.0/24" and every[0] == "198.18.3.64" and own[0] == "198.18.3.160"
    assert served[0] == "198.18.3.100" and len(served) == 8
    assert len(every) == len(own) == 32 and not set(every) & set(own) and not set(served) & (set(every) | set(own))
    plan = RemotePlan(3, "eth1", "10.0.0.1", "10.0.0.2", replay_net=replay_net(3))
    assert plan.peers == ["10.0.0.1", "198.18.3.0/24"] and RemotePlan(3, "eth1", "10.0.0.1", "10.0.0.2").peers == ["10.0.0.1"]
    matches = [" ".join(m) for m in u32_matches(plan.peers, "src")]
    assert sum("src 10.0.0.1/32" in m for m in matches) == sum("src 198.18.3.0/24" in m for m in matches) == 7
    rules = host_nfqueue_rules(plan.peers, 20549)
    assert {r[1] for r in rules} == {"10.0.0.1", "198.18.3.0/24"} and len(rules) == 14
    assert plan.describe()["addresses"]["replay_net"] == "198.18.3.0/24"
