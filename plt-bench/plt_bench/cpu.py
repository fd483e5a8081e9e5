"""CPU: the cost of a trial per role (the browser's processes read just before it quits, since
their totals vanish with them; Caddy and linkem as differences across the trial; psutil sees
every PID across namespaces), and the machine's state before a trial or a link verification."""

from __future__ import annotations

import os
import time

ROLES = ("browser", "renderer", "network", "gpu", "utility", "zygote", "chromedriver", "geckodriver", "other")

# Firefox's child processes by the type its command line ends with (-contentproc ... TYPE): content
# processes render (tab), the socket process carries the network where Firefox runs one (else the
# parent's socket thread does, counted as "browser"), the fork server is Chromium's zygote's peer.
FIREFOX_CHILDREN = {"tab": "renderer", "socket": "network", "gpu": "gpu", "rdd": "utility", "utility": "utility",
                    "forkserver": "zygote"}


def role(cmdline: list[str]) -> str:
    """The role of a browser's process from its command line: Chromium's (--type=..., the network
    service's sub-type) or Firefox's (-contentproc and its type); the driver's own."""
    args = " ".join(cmdline)
    exe = os.path.basename(cmdline[0]) if cmdline else ""
    if "chromedriver" in exe:
        return "chromedriver"
    if "geckodriver" in exe:
        return "geckodriver"
    if exe.startswith("firefox"):
        return FIREFOX_CHILDREN.get(cmdline[-1], "other") if "-contentproc" in cmdline else "browser"
    kind = next((a.split("=", 1)[1] for a in cmdline if a.startswith("--type=")), None)
    if kind is None:
        return "browser" if cmdline and "chrom" in cmdline[0] else "other"
    if kind == "renderer":
        return "renderer"
    if kind == "gpu-process":
        return "gpu"
    if kind == "zygote":
        return "zygote"
    if kind == "utility":
        return "network" if "network.mojom.NetworkService" in args else "utility"
    return "other"


def tree_cpu(root_pid: int) -> dict[str, dict[str, float]]:
    """User and system CPU seconds per role of a process and all its descendants, now."""
    out: dict[str, dict[str, float]] = {}
    for r, user_s, system_s in tree_pids(root_pid).values():
        d = out.setdefault(r, {"user_s": 0.0, "system_s": 0.0, "processes": 0})
        d["user_s"] += user_s
        d["system_s"] += system_s
        d["processes"] += 1
    return {k: {"user_s": round(v["user_s"], 3), "system_s": round(v["system_s"], 3), "processes": v["processes"]}
            for k, v in out.items()}


def tree_pids(root_pid: int) -> dict[int, tuple[str, float, float]]:
    """Each process of a tree, now: {pid: (role, user_s, system_s)} (a kept browser's trial takes its
    CPU as differences per process: pid_difference)."""
    import psutil
    out: dict[int, tuple[str, float, float]] = {}
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = (role(p.cmdline()), t.user + getattr(t, "children_user", 0.0),
                          t.system + getattr(t, "children_system", 0.0))
        except psutil.Error:
            continue
    return out


def pid_difference(before: dict[int, tuple], after: dict[int, tuple]) -> dict[str, dict]:
    """Per-role CPU (tree_cpu's form) between two tree_pids readings, process by process (pure): a
    process of both counts what it used in between, one new since counts all it used; one gone since
    counts nothing (its totals went with it, as in tree_cpu's differences). A kept browser's earlier
    trials' processes (an ended context's renderer leaving) can then not take from this trial's."""
    out: dict[str, dict] = {}
    for pid, (r, u1, s1) in after.items():
        _, u0, s0 = before.get(pid, (r, 0.0, 0.0))
        d = out.setdefault(r, {"user_s": 0.0, "system_s": 0.0, "processes": 0})
        d["user_s"] += max(0.0, u1 - u0)
        d["system_s"] += max(0.0, s1 - s0)
        d["processes"] += 1
    return {k: {"user_s": round(v["user_s"], 3), "system_s": round(v["system_s"], 3), "processes": v["processes"]}
            for k, v in out.items()}


