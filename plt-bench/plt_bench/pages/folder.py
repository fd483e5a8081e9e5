"""A page of a folder served as it is (`--folder HOST=DIR`, `--size url:ADDRESS`, its https address): a real
site's files (a package's documentation, a web front end) that plt-bench did not make and cannot
list before the load. Its URL is its own, untagged; the server's log entries for the served hosts
since the trial began are the trial's; it is proven as a recording is (proof.judge_archive), its
server's answers taken as they come (a miss is a 404 of the folder's).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import UsageError
from . import proof
from .base import Judged, Load, Page, PageKind, page_url, register, url_host, url_path


class Folder(PageKind):
    name = "folder"
    item_form = "url:ADDRESS (the https address of a page of a folder that --folder HOST=DIR serves as it is)"
    served_as_recorded = True
    repeat_later = True

    def claims(self, page: Page) -> bool:
        return bool(page.url)

    def parse(self, item: str, option: str) -> Page | None:
        if not item.lower().startswith("url:"):
            return None
        url = item[4:].strip()
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = None
        if parts is None or parts.scheme != "https" or not parts.hostname or "@" in parts.netloc or parts.port:
            raise UsageError(f"{option}: '{item}': expected url:{page_url('HOST', '/PATH')}, HOST one that --folder "
                             f"HOST=DIR serves (url:{page_url('docs.pkg.test', '/index.html')})")
        return Page(0, url=url)

    def label(self, page: Page) -> str:
        return f"url:{page.url}"

    def html_name(self, page: Page) -> str:
        return page.url

    def html_bytes(self, page: Page) -> int:
        return 0  # not known before the load

    def object_bytes(self, page: Page) -> int:
        return 0

    def url(self, page: Page, sites: Path, tag: str | None = None) -> str:
        return page.url

    def log_uri(self, page: Page, sites: Path, tag: str) -> str:
        return url_path(page.url)

    def own_origins(self, page: Page) -> int | None:
        return None

    def served_host(self, page: Page) -> str | None:
        return urlsplit(page.url).hostname

    def recorded_hosts(self, page: Page, sites: Path, served: set[str]) -> set[str]:
        return set(served)

    def judge(self, load: Load) -> Judged:
        entries, url = load.server_entries, load.url
        status, reason, objects_ok, evidence = proof.judge_archive(
            load.proto, {e.get("host") for e in entries or []} | {url_host(url)}, None, load.answer, entries or [],
            replayed=False)
        page_entries, _ = proof.split_entries(load)
        return Judged(status, reason, objects_ok,
                      page_entries=None if page_entries is None else [e for e in page_entries
                                                                      if e.get("host") == url_host(url)],
                      fields={"replay_json": json.dumps(evidence)})


FOLDER = register(Folder())
