"""The typed records of a measurement, documented field by field (units in the names).

Trial is one page load as the store keeps it: the SQL table `trials` is made from it (columns(),
with each field's documentation as the column's comment), and the store gives back Trial records,
never bare rows. A trial embeds its Conditions: their fields become columns of their own (the
profile name as conditions_name) beside the `conditions` label, which is for people only: cells
are found by the fields.

Campaign and LinkCheck are the store's other rows. The shapes of what other processes hand over
are here too: WorkerAnswer (the browser worker's answer, one JSON line, checked by check_answer)
and CpuFigures (CPU seconds per role); linkem's are in plt_bench.link.stats.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import TypedDict

from .conditions import Conditions
from .pages import Page


def doc(text: str, default=dataclasses.MISSING) -> dataclasses.Field:
    """A field documented for people and for the SQL schema."""
    return dataclasses.field(default=default, metadata={"doc": text})


# -- what other processes hand over -------------------------------------------------------------------
class RoleCpu(TypedDict, total=False):
    user_s: float
    system_s: float
    processes: int          # processes of that role seen during the trial
    self_reported_s: float  # linkem: its own count of CPU seconds, for comparison


class CpuFigures(TypedDict, total=False):
    """A trial's CPU (trials.cpu_json): seconds per role from the navigation's start; the browser's
    start-up apart; the samplers' own cost."""
    roles: dict[str, RoleCpu]        # browser, renderer, network, gpu, utility, ..., caddy, linkem
    launch: dict[str, RoleCpu] | None  # the browser's start-up, before the navigation
    sampler: dict                    # the worker's sampler: interval_s, samples, own_cpu_s, window_s
    server_sampler: dict             # the runner's sampler of Caddy and linkem: the same figures


class WorkerAnswer(TypedDict, total=False):
    """The browser worker's answer to one load (plt_bench.browser_worker; one JSON line)."""
    nav: dict | None            # the PerformanceNavigationTiming entry, or None
    resources: list[dict] | None  # the PerformanceResourceTiming entries (browser_worker.RESOURCE_FIELDS)
    final_url: str | None
    error: str | None           # why the load failed, as the worker saw it
    error_code: str | None      # e.g. net::ERR_QUIC_PROTOCOL_ERROR
    launch_s: float | None      # Chromium's start-up
    load_s: float | None        # driver.get until the load event
    quit_s: float | None
    nav_t0: float               # the navigation's start on the monotonic clock
    cpu: CpuFigures | None      # the browser's roles (and its sampler)
    cpu_series: list[dict]      # [{"t_s", "role", "user_s", "system_s"}] when asked for
    strays_killed: int          # how many processes of the trial were still there after quit (killed)
    strays_left: list[int]      # ... that would not die (the testbed is then broken)


class Campaign(TypedDict):
    """A campaign as the store gives it back (one row of `campaigns`)."""
    id: int
    name: str
    started_utc: str
    finished_utc: str | None
    status: str                 # running | finished | failed | interrupted
    grid: dict                  # its definition (campaign.Spec.as_dict: the seed and the grid)
    metadata: dict              # the machine, browser, server and link it ran on (metadata.KEY_FIELDS decide pooling)
    spec_hash: str | None       # the definition's hash: an unfinished campaign with the same one resumes


class LinkCheck(TypedDict):
    """Conditions applied, read back from the kernel and (unless verify is off) measured."""
    conditions: str
    checked_utc: str
    result: dict                # the read-back, and under "verify" the measured report


def check_answer(answer) -> WorkerAnswer:
    """The worker's answer, refused (ValueError) if it has a key the shape does not know: the worker
    and the runner cannot drift apart silently."""
    if not isinstance(answer, dict):
        raise ValueError(f"the browser worker answered {type(answer).__name__}, not an object")
    unknown = sorted(set(answer) - _ANSWER_KEYS)
    if unknown:
        raise ValueError(f"the browser worker's answer has unknown key(s) {', '.join(unknown)}")
    return answer


