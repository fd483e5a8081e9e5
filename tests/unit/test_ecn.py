"""ECN at the endpoints (link.ecn, the server's and the browser's log readers, the report's table):
pure, from outputs recorded on this machine (ss 6.1 on Linux 6.18, quic-go's qlog in Caddy 2.11.7,
Chromium 156's net-log) cut down to what they say of ECN."""

import json

import pytest

from plt_bench.browsers.chromium import netlog_quic_ecn
from plt_bench.conditions import Conditions
from plt_bench.link import ecn
from plt_bench.servers.caddy import qlog_quic_ecn
from plt_bench.link.aqm import parse as aqm_parse

# `ss -tieHnE` in two namespaces as a page's connection closed (one line each broken here as ss wraps it)
SS_EVENTS = """UNCONN 1      0      10.99.0.2:443 10.99.0.1:56986 ino:0 sk:abb2
\t ts sack ecn ecnseen wscale:10,10 rto:204 rtt:0.091/0.124 mss:1448 cwnd:16 bytes_sent:4710 bytes_acked:4711 delivered:7 delivered_ce:22 rcv_space:14480
UNCONN 0      0      10.99.0.2:443   0.0.0.0:*     ino:0 sk:b079
\t rto:1000 mss:536 cwnd:10 lastsnd:72891820 app_limited
UNCONN 0      0      10.99.0.2:443 10.99.0.1:56990 ino:0 sk:abb4
\t ts sack wscale:10,10 rto:204 rtt:0.091/0.124 mss:1448 cwnd:16 bytes_sent:900 delivered:3
"""


def test_ss_output_gives_each_connection_s_ecn_and_leaves_listeners_out():
    conns = ecn.parse_ss(SS_EVENTS)
    assert [(c.peer, c.negotiated, c.ecn_seen, c.ce_delivered, c.bytes_sent) for c in conns] == [
        ("10.99.0.1:56986", True, True, 22, 4710), ("10.99.0.1:56990", False, False, 0, 900)]
    side = ecn.tcp_side(conns + ecn.parse_ss(SS_EVENTS.split("UNCONN 0      0      10.99.0.2:443   0.0.0.0")[0]))
    assert side == ecn.TcpSide(connections=2, negotiated=1, ecn_seen=1, ce_delivered=22)  # the dump's twin counted once
    assert ecn.tcp_side([]) is None and ecn.parse_ss("") == []


def test_the_socket_watch_commands_name_the_port_from_each_side():
    assert ecn.watch_argv("server") == ["stdbuf", "-oL", "ss", "-tieHnE", "sport = :443"]
    assert ecn.dump_argv("browser") == ["ss", "-tieHn", "dport = :443"]
    with pytest.raises(ValueError, match="server or browser"):
        ecn.watch_argv("client")


def _seq(*records) -> str:
    return "".join("\x1e" + json.dumps(r) + "\n" for r in records)


def test_quic_go_s_qlog_gives_validation_its_ect_packets_and_the_peer_s_counts_per_space():
    def ack(space, ect0, ce):
        return {"name": "transport:packet_received", "data": {"header": {"packet_type": space},
                                                               "frames": [{"frame_type": "ack", "ect0": ect0, "ect1": 0,
                                                                           "ce": ce}]}}
    one = _seq({"file_schema": "urn:ietf:params:qlog:file:sequential"},
               {"name": "recovery:ecn_state_updated", "data": {"new": "testing"}},
               {"name": "transport:packet_sent", "data": {"ecn": "ECT(0)"}},
               {"name": "transport:packet_sent", "data": {"ecn": "ECT(0)"}},
               {"name": "transport:packet_sent", "data": {}},
               ack("initial", 1, 0), ack("1RTT", 200, 0), ack("1RTT", 425, 1), ack("1RTT", 300, 0),
               {"name": "recovery:ecn_state_updated", "data": {"new": "capable"}})
    failed = _seq({"name": "recovery:ecn_state_updated", "data": {"new": "failed"}}) + "\x1e{\"name\": \"transport:pa"
    side = qlog_quic_ecn([one, failed])
    assert side == ecn.QuicSide(source="qlog", connections=2, validated=1, ect0=426, ce=1, ect_sent=2)


