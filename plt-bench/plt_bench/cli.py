"""plt-bench command line: a thin layer that parses, calls the library and maps errors to exit codes.

Exit codes: 0 success; 1 a failure (failed trials, a broken testbed, a missing tool); 2 bad input;
128 + the signal after cleaning up when a signal ended it: 130 Ctrl-C (SIGINT), 143 SIGTERM, 129 SIGHUP,
131 SIGQUIT (plt_bench.signals).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from . import cmd, conditions as cond_mod, signals, topology
from .control import SERVER_PORT_DEFAULT_CONTROL
from .link import host as hostnet
from .conditions import DEFAULT_SIZES, PROTO_CHOICES
from .errors import PltBenchError, UsageError
from .link import LINK_CHOICES

DEFAULT_RESULTS = cmd.PROJECT_ROOT / "results" / "plt-bench.sqlite"
SITES = cmd.PROJECT_ROOT / "sites"


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: same form, exit 2
        self.print_usage(sys.stderr)
        print(f"Error: {message}", file=sys.stderr)
        sys.exit(2)


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
    "link": "link backend: auto (default: netem where it can run, else linkem), netem (the kernel's; tcconfig "
            "configures it in the router), linkem (userspace); tcconfig is another name for netem",
    "verify": "measure the link (ping, iperf3) before each condition's trials: stop (default) on a link out of "
              "tolerance, warn and go on, or off",
}


def _link_options(p: argparse.ArgumentParser, verify: bool = True, defaults: bool = True) -> None:
    """Link options; without defaults (run) an option left out keeps the campaign's value."""
    d = (lambda v: v) if defaults else (lambda v: None)
    g = p.add_argument_group("link and hosts")
    g.add_argument("--rtt", default=None, help=LINK_HELP["rtt"])
    g.add_argument("--jitter", default=None, help=LINK_HELP["jitter"])
    g.add_argument("--jitter-dist", default=d("uniform"), help=LINK_HELP["jitter_dist"])
    g.add_argument("--loss", default=None, help=LINK_HELP["loss"])
    g.add_argument("--loss-direction", default=d("both"), help=LINK_HELP["loss_direction"])
    g.add_argument("--no-reorder", action="store_true", default=d(False), help=LINK_HELP["no_reorder"])
    g.add_argument("--queue", default=None, help=LINK_HELP["queue"])
    g.add_argument("--cc", default=d("cubic"), help=LINK_HELP["cc"])
    g.add_argument("--link", default=d("auto"), choices=LINK_CHOICES, help=LINK_HELP["link"])
    if verify:
        g.add_argument("--verify", default=d("stop"), choices=cond_mod.VERIFY_CHOICES, help=LINK_HELP["verify"])
    g.add_argument("--testbed", type=topology.testbed_index, default=None, metavar="N",
                   help="testbed index 0-255 (names pbN-*, addresses 198.18.N.0/24 and 198.19.N.0/24); default: first free")


CAPTURE_HELP = {
    "capture": "capture run: 'all', or a comma-separated list of cpu (CPU time series per role), pcap (tcpdump in "
               "the client namespace), keylog (TLS keys: Wireshark decrypts TCP and QUIC), qlog (Caddy's, QUIC "
               "trials), netlog (Chromium's); files go to results/captures/<campaign>/<trial>/",
    "cpu_interval": "CPU sampling interval during every trial (default: 100ms)",
    "capture_limit": "warn when a campaign's capture files would take more than this (default: 2GB)",
}


def _capture_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("CPU and captures")
    g.add_argument("--capture", default=None, metavar="KINDS", help=CAPTURE_HELP["capture"])
    g.add_argument("--cpu-interval", default=None, help=CAPTURE_HELP["cpu_interval"])
    g.add_argument("--capture-limit", default=None, help=CAPTURE_HELP["capture_limit"])


