"""Every option of every front end, declared once: its flag, help text, metavar and choices.

One table (_table, read through option()) registers into argparse (the CLI's subcommands) and into pytest's option group
(measurement mode), so an option reads the same wherever it is typed. Values stay strings here:
the campaign (plt_bench.campaign.load) and the commands parse them, and name the option in every
message. A campaign option left out is None, meaning "the campaign's value"; what applies when
neither the option nor the campaign file says is plt_bench.campaign.DEFAULTS, shown in the help.
A command that needs another default (up: unshaped) gives it where it registers the option.

pytest owns some flags (--capture; pytest-timeout's --timeout) and some dests, so in pytest every
dest is prefixed with PYTEST_PREFIX and an option may take another flag there (pytest_flag).
"""

from __future__ import annotations

import argparse
import dataclasses

from .pages import page_form

PYTEST_PREFIX = "plt_"


@dataclasses.dataclass(frozen=True)
class Option:
    key: str                       # its dest, and the campaign override key it feeds
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    flag: bool = False             # a switch (store_true), not a value
    pytest_flag: str | None = None  # the flag in pytest when the CLI's is taken there
    group: str = "campaign"
    aliases: tuple[str, ...] = ()  # its flags before a rename, still taken (--server for --server-machine, --serve for --folder)

    @property
    def cli_flag(self) -> str:
        return "--" + self.key.replace("_", "-")


