"""Stores and campaigns the analysis must read whatever they hold (issue 44, item 9): damaged
columns read as missing and said, campaigns that differ refused by summary as by report, a
comparison whose arms ran the same controller not made, a metric a campaign could not have said."""
import json
import sqlite3

import pytest

from plt_bench import store as st
from plt_bench.analysis import report, summary
from plt_bench.errors import UsageError

from .trials import trial

MIX = json.dumps({"page": "h3", "per_origin": {"plt.test": {"h3": 1}}, "first_h3_ms": 5.0})


def _store(path, discovery="alt-svc", **extra):
    with st.Store(path) as s:
        cid = s.new_campaign("c", "now", {"protos": ["h3", "h2"]}, {"link_backend": "linkem", **extra})
        for i, (p, v) in enumerate([("h3", 90.0), ("h2", 100.0)] * 3):
            s.add_trial(trial(cid, i, proto=p, plt=v + i, run_index=i // 2, dns_ms=1.0,
                              discovery=discovery if p == "h3" else "forced",
                              protocol_mix_json=MIX if p == "h3" and discovery != "forced" else None))
    return cid


def _edit(path, *statements) -> None:
    """Edit a store as a user with sqlite3 would: each (SQL, parameters) or SQL, committed."""
    db = sqlite3.connect(path)
    for x in statements:
        db.execute(*(x if isinstance(x, tuple) else (x,)))
    db.commit()
    db.close()


@pytest.mark.parametrize("column, value", [
    ("protocol_mix_json", "{bad"), ("protocol_mix_json", "[1, 2]"), ("protocol_mix_json", '{"per_origin": [1]}'),
    ("replay_json", "[1,"), ("replay_json", '"a string"'), ("replay_json", '{"protocols": {"h3": "many"}}'),
    ("speed_index_ms", "abc"), ("dns_ms", "x"), ("visit_json", "{"), ("cpu_json", "[]"),
    # issue 59, item 3: the newer columns, each as the adversary edited it
    ("device", "<script>alert(1)</script>"), ("device", 5), ("link_json", '{"dirs": 5}'),
    ("link_json", '{"dirs": {"down": {"bottleneck": {"aqm_drops": "x"}}}}'), ("cross", "999xweird"),
    ("aqm", "red:x=1"), ("cpu_budget", -1), ("cross_mbps", -5), ("cpu_budget", "half"),
])
def test_a_damaged_column_reads_as_missing_and_the_report_says_so(tmp_path, column, value):
    path = tmp_path / "s.sqlite"
    cid = _store(path)
    _edit(path, (f"UPDATE trials SET {column} = ?", (value,)))
    with st.Store(path, read_only=True) as s:
        rep = report.build(s, [cid])
        text = report.format_text(rep)
        summary.tables(s.trials([cid]))
    parsed_ok = column == "protocol_mix_json" and value.startswith('{"per_origin"') or column == "replay_json" and \
        value.startswith('{"protocols"')  # JSON of its shape: read, what is not a count left out
    if not parsed_ok:
        assert any(f"({column})" in w and "read as missing" in w for w in rep["warnings"]), rep["warnings"]
    assert "Traceback" not in text and "<script>" not in text
    assert len(rep["trials"]) == 6  # no row is left out of what it can still join


@pytest.mark.parametrize("devices", [[1, 2], "a text", {"low-end-phone": 5}, {"low-end-phone": {"device": "x"}},
                                     {"low-end-phone": {"device": "low-end-phone", "target_index": "fast",
                                                        "host_index": 1, "budget_cores": 0.2, "measured_index": 1}}])
def test_a_damaged_device_calibration_in_the_metadata_is_said_and_the_report_stands(tmp_path, devices):
    """Issue 59, item 3: a campaign's metadata 'devices' that is not a dict, or whose values are not
    calibrations, ended the report in a traceback; it is now said, and two such campaigns are not
    pooled (what they were calibrated to cannot be told)."""
    path = tmp_path / "s.sqlite"
    cid = _store(path, devices=devices)
    _edit(path, "UPDATE trials SET device = 'low-end-phone', cpu_budget = 0.2")
    with st.Store(path, read_only=True) as s:
        rep = report.build(s, [cid])
        text = report.format_text(rep)
    assert "Traceback" not in text
    assert any("calibration is damaged" in m for m in rep["budget_meanings"]), rep["budget_meanings"]
    from plt_bench.device.calibrate import calibration_diff
    assert calibration_diff(devices, devices) and calibration_diff(None, None) == []


def test_a_trial_s_link_figures_as_they_are_stored_are_not_called_damaged():
    """What trial.run.link_delta stores (a discipline's name beside its counts) is of its column's form."""
    import dataclasses
    from plt_bench.records import Trial
    from plt_bench.trial.run import link_delta
    snap = {"cpu_s": 1.0, "enobufs": 0, "dirs": {"down": {
        "packets": 10, "bytes": 1000, "ecn": {"not_ect": 9, "ect1": 0, "ect0": 1, "ce": 0},
        "bottleneck": {"aqm": "codel", "aqm_drops": 1, "marks": 0, "overlimit_drops": 0, "dequeued": 9,
                       "sojourn_sum_us": 900.0}, "trace": {"path": ""}, "late_hist_us": {"lt_100": 9}}}}
    stored = json.dumps(link_delta({"dirs": {}}, snap))
    row = {**trial(1, 0).row(), "link_json": stored, "aqm": "codel", "device": "laptop", "cpu_budget": 0.25,
           "cross": "2xtcp-cubic", "cross_mbps": 3.5}
    back = Trial.from_row(row, st.STORED_CHECKS, st.READERS)  # as the store reads it: every check, every reader
    assert back.damaged == () and back.link_json == stored and back.conditions.aqm.text == "codel"
    assert dataclasses.replace(back, damaged=()) == back


