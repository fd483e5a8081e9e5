"""plt-bench command line: parses (options declared in plt_bench.options), calls the library, prints,
and turns exceptions into messages and exit codes.

Exit codes: 0 success; 1 a failure (failed trials, a broken testbed, a missing tool); 2 bad input;
128 + the signal after cleaning up when a signal ended it: 130 Ctrl-C (SIGINT), 143 SIGTERM, 129 SIGHUP,
131 SIGQUIT (plt_bench.signals).

Imports inside functions: start-up time. Each subcommand imports what it runs when it runs: the CLI
itself imports in 0.2-0.3 s here, the session, the recorder, the benchmarks, the cluster (Dask) and
the report's figures (matplotlib) together in 3.5-3.7 s, which `plt-bench --help`, `doctor` or
`clean` would otherwise pay.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from . import campaign, cmd, options, signals, topology
from .conditions import ALL_SIZES, DEFAULT_SIZES
from .errors import PltBenchError, UsageError
from .options import MEASUREMENT, REACH
from .pages.base import page_url
from .pages.base import DEFAULT_SITES as SITES  # the one place it is said (PLT_BENCH_SITES or the project's)

LINK = ("rtt", "jitter", "jitter_dist", "loss", "loss_direction", "no_reorder", "queue", "aqm", "ecn", "cross", "origin_rtt",
        "trace_down",
        "trace_up", "cc", "link")
TWO = ("server_machine", "server_pin", "server_token", "server_token_file", "control_port", "iface")


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # no abbreviations: '--browser firefox' was taken as '--browser-binary firefox', and a new option
        # could shadow an old one's prefix; an unknown option is refused by name
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):  # argparse's own errors: same form, exit 2
        self.print_usage(sys.stderr)
        print(f"Error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    add, index = options.add_argparse, {"testbed": topology.testbed_index}
    p = Parser(prog="plt-bench", description="Page-load time of a real Chromium over QUIC (HTTP/3) and TCP "
               "(HTTP/1.1+TLS) through a shaped link, on network namespaces of this machine.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    def cmd_parser(name, text, description=None):
        return sub.add_parser(name, help=text, description=description or text)

    r = cmd_parser("run", "run a campaign (a preset or a file): resumable, with progress, report and figures",
                   "Run a campaign: a built-in preset (" + ", ".join(campaign.presets()) + ") or a TOML file; without "
                   "one, the 'quick' preset. Options given here override the campaign's. A rerun of an unfinished "
                   "campaign resumes it; finished trials are not repeated. At the end the report and figures are "
                   "written to results/<name>-<id>/.")
    r.add_argument("campaign", nargs="?", default=None, metavar="CAMPAIGN", help=options.option("campaign").help
                   + f" (default: {campaign.DEFAULTS['campaign']})")
    add(r, *[k for k in MEASUREMENT if k not in TWO and k != "campaign"], "testbed", "results", "new", "timeout",
        *TWO, "cluster", "tls", "test", "correction", "no_report", types=index)
    w = cmd_parser("worker", "join a Dask cluster as a measuring host: one cell at a time on this machine's testbed")
    add(w, "scheduler", "testbed", "cpus", "share_cores", "listen", "tls", "server_machine", "server_pin", "server_token",
        "server_token_file", "control_port", "iface", types=index,
        helps={"testbed": "this worker's testbed index (default: 0)",
               "server_machine": "a server machine of this worker's own, where 'plt-bench serve --addr ADDR' runs: every "
                         "cell this worker measures is served from there (two machines)"})
    ct = cmd_parser("cluster-tls", "make a cluster's TLS files (a CA and a node certificate) in a new folder",
                    "Make DIR (new, 0700) with ca.pem, node.pem and node.key (ECDSA P-256, one year) and ca.key, the "
                    "CA's key to keep apart. Copy ca.pem, node.pem and node.key to every machine of the cluster; start "
                    "the scheduler with 'dask scheduler --host ADDR --protocol tls --tls-ca-file DIR/ca.pem --tls-cert "
                    "DIR/node.pem --tls-key DIR/node.key', the workers and the head with --tls DIR and tls://ADDR:PORT.")
    ct.add_argument("dir", metavar="DIR", help="a new folder for the files")
    for name, text in (("report", "statistics of a stored campaign: table, Markdown, CSV, figures and report.html"),
                       ("plot", "figures of a stored campaign: heatmap, loss, jitter, PLT vs size (PNG, SVG)")):
        x = cmd_parser(name, text)
        x.add_argument("campaign", nargs="?", default="latest", metavar="CAMPAIGN",
                       help="a campaign number, 'latest' (default), or a preset/file name (its latest campaign)")
        add(x, "results", "test", "correction", "reference", "compare", "metric")
    add(cmd_parser("campaigns", "list the presets and the campaigns in the results store"), "results")
    u = cmd_parser("up", "bring the testbed up and leave it running for your own tools",
                   "Create the namespaces, start Caddy, shape the link, print where everything is. Take it down with "
                   "'plt-bench down'.")
    add(u, "bw", "up_bw", "size", *LINK, "testbed", "json", defaults={"bw": "unshaped", "size": ",".join(DEFAULT_SIZES)},
        types=index)
    u.set_defaults(bw=None)  # unshaped unless a downlink trace gives the rate (cmd_up): a default is no --bw given
    rc = cmd_parser("record", "record pages as they are served (every body, header, origin) into archives to replay",
                    "Load each URL once in Chromium with a fresh profile and keep what it fetched: a HAR 1.2 with every "
                    "body, made into the archive NAME (several URLs: NAME-1, NAME-2, ...), to measure as --size "
                    "har:NAME. Without --folder, from the web as this machine reaches it. With --folder HOST=DIR (once "
                    "per host), a testbed serves each folder as it is under its host names and the page is recorded "
                    "through its link (--bw, --rtt; unshaped by default). HOST@PROTO=DIR (h3, h2 or h1): that host's "
                    "server offers that protocol alone, as a site that speaks one would; the recording keeps what each "
                    "origin spoke, for --proto as-recorded.")
    rc.add_argument("urls", nargs="+", metavar="URL", help="https URLs of the pages to record")
    rc.add_argument("--name", required=True, help="the archive's name (a-z, 0-9, _ and -)")
    rc.add_argument("--folder", "--serve", dest="folder", action="append", metavar="HOST[@PROTO]=DIR",
                    help="serve DIR as it is under HOST in a testbed (over PROTO alone: h3, h2 or h1) and record from "
                         "there (repeat for more hosts)")
    add(rc, "bw", "up_bw", *LINK, "think", "testbed", types=index, defaults={"bw": "unshaped"})
    v = cmd_parser("verify", "measure the live link (ping, iperf3) and compare it with the configuration",
                   "Bring a testbed up (no browser), apply each condition, measure RTT, jitter, loss, reordering and "
                   "rate with real packets, store the figures, and exit 1 if one is out of tolerance.")
    add(v, "bw", "up_bw", "probes", *LINK, "testbed", "results", "json", defaults={"probes": "500"}, types=index)
    sv = cmd_parser("serve", "two machines: serve the pages to a client running 'plt-bench run --server-machine'",
                    "Start Caddy on --addr (HTTP/3 on UDP 443, HTTP/1.1+TLS on TCP 443) with a fresh certificate and the "
                    "control channel; print the pin and token the client needs; serve until Ctrl-C or SIGTERM.")
    sv.add_argument("--addr", required=True, help="this machine's address towards the client, e.g. 10.0.0.1")
    sv.add_argument("--info-file", default=None, help="also write addr, pin, token and port as JSON to this file (0600)")
    from .control import SERVER_PORT_DEFAULT_CONTROL
    sv.add_argument("--http-server", default=None, metavar="NAMES",
                    help="the servers to serve with, comma-separated: caddy (default), quinn, or caddy,quinn (one at "
                         "a time, the client switching between them for a campaign's --http-server caddy,quinn)")
    sv.add_argument("--folder", "--serve", dest="folder", action="append", metavar="HOST=DIR",
                    help="also serve DIR as it is under HOST (repeat for more hosts): a client's --size "
                         f"url:{page_url('HOST', '/PATH')} loads its pages from this machine")
    sv.add_argument("--qlog", action="store_true",
                    help="Caddy writes each QUIC connection's qlog (a client's --capture qlog takes its trials'; the "
                         "others stay in the run folder until serve ends)")
    add(sv, "iface", "size", "control_port", "testbed", types=index,
        defaults={"size": ",".join(DEFAULT_SIZES), "control_port": str(SERVER_PORT_DEFAULT_CONTROL)},
        helps={"iface": "the interface holding --addr; needed only if it carries the default route (the testbed "
                        "refuses that one unless named)", "size": "pages to serve (generated if missing)",
               "testbed": "run folder index (default: first free)"})
    add(cmd_parser("doctor", "what this machine can do (root, netem, NFQUEUE, IFB, Chromium, Caddy, disk...) and "
                             "what to do about each missing piece"), "json")
    add(cmd_parser("down", "take down testbeds started with 'up'"), "testbed", types=index,
        helps={"testbed": "only testbed N (default: all started by 'up')"})
    c = cmd_parser("clean", "remove whatever a killed run left behind (only plt-bench's own); safe to rerun")
    c.add_argument("--force", action="store_true", help="also remove testbeds whose owning run is still alive")
    add(c, "testbed", types=index, helps={"testbed": "only testbed N: its namespaces, run folder, processes and "
                                                     "worker claim (default: every abandoned one, and half-made page "
                                                     "sets whose maker was killed)"})
    for name, text in (("export", "export trials as CSV"), ("summary", "print the summary table of a stored campaign")):
        x = cmd_parser(name, text)
        add(x, "results")
        x.add_argument("--campaign", default="latest", help="campaign number, 'latest' (default) or 'all'")
        if name == "export":
            x.add_argument("--out", default="-", help="output file (default: standard output)")
            x.add_argument("--nav", action="store_true", help="include the full Navigation Timing entry as JSON")
    pg = cmd_parser("pages", "generate (or check) the test pages in sites/; or make a page set from a recorded page",
                    "Generate (or check) the test pages in sites/. With --from-har FILE NAME: make the archive NAME "
                    "of a recorded page (a HAR 1.2 file with bodies: Chromium's DevTools, browsertime, WebPageTest, "
                    "or plt-bench's own --capture har): every request with its recorded status, headers and body "
                    "bytes, and the protocol each origin spoke; measure it with --size har:NAME, replayed as "
                    "recorded on its own host names. --stand-in makes instead a page of plt-bench's own HTML with "
                    "objects of the recorded sizes and types (the page's weight, not the page).")
    add(pg, "size", defaults={"size": ",".join(ALL_SIZES)})
    pg.add_argument("--from-har", metavar="FILE", help="a recorded page (HAR 1.2) to make an archive of")
    pg.add_argument("--stand-in", action="store_true",
                    help="with --from-har: a same-weight stand-in of plt-bench's own HTML instead of the recording")
    pg.add_argument("name", nargs="?", metavar="NAME", help="the page set's name, with --from-har (a-z, 0-9, _ and -)")
    tr = cmd_parser("trace", "make a link trace from a rate series (CSV of time s, Mbit/s) or a gen: description, "
                             "or describe one",
                    "Link traces in Mahimahi's format (--trace-down/--trace-up): one whole number of milliseconds "
                    "per line, each a 1500-byte delivery opportunity, looping with the last timestamp as the period. "
                    "SOURCE is a CSV rate series (rows time_s,mbit; each rate holds until the next row's time, the "
                    "last for as long as the step before it), a gen: description (gen:constant:12mbit, "
                    "gen:onoff:24mbit:500ms:500ms, gen:ramp:2mbit:24mbit:10s) or a trace file. Prints its period, "
                    "mean and peak rate and SHA-256; with OUT, writes the trace there (never over a file).")
    tr.add_argument("source", metavar="SOURCE", help="a rates .csv, a gen: description, or a trace file")
    tr.add_argument("out", nargs="?", metavar="OUT", help="where to write the trace (from a .csv or gen:)")
    add(cmd_parser("bench", "benchmark: PLT / ideal and per-trial overhead (prints ratios)"),
        "size", "bw", "runs", "results", defaults={"size": "50MB", "bw": "100mbit", "runs": "3"})
    add(cmd_parser("bench-campaign", "benchmark: overhead per trial of the pages preset, one run (prints ratios)"),
        "bw", "size", "results", defaults={"bw": "10mbit,50mbit,100mbit,500mbit,1gbit"})
    add(cmd_parser("bench-sampler", "benchmark: the CPU samplers' own cost, in %% of one core (prints ratios)"),
        "size", "runs", "cpu_interval", "results",
        defaults={"size": "50MB", "runs": "3", "cpu_interval": "100ms"})
    lit = cmd_parser("bench-literature", "benchmark: h2 vs h3 beside the literature (network: Zhang et al. at 1 "
                                         "Gbit/s, Yu & Benson's page under loss; cpu: Zhang's Fig. 7 across CPU "
                                         "budgets, Kakhki's phone; fairness: one download against competing TCP "
                                         "flows under droptail and FQ-CoDel, Kakhki's QUIC share): our figures and "
                                         "theirs")
    lit.add_argument("--entries", default="network,cpu", metavar="NAMES",
                     help="which entries, comma-separated: network, cpu, fairness, corpus (the real pages beside "
                          "Zhang's Fig. 11; with --runs 3 about 20 minutes) (default: network,cpu)")
    add(lit, "runs", "results", defaults={"runs": "10"})
    rep = cmd_parser("bench-replay", "benchmark: each real page (plt_bench.pages.real) recorded, then replayed and "
                                     "loaded live through the same link: the replay's TTFB, FCP, LCP and PLT beside the "
                                     "live page's, per browser (--origin-rtt: the live side's origins at their own "
                                     "distances, --think: its servers thinking; replayed with the recorded timing and "
                                     "without)")
    rep.add_argument("--pages", default="swagger,toolbelt", metavar="NAMES",
                     help="which real pages, comma-separated, or * for the whole corpus (default: swagger,toolbelt)")
    add(rep, "runs", "bw", "rtt", "browser", "origin_rtt", "think", "results",
        defaults={"runs": "5", "bw": "10mbit", "rtt": "100ms"})
    add(cmd_parser("bench-device", "benchmark the CPU budget: per browser and budget, the page loop's slowdown "
                                   "against the budget's factor (prints ratios)"),
        "runs", "cpu", "results", defaults={"runs": "5", "cpu": "1,0.5,0.25"})
    add(cmd_parser("bench-link", "benchmark the emulated link: RTT, jitter, loss, rate and CPU (prints ratios)"),
        "link", "probes", "tcp_seconds",
        defaults={"probes": "1000", "tcp_seconds": "5"},
        helps={"probes": "ping probes for the RTT figure (x3 for jitter and loss)",
               "tcp_seconds": "seconds of each measured TCP transfer, 1 to 60 (6 for the 1 Gbit/s, trace and AQM "
                              "figures at the default; fewer make a smoke test, not figures to quote)"})
    return p


# -- commands ------------------------------------------------------------------------------------
def _say(line: str) -> None:
    print(line, flush=True)


def _whole(text: str, option: str, lo: int, hi: int) -> int:
    n = int(text) if text.isascii() and text.isdigit() else lo - 1
    if not lo <= n <= hi:
        raise UsageError(f"{option}: '{text}' is not a whole number from {lo} to {hi}")
    return n


def _results(a) -> Path:
    return Path(a.results or campaign.DEFAULTS["results"])


def _stats(a) -> tuple[str, str, str | None, str | None, str | None]:
    """The report's test, correction, reference, axis (--compare) and metric (None: the campaign's own)."""
    return (a.test or campaign.DEFAULTS["test"], a.correction or campaign.DEFAULTS["correction"], a.reference,
            a.compare, a.metric)


def _link_spec(a, **fixed):
    """The conditions that the link options of up and verify describe, read as a campaign's (one
    congestion control: the testbed's routes carry one)."""
    spec = campaign.bare({**options.values(a, ("bw", "up_bw") + LINK + (("think",) if hasattr(a, "think") else ())),
                          **fixed})
    if len(spec.grid.ccs) > 1:
        raise UsageError(f"--cc: {a.command} takes one congestion control; got {', '.join(spec.grid.ccs)}")
    return spec


