"""plt-bench command line: a thin layer that parses, calls the library and maps errors to exit codes.

Exit codes: 0 success; 1 a failure (failed trials, a broken link, a missing tool); 2 bad input;
130 interrupted (SIGINT or SIGTERM), after cleaning up.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from . import cmd, conditions as cond_mod, topology
from .conditions import DEFAULT_SIZES, PROTO_CHOICES
from .errors import PltBenchError, UsageError
from .link import LINK_CHOICES

DEFAULT_RESULTS = cmd.PROJECT_ROOT / "results" / "plt-bench.sqlite"
SITES = cmd.PROJECT_ROOT / "sites"


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so every cleanup runs as for Ctrl-C."""


def _on_sigterm(signum, frame):
    raise Terminated()


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: same form, exit 2
        self.print_usage(sys.stderr)
        print(f"Error: {message}", file=sys.stderr)
        sys.exit(2)


def _grid_options(p: argparse.ArgumentParser, runs_default: int = 3) -> None:
    g = p.add_argument_group("grid")
    g.add_argument("--proto", default="both", help=f"protocol(s): {', '.join(PROTO_CHOICES)} (default: both)")
    g.add_argument("--bw", default="100mbit",
                   help="downlink rate(s), comma-separated: 500kbit, 100mbit, 1gbit (tc units) or 100Mbps "
                        "(tcconfig, bit/s); 'unshaped' for no limit (default: 100mbit)")
    g.add_argument("--up-bw", default=None, help="uplink rate, if not the same as --bw ('unshaped' for no limit)")
    g.add_argument("--size", default=",".join(DEFAULT_SIZES),
                   help=f"page size(s), comma-separated; 1 KB = 1000 bytes (default: {','.join(DEFAULT_SIZES)})")
    g.add_argument("--runs", default=str(runs_default), help=f"repetitions of every cell (default: {runs_default})")
    _link_options(p)


LINK_HELP = {
    "rtt": "round-trip time(s) added by the link, comma-separated: 50ms, 112ms (split evenly over both directions)",
    "jitter": "jitter(s) per direction, e.g. 10ms: delay +- jitter (uniform, like netem) or sd (normal). Jitter "
              "REORDERS packets, as netem does; --no-reorder keeps them in order",
    "jitter_dist": "jitter distribution: uniform (default, like netem) or normal",
    "loss": "packet loss(es) per direction, comma-separated: 0.1%%, 5%% (Bernoulli per packet)",
    "loss_direction": "where loss applies: both (default), down (server to client) or up",
    "no_reorder": "keep packets in order despite jitter (linkem backend only)",
    "queue": "bottleneck queue in packets, or auto (default: one bandwidth-delay product, at least 64)",
    "cc": "TCP congestion control of client and server: cubic (default), bbr, reno",
    "link": "link backend: auto (default: tcconfig where the kernel has sch_netem, else linkem), tcconfig, linkem",
    "verify": "measure the link (ping, iperf3) before each condition's trials: stop (default) on a link out of "
              "tolerance, warn and go on, or off",
}


def _link_options(p: argparse.ArgumentParser, verify: bool = True) -> None:
    g = p.add_argument_group("link and hosts")
    g.add_argument("--rtt", default=None, help=LINK_HELP["rtt"])
    g.add_argument("--jitter", default=None, help=LINK_HELP["jitter"])
    g.add_argument("--jitter-dist", default="uniform", help=LINK_HELP["jitter_dist"])
    g.add_argument("--loss", default=None, help=LINK_HELP["loss"])
    g.add_argument("--loss-direction", default="both", help=LINK_HELP["loss_direction"])
    g.add_argument("--no-reorder", action="store_true", help=LINK_HELP["no_reorder"])
    g.add_argument("--queue", default=None, help=LINK_HELP["queue"])
    g.add_argument("--cc", default="cubic", help=LINK_HELP["cc"])
    g.add_argument("--link", default="auto", choices=LINK_CHOICES, help=LINK_HELP["link"])
    if verify:
        g.add_argument("--verify", default="stop", choices=cond_mod.VERIFY_CHOICES, help=LINK_HELP["verify"])
    g.add_argument("--testbed", type=int, default=None, metavar="N",
                   help="testbed index 0-255 (names pbN-*, addresses 198.18.N.0/24 and 198.19.N.0/24); default: first free")


