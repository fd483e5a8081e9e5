"""Command builders and parsers: topology plan, Caddy, Chromium (the link's: test_link_commands.py)."""
import dataclasses
import json
import re
import subprocess

import pytest

from plt_bench import servers, topology
from plt_bench.trial import judge as browser
from plt_bench.servers import caddy, certs
from plt_bench.browsers import chromium
from plt_bench.errors import UsageError
from plt_bench.pages import Page, parse_page
from plt_bench import pages
from plt_bench.pages import proof


def test_plan_names_fit_linux_limits_and_carry_the_prefix():
    for i in (0, 7, 255):
        p = topology.Plan(i)
        for dev in (p.client_if, p.router_client_if, p.router_server_if, p.server_if):
            assert len(dev) <= 15 and dev.startswith(f"pb{i}-")
        assert all(topology.NS_RE.match(ns).group(1) == f"pb{i}" for ns in p.namespaces)
        assert p.client_ip.startswith("198.18.") and p.server_ip.startswith("198.19.")
    with pytest.raises(UsageError, match="--testbed"):
        topology.Plan(256)


def test_plan_commands_build_three_namespaces_with_offloads_off_and_congctl():
    p = topology.Plan(3, cc="reno")
    cmds = p.create_commands()
    argvs = [" ".join(a) for _, a in cmds]
    assert argvs[:3] == ["ip netns add pb3-client", "ip netns add pb3-router", "ip netns add pb3-server"]
    assert "ip link add pb3-c netns pb3-client type veth peer name pb3-rc netns pb3-router" in argvs
    assert "ip link add pb3-s netns pb3-server type veth peer name pb3-rs netns pb3-router" in argvs
    # every veth end: offloads off, so qdiscs see wire-size packets
    offl = [(ns, a[2]) for ns, a in cmds if a[:2] == ["ethtool", "-K"]]
    assert sorted(offl) == sorted([("pb3-client", "pb3-c"), ("pb3-router", "pb3-rc"), ("pb3-router", "pb3-rs"),
                                   ("pb3-server", "pb3-s")])
    routes = [(ns, a) for ns, a in cmds if a[:3] == ["ip", "route", "add"]]
    assert len(routes) == 4 and all(a[-2:] == ["congctl", "reno"] for _, a in routes)
    assert ("pb3-router", ["sysctl", "-qw", "net.ipv4.ip_forward=1"]) in cmds
    # nothing is run in the root namespace except creating namespaces and veths inside them
    assert all(ns is not None or a[:3] in (["ip", "netns", "add"], ["ip", "link", "add"]) for ns, a in cmds)


ORIGINS = [("plt.test", "198.19.4.2"), ("plt-o1.test", "198.19.4.11"), ("plt-o2.test", "198.19.4.12")]


def test_caddy_config_binds_only_the_servers_addresses_one_site_for_every_origin(tmp_path):
    text = caddy.render_config(caddy.TEMPLATE.read_text(), origins=ORIGINS,
                                cert=tmp_path / "c.pem", key=tmp_path / "k.pem", sites=tmp_path,
                                access_log=tmp_path / "a.log")
    assert "admin off" in text and "protocols h1 h2 h3" in text and "auto_https off" in text
    assert "bind 198.19.4.2 198.19.4.11 198.19.4.12\n" in text
    assert "https://plt.test:443, https://plt-o1.test:443, https://plt-o2.test:443 {" in text
    assert "header Timing-Allow-Origin *" in text  # cross-origin Resource Timing and LCP render times
    assert f"tls {tmp_path}/c.pem {tmp_path}/k.pem" in text and "${" not in text  # every placeholder filled
    # the pages' files only (pages.Page.files: HTML, objects, the bulk body), nothing else of the folder
    (served,) = re.findall(r"@notpage not path_regexp (\S+)\n", text)
    for page in (Page(5000), Page(10**7), Page(5000, 200), Page(1024 * 1024, 1), parse_page("bulk30s"),
                 parse_page("bulk10s_100ms"), parse_page("bulk1500ms_500ms"), parse_page("req100x1KB"),
                 parse_page("req10x64KiB_c10"), parse_page("4o:60x5KB"), parse_page("16o:16x1KB")):
        assert all(re.fullmatch(served, f"/{name}") for name, _, _ in page.files()), page
    for name in ("MANIFEST.json", "README.md", "bulk.bin.part", "index_5KB.part", "bulk30s.html.tmp", "bulk.binx",
                 "index_5KB.html/x", "../index_5KB.html"):
        assert not re.fullmatch(served, f"/{name}"), name
    with pytest.raises(Exception, match="cannot hold"):
        caddy.render_config(caddy.TEMPLATE.read_text(), origins=ORIGINS, cert=tmp_path / "a b",
                             key=tmp_path, sites=tmp_path, access_log=tmp_path)
    with pytest.raises(Exception, match="not a host name"):
        caddy.render_config(caddy.TEMPLATE.read_text(), origins=[("plt.test {", "1.2.3.4")], cert=tmp_path,
                             key=tmp_path, sites=tmp_path, access_log=tmp_path)