def cmd_run(a) -> int:
    from . import session
    if a.cluster:
        return _run_on_cluster(a)
    if a.tls:
        raise UsageError("--tls: only with --cluster (the TLS files of the cluster's scheduler)")
    s = session.from_options(options.values(a, MEASUREMENT + REACH))
    with s:
        t0 = time.monotonic()
        counts = s.run()
        _say(f"\n{counts['ok']} ok, {counts['failed']} failed, {counts['retried']} retried in "
             f"{time.monotonic() - t0:.1f} s\n")
    return _report(a, s.results, s.campaign_id, s.spec.name, counts["failed"])


def _report(a, results: Path, campaign_id: int, name: str, failed: int) -> int:
    """A run's end, local or on a cluster: its report and figures; exit 1 if a trial failed every attempt."""
    from .analysis.report import campaign_report
    if a.no_report:
        _say(f"\nno report drawn (--no-report): plt-bench report {campaign_id} --results {results}")
    else:
        directory, files = campaign_report(results, campaign_id, name, *_stats(a), out=_say)
        _say(f"\nreport and figures: {directory}/ ({', '.join(p.name for p in files)})")
    if failed:
        print(f"{failed} trial(s) failed every attempt; each attempt is in the store with its reason", file=sys.stderr)
        return 1
    return 0


