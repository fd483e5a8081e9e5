"""Which backend shapes, and where: one decision for the embedded testbed and for two machines.

    resolve(topology, requested, conditions, capabilities) -> Choice(backend, placement)

- topology 'embedded' (three namespaces on this machine): the link is in the router. netem where
  this kernel has sch_netem, linkem otherwise.
- topology 'two-machines': netem on the server (the seed's placement) where `plt-bench serve`
  was given --iface (it may shape) and its kernel has sch_netem (or only a rate is asked for);
  otherwise linkem on this client's ingress.
- In-order jitter (--no-reorder) is linkem's alone: netem reorders jittered packets.
- Each origin at its own distance (--origin-rtt, link.origins): linkem's in the router and on a
  two-machine client's ingress; under netem, a netem leaf a delay on the server's egress (the
  embedded testbed's; two machines take linkem for it).
- A rate that follows a trace is linkem's alone, on every kernel (netem cannot follow one), in the
  embedded testbed's router; two machines refuse traces for now.
- A queue discipline (--aqm) is the kernel's beneath netem where the router's kernel has sch_netem
  (codel, fq_codel, pie, pfifo: commands.netem_aqm_commands), linkem's elsewhere, in the embedded
  testbed's router; PIE with a burst other than 150 ms is linkem's alone (the kernel's is fixed).
  Competing flows (--cross) share the page's bottleneck on either (the kernel's through one IFB per
  direction that the page's egress and theirs redirect into). Two machines refuse both.
Every refusal is a UsageError naming the option and what to change, raised before anything is made.
"""

from __future__ import annotations

import dataclasses
import os

from .. import cmd
from ..conditions import Conditions
from ..errors import UsageError
from .aqm import kernel_refusal

BACKENDS = ("netem", "linkem")
ALIASES = {"tcconfig": "netem"}  # the mission's name for the netem backend (tcconfig configures the router)
LINK_CHOICES = ("auto", *BACKENDS, *ALIASES)
PLACEMENTS = {"embedded": {"netem": "router", "linkem": "router"},
              "two-machines": {"netem": "server", "linkem": "client"}}


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What the machines can do: netem where it would run (this kernel for the router; the
    server's in two-machine mode), and whether the server may shape (serve was given --iface)."""

    netem: bool
    server_may_shape: bool = False


@dataclasses.dataclass(frozen=True)
class Choice:
    backend: str    # netem | linkem
    placement: str  # router | server | client


def canonical(requested: str, option: str = "--link") -> str:
    """--link's value as a backend name (or 'auto'); UsageError for an unknown one."""
    name = ALIASES.get(requested, requested)
    if name not in ("auto", *BACKENDS):
        raise UsageError(f"{option}: unknown backend '{requested}'; expected one of {', '.join(LINK_CHOICES)}")
    return name


def resolve(topology: str, requested: str, conditions: list[Conditions], caps: Capabilities) -> Choice:
    name = canonical(requested)
    no_reorder = any(c.jitter_ms and not c.reorder for c in conditions)
    impaired = any(c.impaired for c in conditions)
    traced = [c for c in conditions if c.traced]
    if traced and topology != "embedded":
        raise UsageError("--trace-down/--trace-up: a trace is followed by linkem in this machine's testbed; with "
                         "--server-machine (two machines) give constant rates (--bw)")
    if traced and name == "netem":
        raise UsageError(f"--link {requested}: netem cannot follow a trace ({traced[0].label}); traces need --link "
                         "linkem or auto (linkem follows them on every kernel)")
    if traced:
        name = "linkem"
    far = [c for c in conditions if c.origin_rtt is not None]
    if far and topology != "embedded" and name == "netem":
        raise UsageError(f"--link {requested}: each origin at its own distance ({far[0].label}) is linkem's with "
                         "--server-machine (on this client's ingress); use --link linkem or auto")
    if far and topology != "embedded":
        name = "linkem"
    managed = [c for c in conditions if c.aqm is not None or c.cross is not None]
    if managed and topology != "embedded":
        raise UsageError("--aqm/--cross: a queue discipline and competing flows run in this machine's testbed; with "
                         "--server-machine (two machines) not yet")
    linkem_only = [c for c in conditions if _kernel_lacks(c.aqm)]
    if linkem_only and name == "netem":
        raise UsageError(f"--link {requested}: {linkem_only[0].label} needs linkem (the kernel's pie has a fixed "
                         "150 ms burst); use --link linkem or auto")
    if linkem_only:
        name = "linkem"
    if topology == "embedded":
        if name == "auto":
            name = "netem" if caps.netem and not no_reorder else "linkem"
        elif name == "netem" and not caps.netem:
            raise UsageError(f"--link {requested}: this kernel has no sch_netem (tcconfig always adds a netem qdisc); "
                             "use --link linkem, or run inside Debian's kernel: scripts/netem-vm plt-bench ...")
    elif topology == "two-machines":
        server_can = caps.server_may_shape and (caps.netem or not impaired)
        if name == "auto":
            name = "netem" if server_can and not no_reorder else "linkem"
        elif name == "netem":
            if not caps.server_may_shape:
                raise UsageError(f"--link {requested}: the server shapes only an interface named on its side; restart "
                                 "it with 'plt-bench serve --addr ADDR --iface IFACE'")
            if impaired and not caps.netem:
                raise UsageError(f"--link {requested}: the server's kernel has no sch_netem, so it cannot add delay, "
                                 "jitter or loss; use --link linkem (on this machine's ingress)")
    else:
        raise ValueError(f"unknown topology {topology!r}")
    if name == "netem" and no_reorder:
        raise UsageError("--no-reorder: netem reorders jittered packets; in-order jitter needs --link linkem")
    return Choice(name, PLACEMENTS[topology][name])


def _kernel_lacks(aqm) -> bool:
    """Whether the kernel's qdisc cannot run this discipline (link.aqm.Aqm) as asked (aqm.kernel_refusal)."""
    return aqm is not None and kernel_refusal(aqm) is not None


_NETEM: dict[str, bool] = {}


def netem_available() -> bool:
    """Probe sch_netem once, in a scratch namespace of ours (never on a host interface)."""
    if "v" not in _NETEM:
        ns = f"pbprobe-{os.getpid()}"
        cmd.run(["ip", "netns", "add", ns])
        try:
            cmd.run(["ip", "link", "set", "lo", "up"], ns=ns)
            res = cmd.run(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"], ns=ns, check=False)
            _NETEM["v"] = res.returncode == 0
        finally:
            cmd.run(["ip", "netns", "del", ns], check=False)
    return _NETEM["v"]