TWO_MACHINE_HELP = {
    "server": "two machines: the server's address, where 'plt-bench serve --addr ADDR' runs (campaign key: server); "
              "this machine is the client",
    "server_pin": "the pin 'plt-bench serve' printed (base64 SHA-256 of its certificate's public key)",
    "server_token": "the control token 'plt-bench serve' printed (64 hex digits); visible to every user of this "
                    "machine in ps: prefer --server-token-file or PLT_BENCH_SERVER_TOKEN",
    "server_token_file": "a file only you can read (mode 0600) holding the token, or serve's --info-file JSON "
                         "(campaign key: server_token_file); or set PLT_BENCH_SERVER_TOKEN",
    "control_port": "the server's control port (default: 4443)",
    "iface": "this machine's interface towards the server: the only one the testbed shapes, and only for the test "
             "traffic (required when the link is shaped; campaign key: iface)",
}


def _two_machine_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("two machines (see 'plt-bench serve')")
    g.add_argument("--server", default=None, metavar="ADDR", help=TWO_MACHINE_HELP["server"])
    g.add_argument("--server-pin", default=None, metavar="PIN", help=TWO_MACHINE_HELP["server_pin"])
    g.add_argument("--server-token", default=None, metavar="TOKEN", help=TWO_MACHINE_HELP["server_token"])
    g.add_argument("--server-token-file", default=None, metavar="FILE", help=TWO_MACHINE_HELP["server_token_file"])
    g.add_argument("--control-port", default=None, metavar="N", help=TWO_MACHINE_HELP["control_port"])
    g.add_argument("--iface", default=None, metavar="IFACE", help=TWO_MACHINE_HELP["iface"])


def _preset_names() -> list[str]:
    from .campaign import presets
    return list(presets())


def _stats_options(p: argparse.ArgumentParser) -> None:
    from .stats import CORRECTIONS, TESTS
    g = p.add_argument_group("statistics")
    g.add_argument("--test", default="welch", choices=TESTS, help="QUIC vs TCP test (default: welch; mannwhitney needs "
                                                                   "more than 5 runs per protocol to survive correction)")
    g.add_argument("--correction", default="holm", choices=CORRECTIONS,
                   help="multiple-comparison correction: holm (default) or bh (Benjamini-Hochberg)")