def _run_on_cluster(a) -> int:
    from . import cluster, session
    values = options.values(a, MEASUREMENT + REACH)
    if a.testbed is not None:
        raise UsageError("--testbed: not taken with --cluster: each worker measures on its own testbed (plt-bench "
                         "worker --testbed N)")
    spec = session.spec_from_options(values)
    timeout_s = session.parse_timeout_s(a.timeout)
    results = Path(values.get("results") or campaign.DEFAULTS["results"])
    counts = cluster.run(spec, results, a.cluster, new=bool(a.new), out=_say, timeout_s=timeout_s, tls=a.tls)
    _say(f"\n{counts['ok']} ok, {counts['failed']} failed ({counts['failed_attempts']} failed attempt(s) in all); "
         f"{counts['cells']} cell(s), {counts['resubmitted']} submitted again"
         + (f"; {counts['captures_written']} capture file(s) written back" if spec.capture else "")
         + (f", {counts['captures_lost']} not kept (each named above; in the campaign's metadata, captures_lost)"
            if counts["captures_lost"] else ""))
    return _report(a, results, counts["campaign_id"], spec.name, counts["failed"])


def cmd_worker(a) -> int:
    from . import cluster
    if not a.scheduler:
        raise UsageError("--scheduler: required; expected tcp://HOST:PORT (the Dask scheduler to join)")
    from .remote import make_ref
    ref = make_ref(a.server_machine, a.server_pin, a.server_token, a.control_port, a.iface, a.server_token_file)
    cluster.serve_worker(a.scheduler, a.testbed if a.testbed is not None else 0, a.cpus, bool(a.share_cores),
                         out=_say, listen=a.listen, tls=a.tls,
                         server=None if ref is None else cluster.WorkerServer(ref, a.iface, a.server_token_file))
    return 0


