"""HTTP/3 as a visitor's Chromium finds it (plt_bench.dns, --discovery), through a real name server
(dnsmasq) in the testbed, real Caddy and a real link: the lookup costs a round trip, the first visit
of an alt-svc testbed goes over TCP and its repeat over h3, an HTTPS record takes the first visit to
h3 at once; every request proven over the protocol the browser chose, the mix recorded. h2 and h1
stay forced as elsewhere; what does not depend on discovery is tested elsewhere."""
import json

import pytest

from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Cell, Conditions
from plt_bench.pages import Page
from plt_bench.trial.run import run_cell_once
from plt_bench import testbed
from plt_bench.topology import NETNS_ETC

from ..conftest import machine_refused, machine_saturated, system_state
from .conftest import until_ok

pytestmark = [pytest.mark.root, pytest.mark.slow]

RTT_MS = 50
COND = Conditions(20 * 10**6, 20 * 10**6, rtt_ms=RTT_MS)
FIRST, REPEAT = Page(5000, 4, origins=2), Page(5000, 4, origins=2, visit="repeat")


def _trial(bed, store, campaign, page):
    return until_ok(lambda i: run_cell_once(bed, store, campaign, 0, i, Cell("h3", page, COND)))


def _mix(t) -> dict:
    return json.loads(t.protocol_mix_json)


def test_alt_svc_first_visit_goes_over_tcp_and_the_repeat_over_h3(store, campaign):
    with testbed.Testbed(testbed.Setup(PROJECT_ROOT / "sites", discovery="alt-svc")) as bed:
        bed.sites.ensure([FIRST, REPEAT])
        bed.set_conditions(COND)
        first, reasons = _trial(bed, store, campaign, FIRST)
        if machine_refused(first, reasons):
            return
        assert first.status == "ok" and first.discovery == "alt-svc", reasons
        # nothing told the browser of h3 before the page's own response: the page and its first objects over
        # h2, proven so at both ends, and the lookup of its name over the link: a round trip at least
        assert first.next_hop_protocol == "h2" and first.server_proto == "HTTP/2.0" and _mix(first)["page"] == "h2"
        assert first.dns_ms >= RTT_MS * 0.95, first.dns_ms
        repeat, reasons = _trial(bed, store, campaign, REPEAT)
        if machine_refused(repeat, reasons):
            return
        assert repeat.status == "ok", reasons
        mix = _mix(repeat)
        # the repeat's connections race QUIC (Alt-Svc learned, 0-RTT) against TCP (two round trips): QUIC wins
        # on a machine of its own; its name is cached (the answers' TTL)
        if not (mix["page"] != "h3" and machine_saturated(repeat)):
            assert mix["page"] == "h3" and repeat.server_proto == "HTTP/3.0", mix
        assert repeat.dns_ms < RTT_MS / 2, repeat.dns_ms
        # the name server was asked for the page's origins, and for no name but the testbed's (every other
        # one fails inside Chromium: nothing of the browser's own goes over the link)
        asked = bed.name_server.queries()
        assert ("A", "plt.test") in asked and ("A", "plt-o1.test") in asked
        assert {name for _, name in asked} <= {h for h, _ in bed.plan.origins}, asked


def test_an_https_record_takes_the_first_visit_to_h3(store, campaign):
    before = system_state()
    _https_rr(store, campaign)
    assert system_state() == before  # the name server and the client's files are gone with the testbed


def _https_rr(store, campaign):
    with testbed.Testbed(testbed.Setup(PROJECT_ROOT / "sites", discovery="https-rr")) as bed:
        bed.sites.ensure([FIRST])
        bed.set_conditions(COND)
        t, reasons = _trial(bed, store, campaign, FIRST)
        if machine_refused(t, reasons):
            return
        assert t.status == "ok", reasons
        mix = _mix(t)
        assert mix["page"] == "h3" and t.server_proto == "HTTP/3.0" and mix["first_h3_ms"] == 0.0, mix
        assert set(mix["per_origin"]) == {"plt.test", "plt-o1.test"} and t.objects_ok == 4
        assert t.dns_ms >= RTT_MS * 0.95, t.dns_ms
        assert ("HTTPS", "plt.test") in bed.name_server.queries()
        etc = NETNS_ETC / bed.plan.client_ns  # the client knows no origin but through the name server
        assert "plt.test" not in (etc / "hosts").read_text()
        assert f"nameserver {bed.plan.server_ip}" in (etc / "resolv.conf").read_text()
