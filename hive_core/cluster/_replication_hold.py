"""QoS 1 deliveries held back from the backups while their PUBACK may still come.

A QoS 1 delivery to a persistent session costs the backups three ops (ENQUEUE, SEND_QUEUED,
DEQUEUE) and the backup's disk a row written and deleted, although the subscriber usually
acknowledges it within milliseconds. Like the file store's own hold (``<delivery-hold>``),
:class:`DeliveryHold` keeps such a delivery's ops out of the REPL_OPS frames for up to that
long: a PUBACK within the hold cancels them, and nothing of the message goes to the backups.
Past the hold, the ops go, with every op held behind them for the same session.

The promise is unchanged: a commit (a publisher's PUBACK, a FORWARD_ACK, a PUBREC) made
while a delivery is held returns once that delivery was acknowledged by its subscriber, or
its ops were shipped and acknowledged by every backup.

What keeps a replica that lacks a held delivery correct if the node fails meanwhile:

- **The forwarding marks.** A REPL_OPS frame carries how many forwarded messages this node
  had handled from each peer; a node taking over sends again only the messages after those
  marks. A message counted as handled there while its delivery was held would be lost with
  the node, so while deliveries are held the frames carry the marks of before the oldest of
  them (taken at the last frame shipped before it was held, which no read since counts).
- **Identities.** Lower marks mean that a node taking over sends again messages whose other
  deliveries the replica has: a session takes no copy of a message it had, by the message's
  identity. So nothing is held while a backup cannot read identities or TAKEN ops, and an op
  with a message that has none (a shared group's, one from a node of protocol 3) ships what
  is held first, and nothing is held until its frame is shipped: that frame carries the
  marks of now.
- **Order per session.** Any other op of a session with held deliveries (its record saved or
  deleted, an in-flight exchange, an identity, a QoS 2 message queued) first releases them,
  so that a replica never applies a later write of a session before an earlier one.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import hive_ext_api as api
from hive_core.persistence import Acknowledging

Watermarks = dict[str, list[int]]  # (as in _replication: peer id -> [incarnation, handled])



@dataclass(slots=True)
class HeldDelivery:
    """A delivery's ENQUEUE (and SEND_QUEUED, once sent) kept out of the frames."""

    client_id: str
    seq: int
    message: api.StoredMessage
    packet_id: int | None  # sent under this id; None: still queued
    since: float  # monotonic time it was held
    mark: int  # its place among the holds made so far
    watermarks: Watermarks  # what frames carry while it is the oldest held


@dataclass(slots=True)
class HoldStats:
    spared: int = 0  # deliveries acknowledged while held: no op of them went to a backup
    late: int = 0  # held deliveries whose ops went because their hold ran out
    paused: int = 0  # times a session got none held for HOLD_PAUSE (one ran out)