def cmd_cluster_tls(a) -> int:
    from . import cluster
    files = cluster.make_tls(Path(a.dir))
    folder = files[0].parent
    print(f"made {', '.join(str(f) for f in files)} (and {folder / 'ca.key'}, the CA's key: keep it apart)")
    print(f"scheduler: dask scheduler --host ADDR --protocol tls --tls-ca-file {files[0]} --tls-cert {files[1]} "
          f"--tls-key {files[2]}")
    print(f"workers:   plt-bench worker --scheduler tls://ADDR:8786 --tls {folder}")
    print(f"head:      plt-bench run CAMPAIGN --cluster tls://ADDR:8786 --tls {folder}")
    return 0


def cmd_bench(a) -> int:
    from . import bench
    runner = {"bench": lambda: bench.pageload(_results(a), a.size, a.bw, a.runs, out=_say),
              "bench-sampler": lambda: bench.sampler(_results(a), a.runs, a.cpu_interval, a.size, out=_say),
              "bench-campaign": lambda: bench.campaign_overhead(_results(a), a.bw, a.size, out=_say),
              "bench-literature": lambda: bench.literature(_results(a), a.runs, out=_say,
                                                           entries=_entries(a.entries)),
              "bench-replay": lambda: bench.replay(_results(a), a.runs, a.bw, a.rtt, out=_say, pages=a.pages,
                                                   browser=a.browser or "chromium", origin_rtt=a.origin_rtt,
                                                   think=a.think),
              "bench-device": lambda: bench.device(_results(a), a.runs, a.cpu, out=_say)}[a.command]
    counts, lines = runner()
    _say("\n" + "\n".join(lines))
    return 1 if counts["failed"] else 0


