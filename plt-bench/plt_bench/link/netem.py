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

from .. import cmd
from ..conditions import Conditions
from ..errors import LinkError, ServerError
from .aqm import Aqm
from .base import Link, kernel_rate, router_delivery_point, router_directions
from .commands import (AQM_LEAF, egress_redirect_commands, ifb_commands, netem_aqm_commands, qdisc_del_commands,
                       server_netem_commands, tcdel_commands, tcset_commands)
from . import origins
from .readback import (check_directions, check_managed, check_redirects, parse_qdisc_stats, parse_qdiscs,
                       parse_src_filters)


def run_commands(cmds: list[list[str]], ns: str | None = None) -> None:
    """Run a tool's commands: a removal may find nothing to remove, anything else must succeed."""
    for argv in cmds:
        removal = argv[:2] in (["tc", "qdisc"], ["tc", "class"], ["tc", "filter"]) and argv[2] == "del" \
            or argv[:3] == ["ip", "link", "delete"]
        res = cmd.run(argv, ns=ns, check=False)
        if res.returncode != 0 and not removal:
            raise LinkError(f"{' '.join(argv)} failed: {(res.stderr or res.stdout).strip()[-300:]}"
                            + ("; this kernel may lack sch_netem: use --link linkem" if "netem" in argv else ""))


def bottleneck_counters(aqm: Aqm, q: dict) -> dict:
    """A kernel discipline's counters (readback.parse_qdisc_stats) in linkem's bottleneck terms (pure):
    its own drops apart from a full buffer's (the kernel counts both in 'dropped')."""
    name = aqm.name
    over = q.get("overlimit_drops", q.get("dropped", 0) if name == "droptail" else 0)
    return {"aqm": name, "dequeued": q.get("sent_pkts", 0), "marks": q.get("ecn_mark", 0),
            "overlimit_drops": over, "aqm_drops": q.get("dropped", 0) - over}


