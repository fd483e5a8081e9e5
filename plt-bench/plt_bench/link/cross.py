"""Competing traffic through the bottleneck (issue 46): --cross 0,2xtcp-cubic,1xtcp-bbr:up, an axis of
the link (Conditions.cross, its canonical text).

    NxKIND[-CC][:down|up]   N long-lived bulk flows of KIND with the congestion controller CC (cubic by
                            default), downloading (down, the default) or uploading (up):
                            tcp: iperf3 -P N -C CC (the kernel's cubic, bbr, reno);
                            quic: quinnserve's bulk mode (quinnserve/src/bulk.rs), N QUIC connections of
                            one endless stream each, quinn's cubic, bbr or newreno at the sender
    web-RATE-MEAN           a web-like background of downloads: requests arriving as a Poisson process
                            of RATE per second, each on a new TCP connection, of a size drawn from a
                            Pareto distribution of shape 1.5 with mean MEAN (a size: 100KB), truncated
                            at 1000 x the mean (quinnserve/src/bulk.rs web_client; a fixed seed)
    0                       none

The flows run between two namespaces of their own behind the same router (pbN-xclient, pbN-xserver),
never from the measured browser's or server's; their packets enter the same queue as the page's
in each direction (linkem's, fed from every input; the kernel's, on an IFB their egress and the
page's redirect into: link.netem), so they share the page's bottleneck (its rate, its discipline: --aqm). They start when
the conditions are applied, are given STEADY_S to reach their share before the first trial, and run
through every trial of the conditions; a trial records what they carried during its load (Trial
cross_mbps) and fails when one of them has died. Pure here: the parser and the commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError

CCS = {"tcp": ("cubic", "bbr", "reno"), "quic": ("cubic", "bbr", "newreno")}  # each kind's controllers
KINDS = tuple(CCS)
MAX_FLOWS = 16
FORM = ("0, NxKIND[-CC][:down|up] with KIND tcp (CC cubic, bbr or reno) or quic (CC cubic, bbr or newreno), "
        "or web-RATE-MEAN (requests per second, mean size), for example 2xtcp-cubic, 1xquic-bbr:up, web-10-100KB")
_SPEC = re.compile(r"(?P<n>\d+)x(?P<kind>[a-z]+)(?:-(?P<cc>[a-z]+))?(?::(?P<dir>down|up))?")
_WEB = re.compile(r"web-(?P<rate>\d+(?:\.\d+)?)-(?P<mean>\d+(?:\.\d+)?[a-z]+)")
WEB_SEED = 1           # the web background's arrivals and sizes, the same sequence for every conditions
MAX_WEB_RATE = 1000.0  # requests per second
CROSS_PORT = 5301      # the cross traffic's iperf3 server, in the cross server's namespace
STEADY_S = 3.0         # given to the flows to fill the bottleneck before the first trial
MIN_SHARE = 0.8        # of the rate, what the flows alone must carry once steady (else the conditions fail)


@dataclass(frozen=True)
class Cross:
    """A cross-traffic spec: N long-lived flows over a transport (tcp, quic) with a controller, one way; or
    a web background (transport web, flows 0: short transfers, rate_per_s and mean_bytes)."""
    flows: int
    transport: str = "tcp"
    cc: str = "cubic"
    direction: str = "down"
    rate_per_s: float = 0.0
    mean_bytes: int = 0

    @property
    def text(self) -> str:
        """The canonical text (Conditions.cross)."""
        if self.transport == "web":
            from ..units import format_size
            return f"web-{self.rate_per_s:g}-{format_size(self.mean_bytes)}"
        return f"{self.flows}x{self.transport}-{self.cc}" + ("" if self.direction == "down" else f":{self.direction}")

    @property
    def offered_mbps(self) -> float | None:
        """A web background's mean offered load (rate x mean size); None for long-lived flows (they
        take what the bottleneck leaves them)."""
        return self.rate_per_s * self.mean_bytes * 8 / 1e6 if self.transport == "web" else None

    def client_argv(self, server_ip: str, seconds: int = 86400, binary: str = "quinnserve",
                    cert: str = "cert.pem") -> list[str]:
        """The flows' client, in the cross client's namespace. tcp: iperf3, -P parallel flows, -R to
        download. quic: quinnserve's bulk client, which trusts only the cross server's certificate."""
        if self.transport == "quic":
            return [binary, "--bulk-client", f"{server_ip}:{CROSS_PORT}", str(self.flows), self.cc,
                    self.direction, cert, str(seconds)]
        if self.transport == "web":
            return [binary, "--web-client", f"{server_ip}:{CROSS_PORT}", f"{self.rate_per_s:g}",
                    str(self.mean_bytes), str(WEB_SEED), str(seconds)]
        return ["iperf3", "-c", server_ip, "-p", str(CROSS_PORT), "-P", str(self.flows), "-C", self.cc,
                "-t", str(seconds), *(["-R"] if self.direction == "down" else []), "-i", "0"]

    def server_argv(self, server_ip: str, binary: str = "quinnserve", cert: str = "cert.pem",
                    key: str = "key.pem") -> list[str]:
        """The flows' server, in the cross server's namespace (quic: the controller of a download's sender)."""
        if self.transport == "quic":
            return [binary, "--bulk-server", f"{server_ip}:{CROSS_PORT}", self.cc, cert, key]
        if self.transport == "web":
            return [binary, "--web-server", f"{server_ip}:{CROSS_PORT}"]
        return ["iperf3", "-s", "-B", server_ip, "-p", str(CROSS_PORT)]


def parse(text: str, option: str = "--cross") -> Cross | None:
    """One item of --cross (pure): None for 0; UsageError naming the option and the form."""
    t = str(text).strip().lower()
    if t in ("0", "none"):
        return None
    if t.startswith("web"):
        w = _WEB.fullmatch(t)
        if not w:
            raise UsageError(f"{option}: '{text}' is not a web background; expected web-RATE-MEAN, for example "
                             "web-10-100KB (10 requests per second, 100 KB on average)")
        from ..units import parse_size
        rate = float(w.group("rate"))
        if not 0 < rate <= MAX_WEB_RATE:
            raise UsageError(f"{option}: {rate:g} requests per second in '{text}'; expected more than 0, at most "
                             f"{MAX_WEB_RATE:g}")
        return Cross(0, "web", "cubic", "down", rate, parse_size(w.group("mean"), f"{option} {text}"))
    m = _SPEC.fullmatch(t)
    if not m:
        raise UsageError(f"{option}: '{text}' is not a cross-traffic spec; expected {FORM}")
    n, kind, cc = int(m.group("n")), m.group("kind"), m.group("cc") or "cubic"
    if kind not in KINDS:
        raise UsageError(f"{option}: '{kind}' in '{text}': competing flows are {', '.join(KINDS)} for now; expected "
                         f"{FORM}")
    if cc not in CCS[kind]:
        raise UsageError(f"{option}: congestion controller '{cc}' in '{text}'; {kind} flows run "
                         f"{', '.join(CCS[kind])}")
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
    if not out:
        raise UsageError(f"{option}: empty; expected competing traffic, comma-separated, each {FORM}")
    return tuple(out)


class Flows:
    """The running competing flows of one set of conditions: a server in the cross server's namespace
    (iperf3, or quinnserve's bulk server with a certificate made for the cross server's address) and
    its client (N flows) in the cross client's; their bytes read at the receiving namespace's
    interface (the kernel's counter, not the flows' own word)."""

    def __init__(self, plan, spec: Cross, rate_bps: int | None):
        self.plan, self.spec, self.rate_bps = plan, spec, rate_bps
        self.server = self.client = None
        self._died: str | None = None  # said once: a dead process's stderr is read once

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
        least MIN_SHARE of the rate, or LinkError (a flow that never reached its share); a web
        background's is shown beside its offered load, not judged (its load varies by design)."""
        import subprocess
        import time

        from .. import cmd
        from ..errors import LinkError
        client_kw: dict[str, str] = {}  # the quinnserve modes' binary (and QUIC's certificate); iperf3 needs none
        key: dict[str, str] = {}
        if self.spec.transport in ("quic", "web"):
            binary = cmd.TOOLS_BIN / "quinnserve"
            if not binary.is_file():
                raise LinkError(f"cross traffic {self.spec.text}: {binary} is missing; run scripts/setup")
            client_kw["binary"] = str(binary)
        if self.spec.transport == "quic":
            from ..servers.certs import make_certificate
            folder = self.plan.run_dir / "cross"
            folder.mkdir(parents=True, exist_ok=True)
            c = make_certificate(folder, [("cross.test", self.plan.xserver_ip)])
            client_kw["cert"], key["key"] = str(c.cert), str(c.key)
        server_kw = {**client_kw, **key}
        self.server = subprocess.Popen(cmd.in_netns(self.plan.xserver_ns, self.spec.server_argv(
            self.plan.xserver_ip, **server_kw)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        time.sleep(0.3)
        self.client = subprocess.Popen(cmd.in_netns(self.plan.xclient_ns, self.spec.client_argv(
            self.plan.xserver_ip, **client_kw)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        time.sleep(STEADY_S)
        t0, b0 = self._rx_bytes()
        time.sleep(1.0)
        t1, b1 = self._rx_bytes()
        mbps = (b1 - b0) * 8 / (t1 - t0) / 1e6
        out = {"cross": self.spec.text, "alone_mbps": round(mbps, 3), "steady_s": STEADY_S}
        if self.spec.offered_mbps is not None:
            out["offered_mbps"] = round(self.spec.offered_mbps, 3)
        if (died := self.died()):
            self.stop()
            raise LinkError(f"cross traffic {self.spec.text}: {died}")
        if self.spec.transport == "web":  # short transfers: what a second carries varies by design (none at a low rate);
            return out  # its client ends on the first request that fails, and died() says so
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
        if self._died:
            return self._died
        tool = {"tcp": "iperf3", "quic": "quinnserve's bulk", "web": "quinnserve's web"}[self.spec.transport]
        for name, p in ((f"its {tool} server", self.server), (f"its flows' {tool} client", self.client)):
            if p is not None and p.poll() is not None:
                said = (p.stderr.read() or "").strip()[-300:] if p.stderr else ""
                self._died = f"{name} exited ({p.returncode}){': ' + said if said else ''}"
                return self._died
        return None

    def stop(self) -> None:
        from .. import cmd
        for p in (self.client, self.server):
            cmd.stop_process(p)
        self.client = self.server = None


def flows_for(plan, cond) -> Flows | None:
    """The competing flows the conditions ask for (conditions.Conditions.cross), not started; None
    without --cross."""
    spec = parse(cond.cross) if cond.cross else None
    if spec is None:
        return None
    return Flows(plan, spec, cond.rate_down_bps if spec.direction == "down" else cond.rate_up_bps)


def window_mbps(samples: list[tuple[float, int]], start_s: float, end_s: float) -> float | None:
    """Mbit/s the samples' counter moved between two instants (counters.per_interval: linear between
    samples), or None where the samples do not span them (pure)."""
    from .counters import per_interval
    moved = per_interval(samples, start_s, end_s - start_s, 1) if end_s > start_s else None
    return moved[0] * 8 / (end_s - start_s) / 1e6 if moved else None