def _entries(text: str) -> tuple[str, ...]:
    """bench-literature --entries: network, cpu, fairness, corpus, comma-separated."""
    names = tuple(dict.fromkeys(x.strip().lower() for x in text.split(",") if x.strip()))
    if not names or any(n not in ("network", "cpu", "fairness", "corpus") for n in names):
        raise UsageError(f"--entries: '{text}'; expected network, cpu, fairness, corpus, comma-separated (network,cpu)")
    return names


def _stored_campaign(store, text: str) -> list[int]:
    """A campaign number, 'latest', 'all', or a preset/file name (its latest campaign)."""
    if text in ("latest", "all") or text.isdigit():
        return store.resolve_campaign(text)
    name = campaign.load(text).name
    cid = store.latest_named(name)
    if cid is None:
        raise UsageError(f"CAMPAIGN: no campaign named '{name}' in {store.path}")
    return [cid]


def cmd_report(a) -> int:
    from .analysis import plots, report
    from .store import Store
    with Store(_results(a), read_only=True) as store:  # an archived, read-only store reads as well as a live one
        ids = _stored_campaign(store, a.campaign)
        rep = report.build(store, ids, *_stats(a))
        name = store.campaign(ids[-1])["name"]
    directory = report.out_dir(_results(a), name, ids[-1])
    if a.command == "report":
        print(report.format_text(rep))
        files = report.write_files(lambda: report.write_all(rep, directory, f"{name} #{ids[-1]}"), directory)
        print(f"\nwritten: {', '.join(str(f) for f in files)}")
        return 0
    files = report.write_files(lambda: plots.draw_report(rep, directory, f"{name} #{ids[-1]}"), directory)
    if not files:
        print("nothing to draw: the campaign has no pair of protocols nor bulk download with successful trials")
        return 1
    print("\n".join(str(f) for f in files))
    return 0


