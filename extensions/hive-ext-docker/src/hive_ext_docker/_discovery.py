"""One node's discovery: ask the source at each reload, count and log what goes wrong.

A failed query answers ``None`` ("no news"), so the node keeps the members it has; the failure is
counted in the node's metrics by kind and logged through hive_ext_api's ``OutageLog`` (when the
outage begins, once a minute while it lasts, and when the source answers again), and the next
reload simply asks again.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Callable

from hive_ext_api import ClusterNodeAddress, Counter, MetricsRegistry, OutageLog

from hive_ext_docker._source import ERROR_KINDS, Found, NodeSource, SourceError

NAME = "docker-discovery"
METRIC_PREFIX = f"{NAME}."
LOG_INTERVAL_S = 60.0

_METRICS = {
    "query.success": "queries of the Engine API or DNS that brought a node list",
    "query.failed": "queries that brought none (the node kept its members)",
    **{f"errors.{kind}": f"failed queries or skipped entries: {kind}" for kind in ERROR_KINDS},
}


class DockerDiscovery:
    """Runs a :class:`NodeSource` for the node: ``reload()`` is the discovery hook's answer."""

    def __init__(self, source: NodeSource, log: logging.Logger,
                 metrics: MetricsRegistry | None = None, log_interval_s: float = LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.log = log
        self.outage = OutageLog(log, NAME, None, log_interval_s, clock)  # counted by kind here
        self.counts: Tally[str] = Tally()  # the same numbers as the node's metrics
        self.own_address: ClusterNodeAddress | None = None
        self.resolved = 0  # addresses in the last answer
        self._told_own_missing = False
        self._skipped: set[str] = set()  # reasons of the last answer: each is logged once
        self._counters: dict[str, Counter] = {}
        if metrics is not None:
            for name, description in _METRICS.items():
                self._counters[name] = metrics.counter(METRIC_PREFIX + name, description)
            metrics.gauge(METRIC_PREFIX + "resolved-addresses", lambda: float(self.resolved),
                          "node addresses in the last answer")

    def _count(self, name: str) -> None:
        self.counts[name] += 1
        counter = self._counters.get(name)
        if counter is not None:
            counter.inc()

    async def reload(self) -> list[ClusterNodeAddress] | None:
        """The nodes listed now, or None when the source could not say (logged and counted)."""
        default_port = self.own_address.port if self.own_address is not None else None
        try:
            found = await self.source.find(default_port)
        except SourceError as exc:
            self._failed(exc)
            return None
        self._succeeded(found)
        return found.addresses

    def _failed(self, exc: SourceError) -> None:
        self._count("query.failed")
        self._count(f"errors.{exc.kind}")
        self.outage.failed(f"query {self.source.describe()}", f"{exc.kind}: {exc.detail}")

    def _succeeded(self, found: Found) -> None:
        self._count("query.success")
        self.outage.answered()
        for reason in found.skipped:
            self._count("errors.malformed")
            if reason not in self._skipped:
                self.log.warning("%s: skipped %s", NAME, reason)
        self._skipped = set(found.skipped)
        self.resolved = len(found.addresses)
        own = self.own_address
        if own is not None and not self._told_own_missing and own not in found.addresses:
            self._told_own_missing = True  # once: it is a setup problem, not a passing one
            self.log.warning("docker-discovery: this node (%s:%d) is not among the %d nodes %s "
                             "lists: other nodes will not find it through discovery",
                             own.host, own.port, len(found.addresses), self.source.describe())
