"""The browser's control group (issue 45): where the kernel's groups are, the settings of a budget
as file writes (pure, unit-tested without root), and the group's life (made, joined, read, removed).

cgroup v1 (this machine: one hierarchy per controller, `/sys/fs/cgroup/cpu`, `cpuset`, `cpuacct`,
`memory`) or v2 (one hierarchy: `cpu.max`, `cpuset.cpus`, `memory.max`), whichever holds the cpu
controller. A group is made below the group the maker is in (a container's own), one per testbed,
named for it (`plt-bench.pbN`), so `clean` finds it by name; every trial's WebDriver joins it as
it starts, and with it every browser process it starts (children inherit a group); plt-bench's own
processes, the servers and the link emulator stay outside.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EnvironmentProblem
from .budget import Quota

GROUP_PREFIX = "plt-bench."
V1_CONTROLLERS = ("cpu", "cpuset", "cpuacct", "memory")


class CgroupError(EnvironmentProblem):
    """No usable CPU controller, or the kernel refused a setting."""


@dataclass(frozen=True)
class Layout:
    """Where the groups go: version 1 or 2, and per controller the folder below which ours are made
    (the maker's own group in that hierarchy). v2: one folder for every controller."""
    version: int
    bases: dict[str, Path] = field(default_factory=dict)  # controller -> the maker's group's folder

    def folders(self, name: str) -> dict[str, Path]:
        """The group's folder in each hierarchy (v2: one, under "cgroup2")."""
        if self.version == 2:
            return {"cgroup2": self.bases["cgroup2"] / name}
        return {c: base / name for c, base in self.bases.items()}


def parse_mounts(mounts: str) -> tuple[dict[str, Path], Path | None]:
    """/proc/mounts (pure): each v1 controller's mount point, and cgroup2's."""
    v1: dict[str, Path] = {}
    v2 = None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        where, kind, opts = parts[1], parts[2], parts[3].split(",")
        if kind == "cgroup":
            for c in opts:
                if c in V1_CONTROLLERS:
                    v1[c] = Path(where)
        elif kind == "cgroup2" and v2 is None:
            v2 = Path(where)
    return v1, v2


def parse_own(proc_cgroup: str) -> tuple[dict[str, str], str | None]:
    """/proc/self/cgroup (pure): the maker's group per v1 controller, and its v2 group."""
    v1: dict[str, str] = {}
    v2 = None
    for line in proc_cgroup.splitlines():
        num, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if not num:
            continue
        if ctrls == "":
            v2 = path
        for c in ctrls.split(","):
            if c in V1_CONTROLLERS:
                v1[c] = path
    return v1, v2


def choose(mounts: str, proc_cgroup: str, v2_controllers: str | None) -> Layout:
    """The layout (pure): v1 where cpu and cpuset are v1 controllers (this machine); else v2 where
    cgroup2 offers cpu and cpuset; CgroupError naming what is missing otherwise."""
    v1, v2 = parse_mounts(mounts)
    own1, own2 = parse_own(proc_cgroup)
    if "cpu" in v1 and "cpuset" in v1:
        return Layout(1, {c: v1[c] / own1.get(c, "/").lstrip("/") for c in V1_CONTROLLERS if c in v1})
    offered = set((v2_controllers or "").split())
    if v2 is not None and {"cpu", "cpuset"} <= offered:
        return Layout(2, {"cgroup2": v2 / (own2 or "/").lstrip("/")})
    missing = "no cgroup v1 cpu and cpuset controllers mounted" + (
        f", and cgroup2 at {v2} offers {' '.join(sorted(offered)) or 'no controllers'} (cpu and cpuset needed)"
        if v2 is not None else ", and no cgroup2 mounted")
    raise CgroupError(f"--cpu: this machine gives no CPU controller: {missing}")


def settings(layout: Layout, name: str, quota: Quota, cpus: list[int], mems: str,
             memory_bytes: int | None = None) -> list[tuple[Path, str]]:
    """The writes that set a group's budget, in the order the kernel needs (pure): its CPUs (and
    v1's memory nodes) before any process joins; the quota lifted before a new period, then set;
    the memory cap, or none."""
    cpu_list = ",".join(str(c) for c in cpus)
    f = layout.folders(name)
    if layout.version == 2:
        g = f["cgroup2"]
        return [(g / "cpuset.cpus", cpu_list),
                (g / "cpu.max", f"{quota.quota_us if quota.quota_us is not None else 'max'} {quota.period_us}"),
                (g / "memory.max", str(memory_bytes) if memory_bytes else "max")]
    out = [(f["cpuset"] / "cpuset.cpus", cpu_list), (f["cpuset"] / "cpuset.mems", mems),
           (f["cpu"] / "cpu.cfs_quota_us", "-1"), (f["cpu"] / "cpu.cfs_period_us", str(quota.period_us)),
           (f["cpu"] / "cpu.cfs_quota_us", str(quota.quota_us if quota.quota_us is not None else -1))]
    if "memory" in f:
        out.append((f["memory"] / "memory.limit_in_bytes", str(memory_bytes) if memory_bytes else "-1"))
    return out


def parse_stat(text: str) -> dict[str, int]:
    """cpu.stat (pure): its counters by name (v1: nr_periods, nr_throttled, throttled_time in ns;
    v2: usage_usec, nr_periods, nr_throttled, throttled_usec, ...)."""
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if v.strip().lstrip("-").isdigit():
            out[k] = int(v)
    return out


@dataclass(frozen=True)
class Reading:
    """The group's counters at one moment."""
    usage_ns: int        # CPU time its processes used
    periods: int         # enforcement periods in which it ran
    throttled: int       # periods in which it ran out of quota
    throttled_ns: int    # time it waited for its next period

    def since(self, before: "Reading") -> "Reading":
        return Reading(self.usage_ns - before.usage_ns, self.periods - before.periods,
                       self.throttled - before.throttled, self.throttled_ns - before.throttled_ns)


def reading_from(cpu_stat: str, used_ns: int) -> Reading:
    """A Reading from cpu.stat's text (v1 counts the throttled time in ns, v2 in us) and the group's
    CPU time (usage_ns) (pure)."""
    s = parse_stat(cpu_stat)
    throttled_ns = s["throttled_time"] if "throttled_time" in s else s.get("throttled_usec", 0) * 1000
    return Reading(used_ns, s.get("nr_periods", 0), s.get("nr_throttled", 0), throttled_ns)


def group_name(prefix: str) -> str:
    return f"{GROUP_PREFIX}{prefix}"


def mount_commands(host_mounts: str) -> list[list[str]]:
    """The commands that mount, in this process's own mount namespace, the group hierarchies the
    machine mounts (PID 1's mounts: /proc/1/mounts), where they were, with the file system they sit
    in (a tmpfs at /sys/fs/cgroup) (pure). Only the hierarchies a budget uses (V1_CONTROLLERS and
    cgroup2); a v1 hierarchy mounted again is the same hierarchy, with the same groups."""
    v1, v2 = parse_mounts(host_mounts)
    wanted = set(v1.values()) | ({v2} if v2 is not None else set())
    out: list[list[str]] = []
    for line in host_mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        where, kind, opts = Path(parts[1]), parts[2], parts[3]
        if kind == "tmpfs" and any(where in w.parents for w in wanted):
            out.append(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)])
        elif kind in ("cgroup", "cgroup2") and where in wanted:
            out += [["mkdir", "-p", str(where)], ["mount", "-t", kind, "-o", opts, kind, str(where)]]
    return out