def cmd_campaigns(a) -> int:
    from .store import Store
    print(f"presets ({campaign.PRESETS_DIR}/*.toml; copy one and edit it):")
    width = max(map(len, campaign.presets()))
    from .pages import real as realpages
    for name in campaign.presets():
        unrecorded: set[str] = set()
        token = realpages.UNRECORDED.set(unrecorded)  # a real page not recorded yet: its first run records it
        try:
            spec = campaign.load(name)
        except UsageError as e:  # a preset that needs what this machine has not made yet (corpus: recordings)
            print(f"  {name:<{width}}     - trials  (not ready: {e})")
            continue
        finally:
            realpages.UNRECORDED.reset(token)
        first = f" (its first run records {', '.join(f'real:{n}' for n in sorted(unrecorded))})" if unrecorded else ""
        print(f"  {name:<{width}} {spec.trial_count:>5} trials  {spec.description}{first}")
    if _results(a).is_file():
        with Store(_results(a), read_only=True) as store:
            print(f"\ncampaigns in {_results(a)}:")
            for cid in store.campaign_ids():
                c = store.campaign(cid)
                print(f"  {cid:>4}  {c['name']:<12} {c['status']:<12} {len(store.trials([cid])):>5} trials  started "
                      f"{c['started_utc']}")
    return 0


def cmd_bench_link(a) -> int:
    from .link import bench as benchlink
    from .testbed import Setup, Testbed
    probes = _whole(a.probes, "--probes", 100, 100_000)
    seconds = _whole(a.tcp_seconds, "--tcp-seconds", 1, 60)
    link = campaign.bare({"link": a.link}).link
    cmd.require_root()
    with Testbed(Setup(SITES, link=link, with_browser=False)) as bed:
        benchlink.run(bed, _say, probes, tcp_seconds=seconds)
    return 0


def cmd_up(a) -> int:
    from .testbed import Setup, Testbed
    if a.bw is None and not a.trace_down:
        a.bw = "unshaped"
    spec = _link_spec(a, size=a.size)
    if len(spec.grid.conditions) != 1:
        raise UsageError("--bw, --rtt, --jitter, --loss: 'up' takes one value of each")
    bed = Testbed(Setup(SITES, cc=spec.cc, link=spec.link, index=a.testbed, persistent=True, with_browser=False,
                  conditions=spec.grid.conditions, traces=spec.traces))
    with bed:
        bed.sites.ensure(spec.grid.pages)
        info = bed.describe(bed.set_conditions(spec.grid.conditions[0]), spec.grid.pages)
        bed.detach()  # success: leave it up
    print(json.dumps(info, indent=1) if a.json else info["text"])
    return 0


def cmd_record(a) -> int:
    from . import recorder as record
    from .pages.harfile import refuse_existing
    serve = record.parse_folders(a.folder)
    urls = record.check_urls(a.urls, serve)
    names = record.names_for(a.name, urls)
    for n in names:  # before anything loads
        refuse_existing(SITES, n)
    if serve:  # the pages' own hosts are the folders': an origin --origin-rtt names is checked against them
        spec = _link_spec(a, size=",".join(f"url:{u}" for u in urls), folder=[f"{h}={d}" for h, d, _ in serve])
        if len(spec.grid.conditions) != 1:
            raise UsageError("--bw, --rtt: 'record' takes one value of each")
    else:  # from the web, as this machine reaches it: no testbed, no link of ours
        given = [k for k in ("bw", "up_bw", "rtt", "jitter", "loss", "trace_down", "trace_up", "think")
                 if getattr(a, k, None) not in (None, "unshaped")]
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')}: a recording from the web goes through this machine's "
                             "own network; a link (and a server's think time) is for --folder")
    cmd.require_root()
    done = (record.record_served(urls, names, serve, SITES, conditions=spec.grid.conditions[0], index=a.testbed,
                                 note=_say, traces=spec.traces) if serve else record.record_web(urls, names, SITES,
                                                                                                  note=_say))
    for _, notes in done:
        for n in notes:
            _say(f"  {n}")
    _say(f"measure them: plt-bench run --size {','.join(f'har:{n}' for n in names)} --proto all")
    return 0


def cmd_verify(a) -> int:
    from .records import format_link_check
    from .session import verify_link
    probes = _whole(a.probes, "--probes", 10, 100_000)
    reports = verify_link(_link_spec(a, size="5KB", runs=1), _results(a), probes, a.testbed,
                          on_report=None if a.json else lambda rep: _say(format_link_check(rep)))
    if a.json:
        print(json.dumps(reports, indent=1))
    return 1 if any(not r["ok"] for r in reports) else 0


def cmd_down(a) -> int:
    cmd.require_root()
    gone = topology.take_down(a.testbed)
    print("\n".join(f"removed testbed {p}" for p in gone) or "no testbed started by 'plt-bench up' is running")
    return 0


