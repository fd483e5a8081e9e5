"""Recording pages (`plt-bench record URL... --name NAME`): the same Chromium, a fresh profile, one
load; its HAR 1.2 with every body (DevTools' Network events and Network.getResponseBody) is kept
beside the archive made of it (pages.archive), so another tool can read what was recorded.

Two places to record from:
- the web, on a machine that reaches the sites (no --folder): Chromium resolves and connects as any
  browser does, through this machine's network from a namespace of its own (WebNamespace: its own
  loopback, a user-mode NAT out), and chooses its protocols itself (h3 where a site offers it);
  nothing of a testbed is made (the suite never records from the web: it sends nothing
  beyond this machine);
- folders served as they are (--folder HOST=DIR, once per host): a testbed comes up, Caddy's plain
  file server serves each folder under its host names, each on an address of its own (the first
  URL's host is the page's), and Chromium records through the testbed's link (--bw, --rtt: as the
  replay will be measured, or unshaped). This is how the suite's real pages are recorded: HTML
  documentation and web front-ends shipped in Debian and npm packages.
Several URLs make several archives, NAME-1, NAME-2, ... (a corpus: measure them as --size
har:NAME-1,har:NAME-2).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from .conditions import Cell
from .errors import UsageError
from .pages.timing import with_server_thinks

RECORD_TIMEOUT_S = 120.0
HAR_FILE = "recorded.har"  # beside archive.json: the recording as it was made (HAR 1.2 with bodies)
# A recording's scratch folder (its HAR, the browser's profile, the worker's log), private (0700), in
# the temporary folder; its name carries its maker's PID and start time, so that `clean` removes one
# whose maker was killed (SIGKILL runs no cleanup), with the browser processes still loading in it.
SPOOL_PREFIX = "plt-bench-record-"
SPOOL_RE = re.compile(re.escape(SPOOL_PREFIX) + r"(\d+)-(\d+)-[A-Za-z0-9_]+")
# what a recording from the web may load: a public name (a dot, no reserved or local suffix); an
# address, localhost and the special-use names (RFC 6761, 6762, 8375, 9476, and the .internal TLD)
# are refused before anything starts: the browser runs as root and would load what the machine reaches
LOCAL_SUFFIXES = ("localhost", "local", "test", "example", "invalid", "internal", "intranet", "lan", "home",
                  "corp", "private", "home.arpa", "alt", "onion", "arpa")


def parse_folders(items: list[str] | None, option: str = "--folder", protocols_allowed: bool = True
                ) -> list[tuple[str, Path, str]]:
    """--folder HOST=DIR or HOST@PROTO=DIR items (pure) -> (host, folder, protocol or ''): host names of
    the reserved .test domain (or any name a testbed can hold), each folder existing; PROTO (h3, h2,
    h1): the host's server offers that protocol alone, as a site that speaks one would."""
    from . import protocols
    out: list[tuple[str, Path, str]] = []
    for item in items or []:
        spec, sep, folder = str(item).partition("=")
        host, at, proto = spec.strip().lower().partition("@")
        if not sep or not re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+", host):
            raise UsageError(f"{option}: '{item}' is not HOST=DIR or HOST@PROTO=DIR (a host name with a dot, then a "
                             "folder: docs.pkg.test=/usr/share/doc/python-requests-toolbelt-doc/html)")
        if at and (proto not in protocols.NAMES or not protocols_allowed):
            raise UsageError(f"{option}: '{item}': " + (f"'{proto}' is not one of {', '.join(protocols.NAMES)}"
                             if protocols_allowed else "a served host's own protocol (@PROTO) is for plt-bench record"))
        from .pages import MAX_ORIGINS, origin_host
        if host in {origin_host(k) for k in range(MAX_ORIGINS)}:
            raise UsageError(f"{option}: '{item}': {host} is one of the testbed's generated pages' hosts (plt.test, "
                             "plt-oN.test); name the folder's site otherwise (docs.pkg.test)")
        path = Path(folder.strip()).expanduser()
        if not path.is_dir():
            raise UsageError(f"{option}: '{item}': {path} is not a folder")
        from .servers.caddy import unsafe_path
        if unsafe_path(path.resolve()):
            raise UsageError(f"{option}: '{item}': the folder {path.resolve()} has {unsafe_path(path.resolve())}; "
                             "copy or link it to a path without")
        why = folder_refused(path)
        if why:
            raise UsageError(f"{option}: '{item}': {why}")
        if host in [h for h, *_ in out]:
            raise UsageError(f"{option}: host {host} given twice")
        out.append((host, path, proto))
    return out


