"""Recordings replayed as recorded: a page kept as the web served it (archive: its format, made with
`plt-bench record` or `plt-bench pages --from-har`), served by the replay server (replayd) behind the
testbed's HTTP server, and loaded by its own URL: `--size har:NAME` where NAME is a recording.

Its load resolves the recorded hosts to the replay's addresses (before the generated pages'), asks
for the recorded URL itself, untagged (its scripts read their own address), and takes as its own the
server's log entries for its recorded hosts since the trial began. It is judged response by response
(proof.judge_archive): the document as served (its deterministic script injected), every response
the replay matched over the asked protocol (as recorded: each origin's own), requests the recording
did not hold counted and failing the trial past proof.UNRECORDED_MAX.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UsageError
from . import archive, proof, replayd
from .timing import RecordedTiming
from . import base
from .base import REPLAY_NAME_RE, Judged, Load, Page, PageKind, register, url_host, url_path

ARCHIVED = "archive:"  # a recording's html_name: no file of the site, the recording's own URL (url)


def archive_of(page: Page, sites: Path | None = None) -> "archive.Archive":
    """A recording page's archive."""
    return archive.load(page.replay, sites or base.DEFAULT_SITES)


def recorded_corpus(option: str = "--size", sites: Path | None = None) -> list[str]:
    """Every recording made here (sites/replay/*/archive.json: plt-bench record, pages --from-har), by
    name: the corpus har:* stands for."""
    folder = Path(sites or base.DEFAULT_SITES) / "replay"
    names = sorted(p.parent.name for p in folder.glob(f"*/{archive.ARCHIVE_FILE}")
                   if REPLAY_NAME_RE.fullmatch(p.parent.name))
    if not names:
        raise UsageError(f"{option}: 'har:*': no recording in {folder}; record some: plt-bench record URL --name NAME "
                         "(docs/replay.md)")
    return names


class Recording(PageKind):
    name = "recording"
    served_as_recorded = True
    repeatable = True  # its revisit revalidated by the replay as the recorded server would (replayd.not_modified)
    replayed_hosts_first = True

    def claims(self, page: Page) -> bool:
        return page.archived and not page.url

    def parse(self, item: str, option: str) -> Page | None:
        """har:NAME where NAME is a recording (a page set of that name is the stand-in kind's)."""
        if not item.lower().startswith("har:"):
            return None
        name = item[4:]
        if not (REPLAY_NAME_RE.fullmatch(name) and archive.archive_exists(name)):
            return None
        a = archive.load(name, base.DEFAULT_SITES, option)
        return Page(a.body_bytes - a.responses[0].size_bytes, len(a.responses) - 1, origins=len(a.origins),
                    replay=a.name, archived=True)

    def label(self, page: Page) -> str:
        return f"har:{page.replay}"

    def html_name(self, page: Page) -> str:
        return f"{ARCHIVED}{page.replay}"

    def object_specs(self, page: Page) -> list[tuple[str, str, int]]:
        return [(r.host, r.target, r.size_bytes) for r in archive_of(page).responses[1:]]

    def html_bytes(self, page: Page) -> int:
        return archive_of(page).responses[0].size_bytes

    def object_bytes(self, page: Page) -> int:
        return page.size_bytes

    def sources(self, page: Page) -> dict:
        return archive_of(page).source

    def url(self, page: Page, sites: Path, tag: str | None = None) -> str:
        return archive.load(page.replay, sites).url

    def log_uri(self, page: Page, sites: Path, tag: str) -> str:
        return url_path(self.url(page, sites))

    def own_origins(self, page: Page) -> int | None:
        return None

    def recording_name(self, page: Page) -> str | None:
        return page.replay

    def recorded_hosts(self, page: Page, sites: Path, served: set[str]) -> set[str]:
        return {o.host for o in archive.load(page.replay, sites).origins}

    def recorded_path_delays(self, page: Page, sites: Path) -> dict[str, float] | None:
        rtts = archive.recorded_rtts(archive.load(page.replay, sites))
        return None if rtts is None else RecordedTiming(rtts, ()).path_delays_ms()

    def recorded_thinks(self, page: Page, sites: Path) -> dict[int, float] | None:
        return archive.recorded_thinks(archive.load(page.replay, sites))

    def judge(self, load: Load) -> Judged:
        a = archive.load(load.page.replay, load.sites)
        answer, entries, url = load.answer, load.server_entries, load.url
        name = (answer.get("nav") or {}).get("name") or url
        status, reason, objects_ok, evidence = proof.judge_archive(
            load.proto, {o.host for o in a.origins},
            replayd.served_bytes(a, load.sites, url_host(name), url_path(name)), answer, entries or [],
            spoke={o.host: o.protocol for o in a.origins}, own=archive.declared_icons(a, load.sites),
            revisit=load.page.visit != "first")
        asked = {(e.get("host"), e.get("uri")) for e in entries or []}
        evidence["recorded_not_asked"] = sum((r.host, r.target) not in asked for r in a.responses)  # counted only
        # what the recording could not give the replay, said with every trial of it (the report's replay table)
        left = a.source.get("left_out")
        evidence["recording_left_out"] = sum(v for v in left.values() if isinstance(v, int)) \
            if isinstance(left, dict) else 0
        evidence["recording_made_bodies"] = sum(not r.recorded_body for r in a.responses)
        page_entries, _ = proof.split_entries(load)
        return Judged(status, reason, objects_ok,
                      page_entries=None if page_entries is None else [e for e in page_entries
                                                                      if e.get("host") == url_host(url)],
                      fields={"unrecorded": len(evidence["unrecorded"]), "replay_json": json.dumps(evidence)})


RECORDING = register(Recording())
