"""Every client connection's deadline (its CONNECT, its keep alive) on one timer of the loop.

A timer of its own per connection costs about 600 bytes in uvloop (the handle, libuv's timer,
the callback and its arguments), and most of a broker's connections are idle ones whose only
timer is that one. Here the deadlines share buckets of :data:`TICK` seconds, kept in time order,
and one loop timer fires the earliest bucket: a deadline passes at most ``TICK`` late (and a few
milliseconds early at most, which a keep-alive check answers by arming again for what is left).
Arming or cancelling a deadline is a dict insert or delete.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from typing import Protocol

TICK = 0.25
"""Seconds per bucket: how late a deadline may pass."""

_EARLY = 0.01  # a loop timer may fire this much before its time (the clock's resolution)

log = logging.getLogger("hive.broker")


class Expiring(Protocol):
    """What has a deadline: told once it passed (unless cancelled before)."""

    def deadline_passed(self) -> None: ...


Bucket = dict[Expiring, None]


class Deadlines:
    """The deadlines of one broker's connections (see the module docstring)."""

    __slots__ = ("_buckets", "_keys", "_loop", "_timer")

    def __init__(self) -> None:
        self._buckets: dict[int, Bucket] = {}
        self._keys: list[int] = []  # a heap of the buckets' keys (their end, in ticks)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def arm(self, owner: Expiring, seconds: float) -> Bucket:
        """``owner.deadline_passed()`` in ``seconds`` (> 0); the bucket it waits in, to
        :meth:`cancel` with."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        key = math.ceil((loop.time() + seconds) / TICK)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = {}
            heapq.heappush(self._keys, key)
            if self._keys[0] == key:
                self._schedule(loop)
        bucket[owner] = None
        return bucket

    @staticmethod
    def cancel(owner: Expiring, bucket: Bucket) -> None:
        """``owner``'s deadline in ``bucket`` is off."""
        bucket.pop(owner, None)

    def close(self) -> None:
        """The broker stops: no deadline passes any more."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buckets.clear()
        self._keys.clear()

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._buckets.values())

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(self._keys[0] * TICK, self._fire)

    def _fire(self) -> None:
        self._timer = None
        loop, keys, buckets = self._loop, self._keys, self._buckets
        assert loop is not None
        due = math.floor((loop.time() + _EARLY) / TICK)
        passed: list[Bucket] = []  # taken out first: what they arm again waits for a later turn
        while keys and keys[0] <= due:
            bucket = buckets.pop(heapq.heappop(keys), None)
            if bucket:
                passed.append(bucket)
        for bucket in passed:
            for owner in list(bucket):
                try:
                    owner.deadline_passed()
                except Exception:  # one connection's failure is not every other one's
                    log.exception("a connection's deadline check failed")
        if keys and self._timer is None:
            self._schedule(loop)