def _results_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=str(DEFAULT_RESULTS), help=f"results store (default: {DEFAULT_RESULTS})")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="plt-bench", description="Page-load time of a real Chromium over QUIC (HTTP/3) and TCP "
               "(HTTP/1.1+TLS) through a shaped link, on network namespaces of this machine.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    r = sub.add_parser("run", help="measure a grid of page loads and print a summary table",
                       description="Bring the testbed up, load every page of the grid over each protocol, store every "
                                   "trial, print a summary, take the testbed down.")
    _grid_options(r)
    _results_option(r)
    r.add_argument("--name", default="run", help="campaign name stored with the results")
    r.add_argument("--timeout", default=None, help="page-load timeout per trial, e.g. 60s (default: 3x ideal + 20s)")

    u = sub.add_parser("up", help="bring the testbed up and leave it running for your own tools",
                       description="Create the namespaces, start Caddy, shape the link, print where everything is. "
                                   "Take it down with 'plt-bench down'.")
    u.add_argument("--bw", default="unshaped", help="rate: 100mbit, 1gbit, 100Mbps, or 'unshaped' (default)")
    u.add_argument("--up-bw", default=None, help="uplink rate, if not the same as --bw")
    u.add_argument("--size", default=",".join(DEFAULT_SIZES), help="pages to make sure exist")
    _link_options(u, verify=False)
    u.add_argument("--json", action="store_true", help="print the description as JSON")

    v = sub.add_parser("verify", help="measure the live link (ping, iperf3) and compare it with the configuration",
                       description="Bring a testbed up (no browser), apply each condition, measure RTT, jitter, loss, "
                                   "reordering and rate with real packets, store the figures, and exit 1 if one is "
                                   "out of tolerance.")
    v.add_argument("--bw", default="100mbit", help="rate(s), as for run (default: 100mbit)")
    v.add_argument("--up-bw", default=None, help="uplink rate, if not the same as --bw")
    v.add_argument("--probes", default="500", help="ping probes per condition (default: 500)")
    v.add_argument("--json", action="store_true", help="print the reports as JSON")
    _link_options(v, verify=False)
    _results_option(v)

    d = sub.add_parser("down", help="take down testbeds started with 'up'")
    d.add_argument("--testbed", type=int, default=None, metavar="N", help="only testbed N (default: all started by 'up')")

    c = sub.add_parser("clean", help="remove whatever a killed run left behind (only plt-bench's own); safe to rerun")
    c.add_argument("--force", action="store_true", help="also remove testbeds whose owning run is still alive")

    e = sub.add_parser("export", help="export trials as CSV")
    _results_option(e)
    e.add_argument("--campaign", default="latest", help="campaign number, 'latest' (default) or 'all'")
    e.add_argument("--out", default="-", help="output file (default: standard output)")
    e.add_argument("--nav", action="store_true", help="include the full Navigation Timing entry as JSON")

    s = sub.add_parser("summary", help="print the summary table of a stored campaign")
    _results_option(s)
    s.add_argument("--campaign", default="latest", help="campaign number, 'latest' (default) or 'all'")

    g = sub.add_parser("pages", help="generate (or check) the test pages in sites/")
    g.add_argument("--size", default=",".join(cond_mod.ALL_SIZES), help="sizes (default: all five)")

    b = sub.add_parser("bench", help="benchmark: PLT / payload-only ideal and per-trial overhead",
                       description="Loads the 50MB page at 100mbit over each protocol and prints PLT / ideal and the "
                                   "per-trial overhead (wall time minus PLT). Prints ratios; asserts nothing.")
    b.add_argument("--size", default="50MB")
    b.add_argument("--bw", default="100mbit")
    b.add_argument("--runs", default="3")
    _results_option(b)

    bl = sub.add_parser("bench-link", help="benchmark the emulated link: accuracy and cost as ratios",
                        description="Measures RTT accuracy, jitter, loss, rate at 10/100/1000 Mbit, the emulator's CPU "
                                    "and 1 Gbit with 50 ms RTT on a testbed of its own. Prints ratios; asserts nothing.")
    bl.add_argument("--link", default="auto", choices=LINK_CHOICES, help=LINK_HELP["link"])
    bl.add_argument("--probes", default="1000", help="ping probes for the RTT figure (x3 for jitter and loss)")
    return p


