"""How a browser finds the testbed's origins, and so whether it finds HTTP/3 (--discovery).

    forced    Chromium maps every name to its address inside itself (--host-resolver-rules) and is
              forced onto the asked protocol: no lookup, no Alt-Svc, no race (every campaign before
              discovery measured this).
    alt-svc   a real name server answers the test hosts over the shaped link (a lookup costs a round
              trip, as a visitor's does); nothing is forced: the first connection goes over TCP, the
              server's Alt-Svc header says h3 is on UDP 443, and later connections race QUIC against
              TCP (Chromium's own logic).
    https-rr  as alt-svc, and the name server also answers an HTTPS record (RFC 9460) per host whose
              ALPN names h3: the browser may go to QUIC from the first connection.

The name server is dnsmasq (Debian's dnsmasq-base) in the server namespace, on the server's own
address: it answers the testbed's host names (A, and HTTPS records in https-rr), refuses every
other name, reads no file of the machine's and forwards nothing, so no lookup leaves the testbed.
Its answers carry a TTL of ANSWER_TTL_S, so a repeat visit a moment later finds them cached, as a
visitor's browser does.

What a discovery trial proves is not the protocol asked but that both ends agree on the protocol
of every request (browser.judge, discovered): a trial that mixes h2 and h3 is the result, never an
error (Trial.protocol_mix_json).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from . import cmd
from .errors import EnvironmentProblem, ServerError

MODES = ("forced", "alt-svc", "https-rr")
DEFAULT = "forced"
ANSWER_TTL_S = 300  # what the name server's answers say (a common TTL); a repeat visit finds them cached
HTTPS_RR_TYPE = 65  # RFC 9460
HTTPS_ALPN = ("h3", "h2")  # what an HTTPS record advertises: h3 first, h2 beside it (TCP stays offered)
START_TIMEOUT_S = 10.0


def parse(text: str, option: str = "--discovery") -> str:
    """A discovery mode as a user types it; UsageError naming the option and the modes otherwise."""
    from .errors import UsageError
    mode = str(text).strip().lower()
    if mode not in MODES:
        raise UsageError(f"{option}: '{text}'; expected one of {', '.join(MODES)} (forced: the browser is forced "
                         "onto each protocol; alt-svc: it learns h3 from the server's Alt-Svc header; https-rr: from "
                         "an HTTPS DNS record as well)")
    return mode


def https_rdata(alpn: tuple[str, ...] = HTTPS_ALPN) -> str:
    """An HTTPS record's data in hex (pure): ServiceMode priority 1, target '.' (the owner name
    itself), one SvcParam, alpn (key 1): each ALPN id length-prefixed."""
    value = b"".join(bytes([len(a)]) + a.encode() for a in alpn)
    data = (1).to_bytes(2, "big") + b"\x00" + (1).to_bytes(2, "big") + len(value).to_bytes(2, "big") + value
    return data.hex()


def dnsmasq_args(listen_ip: str, origins: list[tuple[str, str]], mode: str, log: Path,
                 binary: str = "dnsmasq") -> list[str]:
    """dnsmasq's command line (pure): in the foreground, on listen_ip:53 alone, no file of the
    machine's (no /etc/dnsmasq.conf, /etc/hosts or /etc/resolv.conf), nothing forwarded; an A record
    per (host, address) origin, an HTTPS record per host in https-rr; every query logged."""
    if mode not in MODES or mode == "forced":
        raise ValueError(f"dnsmasq_args: discovery mode {mode!r} needs no name server")
    args = [binary, "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll",
            "--bind-interfaces", f"--listen-address={listen_ip}", "--port=53", "--pid-file=", "--user=root",
            f"--local-ttl={ANSWER_TTL_S}", "--log-queries", f"--log-facility={log}"]
    hosts = list(dict.fromkeys(h for h, _ in origins))
    for host in hosts:
        args += [f"--address=/{host}/{ip}" for h, ip in origins if h == host][:1]
        if mode == "https-rr":
            args.append(f"--dns-rr={host},{HTTPS_RR_TYPE},{https_rdata()}")
    return args


def parse_query_log(text: str) -> list[tuple[str, str]]:
    """(query type, name) of each query a dnsmasq log records (pure): 'query[HTTPS] plt.test from ...'."""
    out = []
    for line in text.splitlines():
        head, sep, rest = line.partition(" query[")
        if sep:
            kind, _, tail = rest.partition("] ")
            out.append((kind, tail.split(" ")[0]))
    return out


def locate() -> str:
    """dnsmasq's path (Debian's dnsmasq-base: /usr/sbin, which a user's PATH may lack)."""
    found = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if os.access("/usr/sbin/dnsmasq", os.X_OK) else None)
    if not found:
        raise EnvironmentProblem("dnsmasq not found: --discovery alt-svc and https-rr run a name server in the "
                                 "testbed; scripts/setup installs Debian's dnsmasq-base")
    return found


class NameServer:
    """dnsmasq in a namespace, answering a testbed's origins (dnsmasq_args)."""

    label = "the name server (dnsmasq)"

    def __init__(self, ns: str, listen_ip: str, origins: list[tuple[str, str]], mode: str, run_dir: Path):
        self.ns, self.listen_ip, self.origins, self.mode = ns, listen_ip, list(origins), mode
        self.log = Path(run_dir) / "dnsmasq.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start it and wait until it listens on UDP 53; ServerError with its log's tail if it does not."""
        argv = dnsmasq_args(self.listen_ip, self.origins, self.mode, self.log, binary=locate())
        with open(self.log.with_suffix(".out"), "ab") as out:
            self.proc = subprocess.Popen(cmd.in_netns(self.ns, argv), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"{self.label} exited with {self.proc.returncode}: {self._tail()}")
            if f"{self.listen_ip}:53 " in cmd.run(["ss", "-Hlun"], ns=self.ns, check=False).stdout:
                return
            time.sleep(0.05)
        raise ServerError(f"{self.label} did not listen on {self.listen_ip}:53 within {timeout_s:.0f}s: {self._tail()}")

    def _tail(self) -> str:
        text = ""
        for p in (self.log.with_suffix(".out"), self.log):
            try:
                text += p.read_text(errors="replace")
            except OSError:
                pass
        return " | ".join(text.strip().splitlines()[-3:]) or "(no log)"

    def queries(self) -> list[tuple[str, str]]:
        """Every query it answered so far (parse_query_log)."""
        try:
            return parse_query_log(self.log.read_text(errors="replace"))
        except OSError:
            return []

    def died_reason(self) -> str | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"{self.label} exited (exit code {self.proc.returncode}; log: {self._tail()})"

    def stop(self) -> None:
        cmd.stop_process(self.proc)
        self.proc = None
