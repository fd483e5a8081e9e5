"""Campaigns' definitions: a whole grid, from a TOML file or a built-in preset, with the options of
any front end (plt_bench.options) as overrides. How a campaign runs is plt_bench.session.

- Order (Spec.plan): conditions change least often (each is verified once); within a repetition
  the pages come in a random order and, for each page, the two protocols in a random order,
  so slow drift cannot favour one protocol. The order is seeded (seed) and recorded.
- The definition (Spec.as_dict, hashed) decides which unfinished campaign a rerun resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
import tomllib
from pathlib import Path

from . import cmd, conditions as cond_mod
from .link import host as hostnet
from .capture import DEFAULT_INTERVAL_S, DEFAULT_LIMIT_BYTES, parse_interval_s, parse_kinds
from .conditions import Conditions, Grid
from .errors import UsageError
from .pages import Page
from .units import parse_size

PRESETS_DIR = cmd.PROJECT_ROOT / "campaigns"
TOP_KEYS = {"name", "description", "protos", "sizes", "runs", "precision", "max_runs", "warmup", "retries", "seed",
            "link", "profile", "capture", "cpu_interval", "capture_limit", "server", "iface", "server_token_file",
            "browser_binary"}
LINK_KEYS = {"bw", "up_bw", "rtt", "jitter", "loss", "jitter_dist", "loss_direction", "reorder", "queue", "cc",
             "backend", "verify"}
PROFILE_KEYS = {"name", "bw", "up_bw", "rtt", "jitter", "loss"}

# What applies when neither an option nor the campaign file says: the one place these are written
# (plt_bench.options shows them in every front end's help).
DEFAULTS = {"campaign": "quick", "proto": "both", "bw": "100mbit", "size": ",".join(cond_mod.DEFAULT_SIZES), "runs": 3,
            "max_runs": 30, "warmup": 0, "retries": 1, "seed": 1, "jitter_dist": "uniform", "loss_direction": "both",
            "reorder": True,
            "cc": "cubic", "link": "auto", "verify": "stop", "cpu_interval": f"{DEFAULT_INTERVAL_S * 1000:g}ms",
            "capture_limit": f"{DEFAULT_LIMIT_BYTES / 1e9:g}GB", "test": "welch", "correction": "holm",
            "results": str(cmd.PROJECT_ROOT / "results" / "plt-bench.sqlite")}


@dataclasses.dataclass(frozen=True)
class Spec:
    """A campaign's definition: everything that decides which trials it holds."""

    name: str
    description: str
    grid: Grid
    warmup: int                       # repetitions (run index < warmup) kept but left out of the statistics
    retries: int                      # further attempts of a failed trial
    seed: int                         # of the trial order
    cc: str
    link: str                         # backend asked for (auto, netem, linkem)
    verify: str                       # stop | warn | off
    source: str                       # the preset or file it came from
    capture: tuple[str, ...]          # capture kinds (plt_bench.capture.KINDS)
    cpu_interval_s: float
    capture_limit_bytes: int
    server: str | None                # two machines: the server's address ('plt-bench serve --addr')
    iface: str | None                 # two machines: this machine's interface towards it
    server_token_file: str | None     # two machines: where the control token is (not part of the definition)
    browser_binary: str | None = None  # the browser measured (None: Debian's Chromium; plt_bench.drivers)
    precision_pct: float | None = None  # run each cell until its medians' 95% CI half-widths are within this
    #                                     percent of the medians (grid.runs the least, max_runs the most runs)
    max_runs: int | None = None
    within: Grid | None = None         # one cell of a campaign (plt_bench.cluster): the campaign's whole grid,
    #                                    so that the cell's plan keeps the campaign's order

    @property
    def planned_runs(self) -> int:
        """Runs per cell in the plan: the most a cell may take (grid.runs without a precision target)."""
        return self.max_runs if self.precision_pct is not None and self.max_runs else self.grid.runs

    def as_dict(self) -> dict:
        # a single-object page by its bytes (as before multi-object pages: older campaigns' hashes hold)
        sizes = [p.label if p.objects or p.kind != "page" else p.size_bytes for p in self.grid.pages]
        return {"name": self.name, "protos": list(self.grid.protos), "sizes": sizes,
                "conditions": [dataclasses.asdict(c) for c in self.grid.conditions], "runs": self.grid.runs,
                "warmup": self.warmup, "retries": self.retries, "seed": self.seed, "cc": self.cc, "link": self.link,
                **({"capture": list(self.capture)} if self.capture else {}),
                **({"server": self.server} if self.server else {}),
                **({"browser_binary": self.browser_binary} if self.browser_binary else {}),
                **({"precision_pct": self.precision_pct, "max_runs": self.max_runs}
                   if self.precision_pct is not None else {})}

    @property
    def spec_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def plan(self) -> list[tuple[Conditions, int, Page, str]]:
        """Every trial, in the order it runs: (conditions, run index, page, protocol)."""
        out = []
        grid = self.within or self.grid
        for ci, cond in enumerate(grid.conditions):
            for r in range(self.planned_runs):
                rng = random.Random(f"{self.seed}/{ci}/{r}")
                pages = list(grid.pages)
                rng.shuffle(pages)
                for page in pages:
                    protos = list(grid.protos)
                    rng.shuffle(protos)
                    out += [(cond, r, page, p) for p in protos]
        if self.within:
            out = [s for s in out if s[0] in self.grid.conditions and s[2] in self.grid.pages]
        return out