def _results_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=str(DEFAULT_RESULTS), help=f"results store (default: {DEFAULT_RESULTS})")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="plt-bench", description="Page-load time of a real Chromium over QUIC (HTTP/3) and TCP "
               "(HTTP/1.1+TLS) through a shaped link, on network namespaces of this machine.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    r = sub.add_parser("run", help="run a campaign (a preset or a file): resumable, with progress, report and figures",
                       description="Run a campaign: a built-in preset (" + ", ".join(_preset_names()) + ") or a TOML "
                                   "file; without one, the 'quick' preset. Options given here override the campaign's. "
                                   "A rerun of an unfinished campaign resumes it; finished trials are not repeated. "
                                   "At the end the report and figures are written to results/<name>-<id>/.")
    r.add_argument("campaign", nargs="?", default=None, metavar="CAMPAIGN", help="preset name or campaign file (default: quick)")
    g = r.add_argument_group("overrides of the campaign")
    g.add_argument("--proto", default=None, help=f"protocol(s): {', '.join(PROTO_CHOICES)}")
    g.add_argument("--bw", default=None, help="downlink rate(s): 500kbit, 100mbit, 1gbit (tc) or 100Mbps (tcconfig, "
                                              "bit/s); 'unshaped' for no limit")
    g.add_argument("--up-bw", default=None, help="uplink rate, if not the same as --bw ('unshaped' for no limit)")
    g.add_argument("--size", default=None, help="page size(s), comma-separated; 1 KB = 1000 bytes")
    g.add_argument("--runs", default=None, help="repetitions of every cell")
    _link_options(r, defaults=False)
    _results_option(r)
    r.add_argument("--name", default=None, help="campaign name stored with the results (default: the campaign's)")
    r.add_argument("--new", action="store_true", help="start a new campaign even if an unfinished one can be resumed")
    r.add_argument("--timeout", default=None, help="page-load timeout per trial, e.g. 60s (default: 3x ideal + 20s)")
    _capture_options(r)
    _two_machine_options(r)
    _stats_options(r)

    for cmdname, helptext in (("report", "statistics of a stored campaign: table, Markdown and CSV"),
                              ("plot", "figures of a stored campaign: heatmap, loss, jitter, PLT vs size (PNG, SVG)")):
        x = sub.add_parser(cmdname, help=helptext)
        x.add_argument("campaign", nargs="?", default="latest", metavar="CAMPAIGN",
                       help="a campaign number, 'latest' (default), or a preset/file name (its latest campaign)")
        _results_option(x)
        _stats_options(x)
    sub.add_parser("campaigns", help="list the presets and the campaigns in the results store").add_argument(
        "--results", default=str(DEFAULT_RESULTS), help=f"results store (default: {DEFAULT_RESULTS})")

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

    sv = sub.add_parser("serve", help="two machines: serve the pages from this machine to a client running "
                                      "'plt-bench run --server'",
                        description="Start Caddy on --addr (HTTP/3 on UDP 443, HTTP/1.1+TLS on TCP 443) with a fresh "
                                    "certificate, and the control channel on --addr:--control-port; print the pin and "
                                    "token the client needs, and serve until Ctrl-C or SIGTERM. Changes nothing on this "
                                    "machine's interfaces: with the linkem backend the client shapes the link.")
    sv.add_argument("--addr", required=True, help="this machine's address towards the client, e.g. 10.0.0.1")
    sv.add_argument("--iface", default=None, help="the interface holding --addr; needed only if it carries the "
                                                  "default route (the testbed refuses that one unless named)")
    sv.add_argument("--size", default=",".join(DEFAULT_SIZES), help="pages to serve (generated if missing; default: "
                                                                    f"{','.join(DEFAULT_SIZES)})")
    sv.add_argument("--control-port", default=str(SERVER_PORT_DEFAULT_CONTROL),
                    help=TWO_MACHINE_HELP["control_port"])
    sv.add_argument("--testbed", type=topology.testbed_index, default=None, metavar="N", help="run folder index (default: first free)")
    sv.add_argument("--info-file", default=None, help="also write addr, pin, token and port as JSON to this file (0600)")

    dr = sub.add_parser("doctor", help="what this machine can do (root, netem, NFQUEUE, IFB, Chromium, Caddy, disk...) "
                                       "and what to do about each missing piece")
    dr.add_argument("--json", action="store_true", help="print the checks as JSON")

    d = sub.add_parser("down", help="take down testbeds started with 'up'")
    d.add_argument("--testbed", type=topology.testbed_index, default=None, metavar="N", help="only testbed N (default: all started by 'up')")

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

    bc = sub.add_parser("bench-campaign", help="benchmark: campaign overhead on the pages preset at >= 10 Mbit, one run",
                        description="Runs the pages preset restricted to 10, 50, 100, 500 and 1000 Mbit with one run and "
                                    "prints wall time against the sum of PLTs: the overhead per trial, with and without "
                                    "the link verification. Prints ratios; asserts nothing.")
    _results_option(bc)

    bs = sub.add_parser("bench-sampler", help="benchmark: the CPU sampler's own cost, in %% of one core",
                        description="Loads the 50MB page at 100mbit over each protocol with the CPU time series on, "
                                    "and prints the samplers' own CPU time over the time they ran (target: at most 1%% "
                                    "of one core at 100 ms). Prints ratios; asserts nothing.")
    bs.add_argument("--runs", default="3")
    bs.add_argument("--cpu-interval", default="100ms", help=CAPTURE_HELP["cpu_interval"])
    _results_option(bs)

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
    return grid