# Folders no one serves: the machine's own state and secrets (and / holds them all). A folder inside one
# of these is refused too.
SYSTEM_FOLDERS = ("/etc", "/proc", "/sys", "/dev", "/root", "/boot", "/run")
MAX_FOLDER_ENTRIES = 100_000  # a served folder is a site's files, checked entry by entry before it is served


def folder_refused(folder: Path, most: int = MAX_FOLDER_ENTRIES) -> str | None:
    """Why a folder may not be served as it is (--folder HOST=DIR), or None (pure but for reading it).
    Its server runs as root and a recording's files are world-readable, so a served folder holds
    only what every user may read: refused are the system folders (SYSTEM_FOLDERS, and /), a folder
    not every user may pass into, any entry inside not every user may read (a file without o+r, a
    folder without o+rx, a socket, a FIFO, a device), and any link that leads out of the folder to
    such a thing or nowhere (link_out). The walk stays inside the folder (links are not
    followed), reads at most `most` entries, and never raises: what it cannot read it names."""
    root = Path(os.path.abspath(folder))
    try:
        root = root.resolve(strict=True)
    except (OSError, RuntimeError) as e:
        return f"{folder} cannot be read ({getattr(e, 'strerror', None) or e})"
    if root == Path("/") or any(root == Path(s) or Path(s) in root.parents for s in SYSTEM_FOLDERS):
        return (f"{root} is a system folder (/, {', '.join(SYSTEM_FOLDERS)} and what they hold are never served); "
                "serve a site's own folder")
    try:
        if not world_readable(root):
            return (f"not every user may read the folder {root} or pass through a folder above it; a served "
                    "folder's server runs as root and a recording's files are world-readable, so a served folder "
                    "is one every user may read (chmod o+rx, or copy it to such a place)")
    except OSError as e:
        return f"{root} cannot be read ({e.strerror or e})"
    private, outside, errors, seen = [], [], [], 0

    def walk_error(e: OSError) -> None:
        errors.append(f"{Path(e.filename or '?')}: {e.strerror or e}")
    for here, dirs, files in os.walk(root, onerror=walk_error, followlinks=False):
        for name in dirs + files:
            seen += 1
            if seen > most:
                return (f"it holds more than {most} entries; a served folder is a site's files, each checked before "
                        "it is served: serve a smaller folder")
            p = Path(here) / name
            rel = str(p.relative_to(root))
            try:
                st = p.lstat()
                if stat.S_ISLNK(st.st_mode):
                    why = link_out(p, root)
                    if why:
                        outside.append(f"{rel} -> {why}")
                elif not readable_by_all(st):
                    private.append(f"{rel} ({_mode_text(st)})")
            except OSError as e:
                errors.append(f"{rel}: {e.strerror or e}")
    if private or errors:
        names = sorted(private) + errors
        return (f"{len(names)} entr{'y' if len(names) == 1 else 'ies'} in it not every user may read "
                f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); a served folder's server runs as root "
                "and a recording's files are world-readable, so such files are neither served nor recorded: make "
                "them readable (chmod o+r, o+rx for a folder) or move them out of the folder")
    if outside:
        return (f"{len(outside)} link(s) lead out of the folder to what not every user may read "
                f"({', '.join(sorted(outside)[:3])}); a served folder's server runs as root, so such a link is not followed: "
                "copy what they name into it, or remove them")
    return None


def link_out(link: Path, root: Path) -> str | None:
    """What a link inside root leads to, where that is outside root and not every user may read it
    or it is nowhere (its target's text), else None; never raises (a target that cannot be
    resolved or read counts as unreadable)."""
    try:
        text = os.readlink(link)
    except OSError as e:
        return f"? ({e.strerror or e})"
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):
        return text  # nowhere, a loop, or a folder on the way no one may pass
    if target == root or root in target.parents:
        return None
    try:
        return None if world_readable(target) else text
    except OSError:
        return text


