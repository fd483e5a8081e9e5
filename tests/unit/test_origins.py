"""Each origin at its own distance (--origin-rtt, plt_bench.link.origins): the option, the delays a
load sees and the addresses they go to, linkem's arguments, and the per-trial proof's arithmetic."""
import pytest

from plt_bench.errors import UsageError
from plt_bench.link import origins
from plt_bench.link.origins import OriginRtt, check_hosts, parse, parse_list


def test_the_option_reads_each_form_and_refuses_what_is_not_one_naming_the_option():
    assert parse("off") is None and parse("Recorded") == OriginRtt("recorded")
    given = parse("static.pkg.test=100+api.pkg.test=40.5ms")
    assert given.delays_ms == (("api.pkg.test", 40.5), ("static.pkg.test", 100.0))
    assert given.text == "api.pkg.test=40.5+static.pkg.test=100" and parse(given.text) == given
    assert parse_list(None) == (None,) and parse_list("off,a.test=10") == (None, parse("a.test=10"))
    for bad, why in [("static.pkg.test", "expected off, recorded, or HOST=MS"), ("a.test=-5", "not a path delay"),
                     ("a.test=1e3", "not a path delay"), ("a.test=nan", "not a path delay"),
                     ("a.test=20000", "more than 10000 ms"), ("a.test=1+a.test=2", "a.test is given twice"),
                     ("=5", "expected off, recorded"), ("a_b.test=5", "expected off, recorded")]:
        with pytest.raises(UsageError, match=f"--origin-rtt: .*{why}"):
            parse(bad)
    with pytest.raises(UsageError, match="--origin-rtt: 'off' is given twice"):
        parse_list("off, off")
    with pytest.raises(UsageError, match="--origin-rtt: far.test is no origin of 4o:1x5KB; its origins: a.test, b.test"):
        check_hosts(parse("far.test=10"), {"a.test", "b.test"}, "4o:1x5KB")
    check_hosts(parse("a.test=10"), {"a.test", "b.test"}, "4o:1x5KB")
    check_hosts(None, set(), "x")
    with pytest.raises(ValueError):
        origins.stored("a.test=-1")


def test_a_load_s_delays_go_to_each_address_of_the_hosts_named_and_linkem_splits_them_by_placement():
    assert origins.host_delays(None) == {}
    assert origins.host_delays(parse("a.test=100+b.test=0")) == {"a.test": 100.0}  # 0: at the link's RTT
    assert origins.host_delays(OriginRtt("recorded"), {"a.test": 90.0, "b.test": 0.0}) == {"a.test": 90.0}
    with pytest.raises(LookupError, match="no recorded timing"):
        origins.host_delays(OriginRtt("recorded"), None)
    paths = origins.address_delays({"a.test": 100.0}, [("a.test", "198.19.1.12"), ("b.test", "198.19.1.13"),
                                                       ("a.test", "198.19.1.70")])
    assert paths == {"198.19.1.12": 100.0, "198.19.1.70": 100.0}
    assert origins.linkem_args({"198.19.1.12": 100.001}, split=True) == [
        "--origin-delay", "down:198.19.1.12=50000", "--origin-delay", "up:198.19.1.12=50001"]
    assert origins.linkem_args({"198.19.1.12": 100.0}, split=False) == ["--origin-delay", "down:198.19.1.12=100000"]


def _rt(host, cs, ss, ce):
    from plt_bench.pages import page_url
    return {"name": page_url(host, "/x"), "connectStart": cs, "secureConnectionStart": ss, "connectEnd": ce}


