"""The embedded default store: SQLite in WAL mode, written by one thread with group commit.

The event loop never touches the disk. A write method appends to the pending batch under a lock
held for microseconds; the writer thread swaps the batch out, writes it in one transaction (one
sync), and then settles every ``commit()`` made before the swap through the loop's thread-safe
call. Writes that nobody commits are flushed anyway ``commit_interval`` seconds after the first.

A QoS 1 delivery sent to its client at once (``send_queued`` on a row not yet written) is
*held* out of the batches for up to ``delivery_hold`` seconds: if its PUBACK comes first
(``dequeue``), neither its row nor the row's delete is ever written. A ``commit()`` returns once
every write made before it is on disk or was such a pair: each write is numbered, and a commit
waits for the writes up to its number, held ones included, to be written or cancelled.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hive_ext_api as api

from . import _sqlite_schema as schema
from ._acknowledging import Acknowledging
from ._batch import InflightKey, PendingBatch, QueueWrite

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
    spared: int = 0  # deliveries acknowledged while held: no row written or deleted for them
    late: int = 0  # held deliveries written because their hold ran out
    paused: int = 0  # times a client got no more held for HOLD_PAUSE (one ran out)


@dataclass(slots=True)
class _Held:
    """A delivery's queue row kept out of the batches while its PUBACK may still come."""

    message: api.StoredMessage
    packet_id: int | None  # sent under this id; None: still queued
    number: int  # the write number of its enqueue
    since: float  # monotonic time it was held