def _table() -> dict[str, Option]:
    from .conditions import JITTER_DISTS, LOSS_DIRECTIONS
    from .records import AXES, CORRECTIONS, METRICS, TESTS
    o = [
        Option("proto", "protocol(s), comma-separated: h3 (HTTP/3 over QUIC), h2 (HTTP/2 over TLS/TCP), h1 "
                        "(HTTP/1.1 over TLS/TCP); quic = h3, tcp = h1, both = h3,h1, all = h3,h2,h1; as-recorded: a "
                        "recording's (har:NAME) origins each over the protocol it spoke when recorded"),
        Option("bw", "downlink rate(s): 500kbit, 100mbit, 1gbit (tc) or 100Mbps (tcconfig, bit/s); 'unshaped' for "
                     "no limit"),
        Option("up_bw", "uplink rate, if not the same as --bw ('unshaped' for no limit)"),
        Option("size", "pages, comma-separated; each kind's form (plt_bench.pages): " + page_form()),
        Option("folder", "folders served as they are in the testbed, HOST=DIR, comma-separated, each host on its own "
                         "address (docs.pkg.test=/usr/share/doc/python-requests-toolbelt-doc/html): their pages are "
                         "measured as --size url:ADDRESS (a page's https address on that host) (campaign key: folder; "
                         "--serve and the key serve, its names before)", metavar="HOST=DIR",
               group="link", aliases=("--serve",)),
        Option("runs", "repetitions of every cell (with --precision: the least)"),
        Option("precision", "run each cell, protocols interleaved, until the 95%% CI of each protocol's median is "
                            "within +- this share of it, e.g. 2%%; --runs is then the least and --max-runs the most "
                            "runs per cell", metavar="PCT"),
        Option("max_runs", "the most runs per cell with --precision"),
        Option("name", "campaign name stored with the results (default: the campaign's)"),
        Option("campaign", "preset name or campaign file", metavar="CAMPAIGN"),
        Option("new", "start a new campaign even if an unfinished one can be resumed", flag=True),
        Option("allow_large", "run a campaign of more than 100,000 trials (over a day at a second a trial; at most "
                              "1,000,000)", flag=True),
        Option("timeout", "page-load timeout per trial, e.g. 60s (default: 3x ideal + 20s, times a CPU budget's factor)",
               pytest_flag="--page-timeout"),  # pytest-timeout owns --timeout
        Option("results", "results store"),
        Option("browser", "the browsers that load the pages, comma-separated: chromium (default), firefox (Firefox ESR: "
                          "every page kind, recordings and the corpus too; not yet the HAR and visual captures; "
                          "docs/browsers.md), or chromium,firefox "
                          "(an axis: interleaved in the seeded order, as --cc is; --compare browser)"),
        Option("browser_sandbox", "on (default): the browser runs as the unprivileged user plt-browser with its own "
                                  "sandbox on (a page is untrusted content); off: as root without its sandbox, as "
                                  "before 2026-11-27 (key metadata: the two are never pooled; docs/browsers.md)",
               choices=("on", "off")),
        Option("browser_start", "kept (default): a browser kept across trials of the same flags, each trial in a fresh "
                                "context of its own (its cache, cookies, connections, TLS sessions, alternative "
                                "services new), where the trial asks nothing of the browser's own process (its "
                                "captures, a repeat visit, a device's screen); fresh: a new browser and profile "
                                "each trial, as before 2026-11-28 (key metadata: never pooled; docs/browsers.md)",
               choices=("kept", "fresh")),
        Option("cpu", "the browser's CPU budget, a fraction of a core, comma-separated: 1,0.5,0.25 (an axis, "
                      "interleaved as --browser is; --compare budget). Every browser process and its WebDriver in a "
                      "control group of the testbed's own (cgroup v1 or v2), nothing else; each trial proves it "
                      "(docs/device.md). full (default): no budget, the machine's whole CPU", metavar="FRACTIONS"),
        Option("device", "the visitor's device, comma-separated: low-end-phone, mid-phone, laptop (device.profiles; "
                         "an axis beside --cpu's budgets: --compare budget). Its CPU class (a Lighthouse "
                         "BenchmarkIndex) calibrated into a budget on this host at the campaign's start, its screen "
                         "emulated, its RAM the browser's memory cap (docs/device.md)", metavar="NAMES"),
        Option("cores", "the CPUs a budgeted browser may use (default 1: --cpu 0.25 is a quarter of one core)",
               metavar="N"),
        Option("http_server", "the servers that serve the pages, comma-separated: caddy (default: Caddy, HTTP/3 on "
                              "quic-go, whose congestion control is its own), quinn (quinnserve: HTTP/3 on quinn, "
                              "running --cc's controller for QUIC too: reno, cubic or bbr; docs/servers.md), or "
                              "caddy,quinn (an axis: interleaved in the seeded order, as --browser is; --compare server)"),
        Option("discovery", "how the browser finds HTTP/3: forced (default: forced onto each protocol, names resolved "
                            "inside the browser), alt-svc (a name server in the testbed answers over the link; the "
                            "first connection is TCP and the server's Alt-Svc header offers h3 to the next) or "
                            "https-rr (as alt-svc, with an HTTPS DNS record offering h3 from the first); h2 and h1 "
                            "stay forced; docs/discovery.md"),
        Option("browser_binary", "the browser to measure: the absolute path of a Chromium or Google Chrome binary "
                                 "(default: Debian's chromium); its chromedriver is the distro's when the major "
                                 "versions match, else webdriver-manager's (its cache first)", metavar="PATH"),
        Option("rtt", "round-trip time(s) added by the link, comma-separated: 50ms, 112ms (split evenly over both "
                      "directions)", group="link"),
        Option("jitter", "jitter(s) per direction, e.g. 10ms: delay +- jitter (uniform, like netem) or sd (normal). "
                         "Jitter REORDERS packets, as netem does; --no-reorder keeps them in order", group="link"),
        Option("jitter_dist", f"jitter distribution: {' or '.join(JITTER_DISTS)}", group="link"),
        Option("loss", "packet loss(es) per direction, comma-separated: 0.1%%, 5%% (Bernoulli per packet)",
               group="link"),
        Option("loss_direction", f"where loss applies: {', '.join(LOSS_DIRECTIONS)} (down: server to client)",
               group="link"),
        Option("no_reorder", "keep packets in order despite jitter (linkem backend only)", flag=True, group="link"),
        Option("queue", "bottleneck queue in packets, or auto (one bandwidth-delay product, at least 64)",
               group="link"),
        Option("aqm", "the bottleneck's queue discipline(s), an axis, comma-separated: droptail, codel, fq_codel, "
                      "pie, each with its parameters after colons (codel:target=10ms:interval=200ms, "
                      "fq_codel:flows=256, pie:target=20ms), held at the --bw rate by the kernel's qdisc beneath netem "
                      "where the kernel has netem, else by linkem (docs/measuring.md). Default: the kernel's FIFO", group="link"),
        Option("cross", "competing traffic through the bottleneck, an axis, comma-separated: 0 (none), or "
                        "NxKIND[-CC][:down|up] with KIND tcp (CC cubic, bbr, reno) or quic (CC cubic, bbr, newreno): "
                        "2xtcp-cubic, 1xquic-bbr:up; "
                        "long-lived flows from namespaces of their own, running through every trial (with --aqm)",
               group="link"),
        Option("origin_rtt", "each origin at its own distance, an axis, comma-separated: off (every origin at --rtt), "
                             "HOST=MS[+HOST=MS...] (static.pkg.test=100: that origin's connections see the link plus "
                             "100 ms of round trip), or recorded (a recording's own; docs/replay.md). Proven per trial "
                             "from the browser's handshakes; linkem's", group="link"),
        Option("think", "the servers' think time, an axis, comma-separated: off (every response at once), MS (200: "
                        "each response waits 200 ms before its first byte, whatever the page) or recorded (each "
                        "recorded response its own think: as its server said it, else its recorded wait less its "
                        "origin's round trip; a recording's). "
                        "Proven per trial from the server's log; docs/replay.md"),
        Option("ecn", "the queue discipline marks ECN-capable packets CE where it would drop them (with --aqm codel, "
                      "fq_codel or pie)", flag=True, group="link"),
        Option("trace_down", "downlink rate(s) following Mahimahi link traces instead of --bw, comma-separated: a "
                             "file (one millisecond timestamp per line, each a 1500-byte delivery opportunity, "
                             "looping) or gen:constant:12mbit, gen:onoff:24mbit:500ms:500ms, "
                             "gen:ramp:2mbit:24mbit:10s; the uplink follows the same trace unless --trace-up or "
                             "--up-bw says otherwise (linkem follows traces, on every kernel)", metavar="TRACE",
               group="link"),
        Option("trace_up", "uplink trace(s): one for every downlink trace, or one each in --trace-down's order",
               metavar="TRACE", group="link"),
        Option("cc", "TCP congestion control of client and server: cubic, bbr, reno", group="link"),
        Option("link", "link backend: auto (netem where it can run, else linkem), netem (the kernel's; tcconfig "
                       "configures it in the router), linkem (userspace); tcconfig is another name for netem",
               group="link"),
        Option("verify", "measure the link (ping, iperf3) before each condition's trials: stop on a link out of "
                         "tolerance, warn and go on, or off", group="link"),
        Option("testbed", "testbed index 0-255 (names pbN-*, addresses 198.18.N.0/24 and 198.19.N.0/24; default: "
                          "first free)", metavar="N", group="link"),
        Option("capture", "capture run: 'all', or a comma-separated list of cpu (CPU time series per role), pcap "
                          "(tcpdump in the client namespace), keylog (TLS keys: Wireshark decrypts TCP and QUIC), qlog "
                          "(Caddy's, QUIC trials), netlog (the browser's own: Chromium's net-log, Firefox's HTTP log), har (HAR 1.2 of every request); files go to "
                          "<results folder>/captures/",
               metavar="KINDS", pytest_flag="--captures", group="capture"),
        Option("cpu_interval", "CPU sampling interval during every trial", group="capture"),
        Option("capture_limit", "warn when a campaign's capture files would take more than this", group="capture"),
        Option("server_machine", "two machines: the server machine's address, where 'plt-bench serve --addr ADDR' "
                                 "runs (campaign key: server_machine; --server and the key server, its names before "
                                 "2026-11-28, still work); this machine is the client", metavar="ADDR", group="two",
               aliases=("--server",)),
        Option("server_pin", "the pin 'plt-bench serve' printed (base64 SHA-256 of its certificate's public key)",
               metavar="PIN", group="two"),
        Option("server_token", "the control token 'plt-bench serve' printed (64 hex digits); visible to every user of "
                               "this machine in ps: prefer --server-token-file or PLT_BENCH_SERVER_TOKEN",
               metavar="TOKEN", group="two"),
        Option("server_token_file", "a file only you can read (mode 0600) holding the token, or serve's --info-file "
                                    "JSON (campaign key: server_token_file); or set PLT_BENCH_SERVER_TOKEN",
               metavar="FILE", group="two"),
        Option("control_port", "the server's control port", metavar="N", group="two"),
        Option("iface", "this machine's interface towards the server: the only one the testbed shapes, and only for "
                        "the test traffic (required when the link is shaped; campaign key: iface)", metavar="IFACE",
               group="two"),
        Option("test", "the test of each comparison (mannwhitney needs more than 5 runs per protocol to survive correction)",
               choices=TESTS, group="stats"),
        Option("correction", "multiple-comparison correction: holm or bh (Benjamini-Hochberg)", choices=CORRECTIONS,
               group="stats"),
        Option("reference", "the value every other one is compared against: a protocol (default: h3 where it runs, "
                            "else the first listed), or with --compare cc a congestion control, with --compare browser "
                            "a browser, with --compare server a server (default: the first listed)", metavar="VALUE",
               group="stats"),
        Option("compare", "what the report compares: proto (each protocol against the reference, within each "
                          "congestion control, browser and server), cc, browser, server or cpu (each congestion "
                          "control, browser, server or CPU budget and device against the reference, within each "
                          "protocol; budget and device say cpu too)", choices=AXES + ("cpu", "device"), group="stats"),
        Option("visit", "which load of each page a trial measures, comma-separated: first (a fresh browser), repeat "
                        "(the same browser again a moment later, its connections closed and its cache cleared), "
                        "repeat-warm (the same, its cache kept); a page may name its own: 20x5KB@repeat"),
        Option("metric", "the time the report compares and draws: plt (the load event), fcp (first contentful "
                         "paint), lcp (largest contentful paint) or ttfb (first byte)", choices=tuple(METRICS),
               group="stats"),
        Option("cluster", "run the campaign's cells on a Dask cluster's plt-bench workers (each 'plt-bench worker "
                          "--scheduler ADDR'); this machine keeps the store", metavar="tcp://HOST:PORT", group="cluster"),
        Option("scheduler", "the Dask scheduler to join (started with: dask scheduler --host ADDR)",
               metavar="tcp://HOST:PORT", group="cluster"),
        Option("listen", "the address this worker's Dask ports listen on (its comm and its HTTP port); default: this "
                         "machine's address on the route to the scheduler (127.0.0.1 for a scheduler on loopback), "
                         "never every interface", metavar="ADDR", group="cluster"),
        Option("tls", "a folder of the cluster's TLS files (ca.pem, node.pem, node.key; 'plt-bench cluster-tls DIR' "
                      "makes them): every connection to the tls:// scheduler is mutual TLS", metavar="DIR",
               group="cluster"),
        Option("cpus", "the CPUs this worker, its testbed and its trials are pinned to (a CPU list: 2-3, 0,4); "
                       "default: the first two no other worker of this machine holds", metavar="LIST",
               group="cluster"),
        Option("share_cores", "pin nothing: this machine's workers share every core (a machine too small for "
                              "two cores per worker; their trials then disturb each other)", flag=True,
               group="cluster"),
        Option("json", "print it as JSON", flag=True, group="output"),
        Option("no_report", "store the trials and draw no report or figure at the end (a scripted run, a slow "
                            "machine): 'plt-bench report' makes them later from the store", flag=True, group="output"),
        Option("probes", "ping probes per condition", group="link"),
        Option("tcp_seconds", "seconds of each measured TCP transfer (after iperf3's omitted ramp)", metavar="S",
               group="link"),
    ]
    return {x.key: x for x in o}


