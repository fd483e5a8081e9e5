"""The second server's pure parts (servers/quinnserve.py): its configuration, its access log, the
controllers it runs; and what both servers share (the paths they serve)."""
import json
import re

import pytest

from plt_bench import servers
from plt_bench.errors import ServerError
from plt_bench.servers import caddy, quinnserve

from ..conftest import cargo_tests_pass

ORIGINS = [("plt.test", "198.19.4.2"), ("plt-o1.test", "198.19.4.11")]


def _config(tmp_path, **kw):
    args = dict(origins=ORIGINS, sites=tmp_path / "sites", cert=tmp_path / "c.pem", key=tmp_path / "k.pem",
                access_log=tmp_path / "access.log", cc="bbr")
    return quinnserve.render_config(**{**args, **kw})


def test_quinnserve_listens_on_every_origin_over_every_protocol_with_the_controller_asked(tmp_path):
    c = _config(tmp_path)
    assert c["cc"] == "bbr" and c["served"] == servers.SERVED_PATHS and c["replay_upstream"] is None
    assert c["listeners"] == [{"addr": "198.19.4.2", "protocols": ["h3", "h2", "h1"]},
                              {"addr": "198.19.4.11", "protocols": ["h3", "h2", "h1"]}]
    assert json.loads(json.dumps(c)) == c  # what it writes is plain JSON
    assert _config(tmp_path, cc="reno")["cc"] == "newreno"  # --cc's name, quinn's controller


def test_quinnserve_replays_through_replayd_and_offers_one_protocol_where_a_recording_spoke_one(tmp_path):
    c = _config(tmp_path, replay_addresses=["198.19.4.40"], replay_port=8123, own=["198.19.4.50", "198.19.4.51"],
                listeners=[("198.19.4.50", "h1"), ("198.19.4.51", "h2")])
    assert c["replay_upstream"] == "127.0.0.1:8123"
    assert c["listeners"][2:] == [{"addr": "198.19.4.40", "protocols": ["h3", "h2", "h1"], "replay": True},
                                  {"addr": "198.19.4.50", "protocols": ["h1"], "replay": True},
                                  {"addr": "198.19.4.51", "protocols": ["h2", "h1"], "replay": True}]
    with pytest.raises(ServerError, match="replayd's port"):
        _config(tmp_path, replay_addresses=["198.19.4.40"])


def test_a_controller_quinn_lacks_is_refused_by_name(tmp_path):
    with pytest.raises(ServerError, match="quinnserve cannot run QUIC with 'vegas'; its controllers: reno, cubic, bbr"):
        _config(tmp_path, cc="vegas")


def test_quinnserve_log_lines_are_entries_as_they_are():
    line = {"uri": "/index_5KB.html?t=1", "host": "plt.test", "proto": "h3", "status": 200, "size": 5000,
            "end_unix_s": 1.5, "duration_s": 0.01, "referer": None, "remote_port": 50000, "resumed": True,
            "method": "GET", "replay": None, "cc": "bbr", "think": "asked=200.000; waited=200.311", "rtt_ms": 50.2,
            "aborted": False}
    got = quinnserve.parse_access_log("\n".join([json.dumps(line), "not json", "[1]", json.dumps({"x": 1})]))
    assert got == [{k: line[k] for k in quinnserve.KEYS}]


def test_both_servers_serve_the_same_paths():
    """One expression (servers.SERVED_PATHS) in Caddy's configuration and quinnserve's: a page, its
    objects, a replayed page set's files; never the folder's own files or a path out of it."""
    text = caddy.render_config(caddy.TEMPLATE.read_text(), origins=ORIGINS, cert="/c", key="/k", sites="/s",
                               access_log="/a")
    assert f"path_regexp {servers.SERVED_PATHS}\n" in text
    served = re.compile(servers.SERVED_PATHS)
    for path in ("/index_5KB.html", "/objects_20x5KB_4o.html", "/obj_5KB.png", "/hero_100KB.png", "/bulk.bin",
                 "/bulk10s.html", "/req10x5KB_c2.html", "/replay/docs/index.html", "/replay/docs/3-app.min.js"):
        assert served.match(path), path
    for path in ("/MANIFEST.json", "/README.md", "/replay/docs/replay.json", "/replay/../etc/passwd",
                 "/index_5KB.html/x", "/replay/Docs/index.html"):
        assert not served.match(path), path


def test_quinnserve_cargo_tests_pass():
    """quinnserve's own unit tests (Rust): its configuration's refusals, Caddy's ETag form, RFC 9110's
    conditionals, the Caddyfile's caching and site headers, types by extension."""
    cargo_tests_pass("quinnserve")


def test_with_think_time_caddy_asks_its_think_stage_before_every_file_and_logs_what_it_says(tmp_path):
    """--think (servers.think): where a testbed's conditions ask think time, the generated pages' site
    and every served folder's pass each request to the think stage, then serve the file as before
    (the same file server, the same 404s), the stage's X-Plt-Think copied into the response (and so
    into Caddy's log). Without think they serve as they always did. Caddy itself reads each
    rendering as a valid configuration (caddy adapt, no server started)."""
    import subprocess
    from pathlib import Path
    static = caddy.Static(Path("/srv/folder"), [("static.pkg.test", "198.19.4.60")])
    kw = dict(origins=ORIGINS, cert="/c", key="/k", sites="/s", access_log="/a")
    plain = caddy.render_config(caddy.TEMPLATE.read_text(), **kw) + static.block("/c", "/k", "/a")
    thinking = caddy.render_config(caddy.TEMPLATE.read_text(), think_port=8444, **kw) + static.block(
        "/c", "/k", "/a", 8444)
    assert "reverse_proxy" not in plain and plain.count("file_server") == 2 and "respond @notpage 404" in plain
    assert thinking.count("reverse_proxy 127.0.0.1:8444 {") == 2 and thinking.count("file_server") == 2
    assert thinking.count("header X-Plt-Think {rp.header.X-Plt-Think}") == 2
    assert thinking.count("respond @notpage 404") == 1  # the pages' site's 404s, behind the stage too
    binary = caddy.locate_caddy()[0]
    for name, text in (("plain", plain), ("thinking", thinking)):
        (tmp_path / name).write_text(text)
        r = subprocess.run([binary, "adapt", "--config", str(tmp_path / name), "--adapter", "caddyfile"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-800:]
        assert ('"handle_response"' in r.stdout) == (name == "thinking")


def test_quinnserve_reads_the_think_file_when_think_time_is_asked(tmp_path):
    assert "think_file" not in _config(tmp_path)
    assert _config(tmp_path, think_file=tmp_path / "think")["think_file"] == str(tmp_path / "think")