def readable_by_all(st: os.stat_result) -> bool:
    """A file others may read, or a folder others may list and enter (pure)."""
    if stat.S_ISREG(st.st_mode):
        return bool(st.st_mode & stat.S_IROTH)
    if stat.S_ISDIR(st.st_mode):
        return st.st_mode & (stat.S_IROTH | stat.S_IXOTH) == stat.S_IROTH | stat.S_IXOTH
    return False  # a socket, a FIFO, a device: not a site's file


def _mode_text(st: os.stat_result) -> str:
    kind = "folder " if stat.S_ISDIR(st.st_mode) else "" if stat.S_ISREG(st.st_mode) else "not a plain file, "
    return f"{kind}mode {stat.S_IMODE(st.st_mode):04o}"


def world_readable(path: Path) -> bool:
    """Every user may read it: a file readable by others, a folder readable and searchable by others,
    and every folder above it searchable by others."""
    st = path.stat()
    if not readable_by_all(st):
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)


def names_for(name: str, urls: list[str]) -> list[str]:
    """The archives' names: NAME for one URL, NAME-1, NAME-2, ... for several (pure)."""
    from .pages.harfile import check_name
    check_name(name, "--name")
    names = [name] if len(urls) == 1 else [f"{name}-{k + 1}" for k in range(len(urls))]
    for n in names:
        check_name(n, "--name")
    return names


def check_urls(urls: list[str], serve: list[tuple[str, Path, str]]) -> list[str]:
    """Every URL https, and with --folder on one of the served hosts; from the web (no --folder), on a
    public name (public_name), before anything starts."""
    from urllib.parse import urlsplit
    hosts = {h for h, *_ in serve}
    for u in urls:
        try:
            parts = urlsplit(u)
            port = parts.port
        except ValueError:
            parts = port = None
        if parts is None or parts.scheme != "https" or not parts.hostname:
            raise UsageError(f"URL: '{u}' is not an https URL (a replay serves https on 443)")
        if serve and parts.hostname not in hosts:
            raise UsageError(f"URL: '{u}' is on {parts.hostname}, which no --folder HOST=DIR serves ({', '.join(hosts)})")
        if not serve:
            why = public_name(parts.hostname)
            if why or parts.username is not None or port not in (None, 443):
                raise UsageError(f"URL: '{u}': {why or 'a user or a port other than 443'}; a recording from the web "
                                 "loads a public site's https URL on a public name (serve a local folder with "
                                 "--folder HOST=DIR)")
    return urls


def public_name(host: str) -> str | None:
    """Why a host cannot be recorded from the web (pure), or None: an address, a single label, or a
    special-use or local name (LOCAL_SUFFIXES)."""
    import ipaddress
    h = host.strip("[]").lower().rstrip(".")
    try:
        ipaddress.ip_address(h)
        return f"{host} is an address, not a public name"
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+|0x[0-9a-f.x]+", h):
        return f"{host} is an address, not a public name"
    if "." not in h:
        return f"{host} is a single label, not a public name"
    if any(h == s or h.endswith("." + s) for s in LOCAL_SUFFIXES):
        return f"{host} is a special-use or local name, not a public one"
    return None


# A recording from the web loads in a network namespace of its own (issue 44): the browser, its driver
# and DevTools listen on that namespace's loopback, which no local user reaches; its way out is
# slirp4netns's user-mode NAT (TCP and UDP: QUIC too), which refuses the machine's own loopback
# (--disable-host-loopback) and answers DNS at SLIRP_DNS from this machine's resolver. Nothing of the
# machine's own network changes (no forwarding, no rule). Its name carries its maker's PID and start
# time, as the spool's does, so that `clean` removes what a killed recording left.
WEB_NS_PREFIX = "pbweb-"
WEB_NS_RE = re.compile(re.escape(WEB_NS_PREFIX) + r"(\d+)-(\d+)")
SLIRP_DNS = "10.0.2.3"
SLIRP_GATEWAY = "10.0.2.2"  # where slirp4netns maps the machine (its loopback refused: --disable-host-loopback)
SLIRP_READY_S = 10.0