def _whole(text: str, option: str, lo: int, hi: int) -> int:
    try:
        n = int(text)
    except ValueError:
        n = lo - 1
    if not lo <= n <= hi:
        raise UsageError(f"{option}: '{text}' is not a whole number from {lo} to {hi}")
    return n


def _parse_timeout(text):
    if text is None:
        return None
    from .units import parse_duration_ms
    t = parse_duration_ms(text, "--timeout") / 1000.0
    if t <= 0:
        raise UsageError("--timeout: must be more than 0s")
    return t


RUN_OVERRIDES = ("proto", "bw", "up_bw", "size", "runs", "rtt", "jitter", "loss", "jitter_dist", "loss_direction",
                 "queue", "cc", "link", "verify", "name", "capture", "cpu_interval", "capture_limit", "server", "iface",
                 "server_token_file")


def _testbed(a, spec, capture):
    """The embedded testbed, or the client's side of two machines when the campaign names a server."""
    from .remote import make_ref
    from .testbed import RemoteTestbed, Testbed
    from .remote import TOKEN_ARGV_WARNING
    ref = make_ref(spec.server, getattr(a, "server_pin", None), getattr(a, "server_token", None),
                   getattr(a, "control_port", None), spec.iface, spec.server_token_file)
    if ref is not None and ref.token_source == "argv":
        print(TOKEN_ARGV_WARNING, file=sys.stderr, flush=True)
    if ref is None:
        return Testbed(SITES, cc=spec.cc, link=spec.link, index=a.testbed, conditions=spec.grid.conditions,
                       capture=capture)
    bed = RemoteTestbed(ref, spec.iface, list(spec.grid.conditions), link=spec.link, index=a.testbed, capture=capture,
                        cc=spec.cc)
    bed.check()
    return bed