def test_a_damaged_cross_value_does_not_refuse_the_report_of_other_rows(tmp_path):
    """Issue 59, item 3: one row's cross '999xweird' refused the whole report with 'Error: --cross: ...'
    though no --cross was given; the row now reads as without it, said."""
    path = tmp_path / "s.sqlite"
    cid = _store(path)
    _edit(path, "UPDATE trials SET aqm = 'droptail', cross = '2xtcp-cubic'",
          "UPDATE trials SET cross = '999xweird' WHERE seq = 0")
    with st.Store(path, read_only=True) as s:
        rep = report.build(s, [cid])
    assert any("(cross)" in w for w in rep["warnings"]), rep["warnings"]
    assert {t.conditions.cross for t in rep["trials"]} == {None, "2xtcp-cubic"}


def test_a_damaged_campaign_record_is_refused_naming_it(tmp_path):
    path = tmp_path / "s.sqlite"
    cid = _store(path)
    _edit(path, "UPDATE campaigns SET metadata_json = '{oops'")
    with st.Store(path, read_only=True) as s, pytest.raises(UsageError, match=f"campaign {cid}'s metadata_json is "
                                                                              "damaged"):
        report.build(s, [cid])


def test_summary_refuses_to_pool_campaigns_report_refuses(tmp_path):
    """summary --campaign all pooled forced and discovered h3 trials; report refused them."""
    from plt_bench import cli
    path = tmp_path / "s.sqlite"
    _store(path, discovery="forced")
    with st.Store(path) as s:
        cid = s.new_campaign("d", "now", {"protos": ["h3"]}, {"link_backend": "linkem", "discovery": "alt-svc"})
        s.add_trial(trial(cid, 0, proto="h3", plt=50.0, discovery="alt-svc", protocol_mix_json=MIX))
    args = cli.build_parser().parse_args(["summary", "--campaign", "all", "--results", str(path)])
    with pytest.raises(UsageError, match="campaigns 1 and 2 differ in discovery"):
        cli.cmd_summary(args)


def test_a_server_s_name_is_never_a_format_string():
    assert report._server({"http_server": "caddy,{caddy_version}x"})[0].endswith("; {caddy_version}x")
    assert report._server({"http_server": "caddy", "caddy_version": "v2"})[0] == "Caddy v2"


def test_cc_arms_that_ran_one_controller_are_not_compared_and_a_metric_without_its_capture_says_why(tmp_path):
    path = tmp_path / "s.sqlite"
    with st.Store(path) as s:
        cid = s.new_campaign("c", "now", {"protos": ["h3", "h2"], "ccs": ["cubic", "bbr"]}, {"link_backend": "linkem"})
        seq = 0
        for server in ("caddy", "quinn"):
            for cc in ("cubic", "bbr"):
                for p in ("h3", "h2"):
                    for run in range(3):
                        s.add_trial(trial(cid, seq, proto=p, plt=100.0 + seq, run_index=run, cc=cc, server=server))
                        seq += 1
    with st.Store(path, read_only=True) as s:
        rep = report.build(s, [cid], axis="cc")
        compared = {(r.other.proto, r.other.server) for r in rep["rows"]}
        assert compared == {("h2", "caddy"), ("h3", "quinn"), ("h2", "quinn")}, compared
        assert any(w.startswith("h3 on caddy: not compared across congestion controls") for w in rep["warnings"])
        si = report.build(s, [cid], metric="si")
        assert any("no trial has a SpeedIndex" in w and "--capture visual" in w for w in si["warnings"])


def test_campaigns_that_calibrated_a_device_differently_are_not_pooled(tmp_path):
    """A named device's budget is this host's measurement at the campaign's start (device.calibrate):
    two campaigns whose calibrations differ are refused together; alike, they pool."""
    phone = {"device": "low-end-phone", "target_index": 264, "host_index": 2000.0, "budget_cores": 0.14,
             "measured_index": 270.0}
    path = tmp_path / "s.sqlite"
    first = _store(path, discovery="forced", devices={"low-end-phone": phone})
    second = _store(path, discovery="forced", devices={"low-end-phone": {**phone, "budget_cores": 0.15}})
    third = _store(path, discovery="forced", devices={"low-end-phone": dict(phone)})
    with st.Store(path, read_only=True) as s:
        with pytest.raises(UsageError, match=f"campaigns {first} and {second} differ in low-end-phone's calibration"):
            report.build(s, [first, second])
        assert report.build(s, [first, third])


def test_comparing_along_an_axis_the_campaign_ran_one_value_of_says_so(tmp_path):
    """Issue 59, item 9: '--compare cpu' on a campaign of one budget printed an empty table with rc 0;
    asked for, it is refused naming the one budget; a campaign file's compare leaves the report
    standing, with the same words among its warnings."""
    path = tmp_path / "s.sqlite"
    cid = _store(path)
    with st.Store(path, read_only=True) as s:
        with pytest.raises(UsageError, match=r"--compare cpu: the campaign ran one CPU budget or device \(full\): "
                                             "nothing to compare along it"):
            report.build(s, [cid], axis="cpu")
        with pytest.raises(UsageError, match=r"--compare cc: the campaign ran one congestion control \(cubic\)"):
            report.build(s, [cid], axis="cc")
        assert report.build(s, [cid], axis="proto")["rows"]
    _edit(path, "UPDATE campaigns SET grid_json = json_set(grid_json, '$.compare', 'budget')")
    with st.Store(path, read_only=True) as s:
        rep = report.build(s, [cid])
    assert any("ran one CPU budget or device (full): nothing to compare" in w for w in rep["warnings"]), rep["warnings"]
