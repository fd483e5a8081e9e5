"""plt-bench's paint metrics against Lighthouse's, on the real pages (plt_bench.pages.real), through
one testbed and one link: the same Debian Chromium, the same names and certificate pin, each tool
loading the same page RUNS times. Lighthouse (npm, installed by scripts/check-lcp) is a tool no one
here wrote: a bias the two shared would not show in a comparison of plt-bench with itself. Prints,
per page, each tool's median FCP and LCP, the LCP elements each named, and the ratios.

    scripts/check-lcp [RUNS]          # as root; 5 runs by default

Lighthouse runs without throttling of its own (--throttling-method=provided: the testbed's link is
the throttle), desktop form factor, a 1280x800 screen (plt-bench's window), inside the testbed's
client namespace."""
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from plt_bench import browsers
from plt_bench.pages import parse_page
from plt_bench.pages import real as realpages
from plt_bench.trial.judge import paint_fields
from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Conditions
from plt_bench.testbed import Setup, Testbed

LIGHTHOUSE = PROJECT_ROOT / ".tools" / "lighthouse" / "node_modules" / "lighthouse" / "cli" / "index.js"
COND = Conditions(10 * 10**6, 10 * 10**6, rtt_ms=50.0)
TESTBED = 241
KEPT_FLAGS = ("--host-resolver-rules", "--ignore-certificate-errors-spki-list", "--disable-quic")


def plt_bench_runs(bed, page, runs):
    out = []
    for _ in range(runs):
        answer, _ = bed.load("h2", parse_page(f"url:{page.url}"), 120.0)
        if answer.get("error"):
            print(f"  plt-bench: {answer['error']}", file=sys.stderr)
            continue
        f = paint_fields(answer.get("paint"), True)
        out.append({"fcp": f["fcp_ms"], "lcp": f["lcp_ms"], "element": f["lcp_element"], "wait": f["paint_wait_ms"],
                    "load": answer["nav"]["loadEventEnd"]})
    return out


def lighthouse_runs(bed, page, runs):
    launch = browsers.get("chromium").launch("h2", bed.origins_for(parse_page(f"url:{page.url}"), "h2"),
                                             bed.server.cert.spki_sha256_b64,
                                             "/nonexistent")
    flags = [a for a in launch["args"] if a.startswith(KEPT_FLAGS)]
    flags = [f'{a.split("=", 1)[0]}="{a.split("=", 1)[1]}"' if " " in a else a for a in flags]
    out = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "lhr.json"
            argv = ["ip", "netns", "exec", bed.plan.client_ns, "node", str(LIGHTHOUSE), page.url, "--output=json",
                    f"--output-path={report}", "--quiet", "--throttling-method=provided", "--form-factor=desktop",
                    "--screenEmulation.mobile=false", "--screenEmulation.width=1280", "--screenEmulation.height=800",
                    "--screenEmulation.deviceScaleFactor=1", "--max-wait-for-load=60000",
                    "--only-audits=first-contentful-paint,largest-contentful-paint,largest-contentful-paint-element",
                    "--chrome-flags=--headless=new --no-sandbox --disable-gpu --window-size=1280,800 " + " ".join(flags)]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                               env={"PATH": "/usr/bin:/bin", "CHROME_PATH": "/usr/bin/chromium", "HOME": tmp})
            if r.returncode != 0 or not report.exists():
                print(f"  lighthouse: exit {r.returncode}: {r.stderr.strip()[-500:]}", file=sys.stderr)
                continue
            lhr = json.loads(report.read_text())
        audits = lhr["audits"]
        items = ((audits.get("largest-contentful-paint-element") or {}).get("details") or {}).get("items") or []
        node = next((i for x in items for i in (x.get("items") or [x]) if isinstance(i, dict) and "node" in i), {})
        out.append({"fcp": audits["first-contentful-paint"]["numericValue"],
                    "lcp": audits["largest-contentful-paint"]["numericValue"],
                    "element": _tag(node.get("node") or {})})
    return out


def _tag(node: dict) -> str | None:
    """A Lighthouse node as plt-bench names an element: its tag and id (h1#title), from its snippet."""
    import re
    m = re.match(r"<([a-zA-Z0-9-]+)([^>]*)>", node.get("snippet") or "")
    if not m:
        return None
    ident = re.search(r'\sid="([^"]+)"', m.group(2))
    return m.group(1).lower() + (f"#{ident.group(1)}" if ident else "")


def median(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if not LIGHTHOUSE.exists():
        print("Lighthouse is not installed: run scripts/check-lcp, which installs it", file=sys.stderr)
        return 2
    print(f"{COND.label}, h2, {runs} runs per tool and page; Lighthouse: {LIGHTHOUSE.parent.parent.name}")
    for page in realpages.ready():
        with Testbed(Setup(PROJECT_ROOT / "sites", index=TESTBED, conditions=[COND],
                     folders=[(h, d, "") for h, d in page.folders])) as bed:
            bed.set_conditions(COND)
            ours = plt_bench_runs(bed, page, runs)
            theirs = lighthouse_runs(bed, page, runs)
        print(f"\n{page.name}: {page.what}")
        print(f"  {'':12} {'n':>3} {'FCP ms':>8} {'LCP ms':>8}  LCP elements")
        for name, rows in (("plt-bench", ours), ("Lighthouse", theirs)):
            elements = sorted({str(r["element"]) for r in rows})
            print(f"  {name:12} {len(rows):>3} {median(rows, 'fcp') or 0:8.0f} {median(rows, 'lcp') or 0:8.0f}  "
                  f"{'; '.join(elements)[:160]}")
        for key in ("fcp", "lcp"):
            a, b = median(ours, key), median(theirs, key)
            if a and b:
                print(f"  {key.upper()} plt-bench / Lighthouse: {a / b:.3f}")
        if ours:
            print(f"  plt-bench waited {median(ours, 'wait'):.0f} ms after the load for the page to settle "
                  f"(load event at {median(ours, 'load'):.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
