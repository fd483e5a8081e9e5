"""A load's origins placed on the link (--origin-rtt, link.origins): each of its hosts' path delay given
to the addresses the testbed resolves it to, before the load (the trial's, and a recording's made at
its origins' distances)."""

from __future__ import annotations

from ..conditions import Cell
from ..errors import TestbedBroken
from ..link import origins


def place_origins(bed, cell: Cell) -> origins.Placed | None:
    """Each origin of the cell's load at its own distance (--origin-rtt, link.origins): its hosts' path
    delays (ms) given to their addresses on the link, which changes only when they differ from the
    last load's (a browser started early for this load is ended first: nothing idles while linkem
    starts over). None: every origin at the link's RTT, as before --origin-rtt."""
    asked = cell.conditions.origin_rtt
    recorded = (cell.page.page_kind.recorded_path_delays(cell.page, bed.sites.root)
                if asked is not None and asked.mode == "recorded" else None)
    try:
        delays = origins.host_delays(asked, recorded)
    except LookupError as e:
        raise TestbedBroken(f"{cell.page.label}: {e}") from None
    resolved = bed.origins_for(cell.page, cell.proto)
    paths = origins.address_delays(delays, resolved)
    if paths != bed.link.paths:
        bed.discard_prepared()
        bed.link.set_paths(paths)
    if asked is None:
        return None
    return origins.Placed(delays, {h: tuple(ip for x, ip in resolved if x == h) for h in delays})