def test_chromium_s_net_log_gives_each_session_s_largest_ecn_counts():
    types = {"QUIC_SESSION": 1, "QUIC_SESSION_ACK_FRAME_SENT": 2, "HTTP_STREAM_JOB": 3}
    events = [{"type": 1, "source": {"id": 7}}, {"type": 1, "source": {"id": 9}},
              {"type": 2, "source": {"id": 7}, "params": {"largest_observed": 1}},  # the handshake's: no counts
              {"type": 2, "source": {"id": 7}, "params": {"ECT0": 425, "ECT1": 0, "CE": 1}},
              {"type": 2, "source": {"id": 9}, "params": {"ECT0": 3, "ECT1": 0, "CE": 0}},
              {"type": 3, "source": {"id": 11}, "params": {}}]
    side = netlog_quic_ecn({"constants": {"logEventTypes": types}, "events": events})
    assert side == ecn.QuicSide(source="netlog", connections=2, ect0=428, ce=1)
    with pytest.raises(ValueError, match="not a net-log"):
        netlog_quic_ecn({"events": []})


def test_the_report_s_ecn_table_sums_each_side_and_says_where_quic_had_no_log():
    from plt_bench.analysis import stats

    from .trials import trial
    cond = Conditions(2 * 10**7, 2 * 10**7, rtt_ms=50, aqm=aqm_parse("codel"), ecn=True)
    tcp = {"tcp_browser": {"connections": 2, "negotiated": 2, "ecn_seen": 2, "ce_delivered": 0},
           "tcp_server": {"connections": 2, "negotiated": 1, "ecn_seen": 2, "ce_delivered": 20},
           "quic_browser": None, "quic_server": None}
    quic = {"tcp_browser": None, "tcp_server": None,
            "quic_browser": {"source": "netlog", "connections": 1, "validated": None, "ect0": 400, "ce": 2,
                             "ect_sent": None, "why": None},
            "quic_server": {"source": None, "connections": 0, "validated": None, "ect0": 0, "ce": 0, "ect_sent": None,
                            "why": ecn.NO_QUIC_LOG}}
    ts = [trial(seq=0, cond=cond, proto="h2", link_json=json.dumps({"endpoints_ecn": tcp})),
          trial(seq=1, cond=cond, proto="h2", link_json=json.dumps({"endpoints_ecn": {**tcp, "tcp_server": {
              **tcp["tcp_server"], "ce_delivered": 10}}})),
          trial(seq=2, cond=cond, proto="h3", link_json=json.dumps({"endpoints_ecn": quic}))]
    rows = {r["proto"]: r for r in stats.ecn_table(ts)}
    assert (rows["h2"]["tcp_server_negotiated"], rows["h2"]["tcp_server_connections"],
            rows["h2"]["tcp_server_ce_delivered"], rows["h2"]["quic_connections"]) == (2, 4, 15.0, None)
    assert (rows["h3"]["quic_ce_browser_log"], rows["h3"]["quic_ce_server_log"], rows["h3"]["quic_validated"],
            rows["h3"]["quic_why"]) == (2.0, None, None, ecn.NO_QUIC_LOG)
    assert stats.ecn_table([trial(seq=0)]) == []  # without --ecn: no table


def test_a_trial_s_record_names_each_side_and_none_where_it_had_no_connection():
    rec = ecn.endpoints(ecn.parse_ss(SS_EVENTS), [], None, ecn.QuicSide(source=None, why=ecn.NO_QUIC_LOG))
    assert list(rec) == ["tcp_browser", "tcp_server", "quic_browser", "quic_server"]
    assert rec["tcp_browser"] == {"connections": 2, "negotiated": 1, "ecn_seen": 1, "ce_delivered": 22}
    assert rec["tcp_server"] is None and rec["quic_browser"] is None and rec["quic_server"]["why"] == ecn.NO_QUIC_LOG