def cmd_serve(a) -> int:
    from . import servers
    from .remote import ServeSession, check_serve_options, serve_servers, write_private
    from .recorder import parse_folders
    addr, pages, port = check_serve_options(a.addr, a.iface, a.size, a.control_port, a.info_file)
    names = serve_servers(a.http_server)
    served = [(h, d) for h, d, _ in parse_folders(a.folder, "--folder", protocols_allowed=False)]
    cmd.require_root()
    if a.qlog and not any("qlog" in servers.get(n).features for n in names):
        raise UsageError(f"--qlog: {', '.join(names)} writes no qlog; Caddy does (--http-server caddy)")
    if served and not any("folders" in servers.get(n).features for n in names):
        raise UsageError(f"--folder: {', '.join(names)} serves no folders as they are; Caddy does (--http-server "
                         "caddy, or caddy,quinn)")
    session = ServeSession(addr, a.iface, SITES, pages, port, a.testbed, server_names=names, qlog=a.qlog,
                           served=served)
    try:
        info = session.open()
        if a.info_file:
            write_private(Path(a.info_file), json.dumps(info, indent=1) + "\n")
        _say(session.instructions(info))
        while True:
            time.sleep(3600)
    except (KeyboardInterrupt, signals.Interrupted):  # the normal way to stop serving
        session.close()
        _say(f"stopped: {', '.join(session.labels)}, the control channel and the run folder are gone")
        return 0
    finally:
        session.close()


def cmd_doctor(a) -> int:
    from . import doctor
    from .axes import parse_pages
    checks = doctor.run_checks(SITES, list(parse_pages(",".join(ALL_SIZES))))
    print(json.dumps([dataclasses.asdict(c) for c in checks], indent=1) if a.json else doctor.format_checks(checks))
    return 1 if any(c.essential and c.status == "missing" for c in checks) else 0


def cmd_clean(a) -> int:
    cmd.require_root()
    rep = topology.clean(force=a.force, index=a.testbed)
    from .recorder import clean_dead
    from .pages.harfile import remove_dead_parts  # a killed maker's half-made page set is no testbed's: always removed
    rep["removed"] += [f"{SITES / 'replay' / name} (a page set whose maker was killed)"
                       for name in remove_dead_parts(SITES / "replay")]
    rep["removed"] += clean_dead()  # ... and a killed recording's folder and browser, likewise
    if a.testbed is not None and not rep["removed"] and not rep["kept"] and not rep["up"]:
        print(f"nothing of testbed {a.testbed} (pb{a.testbed}) to clean")
        return 0
    print("\n".join([f"removed {p}" for p in rep["removed"]]
                    + [f"kept {p}: its run is still alive (use --force to remove it anyway)" for p in rep["kept"]]
                    + [f"kept {p}: brought up by 'plt-bench up' (take it down with 'plt-bench down --testbed "
                       f"{p[2:]}')" for p in rep["up"]]) or "nothing of plt-bench's to clean")
    return 0


def cmd_export(a) -> int:
    from .store import Store, check_out_file
    out = None if a.out == "-" else check_out_file(Path(a.out), "--out")
    with Store(_results(a), read_only=True) as store:
        n = store.export_csv(store.resolve_campaign(a.campaign), out or sys.stdout, a.nav)
    print(f"exported {n} trials", file=sys.stderr)
    return 0


def cmd_summary(a) -> int:
    from .store import Store
    from .analysis.report import poolable
    from .analysis.summary import tables
    with Store(_results(a), read_only=True) as store:
        ids = store.resolve_campaign(a.campaign)
        poolable(store, ids)  # the rule report keeps: campaigns whose key metadata differ are not pooled
        print("\n\n".join(text for _, text in tables(store.trials(ids))))
    return 0


def cmd_pages(a) -> int:
    from .axes import parse_pages
    from .pages import Sites
    if a.from_har or a.name:
        return _pages_from_har(a)
    for page, path in Sites(SITES).ensure(parse_pages(a.size)).items():
        sparse = [name for name, _, pieces in page.files() if pieces is None]
        extra = (f" + {page.fetched} x {page.object_name} of {page.size_bytes} bytes" if page.fetched else
                 "".join(f" + {name} (sparse)" for name in sparse))
        print(f"{path}  {page.html_bytes} bytes{extra}")
    return 0


def cmd_trace(a) -> int:
    import hashlib
    from . import traces
    src = a.source
    if src.lower().endswith(".csv"):
        try:
            text = Path(src).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"SOURCE: {src}: cannot be read ({getattr(e, 'strerror', None) or e}); expected "
                             f"{traces.RATES_FORM}") from None
        try:
            ms = traces.from_rates(traces.parse_rates_csv(text, f"SOURCE: {src}"))
        except UsageError as e:
            raise UsageError(str(e) if str(e).startswith("SOURCE") else f"SOURCE: {src}: {e}") from None
    elif src.startswith("gen:"):
        ms = list(traces.generate(src, "SOURCE").ms)
    else:
        if a.out:
            raise UsageError(f"OUT: {src} is a trace already; OUT is for a .csv rate series or a gen: description")
        ms = None
    if a.out:
        out = Path(a.out)
        if not out.parent.is_dir():
            raise UsageError(f"OUT: {out.parent} is not a folder")
        try:
            traces.write(out, ms)
        except UsageError as e:
            raise UsageError(f"OUT: {e}") from None
        src = str(out)
    elif ms is not None:  # what would be written
        print("(not written: give OUT to write it)")
        ms_text = traces.render(ms).encode()
        _print_trace(traces.Trace(Path(src).stem, src, hashlib.sha256(ms_text).hexdigest(), tuple(ms), ms[-1]))
        return 0
    _print_trace(traces.read(src, "SOURCE"))
    return 0