def _run_campaign(a, spec, timeout_s=None) -> int:
    """Everything is checked before anything is made: the options, the two-machine refs, the store's
    path and schema, the disk space. The store is created only once the testbed is up, so a refusal
    (a wrong pin, a link that cannot be built) leaves no file behind; a refused resume leaves the
    old campaign's status as it was."""
    from . import campaign, report
    from .metadata import utc_now
    from .store import Store, check_writable

    from .capture import Settings, captures_root, check_space
    cmd.require_root()
    capture = Settings(spec.capture, captures_root(a.results), spec.cpu_interval_s, spec.capture_limit_bytes)
    bed = _testbed(a, spec, capture)  # bad two-machine options fail here, before anything is made
    check_writable(Path(a.results))
    need, warning = check_space(spec.capture, [(p, s) for _, _, s, p in spec.plan()], capture.root,
                                spec.capture_limit_bytes)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    status = "failed"
    counts = {"failed": 0}
    store = cid = None
    try:
        with bed:
            bed.sites.ensure(spec.grid.sizes)  # two machines: a page the server lacks is refused here, storeless
            store = Store(Path(a.results))
            from . import procs
            for gone in store.mark_abandoned(procs.owner_alive):
                print(f"note: campaign {gone} was left 'running' by a run that is gone (killed); marked interrupted",
                      file=sys.stderr, flush=True)
            meta = {**bed.metadata(), "owner": procs.me()}
            resume = None if getattr(a, "new", False) else store.resumable(spec.name, spec.spec_hash)
            if resume is not None:
                old = store.campaign(resume)["metadata"]
                diff = campaign.key_metadata_diff(old, meta)
                if diff:
                    raise UsageError(f"CAMPAIGN: campaign {resume} ({spec.name}) cannot be resumed here, its trials would "
                                     f"not be comparable: {'; '.join(diff)}. Run with --new to start a new campaign")
                old.setdefault("sessions", []).append({"utc": utc_now(), "loadavg": meta["loadavg"],
                                                       "git_commit": meta["git_commit"]})
                old["owner"] = meta["owner"]
                store.update_metadata(resume, old)
                store.reopen_campaign(resume)
                cid = resume
            else:
                stale = store.unfinished_named(spec.name)
                cid = store.new_campaign(spec.name, utc_now(), spec.as_dict(), meta, spec.spec_hash)
                if stale:
                    print(f"note: campaign(s) {', '.join(map(str, stale))} named '{spec.name}' are unfinished with "
                          f"another definition (runs, sizes, link...) and stay as they are; this is campaign {cid}. "
                          "Rerun with their exact options to resume one", file=sys.stderr, flush=True)
            n = len(spec.plan())
            print(f"campaign {cid} '{spec.name}': {spec.description or spec.source}\n"
                  f"{n} trials ({len(spec.grid.conditions)} condition(s) x {len(spec.grid.sizes)} size(s) x "
                  f"{len(spec.grid.protos)} protocol(s) x {spec.grid.runs} run(s)) on testbed {bed.plan.prefix}, "
                  f"link {bed.link.backend} ({bed.link.tool}, {bed.link.placement}); results in {a.results}", flush=True)
            if spec.server:
                print(f"two machines: server {spec.server} ({bed.hello.get('host')}), this machine's {bed.plan.iface} "
                      f"shaped at its {bed.link.detail}", flush=True)
            if spec.capture:
                print(f"capture: {', '.join(spec.capture)}, CPU every {spec.cpu_interval_s * 1000:.0f} ms"
                      + (f"; files (about {need / 1e6:,.0f} MB) in {capture.root}/{cid}/" if need else ""), flush=True)
            t0 = time.monotonic()
            counts = campaign.run(bed, store, spec, cid, lambda line: print(line, flush=True), timeout_s)
            status = "finished"
            print(f"\n{counts['ok']} ok, {counts['failed']} failed, {counts['retried']} retried in "
                  f"{time.monotonic() - t0:.1f} s\n")
    except (KeyboardInterrupt, signals.Interrupted):
        status = "interrupted"
        if cid is not None:
            print(f"\ninterrupted: campaign {cid} keeps every finished trial; run the same command again to resume",
                  file=sys.stderr)
        raise
    except PltBenchError:
        if cid is not None:
            print(f"campaign {cid} stopped; it keeps every finished trial: run the same command again to resume",
                  file=sys.stderr)
        raise
    finally:
        if cid is not None:
            store.finish_campaign(cid, status, utc_now())
        if store is not None and status != "finished":
            store.close()
    rep = report.build(store, [cid], a.test, a.correction)
    print(report.format_text(rep))
    directory = report.out_dir(Path(a.results), spec.name, cid)
    from . import plots
    files = _write_files(lambda: report.write(rep, directory) + plots.draw_all(
        rep["rows"], rep["cells"], rep["metadata"], directory, f"{spec.name} #{cid}", rep["cpu_series"],
        rep["cpu_per_mb"]), directory)
    print(f"\nreport and figures: {directory}/ ({', '.join(p.name for p in files)})")
    store.close()
    if counts["failed"]:
        print(f"{counts['failed']} trial(s) failed every attempt; each attempt is in the store with its reason",
              file=sys.stderr)
        return 1
    return 0


def cmd_run(a) -> int:
    from . import campaign
    overrides = {k: getattr(a, k, None) for k in RUN_OVERRIDES}
    overrides["no_reorder"] = a.no_reorder or None
    spec = campaign.load(a.campaign or "quick", overrides)
    if a.name:
        spec = dataclasses.replace(spec, name=a.name)
    return _run_campaign(a, spec, _parse_timeout(a.timeout))


def cmd_bench(a) -> int:
    from . import campaign
    from .conditions import ideal_seconds
    from .store import Store
    spec = campaign.load("quick", {"size": a.size, "bw": a.bw, "runs": a.runs, "proto": "both"})
    spec = dataclasses.replace(spec, name="bench")
    a.testbed, a.new, a.test, a.correction = None, True, "welch", "holm"
    rc = _run_campaign(a, spec)
    with Store(Path(a.results)) as store:
        trials = store.trials(store.resolve_campaign("latest"))
    print("\nbenchmark (targets: PLT/ideal <= 1.07, overhead <= 0.7 s)")
    for proto in spec.grid.protos:
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


