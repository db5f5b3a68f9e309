"""The embedded default store: SQLite in WAL mode, written by one thread with group commit.

The event loop never touches the disk. A write method appends to the pending batch under a lock
held for microseconds; the writer thread swaps the batch out, writes it in one transaction (one
sync), and then settles every ``commit()`` made before the swap through the loop's thread-safe
call. Writes that nobody commits are flushed anyway ``commit_interval`` seconds after the first.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hive_ext_api as api

from . import _sqlite_schema as schema
from ._batch import InflightKey, PendingBatch

log = logging.getLogger(__name__)

RETRY_DELAY = 1.0  # seconds before a failed batch is retried when no commit() asks for it sooner
TAKEN_KEEP = 10_000
"""Identities kept per client (``remember_taken``): as many as a session remembers in memory
(``SEEN_MAX`` in ``broker/_handover.py``); the oldest go first."""
TAKEN_SLACK = 2_000
"""Rows a client may have over ``TAKEN_KEEP`` before the oldest are deleted (in one go, not
one per commit)."""


@dataclass(slots=True)
class StoreStats:
    """Counters the writer thread keeps; read them from anywhere."""

    transactions: int = 0  # batches committed
    rows: int = 0  # rows inserted, replaced or deleted by those batches
    failures: int = 0  # batches that failed and were put back for a retry


class _State(enum.Enum):
    NEW = "new"
    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class FileSessionStore:
    """A ``SessionStore`` in ``<data_dir>/persistence/sessions.db``."""

    def __init__(
        self, data_dir: Path, *, commit_interval: float = 0.002, sync: bool = True
    ) -> None:
        self.path = Path(data_dir) / "persistence" / "sessions.db"
        self.stats = StoreStats()
        self._commit_interval = commit_interval
        self._sync = sync
        self._state = _State.NEW
        self._lock = threading.RLock()  # re-entered by writes inside atomic()
        self._wake = threading.Condition(self._lock)
        # Everything below is guarded by self._lock.
        self._pending = PendingBatch()
        self._pending_since: float | None = None  # monotonic time of the first pending write
        self._pending_waiters: list[asyncio.Future[None]] = []
        self._writing = False
        self._writing_waiters: list[asyncio.Future[None]] = []
        self._retry_at = 0.0
        self._stopping = False
        self._high_seq: dict[str, int] = {}  # per client, the highest seq that may be on disk
        # Per client, the in-flight exchanges that may have a row on disk (loaded, or in a batch
        # handed to the writer): an exchange outside them that ends in the pending batch costs
        # no write at all.
        self._inflight_kept: dict[str, set[InflightKey]] = {}
        self._close_error: BaseException | None = None
        self._stopped: asyncio.Future[None] | None = None
        self._version = 0  # the last batch's version stamp (writer thread only)
        self._taken_rows: dict[str, int] = {}  # identities on disk per client (writer thread)

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> api.Snapshot:
        if self._state is not _State.NEW:
            raise api.PersistenceError(f"store is {self._state.value}; a store opens once")
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[api.Snapshot] = loop.create_future()
        self._stopped = loop.create_future()
        self._state = _State.OPENING
        threading.Thread(
            target=self._run, args=(loop, opened), name="hive-persistence-writer", daemon=True
        ).start()
        try:
            snapshot = await opened
        except BaseException:
            self._state = _State.CLOSED
            raise
        self._state = _State.OPEN
        return snapshot

    async def close(self) -> None:
        """Write everything pending, stop the writer thread and close the database."""
        with self._lock:
            if self._state is not _State.OPEN:
                return
            self._state = _State.CLOSING
            self._stopping = True
            self._wake.notify()
        assert self._stopped is not None
        await self._stopped
        self._state = _State.CLOSED
        if self._close_error is not None:
            raise api.PersistenceError(
                f"{self.path}: could not write the last batch before closing"
            ) from self._close_error

    # -- writes: called on the event loop, no I/O --------------------------------------------

    def save_session(self, session: api.StoredSession) -> None:
        with self._lock:
            self._check_open()
            self._pending.save_session(session)
            self._touch()

    def save_subscription(self, client_id: str, subscription: api.StoredSubscription) -> None:
        with self._lock:
            self._check_open()
            self._pending.save_subscription(client_id, subscription)
            self._touch()

    def delete_subscription(self, client_id: str, topic_filter: str) -> None:
        with self._lock:
            self._check_open()
            self._pending.delete_subscription(client_id, topic_filter)
            self._touch()

    def delete_session(self, client_id: str) -> None:
        with self._lock:
            self._check_open()
            self._pending.delete_session(client_id)
            # After this batch, only rows enqueued from now on can be on disk for this client.
            self._high_seq.pop(client_id, None)
            self._touch()

    def enqueue(self, client_id: str, seq: int, message: api.StoredMessage) -> None:
        with self._lock:
            self._check_open()
            high = self._high_seq.get(client_id, -1)
            self._pending.enqueue(client_id, seq, message, fresh=seq > high)
            if seq > high:
                self._high_seq[client_id] = seq
            self._touch()

    def send_queued(self, client_id: str, seq: int, packet_id: int) -> None:
        with self._lock:
            self._check_open()
            self._pending.send_queued(client_id, seq, packet_id)
            self._touch()

    def dequeue(self, client_id: str, seq: int) -> None:
        with self._lock:
            self._check_open()
            self._pending.dequeue(client_id, seq)
            self._touch()

    def save_inflight(self, inflight: api.StoredInflight) -> None:
        with self._lock:
            self._check_open()
            kept = self._inflight_kept.get(inflight.client_id)
            self._pending.save_inflight(inflight, fresh=kept is None or (
                (inflight.packet_id, inflight.direction) not in kept))
            self._touch()

    def delete_inflight(self, client_id: str, packet_id: int, direction: api.Direction) -> None:
        with self._lock:
            self._check_open()
            self._pending.delete_inflight(client_id, packet_id, direction)
            self._touch()

    def remember_taken(self, client_id: str, origin: str, serial: int) -> None:
        with self._lock:
            self._check_open()
            self._pending.remember_taken(client_id, origin, serial)
            self._touch()

    def save_retained(self, message: api.StoredMessage) -> None:
        with self._lock:
            self._check_open()
            self._pending.save_retained(message)
            self._touch()

    def delete_retained(self, topic: str) -> None:
        with self._lock:
            self._check_open()
            self._pending.delete_retained(topic)
            self._touch()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Writes made inside go into one transaction: the writer thread cannot split them."""
        with self._lock:
            yield

    async def commit(self) -> None:
        """Return once every write made before this call is on disk.

        Raises PersistenceError when the batch holding them failed; those writes stay pending
        and the next commit() tries them again.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            self._check_open()
            if not self._pending.is_empty():
                waiters = self._pending_waiters
                self._wake.notify()
            elif self._writing:
                waiters = self._writing_waiters
            else:
                return
            done: asyncio.Future[None] = loop.create_future()
            waiters.append(done)
        await done

    def _check_open(self) -> None:
        if self._state is not _State.OPEN:
            raise api.PersistenceError(f"store is {self._state.value}")

    def _touch(self) -> None:
        if self._pending_since is None:
            self._pending_since = time.monotonic()
            self._wake.notify()

    # -- the writer thread -------------------------------------------------------------------

    def _run(self, loop: asyncio.AbstractEventLoop, opened: asyncio.Future[api.Snapshot]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = schema.connect(str(self.path), sync=self._sync)
        except BaseException as exc:
            log.exception("cannot open the sessions database %s", self.path)
            _settle_threadsafe(opened, api.PersistenceError(f"cannot open {self.path}: {exc}"), exc)
            return
        try:
            try:
                snapshot = schema.load(db, time.time())
            except BaseException as exc:
                log.exception("cannot read the sessions database %s", self.path)
                failure = api.PersistenceError(f"cannot read {self.path}: {exc}")
                _settle_threadsafe(opened, failure, exc)
                return
            self._high_seq = {c: queue[-1][0] for c, queue in snapshot.queues.items() if queue}
            self._inflight_kept = {c: {(row.packet_id, row.direction) for row in rows}
                                   for c, rows in snapshot.inflight.items() if rows}
            self._taken_rows = {c: len(taken) for c, taken in snapshot.taken.items()}
            _call_threadsafe(loop, _set_result, opened, snapshot)
            del snapshot  # the loop owns the payloads now
            self._commit_until_stopped(db)
        except BaseException as exc:
            log.exception("the persistence writer thread stopped unexpectedly")
            self._close_error = exc
        finally:
            db.close()
            with self._lock:
                if self._state is _State.OPEN:  # died on its own: writes must fail, not hang
                    self._state = _State.CLOSED
                orphans = self._pending_waiters + self._writing_waiters
                self._pending_waiters, self._writing_waiters = [], []
            for waiter in orphans:
                _settle_threadsafe(waiter, api.PersistenceError("the writer thread stopped"), None)
            if self._stopped is not None:
                _call_threadsafe(loop, _set_result, self._stopped, None)

    def _keep_inflight(self, batch: PendingBatch) -> None:
        """``batch`` goes to the disk: its in-flight rows may be there from now on (a batch
        that fails is written again with the next), the rows it deletes may not."""
        kept = self._inflight_kept
        for client_id in batch.purged:
            kept.pop(client_id, None)
        for client_id, exchanges in batch.inflight.items():
            keys = kept.get(client_id)
            for key, write in exchanges.items():
                if write.inflight is not None:
                    if keys is None:
                        keys = kept[client_id] = set()
                    keys.add(key)
                elif keys is not None:
                    keys.discard(key)
            if keys is not None and not keys:
                del kept[client_id]

    def _commit_until_stopped(self, db: sqlite3.Connection) -> None:
        while True:
            with self._lock:
                while not (self._pending_waiters or self._stopping):
                    if self._pending_since is None:
                        self._wake.wait()
                        continue
                    due = max(self._pending_since + self._commit_interval, self._retry_at)
                    delay = due - time.monotonic()
                    if delay <= 0:
                        break
                    self._wake.wait(delay)
                batch, self._pending = self._pending, PendingBatch()
                self._keep_inflight(batch)
                self._writing_waiters, self._pending_waiters = self._pending_waiters, []
                self._pending_since = None
                self._writing = True
                stopping = self._stopping
            error: BaseException | None = None
            if not batch.is_empty():
                self._version = max(time.time_ns(), self._version + 1)
                try:
                    rows = schema.write(db, batch, self._version)
                except Exception as exc:
                    error = exc
                    self.stats.failures += 1
                    log.exception("could not commit a batch to %s; it stays pending", self.path)
                else:
                    self.stats.transactions += 1
                    self.stats.rows += rows
                    self._prune_taken(db, batch)
            with self._lock:
                self._writing = False
                waiters, self._writing_waiters = self._writing_waiters, []
                if error is not None:
                    batch.absorb(self._pending)
                    self._pending = batch
                    self._pending_since = time.monotonic()
                    self._retry_at = self._pending_since + RETRY_DELAY
            del batch  # drop the payload references before waiting for the next batch
            for waiter in waiters:
                if error is None:
                    _call_threadsafe(waiter.get_loop(), _set_result, waiter, None)
                else:
                    failure = api.PersistenceError(f"{self.path}: commit failed: {error}")
                    _settle_threadsafe(waiter, failure, error)
            if stopping:
                self._close_error = error
                return

    def _prune_taken(self, db: sqlite3.Connection, batch: PendingBatch) -> None:
        """Count what the batch wrote to ``taken``; past the slack, keep the newest only."""
        rows = self._taken_rows
        for client_id in batch.purged:
            rows.pop(client_id, None)
        for client_id, identities in batch.taken.items():
            count = rows.get(client_id, 0) + len(identities)
            if count > TAKEN_KEEP + TAKEN_SLACK:
                try:
                    schema.prune_taken(db, client_id, TAKEN_KEEP)
                except sqlite3.Error:  # the rows stay, tried again at the next batch
                    log.warning("could not delete old identities of %r from %s", client_id,
                                self.path, exc_info=True)
                else:
                    count = TAKEN_KEEP
            rows[client_id] = count


def _settle_threadsafe(
    future: asyncio.Future[Any], error: api.PersistenceError, cause: BaseException | None
) -> None:
    error.__cause__ = cause
    _call_threadsafe(future.get_loop(), _set_exception, future, error)


def _call_threadsafe(
    loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any
) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        log.debug("event loop closed; nobody waits for this commit any more")


def _set_result(future: asyncio.Future[Any], result: object) -> None:
    if not future.done():  # the waiting task may have been cancelled
        future.set_result(result)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
