"""linkem's AF_PACKET bridge (PLT_BENCH_LINKEM_IO=packet), measured against NFQUEUE by bench-link:
with real packets it holds delay, loss and a trace as the NFQUEUE path does, and it fails closed."""
import os
import signal
import time

import pytest

from plt_bench import cmd, testbed
from plt_bench.conditions import Conditions, make_grid
from plt_bench.link import verify


@pytest.fixture(scope="module")
def bridged():
    old = os.environ.get("PLT_BENCH_LINKEM_IO")
    os.environ["PLT_BENCH_LINKEM_IO"] = "packet"
    try:
        with testbed.Testbed(cmd.PROJECT_ROOT / "sites", link="linkem", with_browser=False) as bed:
            assert bed.link.io == "packet" and "AF_PACKET" in bed.link.describe()["link_detail"]
            yield bed
    finally:
        if old is None:
            os.environ.pop("PLT_BENCH_LINKEM_IO")
        else:
            os.environ["PLT_BENCH_LINKEM_IO"] = old


def test_the_bridge_holds_delay_loss_and_a_trace(bridged):
    for cond in (Conditions(20 * 10**6, 20 * 10**6, rtt_ms=40, loss_pct=2),
                 make_grid("h3", "unshaped", "5KB", 1, rtt="30ms", trace_down="gen:onoff:12mbit:300ms:300ms")
                 .conditions[0]):
        check = bridged.set_conditions(cond)
        assert check["io"] == "packet"
        rep = verify.verify(bridged.plan, cond, probes=300, tcp_seconds=2, **bridged.verify_args())
        print(verify.format_report(rep))
        assert rep["ok"], verify.format_report(rep)
    # the TTL falls by one at the bridge, as at the router it replaces
    res = cmd.run(["ping", "-n", "-c", "3", "-i", "0.05", bridged.plan.server_ip], ns=bridged.plan.client_ns,
                  check=False)
    assert " ttl=63 " in res.stdout, res.stdout


def test_a_dead_bridge_stops_traffic_and_lifting_the_conditions_restores_it(bridged):
    bridged.set_conditions(Conditions(None, None, rtt_ms=10))
    os.kill(bridged.link.pid(), signal.SIGKILL)
    time.sleep(0.2)
    assert not bridged.link.alive() and "died" in bridged.link.died_reason()
    res = cmd.run(["ping", "-n", "-c", "5", "-i", "0.05", "-W", "1", bridged.plan.server_ip],
                  ns=bridged.plan.client_ns, check=False)
    assert " 0 received" in res.stdout, res.stdout  # never forwarded unshaped by the kernel
    bridged.set_conditions(Conditions(None, None))  # nothing to emulate: the kernel forwards again
    res = cmd.run(["ping", "-n", "-c", "3", "-i", "0.05", bridged.plan.server_ip], ns=bridged.plan.client_ns,
                  check=False)
    assert " 3 received" in res.stdout, res.stdout
    raw = cmd.run(["iptables", "-w", "-t", "raw", "-S", "PREROUTING"], ns=bridged.plan.router_ns).stdout
    assert "DROP" not in raw
