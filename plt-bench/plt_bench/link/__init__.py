"""The shaped link between client and server: everything about it lives in this package.

    commands   pure builders of every command (tc htb/pfifo/netem/IFB/u32, iptables NFQUEUE, and
               tcconfig's own tcset/tcdel commands, built by tcconfig in-process)
    readback   tc's output parsed, and the kernel's state judged against the conditions
    base       the interface every backend has, and the honest names it records
    netem      the kernel's netem: in the router (configured by tcconfig) or on a server (tc)
    linkem     our userspace emulator: in the router, or on a client host's ingress
    host       a real machine's interface: validation, the changes recorded and undone
    resolve    which backend, where: one decision for one machine and for two
    verify     the live link proven with real packets (ping, iperf3)
    bench      the link benchmark, printed as ratios

A rate that follows a trace is a kind of rate (conditions.TraceRate); the format, reading and
making of traces is plt_bench/traces.py, beside conditions (which names them), below this package.

Embedded (three namespaces): `make(choice, plan=...)`; two machines: the client passes its
plan, the control channel and the state-file recorder.
"""

from . import host, verify
from .base import Link
from .linkem import HostLinkem, LinkemLink
from .netem import RouterNetem, ServerNetemLink
from .resolve import LINK_CHOICES, Capabilities, Choice, canonical, netem_available, resolve

BACKENDS = {("netem", "router"): RouterNetem, ("linkem", "router"): LinkemLink,
            ("netem", "server"): ServerNetemLink, ("linkem", "client"): HostLinkem}


def make(choice: Choice, **context) -> Link:
    """The backend instance for a choice: router backends take plan=; the server's takes plan= and
    control=; the client host's linkem takes plan= and record= (writes the state file's 'host')."""
    cls = BACKENDS[(choice.backend, choice.placement)]
    if cls is ServerNetemLink:
        return cls(context["plan"], context["control"])
    if cls is HostLinkem:
        return cls(context["plan"], context["record"])
    return cls(context["plan"])


__all__ = ["LINK_CHOICES", "host", "verify", "Capabilities", "Choice", "Link", "canonical", "make", "netem_available", "resolve"]