class RouterNetem(Link):
    """tcconfig on each of the router's egress veths: htb rate, netem delay (RTT/2), jitter, loss, limit;
    each origin's own path delay (--origin-rtt) on the server's egress, a netem leaf a delay."""

    backend, tool, placement = "netem", "tcconfig", "router"
    detail = ("router egress veths (htb + netem, configured by tcconfig; under --aqm netem, htb and the "
              "discipline on an IFB per direction the veths redirect into, configured with tc)")

    def __init__(self, plan):
        self.plan = plan
        self.paths: dict[str, float] = {}

    def set_paths(self, paths: dict[str, float]) -> dict | None:
        """Each origin's path delay on the server's egress (origins.netem_commands: a netem leaf a delay,
        ahead of the link's shaping in the router), read back; {} removes them."""
        if paths == self.paths:
            return None
        self.paths = {}
        run_commands(origins.netem_commands(self.plan.server_if, paths), self.plan.server_ns)
        self.paths = dict(paths)
        return {"origins": self._paths_held()}

    def _paths_held(self) -> list[dict]:
        """The server's egress read back: each path's delay and packets (origins.netem_paths_read)."""
        ns, dev = self.plan.server_ns, self.plan.server_if
        shown = cmd.run(["tc", "-s", "qdisc", "show", "dev", dev], ns=ns).stdout
        stats = parse_qdisc_stats(shown)
        leaves = {q["handle"]: {**q, **stats.get(q["handle"], {})} for q in parse_qdiscs(shown)}
        filters = parse_src_filters(cmd.run(["tc", "filter", "show", "dev", dev], ns=ns).stdout)
        return origins.netem_paths_read(leaves, filters, self.paths)

    def apply(self, cond: Conditions) -> dict:
        ns = self.plan.router_ns
        self.set_paths({})  # every origin at the link's RTT until a load places its own
        self.cond = None
        for what, dev, rate, loss in self._directions(cond):
            ifb, feeders = self._shared(what)
            run_commands(tcdel_commands(dev) + self._undo_shared(what), ns)
            if cond.aqm is not None and rate is not None:  # the discipline at the bottleneck, beneath netem
                if not self._ifbs:
                    run_commands([c for d in (self.plan.down_ifb, self.plan.up_ifb) for c in ifb_commands(d)], ns)
                    self._ifbs = True
                run_commands(netem_aqm_commands(ifb, rate, cond.delay_ms, cond.jitter_ms, cond.jitter_dist, loss,
                                                cond.aqm, cond.ecn, cond.queue_for(rate))
                             + egress_redirect_commands(feeders if cond.cross is not None else [dev], ifb), ns)
                continue
            if rate is None and not cond.impaired:
                continue
            run_commands(tcset_commands(dev, rate, cond.delay_ms, cond.jitter_ms, cond.jitter_dist, loss,
                                        cond.queue_for(rate)), ns)
        result = self.verify(cond)
        self.cond = cond
        return result

    _ifbs = False  # the two IFBs made (in the router's namespace: they go with it)
    cond: Conditions | None = None  # the conditions applied and read back (None: none, or being changed)

    def _undo_shared(self, what: str) -> list[list[str]]:
        """Removing a direction's shared bottleneck (its IFB's qdiscs, its egresses' redirects): only
        once the IFBs were made; before, nothing of it exists to remove."""
        if not self._ifbs:
            return []
        ifb, feeders = self._shared(what)
        return [c for d in (*feeders, ifb) for c in qdisc_del_commands(d)]

    def _directions(self, cond: Conditions) -> list[tuple[str, str, int | None, float]]:
        """router_directions with the kernel's rate kept under a discipline too: here the kernel holds it."""
        return [(what, dev, kernel_rate(cond.down if what == "downlink" else cond.up), loss)
                for what, dev, _, loss in router_directions(self.plan, cond)]

    def _shared(self, what: str) -> tuple[str, list[str]]:
        """A direction's IFB under a discipline, and the egresses it takes in: the page's veth, and the
        competing flows' (link.cross) towards the same side (they reach the router on veths of their
        own; through the IFB they share the page's one bottleneck)."""
        p = self.plan
        return ((p.down_ifb, [p.down_if, p.router_xclient_if]) if what == "downlink"
                else (p.up_ifb, [p.up_if, p.router_xserver_if]))

    def verify(self, cond: Conditions) -> dict:
        """Read the qdisc state back; raise LinkError unless it is what cond asks for."""
        ns, out = self.plan.router_ns, {}
        plain = []
        for what, dev, rate, loss in self._directions(cond):
            if cond.aqm is not None and rate is not None:
                ifb, feeders = self._shared(what)
                out[what] = check_managed(ns, ifb, cond, rate, loss, what)
                out[what]["redirected"] = check_redirects(ns, feeders if cond.cross is not None else [dev], ifb, what)
            else:
                plain.append((what, dev, rate, loss))
        out.update(check_directions(ns, plain, cond, netem=True))
        return {"backend": self.backend, "tool": self.tool, "conditions": cond.label, **out}

    def bottleneck(self, direction: str = "downlink") -> dict | None:
        """The discipline's counters now ('dropped', 'backlog_bytes', 'ecn_mark' where it reports it,
        readback.parse_qdisc_stats), in the direction's bottleneck beneath netem; None when there is none."""
        ifb, _ = self._shared(direction)
        stats = parse_qdisc_stats(cmd.run(["tc", "-s", "qdisc", "show", "dev", ifb], ns=self.plan.router_ns).stdout)
        return stats.get(AQM_LEAF)

    def snapshot(self) -> dict | None:
        """Under a discipline: what it did so far in each direction, in linkem's terms (runner.link_delta
        makes a trial's share of it): packets sent on, drops of its own and of a full buffer, CE marks.
        The kernel keeps no sojourn sum: a trial's standing delay is linkem's alone (the link check
        measures the kernel's from its backlog). None without a discipline (nothing here to count)."""
        cond = self.cond
        if cond is None or (cond.aqm is None and not self.paths):
            return None
        dirs: dict = {}
        for short, what in (("down", "downlink"), ("up", "uplink")):
            if cond.aqm is not None and (b := self.bottleneck(what)) is not None:
                dirs[short] = {"bottleneck": bottleneck_counters(cond.aqm, b)}
        if self.paths:  # each origin's own path, in linkem's form: its packets on the downlink's leg
            dirs.setdefault("down", {})["paths"] = self._paths_held()
        return {"dirs": dirs}

    def delivery_point(self) -> tuple[str, str]:
        return router_delivery_point(self.plan)

    def close(self) -> None:
        run_commands(origins.netem_commands(self.plan.server_if, {}), self.plan.server_ns)
        self.paths = {}
        for what, dev, _, _ in router_directions(self.plan, Conditions(None, None)):
            run_commands(tcdel_commands(dev) + self._undo_shared(what), self.plan.router_ns)
        if self._ifbs:
            run_commands([["ip", "link", "delete", d] for d in (self.plan.down_ifb, self.plan.up_ifb)],
                         self.plan.router_ns)
            self._ifbs = False


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
        return self.control.call("apply", conditions=cond.as_dict(), client=self.plan.client_ip) | {
            "placement": self.placement}

    def close(self) -> None:
        try:
            self.control.call("clear")
        except ServerError:
            pass  # the server removes a client's shaping when its connection ends anyway
