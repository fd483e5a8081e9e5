"""What every link backend is: one interface, whatever shapes and wherever it shapes.

A backend is built for one testbed; its life, in order:
- `open()`: what outlives one set of conditions;
- `apply(cond)`: set the conditions and return what was read back (LinkError if the kernel or the
  emulator disagrees); each direction's rate is a kind (conditions.ConstantRate: htb or netem's;
  conditions.TraceRate: linkem's), and `kernel_rate` says which the kernel sets;
- per trial: `snapshot()` before and after (the emulator's counters; the trial's own maxima), and
  the mark: `mark_signal()`, sent by the browser's worker the instant before it navigates, starts
  any trace over (`mark()` does it from this process, for the link check);
- `link.verify.verify(plan, cond, link=...)`: the live link measured with real packets;
- `close()`: everything it made removed.
A next kind of rate (a schedule, a loss trace, Gilbert-Elliott bursts) is a class in
plt_bench.conditions and what the emulator does with it. The names say honestly what shaped
and where; they go into every campaign's metadata:
- backend: which emulator adds delay, jitter and loss ('netem' in the kernel, or 'linkem');
- tool: what configured it ('tcconfig', 'tc', 'linkem');
- placement: where it sits ('router' of the embedded testbed, 'server' or 'client' host).
"""

from __future__ import annotations

from ..conditions import Conditions, ConstantRate, Rate
from ..errors import LinkError


class Link:
    backend: str = ""
    tool: str = ""
    placement: str = ""
    detail: str = ""          # the placement in words, for the metadata and the console
    jitter_legs = 2           # how many times a round trip draws the jitter (verify's expected RTT spread)
    ping_user_latency = False  # ping -U: the kernel's receive timestamp precedes a delay on the receiver's ingress
    supports_no_reorder = False
    traces: dict = {}         # the traces its conditions may follow, by hash (traces.by_hash): the testbed's

    def open(self) -> None:
        """Prepare what outlives one set of conditions (nothing, for most backends)."""

    # each origin at its own distance (link.origins): {address: path delay, ms of round trip}; apply() puts
    # every origin back at the link's RTT, set_paths() the load's own
    paths: dict = {}

    def set_paths(self, paths: dict[str, float]) -> dict | None:
        """Put these addresses (each an origin's) at their own distance beyond the link's RTT, under the
        conditions applied; {} puts them all back. What was read back, or None when nothing changed.
        LinkError from a backend that cannot (linkem's alone, for now: link.resolve chooses it)."""
        if paths:
            raise LinkError(f"--origin-rtt: the {self.backend} backend ({self.placement}) cannot put origins at "
                            "their own distance; use --link linkem")
        return None

    def apply(self, cond: Conditions) -> dict:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def describe(self) -> dict:
        """The link's entries of the metadata."""
        return {"link_backend": self.backend, "link_tool": self.tool, "link_placement": self.placement,
                "link_detail": self.detail}

    # an emulator process, if the backend has one: its CPU is sampled with each trial, its death fails it
    def pid(self) -> int | None:
        return None

    def alive(self) -> bool:
        return True

    def died_reason(self) -> str | None:
        return None

    def snapshot(self) -> dict | None:
        return None

    def mark_signal(self) -> tuple[int, int] | None:
        """(pid, signal) that starts the link's traces over when another process sends it: the browser's
        worker sends it the instant before the trial's navigation, so every trial meets the trace from
        its beginning. None: the link has nothing to start over."""
        return None

    def mark(self) -> dict | None:
        """Start any trace over now (this process's mark, for the link check); the snapshot after it."""
        return self.snapshot()

    def delivery_point(self) -> tuple[str | None, str] | None:
        """(network namespace, device) whose transmit counter is what the link delivers towards the
        client, after rate, delay and loss (link.counters); None where this process cannot read
        such a counter (the link on another machine, or loss applied after the shaper's device)."""
        return None


def router_delivery_point(plan) -> tuple[str, str]:
    """The embedded testbed's router: its downlink veth sends what the link delivers to the client
    (netem's leaf and linkem's verdicts both come before the device's transmit)."""
    return plan.router_ns, plan.down_if


def router_directions(plan, cond: Conditions) -> list[tuple[str, str, int | None, float]]:
    """(name, egress device, kernel rate, loss %) of each direction in the embedded testbed's router:
    the downlink leaves the router towards the client, the uplink towards the server. The kernel rate
    is a constant rate's (htb); a trace's direction has none there (linkem follows the trace), nor has a
    queue discipline's (linkem holds the bottleneck at the rate: link.aqm)."""
    managed = cond.aqm is not None
    return [("downlink", plan.down_if, None if managed else kernel_rate(cond.down), cond.loss_down_pct),
            ("uplink", plan.up_if, None if managed else kernel_rate(cond.up), cond.loss_up_pct)]


def kernel_rate(rate: Rate | None) -> int | None:
    """The rate htb sets for a direction: a constant rate's; None for none or a trace's."""
    return rate.bps if isinstance(rate, ConstantRate) else None