def test_the_certificate_names_every_origin_and_address_once():
    assert certs.subject_alt_names(ORIGINS + [("plt-o3.test", "198.19.4.2")]) == (
        "DNS:plt.test,DNS:plt-o1.test,DNS:plt-o2.test,DNS:plt-o3.test,IP:198.19.4.2,IP:198.19.4.11,IP:198.19.4.12")


def test_spki_hash_matches_openssl(tmp_path):
    key = tmp_path / "k.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)], check=True)
    pub = subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout"], capture_output=True, text=True, check=True).stdout
    der = subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-outform", "DER"], capture_output=True, check=True).stdout
    import base64, hashlib
    assert certs.spki_hash_from_pem_pubkey(pub) == base64.b64encode(hashlib.sha256(der).digest()).decode()


def test_access_log_parser():
    page = "https://plt.test/index_5KB.html?trial=ab"
    lines = [json.dumps({"request": {"uri": "/index_5KB.html?trial=ab", "proto": "HTTP/3.0", "remote_port": "40112",
                                     "host": "plt.test", "tls": {"resumed": True, "version": 772}},
                         "status": 200, "size": 5000, "ts": 100.5, "duration": 0.25}),
             "not json", "[1, 2]",
             json.dumps({"request": {"uri": "/favicon.ico", "proto": "HTTP/1.1", "headers": {"Referer": [page]},
                                     "method": "GET"},
                         "status": 404, "size": 0, "resp_headers": {"X-Plt-Replay": ["miss"],
                                                                    "X-Plt-Think": ["asked=200.000; waited=200.4"]}})]
    e = caddy.parse_access_log("\n".join(lines))
    assert e == [{"uri": "/index_5KB.html?trial=ab", "host": "plt.test", "proto": "h3", "status": 200,
                  "size": 5000, "end_unix_s": 100.5, "duration_s": 0.25, "referer": None, "remote_port": "40112",
                  "resumed": True, "method": None, "replay": None, "think": None},
                 {"uri": "/favicon.ico", "host": None, "proto": "h1", "status": 404, "size": 0,
                  "end_unix_s": None, "duration_s": None, "referer": page, "remote_port": None, "resumed": None,
                  "method": "GET", "replay": "miss", "think": "asked=200.000; waited=200.4"}]


def test_other_requests_overlapping_a_trial_are_foreign_its_own_favicon_is_not():
    mine = "/index_10MB.html?trial=new"

    def entry(uri, end, dur, referer=None, status=200, size=1):
        return {"uri": uri, "end_unix_s": end, "duration_s": dur, "referer": referer, "size": size, "status": status}
    entries = [entry(mine, 20.0, 8.0),
               # the trial before's favicon (issue 28: its orphaned socket retransmitted it at 200 ms of RTT)
               entry("/favicon.ico", 12.5, 0.0, "https://plt.test/index_5KB.html?trial=old", status=404, size=0),
               entry("/favicon.ico", 20.1, 0.0, "https://plt.test" + mine),      # the page's own
               entry("/index_10MB.html?trial=old", 11.9, 8.0),                    # ended before the trial
               entry("/index_10MB.html?trial=orphan", 21.0, 12.0),                # on the wire with it
               entry("/index_5KB.html?trial=after", 30.0, 1.0),                   # began after it
               entry("/index_5KB.html?trial=untimed", None, None)]                # no times: counted
    foreign = servers.overlapping(entries, mine, 12.0, 20.2)
    assert [e["uri"] for e in foreign] == ["/index_10MB.html?trial=orphan", "/index_5KB.html?trial=untimed"]
    from plt_bench.trial.evidence import foreign_traffic_problem
    assert foreign_traffic_problem([]) is None
    assert "other traffic on the link during the trial" in foreign_traffic_problem(foreign)


