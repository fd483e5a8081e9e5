"""Capture options, size estimates and command builders (pure logic)."""
from pathlib import Path

import pytest

from plt_bench import capture
from plt_bench.errors import UsageError


def test_parse_kinds():
    assert capture.parse_kinds("all") == capture.KINDS
    assert capture.parse_kinds("none") == () and capture.parse_kinds(None) == ()
    assert capture.parse_kinds("keylog, pcap") == ("pcap", "keylog")  # canonical order
    assert capture.parse_kinds(["cpu"]) == ("cpu",)
    with pytest.raises(UsageError, match=r"--capture: unknown capture kind\(s\) pcapng; expected 'all', 'none'"):
        capture.parse_kinds("pcap,pcapng")
    with pytest.raises(UsageError, match="^capture: unknown"):
        capture.parse_kinds(["tls"], "capture")


def test_parse_interval():
    assert capture.parse_interval_s(None) == 0.1
    assert capture.parse_interval_s("250ms") == 0.25
    for bad in ("5ms", "11s", "100", "fast"):
        with pytest.raises(UsageError, match="--cpu-interval"):
            capture.parse_interval_s(bad)


def test_estimates_follow_the_measured_ratios():
    assert capture.estimate_bytes(("cpu",), "quic", 10**9) == 0
    pcap = capture.estimate_bytes(("pcap",), "tcp", 10**7)
    assert 1.05e7 < pcap < 1.2e7
    # qlog only for QUIC; the net-log is larger over QUIC
    assert capture.estimate_bytes(("qlog",), "tcp", 10**7) == 0 < capture.estimate_bytes(("qlog",), "quic", 10**7)
    assert capture.estimate_bytes(("netlog",), "quic", 10**7) > capture.estimate_bytes(("netlog",), "tcp", 10**7)


def test_check_space_warns_over_the_limit_and_refuses_what_cannot_fit(tmp_path):
    need, warning = capture.check_space(("pcap",), [("quic", 10**7)] * 2, tmp_path / "captures", limit_bytes=10**9)
    assert need > 2 * 10**7 and warning is None
    need, warning = capture.check_space(("pcap",), [("quic", 10**7)] * 2, tmp_path, limit_bytes=10**6)
    assert "over the 1 MB limit (--capture-limit)" in warning and "--capture cpu,keylog" in warning
    with pytest.raises(UsageError, match="--capture: the captures would take about"):
        capture.check_space(("pcap",), [("tcp", 10**15)], tmp_path)
    assert capture.check_space(("cpu",), [("tcp", 10**15)], tmp_path) == (0, None)


def test_chromium_capture_args():
    from plt_bench.browsers import chromium
    folder = Path("/r/captures/1/00000-quic-index_5KB")
    args = chromium.CHROMIUM.capture_args(("keylog", "netlog"), folder, capture.FILENAMES)
    assert args == [f"--ssl-key-log-file={folder}/keys.log", f"--log-net-log={folder}/netlog.json",
                    "--net-log-capture-mode=Default"]
    assert chromium.CHROMIUM.capture_args(("cpu", "pcap"), folder, capture.FILENAMES) == []


def test_tcpdump_argv_and_its_statistics():
    argv = capture.tcpdump_argv("pb0-c", Path("/r/x.pcap"))
    assert argv[:3] == ["tcpdump", "-i", "pb0-c"] and "-Z" in argv and argv[-2:] == ["-w", "/r/x.pcap"]
    assert "--immediate-mode" not in argv  # its per-packet wake-ups starve linkem on 2 cores
    assert ["-s", "0"] == argv[argv.index("-s"):argv.index("-s") + 2]  # whole packets: payloads decrypt
    for bad in ("eth0; rm -rf /", "a" * 16, ""):
        with pytest.raises(UsageError):
            capture.tcpdump_argv(bad, Path("/x"))
    err = "tcpdump: listening on pb0-c\n8550 packets captured\n8552 packets received by filter\n0 packets dropped by kernel\n"
    assert capture.parse_tcpdump_stats(err) == {"captured": 8550, "received": 8552, "dropped": 0}
    assert capture.parse_tcpdump_stats("tcpdump: no such device") is None


def test_trial_folder():
    assert capture.trial_folder(Path("/r/captures"), 3, 12, "tcp", "index_10MB.html") == \
        Path("/r/captures/3/00012-tcp-index_10MB")


def test_capture_options_become_the_campaigns_settings_and_files_go_beside_the_store(tmp_path):
    from plt_bench import campaign
    spec = campaign.load(None, {"capture": "pcap,cpu", "cpu_interval": "50ms", "capture_limit": "1GB"})
    assert spec.capture == ("cpu", "pcap") and spec.cpu_interval_s == 0.05 and spec.capture_limit_bytes == 10**9
    plain = campaign.load(None)
    assert plain.capture == () and plain.cpu_interval_s == capture.DEFAULT_INTERVAL_S
    assert plain.capture_limit_bytes == capture.DEFAULT_LIMIT_BYTES
    s = capture.Settings(spec.capture, capture.captures_root(tmp_path / "r" / "s.sqlite"))
    assert s.root == (tmp_path / "r" / "captures" / "s").resolve() and s.files  # per store: two of one folder never share
    assert not capture.Settings(("cpu",), s.root).files
    assert not capture.Settings(capture.parse_kinds("cpu"), capture.captures_root(tmp_path / "s.sqlite")).files
