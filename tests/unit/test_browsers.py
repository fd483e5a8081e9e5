"""The browser seam (plt_bench.browsers): one table, each browser's launch built purely, what a
browser cannot do yet refused by name, and each process's CPU role read from its command line."""
import pytest

from plt_bench import browsers, cpu
from plt_bench.browsers import chromium, display, firefox
from plt_bench.browsers.base import WINDOW

ONE = [("plt.test", "198.19.0.2")]


def test_the_table_names_each_browser_once_and_chromium_is_the_default():
    assert browsers.NAMES == ("chromium", "firefox") and browsers.DEFAULT == "chromium"
    assert browsers.get("firefox") is firefox.FIREFOX and browsers.get("chromium") is chromium.CHROMIUM
    with pytest.raises(ValueError, match="unknown browser 'safari'; expected one of chromium, firefox"):
        browsers.get("safari")


@pytest.mark.parametrize("proto,h3,h2", [("h3", True, True), ("h2", False, True), ("h1", False, False)])
def test_firefox_is_forced_to_each_protocol_by_its_prefs(proto, h3, h2):
    p = firefox.firefox_prefs(proto, ONE)
    assert (p["network.http.http3.enable"], p["network.http.http2.enabled"]) == (h3, h2)
    # without this pref Firefox silently drops h3 once a certificate not of its own roots is accepted
    assert p["network.http.http3.disable_when_third_party_roots_found"] is False
    # names resolve through the testbed's hosts file (Plan.client_etc), never DNS over HTTPS
    assert "network.dns.forceResolve" not in p and p["network.trr.mode"] == 5
    assert p["network.predictor.enabled"] is False and p["network.http.speculative-parallel-limit"] == 0
    if h3:  # every origin's first request goes over h3: no Alt-Svc to learn, no race with TCP
        assert p["network.http.http3.alt-svc-mapping-for-testing"] == "plt.test;h3=:443"
        assert p["network.http.http3.force-use-alt-svc-mapping-for-testing"] is True
        assert p["network.http.http3.backup_timer_delay"] >= 3_600_000  # no TCP connection races QUIC
    else:
        assert not any("alt-svc-mapping" in k for k in p)


def test_firefox_forces_every_origin_or_each_origin_to_its_own():
    """Forced: h3 mapped onto every origin. As recorded: onto the recording's h3 hosts alone, HTTP/2 on
    (the h2 and h1 hosts' servers offer their own alone), no HTTP/3 at all where none spoke it."""
    two = [("plt.test", "198.19.0.2"), ("plt-o1.test", "198.19.0.11")]
    many = firefox.firefox_prefs("h3", two)
    assert many["network.http.http3.alt-svc-mapping-for-testing"] == "plt.test;h3=:443,plt-o1.test;h3=:443"
    mixed = firefox.firefox_prefs("as-recorded", two, {"plt.test": "h3", "plt-o1.test": "h1"})
    assert mixed["network.http.http3.alt-svc-mapping-for-testing"] == "plt.test;h3=:443"
    assert mixed["network.http.http3.enable"] and mixed["network.http.http2.enabled"]
    tcp = firefox.firefox_prefs("as-recorded", two, {"plt.test": "h2", "plt-o1.test": "h1"})
    assert not tcp["network.http.http3.enable"] and "network.http.http3.alt-svc-mapping-for-testing" not in tcp
    with pytest.raises(ValueError):
        firefox.firefox_prefs("sctp", ONE)


def test_each_launch_is_a_worker_request_of_its_browser():
    ff = firefox.FIREFOX.launch("h2", ONE, "HASH=", "/run/plt-bench/pb1/profiles/t")
    assert ff["browser"] == "firefox" and ff["args"] == ["-headless", "--width=1280", "--height=800", "-profile",
                                                         "/run/plt-bench/pb1/profiles/t"]
    cr = chromium.CHROMIUM.launch("h2", ONE, "HASH=", "/p", extra=("--enable-net-benchmarking",))
    assert cr["browser"] == "chromium" and cr["prefs"] is chromium.PREFS
    assert cr["args"] == chromium.chromium_args("h2", ONE, "HASH=", "/p", ("--enable-net-benchmarking",))


