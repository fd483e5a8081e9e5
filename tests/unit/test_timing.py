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


def test_the_think_axis_keeps_each_value_s_canonical_text_off_as_none_and_refuses_an_empty_value():
    from plt_bench.pages.timing import of_text, parse_list
    assert parse_list(None) == (None,)
    assert parse_list("off, 200ms,recorded,200") == (None, "200", "recorded")
    assert of_text(None) == Think() and of_text("12.5") == Think("fixed", 12.5) and of_text("recorded").on
    for bad in ("200,", ",", "200,,off"):
        with pytest.raises(UsageError, match="--think: .*empty value"):
            parse_list(bad)


def test_a_think_stage_s_header_reads_back_and_its_control_file_is_read_again_when_it_changes(tmp_path):
    from plt_bench.pages.timing import ThinkFile, header, read_header, write_think
    assert read_header(header(200, 200.4567)) == (200.0, 200.457)
    assert read_header("asked=-1; waited=3") is None and read_header(None) is None and read_header("200") is None
    f = ThinkFile(tmp_path / "think")
    assert f.current() == Think()  # no file: off
    write_think(tmp_path / "think", "150")
    assert f.current() == Think("fixed", 150.0)
    write_think(tmp_path / "think", "recorded")
    assert f.current() == Think("recorded")
    write_think(tmp_path / "think", None)
    assert f.current() == Think()
    (tmp_path / "think").write_text("garbage\n")
    assert f.current() == Think()  # what it cannot read asks nothing (and the trial's proof then fails)


def _logged(uri: str, asked: float | None, waited: float = 0.0, duration_s: float = 1.0) -> dict:
    from plt_bench.pages.timing import header
    return {"uri": uri, "think": None if asked is None else header(asked, waited), "duration_s": duration_s}


def test_the_proof_holds_every_response_to_its_asked_wait_and_says_which_was_not():
    from plt_bench.pages.timing import proof
    fixed = Think("fixed", 200.0)
    figures, problem = proof(fixed, [_logged("/a", 200, 200.3, 0.21), _logged("/b", 200, 224.0, 0.3)])
    assert problem is None and figures["ok"] and figures["held"] == 2 and figures["short_ms"] == 0.0
    assert figures["waited_ms"] == {"min": 200.3, "median": 212.15, "max": 224.0} and figures["over_ms"] == 24.0
    cases = [([_logged("/a", 200, 198.0)], "short: /a waited 198.0 ms of 200"),
             ([_logged("/a", None)], "1 of 1 responses passed no think stage (/a)"),
             ([_logged("/a", 100, 100.0)], "/a was asked 100 ms, not 200"),
             ([_logged("/a", 200, 200.5, 0.05)], "took 50.0 ms at the server, less than its 200.5 ms wait"),
             ([], "the server's log holds none of the trial's responses")]
    for entries, why in cases:
        figures, problem = proof(fixed, entries)
        assert not figures["ok"] and problem.startswith("think time not as asked: ") and why in problem, problem
    # a response that waited longer than the tolerance (25 ms, 10% being 20) and none otherwise: the busy
    # machine's refusal, said as one; beside a false claim, the claim's failure
    figures, problem = proof(fixed, [_logged("/a", 200, 226.0), _logged("/b", 200, 200.2)])
    assert not figures["ok"] and problem == ("the machine held the server past its think time: 1 response(s) over: "
                                             "/a waited 226.0 ms for 200")
    problem = proof(fixed, [_logged("/a", 200, 226.0), _logged("/b", 200, 190.0)])[1]
    assert problem.startswith("think time not as asked: 1 response(s) short: /b") and problem.endswith("1 over")
        # recorded: each response its own asked wait, a long one allowed 10% over
    figures, problem = proof(Think("recorded"), [_logged("/", 850, 930.0), _logged("/x", 0, 0.4)])
    assert problem is None and figures["asked_ms"] == {"min": 0.0, "median": 425.0, "max": 850.0}
    assert proof(Think("recorded"), [_logged("/", 850, 940.0)])[1] is not None