def cmd_bench_sampler(a) -> int:
    from . import campaign
    from .store import Store
    spec = campaign.load("quick", {"size": "50MB", "bw": "100mbit", "runs": a.runs, "proto": "both",
                                   "capture": "cpu", "cpu_interval": a.cpu_interval, "name": "bench-sampler"})
    a.testbed, a.new, a.test, a.correction = None, True, "welch", "holm"
    rc = _run_campaign(a, spec)
    with Store(Path(a.results)) as store:
        trials = store.trials(store.resolve_campaign("latest"))
    print(f"\nsampler benchmark (interval {spec.cpu_interval_s * 1000:.0f} ms; target: at most 1% of one core)")
    for side in ("sampler", "server_sampler"):
        own = window = ticks = 0.0
        for t in trials:
            info = json.loads(t["cpu_json"] or "{}").get(side) or {}
            own += info.get("own_cpu_s", 0.0)
            window += info.get("window_s", 0.0)
            ticks += info.get("samples", 0)
        name = "browser tree (worker)" if side == "sampler" else "Caddy + linkem (runner)"
        if window:
            print(f"  {name}: {own:.3f} s of CPU over {window:.1f} s sampled, {ticks:.0f} samples: "
                  f"{100 * own / window:.2f}% of one core (ratio to target {100 * own / window:.2f}), "
                  f"{1e6 * own / max(ticks, 1):.0f} us per sample")
        else:
            print(f"  {name}: no sampler figures in the trials")
    return rc


def cmd_bench_campaign(a) -> int:
    from . import campaign
    from .store import Store
    spec = campaign.load("pages", {"bw": "10mbit,50mbit,100mbit,500mbit,1gbit", "runs": "1", "name": "bench-campaign"})
    a.testbed, a.new, a.test, a.correction = None, True, "welch", "holm"
    t0 = time.monotonic()
    rc = _run_campaign(a, spec)
    wall = time.monotonic() - t0
    with Store(Path(a.results)) as store:
        cid = store.resolve_campaign("latest")[0]
        trials = store.trials([cid])
        verify_s = sum(c["result"].get("verify", {}).get("seconds", 0) for c in store.link_checks(cid))
    plt_s = sum(t["plt_ms"] / 1000 for t in trials if t["plt_ms"])
    n = len(trials)
    print(f"\ncampaign benchmark ({n} trials; target: under 0.7 s of overhead per trial)")
    print(f"  wall {wall:.1f} s, sum of PLTs {plt_s:.1f} s, link verification {verify_s:.1f} s")
    print(f"  overhead per trial: {(wall - plt_s - verify_s) / n:.3f} s without verification "
          f"(ratio to target {(wall - plt_s - verify_s) / n / 0.7:.2f}), {(wall - plt_s) / n:.3f} s with it")
    return rc


def _reader(results: str):
    """A results store that must exist already, opened for reading only (an archived, read-only
    store reads as well as a live one)."""
    from .store import Store
    return Store(Path(results), read_only=True)


def _write_files(write, directory: Path) -> list[Path]:
    """Report or figure files, or a message naming the folder that cannot take them."""
    from .errors import PltBenchError
    try:
        return write()
    except OSError as e:
        raise PltBenchError(f"the report files could not be written to {directory}: {e.strerror or e}") from None


def _stored_campaign(store, spec_text: str) -> list[int]:
    """A campaign number, 'latest', 'all', or a preset/file name (its latest campaign)."""
    from . import campaign
    if spec_text in ("latest", "all") or spec_text.isdigit():
        return store.resolve_campaign(spec_text)
    name = campaign.load(spec_text).name
    cid = store.latest_named(name)
    if cid is None:
        raise UsageError(f"CAMPAIGN: no campaign named '{name}' in {store.path}")
    return [cid]


