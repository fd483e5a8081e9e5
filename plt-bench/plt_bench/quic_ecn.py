"""One side's ECN on a trial's QUIC connections, the record a browser's and a server's seam fill from
their own logs (browsers.base.Browser.quic_ecn, servers.base.Server.quic_ecn) and link.ecn joins
with TCP's. A leaf: the seams sit below the records of a trial, which embed the link's conditions."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class QuicSide:
    """One side's QUIC connections of a trial under --ecn (link.ecn), as its own log tells them (a
    browser's or a server's seam reads it): source names the log, or why says why there is none.
    validated: connections whose ECN validation succeeded (the server's state 'capable'; None where
    the log does not say); ect0 and ce: the ECN counts (RFC 9000 19.3.2) the browser's ACK frames
    reported (the browser's log: those it sent; the server's: those it received): the server's
    packets that arrived ECT(0), and CE-marked."""
    source: str | None
    connections: int = 0
    validated: int | None = None
    ect0: int = 0
    ce: int = 0
    ect_sent: int | None = None  # this side's packets sent ECT (the server's qlog says it per packet)
    why: str | None = None
