"""The testbed: the parts a trial runs on, composed from one settings record.

    setup         Setup, every setting of a testbed in one record (Setup.of_spec: a campaign's)
    embedded      Testbed: three namespaces of this machine, the servers, the link, the name server,
                  the browser worker and the visitor's control group
    two_machines  RemoteTestbed: the same with a server machine's parts (plt-bench serve)
    origins       place_origins: a load's origins at their own distances on the link (--origin-rtt)

A testbed holds its parts and does not re-implement them: the link (link/), the servers (servers/),
the browser seam that builds and runs each load (browsers.visit, browsers.worker), the visitor
(device.visitor). Its topology (namespaces, addresses, run folders) is plt_bench.topology.
"""

from .embedded import WORKER_ALLOWANCE_S, Testbed
from .origins import place_origins
from .setup import Setup
from .two_machines import RemoteTestbed

__all__ = ["WORKER_ALLOWANCE_S", "RemoteTestbed", "Setup", "Testbed", "place_origins"]