def cmd_report(a) -> int:
    from . import report
    with _reader(a.results) as store:
        ids = _stored_campaign(store, a.campaign)
        rep = report.build(store, ids, a.test, a.correction)
        print(report.format_text(rep))
        c = store.campaign(ids[-1])
        directory = report.out_dir(store.path, c["name"], ids[-1])
        files = _write_files(lambda: report.write(rep, directory), directory)
    print(f"\nwritten: {', '.join(str(f) for f in files)}")
    return 0


def cmd_plot(a) -> int:
    from . import plots, report
    with _reader(a.results) as store:
        ids = _stored_campaign(store, a.campaign)
        rep = report.build(store, ids, a.test, a.correction)
        c = store.campaign(ids[-1])
        directory = report.out_dir(store.path, c["name"], ids[-1])
        files = _write_files(lambda: plots.draw_all(rep["rows"], rep["cells"], rep["metadata"], directory,
                                                    f"{c['name']} #{ids[-1]}", rep["cpu_series"], rep["cpu_per_mb"]),
                             directory)
    if not files:
        print("nothing to draw: the campaign has no QUIC/TCP pair with successful trials")
        return 1
    for f in files:
        print(f)
    return 0


def cmd_campaigns(a) -> int:
    from . import campaign
    from .store import Store
    print("presets (campaigns/*.toml; copy one and edit it):")
    for name, path in campaign.presets().items():
        spec = campaign.load(name)
        print(f"  {name:<10} {len(spec.plan()):>5} trials  {spec.description}")
    path = Path(a.results)
    if path.is_file():
        with Store(path, read_only=True) as store:
            print(f"\ncampaigns in {path}:")
            for cid in store.campaign_ids():
                c = store.campaign(cid)
                n = len(store.trials([cid]))
                print(f"  {cid:>4}  {c['name']:<12} {c['status']:<12} {n:>5} trials  started {c['started_utc']}")
    return 0


def cmd_bench_link(a) -> int:
    from .link import bench as benchlink
    from .testbed import Testbed
    probes = _whole(a.probes, "--probes", 100, 100_000)
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
                  conditions=grid.conditions)
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
    from .link.verify import format_report, verify
    grid = _grid(a, proto="both", size="5KB", runs=1)
    probes = _whole(a.probes, "--probes", 10, 100_000)
    cmd.require_root()
    store = Store(Path(a.results))
    failed = 0
    reports = []
    with Testbed(SITES, cc=a.cc, link=a.link, index=a.testbed, with_browser=False,
                 conditions=grid.conditions) as bed:
        cid = store.new_campaign("verify", utc_now(), grid_dict(grid), bed.metadata())
        for cond in grid.conditions:
            readback = bed.set_conditions(cond)
            report = verify(bed.plan, cond, probes=probes, **bed.verify_args())
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
        p for p in topology.our_prefixes() if topology.read_state(p).get("up")]
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


def cmd_serve(a) -> int:
    from .remote import ServeSession, parse_port, write_private
    addr = hostnet.parse_ipv4(a.addr, "--addr")
    if a.iface is not None:
        hostnet.require_iface(a.iface)
    sizes = cond_mod.parse_sizes(a.size)
    port = parse_port(a.control_port)
    if a.info_file is not None:
        info_path = Path(a.info_file)
        if info_path.is_dir() or not info_path.parent.is_dir():
            raise UsageError(f"--info-file: {info_path} is a folder; expected a file path" if info_path.is_dir() else
                             f"--info-file: the folder {info_path.parent} does not exist")
    cmd.require_root()
    session = ServeSession(addr, a.iface, SITES, sizes, port, a.testbed)
    try:
        info = session.open()
        if a.info_file:
            write_private(Path(a.info_file), json.dumps(info, indent=1) + "\n")
        print(f"serving {len(info['pages'])} page(s) from {SITES} on https://{addr}:443 (HTTP/3 on UDP, HTTP/1.1+TLS "
              f"on TCP), control channel on {addr}:{port}\n"
              f"pin:   {info['pin']}\ntoken: {info['token']}\n"
              f"(also in {info['run_dir']}/server.json, mode 0600)\n\n"
              f"on the client, with the token in a file only you can read (or in PLT_BENCH_SERVER_TOKEN):\n"
              f"  plt-bench run --iface <its interface towards {addr}> --server {addr} --server-pin {info['pin']} "
              f"--server-token-file <FILE>\n\n"
              "Ctrl-C stops the server and removes everything it made.", flush=True)
        while True:
            time.sleep(3600)
    except (KeyboardInterrupt, signals.Interrupted):  # the normal way to stop serving
        session.close()
        print("stopped: Caddy, the control channel and the run folder are gone", flush=True)
        return 0
    finally:
        session.close()


