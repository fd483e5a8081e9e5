"""Caddy's think stage (--think, pages.timing): a server's wait before each response's first byte,
for the pages Caddy serves from files (generated pages, served folders). A replayed recording's
wait is replayd's own, whichever server fronts it; quinnserve waits itself.

Caddy has no directive that waits, and plt-bench runs the official release binary (no module of
ours built in). So, where a testbed's conditions ask think time, each request Caddy serves from
files first goes to this stage on the server namespace's loopback (reverse_proxy, GET, no body):
the stage reads the think asked now (the control file, pages.timing.ThinkFile), waits, and
answers 204 with X-Plt-Think (asked and waited). Caddy's handle_response then serves the file as
it did before (the same file_server, headers and 404s), with that header copied into the
response, so Caddy's own access log keeps it beside Caddy's duration for the response (the proof:
pages.timing.proof). What the stage adds when no think is asked (think off within a campaign
that asks some): one loopback round trip before each file, measured at 0.25-0.34 ms a request
(the median of 2000 HTTP/1.1 requests for 5 KB straight to Caddy's file server, then through the
stage, twice, on an idle machine).

    python -m plt_bench.servers.think --think-file F [--port 0]   prints {"port": N} once it listens
"""

from __future__ import annotations

import argparse
import http.server
import sys
import time
from pathlib import Path

from ..pages import timing
from ..pages.replayd import serve_announced


class Stage(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "plt-bench-think"
    thinking: timing.ThinkFile

    def log_message(self, *args) -> None:  # Caddy's access log is the record
        pass

    def _wait(self) -> None:
        arrived = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        think = self.thinking.current()
        asked = think.ms if think.mode == "fixed" else 0.0  # recorded is a recording's: refused for files
        left = asked / 1000.0 - (time.monotonic() - arrived)
        if left > 0:
            time.sleep(left)
        self.send_response(204)
        if think.on:
            self.send_header(timing.HEADER, timing.header(asked, (time.monotonic() - arrived) * 1000.0))
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _wait


class StageServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve_block(port: int | None, notpage: bool = True) -> str:
    """What a Caddyfile site serves its files with (pure): the file server (and 404 for the paths it
    does not serve, where the site names them: notpage, its matcher @notpage), behind the think stage
    on port where given."""
    inner = ("\t\trespond @notpage 404\n" if notpage else "") + "\t\tfile_server\n"
    if port is None:
        return inner.replace("\t\t", "\t")
    return (f"\treverse_proxy 127.0.0.1:{int(port)} {{\n\t\tmethod GET\n\t\t@thought status 2xx\n"
            f"\t\thandle_response @thought {{\n\t\t\theader {timing.HEADER} {{rp.header.{timing.HEADER}}}\n"
            + inner.replace("\t\t", "\t\t\t") + "\t\t}\n\t}\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m plt_bench.servers.think", description=__doc__.splitlines()[0])
    p.add_argument("--think-file", type=Path, required=True)
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args(argv)
    handler = type("BoundStage", (Stage,), {"thinking": timing.ThinkFile(a.think_file)})
    return serve_announced(StageServer(("127.0.0.1", a.port), handler))


if __name__ == "__main__":
    sys.exit(main())
