"""A named device's CPU budget on this host (issue 45): a fixed benchmark turns the profile's CPU
class into a fraction of one of this host's cores, and proves it, at the start of a campaign.

The benchmark is Lighthouse's BenchmarkIndex as Lighthouse defines it (Chrome m86 onwards; written
here from its definition): a string built of 10,000 characters again and again, and two arrays of
100,000 integers copied into each other; each component is its repetitions per second over 10, and
the index their mean. Lighthouse runs each for 500 ms of wall time; here each runs a fixed work
(BENCHMARK_WORK), the same rate measured, so that V8 warms up equally under any budget. It is the one figure published for phones and desktops
alike (device.profiles). It counts work per wall-clock second, so under a quota it falls with the
quota: the index a budget gives is what the page's scripts see.

The steps, in Chromium (whose figures the profiles' are), each load a fresh browser:
1. At one full core of this host (pinned, no quota): its index, the median of BENCHMARK_RUNS after
   BENCHMARK_WARMUPS runs that let V8 optimize the functions.
2. The budget target / host index, refused where the host is slower than the device (it cannot run
   faster than it is) or where the budget is below the smallest quota the kernel takes.
3. Under that budget: the index again, and the budget moved along the line through the last two
   figures (next_share) until the index is within CALIBRATION_TOLERANCE of the target, at most
   CALIBRATION_STEPS budgets, or the host is refused with what it measured.

The device gets one core's worth (`cores` 1): CFS bandwidth control gives a group a pool of CPU time,
not a speed per core, so a budget over N cores lets one busy thread run N times its share (up to a
whole core). One core keeps a single thread, the benchmark's and a page's main thread alike, at the
device's speed; the browser's processes share it, where the phone would run some beside each other.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from ..errors import EnvironmentProblem
from .budget import SLOWDOWN_TOLERANCE, SMALLEST_BUDGET
from .visitor import Visitor

# Lighthouse's BenchmarkIndex, the same definition (core/lib/page-functions.js, computeBenchmarkIndex:
# repetitions per second / 10 of each component, their mean) on a fixed work (BENCHMARK_WORK), run
# arguments[0] + arguments[1] times in the page, the first arguments[0] thrown away.
BENCHMARK_JS = """
function strings(n) {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    let s = ''; for (let j = 0; j < 10000; j++) s += 'a';
    if (s.length === 1) throw new Error('never');
  }
  return n / 10 / ((performance.now() - t0) / 1000);
}
function copies(n) {
  const a = [], b = []; for (let i = 0; i < 100000; i++) a[i] = b[i] = i;
  const t0 = performance.now();
  for (let k = 0; k < n; k++) {
    const src = k % 2 === 0 ? a : b, dst = k % 2 === 0 ? b : a;
    for (let j = 0; j < src.length; j++) dst[j] = src[j];
  }
  return n / 10 / ((performance.now() - t0) / 1000);
}
const out = [];
for (let r = 0; r < arguments[0] + arguments[1]; r++) {
  const x = (Math.round(strings(arguments[2])) + Math.round(copies(arguments[3]))) / 2;
  if (r >= arguments[0]) out.push(x);
}
return out;
"""
BENCHMARK_WARMUPS = 2
BENCHMARK_RUNS = 3
# each run's fixed work: the repetitions of each component (about 125 ms each at a full core here,
# index 1600-2000). Lighthouse stops each after 500 ms of wall time; a fixed work instead warms V8
# up by the same work under any budget (its compilers start on counts of calls and loop turns, not
# on time: timed by the wall clock, a run under a tenth of a core did a tenth of the warm-up)
BENCHMARK_WORK = (2000, 2500)
# how far the calibrated budget's index may be from the device's class (the benchmark's own spread
# run to run on a quiet machine is a few percent: docs/results.md)
CALIBRATION_TOLERANCE = 0.15
CALIBRATION_STEPS = 4  # budgets tried under the benchmark at most (next_share: usually two)


class CalibrationError(EnvironmentProblem):
    """This host cannot give the device's CPU class (too slow, or it cannot slow down that far)."""


@dataclass(frozen=True)
class Calibration:
    """A device's CPU class on one host, as measured: the budget that gives it, and its proof."""
    device: str
    target_index: float     # the device's class (profiles.Profile.benchmark_index)
    host_index: float       # this host's at one full core
    budget_cores: float     # the fraction of one core that gives the class here
    measured_index: float   # the index under that budget
    browser: str = "chromium"

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        return cls(**{k: d[k] for k in ("device", "target_index", "host_index", "budget_cores", "measured_index")},
                   browser=d.get("browser", "chromium"))

    def words(self) -> str:
        """What the budget means on this host, for people."""
        return (f"{self.device}: BenchmarkIndex {self.target_index:g} is {self.budget_cores:.3f} of one core here "
                f"(this host {self.host_index:.0f} at a full core; {self.measured_index:.0f} measured under the budget)")


def first_share(device: str, target_index: float, host_index: float) -> float:
    """The budget that would give the device's index on a host of host_index (pure);
    CalibrationError where the host is slower than the device or the budget below the kernel's."""
    if host_index <= 0:
        raise CalibrationError(f"--device {device}: the benchmark gave no figure on this host")
    share = target_index / host_index
    if share > 1:
        raise CalibrationError(f"--device {device}: this host is slower than the device (BenchmarkIndex "
                               f"{host_index:.0f} at a full core, the device's {target_index:g}); it cannot run that fast")
    if share < SMALLEST_BUDGET:
        raise CalibrationError(f"--device {device}: {share:.4f} of a core (BenchmarkIndex {target_index:g} on a host "
                               f"of {host_index:.0f}) is below the smallest budget the kernel gives, {SMALLEST_BUDGET:g}")
    return share


