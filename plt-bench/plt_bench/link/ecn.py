"""Whether each connection of a trial negotiated ECN, and what marks its endpoints saw (issue 46,
--ecn), from the endpoints themselves: beside the packets' codepoints that linkem counts on the
link (link_json dirs.*.ecn), which say who asked, this says who agreed and what each side learnt.

    TCP    the kernel's tcp_info of every connection of the trial on port 443, on both sides, as it
           closes: `ss -E` in the browser's and the server's namespaces prints each socket's last
           tcp_info when the kernel destroys it (the browser's end closes them all before the load's
           answer), and `ss` once more at the end for any still open. Per side: connections,
           negotiated (tcpi_options' ECN bit: the SYN's ECE and CWR were answered), ecn_seen (it
           received ECT or CE packets), ce_delivered (tcpi_delivered_ce: the packets it sent that
           the peer echoed as CE-marked, RFC 3168's ECE).
    QUIC   from the logs of the trial's capture (--capture qlog,netlog), read by each seam: the
           server's (Server.quic_ecn: quic-go's qlog in Caddy, its ECN validation state and the ECN
           counts the browser's ACKs reported, RFC 9000 13.4) and the browser's (Browser.quic_ecn:
           Chromium's net-log, the ECN counts its own ACK frames carried). quinn keeps its path's ECN
           state private (quinn-proto 0.11's sending_ecn), so quinnserve's side is the packets'.
           Without those captures a QUIC trial's record says so rather than guess.

Stored per trial in link_json as "endpoints_ecn" (see EndpointsEcn). Pure here, but SocketWatch.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import asdict, dataclass, fields

from .. import cmd
from ..errors import LinkError
from ..quic_ecn import QuicSide  # noqa: F401 - the seams' record, read here

PORT = 443  # the test servers' port (h3 on UDP, h2 and h1 on TCP)


@dataclass(frozen=True)
class TcpConn:
    """One TCP connection's ECN state from its last tcp_info."""
    local: str
    peer: str
    negotiated: bool        # tcpi_options & TCPI_OPT_ECN
    ecn_seen: bool          # tcpi_options & TCPI_OPT_ECN_SEEN: it received ECT or CE packets
    ce_delivered: int       # tcpi_delivered_ce: its packets the peer echoed as CE-marked
    bytes_sent: int


@dataclass(frozen=True)
class TcpSide:
    """One side's TCP connections of a trial, summed."""
    connections: int
    negotiated: int
    ecn_seen: int
    ce_delivered: int


@dataclass(frozen=True)
class EndpointsEcn:
    """A trial's ECN, per transport and side (None: no such connection, or not measured)."""
    tcp_browser: TcpSide | None
    tcp_server: TcpSide | None
    quic_browser: QuicSide | None
    quic_server: QuicSide | None


def watch_argv(side: str) -> list[str]:
    """`ss` printing every TCP socket of port 443 that the kernel destroys, with its tcp_info (-E
    events, -i info, -e the options' words ecn and ecnseen), a line at a time (stdbuf: it is stopped
    by a signal). side: 'server' (its local port) or 'browser' (its peer's)."""
    return ["stdbuf", "-oL", "ss", "-tieHnE", _port_filter(side)]


def dump_argv(side: str) -> list[str]:
    """`ss` printing the TCP sockets of port 443 open now, with their tcp_info."""
    return ["ss", "-tieHn", _port_filter(side)]


def _port_filter(side: str) -> str:
    if side not in ("server", "browser"):
        raise ValueError(f"side {side!r}: server or browser")
    return f"{'sport' if side == 'server' else 'dport'} = :{PORT}"


_INT = {"delivered_ce": re.compile(r"\bdelivered_ce:(\d+)"), "bytes_sent": re.compile(r"\bbytes_sent:(\d+)")}


