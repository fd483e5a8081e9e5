"""Competing traffic through the bottleneck (issue 46): --cross 0,2xtcp-cubic,1xtcp-bbr:up, an axis of
the link (Conditions.cross, its canonical text).

    NxKIND[-CC][:down|up]   N long-lived bulk flows of KIND (tcp) with the congestion controller CC
                            (cubic by default), downloading (down, the default) or uploading (up)
    0                       none

The flows run between two namespaces of their own behind the same router (pbN-xclient, pbN-xserver),
never from the measured browser's or server's; their packets enter linkem's queue of the same
direction, so they share the page's bottleneck (its rate, its discipline: --aqm). They start when
the conditions are applied, are given STEADY_S to reach their share before the first trial, and run
through every trial of the conditions; a trial records what they carried during its load (Trial
cross_mbps) and fails when one of them has died. Pure here: the parser and the commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError

KINDS = ("tcp",)
CCS = ("cubic", "bbr", "reno")
MAX_FLOWS = 16
FORM = "0, or NxKIND[-CC][:down|up] with KIND tcp and CC cubic, bbr or reno (for example 2xtcp-cubic, 1xtcp-bbr:up)"
_SPEC = re.compile(r"(?P<n>\d+)x(?P<kind>[a-z]+)(?:-(?P<cc>[a-z]+))?(?::(?P<dir>down|up))?")
CROSS_PORT = 5301      # the cross traffic's iperf3 server, in the cross server's namespace
STEADY_S = 3.0         # given to the flows to fill the bottleneck before the first trial
MIN_SHARE = 0.8        # of the rate, what the flows alone must carry once steady (else the conditions fail)


@dataclass(frozen=True)
class Cross:
    flows: int
    kind: str = "tcp"
    cc: str = "cubic"
    direction: str = "down"

    @property
    def text(self) -> str:
        """The canonical text (Conditions.cross)."""
        return f"{self.flows}x{self.kind}-{self.cc}" + ("" if self.direction == "down" else f":{self.direction}")

    def client_argv(self, server_ip: str, seconds: int = 86400) -> list[str]:
        """The flows' iperf3 client, in the cross client's namespace: -P parallel flows, -R to download."""
        return ["iperf3", "-c", server_ip, "-p", str(CROSS_PORT), "-P", str(self.flows), "-C", self.cc,
                "-t", str(seconds), *(["-R"] if self.direction == "down" else []), "-i", "0"]


def parse(text: str, option: str = "--cross") -> Cross | None:
    """One item of --cross (pure): None for 0; UsageError naming the option and the form."""
    t = str(text).strip().lower()
    if t in ("0", "none"):
        return None
    m = _SPEC.fullmatch(t)
    if not m:
        raise UsageError(f"{option}: '{text}' is not a cross-traffic spec; expected {FORM}")
    n, kind, cc = int(m.group("n")), m.group("kind"), m.group("cc") or "cubic"
    if kind not in KINDS:
        raise UsageError(f"{option}: '{kind}' in '{text}': competing flows are {', '.join(KINDS)} for now; expected "
                         f"{FORM}")
    if cc not in CCS:
        raise UsageError(f"{option}: congestion controller '{cc}' in '{text}'; expected one of {', '.join(CCS)}")
    if not 1 <= n <= MAX_FLOWS:
        raise UsageError(f"{option}: {n} flows in '{text}'; expected 1 to {MAX_FLOWS} (or 0 for none)")
    return Cross(n, kind, cc, m.group("dir") or "down")


def parse_list(text: str | None, option: str = "--cross") -> tuple[str | None, ...]:
    """--cross's list as canonical texts, None for 0 (pure); (None,) when not given."""
    if text is None:
        return (None,)
    from ..units import split_list
    out: list[str | None] = []
    for item in split_list(str(text), option):
        c = parse(item, option)
        canon = c.text if c else None
        if canon in out:
            raise UsageError(f"{option}: {canon or '0'} is given twice")
        out.append(canon)
    return tuple(out)


class Flows:
    """The running competing flows of one set of conditions: an iperf3 server in the cross server's
    namespace and its client (N parallel flows) in the cross client's; their bytes read at the
    receiving namespace's interface (the kernel's counter, not the flows' own word)."""

    def __init__(self, plan, spec: Cross, rate_bps: int | None):
        self.plan, self.spec, self.rate_bps = plan, spec, rate_bps
        self.server = self.client = None

    def _receiver(self) -> tuple[str, str]:
        """(namespace, device) where the flows' data arrives: the cross client's for downloads."""
        return ((self.plan.xclient_ns, self.plan.xclient_if) if self.spec.direction == "down"
                else (self.plan.xserver_ns, self.plan.xserver_if))

    def _rx_bytes(self) -> tuple[float, int]:
        import time

        from .. import cmd
        from .counters import received_ip_bytes
        ns, dev = self._receiver()
        return time.monotonic(), received_ip_bytes(cmd.run(["cat", "/proc/net/dev"], ns=ns).stdout, dev)

    def start(self) -> dict:
        """Start the flows, give them STEADY_S, then measure what they carry alone for a second: at
        least MIN_SHARE of the rate, or LinkError (a flow that never reached its share)."""
        import subprocess
        import time

        from .. import cmd
        from ..errors import LinkError
        self.server = subprocess.Popen(cmd.in_netns(self.plan.xserver_ns, ["iperf3", "-s", "-B", self.plan.xserver_ip,
                                                                           "-p", str(CROSS_PORT)]),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(0.3)
        self.client = subprocess.Popen(cmd.in_netns(self.plan.xclient_ns, self.spec.client_argv(self.plan.xserver_ip)),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(STEADY_S)
        t0, b0 = self._rx_bytes()
        time.sleep(1.0)
        t1, b1 = self._rx_bytes()
        mbps = (b1 - b0) * 8 / (t1 - t0) / 1e6
        out = {"cross": self.spec.text, "alone_mbps": round(mbps, 3), "steady_s": STEADY_S}
        if self.died():
            self.stop()
            raise LinkError(f"cross traffic {self.spec.text}: {self.died()}")
        if self.rate_bps and mbps < MIN_SHARE * self.rate_bps / 1e6:
            self.stop()
            raise LinkError(f"cross traffic {self.spec.text} carried {mbps:.2f} Mbit/s alone after {STEADY_S:g} s, "
                            f"under {MIN_SHARE:.0%} of the {self.rate_bps / 1e6:g} Mbit/s bottleneck: it never "
                            "reached its share")
        return out

    def counter(self, sample_s: float = 0.02):
        """A sampler of the flows' received bytes through a trial (monotonic s, IP bytes), so that what
        they carried during the page's load alone can be cut out of it (window_mbps)."""
        from .counters import ReceivedCounter
        return ReceivedCounter(*self._receiver(), sample_s).start()

    def died(self) -> str | None:
        for name, p in (("its iperf3 server", self.server), ("its flows' iperf3 client", self.client)):
            if p is not None and p.poll() is not None:
                return f"{name} exited ({p.returncode})"
        return None

    def stop(self) -> None:
        from .. import cmd
        for p in (self.client, self.server):
            cmd.stop_process(p)
        self.client = self.server = None


def window_mbps(samples: list[tuple[float, int]], start_s: float, end_s: float) -> float | None:
    """Mbit/s the samples' counter moved between two instants (counters.per_interval: linear between
    samples), or None where the samples do not span them (pure)."""
    from .counters import per_interval
    moved = per_interval(samples, start_s, end_s - start_s, 1) if end_s > start_s else None
    return moved[0] * 8 / (end_s - start_s) / 1e6 if moved else None
