"""Reading a recorded page (a HAR 1.2 file) safely, for the kinds made of recordings (standin,
recording): malformed, huge and hostile files refused with the entry's number, exit 2 and nothing
written outside the new folder; a new folder under sites/replay/NAME made whole or not at all.

Refused: malformed files (not JSON, no log.entries, a field of the wrong type, a body that is not
valid base64), huge ones (over MAX_HAR_BYTES) and hostile ones: a scheme other than http or https, a
path with a `..` segment (also percent-encoded or with backslashes), a host that is an address,
`localhost` or carries user information, or a redirect to a host the recording does not hold.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import UsageError
from .base import REPLAY_NAME_RE, replay_root

MAX_HAR_BYTES = 200 * 10**6
OPTION = "--from-har"


def check_name(name: str, option: str = "NAME") -> str:
    if not REPLAY_NAME_RE.fullmatch(name or ""):
        raise UsageError(f"{option}: '{name}' is not a page set name; expected 1 to 40 of a-z, 0-9, '_' and '-', "
                         "starting with a letter or digit (e.g. news-home)")
    return name


# -- reading a recording -------------------------------------------------------------------------------------
def _bad(what: str) -> UsageError:
    return UsageError(f"{OPTION}: {what}")


def _get(d, key, kind, where):
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise _bad(f"{where}: '{key}' is missing or not {kind.__name__ if isinstance(kind, type) else 'valid'}: "
                   "not a HAR 1.2 file")
    return v


def _origin(url: str, where: str) -> tuple[str, str]:
    """(origin, path) of a recorded URL; hostile forms refused."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        raise _bad(f"{where}: '{url[:80]}' is not a URL") from None
    if u.scheme not in ("http", "https"):
        raise _bad(f"{where}: '{url[:80]}' has the scheme '{u.scheme}'; a page set replays http and https only "
                   "(hostile or not a web page's request)")
    host = (u.hostname or "").lower()
    if u.username is not None or u.password is not None or "@" in u.netloc:
        raise _bad(f"{where}: '{url[:80]}' carries user information; refused (hostile)")
    if not host or not re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*", host) \
            or re.fullmatch(r"[0-9.]+", host) or host == "localhost" or host.endswith(".localhost"):
        raise _bad(f"{where}: '{url[:80]}' names the host '{host}', an address or not a public name; a recording "
                   "names web hosts (hostile)")
    path = u.path or "/"
    segments = re.split(r"[/\\]", unquote(unquote(path)))
    if "\x00" in unquote(unquote(path)) or "\x00" in url:
        raise _bad(f"{where}: {url[:80]!r} has a NUL character in its path; refused (hostile)")
    if ".." in segments or "\\" in path:
        raise _bad(f"{where}: '{url[:80]}' has a '..' segment or a backslash in its path; refused (hostile)")
    default = 443 if u.scheme == "https" else 80
    return f"{u.scheme}://{host}{'' if port in (None, default) else f':{port}'}", path


def _mime(entry: dict) -> str:
    content = (entry.get("response") or {}).get("content") or {}
    return str(content.get("mimeType") or "application/octet-stream").split(";")[0].strip().lower()


def _har_body(entry: dict, size: int, where: str) -> bytes | None:
    """The recorded body where the HAR holds it whole, else None."""
    content = (entry.get("response") or {}).get("content") or {}
    text = content.get("text")
    if not isinstance(text, str):
        return None
    if content.get("encoding") == "base64":
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise _bad(f"{where}: its body is marked base64 but is not valid base64 (malformed)") from None
    else:
        data = text.encode("utf-8", "surrogatepass")
    return data if len(data) == size else None


def read_bytes(path: Path) -> bytes:
    """A recording's bytes: a regular file (a link to one is followed) read to at most MAX_HAR_BYTES,
    whatever its size claims (/proc/self/mem says 0 and cannot be read)."""
    import stat
    path = Path(path)
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:  # a FIFO does not block here
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise _bad(f"{path} is not a file")
            data = f.read(MAX_HAR_BYTES + 1)
    except OSError as e:
        raise _bad(f"{path}: {e.strerror or e}; expected a HAR 1.2 file that can be read") from None
    if len(data) > MAX_HAR_BYTES:
        raise _bad(f"{path} is over {MAX_HAR_BYTES // 10**6} MB; a recording is at most {MAX_HAR_BYTES // 10**6} MB "
                   "(huge)")
    return data