def test_chromium_flags_per_protocol():
    one = [("plt.test", "198.19.0.2")]
    q = chromium.chromium_args("h3", one, "HASH=", "/p")
    h2 = chromium.chromium_args("h2", one, "HASH=", "/p")
    t = chromium.chromium_args("h1", one, "HASH=", "/p")
    assert "--enable-quic" in q and "--origin-to-force-quic-on=plt.test:443" in q and "--disable-quic" not in q
    assert "--disable-quic" in t and not any("quic-on" in a for a in t)
    # h2: no QUIC (Caddy's Alt-Svc would move the page to h3), ALPN offers h2; h1: neither
    assert "--disable-quic" in h2 and "--disable-http2" not in h2 and "--disable-http2" in t
    assert "--disable-http2" not in q
    for a in (q, h2, t):
        assert "--host-resolver-rules=MAP plt.test 198.19.0.2, MAP * ~NOTFOUND" in a
        assert "--ignore-certificate-errors-spki-list=HASH=" in a and "--user-data-dir=/p" in a
        assert "--headless=new" in a and not any("'" in x or '"' in x for x in a)
        assert "--window-size=1280,800" in a  # LCP is the largest element in a fixed window
    assert chromium.PREFS["net"]["network_prediction_options"] == 2
    with pytest.raises(ValueError):
        chromium.chromium_args("sctp", one, "h", "/p")
    # every origin resolves to its own address and is forced to QUIC
    many = chromium.chromium_args("h3", ORIGINS, "HASH=", "/p")
    assert ("--host-resolver-rules=MAP plt.test 198.19.4.2, MAP plt-o1.test 198.19.4.11, MAP plt-o2.test "
            "198.19.4.12, MAP * ~NOTFOUND") in many
    assert "--origin-to-force-quic-on=plt.test:443,plt-o1.test:443,plt-o2.test:443" in many
    # as recorded: QUIC forced on the h3 origins alone; HTTP/2 stays on (an h1 origin's server offers h1 alone)
    mixed = chromium.chromium_args("as-recorded", ORIGINS, "HASH=", "/p", spoke={"plt.test": "h3", "plt-o1.test": "h1"})
    assert "--origin-to-force-quic-on=plt.test:443" in mixed and "--enable-quic" in mixed
    assert "--disable-http2" not in mixed and "--disable-quic" not in mixed
    none = chromium.chromium_args("as-recorded", ORIGINS, "HASH=", "/p", spoke={"plt.test": "h2"})
    assert "--disable-quic" in none and "--disable-http2" not in none


NAV = {"startTime": 0, "domainLookupStart": 1, "domainLookupEnd": 1, "connectStart": 2, "secureConnectionStart": 3,
       "connectEnd": 10, "responseStart": 20, "responseEnd": 50, "domContentLoadedEventEnd": 55, "loadEventEnd": 60,
       "responseStatus": 200, "nextHopProtocol": "h3", "decodedBodySize": 5000}
GOOD = {"nav": NAV, "final_url": "https://plt.test/index_5KB.html?trial=x", "error": None}
SRV = [{"uri": "/x", "proto": "h3", "status": 200, "size": 5000}]


def test_timings_from_navigation_timing():
    t = browser.timings(NAV)
    assert t == {"plt_ms": 60, "dns_ms": 0, "connect_ms": 8, "tls_ms": 7, "ttfb_ms": 20, "response_end_ms": 50,
                 "dcl_ms": 55}


@pytest.mark.parametrize("change,server_entries,reason", [
    ({}, SRV, None),
    ({"error": "timeout: the page did not load within 20s"}, SRV, "timeout"),
    ({"final_url": "chrome-error://chromewebdata/", "error_code": "ERR_QUIC_PROTOCOL_ERROR"}, [], "ERR_QUIC_PROTOCOL_ERROR"),
    ({"error_code": "ERR_CONNECTION_REFUSED", "nav": {**NAV, "responseStatus": 0}}, [], "error page: ERR_CONNECTION_REFUSED"),
    ({"nav": {**NAV, "responseStatus": 404}}, SRV, "responseStatus 404"),
    ({"nav": {**NAV, "nextHopProtocol": "h2"}}, SRV, "protocol mismatch"),
    ({"nav": {**NAV, "decodedBodySize": 4999}}, SRV, "body size 4999"),
    ({"nav": {**NAV, "loadEventEnd": 0}}, SRV, "load event"),
    ({}, [], "server logged no request"),
    ({}, [{**SRV[0], "proto": "h1"}], "server saw h1"),
    ({}, [{**SRV[0], "size": 10}], "server sent status 200 with 10 bytes"),
])
def test_judge_needs_every_proof(change, server_entries, reason):
    status, why = proof.judge("h3", 5000, {**GOOD, **change}, server_entries)
    if reason is None:
        assert (status, why) == ("ok", None)
    else:
        assert status == "failed" and reason in why


OBJ_PAGE = Page(5000, 3)
RES = [{"name": f"https://plt.test{u}", "initiatorType": "img", "nextHopProtocol": "http/1.1", "responseStatus": 200,
        "decodedBodySize": 5000} for u in OBJ_PAGE.object_uris()]
OBJ_SRV = [{"uri": u, "proto": "h1", "status": 200, "size": 5000, "remote_port": p}
           for u, p in zip(OBJ_PAGE.object_uris(), ("40001", "40002", "40001"))]