def test_the_report_shows_each_cell_s_think_time_and_writes_it_out(tmp_path):
    """The report's think-time table (stats.think_table): per cell, the think asked, the waits asked and
    waited over the trials that proved them, and in how many every response was held; a store without
    --think shows no such table (as before)."""
    import dataclasses as dc
    import json

    from plt_bench import store as st
    from plt_bench.analysis import report
    from plt_bench.pages.timing import proof
    from .trials import conditions, trial
    cond = conditions(rtt_ms=20, think="200")
    with st.Store(tmp_path / "s.sqlite") as s:
        cid = s.new_campaign("think", "2026-11-29T10:00:00.000+00:00", {"protos": ["h3", "h1"]}, {"link_backend": "linkem"})
        for i, (proto, w) in enumerate([("h3", 200.2), ("h1", 200.4), ("h3", 201.0), ("h1", 200.6)]):
            figures, _ = proof(Think("fixed", 200.0), [_logged("/a", 200, w, 0.3), _logged("/b", 200, w + 1, 0.3)])
            s.add_trial(trial(cid, i, proto=proto, cond=cond, run_index=i // 2, think_json=json.dumps(figures)))
        figures, why = proof(Think("fixed", 200.0), [_logged("/a", 200, 150.0, 0.3)])
        s.add_trial(dc.replace(trial(cid, 4, proto="h3", cond=cond, run_index=2, status="failed",
                                     think_json=json.dumps(figures)), reason=why))
        rep = report.build(s, [cid])
        plain = s.new_campaign("plain", "2026-11-29T11:00:00.000+00:00", {"protos": ["h3"]}, {"link_backend": "linkem"})
        s.add_trial(trial(plain, 0, cond=conditions(rtt_ms=20)))
        assert not report.build(s, [plain])["think"]
    rows = {r["proto"]: r for r in rep["think"]}
    assert (rows["h3"]["n"], rows["h3"]["held"], rows["h3"]["think"], rows["h3"]["asked_ms"]) == (3, 2, "200", 200.0)
    assert rows["h3"]["waited_ms"] == 200.7 and rows["h1"]["held"] == 2 and rows["h3"]["over_ms"] == 2.0
    (title, what, table), = [x for x in report.sections(rep) if x[0] == "Think time"]
    assert table[0][3:] == ["think", "n", "responses", "asked ms", "waited ms", "longest asked", "most over", "held"]
    written = report.write(rep, tmp_path / "out")
    assert (tmp_path / "out" / "think.csv") in written


def test_a_served_folder_s_recording_takes_each_think_its_server_said_before_any_estimate_from_its_wait():
    """A HAR's wait holds the server's think, the round trip, and the time its first byte queued behind
    other bytes on the recording's link (over one TCP connection, a slow-start round trip each): measured
    320 and 444 ms for 200 ms of think at 120 ms. Where the server said its think (plt-bench's think
    stage, a recording of served folders), that is the recording's; elsewhere the wait less the RTT."""
    from plt_bench.pages.timing import RecordedTiming, SERVER_THINK_FIELD, header, server_think_ms, with_server_thinks
    entries = [_entry("a.test", 40.0, 20.0, 224.0), _entry("b.test", 240.0, 120.0, 444.0),
               _entry("b.test", 240.0, 120.0, 320.0), _entry("c.test", 40.0, 20.0, 60.0)]
    for e, path in zip(entries, ("/", "/x.js", "/y.js", "/z.png")):
        e["request"]["url"] = page_url(e["request"]["url"].split("/")[2], path)
    served = [{"host": "a.test", "uri": "/", "think": header(200, 200.4)},
              {"host": "b.test", "uri": "/y.js", "think": header(200, 201.0)},
              {"host": "b.test", "uri": "/x.js", "think": header(200, 200.2)},
              {"host": "c.test", "uri": "/z.png", "think": None}]
    assert with_server_thinks(entries, served) == 3
    assert [server_think_ms(e) for e in entries] == [200.0, 200.0, 200.0, None]  # as asked (not as waited)
    assert SERVER_THINK_FIELD.startswith("_")  # a HAR's custom field
    t = from_har(entries)
    hosts = ["a.test", "b.test", "b.test", "c.test"]
    estimated = t.think_ms(hosts)
    assert estimated == [204.0, 324.0, 200.0, 40.0]  # the queued first byte counted as think
    said = RecordedTiming(t.origin_rtts_ms, t.waits_ms, tuple(server_think_ms(e) for e in entries))
    assert said.think_ms(hosts) == [200.0, 200.0, 200.0, 40.0]
