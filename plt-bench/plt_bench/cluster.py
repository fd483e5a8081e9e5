"""Campaigns over many machines on Dask distributed: the cluster's whole life in one place.
(Imports inside functions: Dask is an optional dependency, imported by what runs on it.)

    plt-bench worker --scheduler tcp://HEAD:8786 [--testbed N]    # on each measuring host
    plt-bench run CAMPAIGN --cluster tcp://HEAD:8786              # on the head

- A worker is one Dask worker process with one thread and the resource testbed=1: a host runs
  one cell at a time, on its own testbed (index N).
- A worker declares what it can run as Dask resources of its own (worker_capabilities,
  capability_resources: each browser and server installed, a netem kernel, CPU budgets); each
  cell asks for what its campaign needs (needs), so it goes only to a worker that can run it, and
  a campaign that no worker can run is refused before it starts, naming what each worker lacks.
- A campaign's recordings travel with it: packed by the head, sent to every worker once, written
  by a worker that lacks them, verified by their hashes there (Head._send_recordings, travelled).
- The unit of work is a cell: its conditions and page, both protocols, all its runs, interleaved
  as on one machine. measure_cell runs plt_bench.session on the worker's testbed, so every trial
  takes the same path as a local run's.
- Trials stream back to the head as they finish (a Dask queue per campaign); the head is the only
  writer of the store. Each trial records its host (host/pbN). A trial's captures come with it, in
  the same message: its CPU series and its capture files, each with its hash (outgoing), which the
  head checks and writes under its own captures folder (write_back); a file it could not keep is
  named, counted and listed in the campaign's metadata (captures_lost), never stored as present.
- A worker may have a server machine of its own (`plt-bench worker --server-machine ADDR ...`, WorkerServer):
  every cell it measures is then a two-machine campaign's, served from there, and it declares the
  servers that machine runs.
- A worker lost during a cell: Dask runs the cell again on another worker, which skips the slots
  the head already holds (a Dask variable); the head stores no slot twice (should a copy arrive,
  the first ok trial of a slot stays). A cell that raises is submitted again, up to three times.
- Dask's own cost on a measured host is kept under 1% of a core (DASK_CONFIG: no statistical
  profiler, monitors every 10 s). Measured here with a 60 s window: idle 3.62% of a core with
  Dask's defaults, 0.33% with these; running 60 tasks of 0.5 s, 0.90%.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import shutil
import socket
import time
import uuid
from pathlib import Path
from typing import Callable

from .campaign import Slot
from .cpu import cpu_list
from .errors import PltBenchError, UsageError

MAX_SUBMISSIONS = 3  # of one cell: a cell that fails on three workers stops the campaign

RESOURCE = "testbed"
CONNECT_S = 15  # a scheduler that does not answer within this is an error, not a wait
DASK_CONFIG = {
    "distributed.worker.profile.enabled": False,       # its sampler woke every 10 ms: 3.3% of a core idle
    "distributed.admin.system-monitor.interval": "10s",
    "distributed.worker.memory.monitor-interval": "10s",
    "distributed.admin.tick.interval": "1s",
}
_ADDRESS = re.compile(r"(?:tcp|tls)://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(\d{1,5})")


def scheduler_address(text: str, option: str) -> str:
    """tcp://HOST:PORT or tls://HOST:PORT, checked (pure)."""
    m = _ADDRESS.fullmatch(text or "")
    if not m or not 0 < int(m.group(2)) < 65536:
        raise UsageError(f"{option}: '{text}' is not a scheduler address; expected tcp://HOST:PORT "
                         "(for example tcp://10.0.0.1:8786), or tls://HOST:PORT with --tls")
    return text


# -- what a cluster exposes, and to whom -----------------------------------------------------------------
# Dask's comm is an unauthenticated RPC that unpickles what it is sent, and a plt-bench worker runs
# as root: whoever reaches a worker's or the scheduler's port runs code there. So a worker listens
# only on the address that reaches its scheduler (loopback for a scheduler on this machine), or on
# the one given with --listen, never on every interface; and with --tls every connection is mutual
# TLS with certificates of one CA (cluster-tls makes them), the scheduler's too.
TLS_FILES = ("ca.pem", "node.pem", "node.key")  # the CA's certificate, a node's certificate and key


def tls_commands(folder: Path, days: int = 365) -> list[list[str]]:
    """openssl argv that make TLS_FILES in folder (pure): a CA (ECDSA P-256, its key kept beside as
    ca.key to sign more), and one node certificate signed by it that every scheduler, worker and head
    of the cluster presents (Dask verifies the chain, not the host name)."""
    f = Path(folder)
    ca_key, ca, key, csr, node = f / "ca.key", f / "ca.pem", f / "node.key", f / "node.csr", f / "node.pem"
    return [
        ["openssl", "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(ca_key), "-out", str(ca), "-days", str(days), "-subj", "/CN=plt-bench cluster CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(csr), "-subj", "/CN=plt-bench cluster node"],
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
         "-out", str(node), "-days", str(days)],
    ]