# -- commands ------------------------------------------------------------------------------------
def _grid(a, **override):
    """The grid from the options, with a few of them fixed by the command."""
    for k in ("proto", "size", "runs"):
        setattr(a, k, override.get(k, getattr(a, k, None)))
    a.cc = cond_mod.parse_cc(a.cc)
    grid = cond_mod.grid_from_options(a)
    a.need_no_reorder = any(not c.reorder and c.jitter_ms for c in grid.conditions)
    return grid


def _parse_timeout(text):
    if text is None:
        return None
    from .units import parse_duration_ms
    t = parse_duration_ms(text, "--timeout") / 1000.0
    if t <= 0:
        raise UsageError("--timeout: must be more than 0s")
    return t


def _measure(a, grid, name: str, timeout_s=None) -> int:
    from .metadata import utc_now
    from .runner import grid_dict, run_grid
    from .store import Store
    from .summary import format_table, summarize
    from .testbed import Testbed

    cmd.require_root()
    store = Store(Path(a.results))  # fails before anything is created when the path is unwritable
    status = "failed"
    cid = None
    try:
        with Testbed(SITES, cc=a.cc, link=a.link, index=a.testbed, need_no_reorder=a.need_no_reorder) as bed:
            cid = store.new_campaign(name, utc_now(), grid_dict(grid), bed.metadata())
            print(f"campaign {cid}: {len(grid.cells()) * grid.runs} trials on testbed {bed.plan.prefix} "
                  f"({bed.link.name}); results in {a.results}", flush=True)
            t0 = time.monotonic()

            def progress(t, i, n):
                plt = f"{t.plt_ms:9.1f} ms" if t.plt_ms is not None and t.status == "ok" else "        -   "
                why = f"  {t.reason}" if t.reason else ""
                print(f"[{i:>{len(str(n))}}/{n}] {t.conditions:>9} {t.page:<20} {t.proto:<4} {t.status:<6} {plt}"
                      f"  wall {t.wall_s:5.2f} s{why}", flush=True)

            def verified(report):
                from .verify import format_report
                print(format_report(report), flush=True)

            trials = run_grid(bed, store, cid, grid, progress, timeout_s, verify_mode=a.verify, on_verify=verified)
            status = "finished"
            print(f"\n{len(trials)} trials in {time.monotonic() - t0:.1f} s\n")
    except (KeyboardInterrupt, Terminated):
        status = "interrupted"
        raise
    finally:
        if cid is not None:
            store.finish_campaign(cid, status, utc_now())
    print(format_table(summarize(store.trials([cid]))))
    failed = sum(1 for t in store.trials([cid]) if t["status"] != "ok")
    store.close()
    if failed:
        print(f"\n{failed} trial(s) failed; every attempt is in the store with its reason", file=sys.stderr)
        return 1
    return 0


def cmd_run(a) -> int:
    grid = _grid(a)
    return _measure(a, grid, a.name, _parse_timeout(a.timeout))