def web_ns_name(pid: int, start: str | int) -> str:
    return f"{WEB_NS_PREFIX}{pid}-{start}"


def web_ns_commands(name: str) -> list[list[str]]:
    """The recording namespace's making (pure): the namespace and its loopback."""
    return [["ip", "netns", "add", name], ["ip", "-n", name, "link", "set", "lo", "up"]]


def slirp_argv(name: str, ready_fd: int, exit_fd: int) -> list[str]:
    """slirp4netns for the namespace (pure): tap0 configured (10.0.2.100, the gateway SLIRP_GATEWAY),
    the machine's loopback refused, seccomp on; it says ready on ready_fd and ends when exit_fd closes
    (its maker gone, even by SIGKILL). Its own --enable-sandbox is not used: its mount namespace makes
    /run/netns's mounts invalid for `ip netns exec` on machines whose /run/netns is a bind mount (this one)."""
    return ["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-seccomp",
            f"--ready-fd={ready_fd}", f"--exit-fd={exit_fd}", "--netns-type=path", f"/run/netns/{name}", "tap0"]


class WebNamespace:
    """The recording's namespace with its way out, for a `with` block; its name is .name."""

    def __init__(self) -> None:
        from . import procs
        self.name = web_ns_name(os.getpid(), procs.start_time(os.getpid()))
        self.slirp = None
        self._exit_w: int | None = None

    def __enter__(self) -> "WebNamespace":
        import select
        import subprocess
        from . import cmd
        if shutil.which("slirp4netns") is None:
            raise UsageError("record: slirp4netns is missing (the recording browser's way out of its own "
                             "namespace); scripts/setup installs it")
        try:
            for argv in web_ns_commands(self.name):
                cmd.run(argv)
            etc = Path("/etc/netns") / self.name
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "resolv.conf").write_text(f"nameserver {SLIRP_DNS}\n")
            ready_r, ready_w = os.pipe()
            exit_r, self._exit_w = os.pipe()
            os.set_inheritable(self._exit_w, False)
            try:
                self.slirp = subprocess.Popen(slirp_argv(self.name, ready_w, exit_r), pass_fds=(ready_w, exit_r),
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            finally:
                os.close(ready_w)
                os.close(exit_r)
            try:
                got = select.select([ready_r], [], [], SLIRP_READY_S)[0] and os.read(ready_r, 1)
            finally:
                os.close(ready_r)
            if not got:
                err = b""
                if self.slirp.poll() is not None:
                    err = self.slirp.stderr.read() or b""
                raise UsageError(f"record: the recording namespace's way out (slirp4netns) did not come up "
                                 f"within {SLIRP_READY_S:.0f}s: {err.decode(errors='replace').strip()[-300:]}")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._exit_w is not None:
            os.close(self._exit_w)  # slirp4netns ends on its own
            self._exit_w = None
        if self.slirp is not None:
            try:
                self.slirp.wait(timeout=5)
            except Exception:  # noqa: BLE001 - then it is killed
                self.slirp.kill()
                self.slirp.wait()
            if self.slirp.stderr:
                self.slirp.stderr.close()
            self.slirp = None
        remove_web_ns(self.name)


def remove_web_ns(name: str) -> None:
    """The namespace and its resolver file, whatever is left of them."""
    from . import cmd
    if Path(f"/run/netns/{name}").exists():
        cmd.run(["ip", "netns", "del", name], check=False)
    shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)


def dead_web_namespaces(netns_dir: Path = Path("/run/netns")) -> list[str]:
    """Recording namespaces whose maker is gone (killed)."""
    from . import procs
    out = []
    for p in netns_dir.glob(f"{WEB_NS_PREFIX}*"):
        m = WEB_NS_RE.fullmatch(p.name)
        if m and not procs.same_process(int(m.group(1)), m.group(2)):
            out.append(p.name)
    return sorted(out)


