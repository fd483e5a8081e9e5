"""Results as pandas DataFrames, for notebooks and scripts: one tidy row per trial (the
conditions as columns, units in the column names), the CPU samples and the link checks.

    from plt_bench import results
    df = results.trials("results/plt-bench.sqlite", campaign="latest")
    ok = df[df.counts & (df.measures == "page")]  # what the heatmap counts (stats.usable)
    med = ok.pivot_table(index=["conditions", "page"], columns="proto", values="plt_ms", aggfunc="median")
    print((med.h3 - med.h1) / med.h1 * 100)   # the h3-vs-h1 heatmap's diff %: negative, h3 faster

The store is opened read-only (an archived store reads as well as a live one); a Store already
open may be passed instead of a path. `campaign` is what `--campaign` takes: a number, "latest"
or "all".
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pandas as pd

from .records import COLUMNS, Trial
from .store import Store

JSON_COLUMNS = tuple(c for c in COLUMNS if c.endswith("_json"))


@contextmanager
def _opened(store: Store | str | Path) -> Iterator[Store]:
    if isinstance(store, Store):
        yield store
        return
    with Store(Path(store), read_only=True) as s:
        yield s


def _trial_row(t: Trial, with_json: bool) -> dict:
    row = {"id": t.trial_id, **t.row(), "measures": t.measures, "kind": t.measures, "counts": t.counts, "body_bytes": t.body_bytes}
    if not with_json:
        for c in JSON_COLUMNS:
            row.pop(c, None)
    return row


def trials(store: Store | str | Path, campaign: str | int = "latest", with_json: bool = False) -> pd.DataFrame:
    """One row per trial, ok or failed, in the order they ran: every stored column (the conditions
    flattened: rate_down_bps, rtt_ms, loss_pct, ...), and `kind` (page, bulk, requests), `counts`
    (in the statistics: ok, timed, not a warm-up) and `body_bytes` (every body read, a bulk
    download included). The JSON columns (Navigation Timing, resources, CPU, link, series) are left
    out unless with_json."""
    with _opened(store) as s:
        ts = s.trials(s.resolve_campaign(str(campaign)))
    rows = [_trial_row(t, with_json) for t in ts]
    columns = ["id", *[c for c in COLUMNS if with_json or c not in JSON_COLUMNS], "measures", "kind", "counts", "body_bytes"]
    if rows:
        columns = list(rows[0])
    return pd.DataFrame(rows, columns=columns)


def cpu_samples(store: Store | str | Path, campaign: str | int = "latest") -> pd.DataFrame:
    """One row per CPU sample of the trials that kept a series (cumulative seconds per role on the
    trial's clock, t_s from the navigation's start), with the trial's protocol, page and conditions."""
    with _opened(store) as s:
        ts = s.trials(s.resolve_campaign(str(campaign)))
        sampled = s.sampled(t.trial_id for t in ts)
        rows = [{"trial_id": t.trial_id, "campaign_id": t.campaign_id, "proto": t.proto, "page": t.page,
                 "conditions": t.label, **x}
                for t in ts if t.trial_id in sampled for x in s.cpu_samples(t.trial_id)]
    return pd.DataFrame(rows, columns=["trial_id", "campaign_id", "proto", "page", "conditions", "role", "t_s",
                                       "user_s", "system_s"])


def link_checks(store: Store | str | Path, campaign: str | int = "latest") -> pd.DataFrame:
    """One row per check of the link (read back from the kernel or the emulator, and measured by
    verify unless it was off), the result's fields flattened with dots (verify.down.rate_bps, ...)."""
    with _opened(store) as s:
        rows = [{"campaign_id": cid, "conditions": c["conditions"], "checked_utc": c["checked_utc"],
                 "result_json": json.dumps(c["result"], sort_keys=True), **_flat(c["result"])}
                for cid in s.resolve_campaign(str(campaign)) for c in s.link_checks(cid)]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["campaign_id", "conditions", "checked_utc",
                                                                 "result_json"])


def _flat(d: dict, prefix: str = "") -> dict:
    """Nested dicts to dotted keys; lists stay as they are."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
