"""Capture runs, read back by real tools: tshark dissects the pcap and decrypts it with Chromium's key
log; the qlog and the net-log parse; the HAR is valid HAR 1.2 and agrees with Resource Timing and
Caddy's log; the CPU series agree with the per-process totals."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from plt_bench.capture import KINDS, Settings
from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Cell, Conditions
from plt_bench.cpu import roles_of
from plt_bench.pages import parse_page
from plt_bench.pages import Page
from plt_bench.trial.run import run_cell_once
from plt_bench.store import Store
from plt_bench import testbed

PAGE = 500_000  # dissected with tshark
BIG = 10**7     # ~1 s of load: CPU totals large enough to compare at 10% (the kernel counts in 10 ms ticks)
OBJECTS = Page(5000, 20)  # the HAR's waterfall: a page and its 20 images


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """h3 and h1 trials of the 500KB page, the 10MB page and a 20-image page with every capture
    kind, and h2 trials of the 500KB and the 20-image page (the CPU's figures need no third
    protocol), in a store of their own."""
    results = tmp_path_factory.mktemp("capture-results")
    with Store(results / "c.sqlite") as store, \
            testbed.Testbed(testbed.Setup(PROJECT_ROOT / "sites", capture=Settings(KINDS, results / "captures"))) as bed:
        bed.sites.ensure([Page(PAGE), Page(BIG), OBJECTS])
        # rate only: with added delay, linkem shares 2 cores with tcpdump, the net-log and the qlog and
        # sometimes falls behind (such trials are failed and retried by campaigns; not this test's subject)
        cond = Conditions(100 * 10**6, 100 * 10**6)
        bed.set_conditions(cond)
        cid = store.new_campaign("capture-test", "now", {}, bed.metadata())
        trials = {}
        runs = [(p, Page(s), f"{p}{k}") for s, k in ((PAGE, ""), (BIG, "-big")) for p in ("h3", "h1")]
        runs += [(p, OBJECTS, f"{p}-objects") for p in ("h3", "h1")]
        runs += [("h2", Page(PAGE), "h2"), ("h2", OBJECTS, "h2-objects")]
        for seq, (proto, page, key) in enumerate(runs):
            t = run_cell_once(bed, store, cid, seq, 0, Cell(proto, page, cond))
            assert t.status == "ok", t.reason
            row = store.trials([cid])[-1]
            arts = store.artifacts(row.trial_id)
            trials[key] = {
                "row": row, "artifacts": {a["kind"]: a for a in arts}, "all_artifacts": arts,
                "samples": store.cpu_samples(row.trial_id)}
        spool_during = list(results.glob("captures/.qlog-spool-*"))
    yield {"trials": trials, "results": results, "spool_during": spool_during,
           "spool_left": list(results.glob("captures/.qlog-spool-*"))}


def tshark(pcap: str, keylog: str | None, display_filter: str, *fields: str) -> list[list[str]]:
    # out-of-order reassembly: a loss at the bottleneck queue otherwise leaves the TLS record that
    # holds the response unreassembled (off by default in Wireshark 4.0)
    argv = ["tshark", "-r", pcap, "-n", "-o", "tcp.reassemble_out_of_order:TRUE", "-Y", display_filter]
    if keylog:
        argv += ["-o", f"tls.keylog_file:{keylog}"]
    if fields:
        argv += ["-T", "fields", *[x for f in fields for x in ("-e", f)]]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [line.split("\t") for line in res.stdout.splitlines() if line.strip()]


def test_every_capture_file_is_referenced_by_the_store_and_lives_under_results(captured):
    results = captured["results"].resolve()
    for key, tr in captured["trials"].items():
        proto = key.split("-")[0]
        # visual: the screencast's frames (frames.zip), written with every other kind
        want = {"pcap", "keylog", "netlog", "har", "visual"} | ({"qlog"} if proto == "h3" else set())
        assert set(tr["artifacts"]) == want, (proto, tr["artifacts"])
        for a in tr["all_artifacts"]:
            p = Path(a["path"])
            assert p.is_file() and p.stat().st_size == a["bytes"] > 0, a
            assert p.resolve().is_relative_to(results / "captures"), p
            assert p.parent.name.endswith(f"-{proto}-{parse_page(tr['row'].page).html_name.rsplit('.', 1)[0]}"), p
        assert "0 dropped by the kernel" in tr["artifacts"]["pcap"]["note"]
        keylog = Path(tr["artifacts"]["keylog"]["path"])
        assert oct(keylog.parent.stat().st_mode & 0o777) == "0o700"  # keys decrypt the traffic: private folder
    assert len(captured["spool_during"]) == 1 and captured["spool_left"] == []  # the qlog spool goes with the testbed


def test_quic_trial_dissects_as_quic_and_decrypts_to_http3(captured):
    tr = captured["trials"]["h3"]
    pcap, keys = tr["artifacts"]["pcap"]["path"], tr["artifacts"]["keylog"]["path"]
    assert len(tshark(pcap, None, "quic")) > 300  # 500 KB in ~1250-byte datagrams
    # the whole transfer is in the capture, up to its last packet
    down = sum(int(x[0]) for x in tshark(pcap, None, "udp.srcport == 443", "udp.length"))
    assert down >= PAGE, down
    assert tshark(pcap, None, "http3") == []  # encrypted: nothing above QUIC without the keys
    frames = tshark(pcap, keys, "http3", "ip.src", "http3.frame_type")
    types = {(src, ft) for src, fts in frames for ft in fts.split(",") if ft}
    server = next(src for src, _ in types if src.startswith("198.19."))
    client = next(src for src, _ in types if src.startswith("198.18."))
    assert (client, "1") in types and (server, "1") in types  # HEADERS both ways: request and response
    assert (server, "4") in types  # the server's SETTINGS


def test_tcp_trial_dissects_as_tls_and_decrypts_to_http11(captured):
    tr = captured["trials"]["h1"]
    pcap, keys = tr["artifacts"]["pcap"]["path"], tr["artifacts"]["keylog"]["path"]
    assert tshark(pcap, None, "tls.handshake.type == 1")  # a Client Hello
    assert tshark(pcap, None, "http") == []  # encrypted without the keys
    uri = tr["row"].url.split("plt.test", 1)[1]
    req = tshark(pcap, keys, "http.request", "http.request.method", "http.request.uri", "http.request.version")
    # the page, then (after the load event) Chromium's own /favicon.ico, which the server answers 404
    assert req[0] == ["GET", uri, "HTTP/1.1"] and all(r[1] == "/favicon.ico" for r in req[1:]), req
    resp = tshark(pcap, keys, "http.response", "http.response.code", "http.response.version", "http.content_length")
    assert resp[0] == ["200", "HTTP/1.1", str(PAGE)], resp


def test_h2_trial_decrypts_to_http2_streams_on_one_connection(captured):
    """HTTP/2 over TLS 1.3: nothing above TLS without the keys; with Chromium's key log, tshark reads
    the HTTP/2 frames: the page's GET on a stream, and its 200 with the page's bytes as DATA; the
    20-image page's requests all on one TCP connection, each on a stream of its own."""
    tr = captured["trials"]["h2"]
    pcap, keys = tr["artifacts"]["pcap"]["path"], tr["artifacts"]["keylog"]["path"]
    assert tshark(pcap, None, "tls.handshake.type == 1") and tshark(pcap, None, "http2") == []
    uri = tr["row"].url.split("plt.test", 1)[1]
    heads = _frames(tshark(pcap, keys, "http2.type == 1", "http2.streamid", "http2.headers.method", "http2.headers.path",
                           "http2.headers.status"))
    assert any(h[1:3] == ["GET", uri] for h in heads), heads
    assert any(h[3] == "200" for h in heads), heads
    data = sum(int(x) for f in tshark(pcap, keys, "http2.type == 0", "http2.length") for x in f[0].split(",") if x)
    assert data >= PAGE, data  # the page's bytes came as DATA frames (and the favicon's 404 after)
    objs = captured["trials"]["h2-objects"]
    pcap, keys = objs["artifacts"]["pcap"]["path"], objs["artifacts"]["keylog"]["path"]
    gets = tshark(pcap, keys, 'http2.headers.method == "GET"', "tcp.stream", "http2.headers.path")
    paths = [p for f in gets for p in f[1].split(",")]
    assert len([p for p in paths if "/obj_" in p or "/hero_" in p]) == OBJECTS.objects, paths
    assert len({f[0] for f in gets}) == 1, gets  # one connection
    # a stream each: the client's HEADERS frames by their own stream ids (a packet's type and stream id
    # are listed once per frame, so they pair; its paths are listed for HEADERS frames alone, so they
    # pair with no stream id once a busy machine packs other frames in beside them)
    rows = tshark(pcap, keys, 'http2.type == 1 && ip.src == 198.18.0.0/16', "http2.type", "http2.streamid")
    sids = {sid for t, s in rows for ty, sid in zip(t.split(","), s.split(",")) if ty == "1"}
    assert len(sids) == len(paths), (sids, paths)