class DeliveryHold:
    """The held deliveries of one replicating store, in the order they were held.

    ``release`` ships one delivery's ops (the store numbers them as they go).
    """

    def __init__(self, hold: float, release: Callable[[HeldDelivery], None]) -> None:
        self.hold = hold
        self._release = release
        # (an OrderedDict: its first entry is found at once however many were taken from
        # the front; a dict walks over the slots of the ones taken until it is resized)
        self.held: OrderedDict[tuple[str, int], HeldDelivery] = OrderedDict()
        self.stats = HoldStats()
        self.marks = 0  # holds made so far
        # Per session that has some, its held deliveries' seqs in order (a dict as an
        # ordered set): what is held of one session is found without a look at the others.
        self._of: dict[str, dict[int, None]] = {}
        # Per session, when a delivery was last sent to it or acknowledged by it: while that
        # is recent, its client acknowledges, and what is queued for it is held too; and
        # until when nothing is held for it (HOLD_PAUSE, as in the file store).
        self._acknowledging = Acknowledging()
        # Commits waiting, as a heap of (mark, number, future): the lowest mark ends first.
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waits = 0
        self._timer: asyncio.TimerHandle | None = None

    # -- what is held --------------------------------------------------------------------------

    def holds(self, client_id: str) -> bool:
        """Deliveries of ``client_id`` are held now: an ENQUEUE for it is held behind them."""
        return client_id in self._of

    def sending(self, client_id: str) -> bool:
        """``client_id`` acknowledges (a delivery went to it within the hold), and is not
        paused: what is queued for it is held."""
        sent = self._acknowledging.last_sent(client_id)
        return sent is not None and time.monotonic() - sent < self.hold

    def sent(self, client_id: str) -> bool:
        """A delivery is being sent to ``client_id``: False while holding is paused for it."""
        return self._acknowledging.sent(client_id, time.monotonic())

    def forget(self, client_id: str) -> None:
        """The session is gone (what was held of it was released first)."""
        self._acknowledging.forget(client_id)

    def add(self, client_id: str, seq: int, message: api.StoredMessage, packet_id: int | None,
            watermarks: Watermarks) -> None:
        self.marks += 1
        now = time.monotonic()
        self.held[(client_id, seq)] = HeldDelivery(client_id, seq, message, packet_id, now,
                                                   self.marks, watermarks)
        seqs = self._of.get(client_id)
        if seqs is None:
            self._of[client_id] = {seq: None}
        else:
            seqs[seq] = None
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.hold, self._expire)

    def floor(self) -> Watermarks:
        """The forwarding marks a frame may carry while deliveries are held (some are)."""
        return next(iter(self.held.values())).watermarks

    # -- how a hold ends -----------------------------------------------------------------------

    def cancel(self, key: tuple[str, int]) -> bool:
        """The delivery was acknowledged: True when it was held (no op of it ever goes)."""
        held = self.held
        if key not in held:
            return False
        oldest = next(iter(held)) == key
        entry = held.pop(key)
        self._count_out(entry)
        self.stats.spared += 1
        self._acknowledging.acknowledged(entry.client_id, time.monotonic())
        if oldest and self._waiters:  # only the oldest can keep a commit waiting
            self._settle()
        return True

    def release(self, key: tuple[str, int]) -> None:
        """Ship the ops of one held delivery now (it is written again, or moved)."""
        oldest = next(iter(self.held)) == key
        entry = self.held.pop(key)
        self._count_out(entry)
        try:
            self._release(entry)
        finally:
            if oldest and self._waiters:
                self._settle()

    def release_client(self, client_id: str) -> None:
        """Ship every held delivery of ``client_id``, in order (another op of it follows)."""
        seqs = self._of.get(client_id)
        if seqs is not None:
            for seq in list(seqs):
                self.release((client_id, seq))

    def release_all(self) -> None:
        """Ship everything held, in order (a new backup, a fence, the node leaving, an op
        that the forwarding marks must count; see ReplicatingStore)."""
        for key in list(self.held):
            self.release(key)

    def drop_all(self) -> None:
        """Forget everything held: nothing goes to the backups any more (detached)."""
        self.held.clear()
        self._of.clear()
        self._settle()

    async def resolved(self, mark: int) -> None:
        """Until no delivery held at or before ``mark`` is held any more."""
        if not self.held or next(iter(self.held.values())).mark > mark:
            return
        future = asyncio.get_running_loop().create_future()
        self._waits += 1
        heapq.heappush(self._waiters, (mark, self._waits, future))
        await future

    # -- inside --------------------------------------------------------------------------------

    def _count_out(self, entry: HeldDelivery) -> None:
        seqs = self._of[entry.client_id]
        del seqs[entry.seq]
        if not seqs:
            del self._of[entry.client_id]

    def _settle(self) -> None:
        """End the commits that no held delivery keeps waiting any more (their marks are
        below the oldest held one's; a commit takes its mark when it begins)."""
        waiters = self._waiters
        floor = next(iter(self.held.values())).mark if self.held else None
        while waiters and (floor is None or waiters[0][0] < floor):
            future = heapq.heappop(waiters)[2]
            if not future.done():
                future.set_result(None)

    def _expire(self) -> None:
        """Ship what was held for too long, and what is held behind it for the same sessions;
        those sessions get nothing held for HOLD_PAUSE."""
        self._timer = None
        now = time.monotonic()
        late: list[str] = []
        for entry in self.held.values():
            if entry.since + self.hold > now:
                break
            late.append(entry.client_id)
        self.stats.late += len(late)
        try:
            for client_id in dict.fromkeys(late):  # (in order, once each)
                if self._acknowledging.late(client_id, now):
                    self.stats.paused += 1
                self.release_client(client_id)
        finally:
            if self.held:
                due = next(iter(self.held.values())).since + self.hold - now
                self._timer = asyncio.get_running_loop().call_later(max(0.0, due),
                                                                    self._expire)