def cmd_bench(a) -> int:
    from .conditions import ideal_seconds
    from .store import Store
    for k, v in dict(cc="cubic", link="auto", testbed=None, verify="stop", up_bw=None, rtt=None, jitter=None,
                     loss=None, jitter_dist="uniform", loss_direction="both", no_reorder=False, queue=None).items():
        setattr(a, k, v)
    grid = _grid(a, proto="both")
    rc = _measure(a, grid, "bench")
    with Store(Path(a.results)) as store:
        trials = store.trials(store.resolve_campaign("latest"))
    print("\nbenchmark (targets: PLT/ideal <= 1.07, overhead <= 0.7 s)")
    for proto in grid.protos:
        ok = [t for t in trials if t["proto"] == proto and t["status"] == "ok"]
        if not ok:
            print(f"  {proto}: no successful trial")
            continue
        ratios = sorted(t["plt_ms"] / 1000 / ideal_seconds(t["size_bytes"], t["rate_down_bps"]) for t in ok)
        over = sorted(t["wall_s"] - t["plt_ms"] / 1000 for t in ok)
        mid = len(ok) // 2
        print(f"  {proto}: PLT/ideal median {ratios[mid]:.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f}); "
              f"overhead median {over[mid]:.3f} s (min {over[0]:.3f}, max {over[-1]:.3f}); n={len(ok)}")
    return rc


def cmd_bench_link(a) -> int:
    from . import benchlink
    from .testbed import Testbed
    try:
        probes = int(a.probes)
    except ValueError:
        probes = 0
    if not 100 <= probes <= 100_000:
        raise UsageError(f"--probes: '{a.probes}' is not a whole number from 100 to 100000")
    cmd.require_root()
    with Testbed(SITES, link=a.link, with_browser=False) as bed:
        benchlink.run(bed, lambda line: print(line, flush=True), probes)
    return 0


def cmd_up(a) -> int:
    from .testbed import Testbed
    grid = _grid(a, proto="both", runs=1)
    if len(grid.conditions) != 1:
        raise UsageError("--bw, --rtt, --jitter, --loss: 'up' takes one value of each")
    bed = Testbed(SITES, cc=a.cc, link=a.link, index=a.testbed, persistent=True, with_browser=False,
                  need_no_reorder=a.need_no_reorder)
    with bed:
        bed.sites.ensure(grid.sizes)
        check = bed.set_conditions(grid.conditions[0])
        info = {**bed.plan.describe(), "url": bed.url("index_5KB.html"), "pages": [f"/{p.name}" for p in
                (bed.sites.path(s) for s in grid.sizes)], "spki_sha256": bed.server.cert.spki_sha256_b64,
                "link": check, "run_dir": str(bed.plan.run_dir),
                "chromium_flags": f"--host-resolver-rules='MAP plt.test {bed.plan.server_ip}' "
                                  f"--ignore-certificate-errors-spki-list={bed.server.cert.spki_sha256_b64}"}
        bed.detach()  # success: leave it up
    if a.json:
        print(json.dumps(info, indent=1))
    else:
        n = info["namespaces"]
        print(f"testbed {info['prefix']} is up ({check['conditions']}, {check['backend']})")
        print(f"  client  {n['client']:<14} {info['addresses']['client']}")
        print(f"  router  {n['router']:<14} {info['addresses']['router_client_side']} | {info['addresses']['router_server_side']}")
        print(f"  server  {n['server']:<14} {info['addresses']['server']}  (Caddy: h3 on UDP 443, HTTP/1.1+TLS on TCP 443)")
        print(f"  url     {info['url']}")
        print(f"  try     ip netns exec {n['client']} ping -c 3 {info['addresses']['server']}")
        print(f"          ip netns exec {n['client']} curl -sk --resolve plt.test:443:{info['addresses']['server']} "
              f"-o /dev/null -w '%{{http_version}} %{{time_total}}\\n' {info['url']}")
        print(f"  down    plt-bench down --testbed {info['prefix'][2:]}")
    return 0


