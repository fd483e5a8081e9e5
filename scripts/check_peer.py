"""plt-bench's first byte, first paint and load against browsertime's (npm, a tool no one here wrote),
per protocol, through one testbed and one link: the same Debian Chromium and chromedriver, the same
names, certificate pin and protocol flags, each tool loading the same generated page RUNS times, the
two tools alternating, each load in a new browser (plt-bench: --browser-start fresh, as browsertime
starts one for every load). Prints per protocol and tool the medians of TTFB (responseStart), FCP,
FCP - TTFB and PLT (loadEventEnd), and the ratios. A bias the two tools shared would not show in a
comparison of plt-bench with itself. A third arm, plt-bench+log, is plt-bench with its HAR captured
(--capture har: chromedriver's performance log, DevTools' Network events), which browsertime turns on
for every load whatever it is asked (its chrome/webdriver/builder.js and setupChromiumOptions.js).

    scripts/check-peer [RUNS] [--rtt MS] [--bw MBIT] [--size BYTES] [--proto h3,h2,h1] [--sandbox on|off]
                       [--bt-arg=ARG ...]

--bt-arg passes one more argument to browsertime (repeatable: --bt-arg=--chrome.args=--flag), to find
out what moves its figures. Defaults: 7 runs, 500 KB, 10 Mbit/s, 100 ms, h3,h2,h1."""
import argparse
import json
import statistics
import subprocess
import sys
import shutil
import tempfile
import uuid
from pathlib import Path

from plt_bench import browsers
from plt_bench.capture import Settings
from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Conditions
from plt_bench.pages import Page
from plt_bench.testbed import Setup, Testbed
from plt_bench.trial.judge import paint_fields

BROWSERTIME = PROJECT_ROOT / ".tools" / "browsertime" / "node_modules" / "browsertime" / "bin" / "browsertime.js"
TESTBED = 243
# plt-bench as it measures; plt-bench with its HAR captured (chromedriver's performance log: DevTools'
# Network events, which browsertime always has on); browsertime
TOOLS = ("plt-bench", "plt-bench+log", "browsertime")
# the flags of plt-bench's launch that make the testbed's load what it is: its names, its certificate,
# the protocol forced (the rest, headless and a fresh profile, browsertime sets as its own)
KEPT_FLAGS = ("--host-resolver-rules", "--ignore-certificate-errors-spki-list", "--disable-quic", "--disable-http2",
              "--enable-quic", "--origin-to-force-quic-on")


def plt_bench_load(bed, proto, page, capture_dir: Path | None = None) -> dict | None:
    answer, _ = bed.load(proto, page, 120.0, capture_dir, gate=True)
    if answer.get("error"):
        print(f"  plt-bench {proto}: {answer['error']}", file=sys.stderr)
        return None
    nav = answer["nav"]
    return {"ttfb": nav["responseStart"], "fcp": paint_fields(answer.get("paint"), True)["fcp_ms"],
            "plt": nav["loadEventEnd"], "proto": nav.get("nextHopProtocol")}


def browsertime_load(bed, proto, page, extra) -> dict | None:
    launch = browsers.get("chromium").launch(proto, bed.origins_for(page, proto), bed.server.cert.spki_sha256_b64,
                                             "/nonexistent")
    flags = [a for a in launch["args"] if a.startswith(KEPT_FLAGS)]
    url = bed.url(page, uuid.uuid4().hex[:16])
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["ip", "netns", "exec", bed.plan.client_ns, "node", str(BROWSERTIME), "-b", "chrome", "-n", "1",
                "--headless", "--chrome.binaryPath", "/usr/bin/chromium", "--chrome.chromedriverPath",
                "/usr/bin/chromedriver", "--viewPort", "1280x800", "--resultDir", tmp, "--skipHar",
                *[f"--chrome.args={a[2:]}" for a in ["--no-sandbox", *flags]], *extra, url]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                           env={"PATH": "/usr/bin:/bin", "HOME": tmp})
        out = Path(tmp) / "browsertime.json"
        if r.returncode != 0 or not out.exists():
            print(f"  browsertime {proto}: exit {r.returncode}: {(r.stdout + r.stderr).strip()[-800:]}", file=sys.stderr)
            return None
        result = json.loads(out.read_text())[0]
    s = result["browserScripts"][0]["timings"]
    nav = s["navigationTiming"]
    return {"ttfb": nav["responseStart"], "fcp": s["paintTiming"].get("first-contentful-paint"),
            "plt": nav["loadEventEnd"], "proto": (s.get("pageTimings") or {}).get("nextHopProtocol")
            or result["browserScripts"][0].get("pageinfo", {}).get("nextHopProtocol")}