@pytest.mark.parametrize("resources,entries,proven,reason", [
    (RES, OBJ_SRV, 3, None),
    (RES, None, 3, None),  # no server log to read (it is read on every testbed): the browser's word alone
    (RES[:2], OBJ_SRV, 2, "1 of 3 objects not proven; first: /obj_5KB.png?i=2: the browser has 0 Resource Timing"),
    (RES + RES[:1], OBJ_SRV, 2, "/hero_5KB.png?i=0: the browser has 2 Resource Timing entries"),
    ([{**RES[0], "nextHopProtocol": "h3"}] + RES[1:], OBJ_SRV, 2, "carried over 'h3', expected 'http/1.1'"),
    ([{**RES[0], "decodedBodySize": 4999}] + RES[1:], OBJ_SRV, 2, "the browser saw status 200 with 4999 bytes"),
    (RES, OBJ_SRV[1:], 2, "/hero_5KB.png?i=0: the server logged 0 requests for it"),
    (RES, [{**OBJ_SRV[0], "proto": "h3"}] + OBJ_SRV[1:], 2, "the server saw h3, expected h1"),
    (RES, [{**OBJ_SRV[0], "size": 10}] + OBJ_SRV[1:], 2, "the server sent status 200 with 10 bytes"),
    (None, OBJ_SRV, 0, "3 of 3 objects not proven"),
])
def test_every_object_of_a_page_needs_both_proofs(resources, entries, proven, reason):
    got, why = proof.judge_objects("h1", OBJ_PAGE, resources, entries)
    assert got == proven and (why is None if reason is None else reason in why), why


MANY = Page(5000, 4, origins=2)  # objects 0 and 2 on plt.test, 1 and 3 on plt-o1.test
MANY_RES = [{"name": f"https://{h}{u}", "nextHopProtocol": "h2", "responseStatus": 200 if h == "plt.test" else 0,
             "decodedBodySize": 5000} for h, u in MANY.object_urls()]
MANY_SRV = [{"uri": u, "host": h, "proto": "h2", "status": 200, "size": 5000, "remote_port": p}
            for (h, u), p in zip(MANY.object_urls(), ("1", "2", "1", "2"))]


@pytest.mark.parametrize("resources,entries,proven,reason", [
    (MANY_RES, MANY_SRV, 4, None),
    # the same URI asked of the wrong origin is not the object
    (MANY_RES[:1] + [{**MANY_RES[1], "name": "https://plt.test" + MANY.object_urls()[1][1]}] + MANY_RES[2:], MANY_SRV,
     3, "plt-o1.test/obj_5KB.png?i=1: the browser has 0 Resource Timing entries"),
    (MANY_RES, MANY_SRV[:1] + [{**MANY_SRV[1], "host": "plt.test"}] + MANY_SRV[2:], 3,
     "plt-o1.test/obj_5KB.png?i=1: the server logged 0 requests"),
    # status 0 is Chromium hiding a cross-origin image's status: only there
    ([{**MANY_RES[0], "responseStatus": 0}] + MANY_RES[1:], MANY_SRV, 3, "/hero_5KB.png?i=0: the browser saw status 0"),
    (MANY_RES[:1] + [{**MANY_RES[1], "nextHopProtocol": "http/1.1"}] + MANY_RES[2:], MANY_SRV, 3,
     "plt-o1.test/obj_5KB.png?i=1: carried over 'http/1.1', expected 'h2'"),
])
def test_a_many_origin_pages_objects_are_proven_on_their_own_origin(resources, entries, proven, reason):
    got, why = proof.judge_objects("h2", MANY, resources, entries)
    assert got == proven and (why is None if reason is None else reason in why), why
    assert browser.connections_per_origin(MANY_SRV) == {"plt.test": 1, "plt-o1.test": 1}
    assert browser.connections_per_origin(MANY_SRV + [{**MANY_SRV[1], "remote_port": "3"}])["plt-o1.test"] == 2


@pytest.mark.parametrize("paint,loaded,want", [
    ({"fcp_ms": 236.0, "lcp": {"start_ms": 340.0, "element": "img#hero", "url": "https://plt.test/hero_5KB.png?i=0"},
      "visibility": "visible", "viewport": [412, 823, 1.75, "Mozilla/5.0 (Linux; Android 11) Mobile"]}, True,
     {"fcp_ms": 236.0, "lcp_ms": 340.0, "lcp_element": "img#hero", "lcp_url": "https://plt.test/hero_5KB.png?i=0",
      "paint_reason": None, "paint_wait_ms": None, "viewport": "412x823@1.75"}),
    # no candidate: none, with the reason; never zero
    ({"fcp_ms": 236.0, "lcp": None, "visibility": "visible"}, True,
     {"fcp_ms": 236.0, "lcp_ms": None, "lcp_element": None, "lcp_url": None,
      "paint_reason": "no largest-contentful-paint candidate after the load: no text or image qualified (an image under "
                      "0.05 bits per pixel, or filling the viewport, does not count)", "paint_wait_ms": None,
      "viewport": None}),
    ({"fcp_ms": None, "lcp": None, "visibility": "hidden"}, True, "the page was hidden"),
    ({"fcp_ms": 236.0, "lcp": None, "visibility": "visible", "waited_ms": 2000.4}, True,
     "no largest-contentful-paint candidate 2000 ms after the load"),
    ({"error": "could not read the paint metrics: boom"}, True, "paint metrics not read"),
    (None, True, "no first-contentful-paint entry"),
    ({"fcp_ms": 1.0}, False, {}),  # a failed load paints nothing of the page
])
def test_paint_metrics_are_stored_or_their_absence_explained(paint, loaded, want):
    got = browser.paint_fields(paint, loaded)
    if isinstance(want, dict):
        assert got == want
    else:
        assert got["lcp_ms"] is None and want in got["paint_reason"]