def cmd_verify(a) -> int:
    from .metadata import utc_now
    from .runner import grid_dict
    from .store import Store
    from .testbed import Testbed
    from .verify import format_report, verify
    grid = _grid(a, proto="both", size="5KB", runs=1)
    try:
        probes = int(a.probes)
    except ValueError:
        probes = 0
    if not 10 <= probes <= 100_000:
        raise UsageError(f"--probes: '{a.probes}' is not a whole number from 10 to 100000")
    cmd.require_root()
    store = Store(Path(a.results))
    failed = 0
    reports = []
    with Testbed(SITES, cc=a.cc, link=a.link, index=a.testbed, with_browser=False,
                 need_no_reorder=a.need_no_reorder) as bed:
        cid = store.new_campaign("verify", utc_now(), grid_dict(grid), bed.metadata())
        for cond in grid.conditions:
            readback = bed.set_conditions(cond)
            report = verify(bed.plan, cond, probes=probes)
            report["readback"] = readback
            store.add_link_check(cid, cond.label, utc_now(), report)
            reports.append(report)
            failed += not report["ok"]
            if not a.json:
                print(format_report(report), flush=True)
        store.finish_campaign(cid, "finished", utc_now())
    if a.json:
        print(json.dumps(reports, indent=1))
    return 1 if failed else 0


def cmd_down(a) -> int:
    cmd.require_root()
    prefixes = [f"pb{a.testbed}"] if a.testbed is not None else [
        p for p in topology.our_prefixes() if topology.read_state(p).get("persistent")]
    if a.testbed is not None:
        st = topology.read_state(prefixes[0])
        if prefixes[0] not in topology.our_prefixes():
            raise UsageError(f"--testbed: there is no testbed {a.testbed}")
        if topology.owner_alive(st):
            raise UsageError(f"--testbed: testbed {a.testbed} belongs to a running plt-bench (pid {st['owner_pid']}); "
                             "stop that run instead")
    for p in prefixes:
        topology.teardown(p)
        print(f"removed testbed {p}")
    if not prefixes:
        print("no testbed started by 'plt-bench up' is running")
    return 0


def cmd_clean(a) -> int:
    cmd.require_root()
    rep = topology.clean(force=a.force)
    for p in rep["removed"]:
        print(f"removed {p}")
    for p in rep["kept"]:
        print(f"kept {p}: its run is still alive (use --force to remove it anyway)")
    if not rep["removed"] and not rep["kept"]:
        print("nothing of plt-bench's to clean")
    return 0


def cmd_export(a) -> int:
    from .store import Store
    path = Path(a.results)
    if not path.is_file():
        raise UsageError(f"--results: {path} does not exist")
    with Store(path) as store:
        ids = store.resolve_campaign(a.campaign)
        if a.out == "-":
            n = store.export_csv(ids, sys.stdout, a.nav)
        else:
            with open(a.out, "w", newline="") as f:
                n = store.export_csv(ids, f, a.nav)
    print(f"exported {n} trials", file=sys.stderr)
    return 0


def cmd_summary(a) -> int:
    from .store import Store
    from .summary import format_table, summarize
    path = Path(a.results)
    if not path.is_file():
        raise UsageError(f"--results: {path} does not exist")
    with Store(path) as store:
        print(format_table(summarize(store.trials(store.resolve_campaign(a.campaign)))))
    return 0


def cmd_pages(a) -> int:
    from .pages import Sites
    sizes = cond_mod.parse_sizes(a.size)
    for size, path in Sites(SITES).ensure(sizes).items():
        print(f"{path}  {size} bytes")
    return 0


COMMANDS = {"run": cmd_run, "up": cmd_up, "verify": cmd_verify, "down": cmd_down, "clean": cmd_clean, "export": cmd_export,
            "summary": cmd_summary, "pages": cmd_pages, "bench": cmd_bench,
            "bench-link": cmd_bench_link}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except PltBenchError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, Terminated):
        print("\ninterrupted: the testbed was taken down; finished trials are in the store", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