def next_share(points: list[tuple[float, float]], target_index: float) -> float:
    """The next budget to try (pure), from the (budget, index) measured so far, the host's at a full
    core first: along the line through the last two (a secant step), within (SMALLEST_BUDGET, 1]. The
    index is not proportional to the budget: the browser's own background work (its other processes'
    timers, the driver's session) takes a roughly constant CPU time from the budget, so the index is
    about a x budget - b, and one step along the line lands near the target."""
    (s1, i1), (s2, i2) = points[-2], points[-1]
    slope = (i2 - i1) / (s2 - s1) if s2 != s1 else 0.0
    if slope <= 0:  # no line to follow (noise): proportionally from the last
        slope = i2 / s2 if i2 > 0 else target_index / s2
    return min(1.0, max(SMALLEST_BUDGET, s2 + (target_index - i2) / slope))


def calibration_problem(target_index: float, measured_index: float) -> str | None:
    """Why a calibrated budget does not give its class (pure), or None."""
    off = measured_index / target_index - 1
    if abs(off) > CALIBRATION_TOLERANCE:
        return (f"under its budget the benchmark gave {measured_index:.0f}, {off:+.0%} off the device's {target_index:g} "
                f"(at most {CALIBRATION_TOLERANCE:.0%}); the machine's other load may be interfering")
    return None


def stored(devices: object) -> tuple[dict[str, Calibration], bool]:
    """A campaign's (or host's) metadata 'devices' ({name: Calibration.as_dict()}) read back (pure):
    (the calibrations it holds whole, whether anything in it was not one: a hand-edited or damaged
    store, whose reader says so and goes on)."""
    if devices is None:
        return {}, False
    if not isinstance(devices, dict):
        return {}, True
    out: dict[str, Calibration] = {}
    for name, d in devices.items():
        try:
            c = Calibration.from_dict(d)
        except (KeyError, TypeError):
            continue
        numbers = (c.target_index, c.host_index, c.budget_cores, c.measured_index)
        if isinstance(c.device, str) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers):
            out[str(name)] = c
    return out, len(out) != len(devices)


def calibration_diff(a: object, b: object) -> list[str]:
    """The devices two campaigns' (or hosts') metadata both calibrated, each to another budget
    ({name: Calibration.as_dict()}) (pure): their trials are not pooled. A calibration either holds
    damaged counts as differing: what it was cannot be told."""
    (a, a_bad), (b, b_bad) = stored(a), stored(b)
    diff = [f"{name}'s calibration" for name in sorted(set(a) & set(b))
            if (a[name].host_index, a[name].budget_cores) != (b[name].host_index, b[name].budget_cores)]
    return diff + (["the devices' calibration (damaged in the store)"] if a_bad != b_bad or a_bad and b_bad else [])


def benchmark_index(runs: list[float]) -> float:
    """The index of a set of runs: their median (pure)."""
    return float(statistics.median(runs))


def calibrate(bed, profile, page) -> Calibration:
    """The device's budget on this testbed's host, measured in Chromium (steps in the module's text);
    leaves the testbed at that budget. page: a small page of the testbed's (pages.Page) the benchmark runs in.
    A measurement at a full core that the machine's other load held back (the CPU loop's slowdown
    beyond the budget's tolerance) is taken again, up to three times."""
    browser = "chromium"  # the profiles' figures are Chrome's (a Firefox campaign's testbed has it too)

    def measure() -> tuple[float, float | None]:
        ans, _ = bed.load("h2", page, 900.0, browser=browser,
                          benchmark=(BENCHMARK_WARMUPS, BENCHMARK_RUNS, *BENCHMARK_WORK))
        runs = ans.get("benchmark") or {}
        if ans.get("error") or runs.get("error") or not runs.get("runs"):
            raise CalibrationError(f"--device {profile.name}: the benchmark did not run: "
                                   f"{ans.get('error') or runs.get('error') or 'no figure'}")
        return benchmark_index(runs["runs"]), (ans.get("cpu_loop") or {}).get("slowdown")
    bed.set_visitor(Visitor(1.0))
    for attempt in range(3):
        host, slowdown = measure()
        if slowdown is not None and slowdown <= 1 + SLOWDOWN_TOLERANCE:
            break
    else:
        raise CalibrationError(f"--device {profile.name}: the machine's other load held the browser back at a full "
                               f"core ({slowdown}x its CPU time, three times): this host's speed cannot be measured now")
    points = [(1.0, host)]
    share = first_share(profile.name, profile.benchmark_index, host)
    for step in range(CALIBRATION_STEPS):
        bed.set_visitor(Visitor(share))
        measured, _ = measure()
        points.append((share, measured))
        if calibration_problem(profile.benchmark_index, measured) is None:
            return Calibration(profile.name, profile.benchmark_index, host, share, measured, browser)
        share = next_share(points, profile.benchmark_index)
        if share == 1.0 and measured < profile.benchmark_index and points[-1][0] == 1.0:
            break
    raise CalibrationError(f"--device {profile.name}: " + calibration_problem(profile.benchmark_index, measured) +
                           f" after {len(points) - 1} budget(s): " + ", ".join(f"{s:.3f} -> {i:.0f}" for s, i in points[1:]))
