"""Campaigns: a whole grid, defined in a TOML file (or a built-in preset), run unattended and
resumable.

- Order: conditions change least often (each is verified once); within a repetition the page
  sizes come in a random order and, for each size, the two protocols in a random order, so slow
  drift cannot favour one protocol. The order is seeded and recorded.
- Before every trial the runner waits for the machine to go idle (like WebPageTest's CPU gate)
  and records the CPU busy share and load average it saw.
- A failed trial is retried up to `retries` times; every attempt stays in the store.
- A rerun of the same campaign (same name and definition) resumes it: finished trials are not
  repeated. Resuming on a machine whose key metadata differ (browser, kernel, backend...) is
  refused, because such trials must not be pooled.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
import tomllib
from pathlib import Path
from typing import Callable

from . import cmd, conditions as cond_mod
from .link import host as hostnet
from .cpu import wait_idle
from .capture import DEFAULT_LIMIT_BYTES, parse_interval_s, parse_kinds
from .conditions import Cell, Conditions, Grid, ideal_seconds
from .errors import UsageError
from .metadata import KEY_FIELDS
from .store import Store, Trial
from .units import parse_size

PRESETS_DIR = cmd.PROJECT_ROOT / "campaigns"
TOP_KEYS = {"name", "description", "protos", "sizes", "runs", "warmup", "retries", "seed", "link", "profile",
            "capture", "cpu_interval", "capture_limit", "server", "iface", "server_token_file"}
LINK_KEYS = {"bw", "up_bw", "rtt", "jitter", "loss", "jitter_dist", "loss_direction", "reorder", "queue", "cc",
             "backend", "verify"}
PROFILE_KEYS = {"name", "bw", "up_bw", "rtt", "jitter", "loss"}


@dataclasses.dataclass(frozen=True)
class Spec:
    """A campaign's definition: everything that decides which trials it holds."""

    name: str
    description: str
    grid: Grid
    warmup: int = 0
    retries: int = 1
    seed: int = 1
    cc: str = "cubic"
    link: str = "auto"
    verify: str = "stop"
    source: str = ""
    capture: tuple[str, ...] = ()     # capture kinds (plt_bench.capture.KINDS)
    cpu_interval_s: float = 0.1
    capture_limit_bytes: int = DEFAULT_LIMIT_BYTES
    server: str | None = None         # two machines: the server's address ('plt-bench serve --addr')
    iface: str | None = None          # two machines: this machine's interface towards it
    server_token_file: str | None = None  # two machines: where the control token is (not part of the definition)

    def as_dict(self) -> dict:
        return {"name": self.name, "protos": list(self.grid.protos), "sizes": list(self.grid.sizes),
                "conditions": [dataclasses.asdict(c) for c in self.grid.conditions], "runs": self.grid.runs,
                "warmup": self.warmup, "retries": self.retries, "seed": self.seed, "cc": self.cc, "link": self.link,
                **({"capture": list(self.capture)} if self.capture else {}),
                **({"server": self.server} if self.server else {})}

    @property
    def spec_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def plan(self) -> list[tuple[Conditions, int, int, str]]:
        """Every trial, in the order it runs: (conditions, run index, size, protocol)."""
        out = []
        for ci, cond in enumerate(self.grid.conditions):
            for r in range(self.grid.runs):
                rng = random.Random(f"{self.seed}/{ci}/{r}")
                sizes = list(self.grid.sizes)
                rng.shuffle(sizes)
                for size in sizes:
                    protos = list(self.grid.protos)
                    rng.shuffle(protos)
                    out += [(cond, r, size, p) for p in protos]
        return out


NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_FORM = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"