def median(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="?", type=int, default=7)
    ap.add_argument("--rtt", type=float, default=100.0)
    ap.add_argument("--bw", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=500_000)
    ap.add_argument("--proto", default="h3,h2,h1")
    ap.add_argument("--bt-arg", action="append", default=[])
    ap.add_argument("--each", action="store_true", help="print every load's FCP - TTFB and PLT too")
    ap.add_argument("--sandbox", choices=("on", "off"), default="on",
                    help="plt-bench's browser as the unprivileged user with its sandbox on (as it measures), or as "
                         "root without (as browsertime runs here)")
    a = ap.parse_args()
    if not BROWSERTIME.exists():
        print("browsertime is not installed: run scripts/check-peer, which installs it", file=sys.stderr)
        return 2
    cond = Conditions(int(a.bw * 10**6), int(a.bw * 10**6), rtt_ms=a.rtt)
    page = Page(a.size)
    protos = a.proto.split(",")
    print(f"{cond.label}, {page.label}, {a.runs} runs per tool and protocol, alternating, a new browser each; "
          f"plt-bench's sandbox {a.sandbox}; browsertime {BROWSERTIME.parent.parent.name}"
          f"{' ' + ' '.join(a.bt_arg) if a.bt_arg else ''}")
    rows: dict = {(p, t): [] for p in protos for t in TOOLS}
    spool = Path(tempfile.mkdtemp(prefix="plt-bench-check-peer-"))
    try:
        with Testbed(Setup(PROJECT_ROOT / "sites", index=TESTBED, conditions=[cond], browser_start="fresh",
                     capture=Settings(("har",), spool), browser_sandbox=a.sandbox)) as bed:
            bed.set_conditions(cond)
            for i in range(a.runs):
                for proto in protos:
                    for tool in TOOLS[i % len(TOOLS):] + TOOLS[:i % len(TOOLS)]:  # each first in turn
                        if tool == "browsertime":
                            got = browsertime_load(bed, proto, page, a.bt_arg)
                        else:  # plt-bench+log: its HAR captured, from DevTools' Network events (as browsertime's)
                            folder = spool / uuid.uuid4().hex if tool == "plt-bench+log" else None
                            if folder:
                                folder.mkdir()
                            got = plt_bench_load(bed, proto, page, folder)
                        if got:
                            rows[(proto, tool)].append(got)
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    print(f"  {'protocol':8} {'tool':14} {'n':>3} {'TTFB ms':>8} {'FCP ms':>8} {'FCP-TTFB':>9} {'PLT ms':>8}  protocol seen")
    for proto in protos:
        for tool in TOOLS:
            rs = rows[(proto, tool)]
            gap = [r["fcp"] - r["ttfb"] for r in rs if r["fcp"] is not None]
            print(f"  {proto:8} {tool:14} {len(rs):>3} {median(rs, 'ttfb') or 0:8.1f} {median(rs, 'fcp') or 0:8.1f} "
                  f"{statistics.median(gap) if gap else 0:9.1f} {median(rs, 'plt') or 0:8.1f}  "
                  f"{', '.join(sorted({str(r['proto']) for r in rs}))}")
            if a.each:
                plts = " ".join(f"{r['plt']:.0f}" for r in rs)
                print(f"    FCP-TTFB each: {' '.join(f'{g:.0f}' for g in gap)}; PLT each: {plts}")
        theirs = rows[(proto, "browsertime")]
        for ours in ("plt-bench", "plt-bench+log"):
            print("  " + ", ".join(f"{k.upper()} {ours} / browsertime "
                                   f"{median(rows[(proto, ours)], k) / median(theirs, k):.3f}"
                                   for k in ("ttfb", "fcp", "plt") if median(rows[(proto, ours)], k) and median(theirs, k)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
