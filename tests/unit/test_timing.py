"""A recorded page's timing (issue 61; plt_bench.pages.timing): the option that asks for think time,
a HAR's timings read into each origin's RTT and each response's wait, and the arithmetic that makes
them a path delay and a think time."""
import pytest

from plt_bench.errors import UsageError
from plt_bench.pages import page_url
from plt_bench.pages.timing import Think, from_har, handshake_ms, parse_think


def _entry(host: str, connect: float, ssl: float, wait: float, version: str = "h2") -> dict:
    return {"request": {"url": page_url(host, "/x")}, "response": {"httpVersion": version},
            "timings": {"dns": -1, "connect": connect, "ssl": ssl, "send": 0.1, "wait": wait, "receive": 1}}


def test_the_think_option_reads_each_form_and_refuses_what_is_not_one_naming_the_option():
    assert parse_think("off") == Think() and parse_think("200") == Think("fixed", 200.0) == parse_think("200ms")
    assert parse_think("recorded").label == "recorded" and parse_think("12.5").label == "12.5"
    for bad in ("-1", "soon", "inf", "20001"):
        with pytest.raises(UsageError, match="--think: "):
            parse_think(bad)


def test_a_connection_s_handshake_is_tcp_s_syn_round_trip_or_quic_s_one_round_trip():
    assert handshake_ms(_entry("a.test", 130.0, 90.0, 10)) == 40.0        # TCP: connect less TLS's share
    assert handshake_ms(_entry("a.test", 45.0, 44.0, 10, "h3")) == 45.0   # QUIC: its one-round-trip handshake
    assert handshake_ms(_entry("a.test", 40.0, -1, 10, "http/1.1")) == 40.0  # no TLS share said: the whole connect
    assert handshake_ms(_entry("a.test", -1, -1, 10)) is None and handshake_ms(_entry("a.test", 0, 0, 10)) is None


def test_a_har_gives_each_origin_its_median_rtt_and_each_response_its_think_time_beyond_the_access_link():
    entries = [_entry("www.a.test", 60.0, 40.0, 120.0),   # the page: RTT 20 ms, 100 ms of thinking
               _entry("cdn.a.test", 30.0, 20.0, 12.0),    # a near CDN: RTT 10 ms
               _entry("cdn.a.test", 34.0, 20.0, 11.0),    # its second connection: 14 ms
               _entry("cdn.a.test", -1, -1, 9.0),          # a request on a connection already open
               _entry("far.b.test", 110.0, 0.0, 95.0, "h3"),  # a far origin over QUIC: RTT 110 ms
               {"request": {"url": page_url("www.a.test", "/y")}, "timings": {"wait": -1}}]
    t = from_har(entries)
    assert t.origin_rtts_ms == {"www.a.test": 20.0, "cdn.a.test": 12.0, "far.b.test": 110.0}
    assert t.access_rtt_ms() == 12.0  # the nearest origin: the recording machine's own link's share
    assert t.path_delays_ms() == {"www.a.test": 8.0, "cdn.a.test": 0.0, "far.b.test": 98.0}
    assert t.path_delays_ms(access_rtt_ms=5.0)["cdn.a.test"] == 7.0 and t.path_delays_ms(50.0)["www.a.test"] == 0.0
    hosts = ["www.a.test", "cdn.a.test", "cdn.a.test", "cdn.a.test", "far.b.test", "www.a.test"]
    assert t.think_ms(hosts) == [100.0, 0.0, 0.0, 0.0, 0.0, None]  # never below 0; None where no wait was kept
    assert from_har([]).access_rtt_ms() == 0.0 and from_har([]).path_delays_ms() == {}
