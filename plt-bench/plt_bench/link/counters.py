"""What the link delivered, over time: its downlink's transmit counter, sampled during a trial.

The bottleneck's own count is the bytes the link's downlink device sent towards the client (its
tx_bytes, everything the shaper and the emulator let through: headers, retransmissions and all,
after loss), not what the browser says it read. A thread samples it every sample_s on the wall
clock (time.time(), the clock the browser's performance.timeOrigin is on): it enters the device's
network namespace once (setns is per thread for network namespaces) and reads
/proc/thread-self/net/dev, a read of some microseconds, so fine intervals cost nothing.

`per_interval` turns the samples into bytes per interval of a window (linear between samples): the
intervals add up exactly to what the counter moved across the window.

`ReceivedCounter` samples the other side of a device, what it received (as IP bytes), on the
monotonic clock the browser's worker marks a navigation on (nav_t0): competing flows' bytes
(link.cross) cut at a page's load.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from bisect import bisect_right

from ..errors import LinkError

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/var/run/netns"


ETH_HEADER = 14  # what a veth's rx_bytes counts beyond the IP packet


def net_dev_fields(text: str, dev: str) -> list[int]:
    """`dev`'s counters from /proc/net/dev's text (pure): 8 receive fields (bytes, packets...), then
    the transmit ones."""
    for line in text.splitlines()[2:]:
        name, _, fields = line.partition(":")
        if name.strip() == dev:
            return [int(x) for x in fields.split()]
    raise LinkError(f"no device {dev} in /proc/net/dev")


def parse_net_dev(text: str, dev: str) -> int:
    """The transmitted bytes of `dev` from /proc/net/dev's text (pure)."""
    return net_dev_fields(text, dev)[8]


def received_ip_bytes(text: str, dev: str) -> int:
    """The IP bytes `dev` received, from /proc/net/dev's text (pure): its rx_bytes less an Ethernet
    header per packet."""
    f = net_dev_fields(text, dev)
    return f[0] - ETH_HEADER * f[1]


def per_interval(samples: list[tuple[float, int]], start_s: float, interval_s: float, n: int) -> list[float] | None:
    """Bytes the counter moved in each of the n intervals from start_s (linear between samples), or
    None if the samples do not span the window. Pure."""
    if len(samples) < 2 or samples[0][0] > start_s or samples[-1][0] < start_s + n * interval_s:
        return None
    times = [t for t, _ in samples]

    def at(t: float) -> float:
        i = min(max(bisect_right(times, t), 1), len(samples) - 1)
        (t0, b0), (t1, b1) = samples[i - 1], samples[i]
        return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else float(b1)

    edges = [at(start_s + k * interval_s) for k in range(n + 1)]
    return [edges[k + 1] - edges[k] for k in range(n)]


class DeliveryCounter:
    """Samples a device's transmit bytes in its namespace (ns None: this one) from start() to stop()."""

    def __init__(self, ns: str | None, dev: str, sample_s: float):
        self.ns, self.dev, self.sample_s = ns, dev, sample_s
        self.samples: list[tuple[float, int]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"delivery-{dev}", daemon=True)

    def start(self) -> "DeliveryCounter":
        self._thread.start()
        self._ready.wait(5.0)
        if self.error:
            raise LinkError(f"cannot count what the link delivers on {self.dev}: {self.error}")
        return self

    def stop(self) -> list[tuple[float, int]]:
        """Stop sampling (one last sample first); the samples, (wall-clock s, bytes), in order."""
        self._stop.set()
        self._thread.join(5.0)
        return self.samples

    def _run(self) -> None:
        try:
            if self.ns is not None:
                _enter_netns(self.ns)
            path = f"/proc/{os.getpid()}/task/{threading.get_native_id()}/net/dev"
            with open(path) as f:
                self.samples.append(self._read(f))
                self._ready.set()
                while not self._stop.wait(self.sample_s):
                    self.samples.append(self._read(f))
                self.samples.append(self._read(f))
        except (OSError, LinkError) as e:
            self.error = str(e)
            self._ready.set()


    def _read(self, f) -> tuple[float, int]:
        f.seek(0)
        text = f.read()
        return time.time(), parse_net_dev(text, self.dev)


class ReceivedCounter(DeliveryCounter):
    """Samples a device's received IP bytes (received_ip_bytes) on the monotonic clock."""

    def _read(self, f) -> tuple[float, int]:
        f.seek(0)
        return time.monotonic(), received_ip_bytes(f.read(), self.dev)


def _enter_netns(ns: str) -> None:
    """This thread (only) into the named network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join(NETNS_DIR, ns), os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