def _frames(rows: list[list[str]]) -> list[list[str]]:
    """tshark's rows with several HTTP/2 frames in one packet (values comma-joined) as one row per frame."""
    out = []
    for r in rows:
        cols = [c.split(",") for c in r]
        n = max(len(c) for c in cols)
        out += [[c[i] if i < len(c) else "" for c in cols] for i in range(n)]
    return out


def test_qlog_is_the_servers_trace_of_the_trials_connection(captured):
    path = captured["trials"]["h3"]["artifacts"]["qlog"]["path"]
    records = [json.loads(r) for r in Path(path).read_text().split("\x1e") if r.strip()]
    head = records[0]
    assert head["trace"]["vantage_point"]["type"] == "server"
    names = {r.get("name") for r in records[1:]}
    assert {"transport:packet_sent", "transport:packet_received"} <= names, sorted(n for n in names if n)[:20]
    sent = sum(r["data"].get("raw", {}).get("payload_length", 0) for r in records[1:]
               if r.get("name") == "transport:packet_sent")
    assert sent >= PAGE  # the page went out in the packets the qlog records


def test_netlog_is_complete_json_with_the_trials_url(captured):
    for key, tr in captured["trials"].items():
        data = json.loads(Path(tr["artifacts"]["netlog"]["path"]).read_text())
        assert {"constants", "events"} <= set(data)
        assert tr["row"].url in json.dumps(data["events"]), key