def machine_layout() -> Layout:
    """This machine's layout, read from /proc and /sys; CgroupError when it has no CPU controller.

    A process run by `ip netns exec` (a two-machine client in a namespace) has a mount namespace
    of its own whose fresh /sys hides the groups: there the machine's hierarchies (PID 1's mounts)
    are mounted again, at the same places (mount_commands), in that namespace alone, which goes
    with its last process; the group this process is in is the same (a mount namespace does not
    move a process between groups)."""
    from .. import cmd
    own = Path("/proc/self/cgroup").read_text()

    def layout(mounts: str) -> Layout:
        _, v2 = parse_mounts(mounts)
        ctrls = None
        if v2 is not None:
            own2 = parse_own(own)[1] or "/"
            try:
                ctrls = (v2 / own2.lstrip("/") / "cgroup.controllers").read_text()
            except OSError:
                ctrls = None
        return choose(mounts, own, ctrls)
    mine = Path("/proc/self/mounts").read_text()
    try:
        return layout(mine)
    except CgroupError:
        host = Path("/proc/1/mounts").read_text()
        commands = mount_commands(host)
        if not commands or host == mine:
            raise  # nothing hidden: nothing there
    try:
        cmd.run_all(commands)
    except Exception as e:
        raise CgroupError(f"--cpu: this process's mount namespace hides the machine's control groups and mounting "
                          f"them here failed ({e})") from None
    return layout(Path("/proc/self/mounts").read_text())