def test_firefox_writes_its_key_log_through_nss_and_chromium_through_its_flag():
    from pathlib import Path
    names = {"keylog": "keys.log", "netlog": "netlog.json"}
    assert firefox.FIREFOX.capture_env(("pcap", "keylog"), Path("/r/c"), names) == {"SSLKEYLOGFILE": "/r/c/keys.log"}
    assert firefox.FIREFOX.capture_env(("pcap",), Path("/r/c"), names) == {} and "keylog" in firefox.FIREFOX.features
    assert chromium.CHROMIUM.capture_env(("keylog",), Path("/r/c"), names) == {}
    assert "--ssl-key-log-file=/r/c/keys.log" in chromium.CHROMIUM.capture_args(("keylog",), Path("/r/c"), names)


def test_what_a_browser_cannot_do_yet_is_named():
    wanted = {"repeat", "har", "origins", "recordings", "netlog", "per-origin", "visual"}
    assert firefox.FIREFOX.unsupported(wanted) == []
    assert firefox.FIREFOX.unsupported(wanted | {"discovery"}) == ["discovery"]
    assert firefox.FIREFOX.resolves_by_hosts_file and not chromium.CHROMIUM.resolves_by_hosts_file
    assert chromium.CHROMIUM.unsupported(wanted) == []
    assert browsers.asked(False, True, False, ("pcap", "har"), recordings=True) == {"origins", "har", "recordings"}


def test_a_repeat_visit_launches_each_browser_with_its_own_log_unless_the_capture_writes_it():
    """Chromium: chrome.benchmarking and a net-log; Firefox: its HTTP log (MOZ_LOG, nsHttp's debug level,
    stamped), which it writes to the given name's stem + .moz_log (and each content process's beside it)."""
    cr = chromium.CHROMIUM.repeat_launch("/p.visit-netlog.json", captured=False)
    assert cr == {"args": ["--enable-net-benchmarking", "--log-net-log=/p.visit-netlog.json",
                           "--net-log-capture-mode=Default"]}
    assert chromium.CHROMIUM.repeat_launch("/c/netlog.json", captured=True) == {"args": ["--enable-net-benchmarking"]}
    ff = firefox.FIREFOX.repeat_launch("/p.visit-netlog.moz_log", captured=False)
    assert ff == {"env": {"MOZ_LOG": "timestamp,sync,nsHttp:4", "MOZ_LOG_FILE": "/p.visit-netlog"}}
    assert firefox.FIREFOX.repeat_launch("/c/netlog.moz_log", captured=True) == {}
    assert firefox.FIREFOX.netlog_file == "netlog.moz_log" and chromium.CHROMIUM.netlog_file == "netlog.json"
    from pathlib import Path
    env = firefox.FIREFOX.capture_env(("netlog", "keylog"), Path("/r/c"), {"keylog": "keys.log"})
    assert env == {"SSLKEYLOGFILE": "/r/c/keys.log", "MOZ_LOG": "timestamp,sync,nsHttp:4", "MOZ_LOG_FILE": "/r/c/netlog"}
    with pytest.raises(ValueError, match="must end in .moz_log"):
        firefox.http_log_env("/r/c/netlog.json")


