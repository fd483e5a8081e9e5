"""The netem backend: the kernel's sch_netem adds delay, jitter and loss under an htb rate.

- In the embedded testbed's router (placement 'router'), tcconfig configures each egress veth:
  its commands are built by tcconfig itself, in-process (commands.tcset_commands), and run here,
  so a failing one is an error at once (tcset as a program prints the error and exits 0).
- On a two-machine server (placement 'server'), tc is driven directly (commands.server_netem_commands):
  tcconfig cannot put several ports of one address into one class, and the link must carry the
  test traffic only, never SSH. `plt-bench serve` runs ServerNetem; the client holds a ServerNetemLink
  that asks for it over the control channel.
Both read the result back from the kernel (readback.check_directions).
"""

from __future__ import annotations

import dataclasses

from .. import cmd
from ..conditions import Conditions
from ..errors import LinkError, ServerError
from .base import Link, router_delivery_point, router_directions
from .commands import server_netem_commands, tcdel_commands, tcset_commands
from .readback import check_directions


def run_commands(cmds: list[list[str]], ns: str | None = None) -> None:
    """Run a tool's commands: a removal may find nothing to remove, anything else must succeed."""
    for argv in cmds:
        removal = argv[:2] in (["tc", "qdisc"], ["tc", "class"], ["tc", "filter"]) and argv[2] == "del" \
            or argv[:3] == ["ip", "link", "delete"]
        res = cmd.run(argv, ns=ns, check=False)
        if res.returncode != 0 and not removal:
            raise LinkError(f"{' '.join(argv)} failed: {(res.stderr or res.stdout).strip()[-300:]}"
                            + ("; this kernel may lack sch_netem: use --link linkem" if "netem" in argv else ""))


class RouterNetem(Link):
    """tcconfig on each of the router's egress veths: htb rate, netem delay (RTT/2), jitter, loss, limit."""

    backend, tool, placement = "netem", "tcconfig", "router"
    detail = "router egress veths (htb + netem, configured by tcconfig)"

    def __init__(self, plan):
        self.plan = plan

    def apply(self, cond: Conditions) -> dict:
        ns = self.plan.router_ns
        for _, dev, rate, loss in router_directions(self.plan, cond):
            run_commands(tcdel_commands(dev), ns)
            if rate is None and not cond.impaired:
                continue
            run_commands(tcset_commands(dev, rate, cond.delay_ms, cond.jitter_ms, cond.jitter_dist, loss,
                                        cond.queue_for(rate)), ns)
        return self.verify(cond)

    def verify(self, cond: Conditions) -> dict:
        """Read the qdisc state back; raise LinkError unless it is what cond asks for."""
        return {"backend": self.backend, "tool": self.tool, "conditions": cond.label,
                **check_directions(self.plan.router_ns, router_directions(self.plan, cond), cond, netem=True)}

    def delivery_point(self) -> tuple[str, str]:
        return router_delivery_point(self.plan)

    def close(self) -> None:
        for _, dev, _, _ in router_directions(self.plan, Conditions(None, None)):
            run_commands(tcdel_commands(dev), self.plan.router_ns)


class ServerNetem:
    """On the server (`plt-bench serve --iface`): the downlink on iface's egress, the uplink on an
    IFB fed by iface's ingress, only the test traffic to and from the client."""

    def __init__(self, iface: str, ifb: str):
        self.iface, self.ifb = iface, ifb

    def apply(self, cond: Conditions, client: str) -> dict:
        run_commands(server_netem_commands(self.iface, self.ifb, client, cond))
        return self.verify(cond)

    def verify(self, cond: Conditions) -> dict:
        return {"backend": "netem", "tool": "tc", "conditions": cond.label, **check_directions(None, (
            ("downlink", self.iface, cond.rate_down_bps, cond.loss_down_pct),
            ("uplink", self.ifb, cond.rate_up_bps, cond.loss_up_pct)), cond, netem=True)}


class ServerNetemLink(Link):
    """The client's side of ServerNetem: asks `plt-bench serve` to shape, over the control channel."""

    backend, tool, placement = "netem", "tc", "server"
    detail = "server egress (htb + netem), the uplink on the server's ingress through an IFB"

    def __init__(self, plan, control):
        self.plan, self.control = plan, control

    def apply(self, cond: Conditions) -> dict:
        return self.control.call("apply", conditions=dataclasses.asdict(cond), client=self.plan.client_ip) | {
            "placement": self.placement}

    def close(self) -> None:
        try:
            self.control.call("clear")
        except ServerError:
            pass  # the server removes a client's shaping when its connection ends anyway
