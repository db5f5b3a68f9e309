"""Sampling a running node for overload protection: one task, ten samples a second.

What the decision needs (:class:`~hive_core.broker._overload.Pressure`) is read from the
broker's connections and store, this process's memory and, in a cluster, the node links
(:class:`ClusterPressure`, which the node fills from the cluster so that the broker knows
nothing of it); the decision is :class:`~hive_core.broker._overload.OverloadProtection`.
Nothing of it runs per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hive_core.broker._overload import TICK, OverloadProtection, Pressure, Sender

if TYPE_CHECKING:
    from hive_core.broker._session import Session

__all__ = ["ClusterPressure", "OverloadMonitor", "OverloadedConnection", "memory_limit",
           "resident_memory"]


def resident_memory() -> int:
    """This process's resident memory in bytes (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def memory_limit() -> int:
    """The memory this process may use: its cgroup's limit, else the machine's (0: unknown)."""
    limits = []
    with contextlib.suppress(OSError):
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if text.isdigit():
            limits.append(int(text))
    with contextlib.suppress(OSError, ValueError):
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return min(limits) if limits else 0


HUNG = 10.0
"""Seconds without a byte read from a subscriber after which its queue no longer counts."""


class OverloadedConnection(Sender, Protocol):
    """A client connection as the monitor samples it (a :class:`Channel` is one)."""

    session: Session | None
    last_read: float  # monotonic


def _queues(connections: Iterable[OverloadedConnection], capacity: int, now: float,
            ) -> tuple[float, int]:
    """(the fill of the fullest queue of a subscriber that read lately, messages queued for
    connected clients). A client that sent nothing for ``HUNG`` seconds (a QoS 0 subscriber,
    one that hangs) is no measure of the node: its queue's own limit holds it. One that pauses
    for less (starved of CPU, a collection of garbage, a slow disk under its output) still
    counts: while its queue is not watched the budget grows back, and the queue fills at the
    full rate of the flood."""
    fullest = 0
    queued = 0
    for channel in connections:
        session = channel.session
        if session is not None and session.queue:
            size = len(session.queue)
            queued += size
            if size > fullest and now - channel.last_read < HUNG:
                fullest = size
    return fullest / capacity, queued


@dataclass(slots=True)
class ClusterPressure:
    """What the cluster adds to a sample, and where the node's level goes (see node.py)."""

    link_bytes: Callable[[], int]
    peer_level: Callable[[], int]
    announce: Callable[[int], None]


class OverloadMonitor:
    """Samples a node every ``TICK`` seconds and acts on the level (one task per node).

    ``connections`` are the broker's client connections (read at each sample),
    ``queue_capacity`` its ``<max-queue-size>``, ``slowest_commit`` its store's measure.
    """

    def __init__(self, connections: Collection[OverloadedConnection], queue_capacity: int,
                 slowest_commit: Callable[[], float], memory_cap: int | None = None) -> None:
        self.connections = connections
        self.queue_capacity = queue_capacity
        self.slowest_commit = slowest_commit
        self.protection = OverloadProtection(time.monotonic())
        self.cluster: ClusterPressure | None = None
        self._memory_cap = memory_limit() if memory_cap is None else memory_cap
        self._announced = 0
        self._announced_at = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        connections = self.connections
        capacity = self.queue_capacity
        lag = commit = 0.0  # the previous sample's
        try:
            while True:
                asked = loop.time()
                await asyncio.sleep(TICK)
                now = loop.time()
                cluster = self.cluster
                fill, queued = _queues(connections, capacity, time.monotonic())
                # Lag and commit time count when two samples in a row show them: one pause
                # (a collection of garbage, a busy neighbour, one slow sync) is no overload.
                lag_before, lag = lag, max(0.0, now - asked - TICK)
                commit_before, commit = commit, self.slowest_commit()
                pressure = Pressure(
                    loop_lag=min(lag, lag_before), queue_fill=fill, queued_messages=queued,
                    commit_seconds=min(commit, commit_before),
                    memory_bytes=resident_memory() if self._memory_cap else 0,
                    memory_limit=self._memory_cap)
                if cluster is not None:
                    pressure.link_bytes = cluster.link_bytes()
                    pressure.peer_level = cluster.peer_level()
                self.protection.update(pressure, connections, time.monotonic())
                if cluster is not None:
                    self._announce(cluster, now)
        finally:
            self.protection.release_all()

    def _announce(self, cluster: ClusterPressure, now: float) -> None:
        """Other nodes hear of this node's own level when it changes, and every second while
        it is above 0 (a link made meanwhile learns it too). What peers announced is not
        passed on: each node throttles its own senders."""
        own = max(level for source, level in self.protection.sources.items()
                  if source != "peers") if self.protection.level else 0
        if own != self._announced or (own and now - self._announced_at >= 1.0):
            cluster.announce(own)
            self._announced = own
            self._announced_at = now
