"""Trial records for unit tests of pure logic (statistics, summary, store, figures)."""
import dataclasses

from plt_bench.conditions import Conditions
from plt_bench.pages import Page
from plt_bench.records import Trial


def conditions(name: str | None = None, rate_bps: int | None = 10**7, **kw) -> Conditions:
    """Conditions at a rate; a name makes a profile's ("c" -> label "c (10mbit)")."""
    return Conditions(rate_bps, rate_bps, name=name, **kw)


def label(name: str | None = None, rate_bps: int | None = 10**7) -> str:
    return conditions(name, rate_bps).label


def trial(cid=1, seq=0, proto="h3", status="ok", plt=100.0, cond: Conditions | None = None, size=10**7,
          page: Page | None = None, **kw) -> Trial:
    """A trial of a single-object page of `size`, or of `page` (of any kind)."""
    page = page or Page(size)
    base = dict(campaign_id=cid, seq=seq, run_index=seq, proto=proto, size_bytes=page.total_bytes, page=page.label,
                objects=page.objects, object_bytes=page.size_bytes if page.fetched else 0, bulk_ms=page.bulk_ms,
                interval_ms=page.interval_ms, requests=page.requests, streams=page.streams,
                conditions=cond or conditions(), status=status, reason=None if status == "ok" else "timeout",
                started_utc="t0", finished_utc="t1", wall_s=1.0, url="https://plt.test/index_10MB.html?trial=x",
                plt_ms=plt if status == "ok" else None, cc="cubic")
    base.update(kw)
    return Trial(**base)


def replace(t: Trial, **kw) -> Trial:
    return dataclasses.replace(t, **kw)