def check_name(name, option: str) -> str:
    """A campaign name: it names report folders (results/<name>-<id>/), so nothing that could reach
    outside them ('..', '/', NUL) and nothing empty."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):  # [A-Za-z0-9] ranges: ASCII only
        raise UsageError(f"{option}: {name!r} is not a campaign name; expected {NAME_FORM}")
    return name


def presets() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PRESETS_DIR.glob("*.toml"))}


def _as_list(v) -> str:
    return ",".join(str(x) for x in v) if isinstance(v, list) else str(v)


def load(name_or_path: str, overrides: dict | None = None) -> Spec:
    """A campaign from a preset name or a TOML file; command-line overrides win over the file."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    path = presets().get(name_or_path) or Path(name_or_path)
    if not path.is_file():
        raise UsageError(f"CAMPAIGN: '{name_or_path}' is neither a preset ({', '.join(presets())}) nor a campaign file")
    where = f"campaign file {path}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{where}: not UTF-8 text (byte {e.start}); a campaign file is TOML, which is UTF-8") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"{where}: not valid TOML: {e}") from None
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; expected {', '.join(sorted(TOP_KEYS))}")
    link = data.get("link", {})
    if not isinstance(link, dict):
        raise UsageError(f"{where}: link = {link!r}; expected a [link] table with keys {', '.join(sorted(LINK_KEYS))}")
    if set(link) - LINK_KEYS:
        raise UsageError(f"{where}: [link] has unknown key(s) {', '.join(sorted(set(link) - LINK_KEYS))}; "
                         f"expected {', '.join(sorted(LINK_KEYS))}")
    profiles = data.get("profile", [])
    if not isinstance(profiles, list):
        raise UsageError(f"{where}: profile = {profiles!r}; expected [[profile]] tables, each with name and bw")
    if profiles and any(k in link for k in ("bw", "up_bw", "rtt", "jitter", "loss")):
        raise UsageError(f"{where}: give either [[profile]] entries or bw/rtt/jitter/loss under [link], not both")
    name = check_name(overrides["name"], "--name") if "name" in overrides else check_name(
        data.get("name", path.stem), f"{where}: name")

    def get(key, default):
        return overrides.get(key, link.get(key, data.get(key, default)))

    def as_int(key, default, lo, hi):
        v = overrides.get(key, data.get(key, default))
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise UsageError(f"{where}: {key} = {v!r}; expected a whole number from {lo} to {hi}")
        return v

    try:
        protos = _as_list(overrides.get("proto", data.get("protos", "both")))
        sizes = _as_list(overrides.get("size", data.get("sizes", ",".join(cond_mod.DEFAULT_SIZES))))
        runs = overrides.get("runs", data.get("runs", 3))
        reorder = get("reorder", True)
        if not isinstance(reorder, bool):
            raise UsageError(f"{where}: reorder = {reorder!r}; expected true or false")
        common = dict(jitter_dist=str(get("jitter_dist", "uniform")), loss_direction=str(get("loss_direction", "both")),
                      reorder=reorder and not overrides.get("no_reorder", False), queue=get("queue", None))
        common["queue"] = None if common["queue"] is None else str(common["queue"])
        if profiles and not any(k in overrides for k in ("bw", "rtt", "jitter", "loss")):
            conds = []
            for i, prof in enumerate(profiles):
                if not isinstance(prof, dict) or set(prof) - PROFILE_KEYS or "name" not in prof or "bw" not in prof:
                    raise UsageError(f"{where}: profile {i + 1} needs name and bw, and may have up_bw, rtt, jitter, "
                                     f"loss; got {sorted(prof) if isinstance(prof, dict) else prof!r}")
                g = cond_mod.make_grid(protos, str(prof["bw"]), sizes, runs, prof.get("up_bw"), prof.get("rtt"),
                                       prof.get("jitter"), prof.get("loss"), **common)
                conds += [dataclasses.replace(c, name=str(prof["name"])) for c in g.conditions]
            grid = dataclasses.replace(g, conditions=tuple(conds))
        else:
            def opt(key):
                v = overrides.get(key, link.get(key))
                return None if v is None else _as_list(v)
            grid = cond_mod.make_grid(protos, opt("bw") or "100mbit", sizes, runs, opt("up_bw"), opt("rtt"),
                                      opt("jitter"), opt("loss"), **common)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    cc = cond_mod.parse_cc(str(get("cc", "cubic")))
    backend = str(overrides.get("link", link.get("backend", "auto")))
    try:
        from .link import canonical
        canonical(backend)
    except UsageError as e:
        raise UsageError(f"{where}: {e}" if "link" not in overrides else str(e)) from None
    verify = str(overrides.get("verify", link.get("verify", "stop")))
    if verify not in cond_mod.VERIFY_CHOICES:
        raise UsageError(f"{where}: verify = {verify!r}; expected one of {', '.join(cond_mod.VERIFY_CHOICES)}")
    try:
        capture = parse_kinds(overrides.get("capture", data.get("capture")),
                              "--capture" if "capture" in overrides else "capture")
        interval = parse_interval_s(overrides.get("cpu_interval", data.get("cpu_interval")),
                                    "--cpu-interval" if "cpu_interval" in overrides else "cpu_interval")
        limit_text = overrides.get("capture_limit", data.get("capture_limit"))
        limit = DEFAULT_LIMIT_BYTES if limit_text is None else parse_size(
            str(limit_text), "--capture-limit" if "capture_limit" in overrides else "capture_limit")
        server = overrides.get("server", data.get("server"))
        server = None if server is None else hostnet.parse_ipv4(str(server), "--server" if "server" in overrides
                                                                 else "server")
        iface = overrides.get("iface", data.get("iface"))
        iface = None if iface is None else hostnet.check_iface_name(str(iface), "--iface" if "iface" in overrides
                                                                    else "iface")
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    token_file = overrides.get("server_token_file", data.get("server_token_file"))
    if token_file is not None and not isinstance(token_file, str):
        raise UsageError(f"{where}: server_token_file = {token_file!r}; expected the path of a file holding the token")
    return Spec(server=server, iface=iface, server_token_file=token_file, name=name, description=str(data.get("description", "")), grid=grid,
                capture=capture, cpu_interval_s=interval, capture_limit_bytes=limit,
                warmup=as_int("warmup", 0, 0, 100), retries=as_int("retries", 1, 0, 10), seed=as_int("seed", 1, 0, 2**31),
                cc=cc, link=backend, verify=verify, source=str(path))


