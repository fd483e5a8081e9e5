"""Two machines: `plt-bench serve` on the server, the client's side of a campaign on the other.

Server: Caddy on --addr (a fresh self-signed certificate, key 0600 in the run folder), the pages,
and the control channel (control.py) on --addr:--control-port. It prints the certificate's pin
and the control token; the user carries both to the client (the documented route: copy the two
lines it prints, or the 0600 info file it writes).

Client: the browser, the control channel's client side (RemoteServer, RemoteSites, RemoteIperf)
and the link, which lives in link/: netem on the server (link.netem.ServerNetem, asked for over
the control channel) or linkem on this client's ingress (link.linkem.HostLinkem); only the test
traffic is shaped, never SSH or the control channel (link.host).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import threading
from pathlib import Path

from . import cmd
from .conditions import Conditions
from .control import SERVER_PORT_DEFAULT_CONTROL, Control, ControlServer, new_token
from .errors import UsageError
from .link import host as hostnet
from .link.aqm import parse as aqm_parse
from .link.origins import parse as origins_parse
from .link.commands import SHAPED_PORTS
from .link.linkem import QUEUE_BASE
from .link.netem import ServerNetem
from .pages import Sites
from .pages.timing import of_text as think_of_text
from . import servers
from .topology import Topology


def parse_pin(text: str, option: str = "--server-pin") -> str:
    try:
        ok = len(base64.b64decode(text or "", validate=True)) == 32 and len(text) == 44
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(f"{option}: expected the base64 SHA-256 pin of the server's public key (44 characters, "
                         "printed by 'plt-bench serve' as pin: ...)")
    return text


def parse_port(text, option: str = "--control-port") -> int:
    digits = str(text).strip()
    n = int(digits) if digits.isascii() and digits.isdigit() else 0  # int() takes 4_443 and ' +4443
    if not 1024 <= n <= 65535 or n in SHAPED_PORTS:
        raise UsageError(f"{option}: '{text}' is not a port for the control channel; expected 1024 to 65535, "
                         f"not {' or '.join(str(p) for p in SHAPED_PORTS if p >= 1024)} (test traffic)")
    return n


TOKEN_ENV = "PLT_BENCH_SERVER_TOKEN"
TOKEN_ARGV_WARNING = (f"warning: --server-token on the command line is visible to every user of this machine (ps); "
                      f"put the token in a file only you can read and pass --server-token-file FILE, or set "
                      f"{TOKEN_ENV}")


@dataclasses.dataclass(frozen=True)
class ServerRef:
    """Where the server machine is and how the client knows it: --server-machine, --server-pin, and the token from
    --server-token-file, the environment (PLT_BENCH_SERVER_TOKEN) or --server-token."""

    addr: str
    pin: str
    token: str
    control_port: int = SERVER_PORT_DEFAULT_CONTROL
    token_source: str = "file"  # file | environment | argv (the last is visible to every user: warn)


TOKEN_FILE_MAX_BYTES = 4096  # serve's --info-file is about 200 bytes


def read_token_file(path_text: str, option: str = "--server-token-file") -> str:
    """The token from a file only its owner may read: the bare 64 hex digits, or the JSON that
    'plt-bench serve --info-file' writes."""
    import stat
    from .control import check_token
    path = Path(path_text)
    try:  # the kind and mode first, by stat: a FIFO's open() would block, /dev/zero never ends
        st = path.stat()
    except OSError as e:
        raise UsageError(f"{option}: cannot read {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{option}: {path} is not a regular file; expected a file holding the token (64 hex "
                         "digits) or serve's --info-file JSON")
    if st.st_mode & 0o077:
        raise UsageError(f"{option}: {path} can be read by other users (mode {st.st_mode & 0o777:04o}); "
                         f"make it yours alone: chmod 600 {path}")
    try:
        with open(path, "rb") as f:
            data = f.read(TOKEN_FILE_MAX_BYTES + 1)
        text = data.decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{option}: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    if len(data) > TOKEN_FILE_MAX_BYTES:
        raise UsageError(f"{option}: {path} is larger than {TOKEN_FILE_MAX_BYTES} bytes; expected a token (64 hex "
                         "digits) or serve's --info-file JSON")
    if text.startswith("{"):
        try:
            text = str(json.loads(text).get("token", ""))
        except (ValueError, AttributeError):
            raise UsageError(f"{option}: {path} is neither a token nor serve's --info-file JSON") from None
    return check_token(text, option)


def page_files(root: Path) -> dict[str, int]:
    """Every file of the pages a server has (pages.Page.files: HTML pages and objects): name -> size."""
    patterns = ("index_*.html", "objects_*.html", "obj_*.png", "bulk*.html", "bulk.bin", "req*.html")
    found = [p for pattern in patterns for p in root.glob(pattern)]
    return {p.name: p.stat().st_size for p in sorted(found) if p.is_file()}


# -- recordings on a server machine ------------------------------------------------------------------
# A recording's hosts are served each on an address of its own (as in one machine's testbed: no two
# hosts share a connection). A server machine has one address on the cable; serve adds the replay's on
# its interface from RFC 2544's benchmarking range, 198.18.N.0/24 (N: its testbed index), and the
# client routes that net through the server's address. Nothing outside the two machines uses them.
REPLAY_PREFIX = "198.18"  # 198.18.N.0/24: the replay's net of testbed N
REPLAY_PART_BYTES = 512 * 1024  # a recording crosses the control channel in parts (a line is at most 1 MiB)
REPLAY_MAX_BYTES = 1 << 30  # the most a recording may bring a server machine


def replay_net(index: int) -> str:
    return f"{REPLAY_PREFIX}.{index}.0/24"


def static_addresses(index: int) -> list[str]:
    """A server machine's addresses of folders served as they are (serve --folder), in the replay's net (pure)."""
    from .topology import STATIC_FIRST, STATIC_MAX
    return [f"{REPLAY_PREFIX}.{index}.{STATIC_FIRST + k}" for k in range(STATIC_MAX)]


def replay_addresses(index: int) -> tuple[list[str], list[str]]:
    """A server machine's replay addresses (pure): every protocol's, then the as-recorded ones (the last
    octets of one machine's testbed: topology.REPLAY_FIRST, AS_RECORDED_FIRST)."""
    from .pages.archive import MAX_ORIGINS
    from .topology import AS_RECORDED_FIRST, REPLAY_FIRST
    return ([f"{REPLAY_PREFIX}.{index}.{REPLAY_FIRST + k}" for k in range(MAX_ORIGINS)],
            [f"{REPLAY_PREFIX}.{index}.{AS_RECORDED_FIRST + k}" for k in range(MAX_ORIGINS)])


def replay_parts(data: bytes, part_bytes: int = REPLAY_PART_BYTES) -> list[str]:
    """A packed recording's bytes as the control channel carries them: base64 parts (pure)."""
    return [base64.b64encode(data[i:i + part_bytes]).decode() for i in range(0, max(len(data), 1), part_bytes)]


# -- server side -------------------------------------------------------------------------------------
def serve_servers(text: str | None, option: str = "--http-server") -> tuple[str, ...]:
    """serve's servers (plt_bench.servers), the first serving first; each must serve a second machine
    ("two-machines" in its features) (pure but for the table)."""
    from . import units
    given = text or servers.DEFAULT
    names = tuple(dict.fromkeys(x.strip().lower() for x in units.split_list(given, option)))
    able = [n for n in servers.NAMES if "two-machines" in servers.get(n).features]
    if not names or any(n not in able for n in names):
        raise UsageError(f"{option}: '{given}'; expected one or more of {', '.join(able)} (caddy,quinn: both, the "
                         "client switching between them)")
    return names


def missing_servers(wanted, hello: dict) -> list[str]:
    """The servers a campaign asks for that the server machine does not run (pure): its hello lists
    them ('servers'); a serve from before it named them ran Caddy alone."""
    have = set(hello.get("servers") or {"caddy": {}})
    return [n for n in wanted if n not in have]


def check_serve_options(addr: str, iface: str | None, size: str, control_port: str, info_file: str | None):
    """serve's options, checked before anything is made: (address, pages, control port)."""
    from .axes import parse_pages
    addr = hostnet.parse_ipv4(addr, "--addr")
    if iface is not None:
        hostnet.require_iface(iface)
    pages, port = parse_pages(size), parse_port(control_port)
    if info_file is not None:
        from .store import check_out_file
        check_out_file(Path(info_file), "--info-file")
    return addr, pages, port


class ServeSession:
    """The servers (Caddy, and quinnserve where asked: one at a time, the client switching) and the
    control channel on this machine's --addr, until close()."""

    def __init__(self, addr: str, iface: str | None, sites_dir: Path, pages, control_port: int,
                 index: int | None = None, server_names: tuple[str, ...] = (servers.DEFAULT,), qlog: bool = False,
                 served: list[tuple[str, Path]] = ()):
        """served: folders served as they are, (host, folder), each host on an address of its own in the
        replay's net for as long as serve runs (a client's url: pages)."""
        self.addr, self.sites, self.pages, self.port, self.index = addr, Sites(sites_dir), pages, control_port, index
        self.qlog = qlog  # Caddy writes each QUIC connection's qlog into the spool; a client takes its trials'
        self.qlog_spool: Path | None = None
        self.server_names = tuple(server_names)
        self.labels = [servers.get(n).label for n in self.server_names]
        self.servers: dict = {}
        dev = hostnet.local_iface_of(addr)
        if dev is None:
            raise UsageError(f"--addr: {addr} is not an address of this machine; expected one of its own "
                             "addresses, on the interface that joins it to the client (see 'ip -4 addr')")
        self.iface = hostnet.pick_iface(dev, iface, f"--addr {addr}")
        self.may_shape = iface is not None  # the server shapes (netem) only an interface named with --iface
        self.host: dict = {}  # what shaping changed on this machine, recorded before it is made
        self.topology: Topology | None = None
        self.server: Server | None = None
        self.control: ControlServer | None = None
        self.token = new_token()
        self.iperf = None
        self._iperf_lock = threading.Lock()
        self.names = None  # the name server of a client's --discovery campaign (dns.NameServer), while it runs
        self.server_env: dict = {}
        self.replay = None  # what the servers replay for a client's campaign (servers.Replay), while it runs
        self.think = False  # the servers have a think stage (a client asked think time: think_set)
        self.replay_host: dict = {}  # the replay's addresses on this machine, recorded before they are added
        self.served = list(served)
        self.statics: list = []  # the served folders as the servers take them (servers.Static), once open
        self.statics_host: dict = {}  # their addresses on this machine, recorded before they are added
        self._incoming: dict[str, list[bytes]] = {}  # a recording's parts as they come
        self.owner: int | None = None
        self._leaving: int | None = None  # an owner whose connection ended, being cleaned up (_client_gone)
        self._owner_changed = threading.Condition()

    def open(self) -> dict:
        cmd.require_root()
        self.sites.ensure(self.pages)
        self.topology = Topology.allocate(index=self.index)
        self.topology.write_state(role="serve", addr=self.addr, iface=self.iface)
        if self.qlog:
            self.qlog_spool = self.topology.plan.run_dir / "qlog-spool"
            self.qlog_spool.mkdir(mode=0o700)
            self.server_env["QLOGDIR"] = str(self.qlog_spool)
        if self.served:
            self._add_static_addresses()
        self._make_servers(self.server_names[0])
        self.control = ControlServer(self.addr, self.port, self.token, {
            "hello": self.hello, "cpu": self.cpu, "access": self.access, "use_server": self.use_server,
            "qlog_list": self.qlog_list, "qlog_take": self.qlog_take,
            "names_start": self.names_start, "names_queries": self.names_queries, "names_stop": self.names_stop,
            "replay_missing": self.replay_missing, "replay_put": self.replay_put, "replay_start": self.replay_start,
            "replay_active": self.replay_active, "think_set": self.think_set,
            "iperf_start": self.iperf_start, "iperf_stop": self.iperf_stop, "apply": self.apply, "clear": self.clear},
            on_close=self._client_gone).start()
        info = self.info()
        path = self.topology.plan.run_dir / "server.json"
        write_private(path, json.dumps(info, indent=1) + "\n")
        return info

    def info(self) -> dict:
        return {"addr": self.addr, "iface": self.iface, "pin": self.server.cert.spki_sha256_b64, "token": self.token,
                "control_port": self.port, "pages": page_files(self.sites.root), "run_dir": str(self.topology.plan.run_dir),
                "served": [list(o) for x in self.statics for o in x.origins],
                "client_options": f"--server-machine {self.addr} --server-pin {self.server.cert.spki_sha256_b64} "
                                  f"--server-token {self.token}"
                                  + (f" --control-port {self.port}" if self.port != SERVER_PORT_DEFAULT_CONTROL
                                     else "")}

    def instructions(self, info: dict) -> str:
        """What serve prints once it serves: where, the pin and token, and the client's command."""
        from .pages import page_url
        addr = self.addr
        return (f"serving {len(info['pages'])} page(s) from {self.sites.root} on https://{addr}:443 (HTTP/3 on UDP, "
                f"HTTP/1.1+TLS on TCP) with {', '.join(self.servers[n].label for n in self.server_names)}"
                f"{' (the client switches between them)' if len(self.server_names) > 1 else ''}, control channel on "
                f"{addr}:{self.port}\n"
                + "".join(f"serving {x.folder} as it is as {page_url(h, '/')} (at {ip}; a client's --size "
                          f"url:{page_url(h, '/PATH')})\n" for x in self.statics for h, ip in x.origins)
                + f"pin:   {info['pin']}\ntoken: {info['token']}\n"
                f"(also in {info['run_dir']}/server.json, mode 0600)\n\n"
                f"on the client, with the token in a file only you can read (or in PLT_BENCH_SERVER_TOKEN):\n"
                f"  plt-bench run --iface <its interface towards {addr}> --server-machine {addr} --server-pin {info['pin']} "
                f"--server-token-file <FILE>\n\n"
                "Ctrl-C stops the server and removes everything it made.")

    def close(self) -> None:
        if self.control:
            self.control.close()
            self.control = None
        self.iperf_stop()
        self.names_stop()
        for one in self.servers.values():
            one.stop()
        self.servers, self.server = {}, None
        hostnet.undo(self.replay_host)
        hostnet.undo(self.statics_host)
        hostnet.undo(self.host)
        if self.topology:
            self.topology.down()
            self.topology = None

    def _claim(self) -> None:
        """The connection (one thread each) that shapes this server, runs its iperf3, name server or
        replay owns them until it ends; another client is refused meanwhile, so it cannot undo the first
        one's link. A client that comes while the last one's connection is being cleaned up (a replay's
        servers restarting) waits for it, up to LEAVE_WAIT_S."""
        me = threading.get_ident()
        with self._owner_changed:
            if self.owner not in (None, me) and self.owner == self._leaving:
                self._owner_changed.wait_for(lambda: self.owner is None, timeout=LEAVE_WAIT_S)
            if self.owner not in (None, me):
                raise ValueError("another client is running a campaign against this server; wait for it to end")
            self.owner = me

    def _client_gone(self) -> None:
        """A connection ended: if it owned the shaping, iperf3, name server, replay or think stage (its run
        finished or died), remove them."""
        me = threading.get_ident()
        if self.owner != me:
            return
        with self._owner_changed:
            self._leaving = me
        try:
            self.iperf_stop()
            self.names_stop()
            self._incoming = {}
            hostnet.undo(self.host)  # the interface as it was: qdiscs, IFB, GRO
            self.host = {}
            self.topology.write_state(host={})
            if self.replay is not None or self.think:  # the pages alone again (the replay's addresses gone), at once
                self.think = False
                self._make_servers(self.server.name, None)
        finally:
            with self._owner_changed:
                self.owner, self._leaving = None, None
                self._owner_changed.notify_all()

    # -- operations of the control channel --------------------------------------------------------
    def hello(self) -> dict:
        from .metadata import machine
        m = machine()
        return {"pin": self.server.cert.spki_sha256_b64, "pages": page_files(self.sites.root),
                # each server it runs (the client switches with use_server), and Caddy's info as before
                "servers": {n: {"info": x.info(), "quic_cc": x.quic_cc()} for n, x in self.servers.items()},
                "serving": self.server.name, "qlog": bool(self.qlog_spool),
                "features": list(SERVE_FEATURES),  # what a client may ask of it beyond pages (a serve before: none)
                "replay_net": replay_net(self.topology.plan.index),  # its replay's and served folders' addresses
                "served": [list(o) for x in self.statics for o in x.origins],  # folders served as they are: host, address
                **({"caddy": self.servers["caddy"].info()} if "caddy" in self.servers else {}),
                "quic_buffer_warning": self.server.quic_buffer_warning(),
                "netem": self._netem(), "may_shape": self.may_shape,
                "host": m["host"], "kernel": m["kernel"], "cpu_count": m["cpu_count"], "loadavg": m["loadavg"],
                "plt_bench": m["plt_bench"], "git_commit": m["git_commit"], "iface": self.iface,
                "sysctl": read_sysctls(("net.ipv4.tcp_congestion_control", "net.core.rmem_max", "net.core.wmem_max",
                                        "net.ipv4.tcp_wmem", "net.ipv4.tcp_rmem"))}

    @staticmethod
    def _netem() -> bool:
        from .link import netem_available
        return netem_available()

    # shaping on this machine (the netem backend, link.netem.ServerNetem): the client asks, the server does
    def _note(self, **kw) -> None:
        self.host.update(kw)
        self.topology.write_state(host=dict(self.host))

    def apply(self, conditions: dict, client: str) -> dict:
        if not self.may_shape:
            raise ValueError("this server shapes only an interface named with --iface: restart it with "
                             f"'plt-bench serve --addr {self.addr} --iface {self.iface}'")
        self._claim()
        # the discipline travels as its text (Conditions.as_dict); two machines take none yet (link.resolve)
        cond = Conditions(**{**conditions, "aqm": aqm_parse(conditions["aqm"]) if conditions.get("aqm") else None,
                             "origin_rtt": origins_parse(conditions["origin_rtt"]) if conditions.get("origin_rtt") else None})
        client = hostnet.parse_ipv4(str(client), "client")
        if hostnet.route_to(client).get("dev") != self.iface:
            raise ValueError(f"the client {client} is not reached through {self.iface}")
        if cond.impaired and not self._netem():
            raise ValueError("this server's kernel has no sch_netem: delay, jitter and loss need the linkem backend")
        p = self.topology.plan.prefix
        if not self.host:
            hostnet.prepare(self.iface, hostnet.ifb_name(p), self._note)
        self._clear()
        return ServerNetem(self.iface, hostnet.ifb_name(p)).apply(cond, client)

    def _clear(self) -> None:
        if self.host:
            hostnet.clear(self.iface, self.host["ifb"])

    def clear(self) -> dict:
        self._clear()
        return {}

    def cpu(self) -> dict:
        """The serving server's CPU, under its role (its meta_key: caddy, quinnserve)."""
        import psutil
        t = psutil.Process(self.server.proc.pid).cpu_times()
        return {self.server.meta_key: [t.user, t.system]}

    def use_server(self, name: str) -> dict:
        """The server of the client's trials to come: the one serving stops, the other starts on the same
        address with the same certificate (as the embedded testbed's use_server)."""
        self._claim()
        if name not in self.servers:
            raise ValueError(f"this server machine serves with {', '.join(self.server_names)}, not {name}: restart it "
                             f"with 'plt-bench serve --http-server {','.join(dict.fromkeys((*self.server_names, name)))}'")
        if name != self.server.name:
            self.server.stop()
            self.server = self.servers[name]
            self.server.start()
        return {"serving": self.server.name}

    def access(self, uri: str, wait_s: float = 2.0, expect: int = 1) -> dict:
        return {"entries": self.server.access_entries(str(uri), float(min(wait_s, 10.0)), int(expect))}

    def qlog_list(self) -> dict:
        """The qlogs in the spool now (a client's trial is about to start)."""
        if self.qlog_spool is None:
            raise ValueError("this server writes no qlog: restart it with 'plt-bench serve --qlog'")
        return {"names": sorted(os.listdir(self.qlog_spool))}

    def qlog_take(self, before: list, wait_s: float = 1.0) -> dict:
        """The qlogs that appeared since `before` (the first waited for up to wait_s), each once its size
        has stood still for QLOG_SETTLE_S (quic-go finishes a file as its connection closes), read and
        removed: {"files": {name: base64 of its bytes}}."""
        import time
        if self.qlog_spool is None:
            raise ValueError("this server writes no qlog: restart it with 'plt-bench serve --qlog'")
        deadline = time.monotonic() + min(float(wait_s), 10.0)
        new: list[str] = []
        while time.monotonic() < deadline and not new:
            new = sorted(set(os.listdir(self.qlog_spool)) - set(before))
            if not new:
                time.sleep(0.05)
        files = {}
        for name in new:
            path = self.qlog_spool / name
            size, settle = -1, time.monotonic() + 5.0
            while time.monotonic() < settle and path.stat().st_size != size:
                size = path.stat().st_size
                time.sleep(QLOG_SETTLE_S)
            files[name] = base64.b64encode(path.read_bytes()).decode()
            path.unlink()
        return {"files": files}

    def _make_servers(self, serving: str, replay=None) -> None:
        """The servers, replaying `replay` (or nothing), one serving (`serving`) with the certificate the
        clients pin (made by the first start, kept by every later one). The replay's addresses are on
        this machine before a server binds them, and gone once none does."""
        cert = self.server.cert if self.server else None
        for one in self.servers.values():
            one.stop()
        if replay is not None and not self.replay_host:
            every, own = replay_addresses(self.topology.plan.index)
            self.replay_host = self._add_addresses("replay", every + own)
        self.servers = {n: servers.get(n)(None, self.addr, self.topology.plan.run_dir, self.sites.root,
                                          env=self.server_env, replay=replay,
                                          statics=self.statics if "folders" in servers.get(n).features else (),
                                          think=self.think)
                        for n in self.server_names}
        self.replay = replay
        if replay is None and self.replay_host:
            hostnet.undo(self.replay_host)
            self.replay_host = {}
            self.topology.write_state(replay={})
        for one in self.servers.values():
            one.cert = cert
        self.server = self.servers[serving]
        self.server.start()
        for one in self.servers.values():  # one certificate for all: the client trusts its pin
            one.cert = self.server.cert

    def _add_static_addresses(self) -> None:
        from .errors import UsageError
        from .servers import Static
        ips = static_addresses(self.topology.plan.index)
        if len(self.served) > len(ips):
            raise UsageError(f"--folder: {len(self.served)} hosts; a server machine serves at most {len(ips)}")
        folders: dict[Path, list[tuple[str, str]]] = {}
        for (host, folder), ip in zip(self.served, ips):
            folders.setdefault(Path(folder).resolve(), []).append((host, ip))
        self.statics = [Static(f, o) for f, o in folders.items()]
        self.statics_host = self._add_addresses("statics", [ip for x in self.statics for _, ip in x.origins])

    def _add_addresses(self, key: str, ips: list[str]) -> dict:
        """Addresses of this machine's on --addr's interface, recorded in its state under `key` before
        they are added (undone by hostnet.undo: at close, or by clean after a kill); the record."""
        record = {"netns": hostnet.netns_id(), "addresses": [f"{ip}/32" for ip in ips], "addresses_dev": self.iface}
        self.topology.write_state(**{key: dict(record)})
        for a in record["addresses"]:
            cmd.run(["ip", "addr", "add", a, "dev", self.iface])
        return record

    def replay_missing(self, recordings: dict) -> dict:
        """Which of the client's recordings ({name: its hash}) this machine lacks; one of that name that
        differs is refused, left as it is (as a cluster's worker does: pages.archive.unpack)."""
        from .pages import archive
        missing = []
        for name, sha in recordings.items():
            archive.check_name(str(name))
            if not archive.archive_exists(str(name), self.sites.root):
                missing.append(name)
                continue
            have = archive.identity(str(name), self.sites.root)
            if have != sha:
                raise ValueError(f"{name}: {archive.replay_root(self.sites.root, str(name))} holds another recording "
                                 f"of that name (hash {have[:12]}, the client's {str(sha)[:12]}); it is left as it is: "
                                 "remove it or rename one of them")
        return {"missing": missing}

    def replay_put(self, name: str, sha256: str, part: int, parts: int, data: str) -> dict:
        """A part of a recording (replay_parts); with the last, the recording is verified (its hash, each
        body's digest, the archive as a replay reads it) and written into this machine's sites."""
        from .pages import archive
        self._claim()
        archive.check_name(str(name))
        got = self._incoming.setdefault(name, [])
        if int(part) != len(got):
            self._incoming.pop(name, None)
            raise ValueError(f"{name}: part {part} came where part {len(got)} was due; send it again from part 0")
        got.append(base64.b64decode(data, validate=True))
        if sum(len(x) for x in got) > REPLAY_MAX_BYTES:
            self._incoming.pop(name, None)
            raise ValueError(f"{name}: larger than {REPLAY_MAX_BYTES >> 20} MiB, the most a recording may bring")
        if len(got) < int(parts):
            return {"received": len(got)}
        packed = archive.Packed.from_bytes(name, str(sha256), b"".join(self._incoming.pop(name)))
        return {"written": archive.unpack(packed, self.sites.root)}

    def replay_start(self, names: list) -> dict:
        """Replay the client's recordings (sent first: replay_missing, replay_put) beside the pages, each
        recorded host on a replay address of this machine's; the servers restart with the same
        certificate, the one serving still serving. Returns what the client maps the hosts to."""
        from .pages import archive
        from .servers import Replay
        from .pages.replayd import ACTIVE_REPLAY
        self._claim()
        names = [archive.check_name(str(n)) for n in names]
        if self.replay is not None and list(self.replay.names) == names:
            return self._replay_answer()
        every, own = replay_addresses(self.topology.plan.index)
        replay = Replay.of(self.sites.root, names, every, own, active=self.topology.plan.run_dir / ACTIVE_REPLAY)
        self._make_servers(self.server.name, replay)  # another set of recordings: the addresses stay
        return self._replay_answer()

    def _replay_answer(self) -> dict:
        r = self.replay
        return {"net": replay_net(self.topology.plan.index), "origins": [list(o) for o in r.origins],
                "own": [list(o) for o in r.own]}

    def think_set(self, think: str | None) -> dict:
        """The think time of the client's loads to come (its canonical text, pages.timing; None: off). The
        servers gain a think stage when a client first asks one (they restart with the same certificate,
        the one serving still serving), and keep it until the client leaves."""
        self._claim()
        think = None if think is None else think_of_text(str(think)).label  # refused here if it is not one
        if think is not None and not self.think:
            self.think = True
            self._make_servers(self.server.name, self.replay)
        if self.think:
            self.server.set_think(think)
        return {"think": think}

    def replay_active(self, name: str) -> dict:
        """Name the recording the client measures now (several replayed at once: replayd --active)."""
        from .pages.replayd import write_active
        if self.replay is None or name not in self.replay.names:
            raise ValueError(f"{name}: not among the recordings this machine replays now")
        write_active(self.replay.active, name)
        return {}

    def names_start(self, mode: str) -> dict:
        """The name server of a client's --discovery campaign (dns.NameServer) on this machine's --addr,
        UDP 53: it answers the test host with --addr (and an HTTPS record in https-rr), refuses every
        other name and forwards nothing. It runs until the client leaves or asks names_stop."""
        from . import dns
        self._claim()
        mode = dns.parse(str(mode), "discovery")
        if mode == "forced":
            raise ValueError("discovery 'forced' needs no name server")
        self.names_stop()
        self.names = dns.NameServer(None, self.addr, self.server.all_origins, mode, self.topology.plan.run_dir)
        try:
            self.names.start()
        except Exception:
            self.names_stop()
            raise
        return {"origins": [list(o) for o in self.names.origins], "mode": mode}

    def names_queries(self) -> dict:
        """What the name server answered so far: [[type, name], ...] (dns.parse_query_log)."""
        if self.names is None:
            raise ValueError("no name server runs: a client starts it for a --discovery campaign")
        died = self.names.died_reason()
        if died:
            raise ValueError(died)
        return {"queries": [list(q) for q in self.names.queries()]}

    def names_stop(self) -> dict:
        if self.names is not None:
            self.names.stop()
            self.names = None
        return {}

    def iperf_start(self) -> dict:
        from .link.verify import Iperf
        self._claim()
        with self._iperf_lock:
            if self.iperf is None:
                self.iperf = Iperf(None, self.addr, log=self.topology.plan.run_dir / "iperf3.log").__enter__()
        return {}

    def iperf_stop(self) -> dict:
        with self._iperf_lock:
            if self.iperf is not None:
                self.iperf.__exit__(None, None, None)
                self.iperf = None
        return {}


# what a client may ask of a serve beyond pages: names, the name server of a --discovery campaign
# (names_start); replay, a recording it sends (replay_missing, replay_put, replay_start)
SERVE_FEATURES = ("names", "replay")
LEAVE_WAIT_S = 60.0  # how long a client waits for the last one's cleanup (a replay's servers restarting)
QLOG_SETTLE_S = 0.1  # a qlog whose size stood still this long is whole (its connection closed)


def write_private(path: Path, text: str) -> None:
    """A file only root can read (the token and the pin)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def read_sysctls(names) -> dict:
    out = {}
    for n in names:
        try:
            out[n] = Path("/proc/sys", *n.split(".")).read_text().split("\n")[0].replace("\t", " ")
        except OSError:
            out[n] = None
    return out


# -- client side -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RemotePlan:
    """The names the runner, the captures and the link check use, for a client on a real host."""

    index: int
    iface: str
    server_ip: str
    client_ip: str
    replay_net: str | None = None  # the server machine's replay addresses, routed through server_ip

    client_ns = None
    server_ns = None

    @property
    def peers(self) -> list[str]:
        """What the test traffic comes from: the server's address, and its replay's net."""
        return [self.server_ip] + ([self.replay_net] if self.replay_net else [])

    @property
    def hosts_path(self) -> Path:
        """The browser worker's own hosts file (client_etc), bind-mounted over /etc/hosts for it alone."""
        return self.run_dir / "etc" / "hosts"

    @property
    def origins(self) -> list[tuple[str, str]]:
        """The one origin a server machine serves: the test host on its address (a many-origin page
        needs an address per origin, which a real host's interface is not given: refused)."""
        from .pages import HOST
        return [(HOST, self.server_ip)]

    @property
    def prefix(self) -> str:
        return f"pb{self.index}"

    @property
    def run_dir(self) -> Path:
        from .topology import RUN_DIR
        return RUN_DIR / self.prefix

    @property
    def client_if(self) -> str:
        return self.iface

    @property
    def ifb(self) -> str:
        return hostnet.ifb_name(self.prefix)

    @property
    def chain(self) -> str:
        return hostnet.chain_name(self.prefix)

    @property
    def queue(self) -> int:
        return QUEUE_BASE + self.index

    def client_etc(self, name_server: str | None = None) -> dict[str, str]:
        """The browser worker's own /etc/hosts and resolv.conf, bind-mounted over this machine's for
        it alone (cmd.with_own_files): the user's files are never touched."""
        from .topology import client_etc
        return client_etc(self.prefix, self.origins, name_server)

    def describe(self) -> dict:
        return {"mode": "two machines", "prefix": self.prefix, "iface": self.iface, "ifb": self.ifb,
                "addresses": {"client": self.client_ip, "server": self.server_ip,
                              **({"replay_net": self.replay_net} if self.replay_net else {})},
                "shaped": {"ports": list(SHAPED_PORTS), "icmp": True}}


class RemoteServer:
    """The client's view of one server of the server machine (Caddy, quinnserve): its pin, its access
    log and CPU through the control channel."""

    proc = None  # not a process of this machine: its CPU comes from cpu()
    replay = None  # what the server machine replays for this campaign (servers.Replay: hosts -> its addresses)
    statics = ()  # folders served as they are: not on a server machine

    def __init__(self, control: Control, hello: dict, name: str = servers.DEFAULT):
        self.control, self.hello = control, hello
        cls = servers.get(name)
        self.name, self.label, self.meta_key = cls.name, cls.label, cls.meta_key
        self.cert = dataclasses.make_dataclass("Pin", ["spki_sha256_b64"])(hello["pin"])
        # a serve from before it listed its servers ran Caddy alone, with Caddy's info under "caddy"
        self._said = (hello.get("servers") or {}).get(name) or {"info": hello.get("caddy", {})}

    def info(self) -> dict:
        return {**(self._said.get("info") or {}), "where": "remote"}

    def quic_buffer_warning(self) -> str | None:
        return self.hello.get("quic_buffer_warning")

    def quic_cc(self) -> str:
        if self._said.get("quic_cc"):
            return self._said["quic_cc"]
        from .servers.caddy import QUIC_CC
        return QUIC_CC

    def set_quic_cc(self, cc: str) -> None:
        """Caddy's quic-go runs its own controller."""

    def activate(self, recording: str) -> None:
        """Name the recording measured now: the server machine's replay answers from it alone."""
        self.control.call("replay_active", name=recording)

    def set_think(self, think: str | None) -> None:
        """The think time of the loads to come: the server machine's servers think (think_set)."""
        self.control.call("think_set", think=think)

    def died_reason(self) -> str | None:
        """It runs on the other machine: a death there shows as a failing control call, not here."""
        return None

    def access_entries(self, uri: str, wait_s: float = 2.0, expect: int = 1, own=None) -> list[dict]:
        """The server's entries since the last call (base.Server.access_entries); own, how a trial's are
        told where not by its URI (a replayed recording's: by host and time), is judged here: the
        entries are asked for until `expect` of them are the trial's or wait_s has passed."""
        if own is None:
            return self.control.call("access", timeout_s=wait_s + 30, uri=uri, wait_s=wait_s, expect=expect)["entries"]
        import time
        deadline, found = time.monotonic() + wait_s, []
        while True:
            found += self.control.call("access", timeout_s=30, uri=uri, wait_s=0.0, expect=expect)["entries"]
            if (any(e.get("uri") == uri for e in found) and len(own(found)) >= expect) or time.monotonic() >= deadline:
                return found
            time.sleep(0.05)

    def cpu(self) -> dict:
        return {k: tuple(v) for k, v in self.control.call("cpu").items()}


class RemoteNameServer:
    """The client's view of the server machine's name server of a --discovery campaign (serve's
    names_start): its queries through the control channel; it stops when the client leaves."""

    label = "the server machine's name server (dnsmasq)"

    def __init__(self, control: Control, mode: str):
        self.control, self.mode = control, mode

    def start(self) -> None:
        self.control.call("names_start", timeout_s=30, mode=self.mode)

    def queries(self) -> list[tuple[str, str]]:
        return [tuple(q) for q in self.control.call("names_queries")["queries"]]

    def died_reason(self) -> str | None:
        """It runs on the other machine: a death there shows as a failing lookup or control call."""
        return None

    def stop(self) -> None:
        try:
            self.control.call("names_stop")
        except Exception:  # the channel is gone: serve stops it as the client leaves
            pass


class RemoteQlogs:
    """A server machine's qlogs (capture kind qlog; 'plt-bench serve --qlog'), through its control
    channel: the names before a trial, then the files that appeared during it, written into the
    trial's folder (capture.TrialCapture)."""

    def __init__(self, control: Control):
        self.control = control

    def before(self) -> set[str]:
        return set(self.control.call("qlog_list")["names"])

    def take(self, before: set[str], folder: Path, wait_s: float) -> list:
        from .capture import Artifact
        got = self.control.call("qlog_take", timeout_s=wait_s + 30, before=sorted(before), wait_s=wait_s)["files"]
        out = []
        for name, data in sorted(got.items()):
            target = folder / Path(name).name  # a name, never a path from the other machine
            target.write_bytes(base64.b64decode(data))
            out.append(Artifact("qlog", target, target.stat().st_size))
        return out


class RemoteSites:
    """The pages of a server machine, as its control channel lists them ({file: bytes}); root: this
    machine's page sets, whose recordings the campaign sends to the server machine (replay_put)."""

    def __init__(self, pages: dict, addr: str, root: Path | None = None):
        self.pages, self.addr, self.root = pages, addr, root

    def ensure(self, pages) -> None:
        pages = [p for p in pages if not p.page_kind.recording_name(p)]  # recordings travel (RemoteTestbed)
        many = [p.label for p in pages if p.origins > 1]
        if many:
            raise UsageError(f"--size: {', '.join(many)} spread over several origins, each on an address of its own: "
                             "the embedded testbed gives them, a server machine does not; run them without --server-machine")
        missing = [p for p in pages if any(self.pages.get(name) != size for name, size, _ in p.files())]
        if missing:
            names = ",".join(p.label for p in missing)
            raise UsageError(f"--size: the server at {self.addr} does not have {', '.join(p.html_name for p in missing)};"
                             f" restart it with the pages: plt-bench serve --addr {self.addr} --size {names}")


class RemoteIperf:
    """iperf3 -s on the server for the link check, started and stopped through the control channel."""

    def __init__(self, control: Control):
        self.control = control

    def __enter__(self):
        self.control.call("iperf_start")
        return self

    def __exit__(self, *exc):
        self.control.call("iperf_stop")


def make_ref(addr: str | None, pin: str | None, token: str | None, control_port, iface: str | None,
             token_file: str | None = None, environ: dict | None = None) -> ServerRef | None:
    """The server the options name, or None (the embedded testbed); refuses half of a pair. The
    token comes from token_file, else --server-token, else the environment (PLT_BENCH_SERVER_TOKEN)."""
    from .control import check_token
    env_token = (os.environ if environ is None else environ).get(TOKEN_ENV)
    if addr is None:
        for option, value in (("--server-pin", pin), ("--server-token", token), ("--server-token-file", token_file),
                              ("--control-port", control_port), ("--iface", iface)):
            if value is not None:
                raise UsageError(f"{option}: only with --server-machine ADDR (two machines); the embedded testbed needs none")
        return None
    if token is not None and token_file is not None:
        raise UsageError("--server-token-file: give the token one way, not with --server-token as well")
    if pin is None:
        raise UsageError("--server-pin: required with --server-machine; 'plt-bench serve' prints it on the server machine")
    if token_file is not None:
        token, source = read_token_file(token_file), "file"
    elif token is not None:
        token, source = check_token(token), "argv"
    elif env_token is not None:
        token, source = check_token(env_token.strip(), TOKEN_ENV), "environment"
    else:
        raise UsageError(f"--server-token-file: required with --server-machine (or set {TOKEN_ENV}); 'plt-bench serve' "
                         "prints the token and writes it to its --info-file")
    if iface is not None:
        hostnet.check_iface_name(iface)
    return ServerRef(addr, parse_pin(pin), token,
                     SERVER_PORT_DEFAULT_CONTROL if control_port is None else parse_port(control_port), source)