def parse_cpus(text: str, option: str = "--cpus") -> tuple[int, ...]:
    """A CPU list in the kernel's form, '0-3,6' -> (0, 1, 2, 3, 6) (pure)."""
    import re

    from .errors import UsageError
    out: set[int] = set()
    for part in (text or "").split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise UsageError(f"{option}: '{text}' is not a CPU list; expected CPU numbers and ranges, "
                             "for example 2-3 or 0,4-5")
        out.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return tuple(sorted(out))


def cpu_list(cpus) -> str:
    """(0, 1, 2, 3, 6) -> '0-3,6': the kernel's CPU list form (pure)."""
    out, run = [], []
    for c in sorted(set(cpus)):
        if run and c != run[-1] + 1:
            out.append(run)
            run = []
        run.append(c)
    if run:
        out.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in out)


def own_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on: all of them unless it is pinned (a cluster worker's set)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def pin_threads(cpus) -> None:
    """Pin this process to `cpus`: every thread it has now (the kernel sets one thread at a time),
    and so every thread and process it starts after (they inherit the mask)."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), cpus)


def busy_jiffies(stat_lines, cpus) -> tuple[int, int]:
    """Busy and total jiffies of the given CPUs, from /proc/stat's lines (pure). Busy is all but
    idle and iowait; guest time is already inside user and nice, so it is not counted twice."""
    busy = total = 0
    want = set(cpus)
    for line in stat_lines:
        if not line.startswith("cpu"):
            break
        name, *vals = line.split()
        if name == "cpu" or int(name[3:]) not in want:
            continue
        v = [int(x) for x in vals[:8]]
        total += sum(v)
        busy += sum(v) - v[3] - v[4]
    return busy, total


def _cpu_times() -> tuple[int, int]:
    """Busy and total jiffies of this process's own CPUs: the machine's, unless it is pinned, when
    a saturated or busy machine means its own set (other workers' trials do not count)."""
    with open("/proc/stat") as f:
        return busy_jiffies(f, own_cpus())


def wait_idle(max_busy: float = 0.25, window_s: float = 0.05, timeout_s: float = 5.0) -> dict:
    """Wait until the CPUs are busy less than max_busy (share of all cores) over one window, or
    timeout_s; return what was seen. Like WebPageTest's CPU gate before a test."""
    t0 = time.monotonic()
    while True:
        b0, a0 = _cpu_times()
        time.sleep(window_s)
        b1, a1 = _cpu_times()
        busy = (b1 - b0) / max(a1 - a0, 1)
        waited = time.monotonic() - t0
        if busy < max_busy or waited >= timeout_s:
            return {"busy_pct": round(busy * 100, 1), "idle_wait_s": round(waited, 3), "load1": os.getloadavg()[0],
                    "timed_out": busy >= max_busy}


def cpu_by_role(browser: dict | None, server0: dict, server1: dict, link_stats: dict | None,
                server_sampler: dict | None = None) -> dict | None:
    """The trial's CPU: the browser's roles from the navigation on (and its start-up apart), Caddy
    and linkem as differences of the server-side sampler's first and last readings."""
    roles = dict((browser or {}).get("roles") or {})
    for r, (u1, s1) in server1.items():
        u0, s0 = server0.get(r, (0.0, 0.0))
        roles[r] = {"user_s": round(u1 - u0, 3), "system_s": round(s1 - s0, 3), "processes": 1}
    if "linkem" in roles and link_stats and "cpu_s" in link_stats:
        roles["linkem"]["self_reported_s"] = link_stats["cpu_s"]
    if not roles:
        return None
    out = {"roles": roles, "launch": (browser or {}).get("launch")}
    if browser and browser.get("sampler"):
        out["sampler"] = browser["sampler"]
    if server_sampler:
        out["server_sampler"] = server_sampler
    return out


# -- sampling during a trial -----------------------------------------------------------------------
# A role is saturated while it runs at least this share of one core (its processes together), the
# machine while all its cores are at least this busy; a trial is CPU-bound when one of them was
# saturated for at least BOUND_SHARE of the load (see bound()).
SATURATED_CORE = 0.9
SATURATED_MACHINE = 0.95
BOUND_SHARE = 0.5
# ... judged only on at least this many readings over the load: a 30 ms load has one reading at a
# 100 ms interval, and "half of the load" would be that one sample. A shorter load is "too short to
# judge" (bound() gives None; judged() False), never flagged.
MIN_READINGS = 5


class Saturation:
    """Which roles were saturated when, from consecutive cumulative readings (seconds of CPU per role;
    the machine's busy and total jiffies from /proc/stat): between two readings a role ran
    delta CPU / delta wall of one core. Readings closer than 20 ms apart are merged with the next
    (the kernel counts CPU in 10 ms ticks). Pure: fed by Sampler, tested on made-up readings."""

    MIN_STEP_S = 0.02

    def __init__(self):
        self._last: tuple[float, dict[str, float], tuple[int, int] | None] | None = None
        self.steps: list[tuple[float, float, tuple[str, ...]]] = []  # (from, to, roles saturated)

    def add(self, t: float, cpu_s: dict[str, float], machine: tuple[int, int] | None = None) -> None:
        if self._last is None:
            self._last = (t, dict(cpu_s), machine)
            return
        t0, cpu0, m0 = self._last
        dt = t - t0
        if dt < self.MIN_STEP_S:
            return
        hot = [r for r, c in cpu_s.items() if (c - cpu0.get(r, c)) / dt >= SATURATED_CORE]
        if machine and m0 and machine[1] > m0[1] and (machine[0] - m0[0]) / (machine[1] - m0[1]) >= SATURATED_MACHINE:
            hot.append("machine")
        self.steps.append((t0, t, tuple(sorted(hot))))
        self._last = (t, dict(cpu_s), machine)

    def figures(self, since: float | None = None, until: float | None = None) -> dict[str, float]:
        """{role: seconds saturated}, and "observed": the time the readings covered, within
        [since, until] (monotonic s) where given."""
        out: dict[str, float] = {}
        observed = 0.0
        readings = 0
        for a, b, hot in self.steps:
            lo, hi = max(a, since if since is not None else a), min(b, until if until is not None else b)
            if hi <= lo:
                continue
            observed += hi - lo
            readings += 1
            for r in hot:
                out[r] = out.get(r, 0.0) + hi - lo
        return {**{r: round(v, 3) for r, v in sorted(out.items())}, "observed": round(observed, 3),
                "readings": readings}


def bound(cpu: dict | None) -> tuple[str, float] | None:
    """The role (or "machine") that limited a trial, and the share of the load it was saturated,
    from a trial's CpuFigures: the browser's sampler covers its roles from the navigation on, the
    runner's covers Caddy, linkem and the machine. None when nothing was saturated for BOUND_SHARE
    of the time, or the figures predate the saturation counts."""
    best: tuple[str, float] | None = None
    for key in ("sampler", "server_sampler"):
        sat = ((cpu or {}).get(key) or {}).get("saturated_s") or {}
        observed = sat.get("observed") or 0.0
        if observed <= 0 or not _enough(sat):
            continue
        for r, v in sat.items():
            share = v / observed
            if r not in ("observed", "readings") and share >= BOUND_SHARE and (best is None or share > best[1]):
                best = (r, round(share, 3))
    return best


def _enough(sat: dict) -> bool:
    # figures stored before readings were counted (schema 9-12 rows) are judged as they were
    return sat.get("readings", MIN_READINGS) >= MIN_READINGS


def judged(cpu: dict | None) -> bool | None:
    """Whether a trial's CPU figures were enough to judge it CPU-bound or not (bound()): False for a
    load too short (fewer than MIN_READINGS readings: 'too short to judge'), None without figures."""
    sats = [((cpu or {}).get(key) or {}).get("saturated_s") for key in ("sampler", "server_sampler")]
    sats = [x for x in sats if x and x.get("observed")]
    return None if not sats else all(_enough(x) for x in sats)


class Sampler:
    """psutil sampler: every `interval_s`, the cumulative user and system CPU seconds per role.

    `sources()` returns the processes to watch as [(role, psutil.Process)]. A page load grows the
    tree (Chromium starts a new renderer for the site), so it is called again whenever a new PID
    appears on the machine: listing /proc costs ~50 us, walking it for children ~1 ms, reading one
    process's times ~20 us. The last sample always rescans. A process that exits keeps its last
    reading, so every role's cumulative time is monotone.

    Each sample is (t monotonic s, {role: (user_s, system_s)}), cumulative since the process
    started; `mark()` takes a sample on demand (the baseline before navigation, the last one
    before quitting). The thread's own CPU time is kept (`own_cpu_s`) to benchmark its cost.

    Liveness, where `watch` is given ({name: pid}, possibly empty): every sample also reads the state
    of each source's process and each watched one (10 us a process). A process seen stopped (state T or t: a
    SIGSTOP, a debugger) made no progress, whatever it was doing, so `stopped` counts, per name,
    the samples that saw it so; a stop shorter than one interval can pass unseen.
    """

    def __init__(self, sources, interval_s: float = 0.1, keep_series: bool = True, grows: bool = True,
                 machine: bool = False, watch: dict[str, int | None] | None = None):
        import threading
        self.sources, self.interval_s, self.keep_series = sources, interval_s, keep_series
        self.grows = grows  # False: a fixed set of processes (Caddy, linkem), no watching for new PIDs
        self.machine = machine  # also the whole machine's busy share (/proc/stat), as the role "machine"
        self.saturation = Saturation()
        self.samples: list[tuple[float, dict[str, tuple[float, float]]]] = []
        self.own_cpu_s = 0.0
        self.ticks = 0
        self._t_start = time.monotonic()
        self._t_stop: float | None = None
        self._procs: dict[int, tuple[str, object]] = {}
        self._live = watch is not None  # liveness asked for (the runner's sampler; not the browser's tree)
        self._watch = {name: pid for name, pid in (watch or {}).items() if pid}
        self.stopped: dict[str, int] = {}  # name (a role, or a watched process) -> samples that saw it stopped
        self._last: dict[int, tuple[str, float, float]] = {}
        self._pids: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    def _scan(self) -> None:
        try:
            found = self.sources()
        except Exception:  # a source that vanished: keep what is known
            return
        for r, p in found:
            self._procs.setdefault(p.pid, (r, p))

    def _new_pids(self) -> bool:
        pids = {x for x in os.listdir("/proc") if x.isdigit()}
        new = bool(pids - self._pids)
        self._pids = pids
        return new

    def _sample(self, rescan: bool = False) -> tuple[float, dict[str, tuple[float, float]]]:
        import psutil
        if rescan or (self.grows and self._new_pids()):
            self._scan()
        for pid, (r, p) in list(self._procs.items()):
            try:
                t = p.cpu_times()
            except psutil.Error:  # gone: its last reading stays
                del self._procs[pid]
                continue
            self._last[pid] = (r, t.user, t.system)
        if self._live:
            for name, pid in [*((r, pid) for pid, (r, _) in self._procs.items()), *self._watch.items()]:
                if process_state(pid) in ("T", "t"):
                    self.stopped[name] = self.stopped.get(name, 0) + 1
        out: dict[str, list[float]] = {}
        for r, u, s in self._last.values():
            acc = out.setdefault(r, [0.0, 0.0])
            acc[0] += u
            acc[1] += s
        now = time.monotonic()
        self.saturation.add(now, {r: u + s for r, (u, s) in out.items()}, _cpu_times() if self.machine else None)
        return now, {r: (round(u, 3), round(s, 3)) for r, (u, s) in out.items()}

    def mark(self, rescan: bool = False) -> tuple[float, dict[str, tuple[float, float]]]:
        """Take a sample now (and keep it in the series)."""
        with self._lock:
            c0 = time.thread_time()
            s = self._sample(rescan)
            self.ticks += 1
            if self.keep_series or not self.samples:
                self.samples.append(s)
            else:
                self.samples[-1:] = [s]
            self.own_cpu_s += time.thread_time() - c0
        return s

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.mark()

    def stall_problem(self) -> str | None:
        """Why the trial did not run under its conditions because a part of the testbed was stopped
        during it, or None."""
        if not self.stopped:
            return None
        parts = ", ".join(f"{name} in {n} sample(s), about {n * self.interval_s:.1f} s"
                          for name, n in sorted(self.stopped.items()))
        return (f"testbed stalled: a process was stopped (state T) during the trial: {parts}; the trial did "
                "not run under its conditions")

    def info(self, since: float | None = None, until: float | None = None) -> dict:
        """The sampler's own figures: interval, samples taken, its CPU and the time it ran; the time
        each role was saturated (within [since, until], monotonic s, where given)."""
        end = self._t_stop if self._t_stop is not None else time.monotonic()
        return {"interval_s": self.interval_s, "samples": self.ticks, "own_cpu_s": round(self.own_cpu_s, 4),
                "window_s": round(end - self._t_start, 3), "saturated_s": self.saturation.figures(since, until)}

    def start(self) -> "Sampler":
        self._t_start = time.monotonic()
        with self._lock:
            self._new_pids()
            self._scan()
        self._thread.start()
        return self

    def stop(self) -> tuple[float, dict[str, tuple[float, float]]]:
        """Stop the thread and take a last sample."""
        self._stop.set()
        self._thread.join()
        last = self.mark(rescan=True)
        self._t_stop = time.monotonic()
        return last

    def series(self, since: float | None = None) -> list[dict]:
        """Rows {t_s, role, user_s, system_s}: time from `since` (the first sample by default) and CPU
        seconds since then, per role."""
        if not self.samples:
            return []
        base_t = self.samples[0][0] if since is None else since
        # the reading at or just before the origin (nothing of the trial ran before it)
        base = next((v for t, v in reversed(self.samples) if t <= base_t), self.samples[0][1])
        rows = []
        for t, v in self.samples:
            if t < base_t:
                continue
            for r, (u, s) in sorted(v.items()):
                u0, s0 = base.get(r, (0.0, 0.0))
                rows.append({"t_s": round(t - base_t, 4), "role": r, "user_s": round(u - u0, 3),
                             "system_s": round(s - s0, 3)})
        return rows


def process_state(pid: int) -> str | None:
    """A process's state letter from /proc/PID/stat (R, S, D, T, t, Z...), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:data.rindex(b")") + 3].decode()


def tree_sources(root_pid: int):
    """Sources for a Sampler: a process and its descendants, each with its role."""
    import psutil
    cache: dict[int, str] = {}

    def sources():
        root = psutil.Process(root_pid)
        out = []
        for p in (root, *root.children(recursive=True)):
            if p.pid not in cache:
                try:
                    cache[p.pid] = role(p.cmdline())
                except psutil.Error:
                    continue
            out.append((cache[p.pid], p))
        return out
    return sources


def fixed_sources(pids: dict[str, int | None]):
    """Sources for a Sampler: named single processes (Caddy, linkem)."""
    import psutil
    procs = []
    for r, pid in pids.items():
        if pid:
            try:
                procs.append((r, psutil.Process(pid)))
            except psutil.Error:
                pass
    return lambda: procs


def difference(before: dict[str, dict] | None, after: dict[str, dict]) -> dict[str, dict]:
    """Per-role CPU (tree_cpu form) of `after` minus `before` (roles absent before started at 0)."""
    before = before or {}
    out = {}
    for r, a in after.items():
        b = before.get(r, {})
        out[r] = {"user_s": round(max(0.0, a["user_s"] - b.get("user_s", 0.0)), 3),
                  "system_s": round(max(0.0, a["system_s"] - b.get("system_s", 0.0)), 3),
                  "processes": a.get("processes", 1)}
    return out


def roles_of(cpu_json: str | dict | None) -> dict[str, dict]:
    """The per-role totals of a stored cpu_json (schema 4: flat; schema 5: under 'roles')."""
    import json
    if not cpu_json:
        return {}
    d = json.loads(cpu_json) if isinstance(cpu_json, str) else cpu_json
    return d.get("roles", d) if isinstance(d.get("roles"), dict) else d