def usage_ns(kind: str, text: str) -> int:
    """A group's CPU time in ns from its usage file's text (pure): v1's cpuacct.usage, v2's cpu.stat."""
    if kind == "cpuacct":
        return int(text.strip() or 0)
    return parse_stat(text).get("usage_usec", 0) * 1000


class Group:
    """One testbed's browser group: made with a budget, joined by each trial's WebDriver, read around
    each trial, and removed (its processes ended first) on every ending."""

    def __init__(self, prefix: str, layout: Layout | None = None) -> None:
        self.layout = layout or machine_layout()
        self.name = group_name(prefix)
        self.folders = self.layout.folders(self.name)

    def make(self) -> "Group":
        for folder in self.folders.values():
            folder.mkdir(exist_ok=True)
        if self.layout.version == 1 and "cpuset" in self.folders:  # a new cpuset group starts empty
            parent = self.folders["cpuset"].parent
            for f in ("cpuset.cpus", "cpuset.mems"):
                _write(self.folders["cpuset"] / f, (parent / f).read_text().strip())
        return self

    def set(self, quota: Quota, cpus: list[int], memory_bytes: int | None = None) -> None:
        mems = "0"
        if self.layout.version == 1:
            mems = (self.folders["cpuset"].parent / "cpuset.mems").read_text().strip() or "0"
        for path, value in settings(self.layout, self.name, quota, cpus, mems, memory_bytes):
            _write(path, value)

    def join(self, pid: int) -> None:
        """Put a process (and so the children it starts from now on) into the group, in every hierarchy."""
        for folder in self.folders.values():
            _write(folder / "cgroup.procs", str(pid))

    def usage_file(self) -> tuple[Path, str]:
        """The file that holds the group's CPU time, and its kind (usage_ns)."""
        if self.layout.version == 2:
            return self.folders["cgroup2"] / "cpu.stat", "cpu.stat"
        return self.folders["cpuacct"] / "cpuacct.usage", "cpuacct"

    def pids(self) -> set[int]:
        out: set[int] = set()
        for folder in self.folders.values():
            try:
                out |= {int(x) for x in (folder / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return out

    def read(self) -> Reading:
        stat = (self.folders["cgroup2" if self.layout.version == 2 else "cpu"] / "cpu.stat").read_text()
        path, kind = self.usage_file()
        return reading_from(stat, usage_ns(kind, stat if kind == "cpu.stat" else path.read_text()))

    def remove(self) -> list[int]:
        """End the group's processes, then remove its folders; returns what would not die."""
        from .. import procs
        left = procs.kill_and_reap(self.pids(), timeout_s=5.0, until_reaped=True)
        for folder in self.folders.values():
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
        return left


def joining(service_cls, procs_files):
    """A Selenium Service class whose WebDriver process joins the group (its cgroup.procs files) as
    soon as it is started: before any browser, which the driver starts only when the session is
    asked for, after start() returns. Every browser process is then the group's by inheritance.
    The class itself when there is no group."""
    if not procs_files:
        return service_cls

    class Joining(service_cls):
        def _start_process(self, path):
            super()._start_process(path)
            try:
                for f in procs_files:
                    _write(Path(f), str(self.process.pid))
            except BaseException:
                self.process.kill()
                self.process.wait()
                raise
    return Joining


def _write(path: Path, value: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as e:
        raise CgroupError(f"the kernel refused {value!r} in {path}: {os.strerror(e.errno or 0)}") from e


def leftover_groups(layout: Layout) -> list[str]:
    """Our groups' names in every hierarchy (for clean, which keeps a live testbed's)."""
    names: set[str] = set()
    for base in layout.bases.values():
        try:
            names |= {p.name for p in base.iterdir() if p.is_dir() and p.name.startswith(GROUP_PREFIX)}
        except OSError:
            pass
    return sorted(names)


def remove_testbed_group(prefix: str) -> bool:
    """A testbed's group wherever it is left (clean, teardown): its processes ended, its folders
    removed. False when there was none (or no CPU controller to hold one)."""
    try:
        group = Group(prefix)
    except (CgroupError, OSError):
        return False
    if not any(f.is_dir() for f in group.folders.values()):
        return False
    group.remove()
    return True


def testbed_prefixes_with_groups() -> set[str]:
    """The testbeds (pbN) that have a group on this machine."""
    try:
        layout = machine_layout()
    except (CgroupError, OSError):
        return set()
    return {n[len(GROUP_PREFIX):] for n in leftover_groups(layout)}