def make_tls(folder: Path) -> list[Path]:
    """cluster-tls: a new folder of TLS files for a cluster (never over an existing one), private (0700,
    files 0600). Returns the files a scheduler, worker or head needs (TLS_FILES)."""
    from . import cmd
    folder = Path(folder)
    if folder.exists():
        raise UsageError(f"DIR: {folder} exists; plt-bench makes a cluster's TLS files in a new folder")
    if not folder.parent.is_dir():
        raise UsageError(f"DIR: the folder {folder.parent} does not exist")
    old = os.umask(0o077)
    try:
        folder.mkdir(mode=0o700)
        for argv in tls_commands(folder):
            cmd.run(argv)
        for extra in ("node.csr", "ca.srl"):
            (folder / extra).unlink(missing_ok=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        os.umask(old)
    return [folder / name for name in TLS_FILES]


def security(tls: str | None, address: str, option: str):
    """distributed.Security for a tls:// scheduler from a folder of TLS_FILES (mutual TLS, encryption
    required), None for tcp://; a folder without tls://, tls:// without a folder, or a missing file
    is refused by name."""
    scheme = address.split("://", 1)[0]
    if scheme == "tls" and not tls:
        raise UsageError(f"{option}: {address} is a TLS scheduler; give --tls DIR (its ca.pem, node.pem and node.key: "
                         "plt-bench cluster-tls DIR makes them)")
    if tls and scheme != "tls":
        raise UsageError(f"--tls: the scheduler {address} speaks plain TCP; give its tls:// address (a scheduler "
                         "started with --tls-ca-file, --tls-cert and --tls-key)")
    if not tls:
        return None
    files = [Path(tls) / name for name in TLS_FILES]
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise UsageError(f"--tls: {', '.join(missing)} missing; expected a folder with {', '.join(TLS_FILES)} "
                         "(plt-bench cluster-tls DIR makes one)")
    for key in (Path(tls) / "node.key", Path(tls) / "ca.key"):  # whoever holds a key joins the cluster as root
        mode = key.stat().st_mode if key.is_file() else 0
        if mode & 0o077:
            raise UsageError(f"--tls: {key} can be read by other users (mode {mode & 0o777:04o}); whoever holds it "
                             f"joins the cluster: make it yours alone: chmod 600 {key}")
    from distributed.security import Security
    ca, cert, key = (str(p) for p in files)
    return Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, tls_worker_cert=cert,
                    tls_worker_key=key, tls_scheduler_cert=cert, tls_scheduler_key=key, require_encryption=True)


def listen_host(address: str, given: str | None = None) -> str:
    """Where a worker's ports listen: the address given (--listen), else this machine's own address on
    the route to the scheduler (127.0.0.1 for a scheduler on loopback); never every interface."""
    if given:
        import ipaddress
        try:
            ip = ipaddress.ip_address(given.strip("[]"))
        except ValueError:
            raise UsageError(f"--listen: '{given}' is not an address of this machine; expected one such as "
                             "10.0.0.2 (the interface the scheduler reaches)") from None
        if ip.is_unspecified or ip.is_multicast:
            raise UsageError(f"--listen: {given} is every interface (or none); a worker runs what it is sent as root, "
                             "so it listens on one address: the one its scheduler reaches, such as 10.0.0.2")
        given = str(ip)
        try:
            with socket.socket(socket.AF_INET6 if ":" in given else socket.AF_INET) as s:
                s.bind((given, 0))
        except OSError as e:
            raise UsageError(f"--listen: {given} is not an address of this machine ({e.strerror})") from None
        return given
    m = _ADDRESS.fullmatch(address)
    host, port = m.group(1).strip("[]"), int(m.group(2))
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as e:
        raise UsageError(f"--scheduler: {address}: its host {host} does not resolve ({e.strerror}); give its "
                         "address or a name this machine resolves") from None
    for family, _, _, _, sockaddr in found:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(sockaddr)  # no packet is sent: the kernel picks the route and its source address
            return s.getsockname()[0]
    raise UsageError(f"--scheduler: {address}: no route to its host")