def test_the_proof_times_each_origin_s_handshakes_and_fails_one_away_from_its_distance():
    from plt_bench.pages import url_host
    entries = [_rt("a.test", 10.0, 30.0, 51.0), _rt("b.test", 60.0, 180.0, 301.5),  # TLS's round trip: 21, 121.5
               _rt("b.test", 200.0, 330.0, 452.0),  # a second connection: the shortest is the origin's
               _rt("b.test", 70.0, 70.0, 70.0),  # a reused connection: says nothing
               _rt("c.test", 0, 0, 0)]
    tcp = origins.handshakes_ms(entries, url_host, quic=False)
    assert tcp == {"a.test": [21.0], "b.test": [121.5, 122.0]}
    assert origins.handshakes_ms(entries, url_host, quic=True) == {"a.test": [41.0], "b.test": [241.5, 252.0]}
    figures, problem = origins.proof({"b.test": 100.0}, 20.0, tcp, path_packets={"b.test": 40})
    assert problem is None
    assert [(f.host, f.expected_ms, f.measured_ms, f.connections, f.ok) for f in figures] == [
        ("a.test", 20.0, 21.0, 1, True), ("b.test", 120.0, 121.5, 2, True)]
    assert origins.as_json(figures)["b.test"]["packets"] == 40
    # the far origin came at the link's RTT: its delay was not applied
    _, problem = origins.proof({"b.test": 100.0}, 20.0, {"a.test": [20.5], "b.test": [21.0]})
    assert "origin b.test was not at its distance: its shortest handshake took 21 ms, expected 120 ms" in problem
    # a near origin pushed away is caught too; one sooner than the link allows as well
    _, problem = origins.proof({"b.test": 100.0}, 20.0, {"a.test": [45.0], "b.test": [120.0]})
    assert "origin a.test was not at its distance" in problem
    _, problem = origins.proof({"b.test": 100.0}, 20.0, {"a.test": [16.0], "b.test": [120.0]})
    assert "origin a.test was not at its distance" in problem
    _, problem = origins.proof({"b.test": 100.0}, 20.0, {"a.test": [20.0]}, path_packets={"b.test": 12})
    assert "b.test carried packets on their own path but the browser timed no handshake" in problem
    _, problem = origins.proof({"b.test": 100.0}, 20.0, {"b.test": [120.0]}, path_packets={"b.test": 0})
    assert "linkem held none of their packets" in problem
    assert origins.tolerance(20.0) == (3.0, 15.0) and origins.tolerance(200.0, jitter_ms=2.0) == (14.0, 34.0)
    # a slow machine (the VM's software emulation) adds to every handshake: the page's own first one says how much
    slow = {"a.test": [100.0], "b.test": [200.0], "c.test": [95.0]}
    _, problem = origins.proof({"b.test": 100.0}, 20.0, slow)
    assert "origin a.test was not at its distance" in problem
    figures, problem = origins.proof({"b.test": 100.0}, 20.0, slow, own_host="a.test")
    assert problem is None and {f.above_ms for f in figures} == {160.0}
    _, problem = origins.proof({"b.test": 100.0}, 20.0, {**slow, "b.test": [100.0]}, own_host="a.test")
    assert "origin b.test was not at its distance" in problem  # below: never loosened
    # a CPU-bound load: late handshakes say nothing of the distance; one too soon still fails
    assert origins.proof({"b.test": 100.0}, 20.0, slow, cpu_held=True)[1] is None
    assert "b.test" in origins.proof({"b.test": 100.0}, 20.0, {**slow, "b.test": [100.0]}, cpu_held=True)[1]