# -- the trial -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Trial:
    """One page load, ok or failed, as stored (one row of `trials`)."""

    campaign_id: int = doc("the campaign it belongs to")
    seq: int = doc("order within the campaign, from 0: the order it ran in")
    run_index: int = doc("repetition of this cell, from 0")
    proto: str = doc("quic | tcp: the protocol asked for")
    size_bytes: int = doc("every body of the page: the HTML and all its objects")
    page: str = doc("what was loaded: 5KB (one HTML file) or 200x5KB (an HTML page with 200 images of 5 KB)")
    conditions: Conditions = doc("the link during the trial (columns of their own)")
    status: str = doc("ok | failed")
    reason: str | None = doc("why it failed; NULL when ok")
    started_utc: str = doc("when the trial began, ISO 8601 UTC")
    finished_utc: str = doc("when it ended")
    wall_s: float = doc("the whole trial: browser start, load, quit")
    url: str = doc("the URL loaded, with the trial's own query")
    objects: int = doc("the page's embedded objects (images); 0 for a single-object page", 0)
    object_bytes: int = doc("each object's size; 0 for a single-object page", 0)
    launch_s: float | None = doc("the browser's start-up", None)
    load_s: float | None = doc("from the navigation to the load event, as the driver saw it", None)
    quit_s: float | None = doc("the browser's quit", None)
    plt_ms: float | None = doc("page-load time: loadEventEnd - startTime", None)
    dns_ms: float | None = doc("domainLookupEnd - domainLookupStart", None)
    connect_ms: float | None = doc("connectEnd - connectStart (QUIC: handshake included)", None)
    tls_ms: float | None = doc("connectEnd - secureConnectionStart", None)
    ttfb_ms: float | None = doc("responseStart - startTime", None)
    response_end_ms: float | None = doc("responseEnd - startTime", None)
    dcl_ms: float | None = doc("domContentLoadedEventEnd - startTime", None)
    next_hop_protocol: str | None = doc("what carried the page, as the browser says: h3 | http/1.1", None)
    response_status: int | None = doc("HTTP status the browser saw", None)
    decoded_body_bytes: int | None = doc("the page's body as the browser decoded it", None)
    encoded_body_bytes: int | None = doc("the page's body as sent", None)
    transfer_bytes: int | None = doc("bytes over the network, headers included", None)
    server_proto: str | None = doc("what carried the page, as Caddy's log says: HTTP/3.0 | HTTP/1.1", None)
    server_status: int | None = doc("HTTP status Caddy logged", None)
    server_bytes: int | None = doc("body bytes Caddy logged", None)
    nav_json: str | None = doc("the full PerformanceNavigationTiming entry (JSON)", None)
    objects_ok: int | None = doc("objects proven whole over the asked protocol by the browser and the server", None)
    connections: int | None = doc("connections that carried the trial's requests (client ports in Caddy's log)", None)
    resources_json: str | None = doc("the objects' PerformanceResourceTiming entries (JSON), or NULL", None)
    link_json: str | None = doc("the link emulator's counters during this trial (linkem; JSON), or NULL", None)
    attempt: int = doc("1, then 2, 3... for retries of a failed trial", 1)
    warmup: bool = doc("a warm-up trial: kept, left out of the statistics", False)
    busy_pct: float | None = doc("CPU busy (all cores) just before the trial, as the idle gate saw it", None)
    load1: float | None = doc("1-minute load average just before the trial", None)
    idle_wait_s: float | None = doc("time the idle gate waited before the trial", None)
    cpu_json: str | None = doc("CPU seconds per role during the trial (CpuFigures; JSON)", None)
    trial_id: int | None = dataclasses.field(default=None, compare=False,
                                             metadata={"doc": "the row's id, once stored", "column": False})

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def counts(self) -> bool:
        """In the statistics: ok, with a page-load time, and not a warm-up (the one rule, used by
        plt_bench.stats and the summary alike)."""
        return self.status == "ok" and not self.warmup and self.plt_ms is not None

    @property
    def label(self) -> str:
        return self.conditions.label

    @property
    def page_spec(self) -> Page:
        """The page as the grid names it (Page(object_bytes, objects), or Page(size_bytes))."""
        return Page(self.object_bytes, self.objects) if self.objects else Page(self.size_bytes)

    @property
    def resources(self) -> list[dict]:
        return json.loads(self.resources_json) if self.resources_json else []

    @property
    def cpu(self) -> CpuFigures:
        return json.loads(self.cpu_json) if self.cpu_json else {}

    @property
    def link(self) -> dict:
        return json.loads(self.link_json) if self.link_json else {}

    @property
    def nav(self) -> dict:
        return json.loads(self.nav_json) if self.nav_json else {}

    def row(self) -> dict:
        """The trial as a flat row: column name -> value (for the store and CSV)."""
        out = {}
        for f in dataclasses.fields(self):
            if f.metadata.get("column") is False:
                continue
            v = getattr(self, f.name)
            if f.name == "conditions":
                out["conditions"] = v.label
                out.update({_cond_column(cf.name): getattr(v, cf.name) for cf in dataclasses.fields(Conditions)})
            else:
                out[f.name] = v
        return out

    @classmethod
    def from_row(cls, row: dict) -> "Trial":
        """A stored row back as a record (types restored: INTEGER 0/1 to bool)."""
        kw = {}
        hints, ch = _HINTS
        for f in dataclasses.fields(cls):
            if f.name == "conditions":
                kw["conditions"] = Conditions(**{cf.name: _restore(ch[cf.name], row.get(_cond_column(cf.name)))
                                                 for cf in dataclasses.fields(Conditions)})
            elif f.name in row:
                kw[f.name] = _restore(hints[f.name], row[f.name])
        if "id" in row:
            kw["trial_id"] = row["id"]
        return cls(**kw)