def dask_host(host: str) -> str:
    """A listen host as Dask takes it (pure): an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def check_answers(address: str, option: str, tls: str | None = None) -> None:
    """A TCP connection to the scheduler's port, before anything is claimed or started: a refused
    port fails at once, an unreachable host within CONNECT_S. With a TLS folder, a TLS handshake as
    Dask makes it (its certificate, its CA, the chain not the name), so that a wrong CA, a bad key or
    a plain scheduler is said as such (Dask's own join only times out on each)."""
    m = _ADDRESS.fullmatch(address)
    host, port = m.group(1).strip("[]"), int(m.group(2))
    try:
        raw = socket.create_connection((host, port), timeout=CONNECT_S)
    except OSError as e:
        raise UsageError(f"{option}: no Dask scheduler answers at {address} ({e.strerror or type(e).__name__}); "
                         "start one there with: dask scheduler") from e
    with raw:
        if tls:
            handshake(raw, Path(tls), address, option)


def handshake(raw: socket.socket, tls: Path, address: str, option: str) -> None:
    import ssl
    ca, cert, key = (tls / name for name in TLS_FILES)
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
        ctx.check_hostname = False  # Dask verifies the chain, not the host name
        ctx.load_cert_chain(str(cert), str(key))
    except (ssl.SSLError, OSError) as e:
        raise UsageError(f"--tls: {ca}, {cert} and {key} are not a CA, a certificate and its key ({e}); make the "
                         "folder anew: plt-bench cluster-tls DIR") from None
    raw.settimeout(CONNECT_S)
    try:
        with ctx.wrap_socket(raw):
            pass
    except ssl.SSLCertVerificationError as e:
        raise UsageError(f"--tls: the scheduler at {address} presents a certificate that {ca} did not sign "
                         f"({e.verify_message}); give the folder of the scheduler's own cluster") from None
    except (ssl.SSLError, OSError) as e:
        raise UsageError(f"{option}: the scheduler at {address} did not complete a TLS handshake "
                         f"({e.strerror if isinstance(e, OSError) and e.strerror else e or type(e).__name__}): is it "
                         "a plain tcp:// scheduler? Give its tcp:// address without --tls, or start it with "
                         "--tls-ca-file, --tls-cert and --tls-key") from None


def unsupported(spec) -> None:
    """What a cluster's campaign cannot carry, refused before anything starts (pure): a server
    machine named by the head (a worker names its own: WorkerServer) and served folders."""
    if spec.server_machine:
        raise UsageError("--server-machine: not with --cluster: a server machine is a worker's own (plt-bench worker "
                         "--scheduler ... --server-machine ADDR --server-pin PIN --server-token-file FILE --iface IFACE); "
                         "or run the campaign across two machines without --cluster")
    if spec.folders:  # recordings travel to the workers (Head._send_recordings); folders do not yet
        raise UsageError(f"--folder: {spec.folders[0][0]}={spec.folders[0][1]}: served folders are not sent to a cluster's "
                         "workers; record the page (plt-bench record URL --name NAME --folder HOST=DIR) and give "
                         "--size har:NAME, whose recording travels")


# -- what a worker can run ------------------------------------------------------------------------
CAN = "can-"  # a capability's Dask resource: can-browser-firefox, can-server-quinn, can-netem, can-cpu-budget


def capability_resources(caps: dict) -> dict[str, int]:
    """A worker's capabilities (worker_capabilities) as the Dask resources it declares (pure)."""
    out = {f"{CAN}browser-{b}": 1 for b in caps.get("browsers") or {}}
    out |= {f"{CAN}server-{s}": 1 for s in caps.get("servers") or ()}
    out |= {f"{CAN}{k.replace('_', '-')}": 1 for k in ("netem", "cpu_budget") if caps.get(k)}
    return out


def worker_capabilities() -> dict:
    """What this machine can run: the browsers installed (with their versions) and the servers, a
    kernel with sch_netem, the CPU controller a budget needs, its cores."""
    from . import browsers, servers
    from .device.cgroup import CgroupError, machine_layout
    from .link import netem_available
    try:
        machine_layout()
        budget = True
    except (CgroupError, OSError):
        budget = False
    return {"browsers": {n: browsers.get(n).versions() for n in browsers.NAMES if browsers.get(n).installed()},
            "servers": [n for n in servers.NAMES if servers.get(n).installed()],
            "netem": netem_available(), "cpu_budget": budget, "cores": os.cpu_count() or 1}


def needs(spec) -> dict[str, int]:
    """What every cell of a campaign asks of its worker (pure): each browser and server it names, a
    netem kernel where its link is netem, the CPU controller where it has a budget or a device."""
    out = {f"{CAN}browser-{b}": 1 for b in spec.grid.browsers} | {f"{CAN}server-{s}": 1 for s in spec.grid.servers}
    if spec.link == "netem":
        out[f"{CAN}netem"] = 1
    if any(b.cpu is not None or b.device for b in spec.grid.budgets):
        out[f"{CAN}cpu-budget"] = 1
    return out


WORDS = {"netem": "a kernel with sch_netem (--link netem)", "cpu-budget": "the CPU controller (--cpu, --device)"}


def no_worker_can(wanted: dict[str, int], workers: dict[str, dict[str, float]]) -> str | None:
    """Why no worker can run a campaign that needs `wanted` (its workers' names -> their declared
    resources), or None where one can (pure)."""
    if not workers:
        return "no worker has joined the scheduler"
    lacks = {name: sorted(k for k in wanted if have.get(k, 0) < wanted[k]) for name, have in workers.items()}
    if any(not v for v in lacks.values()):
        return None
    def said(k: str) -> str:
        k = k[len(CAN):]
        return WORDS.get(k, k.replace("-", " ", 1))
    return "; ".join(f"{name} lacks {', '.join(said(k) for k in v)}" for name, v in sorted(lacks.items()))


def cells(spec) -> list[tuple]:
    """The campaign's cells in its plan's order: (conditions, page)."""
    out = []
    for slot in spec.plan():
        if slot.place not in out:
            out.append(slot.place)
    return out


def cell_spec(spec, cond, page):
    """The campaign restricted to one cell: its conditions and page, every protocol and run (pure).
    Its plan is the campaign's plan for that cell, in the same order."""
    grid = dataclasses.replace(spec.grid, pages=(page,), conditions=(cond,))
    return dataclasses.replace(spec, grid=grid, within=spec.grid)


def host_name(index: int) -> str:
    return f"{socket.gethostname()}/pb{index}"


# -- a trial's captures, back to the head ----------------------------------------------------------------
# A trial travels to the head in one message (outgoing): the trial, its CPU series and its capture
# files. A worker that disappears before the message is on the queue sent nothing of that trial (its
# cell runs again elsewhere: nothing lost, nothing counted twice); once it is there, it is whole.
# The files pass through the scheduler's memory, so a trial sends SEND_MAX_BYTES of them at most; a
# larger one stays out, named (a campaign of huge pcaps captures on one machine).
SEND_MAX_BYTES = 256 * 10**6


@dataclasses.dataclass(frozen=True)
class CaptureFile:
    """One capture file of a trial on its way to the head."""
    kind: str                     # capture.KINDS
    name: str                     # its name in the trial's capture folder
    size_bytes: int
    sha256: str                   # of the file as the worker read it ("" where not read)
    note: str | None = None
    content: bytes | None = None  # None: not sent (unsent says why)
    unsent: str | None = None


def outgoing(store, trial, host: str, limit_bytes: int = SEND_MAX_BYTES) -> dict:
    """Run on a worker: the message that carries a stored trial to the head: {"trial" (its host set,
    its id cleared), "cpu_samples", "captures" [CaptureFile], "folder" (the trial's capture folder's
    name without its worker's sequence number)}. Files are read in the order stored until limit_bytes;
    one beyond it, or unreadable, goes without its content, saying why."""
    import hashlib
    files, sent, folder = [], 0, ""
    for a in store.artifacts(trial.trial_id):
        path = Path(a["path"])
        folder = path.parent.name.split("-", 1)[-1]
        try:
            size = path.stat().st_size
            if sent + size > limit_bytes:
                files.append(CaptureFile(a["kind"], path.name, size, "", a["note"],
                                         unsent=f"{size / 1e6:,.1f} MB would take the trial's files past the "
                                                f"{limit_bytes / 1e6:,.0f} MB a trial sends to the head"))
                continue
            content = path.read_bytes()
        except OSError as e:
            files.append(CaptureFile(a["kind"], path.name, a["bytes"] or 0, "", a["note"],
                                     unsent=f"not readable on the worker: {type(e).__name__}: {e}"[:300]))
            continue
        sent += len(content)
        files.append(CaptureFile(a["kind"], path.name, len(content), hashlib.sha256(content).hexdigest(), a["note"],
                                 content))
    samples = store.cpu_samples(trial.trial_id) if trial.trial_id is not None else []
    return {"trial": dataclasses.replace(trial, host=host, trial_id=None), "cpu_samples": samples,
            "captures": files, "folder": folder}


def attempts_failed(attempts: int, workers: int) -> str:
    """A cell's failures in words (pure): how often, and among how many workers it could have run on
    (Dask may give every attempt to the same one: 'failed on 3 workers' was said so of one worker)."""
    if workers == 1:
        return f"failed {attempts} times, on its one worker"
    return f"failed {attempts} times, among {workers} workers able to run it"


def capture_name_problem(name: object) -> str | None:
    """Why a capture file's name from a worker may not be written at the head (pure), or None: one
    path component, not hidden, not empty, of a length a file system takes (input: the worker's
    word, which the head does not trust)."""
    if not isinstance(name, str) or not name:
        return "its name is empty or not text"
    if "/" in name or "\\" in name or "\0" in name or name.startswith(".") or len(name.encode()) > 200:
        return f"its name {name[:60]!r} is not one plain file name (no '/', NUL, leading '.', at most 200 bytes)"
    return None


def write_back(files: list[CaptureFile], folder: Path) -> tuple[list, list[str]]:
    """At the head: a trial's files written into folder, each checked against its hash first;
    (capture.Artifact of each written, why each other was not: one line per file)."""
    import hashlib

    from .capture import Artifact
    written, lost = [], []
    for f in files:
        what = f"{f.kind} {str(f.name)[:60]}"
        bad_name = capture_name_problem(f.name)
        if bad_name:
            lost.append(f"{what}: {bad_name}; not kept")
            continue
        if f.content is None:
            lost.append(f"{what}: {f.unsent or 'not sent'}")
            continue
        if hashlib.sha256(f.content).hexdigest() != f.sha256 or len(f.content) != f.size_bytes:
            lost.append(f"{what}: its hash does not match what the worker read (damaged on the way); not kept")
            continue
        target = folder / f.name
        old = os.umask(0o077)  # key logs decrypt the traffic: private, as a local run's (capture.Settings)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{f.name}.part")
            tmp.write_bytes(f.content)
            os.replace(tmp, target)
        except OSError as e:
            try:
                (folder / f".{f.name}.part").unlink(missing_ok=True)
            except OSError:  # no folder to leave it in
                pass
            lost.append(f"{what}: could not be written at the head ({type(e).__name__}: {e})"[:300])
            continue
        finally:
            os.umask(old)
        written.append(Artifact(f.kind, target, len(f.content), f.note))
    return written, lost


# -- several workers on one machine: each pinned to its own CPUs --------------------------------------
# A trial needs two cores: measured here (2 cores), loading 100 MB at 1 Gbit/s kept both busy, over
# QUIC 1.85-1.95 cores (one load: network 1.25, renderer 1.56, Caddy 1.20, browser 0.34 CPU s in
# 2.33 s) and over TCP 1.90-1.98 (renderer 1.36-1.46 of it), three loads each; and the emulator's
# thread per direction wants a core of its own at 1 Gbit/s. A worker with fewer would measure its
# own CPU shortage.
CORES_PER_WORKER = 2


def claim_problem(wanted: tuple[int, ...], shared: bool, available: tuple[int, ...],
                  claims: dict[str, dict]) -> str | None:
    """Why a worker may not take the CPUs `wanted` (pure), or None. claims: the live workers'
    {"cpus": [...], "shared": bool} by testbed prefix. A pinned worker needs CORES_PER_WORKER
    CPUs this process may use that no other worker holds; workers that share cores
    (--share-cores, for a machine too small to pin) may only run beside other sharing workers."""
    if shared:
        pinned = sorted(p for p, c in claims.items() if not c.get("shared"))
        if pinned:
            return (f"--share-cores: worker(s) {', '.join(pinned)} on this machine are pinned to their own CPUs; a "
                    "worker sharing every core would disturb their trials")
        return None
    missing = sorted(set(wanted) - set(available))
    if missing:
        return (f"--cpus: CPU(s) {cpu_list(missing)} are not this machine's to use (it may use "
                f"{cpu_list(available)})")
    if len(wanted) < CORES_PER_WORKER:
        return (f"--cpus: {cpu_list(wanted)} is {len(wanted)} CPU; a worker needs {CORES_PER_WORKER} (a trial at 1 "
                "Gbit/s keeps two cores busy)")
    for p, c in sorted(claims.items()):
        both = sorted(set(wanted) & set(c.get("cpus") or []))
        if both:
            how = "shares every core" if c.get("shared") else f"is pinned to {cpu_list(c['cpus'])}"
            return f"--cpus: CPU(s) {cpu_list(both)} are held by worker {p}, which {how}"
    return None


def choose_cpus(available: tuple[int, ...], claims: dict[str, dict]) -> tuple[int, ...] | None:
    """The first CORES_PER_WORKER CPUs no live worker holds (pure); None when too few are left."""
    held = {c for x in claims.values() for c in (x.get("cpus") or [])}
    free = [c for c in available if c not in held]
    return tuple(free[:CORES_PER_WORKER]) if len(free) >= CORES_PER_WORKER else None


def live_claims(own_index: int | None = None) -> dict[str, dict]:
    """The CPU claims of the other workers running on this machine (a dead owner's is ignored)."""
    from .topology import owner_alive, worker_claims
    return {p: c for p, c in worker_claims().items() if p != f"pb{own_index}" and owner_alive(c)}


def pin(index: int, cpus: str | None, share: bool) -> tuple[Path, tuple[int, ...], bool]:
    """Claim this worker's CPUs (chosen, or --cpus) and pin this process, every thread of it and so
    everything it starts (Caddy, linkem, Chromium) to them; --share-cores claims without pinning.
    Returns (the claim file, the CPUs, shared). Refused with a message naming the option."""
    import fcntl
    import json

    from . import procs
    from .cpu import own_cpus, parse_cpus, pin_threads
    from .topology import RUN_DIR, claim_path, remove_empty_run_dir
    available = own_cpus()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    lock = os.open(RUN_DIR, os.O_RDONLY)
    path = None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two workers starting at once do not pick the same CPUs
        mine = live_claims().get(f"pb{index}")
        if mine is not None:  # another live worker's testbed: its claim and scratch folder stay its own
            raise UsageError(f"--testbed: cluster worker PID {mine.get('owner_pid')} holds testbed {index} (pb{index}); "
                             "give this worker another --testbed")
        claims = live_claims(index)
        if share:
            wanted = available
        elif cpus:
            wanted = parse_cpus(cpus, "--cpus")
        else:
            wanted = choose_cpus(available, claims)
            if wanted is None:
                held = ", ".join(f"{p} {cpu_list(c['cpus'])}" for p, c in sorted(claims.items())) or "none"
                raise UsageError(
                    f"--cpus: this machine lets a worker use {len(available)} CPU(s) ({cpu_list(available)}), held "
                    f"already: {held}; a worker needs {CORES_PER_WORKER} of its own (a trial at 1 Gbit/s keeps two "
                    f"cores busy), so no more workers fit here. Stop one, or give --share-cores to every worker of "
                    "this machine (their trials then disturb each other)")
        problem = claim_problem(wanted, share, available, claims)
        if problem:
            raise UsageError(problem)
        path = claim_path(index)
        path.write_text(json.dumps({"owner_pid": os.getpid(), "owner_start": procs.start_time(os.getpid()),
                                    "cpus": list(wanted), "shared": share}))
    finally:
        os.close(lock)
        if path is None:  # refused: nothing left behind
            remove_empty_run_dir()
    if not share:
        pin_threads(wanted)
    return path, tuple(wanted), share


# -- the worker side ----------------------------------------------------------------------------------
_WORKER: dict = {}  # this worker process's testbed index (set by serve_worker)


@dataclasses.dataclass(frozen=True)
class WorkerServer:
    """A server machine of a worker's own ('plt-bench worker --server-machine ADDR ...'): every cell the worker
    measures is served from there, as a two-machine campaign is (remote.py)."""
    ref: object                      # remote.ServerRef: address, pin, token, control port
    iface: str | None                # the worker machine's interface towards it
    token_file: str | None = None

    def cell(self, spec):
        """A cell's campaign as this worker measures it: against its server machine (pure)."""
        return dataclasses.replace(spec, server_machine=self.ref.addr, iface=self.iface, server_token_file=self.token_file)

    def session_args(self) -> dict:
        return {"server_pin": self.ref.pin, "server_token": None if self.token_file else self.ref.token,
                "control_port": str(self.ref.control_port)}

    def hello(self) -> dict:
        """The server machine's hello, its pin checked (UsageError naming the option); at the worker's
        start, so that a wrong pin or token is said before the worker joins."""
        from .control import Control
        try:
            control = Control(self.ref.addr, self.ref.control_port, self.ref.token)
        except (OSError, ValueError) as e:
            raise UsageError(f"--server-machine: no 'plt-bench serve' answers at {self.ref.addr}:{self.ref.control_port} "
                             f"with this token ({type(e).__name__}: {e})") from None
        try:
            said = control.call("hello")
        finally:
            control.close()
        if said.get("pin") != self.ref.pin:
            raise UsageError(f"--server-pin: the server's certificate has pin {said.get('pin')}, not {self.ref.pin}; "
                             "copy the pin the running 'plt-bench serve' printed")
        return said


def with_server_machine(caps: dict, hello: dict) -> dict:
    """A worker's capabilities where its cells are served by a server machine (pure): the servers
    are the ones that machine runs, and netem is its (the link shaped there where it may shape)."""
    return {**caps, "servers": list(hello.get("servers") or ["caddy"]),
            "netem": bool(hello.get("netem") and hello.get("may_shape"))}


def own_calibrations(host: str, given: dict[str, dict] | None, kept: tuple[str, dict] | None,
                     queue_name: str) -> dict:
    """The devices this worker's host calibrated for the campaign already (pure): those the head
    gives back from the campaign's metadata (given: by host), and those this worker measured in the
    campaign's run (kept: (its queue's name, devices)); another host's and another campaign's are not
    this host's."""
    mine = dict((given or {}).get(host) or {})
    if kept and kept[0] == queue_name:
        mine.update(kept[1])
    return mine


def travelled(recordings, sites: Path) -> dict[str, str]:
    """Run on a worker: each recording the campaign sent (pages.archive.Packed) written into this
    worker's sites once, verified there ({name: "written" | "there"}); ArchiveError on one damaged on
    the way or on another recording of that name here (the cell fails, saying so)."""
    from .pages import archive
    return {p.name: "written" if archive.unpack(p, sites) else "there" for p in recordings or ()}


def measure_cell(spec, cond, page, queue_name: str, timeout_s: float | None = None,
                 calibrations: dict[str, dict] | None = None, recordings=()) -> dict:
    """Run on a worker: the cell measured on this worker's testbed through plt_bench.session, each
    trial put on the campaign's queue as it is stored. Returns the cell's link checks and the
    testbed's key metadata, a named device's calibration on this host among them.

    A named device is calibrated by each host for itself, once per campaign: the worker keeps its
    calibrations for the campaign (by its queue) and the head gives back those of a resumed
    campaign (calibrations: by host, from its metadata), so that one host's cells share one budget;
    a cell that two hosts measured with different calibrations is not pooled (analysis.stats.unpooled).
    recordings: the campaign's recordings as they travel (Head.recordings), written here first."""
    from distributed import Queue, Variable

    from .pages.base import DEFAULT_SITES

    from .session import Session
    from .topology import RUN_DIR
    index = _WORKER["index"]
    host = host_name(index)
    queue = Queue(queue_name)
    done = set(pickle.loads(Variable(queue_name).get(timeout=30)))  # what the head already holds
    wrote = travelled(recordings, DEFAULT_SITES)
    # the cell's own store lives in the testbed's run folder: gone with the testbed, and after a
    # killed worker, with 'plt-bench clean'
    results = RUN_DIR / f"pb{index}" / "cell.sqlite"
    own = own_calibrations(host, calibrations, _WORKER.get("calibrations"), queue_name)
    machine = _WORKER.get("server")  # a server machine of this worker's own: the cell is two machines'
    one = machine.cell(cell_spec(spec, cond, page)) if machine else cell_spec(spec, cond, page)
    with Session(one, results, testbed_index=index, new=True, timeout_s=timeout_s,
                 calibrations=own, out=lambda line: None, **(machine.session_args() if machine else {})) as s:
        devices = s.store.campaign(s.campaign_id)["metadata"].get("devices")
        if devices:
            _WORKER["calibrations"] = (queue_name, devices)
        for slot in [x for x in s.todo if x not in done]:
            before = len(s.done.get(slot, []))
            s.run_slot(slot)
            for t in s.done.get(slot, [])[before:]:  # every attempt, as a local run stores them
                message = outgoing(s.store, t, host)
                queue.put(pickle.dumps(message))
                for f in {Path(a["path"]).parent for a in s.store.artifacts(t.trial_id)}:
                    shutil.rmtree(f, ignore_errors=True)  # sent: the worker's copy goes
        return {"host": host, "checks": s.store.link_checks(s.campaign_id), "recordings": wrote,
                "metadata": {**s.store.campaign(s.campaign_id)["metadata"], "cpus_shared": _WORKER.get("shared")}}


def serve_worker(scheduler: str, index: int, cpus: str | None = None, share: bool = False,
                 out: Callable[[str], None] = print, listen: str | None = None, tls: str | None = None,
                 server: WorkerServer | None = None) -> None:
    """'plt-bench worker': a Dask worker (one thread, testbed=1) until Ctrl-C or the scheduler goes,
    pinned to its own CPUs (cpus, or the first free ones) unless it shares every core. server: a
    server machine of its own, which serves every cell it measures."""
    import asyncio

    import dask
    from distributed import Worker

    from . import cmd
    cmd.require_root()
    scheduler_address(scheduler, "--scheduler")
    from .topology import in_use, our_prefixes, remove_empty_run_dir, worker_dir
    if f"pb{index}" in our_prefixes():  # the testbed's own claim, checked before joining rather than at a cell
        raise UsageError(f"--testbed: testbed {index} (pb{index}) is in use: {in_use(index)}")
    from .cpu import parse_cpus
    if share and cpus:
        raise UsageError("--cpus and --share-cores: give one (pinned to a CPU list, or sharing every core)")
    if cpus:
        parse_cpus(cpus, "--cpus")  # the form first, before anything is claimed
    sec = security(tls, scheduler, "--scheduler")
    host = listen_host(scheduler, listen)
    check_answers(scheduler, "--scheduler", tls)
    machine_hello = server.hello() if server else None
    _WORKER["index"] = index
    _WORKER["server"] = server
    claim, held, shared = pin(index, cpus, share)
    _WORKER["shared"] = shared
    how = "sharing every core" if shared else f"pinned to CPUs {cpu_list(held)}"
    caps = worker_capabilities()
    if machine_hello is not None:
        caps = with_server_machine(caps, machine_hello)
    declared = capability_resources(caps)
    said = "; ".join([*(" ".join(v for v in vs.values()) for vs in caps["browsers"].values()),
                      f"servers {', '.join(caps['servers'])}", "netem" if caps["netem"] else "no netem (linkem)",
                      f"CPU budgets {'yes' if caps['cpu_budget'] else 'no'}", f"{caps['cores']} cores"])

    async def main():
        with dask.config.set(DASK_CONFIG):
            try:
                # host: its comm and its HTTP port listen there only (Dask's default is every interface)
                w = await asyncio.wait_for(Worker(scheduler, nthreads=1, resources={RESOURCE: 1, **declared},
                                                  name=host_name(index), dashboard=False, host=dask_host(host),
                                                  security=sec,
                                                  local_directory=str(worker_dir(index))), CONNECT_S)
            except (OSError, asyncio.TimeoutError) as e:
                raise UsageError(f"--scheduler: no Dask scheduler answers at {scheduler} within {CONNECT_S} s "
                                 f"({type(e).__name__}); start one there with: dask scheduler") from e
            except ValueError as e:  # the scheduler refused the worker's name: another machine's pbN of that name
                raise UsageError(f"--testbed: the scheduler at {scheduler} refused this worker: {e}; give it another "
                                 "--testbed") from None
            out(f"plt-bench worker {host_name(index)} ({how}) joined {scheduler}, listening on {host} only"
                f"{f', serving from the server machine {server.ref.addr}' if server else ''}"
                f"{' (mutual TLS)' if sec else ''}; it declares {', '.join(k[len(CAN):] for k in declared)} ({said}); "
                "Ctrl-C to leave")
            await w.finished()
    try:
        asyncio.run(main())
    finally:
        shutil.rmtree(worker_dir(index), ignore_errors=True)
        claim.unlink(missing_ok=True)
        remove_empty_run_dir()


# -- the head -----------------------------------------------------------------------------------------
class Head:
    """The head of a campaign on a cluster: the store's only writer. Opened on a new campaign, or
    on the unfinished cluster campaign of the same name and definition (a rerun resumes it)."""

    def __init__(self, spec, store, client, scheduler: str, new: bool, out: Callable[[str], None],
                 timeout_s: float | None = None):
        from distributed import Queue, Variable

        from .metadata import utc_now
        from .session import attempts_so_far, todo
        self.spec, self.store, self.client, self.out, self.timeout_s = spec, store, client, out, timeout_s
        from . import procs
        from .session import owner_text
        store.mark_abandoned(procs.owner_alive)
        resume = None if new else store.resumable(spec.name, spec.spec_hash)
        if resume is not None and store.campaign(resume)["metadata"].get("mode") == "cluster":
            held = store.claim(resume, procs.me(), procs.owner_alive)
            if held:
                raise UsageError(f"CAMPAIGN: campaign {resume} ({spec.name}) is being run now by {owner_text(held)}; "
                                 "one campaign has one live run. Wait for it to end, or run with --new")
            self.cid = resume
        else:
            self.cid = store.new_campaign(spec.name, utc_now(), spec.as_dict(),
                                          {"mode": "cluster", "scheduler": scheduler, "hosts": {}, "owner": procs.me()},
                                          spec.spec_hash)
        self.done = attempts_so_far(store.trials([self.cid]))
        self.pages_read: dict = {}  # the stored labels read back (Slot.of)
        left = todo(spec.plan(), self.done, spec.retries)
        self.cells = [c for c in cells(spec) if any(s.place == c for s in left)]
        self.seq = max((t.seq for ts in self.done.values() for t in ts), default=-1) + 1
        self.counts = {"ok": 0, "failed": 0, "failed_attempts": 0, "cells": 0, "resubmitted": 0,
                       "captures_written": 0, "captures_lost": 0, "campaign_id": self.cid}
        from .capture import captures_root
        self.captures = captures_root(store.path)
        self.queue = Queue(f"plt-bench-{uuid.uuid4().hex[:12]}", client=client)
        self.recordings = self._send_recordings()
        self.held = Variable(self.queue.name, client=client)  # slots with an ok trial: a cell sent again skips them
        self._publish()
        self.submissions: dict[tuple, int] = {}

    def _send_recordings(self) -> list:
        """The campaign's recordings, packed here and sent to every worker once (Dask's broadcast
        scatter): each cell names them, and its worker writes what it lacks (travelled)."""
        from .pages import archive
        from .pages.base import DEFAULT_SITES
        names = sorted({n for p in self.spec.grid.pages if (n := p.page_kind.recording_name(p))})
        packs = [archive.pack(n, DEFAULT_SITES) for n in names]
        if not packs:
            return []
        self.out(f"sending {len(packs)} recording(s) to the workers: "
                 + ", ".join(f"{p.name} ({p.size_bytes / 1e6:.1f} MB, {p.sha256[:12]})" for p in packs))
        return self.client.scatter(packs, broadcast=True)

    def _publish(self) -> None:
        self.held.set(pickle.dumps([s for s, ts in self.done.items() if any(x.status == "ok" for x in ts)]))

    def submit(self, cell: tuple):
        self.submissions[cell] = self.submissions.get(cell, 0) + 1
        hosts = self.store.campaign(self.cid)["metadata"].get("hosts") or {}
        calibrations = {h: m["devices"] for h, m in hosts.items() if m.get("devices")}
        return self.client.submit(measure_cell, self.spec, *cell, self.queue.name, self.timeout_s, calibrations,
                                  self.recordings, resources={RESOURCE: 1, **needs(self.spec)}, pure=False)

    def drain(self) -> None:
        """Store every trial that streamed in; a slot that already has an ok trial keeps it alone."""
        stored = 0
        while self.queue.qsize():
            message = pickle.loads(self.queue.get())
            t = message["trial"]
            slot = Slot.of(t, self.pages_read)
            if any(x.status == "ok" for x in self.done.get(slot, [])):
                continue  # its files too: nothing of a second copy is kept
            # numbered by the head: a cell sent again after its worker died measures its slots anew
            t = dataclasses.replace(t, campaign_id=self.cid, seq=self.seq, attempt=len(self.done.get(slot, [])) + 1)
            self.seq += 1
            trial_id = self.store.add_trial(t)
            self._keep_captures(trial_id, t, message)
            self.done.setdefault(slot, []).append(t)
            self.counts["ok" if t.status == "ok" else "failed_attempts"] += 1
            stored += 1
            self.out(f"{t.host:<24} {t.conditions.label:<18} {t.page:>7} {t.proto:<4} {t.status:<6} "
                     + (f"{t.plt_ms:9.1f} ms" if t.plt_ms else t.reason or ""))
        if stored:
            self._publish()

    def _keep_captures(self, trial_id: int, t, message: dict) -> None:
        """A trial's CPU series and capture files stored as a local run stores them, its files under
        this store's captures folder; each file not kept named, counted, and listed in the campaign's
        metadata (captures_lost: seq, host, why)."""
        if message.get("cpu_samples"):
            self.store.add_cpu_samples(trial_id, message["cpu_samples"])
        if not message.get("captures"):
            return
        folder = self.captures / str(self.cid) / f"{t.seq:05d}-{message['folder']}"
        written, lost = write_back(message["captures"], folder)
        if written:
            self.store.add_artifacts(trial_id, written)
        self.counts["captures_written"] += len(written)
        if lost:
            self.counts["captures_lost"] += len(lost)
            for why in lost:
                self.out(f"{t.host}: trial {t.seq}'s capture {why}")
            meta = self.store.campaign(self.cid)["metadata"]
            meta.setdefault("captures_lost", []).extend({"seq": t.seq, "host": t.host, "why": w} for w in lost)
            self.store.update_metadata(self.cid, meta)

    def drain_safely(self) -> None:
        """What the queue still holds, if it can be read (the scheduler may be gone)."""
        try:
            self.drain()
        except Exception:  # the queue lived on the scheduler: what it held is lost, what was stored stays
            pass

    def cell_done(self, res: dict) -> None:
        """A cell's link checks (each with its host) and its host's key metadata, stored; the
        recordings its worker wrote first, said."""
        for name, how in (res.get("recordings") or {}).items():
            if how == "written":
                self.out(f"{res['host']}: recording {name} written there, verified by its hash")
        for c in res["checks"]:
            self.store.add_link_check(self.cid, c["conditions"], c["checked_utc"], {**c["result"], "host": res["host"]})
        meta = self.store.campaign(self.cid)["metadata"]
        meta.setdefault("hosts", {})[res["host"]] = res["metadata"]
        self.store.update_metadata(self.cid, meta)
        self.counts["cells"] += 1

    def run(self) -> dict:
        from distributed.client import FIRST_COMPLETED, wait
        pending = {self.submit(c): c for c in self.cells}
        while pending:
            try:
                finished, _ = wait(list(pending), timeout=1.0, return_when=FIRST_COMPLETED)
            except TimeoutError:  # none finished within the second: store what streamed in
                finished = set()
            self.drain()
            for fut in finished:
                cell = pending.pop(fut)
                if fut.status == "finished":
                    self.cell_done(fut.result())
                    continue
                # the cell raised on its worker (a lost worker Dask reschedules by itself): again, elsewhere
                why = repr(fut.exception())[:300]
                if self.submissions[cell] >= MAX_SUBMISSIONS:
                    able = sum(1 for w in self.client.scheduler_info()["workers"].values()
                               if w.get("resources", {}).get(RESOURCE))
                    raise PltBenchError(f"{cell[0].label} {cell[1].label} {attempts_failed(MAX_SUBMISSIONS, able)}, "
                                        f"last: {why}; the campaign keeps its trials: run the same command to resume")
                self.out(f"{cell[0].label} {cell[1].label}: {why}; submitted again")
                self.counts["resubmitted"] += 1
                pending[self.submit(cell)] = cell
        time.sleep(0.2)
        self.drain()
        # a slot failed when every attempt failed; a failed attempt that a retry made good is not one
        self.counts["failed"] = sum(1 for ts in self.done.values() if ts and not any(x.status == "ok" for x in ts))
        return self.counts


def run(spec, results: Path, scheduler: str, new: bool = False, out: Callable[[str], None] = print,
        timeout_s: float | None = None, tls: str | None = None) -> dict:
    """'plt-bench run --cluster': every cell still to measure dispatched to the cluster's workers,
    the trials stored here as they arrive. {"ok", "failed" (slots whose every attempt failed),
    "failed_attempts", "cells", "resubmitted", "campaign_id"}."""
    import concurrent.futures
    import logging

    import dask
    from distributed import Client
    from distributed.client import ClosedClientError

    from . import signals
    from .metadata import utc_now
    from .store import Store, check_writable
    scheduler_address(scheduler, "--cluster")
    sec = security(tls, scheduler, "--cluster")
    unsupported(spec)
    check_writable(results)
    if spec.capture:  # the workers' files come here: the head's disk holds them all
        from .capture import captures_root, check_space, planned
        warning = check_space(spec.capture, planned(spec.plan()), captures_root(results), spec.capture_limit_bytes)[1]
        if warning:
            out(warning)
    check_answers(scheduler, "--cluster", tls)
    # the head says itself what went wrong (a lost scheduler: how to resume); Dask's client would log
    # its reconnection attempts' tracebacks over that
    for name in ["distributed", *logging.root.manager.loggerDict]:
        if name.startswith("distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    with dask.config.set(DASK_CONFIG):
        try:
            client = Client(scheduler, timeout=f"{CONNECT_S}s", security=sec)
        except (OSError, TimeoutError) as e:
            raise UsageError(f"--cluster: no Dask scheduler answers at {scheduler} within {CONNECT_S} s "
                             f"({type(e).__name__}); start one there with: dask scheduler") from e
    try:
        workers = [w for w in client.scheduler_info()["workers"].values() if w.get("resources", {}).get(RESOURCE)]
        if not workers:
            raise UsageError(f"--cluster: the scheduler at {scheduler} has no plt-bench worker; start one on each "
                             f"measuring host with: plt-bench worker --scheduler {scheduler}")
        why = no_worker_can(needs(spec), {w.get("name") or w.get("id"): w.get("resources", {}) for w in workers})
        if why:  # nothing started: no cell of it could land anywhere
            raise UsageError(f"--cluster: no worker at {scheduler} can run this campaign: {why}")
        with Store(results) as store:
            head = Head(spec, store, client, scheduler, new, out, timeout_s)
            out(f"campaign {head.cid} '{spec.name}': {len(head.cells)} cell(s) to measure over {len(workers)} "
                f"worker(s) at {scheduler}; results in {results}")
            status = "failed"
            try:
                counts = head.run()
                status = "finished"
            except (KeyboardInterrupt, signals.Interrupted):
                status = "interrupted"
                raise
            except (concurrent.futures.CancelledError, OSError, TimeoutError, ClosedClientError) as e:
                # the scheduler went away (killed, its machine down): every trial that streamed in is stored
                head.drain_safely()
                raise PltBenchError(
                    f"the Dask scheduler at {scheduler} went away mid-campaign ({type(e).__name__}); campaign "
                    f"{head.cid} keeps its {len(store.trials([head.cid]))} stored trial(s): start the scheduler and "
                    f"its workers again and run the same command to resume") from None
            finally:
                store.finish_campaign(head.cid, status, utc_now())
        return counts
    finally:
        try:
            client.close(timeout=5)
        except Exception:  # a scheduler gone already: nothing to close politely
            pass
