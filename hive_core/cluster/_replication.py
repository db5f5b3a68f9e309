"""Replication: every persistent write of a node is on its backups before it is acknowledged.

A node's backups are the ``replica-count - 1`` members that follow it on a ring of the node ids
(sorted); a node with fewer members uses them all. The node's store is wrapped in a
:class:`ReplicatingStore`: each write (a session saved, a message queued or sent, an exchange
finished) is also recorded as an *op*, and the ops of one event-loop turn go to every backup in
one REPL_OPS frame. ``commit()`` returns once the node's own disk has them *and* every backup
has acknowledged them (REPL_ACK, sent after the backup's own commit): a PUBACK, a PUBREC or a
FORWARD_ACK that waits for a commit therefore means "on ``replica-count`` nodes".

A node that becomes someone's backup first gets a snapshot of that node's persistent sessions
(REPL_SNAPSHOT, in parts), then its ops. It keeps them in a store of its own per origin node,
``<data>/replicas/<node id>/``, with the forwarding marks that go with them: for each peer, how
many of that peer's forwarded messages the origin had handled when it wrote those ops.

When a node fails, the first surviving member that follows it on the ring takes its sessions
over from its replica (:class:`Replicas.take`): they become that node's sessions, and every
other node sends it the forwarded messages the failed node had not handled (TAKEN_OVER, then
RESCUED and RESCUE_DONE; see ``_cluster.py``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import hive_ext_api as api
from hive_core.broker import SessionRecords, snapshot_records
from hive_core.cluster._kept import Row, is_kept, kept_rows
from hive_core.cluster._latency import Latencies, Probe
from hive_core.cluster._replication_hold import DeliveryHold, HeldDelivery
from hive_core.persistence import FileSessionStore

log = logging.getLogger("hive.cluster")

Op = list[Any]
Watermarks = dict[str, list[int]]  # peer id -> [its incarnation, data frames handled from it]


# ---------------------------------------------------------------------- records as frame bodies

def message_fields(m: api.StoredMessage, identified: bool = False) -> list[Any]:
    """A message as a frame's list; ``identified`` (the receiver reads nine fields, its HELLO
    said ``identities``): with its cluster identity when it has one."""
    fields = [m.topic, m.payload, m.qos, m.retain, m.properties, m.expiry_at, m.publisher_id]
    if identified and m.serial:
        fields += [m.origin, m.serial]
    return fields


def subscription_fields(s: api.StoredSubscription) -> list[Any]:
    return [s.topic_filter, s.qos, s.no_local, s.retain_as_published, s.retain_handling,
            s.subscription_id]


def session_fields(s: api.StoredSession) -> list[Any]:
    return [s.client_id, s.protocol_version, s.expiry_interval, s.disconnected_at,
            [subscription_fields(sub) for sub in s.subscriptions.values()]]


def session_of(fields: list[Any]) -> api.StoredSession:
    client_id, version, expiry, disconnected_at, subscriptions = fields
    return api.StoredSession(client_id, version, expiry, disconnected_at, {
        s[0]: api.StoredSubscription(*s) for s in subscriptions})


def inflight_fields(i: api.StoredInflight, identified: bool = False) -> list[Any]:
    return [i.client_id, i.packet_id, i.direction, i.state,
            message_fields(i.message, identified) if i.message is not None else None]


def inflight_of(fields: list[Any]) -> api.StoredInflight:
    client_id, packet_id, direction, state, message = fields
    return api.StoredInflight(client_id, packet_id, direction, state,
                              api.StoredMessage(*message) if message is not None else None)


def records_fields(records: SessionRecords, identified: bool = False,
                   taken: bool = False, sent: bool = False) -> list[Any]:
    """``taken`` (the receiver's HELLO said taken_ops): with what the client had, by identity;
    ``sent`` (and taken; its HELLO said sent_ops): with the queued messages sent, by seq."""
    fields = [session_fields(records.session),
              [[seq, message_fields(m, identified)] for seq, m in records.queue],
              [inflight_fields(i, identified) for i in records.inflight]]
    if taken:
        fields.append([list(mid) for mid in records.seen or ()])
        if sent:
            fields.append([[seq, packet_id] for seq, packet_id in records.sent.items()])
    return fields


def records_of(fields: list[Any]) -> SessionRecords:
    session, queue, inflight, *rest = fields
    return SessionRecords(session_of(session),
                          [(seq, api.StoredMessage(*m)) for seq, m in queue],
                          [inflight_of(i) for i in inflight],
                          [(str(o), int(n)) for o, n in rest[0]] if rest else None,
                          {int(seq): int(pid) for seq, pid in rest[1]} if len(rest) > 1 else {})


# Op codes: the first item of an op; the rest are the write's arguments.
SAVE_SESSION, SAVE_SUB, DELETE_SUB, DELETE_SESSION = "s", "+", "-", "x"
ENQUEUE, DEQUEUE, SAVE_INFLIGHT, DELETE_INFLIGHT = "q", "d", "i", "j"
WILL = "w"  # [client id, will fields or None]: not a store write; the replica keeps it aside
TAKEN = "t"  # [client id, origin, serial]: remember_taken (to a backup whose HELLO said taken_ops)
SEND_QUEUED = "m"  # [client id, seq, packet id]: send_queued (to backups whose HELLO said sent_ops)


def apply_op(store: api.SessionStore, op: Op) -> None:
    """Make one write of the origin's on a replica store."""
    code = op[0]
    if code == ENQUEUE:
        store.enqueue(op[1], op[2], api.StoredMessage(*op[3]))
    elif code == DEQUEUE:
        store.dequeue(op[1], op[2])
    elif code == SAVE_INFLIGHT:
        store.save_inflight(inflight_of(op[1]))
    elif code == DELETE_INFLIGHT:
        store.delete_inflight(op[1], op[2], op[3])
    elif code == SAVE_SESSION:
        store.save_session(session_of(op[1]))
    elif code == SAVE_SUB:
        store.save_subscription(op[1], api.StoredSubscription(*op[2]))
    elif code == DELETE_SUB:
        store.delete_subscription(op[1], op[2])
    elif code == DELETE_SESSION:
        store.delete_session(op[1])
    elif code == SEND_QUEUED:
        send_queued = getattr(store, "send_queued", None)
        if send_queued is not None:
            send_queued(op[1], op[2], op[3])
    elif code == TAKEN:
        remember = getattr(store, "remember_taken", None)
        if remember is not None:
            remember(op[1], op[2], op[3])
    else:
        raise ValueError(f"unknown replication op {code!r}")


# ---------------------------------------------------------------------- the origin's side

class ReplicatingStore:
    """The node's own :class:`SessionStore`, with each write of a session also kept as an op.

    Retained messages are not ops: every node holds every retained message already.
    ``hold`` (seconds, ``<persistence><delivery-hold>``): how long a QoS 1 delivery's ops may
    wait for its PUBACK before they go to the backups (``_replication_hold.py``); 0 holds none.
    """

    def __init__(self, inner: api.SessionStore, hold: float = 0.0) -> None:
        self.inner = inner
        self.seq = 0  # ops recorded so far (only while there are backups to send them to)
        self.pending: list[Op] = []  # recorded, not yet sent
        self.replicator: Replicator | None = None
        self.hold = DeliveryHold(hold, self._ship_held) if hold > 0 else None
        # The forwarding marks at the last frame shipped: a delivery held from now on takes
        # them (no frame handled since is counted in them; see _replication_hold.py).
        self.shipped_watermarks: Watermarks = {}
        self._last_enqueue: tuple[str, int, api.StoredMessage] | None = None  # its op pending
        self._atomic_depth = 0
        # An op with an unidentified message waits for the next frame: until then nothing is
        # held (a hold would lower that frame's marks below the message's frame).
        self.unmarked_pending = False
        # Every backup reads messages with their cluster identity (its HELLO said so): the
        # ops carry it, so that a session taken over from a replica takes no copy twice.
        self.identities = False
        self.taken_ops = False  # every backup reads TAKEN ops (its HELLO said so)
        self.sent_ops = False  # every backup reads SEND_QUEUED ops (its HELLO said so)
        self._send_queued: Callable[[str, int, int], None] | None = getattr(
            inner, "send_queued", None)
        if self._send_queued is None:  # a store of extension API before 1.8
            self.send_queued = None  # type: ignore[assignment]
        self._remember = getattr(inner, "remember_taken", None)
        self._atomic: Callable[[], AbstractContextManager[None]] = getattr(
            inner, "atomic", nullcontext)
        if not hasattr(inner, "save_subscription"):  # a store of extension API 1.0
            self.save_subscription = None  # type: ignore[assignment]
            self.delete_subscription = None  # type: ignore[assignment]

    def _op(self, op: Op) -> None:
        replicator = self.replicator
        if replicator is None or not (replicator.backups or replicator.fenced_by):
            return  # (fenced: numbered all the same, so that its commit is told apart)
        self.seq += 1
        self.pending.append(op)
        if len(self.pending) == 1:
            replicator.ship_soon()

    def _may_hold(self) -> bool:
        """Holding needs backups that read identities and TAKEN ops: a node taking over may
        send a held delivery's message again (see _replication_hold.py), and only those say
        which copies a session had."""
        replicator = self.replicator
        return replicator is not None and bool(replicator.backups) and \
            not replicator.fenced_by and self.identities and self.taken_ops and \
            not self.unmarked_pending

    def _unmarked(self, message: api.StoredMessage | None) -> None:
        """An op with a message that has no identity (a shared group's, one from a node of
        protocol 3) goes in a frame with the forwarding marks of now: what is held goes
        first, and nothing more is held until that frame is shipped. Sent again after a
        takeover, such a message would reach its subscribers twice, since nothing says they
        had it."""
        hold = self.hold
        if hold is not None and message is not None and not message.serial:
            self.unmarked_pending = True
            if hold.held:
                hold.release_all()

    def _before(self, client_id: str) -> None:
        """Another op of ``client_id`` follows: what is held of it goes first."""
        hold = self.hold
        if hold is not None and hold.holds(client_id):
            hold.release_client(client_id)

    def _ship_held(self, held: HeldDelivery) -> None:
        client_id, seq = held.client_id, held.seq
        self._op([ENQUEUE, client_id, seq, message_fields(held.message, self.identities)])
        if held.packet_id is not None:
            self._op([SEND_QUEUED, client_id, seq, held.packet_id])

    def release_held(self) -> None:
        """Ship every held delivery (a new backup's snapshot, a lost backup, leaving)."""
        if self.hold is not None:
            self.hold.release_all()

    async def open(self) -> api.Snapshot:
        return await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    def save_session(self, session: api.StoredSession) -> None:
        self.inner.save_session(session)
        self._before(session.client_id)
        self._op([SAVE_SESSION, session_fields(session)])

    def save_subscription(self, client_id: str, subscription: api.StoredSubscription) -> None:
        self.inner.save_subscription(client_id, subscription)
        self._before(client_id)
        self._op([SAVE_SUB, client_id, subscription_fields(subscription)])

    def delete_subscription(self, client_id: str, topic_filter: str) -> None:
        self.inner.delete_subscription(client_id, topic_filter)
        self._before(client_id)
        self._op([DELETE_SUB, client_id, topic_filter])

    def delete_session(self, client_id: str) -> None:
        self.inner.delete_session(client_id)
        self._before(client_id)
        if self.hold is not None:
            self.hold.forget(client_id)
        self._op([DELETE_SESSION, client_id])

    def enqueue(self, client_id: str, seq: int, message: api.StoredMessage) -> None:
        self.inner.enqueue(client_id, seq, message)
        hold = self.hold
        if hold is not None:
            key = (client_id, seq)
            rewritten = key in hold.held
            if rewritten:
                hold.release(key)  # its ops went: an ordinary row from now on, never held
            elif message.qos == 1 and not self._atomic_depth and (
                    hold.holds(client_id) or hold.sending(client_id)) and self._may_hold():
                # Its client acknowledges, or it waits behind what is held: held too.
                hold.add(client_id, seq, message, None, self.shipped_watermarks)
                return
            else:
                self._before(client_id)  # (QoS 2, or in a block: after what is held)
            self._unmarked(message)
            self._last_enqueue = None if rewritten else (client_id, seq, message)
        self._op([ENQUEUE, client_id, seq, message_fields(message, self.identities)])

    def dequeue(self, client_id: str, seq: int) -> None:
        self.inner.dequeue(client_id, seq)
        hold = self.hold
        if hold is not None and hold.held:
            key = (client_id, seq)
            if key in hold.held:
                if not self._atomic_depth:
                    hold.cancel(key)  # acknowledged while held: no op of it ever goes
                    return
                hold.release(key)  # moved in a block (to an in-flight row): the ops go
        self._op([DEQUEUE, client_id, seq])

    def save_inflight(self, inflight: api.StoredInflight) -> None:
        self.inner.save_inflight(inflight)
        self._before(inflight.client_id)
        self._unmarked(inflight.message)
        self._op([SAVE_INFLIGHT, inflight_fields(inflight, self.identities)])

    def delete_inflight(self, client_id: str, packet_id: int, direction: api.Direction) -> None:
        self.inner.delete_inflight(client_id, packet_id, direction)
        self._before(client_id)
        self._op([DELETE_INFLIGHT, client_id, packet_id, direction])

    def send_queued(self, client_id: str, seq: int, packet_id: int) -> bool:
        """Mark a queue row as sent under ``packet_id``; False (declined) while a backup cannot
        read the mark: the caller moves the delivery to an in-flight row, which it reads."""
        replicator = self.replicator
        if not self.sent_ops and replicator is not None and (
                replicator.backups or replicator.fenced_by):
            return False
        self._send_queued(client_id, seq, packet_id)  # type: ignore[misc]  # (None: no method)
        hold = self.hold
        if hold is not None and self._hold_sent(hold, client_id, seq, packet_id):
            return True
        self._op([SEND_QUEUED, client_id, seq, packet_id])
        return True

    def _hold_sent(self, hold: DeliveryHold, client_id: str, seq: int, packet_id: int) -> bool:
        """A delivery was sent: True when its ops are (now) held."""
        held = hold.held.get((client_id, seq))
        if held is not None:
            held.packet_id = packet_id
            hold.sent(client_id)
            return True
        last, self._last_enqueue = self._last_enqueue, None
        if self._atomic_depth or not hold.sent(client_id) or not self._may_hold():
            return False
        pending = self.pending
        if last is None or last[0] != client_id or last[1] != seq or not pending or \
                pending[-1][0] != ENQUEUE or pending[-1][1] != client_id or \
                pending[-1][2] != seq:
            return False  # queued before (its ENQUEUE is gone or not the last): it goes
        pending.pop()  # queued and sent in one go: the two ops are held together
        self.seq -= 1
        hold.add(client_id, seq, last[2], packet_id, self.shipped_watermarks)
        return True

    def remember_taken(self, client_id: str, origin: str, serial: int) -> None:
        if self._remember is not None:
            self._remember(client_id, origin, serial)
        if self.taken_ops:
            self._before(client_id)
            self._op([TAKEN, client_id, origin, serial])

    def save_will(self, client_id: str, fields: list[Any] | None) -> None:
        """A client's will changed (see ``Records.will``): only the backups keep wills."""
        self._before(client_id)
        self._op([WILL, client_id, fields])

    def save_retained(self, message: api.StoredMessage) -> None:
        self.inner.save_retained(message)

    def delete_retained(self, topic: str) -> None:
        self.inner.delete_retained(topic)

    @contextmanager
    def atomic(self) -> Iterator[None]:
        # The ops of one turn travel in one frame: atomic there too. Nothing is held inside.
        with self._atomic():
            self._atomic_depth += 1
            try:
                yield
            finally:
                self._atomic_depth -= 1

    async def commit(self) -> None:
        """Durable here and acknowledged by every backup (see the module docstring); a QoS 1
        delivery held before this call acknowledged by its subscriber, or shipped too."""
        replicator = self.replicator
        target = replicator.ship() if replicator is not None else 0
        hold = self.hold
        mark = hold.marks if hold is not None and hold.held else 0
        await self.inner.commit()
        if replicator is not None and target:
            await replicator.replicated(target)
        if mark:  # (a delivery held now may be released while this waits: waited for too)
            assert hold is not None
            await hold.resolved(mark)
            replicator = self.replicator
            if replicator is not None:  # what was released meanwhile is numbered by now
                target = replicator.ship()
                if target:
                    await replicator.replicated(target)


@dataclass(slots=True)
class Backup:
    """A node that holds this node's replica: how far it has acknowledged."""

    node_id: str
    acked: int = -1  # the op it has made durable; -1 until its snapshot is
    # when it became a backup (time.monotonic looked up at each call: a simulation patches it)
    since: float = field(default_factory=lambda: time.monotonic())
    probe: Probe | None = None  # the op whose acknowledgement is being timed


class Replicator:
    """This node's side of its replicas: who its backups are, what they acknowledged."""

    def __init__(self, store: ReplicatingStore,
                 snapshot: Callable[[], tuple[list[SessionRecords], list[list[Any]]]],
                 watermarks: Callable[[], Watermarks], send_snapshot: Callable[..., None],
                 send_ops: Callable[..., None], send_release: Callable[[str], None]) -> None:
        self.store = store
        self.backups: dict[str, Backup] = {}
        self._snapshot = snapshot
        self._watermarks = watermarks
        self._send_snapshot = send_snapshot
        self._send_ops = send_ops
        self._send_release = send_release
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        # Backups lost while this node saw the smaller side of a split: the larger side may
        # take this node's sessions over from their replicas, which lack the ops not
        # acknowledged by then (up to ``fence_seq``). Until each is known down or this node
        # sees the larger side again, the commits of those ops do not end: no PUBACK, PUBREC,
        # QoS 2 PUBLISH or PUBREL goes out that the copies taken over do not know of (their
        # clients, moving there, would get those messages again). What is written later, on
        # this side alone, is committed as on a node without backups: both sides serve.
        self.fenced_by: set[str] = set()
        self.fence_seq = 0
        self._ship_scheduled = False
        self.snapshots_sent = 0
        self.ack_times = Latencies()  # ops shipped until acknowledged, by backup (one probe)
        store.replicator = self

    # -- who holds a copy ----------------------------------------------------------------------

    def set_backups(self, wanted: list[str]) -> None:
        """The ring changed: release the nodes no longer wanted, bring new ones up to date."""
        for node_id in [n for n in self.backups if n not in wanted]:
            del self.backups[node_id]
            self._send_release(node_id)
        new = [n for n in wanted if n not in self.backups]
        if new:
            self.store.release_held()  # the snapshot has what is held: the ops must go too
            self.ship()  # ops so far go to the current backups; the new ones get a snapshot
            records, wills = self._snapshot()
            seq = self.store.seq
            for node_id in new:
                self.backups[node_id] = Backup(node_id)
                self._send_snapshot(node_id, seq, records, wills)
                self.snapshots_sent += 1
            log.info("Replicating %d persistent sessions to %s", len(records),
                     ", ".join(new))
        self._settle_waiters()

    def detach(self) -> None:
        """The node leaves, its backups confirmed everything: nothing more goes to them.

        Ops not sent yet are dropped with their forwarding marks: the messages behind them
        count as not handled here, and the node taking over gets them from their senders.
        """
        self.store.replicator = None
        self.store.pending = []
        if self.store.hold is not None:
            self.store.hold.drop_all()
        self.backups.clear()
        self.fenced_by.clear()
        self._settle_waiters()

    def lost(self, node_id: str, *, exposed: bool = False) -> None:
        """A backup left the cluster (the ring is recomputed by the caller). ``exposed``: this
        node sees the smaller side of a split, so the commits under way wait (``fenced_by``)."""
        if self.backups.pop(node_id, None) is not None:
            # What is held goes to the backups left (and counts as written before a fence):
            # a copy taken over from a replica without it would miss it.
            self.store.release_held()
            if exposed:
                self.fenced_by.add(node_id)
                self.fence_seq = self.store.seq
            self._settle_waiters()

    def unfence(self, node_id: str | None = None) -> None:
        """``node_id`` is known down (None: this node sees the larger side again)."""
        if node_id is None:
            self.fenced_by.clear()
        else:
            self.fenced_by.discard(node_id)
        self._settle_waiters()

    # -- ops -----------------------------------------------------------------------------------

    def ship_soon(self) -> None:
        if not self._ship_scheduled:
            self._ship_scheduled = True
            asyncio.get_running_loop().call_soon(self.ship)

    def ship(self) -> int:
        """Send the ops recorded since the last call to every backup; the last op's number."""
        self._ship_scheduled = False
        store = self.store
        ops = store.pending
        if ops and store.replicator is self:
            store.pending = []
            first = store.seq - len(ops) + 1
            watermarks = store.shipped_watermarks = self._watermarks()
            store.unmarked_pending = False  # (the marks of now go with its op)
            hold = store.hold
            if hold is not None and hold.held:  # not past what a held delivery came with
                watermarks = hold.floor()
            for node_id, backup in self.backups.items():
                self._send_ops(node_id, first, ops, watermarks)
                if backup.probe is None and backup.acked >= 0:
                    backup.probe = Probe(store.seq, time.monotonic())
        return store.seq

    def acknowledged(self, node_id: str, seq: int) -> None:
        backup = self.backups.get(node_id)
        if backup is not None and seq > backup.acked:
            if backup.acked < 0:
                log.info("Replica on %s complete in %d ms: every persistent session of this "
                         "node is on %d nodes again", node_id,
                         (time.monotonic() - backup.since) * 1000, 1 + len(self.backups))
            backup.acked = seq
            probe = backup.probe
            if probe is not None and seq >= probe.place:
                self.ack_times.observe(node_id, time.monotonic() - probe.began)
                backup.probe = None
            self._settle_waiters()

    async def replicated(self, target: int) -> None:
        """Until every current backup has made op ``target`` durable."""
        if self._done(target):
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        await future

    def _done(self, target: int) -> bool:
        if self.fenced_by and target <= self.fence_seq:
            return False
        return all(b.acked >= target for b in self.backups.values())

    def _settle_waiters(self) -> None:
        waiting = []
        for target, future in self._waiters:
            if self._done(target):
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((target, future))
        self._waiters = waiting

    def lag(self) -> dict[str, int]:
        """Ops each backup has not acknowledged yet."""
        return {n: max(0, self.store.seq - b.acked) for n, b in self.backups.items()}


def successors(node_id: str, ring: list[str], count: int) -> list[str]:
    """The ``count`` nodes after ``node_id`` on the ring of ``ring`` (node ids), in order."""
    ids = sorted(set(ring) | {node_id})
    at = ids.index(node_id)
    after = ids[at + 1:] + ids[:at]
    return after[:max(0, count)]


# ---------------------------------------------------------------------- the backup's side

@dataclass
class Replica:
    """The copy of one origin node's sessions held here."""

    origin: str
    store: api.SessionStore | None = None
    applied: int = 0  # the last op written to the store
    complete: bool = False  # its snapshot has arrived whole
    watermarks: Watermarks = field(default_factory=dict)
    wills: dict[str, list[Any]] = field(default_factory=dict)  # client id -> will fields
    committing: asyncio.Task[None] | None = None
    dirty: bool = False


@dataclass(slots=True)
class TakenReplica:
    """A failed node's sessions, read from its replica here."""

    origin: str
    records: list[SessionRecords]
    watermarks: Watermarks
    wills: list[list[Any]]  # [client id, will fields]
    kept: list[Row] = field(default_factory=list)  # messages it kept on disk for other nodes


Work = Callable[[], Awaitable[None] | None]


class Replicas:
    """The replicas this node holds for other nodes, one store each on the ``shelf``.

    What an origin sends is handled in order, one origin at a time (a snapshot opens a store,
    which takes a moment; the ops after it wait for it).
    """

    def __init__(self, shelf: ReplicaShelf | Path, acknowledge: Callable[[str, int], None],
                 missing: Callable[[str], None] = lambda origin: None) -> None:
        self.shelf = ReplicaFolder(shelf) if isinstance(shelf, Path) else shelf
        self._acknowledge = acknowledge
        self._missing = missing  # ops came for a replica this node does not hold (any more)
        self.held: dict[str, Replica] = {}
        self.ops_applied = 0
        self._work: dict[str, deque[Work]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        # Replicas kept across a restart: usable if their origin died.
        for origin, watermarks, wills in self.shelf.kept():
            self.held[origin] = Replica(origin, complete=True, watermarks=watermarks,
                                        wills=wills)

    def holds(self, origin: str) -> bool:
        replica = self.held.get(origin)
        return replica is not None and replica.complete

    # -- in order, per origin ------------------------------------------------------------------

    def _submit(self, origin: str, work: Work) -> None:
        queue = self._work.setdefault(origin, deque())
        queue.append(work)
        if origin not in self._workers:
            self._workers[origin] = asyncio.get_running_loop().create_task(self._run(origin))

    async def _run(self, origin: str) -> None:
        queue = self._work[origin]
        try:
            while queue:
                result = queue.popleft()()
                if result is not None:
                    await result
        except Exception:
            log.exception("replica of node %s: an update failed; it is dropped and the node "
                          "sends a new snapshot when it picks this one again", origin)
            queue.clear()
            replica = self.held.pop(origin, None)
            if replica is not None:
                await self._close(replica)
        finally:
            del self._workers[origin]

    def snapshot_part(self, origin: str, seq: int, first: bool, records: list[list[Any]],
                      wills: list[list[Any]], more: bool) -> None:
        self._submit(origin, lambda: self._snapshot_part(origin, seq, first, records, wills,
                                                         more))

    def ops(self, origin: str, first: int, ops: list[Op], watermarks: Watermarks) -> None:
        self._submit(origin, lambda: self._ops(origin, first, ops, watermarks))

    def release(self, origin: str) -> None:
        """The origin chose other backups: its copy here goes."""
        self._submit(origin, lambda: self._release(origin))

    async def take(self, origin: str) -> TakenReplica | None:
        """The origin failed and this node takes its sessions: read them, drop the copy."""
        taken: asyncio.Future[TakenReplica | None] = asyncio.get_running_loop().create_future()

        async def work() -> None:
            try:
                taken.set_result(await self._take(origin))
            except Exception as exc:
                taken.set_exception(exc)
        self._submit(origin, work)
        return await taken

    # -- the work ------------------------------------------------------------------------------

    async def _snapshot_part(self, origin: str, seq: int, first: bool,
                             records: list[list[Any]], wills: list[list[Any]],
                             more: bool) -> None:
        replica = self.held.get(origin)
        if first or replica is None or replica.store is None:
            if replica is not None:
                await self._close(replica)
            replica = self.held[origin] = Replica(origin)
            replica.store = await self.shelf.create(origin)
        store = replica.store
        replica.wills.update((client_id, fields) for client_id, fields in wills)
        with store.atomic():
            for fields in records:
                r = records_of(fields)
                if not is_kept(r.session.client_id):  # messages kept for a node: rows only
                    store.save_session(r.session)
                for queued_seq, message in r.queue:
                    store.enqueue(r.session.client_id, queued_seq, message)
                send_queued = getattr(store, "send_queued", None)
                if send_queued is not None:
                    for queued_seq, packet_id in r.sent.items():
                        send_queued(r.session.client_id, queued_seq, packet_id)
                for inflight in r.inflight:
                    store.save_inflight(inflight)
                remember = getattr(store, "remember_taken", None)
                if remember is not None:
                    for origin_id, serial in r.seen or ():
                        remember(r.session.client_id, origin_id, serial)
        if not more:
            replica.complete = True
            replica.applied = seq
            self._commit_soon(replica)

    def _ops(self, origin: str, first: int, ops: list[Op], watermarks: Watermarks) -> None:
        replica = self.held.get(origin)
        if replica is None or replica.store is None:
            # Taken over or dropped here (the origin was thought dead, and was not): without
            # a snapshot first, these ops have nothing to apply to. The origin is asked again.
            self._missing(origin)
            return
        if replica.complete:  # after the snapshot, ops follow on without a gap
            expected = replica.applied + 1
            if first > expected:
                # Some were lost (sent on a link that closed): what follows cannot be applied
                # on top. The origin is asked for a snapshot again; none is acknowledged.
                log.warning("replica of node %s: ops %d to %d never arrived; asking it for its "
                            "sessions again", origin, expected, first - 1)
                replica.complete = False
                self._missing(origin)
                return
            if first < expected:  # already applied (they came twice)
                ops = ops[expected - first:]
                first = expected
                if not ops:
                    return
        store = replica.store
        wills = replica.wills
        with store.atomic():
            for op in ops:
                if op[0] == WILL:
                    if op[2] is None:
                        wills.pop(op[1], None)
                    else:
                        wills[op[1]] = op[2]
                else:
                    apply_op(store, op)
        self.ops_applied += len(ops)
        replica.applied = first + len(ops) - 1
        replica.watermarks = watermarks
        if replica.complete:
            self._commit_soon(replica)

    def _commit_soon(self, replica: Replica) -> None:
        replica.dirty = True
        if replica.committing is None:
            replica.committing = asyncio.get_running_loop().create_task(self._commit(replica))

    async def _commit(self, replica: Replica) -> None:
        try:
            while replica.dirty and replica.store is not None:
                replica.dirty = False
                applied, watermarks = replica.applied, dict(replica.watermarks)
                wills = dict(replica.wills)
                await replica.store.commit()
                self._acknowledge(replica.origin, applied)
                # After the acknowledgement: marks that lag the store (a crash in between)
                # mean messages delivered twice after a takeover, never lost.
                await self.shelf.keep_marks(replica.origin, watermarks, wills)
        except api.PersistenceError:
            log.exception("could not write the replica of node %s; it is not acknowledged",
                          replica.origin)
        finally:
            replica.committing = None

    async def _release(self, origin: str) -> None:
        replica = self.held.pop(origin, None)
        if replica is not None:
            await self._close(replica)
            await self.shelf.remove(origin)

    async def _take(self, origin: str) -> TakenReplica | None:
        replica = self.held.pop(origin, None)
        if replica is None or not replica.complete:
            return None
        await self._close(replica)
        snapshot = await self.shelf.read(origin)
        await self.shelf.remove(origin)
        return TakenReplica(origin, snapshot_records(snapshot), replica.watermarks,
                            [[c, fields] for c, fields in replica.wills.items()],
                            kept_rows(snapshot))

    async def _close(self, replica: Replica) -> None:
        if replica.committing is not None:
            with contextlib.suppress(Exception):
                await replica.committing
        if replica.store is not None:
            store, replica.store = replica.store, None
            with contextlib.suppress(api.PersistenceError):
                await store.close()

    async def close(self) -> None:
        for worker in list(self._workers.values()):
            worker.cancel()
        for replica in list(self.held.values()):
            await self._close(replica)


class ReplicaShelf(Protocol):
    """Where a node keeps the replicas it holds of other nodes: a store per origin, and the
    marks and wills beside it. Outlives the process (a restarted node still holds them)."""

    def kept(self) -> list[tuple[str, Watermarks, dict[str, list[Any]]]]:
        """The replicas found at start: origin, watermarks, wills."""
        ...

    async def create(self, origin: str) -> api.SessionStore:
        """An empty, open store for ``origin``'s replica (an older one is dropped first)."""
        ...

    async def keep_marks(self, origin: str, watermarks: Watermarks,
                         wills: dict[str, list[Any]]) -> None:
        """Write what the replica keeps beside its store (after the store's commit)."""
        ...

    async def read(self, origin: str) -> api.Snapshot:
        """What ``origin``'s replica store holds (its store closed)."""
        ...

    async def remove(self, origin: str) -> None:
        ...


class ReplicaFolder:
    """The replicas in ``<data>/replicas/<origin>/``: a file store and ``replica.json`` each."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def kept(self) -> list[tuple[str, Watermarks, dict[str, list[Any]]]]:
        if not self.folder.is_dir():
            return []
        return [(child.name, *_read_sidecar(child)) for child in sorted(self.folder.iterdir())
                if (child / "persistence" / "sessions.db").exists()]

    async def create(self, origin: str) -> api.SessionStore:
        folder = self.folder / origin
        await asyncio.to_thread(shutil.rmtree, folder, True)
        store = FileSessionStore(folder)
        await store.open()
        return store

    async def keep_marks(self, origin: str, watermarks: Watermarks,
                         wills: dict[str, list[Any]]) -> None:
        await asyncio.to_thread(_write_sidecar, self.folder / origin, watermarks, wills)

    async def read(self, origin: str) -> api.Snapshot:
        reader = FileSessionStore(self.folder / origin)
        snapshot = await reader.open()
        await reader.close()
        return snapshot

    async def remove(self, origin: str) -> None:
        await asyncio.to_thread(shutil.rmtree, self.folder / origin, True)


def _write_sidecar(folder: Path, watermarks: Watermarks, wills: dict[str, list[Any]]) -> None:
    """What the replica keeps beside its store, written after the store's commit: marks that
    lag the data cause duplicates, never losses."""
    path = folder / "replica.json"
    temporary = folder / "replica.json.tmp"
    temporary.write_text(json.dumps({
        "watermarks": watermarks,
        "wills": {c: [*f[:1], base64.b64encode(f[1]).decode(), *f[2:4],
                      base64.b64encode(f[4]).decode(), *f[5:]] for c, f in wills.items()}}))
    os.replace(temporary, path)


def _read_sidecar(folder: Path) -> tuple[Watermarks, dict[str, list[Any]]]:
    try:
        data = json.loads((folder / "replica.json").read_text())
        watermarks = {str(k): [int(v[0]), int(v[1])] for k, v in data["watermarks"].items()}
        wills = {c: [f[0], base64.b64decode(f[1]), f[2], f[3], base64.b64decode(f[4]), *f[5:]]
                 for c, f in data["wills"].items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return {}, {}
    return watermarks, wills


def in_record_parts(records: list[SessionRecords], size: int, identified: bool = False,
                    taken: bool = False, sent: bool = False) -> Iterator[list[list[Any]]]:
    """Sessions as snapshot parts of about ``size`` bytes of payload each."""
    part: list[list[Any]] = []
    total = 0
    for r in records:
        part.append(records_fields(r, identified, taken, sent))
        total += 256 + sum(len(m.payload) for _, m in r.queue) + 32 * len(r.seen or ())
        if total >= size:
            yield part
            part, total = [], 0
    yield part


def now_ms() -> float:
    return time.monotonic() * 1000