def cmd_doctor(a) -> int:
    from . import doctor
    checks = doctor.run_checks(SITES, list(cond_mod.parse_sizes(",".join(cond_mod.ALL_SIZES))))
    if a.json:
        print(json.dumps([dataclasses.asdict(c) for c in checks], indent=1))
    else:
        print(doctor.format_checks(checks))
    return 1 if any(c.essential and c.status == "missing" for c in checks) else 0


def cmd_clean(a) -> int:
    cmd.require_root()
    rep = topology.clean(force=a.force)
    for p in rep["removed"]:
        print(f"removed {p}")
    for p in rep["kept"]:
        print(f"kept {p}: its run is still alive (use --force to remove it anyway)")
    for p in rep["up"]:
        print(f"kept {p}: brought up by 'plt-bench up' (take it down with 'plt-bench down --testbed {p[2:]}')")
    if not rep["removed"] and not rep["kept"] and not rep["up"]:
        print("nothing of plt-bench's to clean")
    return 0


def cmd_export(a) -> int:
    out = None if a.out == "-" else Path(a.out)
    if out is not None and (out.is_dir() or not out.parent.is_dir()):
        raise UsageError(f"--out: {out} is a folder; expected a file path" if out.is_dir() else
                         f"--out: the folder {out.parent} does not exist")
    with _reader(a.results) as store:
        ids = store.resolve_campaign(a.campaign)
        if out is None:
            n = store.export_csv(ids, sys.stdout, a.nav)
        else:
            try:
                with open(out, "w", newline="") as f:
                    n = store.export_csv(ids, f, a.nav)
            except OSError as e:
                raise UsageError(f"--out: cannot write {out}: {e.strerror or e}") from None
    print(f"exported {n} trials", file=sys.stderr)
    return 0


def cmd_summary(a) -> int:
    from .summary import format_table, summarize
    with _reader(a.results) as store:
        print(format_table(summarize(store.trials(store.resolve_campaign(a.campaign)))))
    return 0


def cmd_pages(a) -> int:
    from .pages import Sites
    sizes = cond_mod.parse_sizes(a.size)
    for size, path in Sites(SITES).ensure(sizes).items():
        print(f"{path}  {size} bytes")
    return 0


COMMANDS = {"run": cmd_run, "report": cmd_report, "plot": cmd_plot, "campaigns": cmd_campaigns, "up": cmd_up,
            "verify": cmd_verify, "doctor": cmd_doctor, "serve": cmd_serve, "down": cmd_down, "clean": cmd_clean, "export": cmd_export,
            "summary": cmd_summary, "pages": cmd_pages, "bench": cmd_bench,
            "bench-link": cmd_bench_link, "bench-sampler": cmd_bench_sampler, "bench-campaign": cmd_bench_campaign}


def main(argv: list[str] | None = None) -> int:
    signals.install()  # first: a signal while the parser loads its modules is an ending like any other
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except PltBenchError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, signals.Interrupted) as e:
        print("\ninterrupted: the testbed was taken down; finished trials are in the store", file=sys.stderr)
        return e.exit_code if isinstance(e, signals.Interrupted) else 130


if __name__ == "__main__":
    sys.exit(main())