# Lines of Firefox 153's HTTP log as it wrote them for a repeat visit of a page on two origins over h3
# (abridged: the log has about 2,000 lines for a 5 KB page)
FIREFOX_LOG = """2026-11-26 11:15:47.847793 UTC - [Parent 26433: Socket Thread]: I/nsHttp Http3Session::Init origin=plt.test, alpn=h3, selfAddr=0.0.0.0, peerAddr=198.19.231.2, qpack table size=65536, max blocked streams=20 webtransport=0 [this=7f12d0ec0d00]
2026-11-26 11:15:47.847901 UTC - [Parent 26433: Socket Thread]: I/nsHttp Http3Session::AddStream 7f12d0ec0d00 atrans=7f12d87eea00.
2026-11-26 11:15:48.730790 UTC - [Parent 26433: Main Thread]: D/nsHttp nsHttpHandler::Observe [topic="net:prune-all-connections"]
2026-11-26 11:15:49.060376 UTC - [Parent 26433: Socket Thread]: I/nsHttp Http3Session::Init origin=plt.test, alpn=h3, selfAddr=0.0.0.0, peerAddr=198.19.231.2, qpack table size=65536, max blocked streams=20 webtransport=0 [this=7f12d1320900]
2026-11-26 11:15:49.062280 UTC - [Parent 26433: Socket Thread]: I/nsHttp Http3Session::AddStream 7f12d1320900 atrans=7f12cfdd0c00.
2026-11-26 11:15:49.062292 UTC - [Parent 26433: Socket Thread]: D/nsHttp nsHttpTransaction::Do0RTT [aCanSendEarlyData=1]
2026-11-26 11:15:49.070000 UTC - [Parent 26433: Socket Thread]: I/nsHttp Http3Session::Init origin=plt-o1.test, alpn=h3, selfAddr=0.0.0.0, peerAddr=198.19.231.11, qpack table size=65536, max blocked streams=20 webtransport=0 [this=7f12d1320a00]
2026-11-26 11:15:49.070100 UTC - [Parent 26433: Socket Thread]: I/nsHttp Http3Session::AddStream 7f12d1320a00 atrans=7f12cfdd0d00.
2026-11-26 11:15:49.070200 UTC - [Parent 26433: Socket Thread]: I/nsHttp Http3Session::AddStream 7f12d1320a00 atrans=7f12cfdd0e00.
2026-11-26 11:15:49.105619 UTC - [Parent 26433: Socket Thread]: D/nsHttp nsHttpTransaction::Finish0RTT 7f12cfdd0c00 aRestart=0 aAlpnChanged=0
2026-11-26 11:15:49.106074 UTC - [Parent 26433: Socket Thread]: E/nsHttp   X-Firefox-Early-Data: accepted
2026-11-26 11:15:49.110000 UTC - [Parent 26433: Socket Thread]: D/nsHttp nsHttpTransaction::Finish0RTT 7f12cfdd0d00 aRestart=0 aAlpnChanged=0
2026-11-26 11:15:49.110100 UTC - [Parent 26433: Socket Thread]: D/nsHttp nsHttpTransaction::Finish0RTT 7f12cfdd0e00 aRestart=1 aAlpnChanged=0
2026-11-26 11:15:49.120000 UTC - [Parent 26433: Socket Thread]: I/nsHttp Http3Session::Init origin=plt-o2.test, alpn=h3, selfAddr=0.0.0.0, peerAddr=198.19.231.12, qpack table size=65536, max blocked streams=20 webtransport=0 [this=7f12d1320b00]
2026-11-26 11:15:49.130000 UTC - [Parent 26433: Socket Thread]: D/nsHttp nsHttpTransaction::Finish0RTT 7f12ffff0000 aRestart=0 aAlpnChanged=0
"""


def test_firefox_s_http_log_tells_each_http3_session_s_0rtt_after_the_boundary(tmp_path):
    """Sessions opened after the first visit's end only; a session whose early requests were all
    accepted succeeded, one with a request sent again was rejected, one with none never attempted.
    A transaction of no session (TCP's) counts for none."""
    import datetime
    log = tmp_path / "netlog.moz_log"
    log.write_text(FIREFOX_LOG + "a line of another kind\n")
    boundary = datetime.datetime(2026, 11, 26, 11, 15, 49, tzinfo=datetime.timezone.utc).timestamp()
    ev = firefox.http_log_evidence(str(log), boundary)
    assert ev["quic_zero_rtt"] == ["AttemptedAndSucceeded", "AttemptedAndRejected", "NotAttempted"]
    assert [(s["origin"], s["early_transactions"]) for s in ev["http3_sessions"]] == [
        ("plt.test", 1), ("plt-o1.test", 2), ("plt-o2.test", 0)]
    assert ev["http_log_bytes"] == log.stat().st_size
    assert firefox.http_log_evidence(str(log), 0)["quic_zero_rtt"][0] == "NotAttempted"  # the first visit's own
    from plt_bench.trial.judge import zero_rtt_summary
    assert zero_rtt_summary(ev["quic_zero_rtt"]) == "succeeded 1, rejected 1, not attempted 1"


