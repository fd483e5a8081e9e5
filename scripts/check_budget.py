"""plt-bench's CPU budget against a tool no one here wrote: Lighthouse measures its own BenchmarkIndex
(lhr.environment.benchmarkIndex) with its node process and its Chromium inside the testbed's budget
group, beside plt-bench's figure for the same budget, the one a device's calibration
(plt_bench.device.calibrate) turns into a budget. A bias the two shared (the group not holding the
browser, a quota not applied) would not show in a comparison of plt-bench with itself.

    scripts/check-budget [RUNS]          # as root; 3 Lighthouse runs per budget by default

Per budget (a full core pinned, then 0.5, 0.25 and 0.125 of it) it prints: plt-bench's index as the
calibration measures it (median of BENCHMARK_RUNS after BENCHMARK_WARMUPS, a fixed work), plt-bench's
cold index (one run, no warm-up: as Lighthouse measures), Lighthouse's (median of RUNS), and each as
a fraction of its own figure at the full core, which a budget that holds makes about the budget.
Lighthouse runs its benchmark once, cold, for 500 ms of wall time per component at the start of a
navigation: under a small budget that is a small CPU time, much of it V8 warming up."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from plt_bench import browsers
from plt_bench.cmd import PROJECT_ROOT
from plt_bench.conditions import Conditions
from plt_bench.device.calibrate import BENCHMARK_RUNS, BENCHMARK_WARMUPS, BENCHMARK_WORK, benchmark_index
from plt_bench.device.visitor import Visitor
from plt_bench.pages import parse_page
from plt_bench.testbed import Setup, Testbed

LIGHTHOUSE = PROJECT_ROOT / ".tools" / "lighthouse" / "node_modules" / "lighthouse" / "cli" / "index.js"
COND = Conditions(100 * 10**6, 100 * 10**6, rtt_ms=2.0)
TESTBED = 240
BUDGETS = (1.0, 0.5, 0.25, 0.125)
PAGE = "5KB"
KEPT_FLAGS = ("--host-resolver-rules", "--ignore-certificate-errors-spki-list", "--disable-quic")


def ours(bed, page: str, warmups: int, runs: int) -> float | None:
    answer, _ = bed.load("h2", page, 600.0, benchmark=(warmups, runs, *BENCHMARK_WORK))
    got = answer.get("benchmark") or {}
    if answer.get("error") or got.get("error") or not got.get("runs"):
        print(f"  plt-bench: {answer.get('error') or got.get('error') or 'no figure'}", file=sys.stderr)
        return None
    return benchmark_index(got["runs"])


def lighthouse(bed, page: str) -> float | None:
    """One Lighthouse run whose node process joins the budget's group before it starts anything:
    its Chromium, started by it, is in the group too (children inherit a group)."""
    launch = browsers.get("chromium").launch("h2", bed.origins_for(page, "h2"), bed.server.cert.spki_sha256_b64,
                                             "/nonexistent")
    flags = [a for a in launch["args"] if a.startswith(KEPT_FLAGS)]
    flags = [f'{a.split("=", 1)[0]}="{a.split("=", 1)[1]}"' if " " in a else a for a in flags]
    # through this process's root: `ip netns exec` mounts the namespace's own /sys, hiding the groups
    procs = [f"/proc/{os.getpid()}/root{f}/cgroup.procs" for f in bed.visitor_group.group.folders.values()]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "lhr.json"
        argv = ["ip", "netns", "exec", bed.plan.client_ns, "sh", "-c",
                'for f in $GROUP; do echo $$ > "$f"; done; exec "$@"', "sh",
                "node", str(LIGHTHOUSE), bed.url(page), "--output=json", f"--output-path={report}", "--quiet",
                "--throttling-method=provided", "--form-factor=desktop", "--screenEmulation.disabled",
                "--max-wait-for-load=120000", "--only-audits=first-contentful-paint",
                "--chrome-flags=--headless=new --no-sandbox --disable-gpu " + " ".join(flags)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=900,
                           env={"PATH": "/usr/bin:/bin", "CHROME_PATH": "/usr/bin/chromium", "HOME": tmp,
                                "GROUP": " ".join(procs)})
        if r.returncode != 0 or not report.exists():
            print(f"  lighthouse: exit {r.returncode}: {r.stderr.strip()[-500:]}", file=sys.stderr)
            return None
        return float(json.loads(report.read_text())["environment"]["benchmarkIndex"])


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if not LIGHTHOUSE.exists():
        print("Lighthouse is not installed: run scripts/check-budget, which installs it", file=sys.stderr)
        return 2
    version = json.loads((LIGHTHOUSE.parents[1] / "package.json").read_text())["version"]
    print(f"BenchmarkIndex under each CPU budget (one core, pinned); Lighthouse {version} "
          f"x{runs} per budget; plt-bench warm: median of {BENCHMARK_RUNS} after {BENCHMARK_WARMUPS} warm-ups, "
          f"fixed work {BENCHMARK_WORK}; cold: one run, no warm-up")
    rows = []
    with Testbed(Setup(PROJECT_ROOT / "sites", index=TESTBED, conditions=[COND])) as bed:
        bed.set_conditions(COND)
        page = parse_page(PAGE)
        bed.sites.ensure((page,))
        for share in BUDGETS:
            bed.set_visitor(Visitor(share, 1))
            warm = ours(bed, page.html_name, BENCHMARK_WARMUPS, BENCHMARK_RUNS)
            cold = ours(bed, page.html_name, 0, 1)
            lh = [x for x in (lighthouse(bed, page.html_name) for _ in range(runs)) if x is not None]
            rows.append((share, warm, cold, statistics.median(lh) if lh else None, lh))
            print(f"  budget {share:g}: plt-bench warm {warm}, cold {cold}; Lighthouse {lh}", flush=True)
    full = rows[0]
    print(f"\n{'budget':>7} {'warm':>7} {'cold':>7} {'LH':>7}  {'warm/full':>9} {'cold/full':>9} {'LH/full':>8}  "
          f"{'LH/warm':>7} {'LH/cold':>7}")
    for share, warm, cold, lh, _ in rows:
        def frac(x, f):
            return f"{x / f:9.3f}" if x and f else f"{'-':>9}"

        def ratio(a, b):
            return f"{a / b:7.2f}" if a and b else f"{'-':>7}"
        print(f"{share:7g} {warm or 0:7.0f} {cold or 0:7.0f} {lh or 0:7.0f}  {frac(warm, full[1])} {frac(cold, full[2])} "
              f"{frac(lh, full[3]):>8}  {ratio(lh, warm)} {ratio(lh, cold)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
