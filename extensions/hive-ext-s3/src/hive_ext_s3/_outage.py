"""Failures of the discovery service: every one counted, few logged.

A reload runs every few seconds; an S3 outage must not write a warning (let alone a traceback)
each time. The first failure is logged when an outage begins, then one summary line per
``summary_every_s`` while it lasts, and one line when the service answers again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from hive_ext_api import Counter

SUMMARY_EVERY_S = 60.0
REASON_CHARS = 300  # an error page quoted whole would flood the log


class Outage:
    """The state of the service as this node sees it: answering, or failing since when."""

    def __init__(self, log: logging.Logger, errors: Counter | None, service: str,
                 summary_every_s: float = SUMMARY_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.errors = errors  # the node's metric; None when a unit test has no node
        self.service = service
        self.summary_every_s = summary_every_s
        self.clock = clock
        self.failures = 0  # in the current outage
        self.total = 0  # since start
        self._began: float | None = None
        self._logged_at = 0.0
        self._unlogged = 0

    @property
    def ongoing(self) -> bool:
        return self._began is not None

    def failed(self, doing: str, reason: str) -> None:
        """One call failed: ``doing`` what (``"read the node records"``), and why."""
        reason = " ".join(reason.split())[:REASON_CHARS]
        self.failures += 1
        self.total += 1
        if self.errors is not None:
            self.errors.inc()
        now = self.clock()
        if self._began is None:
            self._began, self._logged_at, self._unlogged = now, now, 0
            self.log.warning("%s: cannot %s: %s; retrying (while this lasts, one summary every "
                             "%g s)", self.service, doing, reason, self.summary_every_s)
            return
        self._unlogged += 1
        if now - self._logged_at >= self.summary_every_s:
            self.log.warning("%s: still failing for %.0f s (%d failed calls, %d since the last "
                             "report); last: cannot %s: %s", self.service, now - self._began,
                             self.failures, self._unlogged, doing, reason)
            self._logged_at, self._unlogged = now, 0

    def answered(self) -> None:
        """A call succeeded: an outage, if there was one, is over."""
        if self._began is None:
            return
        self.log.warning("%s: answering again after %.1f s and %d failed calls", self.service,
                         self.clock() - self._began, self.failures)
        self._began = None
        self.failures = 0
