"""The visitor a load is for, as one object: its CPU budget, its memory, its screen, its device.

A Visitor is a record (what the next load is for); a VisitorGroup is the browser's control group on
this host that holds a budgeted visitor's browser to its budget (made on the first budget, removed
with the testbed), and what a load under it used. The testbed holds one of each and hands the
browser seam the worker's fields (browsers.visit.Visit.budget); the trial reads the quota it ran
under (its timeout grows by the budget's factor).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from . import budget as budget_mod
from .cgroup import Group, Reading
from .profiles import Screen, get as profile_of
from ..cpu import own_cpus
from ..errors import UsageError

if TYPE_CHECKING:
    from ..conditions import Cell


@dataclasses.dataclass(frozen=True)
class Visitor:
    """Who a load is for. budget_cores: the browser's CPU budget, a fraction of a core on each of
    `cores` CPUs (device.budget); None: the machine's whole CPU. memory_bytes: its group's memory cap
    (None: none). screen: the screen the browser emulates (None: the fixed window). calibration: a
    named device's budget as this host measured it (device.calibrate), which each answer carries."""

    budget_cores: float | None = None
    cores: int = 1
    memory_bytes: int | None = None
    screen: Screen | None = None
    calibration: object = None  # device.calibrate.Calibration (which drives a testbed to a visitor: it imports this)

    @property
    def quota(self) -> budget_mod.Quota | None:
        """What the kernel is asked for the budget (None: no budget)."""
        return None if self.budget_cores is None else budget_mod.quota_for(self.budget_cores, self.cores)

    @classmethod
    def of_cell(cls, cell: "Cell", calibrations: dict) -> "Visitor":
        """A cell's visitor: its --cpu budget, or its device's (the budget calibrated on this host, the
        profile's memory and screen). LookupError for a device this host has not calibrated."""
        if not cell.device:
            return cls(cell.cpu, cell.cores)
        calibration, profile = calibrations.get(cell.device), profile_of(cell.device)
        if calibration is None:
            raise LookupError(f"the device {cell.device} was not calibrated on this host")
        return cls(calibration.budget_cores, 1, profile.memory_bytes, profile.screen, calibration)


class VisitorGroup:
    """The browser's control group on this host (device.cgroup): made on the first budget, it holds
    every process a budgeted trial's WebDriver starts (the worker joins them), and nothing else."""

    def __init__(self, prefix: str, on_made: Callable[[Callable[[], object]], None]):
        """on_made: given the group's removal once the group is made (the testbed's cleanups)."""
        self.prefix, self.on_made = prefix, on_made
        self.group: Group | None = None
        self.cpus: list[int] = []
        self.request: dict = {}  # what a budgeted load asks of the worker

    def apply(self, visitor: Visitor) -> budget_mod.Quota | None:
        """The visitor's budget for the loads that follow: budget_cores of a core on each of `cores` CPUs
        (this process's highest-numbered ones). Returns the Quota applied; None leaves the browser
        outside any group of ours. UsageError for more cores than this process may use; CgroupError
        where the machine has no CPU controller."""
        quota = visitor.quota
        if quota is None:
            return None
        mine = own_cpus()
        if visitor.cores > len(mine):
            raise UsageError(f"--cores: {visitor.cores}; this process may run on {len(mine)} CPU(s) "
                             f"({', '.join(map(str, mine))})")
        if self.group is None:
            group = Group(self.prefix)
            self.on_made(group.remove)
            self.group = group.make()
            # through this process's root: `ip netns exec` mounts the namespace's own /sys over the
            # worker's, which hides the control groups' file systems from it
            root = f"/proc/{os.getpid()}/root"
            usage, kind = group.usage_file()
            self.request = {"cgroup_procs": [f"{root}{f / 'cgroup.procs'}" for f in group.folders.values()],
                            "cpu_loop": {"usage": [f"{root}{usage}", kind]}}
        self.cpus = list(mine[-visitor.cores:])
        self.group.set(quota, self.cpus, visitor.memory_bytes)
        return quota

    def start(self, worker_pid: int | None) -> tuple[Reading, int | None]:
        """Before a budgeted load: the group's counters and the browser namespace's receive-buffer drops."""
        return self.group.read(), _rcvbuf_errors(worker_pid)

    def used(self, quota: budget_mod.Quota, before: tuple[Reading, int | None], worker_pid: int | None) -> dict:
        """The group's own counters over a whole load (its launch included): the answer's cpu_group."""
        used = self.group.read().since(before[0])
        drops = _rcvbuf_errors(worker_pid)
        return {"budget_cores": quota.budget_cores, "applied_cores": quota.applied_cores, "cores": quota.cores,
                "cpus": self.cpus, "quota_us": quota.quota_us, "period_us": quota.period_us,
                "usage_ms": used.usage_ns / 1e6, "periods": used.periods, "throttled_periods": used.throttled,
                "throttled_ms": used.throttled_ns / 1e6,
                "udp_rcvbuf_errors": drops - before[1] if None not in (drops, before[1]) else None}


def _rcvbuf_errors(worker_pid: int | None) -> int | None:
    """UDP datagrams the browser's namespace dropped for a full receive buffer so far (the worker lives
    there: its /proc/PID/net is the namespace's)."""
    try:
        return budget_mod.rcvbuf_errors(Path(f"/proc/{worker_pid}/net/snmp").read_text())
    except (OSError, TypeError):
        return None
