"""CPU: the cost of a trial per role (the browser's processes read just before it quits, since
their totals vanish with them; Caddy and linkem as differences across the trial; psutil sees
every PID across namespaces), and the machine's state before a trial or a link verification."""

from __future__ import annotations

import os
import time

ROLES = ("browser", "renderer", "network", "gpu", "utility", "zygote", "chromedriver", "other")


def role(cmdline: list[str]) -> str:
    """The role of a Chromium process from its command line (--type=..., the network service's sub-type)."""
    args = " ".join(cmdline)
    if "chromedriver" in (cmdline[0] if cmdline else ""):
        return "chromedriver"
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
    import psutil
    out: dict[str, dict[str, float]] = {}
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for p in procs:
        try:
            r = role(p.cmdline())
            t = p.cpu_times()
        except psutil.Error:
            continue
        d = out.setdefault(r, {"user_s": 0.0, "system_s": 0.0, "processes": 0})
        d["user_s"] += t.user + getattr(t, "children_user", 0.0)
        d["system_s"] += t.system + getattr(t, "children_system", 0.0)
        d["processes"] += 1
    return {k: {"user_s": round(v["user_s"], 3), "system_s": round(v["system_s"], 3), "processes": v["processes"]}
            for k, v in out.items()}


def process_cpu(pid: int | None) -> tuple[float, float] | None:
    """(user, system) CPU seconds of one process, or None if it is gone."""
    import psutil
    if pid is None:
        return None
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return t.user, t.system


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


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


def cpu_by_role(browser: dict | None, caddy0, caddy1, link_stats: dict | None) -> dict | None:
    """The trial's CPU seconds per role: the browser's tree, Caddy's difference, linkem's difference."""
    out = dict(browser or {})
    if caddy0 and caddy1:
        out["caddy"] = {"user_s": round(caddy1[0] - caddy0[0], 3), "system_s": round(caddy1[1] - caddy0[1], 3),
                        "processes": 1}
    if link_stats and "cpu_s" in link_stats:
        out["linkem"] = {"total_s": link_stats["cpu_s"], "processes": 1}
    return out or None