def test_a_transaction_address_firefox_reuses_counts_for_the_session_it_was_on_when_it_ended(tmp_path):
    """Issue 44, item 13: 3 of 20 Firefox repeat visits reported the page's own origin NotAttempted.
    Its log (kept) showed the navigation's request accepted in 0-RTT; then Firefox freed that
    transaction and gave its address to a request on another origin's session. Read as a map, the
    later AddStream took the earlier Finish0RTT away. Each Finish0RTT counts for the session its
    transaction is on when it ends."""
    import datetime
    stamp = "2026-11-27 04:20:49.{:06d} UTC - [Parent 17990: Socket Thread]: "
    lines = [
        "I/nsHttp Http3Session::Init origin=plt.test, alpn=h3, selfAddr=0.0.0.0, peerAddr=198.19.243.2, "
        "qpack table size=65536, max blocked streams=20 webtransport=0 [this=7fa27f920500]",
        "I/nsHttp Http3Session::AddStream 7fa27f920500 atrans=7fa2723b6f00.",
        "D/nsHttp nsHttpTransaction::Finish0RTT 7fa2723b6f00 aRestart=0 aAlpnChanged=0",
        "I/nsHttp Http3Session::Init origin=plt-o1.test, alpn=h3, selfAddr=0.0.0.0, peerAddr=198.19.243.11, "
        "qpack table size=65536, max blocked streams=20 webtransport=0 [this=7fa27f939a00]",
        "I/nsHttp Http3Session::AddStream 7fa27f939a00 atrans=7fa273f38d00.",
        "I/nsHttp Http3Session::AddStream 7fa27f939a00 atrans=7fa2723b6f00.",  # the address again
        "D/nsHttp nsHttpTransaction::Finish0RTT 7fa273f38d00 aRestart=0 aAlpnChanged=0",
        "D/nsHttp nsHttpTransaction::Finish0RTT 7fa2723b6f00 aRestart=0 aAlpnChanged=0",
    ]
    log = tmp_path / "netlog.moz_log"
    log.write_text("".join(stamp.format(629000 + i) + text + "\n" for i, text in enumerate(lines)))
    boundary = datetime.datetime(2026, 11, 27, 4, 20, 49, tzinfo=datetime.timezone.utc).timestamp()
    ev = firefox.http_log_evidence(str(log), boundary)
    assert [(s["origin"], s["zero_rtt"], s["early_transactions"]) for s in ev["http3_sessions"]] == [
        ("plt.test", "AttemptedAndSucceeded", 1), ("plt-o1.test", "AttemptedAndSucceeded", 2)]


def test_firefox_s_own_log_is_every_process_s_file(tmp_path):
    for name in ("netlog.moz_log", "netlog.child-1.moz_log", "netlog.child-12.moz_log", "other.moz_log"):
        (tmp_path / name).write_text("")
    assert [p.rsplit("/", 1)[1] for p in firefox.FIREFOX.own_log_files(tmp_path / "netlog.moz_log")] == [
        "netlog.moz_log", "netlog.child-1.moz_log", "netlog.child-12.moz_log"]
    assert chromium.CHROMIUM.own_log_files(tmp_path / "netlog.json") == [str(tmp_path / "netlog.json")]


def test_the_client_namespace_resolves_every_origin_of_its_testbed_and_nothing_else():
    """Firefox asks the system: the client's own hosts file names each origin on its own address,
    and its resolv.conf a server that does not answer (nothing leaves the testbed)."""
    from plt_bench.topology import Plan
    p = Plan(7, "cubic")
    etc = p.client_etc()
    hosts = [line.split() for line in etc["hosts"].splitlines() if line and not line.startswith("#")]
    assert hosts[0] == ["127.0.0.1", "localhost"] and [(h, ip) for ip, h in hosts[1:]] == p.origins
    assert len({ip for ip, _ in hosts[1:]}) == len(p.origins) and hosts[1] == ["198.19.7.2", "plt.test"]
    assert [line for line in etc["resolv.conf"].splitlines() if line.startswith("nameserver")] == ["nameserver 127.0.0.1"]