def new_spool() -> Path:
    """A recording's private scratch folder, named for its maker (SPOOL_RE)."""
    from . import procs
    return Path(tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-{procs.start_time(os.getpid())}-"))


def dead_spools(tmp: Path | None = None) -> list[Path]:
    """The scratch folders of recordings whose maker is gone (killed), in the temporary folder."""
    from . import procs
    out = []
    for p in Path(tmp or tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*"):
        m = SPOOL_RE.fullmatch(p.name)
        if m and p.is_dir() and not p.is_symlink() and not procs.same_process(int(m.group(1)), m.group(2)):
            out.append(p)
    return out


def clean_dead(tmp: Path | None = None, netns_dir: Path = Path("/run/netns")) -> list[str]:
    """What a killed recording left: the browser worker and its browser, still loading (their command
    lines name its folder), ended; its folder (HAR, profile, log) removed. Returns what was removed."""
    from . import procs
    removed = []
    for spool in dead_spools(tmp):
        table = procs.table()
        mark = f"{spool}/"
        pids = {pid for pid, (_, _, line) in table.items() if mark in line}
        parents = {pid: ppid for pid, (ppid, _, _) in table.items()}
        for pid in list(pids):
            pids |= procs.descendants(parents, pid)  # chromedriver, below the worker, names no folder
        if pids:
            procs.kill_and_reap(sorted(pids), grace_s=2.0, timeout_s=2.0, until_reaped=True)
        shutil.rmtree(spool, ignore_errors=True)
        removed.append(f"{spool} (a recording whose maker was killed{f', and its {len(pids)} processes' if pids else ''})")
    for name in dead_web_namespaces(netns_dir):
        # its slirp4netns ended with its maker (exit fd); one still there (stopped) is ended here
        slirp = [pid for pid, (_, _, line) in procs.table().items() if f"/run/netns/{name} " in line + " "]
        if slirp:
            procs.kill_and_reap(slirp, timeout_s=2.0, until_reaped=True)
        remove_web_ns(name)
        removed.append(f"namespace {name} (a recording from the web whose maker was killed)")
    return removed


def record_served(urls: list[str], names: list[str], serve: list[tuple[str, Path, str]], sites: Path,
                  proto: str = "h2", conditions=None, index: int | None = None, note=print,
                  traces=()) -> list[tuple]:
    """Record each URL from the folders served as they are in a testbed; returns [(Archive, notes)].
    Every host over proto; where some host has a protocol of its own (HOST@h1=DIR), each host over
    its own (the others over proto), the browser as in an as-recorded replay (protocols.AS_RECORDED)."""
    from . import protocols
    from .capture import Settings
    from .pages import Page
    from .testbed import Setup, Testbed, place_origins
    if any(p for *_, p in serve):
        serve, proto = [(h, d, p or proto) for h, d, p in serve], protocols.AS_RECORDED.name
    done = []
    spool = new_spool()
    try:
        bed = Testbed(Setup(sites, index=index, conditions=[conditions] if conditions else (), folders=serve,
                            capture=Settings(("har",), spool), traces=traces, record_bodies=True))
        with bed:
            if conditions is not None:
                bed.set_conditions(conditions)
                if conditions.think is not None:  # recorded from servers that think (--think): their waits kept
                    bed.server.set_think(conditions.think)
            for url, name in zip(urls, names):
                folder = spool / name
                folder.mkdir()
                if conditions is not None and conditions.origin_rtt is not None:  # recorded at their distances
                    place_origins(bed, Cell(proto, Page(0, url=url), conditions))
                answer, _ = bed.load(proto, Page(0, url=url), RECORD_TIMEOUT_S, folder)
                served = bed.server.access_entries("", wait_s=1.0, expect=10**9)  # every response since the last
                if (folder / "trial.har").is_file() and not answer.get("error"):
                    added, filled = complete_from_server(folder / "trial.har", served, serve)
                    if added:
                        note(f"{url}: {added} response(s) the page's own log did not see (a worker's), taken from "
                             "the server's log and its folder")
                    if filled:
                        note(f"{url}: {filled} body(ies) the browser did not keep, taken from the folder it served")
                done.append(keep(answer, folder / "trial.har", url, name, sites, note))
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    return done


def served_not_in_har(entries: list[dict], log: dict, serve: list[tuple[str, Path, str]]) -> tuple[list[dict], int]:
    """What a served folder's recording lacks that the server served (pure but for reading the
    files): (the responses the server's log has that the page's own HAR does not, as HAR 1.2 entries
    with their bodies; how many of the HAR's own entries had no body though their size said bytes
    and were given theirs, in place). A page's worker (MkDocs' search worker, pdf.js's) fetches in a
    target of its own, which the page's DevTools log does not see; left out, every replay asked for
    them and was refused as unrecorded. A body the browser did not keep (a large image; a text file
    used as an image) was archived as an empty 200. Each is read from the folder it was served
    from, only for a GET answered 200 from a file inside its host's folder (a link to a file
    elsewhere is followed, as the server followed it); anything else stays as it is."""
    import base64
    import mimetypes
    from urllib.parse import unquote, urlsplit

    from .pages import page_url
    folders = {h.lower(): Path(d) for h, d, *_ in serve}
    served = {}
    for e in entries:
        host, uri = (e.get("host") or "").lower().split(":")[0], e.get("uri") or ""
        if e.get("status") == 200 and (e.get("method") or "GET") == "GET" and host in folders:
            served.setdefault((host, uri), e)

    def body_of(host: str, uri: str) -> bytes | None:
        parts = [x for x in unquote(urlsplit(uri).path).split("/") if x]
        if any(x in ("..", ".") or "\\" in x for x in parts) or not parts:
            return None
        try:
            return folders[host].joinpath(*parts).read_bytes()
        except OSError:
            return None

    def content_of(body: bytes, mime: str) -> dict:
        return {"size": len(body), "mimeType": mime, "text": base64.b64encode(body).decode(), "encoding": "base64"}
    have, filled = set(), 0
    for e in log.get("entries", []):
        u = urlsplit(e["request"]["url"])
        key = ((u.hostname or "").lower(), u.path + (f"?{u.query}" if u.query else ""))
        have.add(key)
        content = (e.get("response") or {}).get("content") or {}
        if key in served and (e.get("response") or {}).get("status") == 200 and content.get("size") \
                and not content.get("text"):
            body = body_of(*key)
            if body is not None:
                e["response"]["content"] = content_of(body, str(content.get("mimeType") or "application/octet-stream"))
                e["_plt_bench"] = "its body from the served folder: the recording's browser did not keep it"
                filled += 1
    out = []
    for (host, uri), e in served.items():
        if (host, uri) in have:
            continue
        body = body_of(host, uri)
        if body is None:
            continue
        mime = mimetypes.guess_type(urlsplit(uri).path)[0] or "application/octet-stream"
        out.append({"startedDateTime": log.get("pages", [{}])[0].get("startedDateTime", "1970-01-01T00:00:00.000Z"),
                    "time": 0, "request": {"method": "GET", "url": page_url(host, uri), "httpVersion": e.get("proto")
                                           or "h2", "cookies": [], "headers": [], "queryString": [],
                                           "headersSize": -1, "bodySize": 0},
                    "response": {"status": 200, "statusText": "", "httpVersion": e.get("proto") or "h2",
                                 "cookies": [], "headers": [{"name": "Content-Type", "value": mime}],
                                 "content": content_of(body, mime), "redirectURL": "", "headersSize": -1,
                                 "bodySize": len(body)},
                    "cache": {}, "timings": {"send": 0, "wait": 0, "receive": 0},
                    "_plt_bench": "from the server's log: a request the page's own log did not see (a worker's)"})
    return out, filled


def complete_from_server(har: Path, entries: list[dict], serve: list[tuple[str, Path, str]]) -> tuple[int, int]:
    """Complete a served folder's recording with what the server served it (served_not_in_har), and
    each response with the think time its server said it spent (--think: pages.timing.with_server_thinks,
    which the archive keeps beside the waits); returns (responses added, bodies filled in)."""
    log = json.loads(har.read_text())
    extra, filled = served_not_in_har(entries, log["log"], serve)
    log["log"]["entries"] += extra
    thought = with_server_thinks(log["log"]["entries"], entries)
    if extra or filled or thought:
        har.write_text(json.dumps(log))
    return len(extra), filled


def keep(answer: dict, har: Path, url: str, name: str, sites: Path, note=print) -> tuple:
    """A recording's load made into the archive NAME, its HAR kept beside it; raises if it did not load."""
    from .pages import archive
    if answer.get("error") or not answer.get("nav"):
        raise UsageError(f"URL: {url} did not load to record it: {answer.get('error') or 'no page'}")
    if (answer.get("har") or {}).get("error"):
        raise UsageError(f"URL: {url}: its HAR could not be written: {answer['har']['error']}")
    a, notes = archive.make(har, name, sites)
    shutil.copyfile(har, archive.replay_root(sites, name) / HAR_FILE)
    note(f"recorded {url} as {name}: {len(a.responses)} responses, {a.body_bytes} body bytes, {len(a.origins)} "
         f"origins ({', '.join(f'{n} {p}' for p, n in a.mix().items())})")
    return a, notes


def web_request(url: str, profile: Path, har: Path) -> dict:
    """The browser worker's request for one recording from the web (pure): the browser's own
    resolver, certificates and protocol choice (h3 where the site offers it), every body kept; the
    browser as the unprivileged user, its sandbox on (browsers.sandbox): a third party's page."""
    from .browsers import get
    from .browsers.chromium import PREFS, web_args
    return {"url": url, "profile_dir": str(profile), "prefs": PREFS, "args": get("chromium").sandboxed(web_args(str(profile))),
            "cpu_interval_s": 0.1, "cpu_series": False, "har_path": str(har), "har_bodies": True,
            "timeout_s": RECORD_TIMEOUT_S, "await_s": 0.0, "gate": False, "mark": None, "sandbox": True}


@contextlib.contextmanager
def web_browser(spool: Path):
    """The browser worker of a recording from the web, started: in the recording's namespace
    (WebNamespace), its browsers as the browsers' user with their sandbox on; stopped, and the
    namespace removed, after."""
    from .browsers.pipe import BrowserWorker
    from .browsers import drivers, sandbox
    ids = sandbox.user_ids()  # refused before anything starts when the browsers' user is missing
    with WebNamespace() as ns:
        worker = BrowserWorker(ns.name, spool / "browser-worker.log", drivers.resolve(None))
        sandbox.give(ids, *sandbox.home_folders(spool / "browser"), spool / "profiles")
        spool.chmod(0o711)  # passable, not readable, by the browsers' user: its own folders are inside
        worker.env = sandbox.worker_env(spool / "browser")
        try:
            worker.start()
            yield worker
        finally:
            worker.stop()


def record_web(urls: list[str], names: list[str], sites: Path, note=print) -> list[tuple]:
    """Record each URL from the web, as this machine reaches it (no testbed: a namespace of the
    recording's own, WebNamespace); returns [(Archive, notes)]."""
    from .parts import ensure
    ensure({"record": "plt-bench record from the web"}, note)
    spool = new_spool()
    done = []
    try:
        with web_browser(spool) as worker:
            for url, name in zip(urls, names):
                folder = spool / name
                folder.mkdir()
                answer = worker.load(web_request(url, spool / "profiles" / name, folder / "trial.har"),
                                     RECORD_TIMEOUT_S + 120)
                done.append(keep(answer, folder / "trial.har", url, name, sites, note))
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    return done


def record_real(name: str, sites: Path, index: int | None = None, note=print) -> None:
    """Record the real page NAME from its package's folders, served as they are, into sites/real-NAME
    (plt-bench record's path: every body, header and origin), on a testbed of its own, unshaped."""
    from .pages.real import RECORDING_PREFIX, by_name, ready
    from .parts import ensure
    page = by_name(name)
    ensure({"pages": f"--size real:{name}"}, note)
    ready()
    note(f"recording real:{name} ({page.what}) into {sites / (RECORDING_PREFIX + name)}")
    record_served([page.url], [RECORDING_PREFIX + name], [(h, d, "") for h, d in page.folders], sites,
                           index=index, note=note)