def _cond_column(name: str) -> str:
    return "conditions_name" if name == "name" else name


def _restore(hint, value):
    if value is None:
        return None
    base = _base(hint)
    return bool(value) if base is bool else value


def _base(hint):
    """int for `int | None`, and so on."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


_SQL = {int: "INTEGER", float: "REAL", str: "TEXT", bool: "INTEGER"}
_COND_DOCS = {"rate_down_bps": "downlink rate; NULL: unshaped", "rate_up_bps": "uplink rate; NULL: unshaped",
              "rtt_ms": "round-trip time added by the link", "jitter_ms": "jitter per direction",
              "jitter_dist": "uniform | normal", "loss_pct": "loss per packet, per direction it applies to",
              "loss_direction": "both | down | up", "reorder": "1: jitter may reorder packets",
              "queue_pkts": "bottleneck queue; NULL: automatic (>= one bandwidth-delay product)",
              "name": "a named profile's name (Cable, 3GFast...), if any"}


def columns() -> list[tuple[str, str, str]]:
    """(name, SQL declaration, documentation) of every column of `trials` but its id, in order."""
    hints = typing.get_type_hints(Trial)
    out = []
    for f in dataclasses.fields(Trial):
        if f.metadata.get("column") is False:
            continue
        if f.name == "conditions":
            out.append(("conditions", "TEXT NOT NULL", "label of the conditions, e.g. 100mbit rtt50ms loss1% "
                                                       "(for people: cells are found by the columns below)"))
            ch = typing.get_type_hints(Conditions)
            for cf in dataclasses.fields(Conditions):
                out.append((_cond_column(cf.name), _declare(ch[cf.name], cf.default), _COND_DOCS[cf.name]))
            continue
        out.append((f.name, _declare(hints[f.name], f.default), f.metadata["doc"]))
    return out


def _declare(hint, default) -> str:
    base = _base(hint)
    sql = _SQL[base]
    if hint is base and default is dataclasses.MISSING:
        return f"{sql} NOT NULL"
    if hint is base and default is not dataclasses.MISSING and default is not None:
        return f"{sql} NOT NULL DEFAULT {int(default) if isinstance(default, bool) else repr(default)}"
    return sql


COLUMNS = [name for name, _, _ in columns()]
_HINTS = (typing.get_type_hints(Trial), typing.get_type_hints(Conditions))  # read once: from_row runs per stored row
_ANSWER_KEYS = frozenset(typing.get_type_hints(WorkerAnswer))