@pytest.mark.parametrize("cmdline,role", [
    (["/usr/lib/firefox-esr/firefox-esr", "-marionette", "-headless", "-profile", "/p"], "browser"),
    (["/usr/lib/firefox-esr/firefox-esr", "-contentproc", "-isForBrowser", "-prefsLen", "1", "{u}", "123", "tab"],
     "renderer"),
    (["/usr/lib/firefox-esr/firefox-esr", "-contentproc", "{u}", "123", "socket"], "network"),
    (["/usr/lib/firefox-esr/firefox-esr", "-contentproc", "{u}", "123", "rdd"], "utility"),
    (["/usr/lib/firefox-esr/firefox-esr", "-contentproc", "{u}", "123", "forkserver"], "zygote"),
    (["/work/.tools/bin/geckodriver", "--port", "4444"], "geckodriver"),
    (["/usr/bin/chromedriver", "--port=9515"], "chromedriver"),
    (["/usr/lib/chromium/chromium", "--type=renderer"], "renderer"),
    (["/usr/lib/chromium/chromium", "--type=utility", "--utility-sub-type=network.mojom.NetworkService"], "network"),
    (["/usr/lib/chromium/chromium", "--headless=new"], "browser"),
])
def test_each_browsers_processes_have_their_cpu_roles(cmdline, role):
    assert cpu.role(cmdline) == role and role in cpu.ROLES


def test_what_firefox_did_not_time_is_no_duration():
    """Firefox gives an HTTP/1.1 document's responseStart and responseEnd as its requestStart (a 500 KB
    body 'received' in 0 ms): TTFB and the response's end are unmeasured, never that instant."""
    from plt_bench.trial.judge import timings
    h1 = {"startTime": 0, "nextHopProtocol": "http/1.1", "connectStart": 19, "connectEnd": 269, "requestStart": 269,
          "responseStart": 269, "responseEnd": 269, "loadEventEnd": 1239}
    untimed = firefox.FIREFOX.untimed(h1)
    assert untimed == ["responseStart", "responseEnd"]
    t = timings(h1, untimed)
    assert (t["ttfb_ms"], t["response_end_ms"], t["plt_ms"], t["connect_ms"]) == (None, None, 1239.0, 250.0)
    h2 = {**h1, "nextHopProtocol": "h2", "responseStart": 373, "responseEnd": 373}
    assert firefox.FIREFOX.untimed(h2) == [] and timings(h2)["ttfb_ms"] == 373.0
    assert chromium.CHROMIUM.untimed(h1) == []  # Chromium times its own
    # Firefox's timer jitter: a millisecond apart is the same instant (CI 2026-11-27: TTFB 128 ms < 3 RTTs)
    assert firefox.FIREFOX.untimed({**h1, "requestStart": 127, "responseStart": 128}) == ["responseStart", "responseEnd"]
    assert firefox.FIREFOX.untimed({**h1, "requestStart": 127, "responseStart": 180}) == []  # a real response


def test_a_browser_is_kept_across_trials_only_where_a_fresh_context_serves_the_trial():
    """--browser-start: kept (the default) or fresh, anything else refused naming the option and its
    forms; a trial that asks something of the browser's own process (its own capture files, a repeat
    visit's closed connections, a device's screen, a calibration) runs in a fresh browser, saying why;
    pcap and CPU captures are the testbed's and keep it; Chromium gives contexts, Firefox not yet."""
    from plt_bench.errors import UsageError
    assert browsers.parse_start(None) == "kept" == browsers.START_DEFAULT and browsers.parse_start(" Fresh") == "fresh"
    with pytest.raises(UsageError, match="--browser-start: 'warm' is not kept or fresh"):
        browsers.parse_start("warm")
    assert browsers.kept_refusals(False, ("pcap", "cpu")) == []
    assert browsers.kept_refusals(True, ("netlog", "pcap", "har"), screen=True, benchmark=True) == [
        "capture har", "capture netlog", "a repeat visit", "a device's screen", "a calibration"]
    assert chromium.CHROMIUM.keeps_contexts and not firefox.FIREFOX.keeps_contexts


def test_a_kept_browser_serves_the_requests_of_its_flags_whatever_their_profile():
    """The worker keeps one browser per set of flags (each protocol is forced by its own): two trials'
    requests that differ only in their profile share one; another protocol, prefs, budget group or
    sandbox is another browser."""
    from plt_bench.browsers import worker
    a = {"browser": "chromium", "args": chromium.chromium_args("h3", ONE, "H=", "/run/p/t1"), "prefs": chromium.PREFS}
    b = {**a, "args": chromium.chromium_args("h3", ONE, "H=", "/run/p/t2")}
    assert worker._kept_key(a) == worker._kept_key(b)
    assert worker._kept_key(a) != worker._kept_key({**a, "args": chromium.chromium_args("h1", ONE, "H=", "/run/p/t1")})
    assert worker._kept_key(a) != worker._kept_key({**a, "cgroup_procs": ["/sys/fs/cgroup/cpu/x/cgroup.procs"]})
    assert worker._kept_key(a) != worker._kept_key({**a, "sandbox": True})