def _print_trace(t) -> None:
    print(f"trace {t.name}: {t.path}")
    print(f"  {t.opportunities} opportunities of 1500 bytes over a period of {t.period_ms} ms (looping)")
    print(f"  mean {t.mean_bps / 1e6:.3f} Mbit/s, peak {t.peak_bps(100) / 1e6:.3f} Mbit/s (over 100 ms windows)")
    print(f"  sha256 {t.sha256}")


def _pages_from_har(a) -> int:
    from .pages import origin_host, replay_root, standin as replay
    if not a.from_har or not a.name:
        raise UsageError("--from-har: expected a recording and a name: plt-bench pages --from-har FILE NAME")
    if not a.stand_in:
        return _archive_from_har(a)
    rs, notes = replay.make(Path(a.from_har), a.name, SITES)
    kept = sum(o.body == "har" for o in rs.objects)
    print(f"page set {rs.name}: {replay_root(SITES, rs.name)}")
    print(f"  {len(rs.objects)} objects, {rs.object_bytes} bytes, from {len(rs.origins)} origins "
          f"({kept} bodies from the recording, {len(rs.objects) - kept} made of the same size and type)")
    for k, origin in enumerate(rs.origins):
        print(f"  {origin:<40} -> https://{origin_host(k)}  ({sum(o.origin == k for o in rs.objects)} objects)")
    for note in notes:
        print(f"  {note}")
    print(f"  measure it: plt-bench run --size har:{rs.name} --proto all")
    return 0


def _archive_from_har(a) -> int:
    from .pages import archive, replay_root
    arc, notes = archive.make(Path(a.from_har), a.name, SITES)
    print(f"archive {arc.name}: {replay_root(SITES, arc.name)}")
    print(f"  {arc.url}")
    print(f"  {len(arc.responses)} responses, {arc.body_bytes} body bytes, from {len(arc.origins)} origins "
          f"({', '.join(f'{n} {p}' for p, n in arc.mix().items())} when recorded)")
    for o in arc.origins:
        mine = [r for r in arc.responses if r.host == o.host]
        print(f"  {o.host:<40} {o.protocol or '?':<3} {len(mine):>4} responses {sum(r.size_bytes for r in mine):>10} bytes")
    for note in notes:
        print(f"  {note}")
    print(f"  measure it: plt-bench run --size har:{arc.name} --proto all")
    return 0


COMMANDS = {"run": cmd_run, "worker": cmd_worker, "report": cmd_report, "plot": cmd_report, "campaigns": cmd_campaigns, "up": cmd_up,
            "verify": cmd_verify, "doctor": cmd_doctor, "serve": cmd_serve, "down": cmd_down, "clean": cmd_clean,
            "export": cmd_export, "summary": cmd_summary, "pages": cmd_pages, "trace": cmd_trace, "bench": cmd_bench,
            "cluster-tls": cmd_cluster_tls, "record": cmd_record,
            "bench-link": cmd_bench_link, "bench-sampler": cmd_bench, "bench-campaign": cmd_bench, "bench-device": cmd_bench,
            "bench-literature": cmd_bench, "bench-replay": cmd_bench}


# The commands that store trials: only their interruption speaks of trials kept.
MEASURING = frozenset({"run", "worker", "bench", "bench-campaign", "bench-sampler", "bench-literature", "bench-link",
                       "bench-device"})


def main(argv: list[str] | None = None) -> int:
    signals.install()  # first: a signal while the parser loads its modules is an ending like any other
    args = None
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    except PltBenchError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader left (plt-bench campaigns | head): nothing more to say
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own last flush fails quietly
        return 0
    except (KeyboardInterrupt, signals.Interrupted) as e:
        signals.settle()
        measuring = getattr(args, "command", None) in MEASURING
        print("\ninterrupted: nothing it made is left behind" +
              ("; trials it finished, if any, are in the store" if measuring else ""), file=sys.stderr)
        return e.exit_code if isinstance(e, signals.Interrupted) else 130


if __name__ == "__main__":
    sys.exit(main())