def test_the_server_s_own_handshake_round_trips_are_judged_beside_the_browser_s():
    """quinnserve's log says each connection's handshake round trip (the kernel's SYN-ACK sample over TCP,
    quinn's RTT at the handshake's end over QUIC): the shortest per origin is judged as the browser's is,
    so a far origin the browser saw at its distance but the server did not fails too; Caddy's log says
    none, and then the browser's figure alone judges."""
    entries = [{"host": "b.test", "proto": "h2", "remote_port": 5000, "rtt_ms": 121.2},
               {"host": "b.test", "proto": "h2", "remote_port": 5000, "rtt_ms": 121.2},  # one connection, once
               {"host": "b.test", "proto": "h2", "remote_port": 5001, "rtt_ms": 125.0},
               {"host": "A.test", "proto": "h2", "remote_port": 4000, "rtt_ms": 20.4},
               {"host": "c.test", "proto": "h2", "remote_port": 4001, "rtt_ms": None},
               {"host": "c.test", "proto": "h2", "remote_port": 4002}]  # Caddy's: no figure
    server = origins.server_handshakes(entries)
    assert server == {"b.test": [121.2, 125.0], "a.test": [20.4]}
    browser = {"a.test": [21.0], "b.test": [121.5]}
    figures, problem = origins.proof({"b.test": 100.0}, 20.0, browser, server=server)
    assert problem is None and [f.server_ms for f in figures] == [20.4, 121.2]
    assert origins.as_json(figures)["b.test"]["server_ms"] == 121.2
    # the server saw the far origin near: the browser's figure alone does not make it so
    figures, problem = origins.proof({"b.test": 100.0}, 20.0, browser, server={"b.test": [20.6]})
    assert problem.startswith("origin b.test was not at its distance: its server measured its shortest handshake "
                              "at 20.6 ms, expected 120 ms") and not figures[1].ok
    assert origins.proof({"b.test": 100.0}, 20.0, browser, server={})[1] is None


def test_the_netem_backend_holds_each_delay_in_a_band_of_its_own_and_reads_it_back():
    from plt_bench.link import readback
    paths = {"198.19.1.11": 100.0, "198.19.1.12": 40.0, "198.19.1.13": 100.0}
    cmds = origins.netem_commands("pb1-s", paths)
    assert cmds[0] == ["tc", "qdisc", "del", "dev", "pb1-s", "root"] and origins.netem_commands("pb1-s", {}) == cmds[:1]
    assert cmds[1] == ["tc", "qdisc", "add", "dev", "pb1-s", "root", "handle", "50:", "prio", "bands", "3",
                       "priomap", *["0"] * 16]
    assert ["tc", "qdisc", "add", "dev", "pb1-s", "parent", "50:2", "handle", "52:", "netem", "delay", "40000us",
            "limit", "100000"] in cmds  # the shorter delay first
    assert cmds[-1][-3:] == ["198.19.1.13/32", "flowid", "50:3"]
    with pytest.raises(Exception, match="at most 15"):
        origins.netem_commands("d", {f"10.0.0.{i}": float(i) for i in range(1, 17)})
    # what tc prints, read back
    qdiscs = ("qdisc prio 50: root refcnt 2 bands 3 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
              " Sent 900 bytes 9 pkt (dropped 0, overlimits 0 requeues 0)\n"
              "qdisc netem 52: parent 50:2 limit 100000 delay 40ms\n Sent 300 bytes 3 pkt (dropped 0, overlimits 0 requeues 0)\n"
              "qdisc netem 53: parent 50:3 limit 100000 delay 100ms\n Sent 500 bytes 5 pkt (dropped 0, overlimits 0 requeues 0)\n")
    filters = ("filter parent 50: protocol ip pref 1 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 50:3 not_in_hw\n"
               "  match c613010b/ffffffff at 12\n"
               "filter parent 50: protocol ip pref 1 u32 chain 0 fh 800::801 order 2049 key ht 800 bkt 0 flowid 50:2 not_in_hw\n"
               "  match c613010c/ffffffff at 12\n"
               "filter parent 50: protocol ip pref 1 u32 chain 0 fh 800::802 order 2050 key ht 800 bkt 0 flowid 50:3 not_in_hw\n"
               "  match c613010d/ffffffff at 12\n")
    stats = readback.parse_qdisc_stats(qdiscs)
    leaves = {q["handle"]: {**q, **stats.get(q["handle"], {})} for q in readback.parse_qdiscs(qdiscs)}
    read = readback.parse_src_filters(filters)
    assert read[0] == ("198.19.1.11", "50:3")
    held = origins.netem_paths_read(leaves, read, paths)
    assert held == [{"addr": "198.19.1.11", "extra_us": 100000, "packets": 5},
                    {"addr": "198.19.1.12", "extra_us": 40000, "packets": 3},
                    {"addr": "198.19.1.13", "extra_us": 100000, "packets": 5}]
    with pytest.raises(Exception, match="holds 198.19.1.12 at 40000 us, expected 50000"):
        origins.netem_paths_read(leaves, read, {**paths, "198.19.1.12": 50.0})
    with pytest.raises(Exception, match="holds 198.19.1.13, which no path asks for"):
        origins.netem_paths_read(leaves, read, {k: v for k, v in paths.items() if k != "198.19.1.13"})