def test_the_har_is_valid_and_agrees_with_resource_timing_and_caddys_log(captured):
    """Every request of the trial in the HAR over the trial's protocol, each body the size Resource
    Timing gives, the page's as the trial's; as many connections as Caddy's log shows. Chromium's
    own /favicon.ico after the load is in the HAR too, and is not the trial's."""
    from plt_bench import har
    for key, tr in captured["trials"].items():
        row = tr["row"]
        log = json.loads(Path(tr["artifacts"]["har"]["path"]).read_text())
        har.validate(log)
        mine = [e for e in log["log"]["entries"] if "/favicon.ico" not in e["request"]["url"]]
        assert len(mine) == 1 + row.objects, (key, [e["request"]["url"] for e in mine])
        assert {e["response"]["httpVersion"] for e in mine} == {row.next_hop_protocol}, key
        assert mine[0]["request"]["url"] == row.url and mine[0]["response"]["content"]["size"] == row.decoded_body_bytes
        timing = {r["name"]: r for r in row.resources}
        for e in mine[1:]:
            assert e["response"]["status"] == 200 and e["response"]["content"]["size"] == OBJECTS.size_bytes, key
            assert timing[e["request"]["url"]]["decodedBodySize"] == e["response"]["content"]["size"], key
        assert len({e["connection"] for e in mine}) == row.connections, (key, row.connections)
        assert sum(e["response"]["content"]["size"] for e in mine) == row.size_bytes, key
        assert log["log"]["pages"][0]["pageTimings"]["onLoad"] > 0


def test_cpu_samples_exist_for_every_role_are_monotone_and_add_up_to_the_totals(captured):
    for key, tr in captured["trials"].items():
        totals = roles_of(tr["row"].cpu_json)
        by_role = {}
        for s in tr["samples"]:
            by_role.setdefault(s["role"], []).append(s)
        for role in ("browser", "renderer", "network", "gpu", "caddy"):
            assert role in by_role and role in totals, (key, role, sorted(by_role))
        assert set(by_role) <= set(totals) | {"linkem"}
        for role, ss in by_role.items():
            ss.sort(key=lambda s: s["t_s"])
            # the origin and the last reading at least; a 500KB load can end before the first 100 ms tick
            assert len(ss) >= (5 if key.endswith("-big") else 2), (key, role)
            for a, b in zip(ss, ss[1:]):
                assert b["t_s"] > a["t_s"] and b["user_s"] >= a["user_s"] and b["system_s"] >= a["system_s"], (key, role)
        if not key.endswith("-big"):
            continue
        # The sampler's last reading against the independent walk of the process tree: within 10%
        # per role and in sum, or, for a small role, the kernel's resolution (a 10 ms tick per field
        # of each of its processes at each end).
        for role, ss in by_role.items():
            last = ss[-1]["user_s"] + ss[-1]["system_s"]
            total = totals[role]["user_s"] + totals[role]["system_s"]
            ticks = 0.01 * 2 * 2 * totals[role].get("processes", 1)
            assert abs(last - total) <= max(0.10 * total, ticks) + 1e-9, (key, role, last, total)
        browser_roles = [r for r in by_role if r not in ("caddy", "linkem")]
        s_sum = sum(by_role[r][-1]["user_s"] + by_role[r][-1]["system_s"] for r in browser_roles)
        t_sum = sum(totals[r]["user_s"] + totals[r]["system_s"] for r in browser_roles)
        assert t_sum > 0.5 and abs(s_sum - t_sum) <= 0.10 * t_sum, (key, s_sum, t_sum)


def test_sampler_costs_little(captured):
    """Correctness bound only (the target, 1% of a core, is measured by plt-bench bench-sampler)."""
    for key, tr in captured["trials"].items():
        cpu = json.loads(tr["row"].cpu_json)
        for side in ("sampler", "server_sampler"):
            info = cpu[side]
            assert info["samples"] >= (5 if key.endswith("-big") else 2) and info["window_s"] > 0
            assert info["own_cpu_s"] < 0.2 * info["window_s"], (key, side, info)


def test_tcpdump_is_gone_after_the_trials(captured):
    mine = subprocess.run(["pgrep", "-f", f"tcpdump .*{captured['results']}"], capture_output=True, text=True)
    assert mine.stdout.strip() == "", mine.stdout
    assert os.path.isdir(captured["results"] / "captures")
