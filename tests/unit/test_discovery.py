"""HTTP/3 as browsers find it (plt_bench.dns, --discovery): the name server's command line and records,
Chromium's flags, the judgement of a trial whose protocols the browser chose, its protocol mix, and
what a campaign refuses by name. Pure logic; the real name server, Chromium and Caddy in
tests/integration/test_discovery.py."""
import pytest

from plt_bench import campaign, dns
from plt_bench.trial import judge as browser
from plt_bench.browsers import chromium
from plt_bench.errors import UsageError
from plt_bench.pages import Page, origin_host
from plt_bench.topology import Plan
from plt_bench.pages import proof

O1 = origin_host(1)  # plt-o1.test: the testbed's second origin, by the name pages gives it
ORIGINS = [("plt.test", "198.19.7.2"), (O1, "198.19.7.11")]


def test_an_https_record_advertises_h3_then_h2_for_the_owner_name():
    # RFC 9460 wire form: SvcPriority 1, TargetName "." (root: the owner itself), alpn (key 1) = "h3","h2"
    assert dns.https_rdata() == "0001" + "00" + "0001" + "0006" + "026833" + "026832"
    assert dns.https_rdata(("h3",)) == "0001000001000302" + "6833"


def test_the_name_server_answers_the_testbeds_names_alone_and_reads_nothing_of_the_machines(tmp_path):
    args = dns.dnsmasq_args("198.19.7.2", ORIGINS + [("plt.test", "198.19.7.3")], "https-rr", tmp_path / "d.log")
    assert args[0] == "dnsmasq" and "--keep-in-foreground" in args
    for nothing in ("--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--bind-interfaces", "--listen-address=198.19.7.2"):
        assert nothing in args
    # one address per name (its first), one HTTPS record per name
    assert [a for a in args if a.startswith("--address=")] == ["--address=/plt.test/198.19.7.2",
                                                               "--address=/plt-o1.test/198.19.7.11"]
    assert [a for a in args if a.startswith("--dns-rr=")] == [f"--dns-rr=plt.test,65,{dns.https_rdata()}",
                                                              f"--dns-rr=plt-o1.test,65,{dns.https_rdata()}"]
    assert f"--local-ttl={dns.ANSWER_TTL_S}" in args
    alt = dns.dnsmasq_args("198.19.7.2", ORIGINS, "alt-svc", tmp_path / "d.log")
    assert not [a for a in alt if a.startswith("--dns-rr=")] and "--address=/plt-o1.test/198.19.7.11" in alt
    with pytest.raises(ValueError, match="needs no name server"):
        dns.dnsmasq_args("198.19.7.2", ORIGINS, "forced", tmp_path / "d.log")


def test_the_query_log_says_what_was_asked():
    log = ("Nov 26 18:37:46 dnsmasq[31479]: query[HTTPS] plt.test from 198.18.242.2\n"
           "Nov 26 18:37:46 dnsmasq[31479]: config plt.test is <HTTPS>\n"
           "Nov 26 18:37:46 dnsmasq[31479]: query[A] plt.test from 198.18.242.2\n")
    assert dns.parse_query_log(log) == [("HTTPS", "plt.test"), ("A", "plt.test")]


@pytest.mark.parametrize("text,mode", [("forced", "forced"), ("Alt-Svc", "alt-svc"), (" https-rr ", "https-rr")])
def test_a_mode_is_read_as_typed(text, mode):
    assert dns.parse(text) == mode


def test_an_unknown_mode_is_refused_with_the_option_and_the_modes():
    with pytest.raises(UsageError, match="--discovery: 'dns'; expected one of forced, alt-svc, https-rr"):
        dns.parse("dns")


def test_a_discovering_client_asks_the_testbeds_name_server_and_knows_no_origin_itself():
    p = Plan(7, "cubic")
    forced, found = p.client_etc(), p.client_etc(p.server_ip)
    assert "plt.test" in forced["hosts"] and "nameserver 127.0.0.1" in forced["resolv.conf"]
    assert "plt.test" not in found["hosts"] and "localhost" in found["hosts"]
    assert f"nameserver {p.server_ip}\n" in found["resolv.conf"]


def test_chromium_finds_h3_on_its_own_and_is_exempted_from_the_known_root_rule_on_an_unused_port():
    args = chromium.chromium_args("h3", ORIGINS, "HASH=", "/p", discovery="https-rr")
    # the origins' names go to Chromium's own resolver (the name server); every other name fails inside it
    assert "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE plt.test, EXCLUDE plt-o1.test" in args
    assert not [a for a in args if "MAP plt.test" in a]
    # nothing is forced on 443: each host is listed on port 9 alone, which only lifts the known-root rule
    assert f"--origin-to-force-quic-on=plt.test:{chromium.UNKNOWN_ROOT_PORT},plt-o1.test:9" in args
    assert "--enable-quic" in args and not [a for a in args if ":443" in a]
    assert "--ignore-certificate-errors-spki-list=HASH=" in args
    # h2 and h1 stay forced beside it (QUIC off), looked up over the link as well
    h2 = chromium.chromium_args("h2", ORIGINS, "HASH=", "/p", discovery="alt-svc")
    assert "--disable-quic" in h2 and not [a for a in h2 if a.startswith("--origin-to-force-quic-on")]
    assert "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE plt.test, EXCLUDE plt-o1.test" in h2
    with pytest.raises(ValueError, match="discovery finds h3"):
        chromium.chromium_args("as-recorded", ORIGINS, "HASH=", "/p", discovery="alt-svc", spoke={"plt.test": "h3"})


