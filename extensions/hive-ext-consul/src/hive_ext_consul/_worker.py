"""Blocking client calls off the node's event loop, one at a time, each awaited for a bounded time.

The Consul client blocks; the node's loop also runs MQTT clients and cluster heartbeats, which
must not wait for Consul. Calls run on one thread of their own, in order (a reload never races
the TTL check's refresh), and the loop waits at most ``budget_s`` for each: a call still running
then is left to finish on its thread while the hook answers "no news".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

CALL_BUDGET_S = 4.0  # below the node's 5 s deadline for a discovery hook


class Worker:
    def __init__(self, name: str, budget_s: float = CALL_BUDGET_S) -> None:
        self.budget_s = budget_s
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, call: Callable[[], T]) -> T:
        """``call()``'s result; :class:`TimeoutError` after ``budget_s`` (the call runs on)."""
        # wait_for cancels the wrapped future at the deadline: a call still queued never runs.
        return await asyncio.wait_for(asyncio.wrap_future(self._pool.submit(call)),
                                      self.budget_s)

    def close(self) -> None:
        """Drop queued calls; one that is running ends within the client's own timeouts."""
        self._pool.shutdown(wait=False, cancel_futures=True)