def test_the_paint_wait_is_stored_and_a_page_that_never_settled_says_so():
    settled = {"fcp_ms": 236.0, "lcp": {"start_ms": 700.0, "element": "h1"}, "visibility": "visible",
               "waited_ms": 812.34, "quiet_ms": 600, "settled": True}
    assert browser.paint_fields(settled, True)["paint_wait_ms"] == 812.3
    assert browser.paint_fields(settled, True)["paint_reason"] is None
    restless = {**settled, "waited_ms": 5600.0, "settled": False}
    got = browser.paint_fields(restless, True)
    assert got["lcp_ms"] == 700.0 and "never settled (no quiet 600 ms within 5600 ms after the load)" in \
        got["paint_reason"]


def test_the_quiet_window_is_half_a_second_and_two_round_trips():
    from plt_bench.browsers import worker as w
    assert w.paint_quiet_ms(0.0) == w.PAINT_QUIET_MS == 500
    assert w.paint_quiet_ms(50.0) == 600.0 and w.paint_quiet_ms(-1) == 500
    # a page whose scripts draw nothing after the load (the pages plt-bench makes): every candidate is in by then
    assert w.paint_quiet_ms(200.0, draws_after_load=False) == w.PAINT_SETTLED_MS == 50
    from plt_bench import pages
    drawn = {k.name for k in pages.KINDS if k.draws_after_load}
    assert drawn == {"recording", "folder", "real"}, drawn  # a page its own scripts may draw late (real: a recording)
    js = w.paint_js(600)
    assert "QUIET = 600, CAP = 5000, BUSY = 100" in js and "%(" not in js


H2_NAV = {**NAV, "nextHopProtocol": "h2"}
H2_SRV = [{**SRV[0], "proto": "h2"}]


@pytest.mark.parametrize("nav,entries,reason", [
    (H2_NAV, H2_SRV, None),
    ({**NAV, "nextHopProtocol": "http/1.1"}, H2_SRV, "protocol mismatch: nextHopProtocol 'http/1.1', expected 'h2'"),
    (H2_NAV, [{**SRV[0], "proto": "h1"}], "server saw h1, expected h2"),
    (H2_NAV, SRV, "server saw h3, expected h2"),
])
def test_an_h2_trial_needs_h2_on_both_ends(nav, entries, reason):
    status, why = proof.judge("h2", 5000, {**GOOD, "nav": nav}, entries)
    assert (status, why) == ("ok", None) if reason is None else (status == "failed" and reason in why), why
    res = [{**r, "nextHopProtocol": nav["nextHopProtocol"]} for r in RES]
    srv = [{**e, "proto": entries[0]["proto"]} for e in OBJ_SRV]
    got, why = proof.judge_objects("h2", OBJ_PAGE, res, srv)
    assert (got, why) == (3, None) if reason is None else got == 0 and why.startswith("3 of 3 objects not proven")


def test_connections_are_the_client_ports_the_server_logged():
    assert browser.connections(OBJ_SRV) == 2
    assert browser.connections([{**e, "remote_port": None} for e in OBJ_SRV]) is None
    assert pages.url_path(pages.page_url(pages.HOST, "/obj_5KB.png?i=2")) == "/obj_5KB.png?i=2"


def test_a_trials_own_entries_are_its_page_and_what_the_page_asked_for():
    page = "https://plt.test/objects_3x5KB.html?trial=t1"
    own = [{"uri": "/objects_3x5KB.html?trial=t1", "referer": None},
           {"uri": "/obj_5KB.png?i=0", "referer": page}]
    favicon = {"uri": "/favicon.ico", "referer": page}
    other = {"uri": "/obj_5KB.png?i=0", "referer": "https://plt.test/objects_3x5KB.html?trial=t0"}
    assert servers.own_entries(own + [favicon, other], "/objects_3x5KB.html?trial=t1") == own