NAV = {"startTime": 0, "responseStart": 20, "loadEventEnd": 60, "responseStatus": 200, "nextHopProtocol": "h2",
       "decodedBodySize": 5000}
LOAD = {"nav": NAV, "final_url": "https://plt.test/index_5KB.html?trial=x", "error": None}


def test_a_found_protocol_is_proven_when_both_ends_name_the_same_one():
    h2 = [{"uri": "/x", "proto": "h2", "status": 200, "size": 5000}]
    assert proof.judge("h3", 5000, LOAD, h2, discovered=True) == ("ok", None)
    status, why = proof.judge("h3", 5000, LOAD, h2)  # forced onto h3, the same load fails
    assert status == "failed" and "expected 'h3'" in why
    status, why = proof.judge("h3", 5000, LOAD, [{**h2[0], "proto": "h3"}], discovered=True)
    assert status == "failed" and "server saw h3, expected h2" in why
    status, why = proof.judge("h3", 5000, {**LOAD, "nav": {**NAV, "nextHopProtocol": "spdy/3"}}, h2, discovered=True)
    assert status == "failed" and "carried over 'spdy/3'" in why


PAGE = Page(5000, 2)


def _res(hops):
    return [{"name": f"https://plt.test{u}", "nextHopProtocol": h, "responseStatus": 200, "decodedBodySize": 5000,
             "startTime": 100.0 + 10 * i} for i, (u, h) in enumerate(zip(PAGE.object_uris(), hops))]


def test_objects_found_over_a_mix_are_each_proven_over_their_own():
    res = _res(["h2", "h3"])
    logged = [{"uri": r["name"][len("https://plt.test"):], "host": "plt.test", "proto": p, "status": 200, "size": 5000}
              for r, p in zip(res, ["h2", "h3"])]
    assert proof.judge_objects("h3", PAGE, res, logged, discovered=True) == (2, None)
    proven, why = proof.judge_objects("h3", PAGE, res, logged)  # forced: the h2 one is not h3
    assert proven == 1 and "expected 'h3'" in why
    crossed = [{**logged[0], "proto": "h3"}, logged[1]]
    proven, why = proof.judge_objects("h3", PAGE, res, crossed, discovered=True)
    assert proven == 1 and "the server saw h3, expected h2" in why


def test_the_mix_counts_requests_per_origin_and_says_when_h3_began():
    res = _res(["h2", "h3"]) + [{"name": f"https://{O1}/obj_5KB.png", "nextHopProtocol": "h3", "startTime": 90.0},
                                {"name": "https://plt.test/cached.png", "nextHopProtocol": "", "startTime": 5.0}]
    mix = browser.protocol_mix(NAV, res, "plt.test")
    assert mix == {"page": "h2", "per_origin": {"plt.test": {"h2": 2, "h3": 1}, "plt-o1.test": {"h3": 1}},
                   "first_h3_ms": 90.0}
    assert browser.protocol_mix(NAV, [], "plt.test")["first_h3_ms"] is None


BASE = {"size": "5KB", "runs": "1", "proto": "h3,h2", "rtt": "0"}


def test_a_campaign_discovers_with_chromium_on_its_own_testbed_and_on_generated_pages():
    spec = campaign.load("quick", {**BASE, "discovery": "https-rr"})
    assert spec.discovery == "https-rr" and spec.as_dict()["discovery"] == "https-rr"
    forced = campaign.load("quick", BASE)
    assert "discovery" not in forced.as_dict() and forced.spec_hash == campaign.load(
        "quick", {**BASE, "discovery": "forced"}).spec_hash and forced.spec_hash != spec.spec_hash
    with pytest.raises(UsageError, match="--browser firefox: not supported yet with discovery"):
        campaign.load("quick", {**BASE, "discovery": "alt-svc", "browser": "firefox"})
    # two machines: the server machine's name server answers (serve's names_start)
    assert campaign.load("quick", {**BASE, "discovery": "alt-svc", "server_machine": "192.0.2.1", "server_token_file": "/x",
                                   "iface": "eth0"}).discovery == "alt-svc"
    with pytest.raises(UsageError, match="--discovery https-rr: h3 is what a browser discovers"):
        campaign.load("quick", {**BASE, "proto": "h2,h1", "discovery": "https-rr"})


def test_a_client_on_a_real_host_asks_the_server_machines_name_server_through_files_of_its_own():
    from plt_bench.cmd import with_own_files
    from plt_bench.remote import RemotePlan
    p = RemotePlan(3, "eth1", "10.77.0.1", "10.77.0.2")
    etc = p.client_etc(p.server_ip)
    assert "nameserver 10.77.0.1\n" in etc["resolv.conf"] and "plt.test" not in etc["hosts"]
    # the worker alone sees them, in a mount namespace of its own; the machine's /etc stays the user's
    argv = with_own_files([("/run/plt-bench/pb3/etc/resolv.conf", "/etc/resolv.conf")], ["python3", "-m", "w"])
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    script = argv[argv.index("-c") + 1]
    assert 'mount --bind "$1" "$2"' in script and script.endswith('exec "$@"')
    assert argv[-6:] == ["/run/plt-bench/pb3/etc/resolv.conf", "/etc/resolv.conf", "--", "python3", "-m", "w"]
    assert with_own_files([], ["x"])[-2:] == ["--", "x"]