# -- progress ------------------------------------------------------------------------------------------
class Eta:
    """Remaining time from a model of each trial, PLT ~ ideal x f + L, where the payload-only ideal
    comes from size and rate, f is learnt from bandwidth-bound trials (ideal >= 0.2 s) and L, the
    latency part, from the rest; plus the per-trial overhead seen so far and each remaining
    condition's verification."""

    def __init__(self, verify_s: float = 22.0):
        self.points: list[tuple[float, float]] = []  # (ideal s, plt s)
        self.overheads: list[float] = []
        self.verify_s = verify_s

    @staticmethod
    def _ideal(size: int, rate_bps: int | None) -> float:
        return ideal_seconds(size, rate_bps or 10**9)

    def observe_row(self, size: int, rate_bps: int | None, plt_ms: float, wall_s: float | None = None) -> None:
        self.points.append((self._ideal(size, rate_bps), plt_ms / 1000.0))
        if wall_s is not None:
            self.overheads.append(wall_s - plt_ms / 1000.0)

    def observe(self, t: Trial) -> None:
        if t.status == "ok" and t.plt_ms:
            self.observe_row(t.size_bytes, t.rate_down_bps, t.plt_ms, t.wall_s)

    def model(self) -> tuple[float, float, float]:
        def median(v, default):
            v = sorted(v)
            return v[len(v) // 2] if v else default
        f = median([p / i for i, p in self.points if i >= 0.2], 1.08)
        latency = max(0.0, median([p - f * i for i, p in self.points], 0.1))
        overhead = sum(self.overheads) / len(self.overheads) if self.overheads else 0.7
        return f, latency, overhead

    def _estimate(self, model: tuple[float, float, float], cond: Conditions, size: int) -> float:
        f, latency, overhead = model
        return self._ideal(size, cond.rate_down_bps) * f + max(latency, 3 * cond.rtt_ms / 1000.0) + overhead

    def trial_s(self, cond: Conditions, size: int) -> float:
        return self._estimate(self.model(), cond, size)

    def remaining_s(self, todo: list[tuple[Conditions, int, int, str]], conditions_left: int) -> float:
        model = self.model()
        return sum(self._estimate(model, c, s) for c, _, s, _ in todo) + conditions_left * self.verify_s


def fmt_duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def bar(done: int, total: int, width: int = 24) -> str:
    n = int(width * done / max(total, 1))
    return "[" + "#" * n + "." * (width - n) + "]"


# -- running -------------------------------------------------------------------------------------------
def key_metadata_diff(a: dict, b: dict) -> list[str]:
    return [f"{k}: {a.get(k)!r} then, {b.get(k)!r} now" for k in KEY_FIELDS if a.get(k) != b.get(k)]


def attempts_so_far(store: Store, campaign_id: int) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for t in store.trials([campaign_id]):
        out.setdefault((t["conditions"], t["run_index"], t["size_bytes"], t["proto"]), []).append(t)
    return out


def todo(spec: Spec, done: dict[tuple, list[dict]]) -> list[tuple[Conditions, int, int, str]]:
    """Trials of the plan still to run: no ok attempt yet and attempts left."""
    out = []
    for cond, r, size, proto in spec.plan():
        tried = done.get((cond.label, r, size, proto), [])
        if any(t["status"] == "ok" for t in tried) or len(tried) > spec.retries:
            continue
        out.append((cond, r, size, proto))
    return out


def run(bed, store: Store, spec: Spec, campaign_id: int, out: Callable[[str], None] = print,
        timeout_s: float | None = None, idle_gate: bool = True) -> dict:
    """Run (or resume) a campaign on an open testbed whose pages the caller has ensured
    (bed.sites.ensure, before the store is made); every trial is stored as it ends."""
    from .runner import apply_and_verify, run_cell_once
    from .link.verify import format_report
    done = attempts_so_far(store, campaign_id)
    plan = todo(spec, done)
    total = len(spec.plan())
    finished = total - len(plan)
    eta = Eta()
    for rows in done.values():
        for t in rows:
            if t["status"] == "ok":
                eta.observe_row(t["size_bytes"], t["rate_down_bps"], t["plt_ms"], t["wall_s"])
    if finished:
        out(f"resuming campaign {campaign_id}: {finished} of {total} trials already done")
    seq = max((t["seq"] for rows in done.values() for t in rows), default=-1) + 1
    counts = {"ok": 0, "failed": 0, "retried": 0}
    current = None
    conds_left = len({c.label for c, _, _, _ in plan})
    for i, (cond, r, size, proto) in enumerate(plan):
        if cond != current:
            apply_and_verify(bed, store, campaign_id, cond, spec.verify, lambda rep: out(format_report(rep)))
            current = cond
            conds_left -= 1
        attempt = len(done.get((cond.label, r, size, proto), [])) + 1
        while True:
            gate = wait_idle() if idle_gate else {}
            t = run_cell_once(bed, store, campaign_id, seq, r, Cell(proto, size, cond), timeout_s,
                              extra={"attempt": attempt, "warmup": r < spec.warmup, **{k: gate.get(k) for k in
                                                                                         ("busy_pct", "load1", "idle_wait_s")}})
            seq += 1
            eta.observe(t)
            finished += t.status == "ok" or attempt > spec.retries
            left = eta.remaining_s(plan[i + 1:], conds_left)
            plt = f"{t.plt_ms:9.1f} ms" if t.status == "ok" else "        -   "
            why = f"  {t.reason}" if t.reason else ""
            tag = f" (attempt {attempt})" if attempt > 1 else ""
            out(f"{bar(finished, total)} {finished:>{len(str(total))}}/{total} ETA {fmt_duration(left):>6}  "
                f"{t.conditions:<18} {units_label(size):>6} {proto:<4} {t.status:<6} {plt}{tag}{why}")
            if t.status == "ok":
                counts["ok"] += 1
                break
            if attempt > spec.retries:
                counts["failed"] += 1
                break
            counts["retried"] += 1
            attempt += 1
    return counts


def units_label(size: int) -> str:
    from .units import format_size
    return format_size(size)
