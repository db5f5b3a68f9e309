"""Latency between nodes, as histograms by peer node (read at scrape time, like the hook clocks).

Three of them:

- delivery: from the moment a PUBLISH is routed on the node its publisher is connected to until
  the node of its subscribers hands it to their connections. The origin stamps its wall clock
  on the PUBLISH frame (a peer that says ``arrival_stamps`` in its HELLO gets stamped frames;
  older peers get the frames they know), so across hosts the clocks must agree (NTP); a
  negative difference counts in the first bucket.
- forward acknowledgement: a PUBLISH frame sent to a peer until its FORWARD_ACK covers it
  (the peer delivered it and made that durable).
- replication acknowledgement: ops shipped to a backup until its REPL_ACK covers them (the
  backup made them durable).

The two round trips are sampled: one probe in flight per peer (a timestamp and the place it
waits for), so the hot path pays one comparison per frame.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

__all__ = ["BUCKETS_SECONDS", "Latencies", "Latency", "LatencySnapshot", "Probe"]

BUCKETS_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds: loopback round trips take tens of microseconds, a LAN's a millisecond, a
commit on a busy disk tens of milliseconds, a peer that stalls seconds."""


@dataclass(frozen=True, slots=True)
class LatencySnapshot:
    """One histogram at one moment: counts per bucket (the last is +Inf), not cumulative."""

    buckets: tuple[int, ...]
    count: int
    sum: float

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), +Inf last: Prometheus' buckets."""
        total, out = 0, []
        for bound, count in zip((*BUCKETS_SECONDS, float("inf")), self.buckets, strict=True):
            total += count
            out.append((bound, total))
        return out

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q`` quantile (None: no observation;
        inf: beyond the last bound)."""
        if not self.count:
            return None
        wanted = q * self.count
        for bound, seen in self.cumulative():
            if seen >= wanted:
                return bound
        return float("inf")


class Latency:
    """One histogram."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(BUCKETS_SECONDS) + 1)
        self.count = 0
        self.total = 0.0

    def observe(self, seconds: float, weight: int = 1) -> None:
        """One observation, or one standing for ``weight`` (a sampled one)."""
        seconds = max(seconds, 0.0)
        self.buckets[bisect_left(BUCKETS_SECONDS, seconds)] += weight
        self.count += weight
        self.total += seconds * weight

    def snapshot(self) -> LatencySnapshot:
        return LatencySnapshot(tuple(self.buckets), self.count, self.total)


class Latencies:
    """One histogram per peer node."""

    __slots__ = ("by_peer",)

    def __init__(self) -> None:
        self.by_peer: dict[str, Latency] = {}

    def observe(self, peer: str, seconds: float, weight: int = 1) -> None:
        latency = self.by_peer.get(peer)
        if latency is None:
            latency = self.by_peer[peer] = Latency()
        latency.observe(seconds, weight)

    def snapshot(self) -> dict[str, LatencySnapshot]:
        return {peer: latency.snapshot() for peer, latency in sorted(self.by_peer.items())}


@dataclass(slots=True)
class Probe:
    """A round trip being timed: the place (frame count, op number) whose acknowledgement
    ends it, and the monotonic time it began."""

    place: int
    began: float