def _precision(overrides: dict, data: dict, where: str, runs: int) -> tuple[float | None, int | None]:
    """The precision target (percent) and the most runs per cell, or (None, None) for fixed runs."""
    from .units import parse_percent
    given = overrides.get("precision", data.get("precision"))
    if given is None:
        if overrides.get("max_runs") is not None:
            raise UsageError("--max-runs: only with --precision (a fixed --runs needs no most)")
        return None, None
    option = "--precision" if "precision" in overrides else f"{where}: precision"
    pct = parse_percent(str(given), option)
    if not 0 < pct <= 50:
        raise UsageError(f"{option}: '{given}' is out of range; expected more than 0% and at most 50%, e.g. 2%")
    most = overrides.get("max_runs", data.get("max_runs", DEFAULTS["max_runs"]))
    option = "--max-runs" if "max_runs" in overrides else f"{where}: max_runs"
    most = cond_mod.parse_runs(most, option)
    if runs < 3 or most < runs:
        raise UsageError(f"{option}: {most} with runs {runs}; a precision target needs runs >= 3 (a median's "
                         f"interval needs three trials) and max_runs >= runs")
    return pct, most


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


def load(name_or_path: str | None, overrides: dict | None = None, flags: dict | None = None) -> Spec:
    """A campaign from a preset name or a TOML file (None: DEFAULTS' preset); options (overrides,
    keyed as in plt_bench.options; None means not given) win over the file. `flags` names an
    option whose flag is not --<key> in this front end (pytest's --captures)."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None and v is not False}
    flags = flags or {}
    name_or_path = name_or_path or DEFAULTS["campaign"]
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
        protos = _as_list(overrides.get("proto", data.get("protos", DEFAULTS["proto"])))
        sizes = _as_list(overrides.get("size", data.get("sizes", DEFAULTS["size"])))
        runs = overrides.get("runs", data.get("runs", DEFAULTS["runs"]))
        reorder = get("reorder", DEFAULTS["reorder"])
        if not isinstance(reorder, bool):
            raise UsageError(f"{where}: reorder = {reorder!r}; expected true or false")
        common = dict(jitter_dist=str(get("jitter_dist", DEFAULTS["jitter_dist"])),
                      loss_direction=str(get("loss_direction", DEFAULTS["loss_direction"])),
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
            grid = cond_mod.make_grid(protos, opt("bw") or DEFAULTS["bw"], sizes, runs, opt("up_bw"), opt("rtt"),
                                      opt("jitter"), opt("loss"), **common)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    cc = cond_mod.parse_cc(str(get("cc", DEFAULTS["cc"])))
    backend = str(overrides.get("link", link.get("backend", DEFAULTS["link"])))
    try:
        from .link import canonical
        canonical(backend)
    except UsageError as e:
        raise UsageError(f"{where}: {e}" if "link" not in overrides else str(e)) from None
    verify = str(overrides.get("verify", link.get("verify", DEFAULTS["verify"])))
    if verify not in cond_mod.VERIFY_CHOICES:
        choices = ', '.join(cond_mod.VERIFY_CHOICES)
        raise UsageError(f"--verify: '{verify}'; expected one of {choices}" if "verify" in overrides else
                         f"{where}: verify = {verify!r}; expected one of {choices}")
    try:
        capture = parse_kinds(overrides.get("capture", data.get("capture")),
                              flags.get("capture", "--capture") if "capture" in overrides else "capture")
        interval = parse_interval_s(overrides.get("cpu_interval", data.get("cpu_interval", DEFAULTS["cpu_interval"])),
                                    "--cpu-interval" if "cpu_interval" in overrides else "cpu_interval")
        limit = parse_size(str(overrides.get("capture_limit", data.get("capture_limit", DEFAULTS["capture_limit"]))),
                           "--capture-limit" if "capture_limit" in overrides else "capture_limit")
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
    browser = overrides.get("browser_binary", data.get("browser_binary"))
    if browser is not None and (not isinstance(browser, str) or not browser.startswith("/")):
        raise UsageError(f"{where}: {'--browser-binary' if 'browser_binary' in overrides else 'browser_binary'} = "
                         f"{browser!r}; expected the absolute path of a Chromium or Google Chrome binary")
    precision, max_runs = _precision(overrides, data, where, grid.runs)
    return Spec(server=server, iface=iface, server_token_file=token_file, browser_binary=browser, name=name,
                description=str(data.get("description", "")), grid=grid, precision_pct=precision, max_runs=max_runs,
                capture=capture, cpu_interval_s=interval, capture_limit_bytes=limit,
                warmup=as_int("warmup", DEFAULTS["warmup"], 0, 100), retries=as_int("retries", DEFAULTS["retries"], 0, 10),
                seed=as_int("seed", DEFAULTS["seed"], 0, 2**31),
                cc=cc, link=backend, verify=verify, source=str(path))