class _State(enum.Enum):
    NEW = "new"
    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class FileSessionStore:
    """A ``SessionStore`` in ``<data_dir>/persistence/sessions.db``."""

    def __init__(
        self, data_dir: Path, *, commit_interval: float = 0.002, sync: bool = True,
        delivery_hold: float = 0.05,
    ) -> None:
        self.path = Path(data_dir) / "persistence" / "sessions.db"
        self.stats = StoreStats()
        self._commit_interval = commit_interval
        self._sync = sync
        self._delivery_hold = delivery_hold
        self._state = _State.NEW
        self._lock = threading.RLock()  # re-entered by writes inside atomic()
        self._wake = threading.Condition(self._lock)
        # Everything below is guarded by self._lock.
        self._pending = PendingBatch()
        self._pending_since: float | None = None  # monotonic time of the first pending write
        self._writes = 0  # writes made so far: a write's number is the count after it
        self._committed = 0  # every write up to this number, held ones aside, is on disk
        # commit() calls waiting: the write number each waits for, in the order they came
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._writing = False
        self._written_through = 0  # the last write number in the batch being written
        # Deliveries held out of the batches (send_queued), by (client, seq), in the order of
        # their numbers; and the lowest number of those that left for the pending batch or the
        # batch being written, which commits after them wait for too.
        # An OrderedDict: taken from the front as their time runs out, and a dict walks over
        # the slots of what it lost at the front until it is resized (quadratic).
        self._held: OrderedDict[tuple[str, int], _Held] = OrderedDict()
        self._held_of: dict[str, dict[int, None]] = {}  # per client that has some, their seqs
        self._atomic = 0  # depth of atomic() blocks the loop is in
        self._left_pending: int | None = None
        self._left_writing: int | None = None
        # Per client, when a delivery was last sent to it (send_queued): while that is recent,
        # the client is connected and acknowledging, and what is queued for it is held too;
        # and until when nothing is held for it (a held delivery ran out of time).
        self._acknowledging = Acknowledging()
        self._retry_at = 0.0
        self._write_began: float | None = None  # when the batch being written began
        self._slowest_write = 0.0  # seconds, since slowest_write() was asked last
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
            self._acknowledging.forget(client_id)
            if client_id in self._held_of:
                # Its held deliveries go with it; commits after them wait for this batch.
                for _seq, held in self._take_held_of(client_id):
                    self._left_at(held.number, writing=False)
            self._touch()

    def enqueue(self, client_id: str, seq: int, message: api.StoredMessage) -> None:
        with self._lock:
            if self._state is not _State.OPEN:
                self._check_open()
            high = self._high_seq.get(client_id, -1)
            if seq > high:
                self._high_seq[client_id] = seq
                sent = self._acknowledging.last_sent(client_id)
                held_before = client_id in self._held_of
                # (never a write of an atomic() block: it goes to the disk with the others)
                if (sent is not None or held_before) and not self._atomic:
                    now = time.monotonic()
                    # Held while the client acknowledges, and behind what is held for it
                    # already: the holds run out in order, so the disk never has a later
                    # message of a queue without an earlier one.
                    if held_before or (sent is not None and now - sent < self._delivery_hold):
                        self._writes += 1
                        if not self._held:
                            self._wake.notify()  # the writer learns when it is due
                        self._put_held((client_id, seq),
                                       _Held(message, None, self._writes, now))
                        return
            elif self._held and (client_id, seq) in self._held:
                self._leave_held((client_id, seq))  # written again: an ordinary write now
            self._touch()
            self._pending.enqueue(client_id, seq, message, fresh=seq > high,
                                  number=self._writes, grouped=self._atomic > 0)

    def send_queued(self, client_id: str, seq: int, packet_id: int) -> None:
        with self._lock:
            if self._state is not _State.OPEN:
                self._check_open()
            key = (client_id, seq)
            held = self._held.get(key)
            if held is not None:
                held.packet_id = packet_id
            elif self._atomic or not (self._holds_for(client_id) and self._hold(key, packet_id)):
                # (in a block, e.g. a session stored whole: its client is not sending here)
                self._pending.send_queued(client_id, seq, packet_id)
                self._touch()

    def dequeue(self, client_id: str, seq: int) -> None:
        with self._lock:
            if self._state is not _State.OPEN:
                self._check_open()
            held = self._held.pop((client_id, seq), None)
            if held is None:
                self._pending.dequeue(client_id, seq)
                self._touch()
                return
            self._count_out((client_id, seq))
            if self._atomic:
                # Moved, not acknowledged (a QoS 2 delivery to its in-flight row, written in
                # this same transaction): what waits for it waits for the batch with the move.
                self._left_at(held.number, writing=False)
                self._touch()
                return
            # Acknowledged while held: nothing of it is ever written. The client acknowledges,
            # so what is queued for it is held too, while it waits for room in its window.
            self.stats.spared += 1
            self._acknowledging.acknowledged(client_id, time.monotonic())
            waiters = self._waiters
            # Only the lowest held number can hold the first commit back; check cheaply first.
            if waiters and held.number <= waiters[0][0] and (
                    not self._held or next(iter(self._held.values())).number > waiters[0][0]):
                for waiter in self._releasable():
                    _set_result(waiter, None)

    def _holds_for(self, client_id: str) -> bool:
        """A delivery is being sent to ``client_id``: hold its rows from now on, unless holding
        is off or paused for it."""
        return self._delivery_hold > 0 and self._acknowledging.sent(client_id, time.monotonic())

    def _hold(self, key: tuple[str, int], packet_id: int) -> bool:
        """Keep a row enqueued in the pending batch, and sent at once, out of the batches."""
        client_id, seq = key
        queue = self._pending.queues.get(client_id)
        write = None if queue is None else queue.get(seq)
        if write is None or write.message is None or not write.fresh or \
                write.packet_id is not None or write.grouped:
            return False
        if self._held and next(reversed(self._held.values())).number > write.number:
            return False  # out of order (queued earlier, sent later): written as usual
        del queue[seq]  # type: ignore[union-attr]
        if not queue:
            del self._pending.queues[client_id]
        if not self._held:
            self._wake.notify()  # the writer may sleep until the pending batch's time
        self._put_held(key, _Held(write.message, packet_id, write.number, time.monotonic()))
        return True

    def _put_held(self, key: tuple[str, int], held: _Held) -> None:
        self._held[key] = held
        self._held_of.setdefault(key[0], {})[key[1]] = None

    def _count_out(self, key: tuple[str, int]) -> None:
        """``key`` left the hold: out of its client's index too."""
        seqs = self._held_of[key[0]]
        del seqs[key[1]]
        if not seqs:
            del self._held_of[key[0]]

    def _leave_held(self, key: tuple[str, int]) -> None:
        """A held delivery goes into the pending batch's hands (written, or purged)."""
        self._left_at(self._held.pop(key).number, writing=False)
        self._count_out(key)

    def _left_at(self, number: int, *, writing: bool) -> None:
        """A held delivery numbered ``number`` left for the pending batch (or the one being
        written): commits after it wait until that batch is on disk."""
        if writing:
            if self._left_writing is None or number < self._left_writing:
                self._left_writing = number
        elif self._left_pending is None or number < self._left_pending:
            self._left_pending = number

    def _take_held_of(self, client_id: str) -> list[tuple[int, _Held]]:
        """Take every held delivery of ``client_id`` out of the hold, in order."""
        seqs = self._held_of.pop(client_id, None)
        if seqs is None:
            return []
        return [(seq, self._held.pop((client_id, seq))) for seq in seqs]

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
            self._atomic += 1
            try:
                yield
            finally:
                self._atomic -= 1

    async def commit(self) -> None:
        """Return once every write made before this call is on disk, or was a held delivery
        that its acknowledgement cancelled.

        Raises PersistenceError when the batch holding them failed; those writes stay pending
        and the next commit() tries them again.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            self._check_open()
            number = self._writes
            if number <= self._durable_through() and number < self._held_floor():
                return
            done: asyncio.Future[None] = loop.create_future()
            self._waiters.append((number, done))
            if not self._pending.is_empty():
                self._wake.notify()
        await done

    def _durable_through(self) -> int:
        """The highest write number up to which every write not held is on disk."""
        if not self._writing and self._pending.is_empty():
            return self._writes
        return self._committed

    def _held_floor(self) -> float:
        """The lowest number of a held delivery not yet written (or purged) and committed."""
        floor: float = math.inf
        if self._held:
            floor = next(iter(self._held.values())).number
        for number in (self._left_pending, self._left_writing):
            if number is not None and number < floor:
                floor = number
        return floor

    def _releasable(self) -> list[asyncio.Future[None]]:
        """The commits waiting that are done now, taken off the list (in order)."""
        waiters = self._waiters
        through, floor = self._durable_through(), self._held_floor()
        count = 0
        for number, _ in waiters:
            if number > through or number >= floor:
                break
            count += 1
        released = [waiter for _, waiter in waiters[:count]]
        del waiters[:count]
        return released

    def slowest_write(self) -> float:
        """The longest a batch took to write since the last call, or has taken so far: the
        disk's own time, for overload protection (a commit may also wait for held deliveries,
        which says nothing about the disk)."""
        with self._lock:
            slowest, self._slowest_write = self._slowest_write, 0.0
            began = self._write_began
        if began is not None:
            slowest = max(slowest, time.monotonic() - began)
        return slowest

    def _check_open(self) -> None:
        if self._state is not _State.OPEN:
            raise api.PersistenceError(f"store is {self._state.value}")

    def _touch(self) -> None:
        self._writes += 1
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
                orphans = [waiter for _, waiter in self._waiters]
                self._waiters = []
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
                while not self._stopping:
                    due = self._next_due()
                    if due is None:
                        self._wake.wait()
                        continue
                    delay = due - time.monotonic()
                    if delay <= 0:
                        break
                    self._wake.wait(delay)
                stopping = self._stopping
                batch, self._pending = self._pending, PendingBatch()
                self._write_held(batch, everything=stopping)
                self._keep_inflight(batch)
                if self._left_pending is not None:
                    if self._left_writing is None or self._left_pending < self._left_writing:
                        self._left_writing = self._left_pending
                    self._left_pending = None
                self._written_through = self._writes
                self._pending_since = None
                self._writing = True
            error: BaseException | None = None
            began: float | None = None
            if not batch.is_empty():
                self._version = max(time.time_ns(), self._version + 1)
                began = self._write_began = time.monotonic()
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
                if began is not None:
                    self._slowest_write = max(self._slowest_write, time.monotonic() - began)
                    self._write_began = None
                self._writing = False
                if error is None:
                    self._committed = self._written_through
                    self._left_writing = None
                    waiters = self._releasable()
                else:
                    # The batch goes back in front of what came meanwhile; the commits its
                    # writes held back fail (their clients are refused and send again).
                    batch.absorb(self._pending)
                    self._pending = batch
                    self._pending_since = time.monotonic()
                    self._retry_at = self._pending_since + RETRY_DELAY
                    count = sum(1 for number, _ in self._waiters
                                if number <= self._written_through)
                    waiters = [waiter for _, waiter in self._waiters[:count]]
                    del self._waiters[:count]
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

    def _next_due(self) -> float | None:
        """When the writer swaps the next batch; None: not before another write."""
        due: float | None = None
        if self._pending_since is not None:
            if self._waiters and not self._pending.is_empty():
                return 0.0  # a commit waits: at once, a failed batch's retry too
            due = max(self._pending_since + self._commit_interval, self._retry_at)
        if self._held:
            held_due = next(iter(self._held.values())).since + self._delivery_hold
            if due is None or held_due < due:
                due = held_due
        return due

    def _write_held(self, batch: PendingBatch, *, everything: bool) -> None:
        """Move the held deliveries whose time is up (all of them when ``everything``) into
        ``batch``, in their order; commits after them wait until the batch is on disk."""
        held = self._held
        if not held:
            return
        now = time.monotonic()
        limit = math.inf if everything else now - self._delivery_hold
        moved = 0
        paused: list[str] = []
        for key, entry in held.items():
            if entry.since > limit:
                break
            if moved == 0:
                self._left_at(entry.number, writing=True)
            client_id, seq = key
            if not everything:
                self.stats.late += 1
                if self._acknowledging.late(client_id, now):
                    self.stats.paused += 1  # too slow to acknowledge: written as they come
                    paused.append(client_id)
            batch.queues.setdefault(client_id, {})[seq] = QueueWrite(
                entry.message, packet_id=entry.packet_id)
            moved += 1
        for _ in range(moved):
            key, _entry = held.popitem(last=False)
            self._count_out(key)
        for client_id in paused:  # the rest of what is held for a paused client goes along
            for seq, entry in self._take_held_of(client_id):
                batch.queues.setdefault(client_id, {})[seq] = QueueWrite(
                    entry.message, packet_id=entry.packet_id)
                self._left_at(entry.number, writing=True)

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
