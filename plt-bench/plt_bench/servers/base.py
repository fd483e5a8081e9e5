"""What plt-bench asks of an HTTP server: one interface (Server), one implementation per server
(caddy.py), chosen by name from the table in servers/__init__.py.

A server serves the testbed's pages over h3, h2 and h1 from the server namespace, on every
origin's address, with the testbed's certificate (certs.py), and writes an access log. What comes
back from that log is an entry per response in protocol terms, whatever the server's own words:

    uri          the request's path and query            /index_5KB.html?trial=1a2b
    host         the origin asked (Host or :authority)   plt.test
    proto        the protocol that carried it: h3 | h2 | h1 (protocols.NAMES), or the server's own
                 word where it is none of them (then every judgement refuses it, naming it)
    status       the response's status                   200
    size         its body's bytes                        5000
    end_unix_s   when the response ended (wall clock); duration_s: how long it took
    referer      the request's Referer (a trial's objects carry its page's URI)
    remote_port  the client's port: one per connection
    resumed      the connection's TLS session was resumed
    method       GET, HEAD, ...; replay: how a replayed request was matched (exact | query | miss | preflight)

Which entries are a trial's own and which are others' traffic is the same for every server
(own_entries, overlapping).
"""

from __future__ import annotations

from pathlib import Path


class Server:
    """One server process in a namespace, serving the testbed's pages (the generated pages, replayed
    recordings, served folders) on every origin's address. Subclasses: name, label and the methods."""

    name = ""    # what options and stores say: caddy
    label = ""   # for people: Caddy
    cert = None  # the testbed's certificate (certs.Certificate), once started
    proc = None  # its process (subprocess.Popen), while it runs
    access_log: Path  # its access log (a capture run keeps it; 'up' tells the user where it is)

    def start(self) -> None:
        """Listen on every origin's address, TCP and UDP, or raise ServerError saying why not."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died_reason(self) -> str | None:
        """Why it is not serving, or None while it runs."""
        raise NotImplementedError

    def info(self) -> dict:
        """Its version and build (a campaign's metadata: 'version' is key metadata)."""
        raise NotImplementedError

    def access_entries(self, uri: str, wait_s: float = 2.0, expect: int = 1, own=None) -> list[dict]:
        """Every access-log entry (in the terms above) since the last call, once `expect` of the
        trial's are among them (own: how a trial's entries are told; own_entries by default)."""
        raise NotImplementedError

    def quic_buffer_warning(self) -> str | None:
        """Its QUIC stack's complaint about the UDP buffers it got, if any."""
        return None

    def log_tail(self, n: int = 3) -> str:
        raise NotImplementedError


def own_entries(entries: list[dict], uri: str) -> list[dict]:
    """A trial's own entries: its page's URI, and the objects its page asked for (their Referer is the
    page's URI), but not a browser's own /favicon.ico."""
    return [e for e in entries if e["uri"] == uri
            or ((e.get("referer") or "").endswith(uri) and not (e["uri"] or "").startswith("/favicon.ico"))]


def overlapping(entries: list[dict], uri: str, start_unix_s: float, end_unix_s: float) -> list[dict]:
    """Responses to other requests that were on the wire during [start, end]: a trial that shared the
    link with them did not run under its conditions. The page's own requests are not others: its
    URI, and what the page asked for (a browser's /favicon.ico, whose Referer is the page's URI).
    Nor is an earlier trial's /favicon.ico, which Chromium asks after the load: a request of a few
    hundred bytes answered 404 without a body, which the closed browser's orphaned TCP socket can
    retransmit into the next trial (at 200 ms of RTT it reached the server 40 ms into the next
    one). An entry without times counts as overlapping."""
    out = []
    for e in entries:
        if e["uri"] == uri or (e.get("referer") or "").endswith(uri):
            continue
        if (e["uri"] or "").startswith("/favicon.ico") and e.get("status") == 404 and not e.get("size"):
            continue
        end, dur = e.get("end_unix_s"), e.get("duration_s")
        if isinstance(end, (int, float)) and isinstance(dur, (int, float)):
            if end < start_unix_s or end - dur > end_unix_s:
                continue
        out.append(e)
    return out