def test_the_client_hosts_file_names_one_loads_origins_and_localhost_only():
    from plt_bench.topology import client_hosts
    text = client_hosts("pb7", [("docs.pkg.test", "198.19.7.20"), ("api.pkg.test", "198.19.7.21")])
    assert text.splitlines() == ["# plt-bench testbed pb7: the server's origins", "127.0.0.1 localhost",
                                 "198.19.7.20 docs.pkg.test", "198.19.7.21 api.pkg.test"]


def test_a_recorded_firefox_runs_headed_in_kiosk_mode_on_the_window_asked():
    args = firefox.firefox_args("/run/p")
    shown = firefox.on_display(args)
    assert "-headless" not in shown and "--kiosk" in shown and shown[1:] == args[1:]
    assert display.window_size(shown, (1, 1)) == WINDOW
    assert display.window_size(["--width=412", "--height=915"], WINDOW) == (412, 915)
    assert display.window_size([], (640, 480)) == (640, 480)


def test_the_display_is_the_namespaces_alone_and_its_grab_keeps_every_frame():
    x = display.xvfb_command(1280, 800, 7)
    # no lock file, no socket file: nothing left on the file system; no TCP
    assert x[:3] == ["Xvfb", "-displayfd", "7"] and "-nolock" in x and x[-1] == "1280x800x24"
    assert [x[i + 1] for i, a in enumerate(x) if a == "-nolisten"] == ["tcp", "unix"]
    g = display.grab_command(":3", 1280, 800, "/run/p.frames.rgb")
    assert g[g.index("-i") + 1] == ":3" and g[g.index("-video_size") + 1] == "1280x800"
    assert g[g.index("-framerate") + 1] == str(display.FPS) and g[-1] == "/run/p.frames.rgb"
    assert g[g.index("-vf") + 1] == "scale=320:200:flags=neighbor,showinfo"
    assert g[g.index("-fps_mode") + 1] == "passthrough" and g[g.index("-f", g.index("-i")) + 1] == "rawvideo"
    assert g[:4] == ["nice", "-n", "19", "ffmpeg"]  # the load's own processes first
    assert display.frame_size(412, 915) == (102, 228) and display.frame_size(3, 3) == (2, 2)


FFMPEG_LOG = """Input #0, x11grab, from ':0':
  Duration: N/A, start: 1795865044.688063, bitrate: 983040 kb/s
  Stream #0:0: Video: rawvideo (BGR[0] / 0x524742), bgr0, 1280x800, 30 fps, 1000k tbn
[Parsed_showinfo_1 @ 0x55] n:   0 pts:      0 pts_time:0       duration:33333 fmt:rgb24
[Parsed_showinfo_1 @ 0x55] color_range:pc color_space:unknown
[Parsed_showinfo_1 @ 0x55] n:   1 pts:  33362 pts_time:0.033362 duration:33333 fmt:rgb24
[Parsed_showinfo_1 @ 0x55] n:   2 pts: 1066749 pts_time:1.066749 duration:33333 fmt:rgb24
"""


def test_each_grabbed_frame_is_timed_on_the_wall_clock_from_ffmpegs_log():
    times = display.grab_times(FFMPEG_LOG)
    assert times == pytest.approx([1795865044.688063, 1795865044.721425, 1795865045.754812], abs=1e-6)
    with pytest.raises(ValueError, match="no start time"):
        display.grab_times("[Parsed_showinfo_1 @ 0x55] n: 0 pts: 0 pts_time:0")


def test_on_two_machines_firefox_resolves_every_name_to_the_server_by_its_own_pref():
    assert firefox.FIREFOX.one_address("10.0.0.1") == {"network.dns.forceResolve": "10.0.0.1"}
    assert chromium.CHROMIUM.one_address("10.0.0.1") == {}  # its launch maps the names (host-resolver-rules)