GROUP_TITLES = {"campaign": "overrides of the campaign", "link": "link and hosts", "capture": "CPU and captures",
                "two": "two machines (see 'plt-bench serve')",
                "cluster": "many machines (Dask)", "stats": "statistics", "output": "output"}

# what a measurement (run, pytest) takes; pytest switches to measurement mode on any of these
MEASUREMENT = ("campaign", "proto", "bw", "up_bw", "size", "runs", "precision", "max_runs", "allow_large", "rtt", "jitter",
               "jitter_dist", "loss", "loss_direction", "no_reorder", "queue", "aqm", "ecn", "cross", "origin_rtt", "think", "trace_down",
               "trace_up", "cc", "link", "verify",
               "name", "capture", "cpu_interval",
               "capture_limit", "server_machine", "iface", "server_token_file", "browser", "browser_binary", "browser_sandbox",
               "browser_start",
               "http_server", "cpu", "device", "cores",
               "discovery", "reference", "compare",
               "metric", "visit", "folder")
# how to reach the server and where to store: not part of a campaign's definition
REACH = ("server_pin", "server_token", "control_port", "testbed", "results", "new", "timeout")

_OPTIONS: dict[str, Option] | None = None


def option(key: str) -> Option:
    global _OPTIONS
    if _OPTIONS is None:
        _OPTIONS = _table()
    return _OPTIONS[key]