def test_every_veth_end_steers_each_flow_to_one_cpu():
    """RPS on all four veth ends (no reordering by per-CPU backlogs), with a mask sysfs accepts, onto
    the CPUs the process may run on (a pinned cluster worker's testbed steers onto its own set)."""
    from plt_bench.cpu import own_cpus
    assert topology.cpu_mask(range(1)) == "1" and topology.cpu_mask(range(2)) == "3"
    assert topology.cpu_mask(range(32)) == "ffffffff" and topology.cpu_mask(range(40)) == "ff,ffffffff"
    assert topology.cpu_mask(range(64)) == "ffffffff,ffffffff"
    assert topology.cpu_mask([2, 3]) == "c" and topology.cpu_mask([0, 33]) == "2,00000001"
    p = topology.Plan(3)
    rps = [(ns, a[-1]) for ns, a in p.create_commands() if a[:2] == ["sh", "-c"]]
    assert sorted((ns, cmd.split("/")[4]) for ns, cmd in rps) == sorted(
        [("pb3-client", "pb3-c"), ("pb3-router", "pb3-rc"), ("pb3-router", "pb3-rs"), ("pb3-server", "pb3-s")])
    assert all(c == f"echo {topology.cpu_mask(own_cpus())} > /sys/class/net/{c.split('/')[4]}/queues/rx-0/rps_cpus"
               for _, c in rps)


def test_descendants_follow_parent_links_through_reparented_orphans():
    from plt_bench.procs import descendants
    # 10 the worker; 11 chromedriver (killed: gone); 12 Chromium reparented to the worker (subreaper);
    # 13 its renderer; 20 a stranger; 21 the stranger's child
    parents = {10: 1, 12: 10, 13: 12, 14: 13, 20: 1, 21: 20}
    assert descendants(parents, 10) == {12, 13, 14}
    assert descendants(parents, 14) == set()
    assert descendants({5: 5}, 5) == set()  # a loop cannot hang it


def test_only_the_testbeds_own_programs_are_ours():
    from plt_bench.topology import is_our_program
    run = "/run/plt-bench/pb150/"
    assert is_our_program("/usr/lib/chromium/chromium", f"chromium --user-data-dir={run}profiles/x")
    assert is_our_program("/work/main/.venv/bin/caddy", f"caddy run --config {run}Caddyfile")
    assert is_our_program("/usr/bin/python3.11", f"python -m plt_bench.browser_worker {run}browser-worker.log")
    assert is_our_program("/work/main/.tools/bin/linkem (deleted)", "linkem --stats x")  # rebuilt under it
    # issue 44: the replay server and Firefox's processes were not found by clean after a SIGKILL
    assert is_our_program("/usr/bin/python3.11", f"python -m plt_bench.replayd --sites s --active {run}replay-active x")
    assert is_our_program("/usr/lib/firefox-esr/firefox-esr", f"firefox-esr -profile {run}profiles/x")
    assert is_our_program("/usr/bin/python3.11", f"python -m plt_bench.servers.think --think-file {run}think")
    assert is_our_program("/work/main/.tools/bin/geckodriver", "geckodriver --port 4444")
    assert not is_our_program("/usr/bin/tail", f"tail -F {run}access.log")
    assert not is_our_program("/usr/bin/python3.11", f"python3 my_reader.py {run}access.log")
    assert not is_our_program("/usr/bin/grep", "grep plt_bench.browser_worker")
    assert not is_our_program(None, "caddy run")


def test_a_testbed_in_use_is_named_with_what_works(tmp_path, monkeypatch):
    """Issue 26: a testbed in use suggested 'plt-bench down', which refuses a testbed a live run owns.
    The advice follows whose it is: 'up' (down works), a live run (choose another), a live cluster
    worker, or a run that is gone (clean works)."""
    import json
    import os

    from plt_bench import procs, topology
    monkeypatch.setattr(topology, "RUN_DIR", tmp_path)
    me = {"owner_pid": os.getpid(), "owner_start": procs.start_time(os.getpid())}
    for index, state, said in [(1, {"up": True}, "take it down with 'plt-bench down --testbed 1'"),
                               (2, me, f"a running plt-bench (PID {os.getpid()}) is using it; choose another"),
                               (3, {"owner_pid": os.getpid(), "owner_start": "0"}, "'plt-bench clean' removes it")]:
        (tmp_path / f"pb{index}").mkdir()
        (tmp_path / f"pb{index}" / "state.json").write_text(json.dumps(state))
        assert said in topology.in_use(index), topology.in_use(index)
    (tmp_path / "worker-pb4.json").write_text(json.dumps(me))
    assert f"cluster worker PID {os.getpid()} holds it" in topology.in_use(4)