def test_the_report_shows_each_origin_s_distance_per_cell_and_writes_it_out(tmp_path):
    """The report's table of each origin's distance (stats.origins_table): per cell and origin, the asked and
    the measured round trips over the trials that proved them, and in how many it held; a store without
    --origin-rtt shows no such table (as before)."""
    import json as _json
    import dataclasses as _dc
    from plt_bench import store as st
    from plt_bench.analysis import report
    from .trials import conditions, trial
    far = conditions(rtt_ms=20, origin_rtt=parse("plt-o1.test=100"))
    figs = lambda m, ok=True: _json.dumps({  # noqa: E731
        "plt-o1.test": {"path_ms": 100.0, "expected_ms": 120.0, "measured_ms": m, "connections": 1, "below_ms": 6.0,
                        "above_ms": 30.0, "packets": 40, "ok": ok},
        "plt.test": {"path_ms": 0.0, "expected_ms": 20.0, "measured_ms": 21.0, "connections": 1, "below_ms": 3.0,
                     "above_ms": 30.0, "packets": None, "ok": True}})
    with st.Store(tmp_path / "s.sqlite") as s:
        cid = s.new_campaign("far", "2026-11-29T10:00:00.000+00:00", {"protos": ["h3", "h1"]}, {"link_backend": "linkem"})
        for i, (proto, m) in enumerate([("h3", 121.0), ("h1", 122.0), ("h3", 123.0), ("h1", 124.0), ("h3", 125.0),
                                        ("h1", 126.0)]):
            s.add_trial(trial(cid, i, proto=proto, cond=far, run_index=i // 2, origin_rtts_json=figs(m)))
        s.add_trial(_dc.replace(trial(cid, 6, proto="h3", cond=far, run_index=3, status="failed",
                                      origin_rtts_json=figs(21.0, ok=False)), reason="origin plt-o1.test was not at its distance"))
        rep = report.build(s, [cid])
        plain = s.new_campaign("near", "2026-11-29T11:00:00.000+00:00", {"protos": ["h3"]}, {"link_backend": "linkem"})
        s.add_trial(trial(plain, 0, cond=conditions(rtt_ms=20)))
        assert not report.build(s, [plain])["origins"]
    rows = {(r["proto"], r["host"]): r for r in rep["origins"]}
    h3 = rows[("h3", "plt-o1.test")]
    assert (h3["n"], h3["path_ms"], h3["expected_ms"], h3["measured_ms"], h3["min_ms"], h3["max_ms"], h3["within"]) == (
        4, 100.0, 120.0, 122.0, 21.0, 125.0, 3)
    assert rows[("h1", "plt.test")]["within"] == 3
    (title, what, table), = [x for x in report.sections(rep) if x[0] == "Each origin's distance"]
    assert table[0][3:] == ["origin", "n", "path ms", "asked ms", "measured ms", "min", "max", "within"]
    assert table[1][3:5] == ["plt-o1.test", "4"] and table[1][-1] == "3/4"  # the far origin first
    files = report.write(rep, tmp_path / "out")
    assert any(f.name == "origins.csv" for f in files)
