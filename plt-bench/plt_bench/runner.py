"""Running a grid of trials on a testbed, writing each trial as it ends."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Callable

from .browser import is_error_page, judge, timings
from .conditions import Cell, Grid, ideal_seconds
from .metadata import utc_now
from .pages import page_name
from .store import Store, Trial
from .testbed import Testbed


def page_timeout_s(size_bytes: int, rate_bps: int | None) -> float:
    """Generous page-load timeout: 3x the ideal transfer time plus 20 s (unshaped: as if 100 Mbit/s)."""
    ideal = ideal_seconds(size_bytes, rate_bps if rate_bps else 100 * 10**6)
    return 3.0 * ideal + 20.0


def make_trial(campaign_id: int, seq: int, run_index: int, cell: Cell, url: str, started: str, wall_s: float,
               answer: dict, server_entries: list[dict] | None) -> Trial:
    """Build the immutable record of one load from the worker's answer and the server's log."""
    status, reason = judge(cell.proto, cell.size_bytes, answer, server_entries)
    nav = answer.get("nav") or {}
    # A failed navigation leaves the error page's own Navigation Timing entry: keep it raw
    # (nav_json) for forensics, never as timings of the page.
    t = timings(nav) if nav and not is_error_page(answer) else {}
    srv = server_entries[0] if server_entries and len(server_entries) == 1 else {}
    return Trial(
        campaign_id=campaign_id, seq=seq, run_index=run_index, proto=cell.proto, size_bytes=cell.size_bytes,
        page=page_name(cell.size_bytes), rate_down_bps=cell.conditions.rate_down_bps,
        rate_up_bps=cell.conditions.rate_up_bps, conditions=cell.conditions.label, status=status, reason=reason,
        started_utc=started, finished_utc=utc_now(), wall_s=wall_s, url=url,
        launch_s=answer.get("launch_s"), load_s=answer.get("load_s"), quit_s=answer.get("quit_s"),
        next_hop_protocol=nav.get("nextHopProtocol"), response_status=nav.get("responseStatus"),
        decoded_body_bytes=nav.get("decodedBodySize"), encoded_body_bytes=nav.get("encodedBodySize"),
        transfer_bytes=nav.get("transferSize"), server_proto=srv.get("proto"), server_status=srv.get("status"),
        server_bytes=srv.get("size"), nav_json=json.dumps(nav) if nav else None, **t)


def run_cell_once(bed: Testbed, store: Store, campaign_id: int, seq: int, run_index: int, cell: Cell,
                  timeout_s: float | None = None) -> Trial:
    page = page_name(cell.size_bytes)
    timeout = timeout_s or page_timeout_s(cell.size_bytes, cell.conditions.rate_down_bps)
    started = utc_now()
    t0 = time.monotonic()
    answer, uri = bed.load(cell.proto, page, timeout)
    wall = time.monotonic() - t0
    entries = bed.server.access_entries(uri, wait_s=2.0 if answer.get("nav") else 0.2)
    trial = make_trial(campaign_id, seq, run_index, cell, bed.url(page) + uri[uri.index("?"):], started, wall,
                       answer, entries)
    store.add_trial(trial)
    return trial


def run_grid(bed: Testbed, store: Store, campaign_id: int, grid: Grid,
             on_trial: Callable[[Trial, int, int], None] | None = None, timeout_s: float | None = None) -> list[Trial]:
    """Every cell `runs` times. Conditions change least often (each change is verified); within a
    repetition the protocols alternate for each size, so slow drift cannot favour one protocol."""
    bed.sites.ensure(grid.sizes)
    trials: list[Trial] = []
    total = len(grid.cells()) * grid.runs
    seq = 0
    for cond in grid.conditions:
        check = bed.set_conditions(cond)
        store.add_link_check(campaign_id, cond.label, utc_now(), check)
        for run_index in range(grid.runs):
            for size in grid.sizes:
                for proto in grid.protos:
                    trial = run_cell_once(bed, store, campaign_id, seq, run_index, Cell(proto, size, cond), timeout_s)
                    trials.append(trial)
                    seq += 1
                    if on_trial:
                        on_trial(trial, seq, total)
    return trials


def grid_dict(grid: Grid) -> dict:
    return {"protos": list(grid.protos), "sizes": list(grid.sizes),
            "conditions": [dataclasses.asdict(c) for c in grid.conditions], "runs": grid.runs}