def test_a_repeat_visits_evidence_reads_in_a_word():
    assert browser.zero_rtt_summary([]) is None  # no QUIC session: h1, h2
    assert browser.zero_rtt_summary(["AttemptedAndSucceeded"] * 4) == "succeeded"
    assert browser.zero_rtt_summary(["AttemptedAndSucceeded", "NotAttempted", "AttemptedAndSucceeded"]) == \
        "succeeded 2, not attempted 1"
    assert browser.zero_rtt_summary(["AttemptedAndRejected"]) == "rejected"
    # resumed connections: per connection (origin and client port), as the server's log says
    log = [{"host": "plt.test", "remote_port": "1", "resumed": True}, {"host": "plt.test", "remote_port": "1", "resumed": True},
           {"host": "plt.test", "remote_port": "2", "resumed": False}, {"host": "plt-o1.test", "remote_port": "1",
                                                                         "resumed": True}]
    assert browser.resumed_connections(log) == 2 and browser.resumed_connections([{"uri": "/x"}]) is None


WARM = Page(5000, 2, visit="repeat-warm")


@pytest.mark.parametrize("resources,entries,proven,reason", [
    # the images from the browser's own cache: no request, nothing transferred, every byte
    ([{"name": f"https://plt.test{u}", "transferSize": 0, "decodedBodySize": 5000, "nextHopProtocol": "h2",
       "responseStatus": 200} for u in WARM.object_uris()], [], 2, None),
    # a cached entry with a request in the server's log is not from the cache: judged as fetched
    ([{"name": f"https://plt.test{u}", "transferSize": 0, "decodedBodySize": 5000, "nextHopProtocol": "h2",
       "responseStatus": 200} for u in WARM.object_uris()],
     [{"uri": WARM.object_uris()[0], "proto": "h2", "status": 304, "size": 0}], 1, "the server sent status 304"),
    ([{"name": f"https://plt.test{u}", "transferSize": 0, "decodedBodySize": 4999, "nextHopProtocol": "h2",
       "responseStatus": 200} for u in WARM.object_uris()], [], 0, "the browser saw status 200 with 4999 bytes"),
    # issue 36: revalidated (a sub-document is served no-cache, as a page is): the server's 304 without a
    # body over the protocol, the browser's whole body from its cache, with its headers exchanged
    ([{"name": f"https://plt.test{u}", "transferSize": 300, "decodedBodySize": 5000, "nextHopProtocol": "h2",
       "responseStatus": s} for u, s in zip(WARM.object_uris(), (200, 304))],
     [{"uri": u, "proto": "h2", "status": 304, "size": 0} for u in WARM.object_uris()], 2, None),
    ([{"name": f"https://plt.test{u}", "transferSize": 300, "decodedBodySize": 4000, "nextHopProtocol": "h2",
       "responseStatus": 200} for u in WARM.object_uris()],
     [{"uri": u, "proto": "h2", "status": 304, "size": 0} for u in WARM.object_uris()], 0, "with 4000 bytes"),
    ([{"name": f"https://plt.test{u}", "transferSize": 300, "decodedBodySize": 5000, "nextHopProtocol": "h2",
       "responseStatus": 200} for u in WARM.object_uris()],
     [{"uri": u, "proto": "h1", "status": 304, "size": 0} for u in WARM.object_uris()], 0, "the server saw h1"),
])
def test_a_warm_repeat_visits_objects_may_come_from_the_cache(resources, entries, proven, reason):
    got, why = proof.judge_objects("h2", WARM, resources, entries)
    assert got == proven and (why is None if reason is None else reason in why), why
    # only there: a first visit's object never counts from a cache
    first, _ = proof.judge_objects("h2", dataclasses.replace(WARM, visit="first"), resources, [])
    assert first == 0


def test_a_warm_repeat_visits_page_may_be_revalidated_304():
    srv = [{**SRV[0], "proto": "h3", "status": 304, "size": 0}]
    assert proof.judge("h3", 5000, GOOD, srv, revalidated=True) == ("ok", None)
    assert proof.judge("h3", 5000, GOOD, srv)[0] == "failed"  # a first visit is sent whole
    assert "body size 10" in proof.judge("h3", 5000, {**GOOD, "nav": {**NAV, "decodedBodySize": 10}}, srv,
                                           revalidated=True)[1]


