"""A campaign's life: the one path from every front end (the CLI's run, pytest's measurement mode,
a cluster's worker) to a stored trial.

    with Session(spec, results) as s:      # checked, then opened: testbed up, campaign new or resumed
        s.run()                            # or s.run_slot(slot) per slot of s.plan, as pytest does
    # left: the campaign finished, interrupted or failed in the store; the testbed gone

- Checked first, nothing made: root, the two-machine references, the store's path and schema, the
  disk space for captures. The store is created only once the testbed is up, so a refusal (a wrong
  pin, a link that cannot be built) leaves no file behind.
- Opened: a rerun of an unfinished campaign of the same name and definition resumes it (finished
  trials are not repeated; cells are found by their fields); resuming where the key metadata
  differ (browser, kernel, backend...) is refused and leaves the old campaign as it was, because
  such trials must not be pooled. --new starts a new campaign.
- Run: the plan's seeded order (campaign.Spec.plan), conditions applied and verified when they
  change, the idle gate before every trial (WebPageTest's CPU gate: what it saw is stored), warm-up
  repetitions marked, a failed trial retried up to `retries` times with every attempt stored,
  progress with an ETA.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from . import campaign, cmd, options, procs, recorder, signals, topology
from .capture import Settings, captures_root, check_space, planned
from .conditions import Cell, Conditions, transfer_seconds
from .device.calibrate import Calibration, calibrate
from .device.profiles import get as device_profile
from .device.visitor import Visitor
from .errors import PltBenchError, UsageError
from .link import verify as link_verify
from .metadata import key_diff, key_value, utc_now
from .pages import parse_page, real as realpages
from .parts import ensure, needed
from .precision import precision_stop
from .records import Trial, format_link_check, metric_value
from .remote import TOKEN_ARGV_WARNING, make_ref
from .store import Store, check_writable
from .testbed import RemoteTestbed, Setup, Testbed
from .trial.run import apply_and_verify, run_cell_once
from .units import parse_duration_ms

from .campaign import Slot  # one trial of the plan: its cell and its run
from .pages.base import DEFAULT_SITES as SITES  # the one place it is said (PLT_BENCH_SITES or the project's)

# the page a device's benchmark runs in (device.calibrate): small, so that its load costs nothing
CALIBRATION_PAGE = "5KB"


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def key_metadata_diff(a: dict, b: dict) -> list[str]:
    return [f"{k}: {key_value(a, k)!r} then, {key_value(b, k)!r} now" for k in key_diff(a, b)]


def owner_text(owner: dict) -> str:
    """An owner record (procs.me) as words: 'PID 123 on host vm, started 2026-11-24 06:30:00 UTC'."""
    import datetime
    import os
    import socket

    import psutil
    when = ""
    try:
        if owner.get("host") == socket.gethostname():  # start: clock ticks after this machine's boot
            t = psutil.boot_time() + int(owner["start"]) / os.sysconf("SC_CLK_TCK")
            when = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(", started %Y-%m-%d %H:%M:%S UTC")
    except (KeyError, TypeError, ValueError):
        pass
    return f"PID {owner.get('pid')} on host {owner.get('host')}{when}"


def attempts_so_far(trials: list[Trial]) -> dict[Slot, list[Trial]]:
    """A campaign's stored attempts per slot, found by the trial's fields (its conditions, not a label)."""
    out: dict[Slot, list[Trial]] = {}
    pages: dict = {}  # each label read once
    for t in trials:
        out.setdefault(Slot.of(t, pages), []).append(t)
    return out


def todo(plan: list[Slot], done: dict[Slot, list[Trial]], retries: int) -> list[Slot]:
    """Slots of the plan still to run: no ok attempt yet and attempts left."""
    return [s for s in plan if not any(t.status == "ok" for t in done.get(s, [])) and len(done.get(s, [])) <= retries]


def parse_timeout_s(text: str | None, option: str = "--timeout") -> float | None:
    if text is None:
        return None
    t = parse_duration_ms(text, option) / 1000.0
    if t <= 0:
        raise UsageError(f"{option}: must be more than 0s")
    return t


def spec_from_options(values: dict, flags: dict | None = None, record: Callable[[str], None] | None = None):
    """The campaign a front end's options describe (the preset or file, then the overrides). A real
    page not recorded here yet (--size real:NAME, pages.real.NotRecorded) is recorded by `record`
    (its name) and the campaign read again; without `record`, the UsageError says how to make it."""

    def load():
        return campaign.load(values.get("campaign"), {k: values.get(k) for k in options.MEASUREMENT if k != "campaign"},
                             flags)
    if record is None:
        return load()
    missing: set[str] = set()
    token = realpages.UNRECORDED.set(missing)
    try:
        spec = load()  # every other option checked, the real pages not recorded yet gathered
    finally:
        realpages.UNRECORDED.reset(token)
    if not missing:
        return spec
    for name in sorted(missing):
        record(name)
    return load()


def from_options(values: dict, flags: dict | None = None, **kw) -> "Session":
    """The session a front end's options describe ({key: value} as plt_bench.options.values gives
    them; None: not given). The CLI and pytest both come here, so the same options give the same
    campaign; `flags` names an option typed otherwise in that front end."""
    import argparse
    index = values.get("testbed")
    if isinstance(index, str):
        try:
            index = topology.testbed_index(index)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"--testbed: {e}") from None

    def record(name: str) -> None:  # a real page's first campaign here records it first (as root)
        cmd.require_root()
        recorder.record_real(name, SITES, index=index, note=kw.get("note", _err))
    spec = spec_from_options(values, flags, record)
    return Session(spec, Path(values.get("results") or campaign.DEFAULTS["results"]), testbed_index=index,
                   new=bool(values.get("new")), server_pin=values.get("server_pin"),
                   server_token=values.get("server_token"), control_port=values.get("control_port"),
                   timeout_s=parse_timeout_s(values.get("timeout"), (flags or {}).get("timeout", "--timeout")), **kw)


class Session:
    """One campaign on one testbed, from the checks to its final status. Library code: it raises
    (UsageError for bad input, PltBenchError for a failure); `out` takes progress lines, `note`
    warnings and notes."""

    def __init__(self, spec, results: Path, *, testbed_index: int | None = None, new: bool = False,
                 server_pin: str | None = None, server_token: str | None = None, control_port: str | None = None,
                 timeout_s: float | None = None, idle_gate: bool = True, calibrations: dict | None = None,
                 out: Callable[[str], None] = lambda line: print(line, flush=True), note: Callable[[str], None] = _err):
        """calibrations: devices this host calibrated for the campaign already ({name: Calibration.as_dict()};
        a cluster's worker gives its own, so that each host calibrates once per campaign), kept as a
        resumed campaign's are."""
        self.spec, self.results, self.new, self.timeout_s, self.idle_gate = spec, Path(results), new, timeout_s, idle_gate
        self.out, self.note = out, note
        self.plan: list[Slot] = spec.plan()
        cmd.require_root()
        ensure(needed(spec), note)  # what only some campaigns need comes when one first does (plt_bench.parts)
        self.capture = Settings(spec.capture, captures_root(self.results), spec.cpu_interval_s, spec.capture_limit_bytes)
        ref = make_ref(spec.server_machine, server_pin, server_token, control_port, spec.iface, spec.server_token_file)
        if ref is not None and ref.token_source == "argv":
            note(TOKEN_ARGV_WARNING)
        self.devices = [b.device for b in spec.grid.budgets if b.device]
        self.calibrations = dict(calibrations or {})
        # one setup for one machine and for two (a device's calibration runs in Chromium, whose figures its
        # profile's are: device.calibrate)
        setup = Setup.of_spec(spec, SITES, testbed_index, self.capture,
                              tuple(dict.fromkeys(spec.grid.browsers + (("chromium",) if self.devices else ()))))
        if ref is None:
            self.bed = Testbed(setup)
        else:
            self.bed = RemoteTestbed(setup, ref, spec.iface,
                                     served_hosts=[h for p in spec.grid.pages if (h := p.page_kind.served_host(p))])
            self.bed.check()  # bad two-machine options fail here, before anything is made
        check_writable(self.results)
        self.capture_bytes, warning = check_space(spec.capture, planned(self.plan), self.capture.root,
                                                  spec.capture_limit_bytes)
        if warning:
            note(warning)
        conds = len(spec.grid.conditions)
        out(f"plan: {len(self.plan):,} trial(s) over {conds} condition(s), about "
            f"{fmt_duration(Eta().remaining_s(self.plan, conds))} by a first estimate")
        self.store: Store | None = None
        self.campaign_id: int | None = None
        self.status = "failed"
        self.counts = {"ok": 0, "failed": 0, "retried": 0}
        self.stopped: str | None = None  # why the campaign stopped; no trial runs after that
        self._entered = False

    # -- life ---------------------------------------------------------------------------------------
    def __enter__(self) -> "Session":
        try:
            self.open()
        except BaseException as e:
            self.__exit__(type(e), e, None)
            raise
        return self

    def open(self) -> None:
        """Bring the testbed up, then create or reopen the campaign in the store."""
        spec = self.spec
        self.bed.__enter__()
        self._entered = True
        self.bed.sites.ensure(spec.grid.pages)  # two machines: a page the server lacks is refused here, storeless
        self.store = Store(self.results)
        for gone in self.store.mark_abandoned(procs.owner_alive):
            self.note(f"note: campaign {gone} was left 'running' by a run that is gone (killed); marked interrupted")
        meta = {**self.bed.metadata(), "owner": procs.me()}
        resume = None if self.new else self.store.resumable(spec.name, spec.spec_hash)
        if resume is not None:
            old = self.store.campaign(resume)["metadata"]
            diff = key_metadata_diff(old, meta)
            if diff:
                raise UsageError(f"CAMPAIGN: campaign {resume} ({spec.name}) cannot be resumed here, its trials would "
                                 f"not be comparable: {'; '.join(diff)}. Run with --new to start a new campaign")
            held = self.store.claim(resume, meta["owner"], procs.owner_alive)
            if held:
                raise UsageError(f"CAMPAIGN: campaign {resume} ({spec.name}) in {self.results} is being run now by "
                                 f"{owner_text(held)}; one campaign has one live run. Wait for it to end, or run "
                                 "with --new or another --name for a campaign of your own")
            old.setdefault("sessions", []).append({"utc": utc_now(), "loadavg": meta["loadavg"],
                                                   "git_commit": meta["git_commit"]})
            old["owner"] = meta["owner"]
            self.store.update_metadata(resume, old)
            self.campaign_id = resume
        else:
            stale = self.store.unfinished_named(spec.name)
            self.campaign_id = self.store.new_campaign(spec.name, utc_now(), spec.as_dict(), meta, spec.spec_hash)
            if stale:
                self.note(f"note: campaign(s) {', '.join(map(str, stale))} named '{spec.name}' are unfinished with "
                          f"another definition (runs, sizes, link...) and stay as they are; this is campaign "
                          f"{self.campaign_id}. Rerun with their exact options to resume one")
        self._calibrate()
        self.done = attempts_so_far(self.store.trials([self.campaign_id]))
        self.todo = todo(self.plan, self.done, spec.retries)
        self.skipped = 0  # slots a precision target made unnecessary
        self.stops: dict[tuple, str] = {}  # (conditions, page) -> why a precision target stopped the cell
        for slot in list(self.todo):
            if slot in self.todo:
                self._settled(slot)
        self.seq = max((t.seq for rows in self.done.values() for t in rows), default=-1) + 1
        self.finished = len(self.plan) - len(self.todo)
        self.current: Conditions | None = None
        self.eta = Eta()
        for rows in self.done.values():
            for t in rows:
                self.eta.observe(t)
        self._header()

    def _calibrate(self) -> None:
        """Each device's CPU budget on this host, the client (device.calibrate), measured once per
        campaign and kept in its metadata: a resumed campaign applies the budget its trials ran under,
        so they pool. On two machines the budget is the client's: the benchmark loads a page of the
        server machine's into this machine's browser."""
        if not self.devices:
            return
        meta = self.store.campaign(self.campaign_id)["metadata"]
        saved = {**self.calibrations, **(meta.get("devices") or {})}
        page = parse_page(CALIBRATION_PAGE)
        try:
            self.bed.sites.ensure((page,))
        except UsageError:  # a server machine without it: the campaign's smallest page, which it has
            page = min((p for p in self.spec.grid.pages if p.page_kind.recording_name(p) is None and p.origins == 1),
                       key=lambda p: p.expected_bytes(None), default=None)
            if page is None:
                raise UsageError(f"--device: the benchmark runs in a small page the server lacks; start 'plt-bench "
                                 f"serve' with --size {CALIBRATION_PAGE} among its pages") from None
        for name in self.devices:
            if name in saved:
                cal = Calibration.from_dict(saved[name])
                self.out(f"device {cal.words()}: the campaign's own calibration, kept")
            else:
                self.out(f"device {name}: calibrating this host's CPU (Lighthouse's BenchmarkIndex in Chromium) ...")
                cal = calibrate(self.bed, device_profile(name), page)
                saved[name] = cal.as_dict()
                self.out(f"device {cal.words()}")
            self.bed.calibrations[name] = cal
        self.bed.set_visitor(Visitor())  # the trials set their own (trial.run._ready)
        if meta.get("devices") != saved:
            self.store.update_metadata(self.campaign_id, {**meta, "devices": saved})

    def _header(self) -> None:
        spec, bed, g = self.spec, self.bed, self.spec.grid
        runs = (f"{g.runs} to {spec.max_runs} runs: each cell until its medians are within +-{spec.precision_pct:g}%"
                if spec.precision_pct is not None else f"{g.runs} run(s)")
        self.out(f"campaign {self.campaign_id} '{spec.name}': {spec.what}\n"
                 f"{'at most ' if spec.precision_pct is not None else ''}{len(self.plan)} trials "
                 f"({len(g.conditions)} condition(s) x {len(g.pages)} page(s) x "
                 f"{len(g.protos)} protocol(s) x {f'{len(g.ccs)} congestion controls x ' if len(g.ccs) > 1 else ''}"
                 f"{f'{len(g.browsers)} browsers x ' if len(g.browsers) > 1 else ''}"
                 f"{f'{len(g.servers)} servers x ' if len(g.servers) > 1 else ''}"
                 f"{runs}, order seeded with {spec.seed}) on testbed "
                 f"{bed.plan.prefix}, link {bed.link.backend} ({bed.link.tool}, {bed.link.placement}); results in "
                 f"{self.results}")
        if self.finished:
            self.out(f"resuming campaign {self.campaign_id}: {self.finished} of {len(self.plan)} trials already done")
        if spec.server_machine:
            self.out(f"two machines: server machine {spec.server_machine} ({bed.hello.get('host')}), this machine's {bed.plan.iface} "
                     f"shaped at its {bed.link.detail}")
            for name, size in bed.recordings_sent.items():
                self.out(f"two machines: recording {name} ({size / 1e6:.1f} MB) sent to the server machine, verified "
                         "there by its hash")
            if bed.plan.replay_net:
                self.out(f"two machines: recorded and served hosts on the server machine's {bed.plan.replay_net}, "
                         f"routed through {spec.server_machine}")
        if spec.capture:
            self.out(f"capture: {', '.join(spec.capture)}, CPU every {spec.cpu_interval_s * 1000:.0f} ms"
                     + (f"; files (about {self.capture_bytes / 1e6:,.0f} MB) in {self.capture.root}/"
                        f"{self.campaign_id}/" if self.capture_bytes else ""))

    def close(self, interrupted: bool = False) -> None:
        """End a session run slot by slot (pytest): interrupted, stopped (failed) or finished."""
        if self._entered or self.store is not None:
            self.__exit__(KeyboardInterrupt if interrupted else PltBenchError if self.stopped else None, None, None)

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.status = "finished"
        elif issubclass(kind, (KeyboardInterrupt, signals.Interrupted)):
            self.status = "interrupted"
        if kind is not None and self.campaign_id is not None and issubclass(
                kind, (KeyboardInterrupt, signals.Interrupted, PltBenchError)):
            self.note(f"campaign {self.campaign_id} stopped; it keeps every finished trial: run the same command again "
                      "to resume")
        # the campaign's end is stored before the testbed goes: a cluster worker's cell store lives in
        # the testbed's run folder, and a store removed meanwhile is saved here (Store.finish_campaign)
        try:
            if self.store is not None and self.campaign_id is not None:
                self.store.finish_campaign(self.campaign_id, self.status, utc_now())
        finally:
            try:
                if self._entered:
                    self._entered = False
                    self.bed.__exit__(kind, exc, tb)
            finally:
                if self.store is not None:
                    self.store.close()
                    self.store = None

    # -- running ------------------------------------------------------------------------------------
    def run(self) -> dict:
        """Every slot still to run, in the plan's order; {"ok", "failed", "retried"} counts."""
        for slot in list(self.todo):
            if slot in self.todo:  # a precision target may have settled its cell meanwhile
                self.run_slot(slot)
        return self.counts

    def _settled(self, slot: Slot) -> bool:
        """With a precision target: the slot's cell had stopped before the slot's run (judged on the
        trials of the runs before it, so both protocols of a cell always have the same runs); its
        remaining slots leave the plan, and the first time a line says why."""
        spec = self.spec
        cond, r, page = slot.conditions, slot.run_index, slot.page
        if spec.precision_pct is None or r < spec.grid.runs:
            return False
        times: dict[str, list[float]] = {}
        for done, rows in self.done.items():  # per protocol (and congestion control, browser, server, where several)
            if done.place == slot.place and done.run_index < r:
                key = spec.grid.variant_words(done.proto, done.cc, done.browser, done.server, done.budget)
                # the campaign's metric (--metric), as its report compares: a trial without it does not count
                times.setdefault(key, []).extend(v for t in rows if t.counts
                                                 and (v := metric_value(t, spec.metric)) is not None)
        kinds = tuple(spec.grid.variant_words(*v) for v in spec.grid.variants())
        why, widths = precision_stop(times, spec.precision_pct, spec.grid.runs, spec.max_runs, kinds)
        if why is None:
            return False
        rest = [s for s in self.todo if s.place == slot.place and s.run_index >= r]
        for s in rest:
            self.todo.remove(s)
        self.skipped += len(rest)
        if rest:
            half = ", ".join(f"{p} +-{w:.1f}%" for p, w in widths.items())
            self.stops[(cond, page)] = f"{why} after {r} run(s) ({half}; target +-{spec.precision_pct:g}%)"
            self.out(f"{cond.label} {page.label}: {self.stops[(cond, page)]}")
        return True

    def skip_reason(self, slot: Slot) -> str:
        """Why run_slot ran nothing for a slot: its cell stopped under the precision target, or a
        resumed campaign had measured it."""
        cond, page = slot.place
        why = self.stops.get((cond, page))
        return (f"not needed: {cond.label} {page.label}: {why}" if why
                else f"measured before: campaign {self.campaign_id} was resumed")

    def run_slot(self, slot: Slot) -> Trial | None:
        """One slot of the plan: its conditions applied (and verified) if they changed, then attempts
        until one is ok or none are left; every attempt is stored. Returns the last attempt, or None
        for a slot a resumed campaign had done. The first call opens the session if it is not open;
        once the campaign stopped (a failure), every later call raises."""
        if self.stopped:
            raise PltBenchError(f"the campaign stopped: {self.stopped}")
        try:
            if not self._entered:
                self.__enter__()
            return self._attempts(slot) if slot in self.todo and not self._settled(slot) else None
        except PltBenchError as e:
            self.stopped = str(e)
            raise

    def _attempts(self, slot: Slot) -> Trial:
        cond, r, page, proto = slot.conditions, slot.run_index, slot.page, slot.proto
        if cond != self.current:
            if self.current is None or cond.link_only != self.current.link_only:  # think time is the servers', not the link's
                apply_and_verify(self.bed, self.store, self.campaign_id, cond, self.spec.verify,
                                 lambda rep: self.out(format_link_check(rep)))
            self.current = cond
        attempt = len(self.done.get(slot, [])) + 1
        total = len(self.plan) - self.skipped
        while True:
            self.store.ensure_present()  # a store removed or replaced meanwhile: saved, and the run stops
            t = run_cell_once(self.bed, self.store, self.campaign_id, self.seq, r, slot.cell, self.timeout_s,
                              extra={"attempt": attempt, "warmup": r < self.spec.warmup}, gate=self.idle_gate,
                              next_cell=self._next_cell(slot))
            self.seq += 1
            self.done.setdefault(slot, []).append(t)
            self.eta.observe(t)
            last = t.status == "ok" or attempt > self.spec.retries
            self.finished += last
            if last and slot in self.todo:
                self.todo.remove(slot)
            left = self.eta.remaining_s(self.todo, len({x.conditions for x in self.todo} - {cond}))
            plt = f"{t.plt_ms:9.1f} ms" if t.status == "ok" else "        -   "
            why = f"  {t.reason}" if t.reason else ""
            tag = f" (attempt {attempt})" if attempt > 1 else ""
            g = self.spec.grid
            tag_ = ((f" {slot.cc:<5}" if len(g.ccs) > 1 else "") + (f" {slot.browser:<8}" if len(g.browsers) > 1 else "")
                    + (f" {slot.server:<6}" if len(g.servers) > 1 else ""))
            self.out(f"{bar(self.finished, total)} {self.finished:>{len(str(total))}}/{total} ETA "
                     f"{fmt_duration(left):>6}  {cond.label:<18} {page.label:>7} {proto:<4}{tag_} {t.status:<6} "
                     f"{plt}{tag}{why}")
            if t.status == "ok":
                self.counts["ok"] += 1
                return t
            if last:
                self.counts["failed"] += 1
                return t
            self.counts["retried"] += 1
            attempt += 1


    def _next_cell(self, slot: Slot) -> Cell | None:
        """The load that most likely follows this slot's: the next slot of the plan still to run (a
        failed attempt's retry instead finds the browser ended and starts its own)."""
        for s in self.todo:
            if s != slot:
                return s.cell
        return None


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
        return transfer_seconds(size, rate_bps or 10**9)

    def observe(self, t: Trial) -> None:
        if t.status == "ok" and t.plt_ms:
            self.points.append((self._ideal(t.size_bytes, t.conditions.rate_down_bps), t.plt_ms / 1000.0))
            self.overheads.append(t.wall_s - t.plt_ms / 1000.0)

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

    def remaining_s(self, todo: list[Slot], conditions_left: int) -> float:
        model = self.model()
        return sum(self._estimate(model, x.conditions, x.page.total_bytes) for x in todo) + conditions_left * self.verify_s


def fmt_duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def bar(done: int, total: int, width: int = 24) -> str:
    n = int(width * done / max(total, 1))
    return "[" + "#" * n + "." * (width - n) + "]"


def verify_link(spec, results: Path, probes: int, testbed_index: int | None = None,
                on_report: Callable[[dict], None] | None = None) -> list[dict]:
    """'plt-bench verify': a testbed without a browser, each condition applied, read back and measured
    with real packets; stored as a campaign named verify (its link checks). The reports, in order."""
    cmd.require_root()
    store = Store(results)
    reports = []
    with store, Testbed(Setup(SITES, cc=spec.cc, link=spec.link, index=testbed_index, with_browser=False,
                              conditions=spec.grid.conditions, traces=spec.traces)) as bed:
        cid = store.new_campaign("verify", utc_now(), spec.as_dict(), bed.metadata())
        for cond in spec.grid.conditions:
            readback = bed.set_conditions(cond)
            rep = {**link_verify.verify(bed.plan, cond, probes=probes, **bed.verify_args()), "readback": readback}
            store.add_link_check(cid, cond.label, utc_now(), rep)
            reports.append(rep)
            if on_report:
                on_report(rep)
        store.finish_campaign(cid, "finished", utc_now())
    return reports