def _shown_default(key: str, default) -> str:
    if default is None:
        from .campaign import DEFAULTS
        default = DEFAULTS.get(key)
    return "" if default is None or default is False else f" (default: {default})"


def add_argparse(parser: argparse.ArgumentParser, *keys: str, defaults: dict | None = None,
                 helps: dict | None = None, types: dict | None = None) -> None:
    """Register options into an argparse parser, grouped as in GROUP_TITLES; `defaults` are the
    command's own (shown in the help), `helps` a command's own wording of an option."""
    defaults, helps, types = defaults or {}, helps or {}, types or {}
    groups: dict[str, argparse._ArgumentGroup] = {}
    for key in keys:
        o = option(key)
        g = groups.get(o.group) or groups.setdefault(o.group, parser.add_argument_group(GROUP_TITLES[o.group]))
        default = defaults.get(key)
        text = helps.get(key, o.help) + _shown_default(key, default)
        if o.flag:
            g.add_argument(o.cli_flag, *o.aliases, dest=key, action="store_true", default=default or None, help=text)
        else:
            g.add_argument(o.cli_flag, *o.aliases, dest=key, default=default, choices=o.choices, metavar=o.metavar,
                           help=text, **({"type": types[key]} if key in types else {}))


def add_pytest(group, *keys: str) -> None:
    """Register options into pytest's option group; dests are prefixed (PYTEST_PREFIX). Choices are
    checked by the campaign, not by pytest, so a wrong value exits 2 with the CLI's message."""
    for key in keys:
        o = option(key)
        flags = (o.pytest_flag or o.cli_flag, *o.aliases)
        text = o.help + _shown_default(key, None)
        if o.flag:
            group.addoption(*flags, dest=PYTEST_PREFIX + key, action="store_true", default=None, help=text)
        else:
            group.addoption(*flags, dest=PYTEST_PREFIX + key, default=None, metavar=o.metavar or key.upper(), help=text)


def values(namespace, keys, prefix: str = "") -> dict:
    """{key: value} of these options from a parsed namespace (argparse's, or pytest's with its prefix)."""
    return {k: getattr(namespace, prefix + k, None) for k in keys}


def display(key: str, pytest: bool = False) -> str:
    """An option's flag as the user typed it."""
    o = option(key)
    return (o.pytest_flag or o.cli_flag) if pytest else o.cli_flag