def parse_ss(text: str) -> list[TcpConn]:
    """The connections in `ss -tieHn[E]` output: a line naming the socket (state, queues, local and
    peer address) and, indented, its tcp_info. Listening sockets (peer '*') are left out."""
    out: list[TcpConn] = []
    head: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            head = line.split()
            continue
        if head is None or len(head) < 5 or head[4].endswith(":*"):
            head = None
            continue
        words = set(line.split())
        ints = {k: int(m.group(1)) if (m := r.search(line)) else 0 for k, r in _INT.items()}
        out.append(TcpConn(local=head[3], peer=head[4], negotiated="ecn" in words, ecn_seen="ecnseen" in words,
                           ce_delivered=ints["delivered_ce"], bytes_sent=ints["bytes_sent"]))
        head = None
    return out


def tcp_side(conns: list[TcpConn]) -> TcpSide | None:
    """One side's connections summed, each counted once (an event and the end's dump may both name
    one: the later, the dump, is dropped); None where there were none."""
    seen: dict[tuple[str, str], TcpConn] = {}
    for c in conns:
        seen.setdefault((c.local, c.peer), c)
    if not seen:
        return None
    cs = list(seen.values())
    return TcpSide(connections=len(cs), negotiated=sum(c.negotiated for c in cs),
                   ecn_seen=sum(c.ecn_seen for c in cs), ce_delivered=sum(c.ce_delivered for c in cs))


def set_tcp_ecn(plan, on: bool) -> int:
    """Make the client's and the server's TCP ask for ECN (--ecn: 1) or only accept it (2, the kernel's
    default): written, then read back in each namespace; returns the value both hold, LinkError where
    one reads otherwise."""
    want = 1 if on else 2
    commands = plan.ecn_commands(on)
    cmd.run_each(commands)
    got = {cmd.run(["sysctl", "-n", "net.ipv4.tcp_ecn"], ns=ns).stdout.strip() for ns, _ in commands}
    if got != {str(want)}:
        raise LinkError(f"--ecn: the hosts' net.ipv4.tcp_ecn reads back as {sorted(got)}")
    return want


class SocketWatch:
    """The TCP sockets of port 443 in one namespace, watched across a trial (start, stop): every one
    destroyed meanwhile, and those still open at the end."""

    def __init__(self, ns: str, side: str):
        self.ns, self.side = ns, side
        self.proc: subprocess.Popen | None = None

    def start(self) -> "SocketWatch":
        self.proc = subprocess.Popen(cmd.in_netns(self.ns, watch_argv(self.side)), stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        return self

    def stop(self) -> list[TcpConn]:
        """The watched connections (the events first, then those open now)."""
        if self.proc is None:
            return []
        proc, self.proc = self.proc, None
        still = cmd.run(dump_argv(self.side), ns=self.ns, check=False, timeout=10).stdout
        proc.terminate()
        try:
            text, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
        return parse_ss(text or "") + parse_ss(still)

    def abort(self) -> None:
        if self.proc is not None:
            cmd.stop_process(self.proc, grace_s=1.0)
            self.proc = None


NO_QUIC_LOG = "no log of it: give --capture qlog,netlog to read QUIC's ECN from the server's and the browser's logs"


def watches(plan) -> list[SocketWatch]:
    """The TCP sockets of a trial under --ecn, watched in the browser's and the server's namespaces
    (not started)."""
    return [SocketWatch(plan.client_ns, "browser"), SocketWatch(plan.server_ns, "server")]


def endpoints(tcp_browser: list[TcpConn] | None, tcp_server: list[TcpConn] | None,
              quic_browser: QuicSide | None, quic_server: QuicSide | None) -> dict:
    """The trial's record (link_json "endpoints_ecn")."""
    e = EndpointsEcn(tcp_browser=tcp_side(tcp_browser or []), tcp_server=tcp_side(tcp_server or []),
                     quic_browser=quic_browser, quic_server=quic_server)
    return {f.name: (asdict(v) if (v := getattr(e, f.name)) is not None else None) for f in fields(e)}