def test_replayed_recordings_get_their_own_addresses_and_a_site_that_passes_every_host_to_replayd(tmp_path):
    p = topology.Plan(4)
    assert p.replay_addresses[0] == "198.19.4.64" and len(p.replay_addresses) == 32
    assert not set(p.replay_addresses) & ({ip for _, ip in p.origins} | {p.server_ip, p.client_ip})
    added = [a[3] for ns, a in p.create_commands() if a[:3] == ["ip", "addr", "add"] and ns == p.server_ns]
    assert not any(f"{ip}/32" in added for ip in p.replay_addresses)  # only a testbed that replays adds them
    assert p.address_commands(["198.19.4.64"]) == [("pb4-server", ["ip", "addr", "add", "198.19.4.64/32", "dev",
                                                                   "pb4-s"])]
    text = caddy.render_config(caddy.TEMPLATE.read_text(), origins=ORIGINS, cert=tmp_path / "c.pem",
                                key=tmp_path / "k.pem", sites=tmp_path, access_log=tmp_path / "a.log",
                                replay=(["198.19.4.64", "198.19.4.65"], 40123))
    block = text[text.index("\nhttps:// {"):]
    assert "bind 198.19.4.64 198.19.4.65\n" in block and "reverse_proxy 127.0.0.1:40123" in block
    assert f"tls {tmp_path}/c.pem {tmp_path}/k.pem" in block and f"output file {tmp_path}/a.log" in block
    assert "bind 198.19.4.2 198.19.4.11 198.19.4.12\n" in text  # the generated pages' site as before
    with pytest.raises(Exception, match="replay addresses"):
        caddy.render_config(caddy.TEMPLATE.read_text(), origins=ORIGINS, cert=tmp_path, key=tmp_path,
                             sites=tmp_path, access_log=tmp_path, replay=(["1.2.3.4 {"], 1))
    # as recorded: each origin again on an address of its own, whose listener offers its protocol alone
    assert p.as_recorded_addresses[0] == "198.19.4.160" and len(p.as_recorded_addresses) == 32
    assert not set(p.as_recorded_addresses) & set(p.replay_addresses + p.static_addresses)
    text = caddy.render_config(caddy.TEMPLATE.read_text(), origins=ORIGINS, cert=tmp_path / "c.pem",
                                key=tmp_path / "k.pem", sites=tmp_path, access_log=tmp_path / "a.log",
                                replay=(["198.19.4.64"], 40123), own=["198.19.4.160", "198.19.4.161"],
                                listeners=[("198.19.4.160", "h3"), ("198.19.4.161", "h1")])
    glob = text[:text.index("\n}\n")]
    assert "\tservers 198.19.4.160:443 {\n\t\tprotocols h1 h2 h3\n\t}" in glob
    assert "\tservers 198.19.4.161:443 {\n\t\tprotocols h1\n\t}" in glob
    assert text.count("reverse_proxy 127.0.0.1:40123") == 3 and "bind 198.19.4.161\n" in text
    assert caddy.listener_options([("198.19.4.162", "h2")]) == "\tservers 198.19.4.162:443 {\n\t\tprotocols h1 h2\n\t}\n"
    with pytest.raises(ValueError):
        caddy.listener_options([("198.19.4.162", "h4")])


def test_the_server_table_names_caddy_and_its_log_comes_back_in_protocol_terms():
    """servers/: one table (Caddy the default), and an access log read in protocol terms whatever
    the server writes: Caddy's HTTP/2.0 is h2; a word that is no protocol stays as it is, so a
    judgement refuses it by name; the store keeps the HTTP version as before."""
    from plt_bench import protocols
    assert servers.NAMES == ("caddy", "quinn") and servers.DEFAULT == "caddy" and servers.get("caddy") is servers.Caddy
    assert all(issubclass(servers.get(n), servers.Server) for n in servers.NAMES)
    with pytest.raises(ValueError, match="unknown server 'nginx'; expected one of caddy, quinn"):
        servers.get("nginx")
    lines = [json.dumps({"request": {"uri": "/x", "proto": word}, "status": 200, "size": 1})
             for word in ("HTTP/2.0", "HTTP/0.9")]
    assert [e["proto"] for e in caddy.parse_access_log("\n".join(lines))] == ["h2", "HTTP/0.9"]
    assert [protocols.http_version(p) for p in ("h3", "h2", "h1", "HTTP/0.9", None)] == [
        "HTTP/3.0", "HTTP/2.0", "HTTP/1.1", "HTTP/0.9", None]
    nav = {"responseStatus": 200, "nextHopProtocol": "h2", "decodedBodySize": 1, "loadEventEnd": 5}
    status, why = proof.judge("h2", 1, {"nav": nav}, [{"uri": "/x", "proto": "HTTP/0.9", "status": 200, "size": 1}])
    assert status == "failed" and why == "server saw HTTP/0.9, expected h2"


def test_leftovers_leave_out_a_live_cluster_worker_s_entries_with_its_testbed(tmp_path, monkeypatch):
    """Beside another run's cluster: its worker's claim and Dask folder (worker-pbN.json, .dask) are
    its testbed's, left out with its prefix; a dead one's are leftovers (the suite's end failed on a
    live worker-pb228.dask while the other run's cluster test ran)."""
    from plt_bench import topology
    monkeypatch.setattr(topology, "RUN_DIR", tmp_path)
    monkeypatch.setattr(topology, "existing_namespaces", lambda: [])
    monkeypatch.setattr(topology, "_our_processes", lambda prefix=None: [])
    for name in ("pb228", "worker-pb228.json", "worker-pb228.dask", "worker-pb7.dask", "pb7"):
        (tmp_path / name).mkdir()
    assert topology.leftovers(besides=frozenset({"pb228"}))["run_dirs"] == ["pb7", "worker-pb7.dask"]
