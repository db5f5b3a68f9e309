"""Calls to a service an extension depends on (S3, Consul, an HTTP API): off the node's loop,
bounded in time, and their failures counted on every call but logged only now and then.

A discovery reload runs every few seconds; a service outage must not write a warning (let alone
a traceback) each time, and must never hold up the node's event loop, which also serves MQTT
clients and cluster heartbeats.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from hive_ext_api._services import Counter

T = TypeVar("T")

SUMMARY_EVERY_S = 60.0
REASON_CHARS = 300  # an error page quoted whole would flood the log
CALL_BUDGET_S = 4.0  # below the 5 s the node gives a discovery hook


class OutageLog:
    """The state of a service as this node sees it: answering, or failing since when.

    Every failure is counted (``errors``, a metric of the node); the first one of an outage is
    logged as a warning, then one summary per ``summary_every_s`` while it lasts, and one line
    when the service answers again.
    """

    def __init__(self, log: logging.Logger, service: str, errors: Counter | None = None,
                 summary_every_s: float = SUMMARY_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.service = service  # the prefix of every line: the extension's name, say
        self.errors = errors
        self.summary_every_s = summary_every_s
        self.clock = clock
        self.failures = 0  # in the current outage
        self.total = 0  # since this log was made
        self._began: float | None = None
        self._logged_at = 0.0
        self._unlogged = 0

    @property
    def ongoing(self) -> bool:
        """Whether the calls are failing now (an outage began and no call has succeeded
        since)."""
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


class CallFailed(Exception):
    """A call of :meth:`ServiceCalls.run` failed; it is already counted and logged."""


class ServiceCalls:
    """Blocking client calls (boto3, a Consul client, ...) on one thread of their own.

    Calls run in order (a reload never races a registration's refresh), and the loop waits at
    most ``budget_s`` for each: a call still running then is left to finish on its thread (within
    the client's own timeouts) and the caller gets :class:`CallFailed`. Exceptions of the types
    in ``expected`` describe themselves (their message is the reason logged); any other is
    logged with its type, and its traceback at DEBUG only.
    """

    def __init__(self, outage: OutageLog, expected: tuple[type[Exception], ...] = (),
                 budget_s: float = CALL_BUDGET_S) -> None:
        self.outage = outage
        self.expected = expected
        self.budget_s = budget_s
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=outage.service)

    async def run(self, doing: str, call: Callable[[], T]) -> T:
        """``call()``'s result; :class:`CallFailed` when it raised or took too long."""
        try:
            # wait_for cancels the wrapped future at the deadline: a call still queued never runs
            result = await asyncio.wait_for(asyncio.wrap_future(self._pool.submit(call)),
                                            self.budget_s)
        except TimeoutError:
            self.outage.failed(doing, f"no answer within {self.budget_s:g} s")
            raise CallFailed(doing) from None
        except self.expected as exc:
            self.outage.failed(doing, str(exc))
            raise CallFailed(doing) from exc
        except Exception as exc:  # a bug or a library surprise: still never the node's problem
            self.outage.log.debug("%s: %s failed", self.outage.service, doing, exc_info=True)
            self.outage.failed(doing, f"{type(exc).__name__}: {exc}")
            raise CallFailed(doing) from exc
        self.outage.answered()
        return result

    def close(self) -> None:
        """Drop queued calls; one that is running ends within the client's own timeouts."""
        self._pool.shutdown(wait=False, cancel_futures=True)
