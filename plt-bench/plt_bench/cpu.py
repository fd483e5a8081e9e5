"""CPU cost of a trial, per role: the browser's processes read just before it quits (their
totals vanish with them), Caddy's as the difference across the trial. psutil sees every PID
across namespaces."""

from __future__ import annotations

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
