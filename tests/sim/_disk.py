"""Simulated disks: what a node committed survives its death, nothing else does.

A :class:`SimStore` takes the store's writes into a pending list and makes them durable only in
``commit()`` (after a seeded delay, as a group commit's fsync); a kill loses what was pending. A
:class:`SimShelf` keeps the replicas a node holds of other nodes the same way, for the
cluster's :class:`~hive_core.cluster.ReplicaShelf` seam.
"""

from __future__ import annotations

import asyncio
import random
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from hive_core.persistence import (
    MemorySessionStore,
    Snapshot,
    StoredSession,
)
from hive_core.persistence._batch import copy_session

_WRITES = ("save_session", "save_subscription", "delete_subscription", "delete_session",
           "enqueue", "dequeue", "save_inflight", "delete_inflight", "save_retained",
           "delete_retained", "remember_taken", "send_queued")


class SimStore:
    """A session store on a simulated disk (one node's, or one replica's)."""

    def __init__(self, rng: random.Random, durable: MemorySessionStore | None = None) -> None:
        self.rng = rng
        self.durable = durable if durable is not None else MemorySessionStore()
        self.pending: list[tuple[str, tuple[Any, ...]]] = []
        self.closed = False

    async def open(self) -> Snapshot:
        return self.durable.contents(now=0.0)

    async def close(self) -> None:
        self.closed = True

    def atomic(self) -> AbstractContextManager[None]:
        return nullcontext()  # a commit never falls inside a block: blocks are synchronous

    def __getattr__(self, name: str) -> Any:
        if name not in _WRITES:
            raise AttributeError(name)

        def write(*args: Any) -> None:
            if args and isinstance(args[0], StoredSession):
                args = (copy_session(args[0]), *args[1:])
            self.pending.append((name, args))
        return write

    async def commit(self) -> None:
        upto = len(self.pending)
        if not upto:
            return
        await asyncio.sleep(self.rng.uniform(0.0005, 0.004))
        if self.closed:
            return
        batch, self.pending = self.pending[:upto], self.pending[upto:]
        for name, args in batch:
            getattr(self.durable, name)(*args)

    def crash(self) -> None:
        """The process died: what was not committed is gone."""
        self.pending.clear()
        self.closed = True


class SimShelf:
    """One node's replicas of other nodes, on its simulated disk."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.stores: dict[str, MemorySessionStore] = {}
        self.marks: dict[str, tuple[dict[str, list[int]], dict[str, list[Any]]]] = {}
        self.open_stores: list[SimStore] = []

    def kept(self) -> list[tuple[str, dict[str, list[int]], dict[str, list[Any]]]]:
        return [(origin, *self.marks.get(origin, ({}, {}))) for origin in sorted(self.stores)]

    async def create(self, origin: str) -> SimStore:
        await asyncio.sleep(0)
        self.stores[origin] = durable = MemorySessionStore()
        self.marks.pop(origin, None)
        store = SimStore(self.rng, durable)
        self.open_stores.append(store)
        return store

    async def keep_marks(self, origin: str, watermarks: dict[str, list[int]],
                         wills: dict[str, list[Any]]) -> None:
        await asyncio.sleep(0)
        if origin in self.stores:
            self.marks[origin] = ({k: list(v) for k, v in watermarks.items()}, dict(wills))

    async def read(self, origin: str) -> Snapshot:
        await asyncio.sleep(0)
        durable = self.stores.get(origin)
        return durable.contents(now=0.0) if durable is not None else Snapshot()

    async def remove(self, origin: str) -> None:
        await asyncio.sleep(0)
        self.stores.pop(origin, None)
        self.marks.pop(origin, None)

    def crash(self) -> None:
        for store in self.open_stores:
            store.crash()
        self.open_stores.clear()