def read(path: Path, data: bytes | None = None) -> tuple[dict, list[dict]]:
    """The HAR's log and its first page's entries, in order; malformed and huge files refused."""
    path = Path(path)
    data = read_bytes(path) if data is None else data
    try:
        data = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(f"{path} is not JSON ({e}); expected a HAR 1.2 file") from None
    except RecursionError:
        raise _bad(f"{path}: its JSON is nested too deeply for a HAR 1.2 file (hostile)") from None
    log = _get(data, "log", dict, str(path))
    entries = _get(log, "entries", list, f"{path}: log")
    if not entries:
        raise _bad(f"{path}: the recording has no entries")
    pages = log.get("pages") if isinstance(log.get("pages"), list) else []
    if pages:
        ref = pages[0].get("id") if isinstance(pages[0], dict) else None
        entries = [e for e in entries if not isinstance(e, dict) or e.get("pageref", ref) == ref]
        if not entries:
            raise _bad(f"{path}: no entry belongs to the first page ('pageref' {str(ref)[:40]!r}); a recording holds "
                       "its first page's requests")
    for i, e in enumerate(entries):
        where = f"entry {i + 1}"
        _get(e, "request", dict, where)
        _get(e, "response", dict, where)
        _get(e["request"], "url", str, f"{where} request")
        _get(e["response"], "status", int, f"{where} response")
        for key, kind in (("content", dict), ("redirectURL", str)):
            if e["response"].get(key) is not None and not isinstance(e["response"][key], kind):
                raise _bad(f"{where} response: '{key}' is not {'an object' if kind is dict else 'a string'}: not a "
                           "HAR 1.2 file (malformed)")
        if "method" in e["request"] and not isinstance(e["request"]["method"], str):
            raise _bad(f"{where} request: 'method' is not a string: not a HAR 1.2 file (malformed)")
    return log, entries


def read_recording(har_path: Path, name: str, sites: Path) -> tuple[dict, list[dict], dict]:
    """A recording to make the set NAME of (its name checked, not taken): its log, its first page's
    entries, and what the set records of its source (file name, SHA-256)."""
    check_name(name)
    refuse_existing(sites, name)
    data = read_bytes(Path(har_path))
    log, entries = read(har_path, data)
    return log, entries, {"file": Path(har_path).name, "sha256": hashlib.sha256(data).hexdigest()}


def refuse_existing(sites: Path, name: str) -> None:
    dest = replay_root(sites, name)
    if dest.exists():
        raise UsageError(f"NAME: a page set '{name}' exists already ({dest}); choose another name or remove it")


def write_whole(sites: Path, name: str, fill):
    """Make sites/replay/NAME whole or not at all: fill(a new folder beside it) writes it, which is then
    renamed into place; a full disk, a read-only folder, an interruption leave nothing of it (a
    killed maker's half is removed by the next: remove_dead_parts). Returns what fill returns."""
    dest = replay_root(sites, name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_parts(dest.parent)
    tmp = dest.parent / f".{name}{PART}{os.getpid()}"
    try:
        tmp.mkdir()
        out = fill(tmp)
        try:
            os.rename(tmp, dest)
        except OSError:
            if dest.exists():  # another maker of the same set finished first: theirs stands
                refuse_existing(sites, name)
            raise
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"NAME: the page set '{name}' cannot be written in {dest.parent} ({e.strerror or e}); nothing "
                         "was written") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


PART = ".part-"  # a set being made: .NAME.part-PID beside the sets, renamed into place whole


def remove_dead_parts(folder: Path) -> list[str]:
    """Half-made sets whose maker is gone (killed mid-write: SIGKILL runs no cleanup): removed, by
    name; a live maker's is kept. Returns the names removed."""
    removed = []
    try:
        found = [p for p in Path(folder).iterdir() if p.name.startswith(".") and PART in p.name]
    except OSError:
        return removed
    for p in found:
        pid = p.name.rsplit(PART, 1)[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
    return removed


def requests_of(log: dict) -> list[tuple[int, str, str, int]]:
    """A recording's requests as a replay keeps them (pure), for comparing two recordings: per
    object answered 200 to a GET, after the document, in order: (its origin's place among the
    recording's origins, its file name (a replay's without its 'k-' prefix) and query, its MIME
    type, its body bytes)."""
    entries = [e for e in log["log"]["entries"] if isinstance(e, dict)]
    origins: list[str] = []
    out = []
    for i, e in enumerate(entries):
        origin, path = _origin(e["request"]["url"], f"entry {i + 1}")
        if origin not in origins:
            origins.append(origin)
        if i == 0 or e["response"]["status"] != 200 or str(e["request"].get("method", "GET")).upper() != "GET":
            continue
        name = path.rsplit("/", 1)[-1]
        if path.startswith("/replay/"):
            name = name.split("-", 1)[1] if "-" in name else name
        query = urlsplit(e["request"]["url"]).query
        out.append((origins.index(origin), name + (f"?{query}" if query else ""), _mime(e),
                    int((e["response"].get("content") or {}).get("size", -1))))
    return out


def round_trip_differences(recorded: dict, replayed: dict) -> list[str]:
    """What a replay's recording shows that the recording it was made of does not, or the other
    way round: requests, origins, types and sizes (order aside: a browser may ask for two images
    in either order); [] when they are the same."""
    a, b = sorted(requests_of(recorded)), sorted(requests_of(replayed))
    if a == b:
        return []
    gone, extra = [x for x in a if x not in b], [x for x in b if x not in a]
    return ([f"recorded, not replayed: origin {o} {n} {m} {s} bytes" for o, n, m, s in gone]
            + [f"replayed, not recorded: origin {o} {n} {m} {s} bytes" for o, n, m, s in extra])
