"""Sessions and retained messages as the store keeps them: writing, restoring, moving between nodes.

:class:`Records` is the only part of the broker that talks to the :class:`SessionStore`. Every
durable change of a session goes through one of its methods, so a session's state on disk (and,
later, on its replicas) follows its state in memory one write at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import hive_ext_api as api
from hive_core.broker._handover import SEEN_MAX, MessageId, had, takes
from hive_core.broker._message import Message
from hive_core.broker._session import Outbound, Pending, Session, Subscription
from hive_core.mqtt import (
    MQTTError,
    PacketType,
    PropertyId,
    Will,
    decode_properties,
    encode_properties,
    parse_shared_subscription,
)

P = PropertyId


@dataclass(slots=True)
class SessionRecords:
    """One session's whole state in store records: what moves between nodes as one thing."""

    session: api.StoredSession
    queue: list[tuple[int, api.StoredMessage]] = field(default_factory=list)  # (seq, message)
    inflight: list[api.StoredInflight] = field(default_factory=list)
    # The identities of the messages from the cluster the session took (see _handover.py):
    # they move with it, so that no way brings one of them to it again. None: not known.
    seen: list[tuple[str, int]] | None = None
    # Queued messages sent to the client (QoS 1) that keep their row until acknowledged:
    # queue position -> packet id (see SessionStore.send_queued).
    sent: dict[int, int] = field(default_factory=dict)


def snapshot_records(snapshot: api.Snapshot) -> list[SessionRecords]:
    """Each session a store's snapshot holds, as one thing."""
    return [SessionRecords(session, snapshot.queues.get(client_id, []),
                           snapshot.inflight.get(client_id, []), snapshot.taken.get(client_id),
                           snapshot.sent.get(client_id, {}))
            for client_id, session in snapshot.sessions.items()]


def stored_message(pending: Pending) -> api.StoredMessage:
    """A queued or in-flight delivery as a record (its subscription ids travel as a property)."""
    message = pending.message
    props = dict(message.properties) if message.properties else {}
    if pending.subscription_ids:
        props[P.SUBSCRIPTION_IDENTIFIER] = list(pending.subscription_ids)
    origin, serial = message.mid or ("", 0)
    return api.StoredMessage(message.topic, message.payload, pending.qos, pending.retain,
                             encode_properties(props) if props else b"", message.expiry_at,
                             message.publisher_id, origin, serial)


def pending_from(stored: api.StoredMessage) -> Pending:
    props = decode_properties(stored.properties) if stored.properties else {}
    sub_ids = props.pop(P.SUBSCRIPTION_IDENTIFIER, None)
    message = Message(stored.topic, stored.payload, stored.qos, stored.retain, props,
                      stored.publisher_id, stored.expiry_at)
    if stored.serial:
        message.mid = (stored.origin, stored.serial)
    return Pending(message, stored.qos, tuple(sub_ids) if sub_ids else None, stored.retain)


def _stored_forwarded(message: Message | None) -> api.StoredMessage | None:
    """An inbound QoS 2 message as its record carries it (None: routed here only)."""
    if message is None:
        return None
    return stored_message(Pending(message, message.qos, None, message.retain))


def stored_retained(message: Message) -> api.StoredMessage:
    props = encode_properties(message.properties) if message.properties else b""
    return api.StoredMessage(message.topic, message.payload, message.qos, True, props,
                             message.expiry_at, message.publisher_id)


def properties_problem(stored: api.StoredMessage) -> str | None:
    """Why the codec cannot read a stored message's properties as a PUBLISH's, or None."""
    if not stored.properties:
        return None
    try:
        decode_properties(stored.properties, PacketType.PUBLISH)
    except MQTTError as exc:
        return f"properties: {exc}"
    return None


def retained_from(stored: api.StoredMessage) -> Message:
    props = decode_properties(stored.properties) if stored.properties else {}
    return Message(stored.topic, stored.payload, stored.qos, True, props, stored.publisher_id,
                   stored.expiry_at)


def will_fields(session: Session, delay: float = 0.0) -> list[Any] | None:
    """A session's will as plain data: [topic, payload, qos, retain, properties, delay in
    seconds once the client is gone, Unix time it went (None: still connected)]."""
    will = session.will
    if will is None:
        return None
    props = encode_properties(will.properties) if will.properties else b""
    return [will.topic, will.payload, will.qos, will.retain, props, delay,
            session.disconnected_at]


def will_from(fields: list[Any]) -> tuple[Will, float, float | None]:
    topic, payload, qos, retain, props, delay, disconnected_at = fields
    return (Will(topic, payload, qos, retain, decode_properties(props) if props else {}),
            float(delay), disconnected_at)


def stored_session(session: Session) -> api.StoredSession:
    return api.StoredSession(
        session.client_id, session.protocol_version, session.expiry_interval,
        session.disconnected_at,
        {f: api.StoredSubscription(f, s.qos, s.no_local, s.retain_as_published, s.retain_handling,
                                   s.subscription_id)
         for f, s in session.subscriptions.items()},
    )


def outbound_record(client_id: str, packet_id: int, outbound: Outbound) -> api.StoredInflight:
    if outbound.state == "pubrel":
        return _released_record(client_id, packet_id, outbound)
    return api.StoredInflight(client_id, packet_id, "out", "publish",
                              stored_message(outbound.pending))


def _released_record(client_id: str, packet_id: int,
                     outbound: Outbound | None) -> api.StoredInflight:
    """A QoS 2 delivery the client has (PUBREC): no message left to send, but its identity,
    so that a copy of it (a merge, a rescue) is not delivered as a new one."""
    mid = outbound.pending.message.mid if outbound is not None else None
    stub = api.StoredMessage("", b"", 2, origin=mid[0], serial=mid[1]) if mid else None
    return api.StoredInflight(client_id, packet_id, "out", "pubrel", stub)


def session_from(records: SessionRecords, now: float) -> Session:
    """A session rebuilt from its records (subscriptions are not in any topic tree yet)."""
    record = records.session
    session = Session(record.client_id, record.protocol_version, record.expiry_interval)
    session.disconnected_at = record.disconnected_at or now
    for topic_filter, sub in record.subscriptions.items():
        shared = parse_shared_subscription(topic_filter)
        session.subscribed()[topic_filter] = Subscription(
            session, topic_filter, sub.qos, sub.no_local, sub.retain_as_published,
            sub.retain_handling, sub.subscription_id, shared[0] if shared else None)
    for seq, stored in records.queue:
        pending = pending_from(stored)
        pending.seq = seq
        packet_id = records.sent.get(seq)
        if packet_id is None:
            session.queued().append(pending)
        else:  # sent, in flight: the window, under its packet id (older than the queue)
            session.window()[packet_id] = Outbound(pending)
    for inflight in records.inflight:
        if inflight.direction == "in":  # with its message: its forwards may not have left
            carried = inflight.message
            session.received_qos2(inflight.packet_id,
                                  pending_from(carried).message if carried else None)
        elif inflight.message is not None or inflight.state == "pubrel":
            pending = (pending_from(inflight.message) if inflight.message
                       else Pending(Message("", b"", 2, False, None, ""), 2, None, False))
            session.window()[inflight.packet_id] = Outbound(pending, inflight.state)
    if records.seen:  # the newest SEEN_MAX (a store may hold a few more)
        session.seen = dict.fromkeys((str(o), int(n)) for o, n in records.seen[-SEEN_MAX:])
    # What it holds it took: a copy of one of those (a merge, a rescue) is not taken again.
    held = [p.message.mid for p in session.queue]
    held += [o.pending.message.mid for o in session.inflight.values()]
    for mid in held:
        if mid is not None:
            takes(session, mid)
    return session


class Records:
    """Writes sessions, their queues and in-flight exchanges, and retained messages to the store.

    Writes are cheap (they join the store's pending batch); :meth:`commit` makes everything
    written before it durable.
    """

    def __init__(self, store: api.SessionStore) -> None:
        self.store = store
        # The highest queue position handed out. Positions start from the clock (in µs) so
        # they keep growing across restarts even when every queue was empty at the restart.
        self._seq = time.time_ns() // 1000
        # A store written for extension API 1.0 has no atomic(): writes then stand alone.
        self.atomic: Callable[[], AbstractContextManager[None]] = getattr(
            store, "atomic", nullcontext)
        # One of an API before 1.6 keeps no identities of completed deliveries.
        self._remember: Callable[[str, str, int], None] | None = getattr(
            store, "remember_taken", None)
        # One of an API before 1.8 moves a QoS 1 delivery from its queue row to an in-flight
        # row (the message written twice); with it the row stays, marked with the packet id.
        # It may decline one (False: a replicating store while a backup cannot read the mark).
        self._send_queued: Callable[[str, int, int], bool | None] | None = getattr(
            store, "send_queued", None)
        self._slowest_write: Callable[[], float] | None = getattr(store, "slowest_write", None)

        self._slowest_commit = 0.0  # seconds, since slowest_commit() was asked last
        self._commits: dict[int, float] = {}  # the commits under way: when each began
        self._commit_number = 0

    def restored_seq(self, seq: int) -> None:
        self._seq = max(self._seq, seq)

    async def commit(self) -> None:
        if self._slowest_write is not None:  # the store times its disk itself
            await self.store.commit()
            return
        number = self._commit_number = self._commit_number + 1
        begun = self._commits[number] = time.monotonic()
        try:
            await self.store.commit()
        finally:
            del self._commits[number]
            took = time.monotonic() - begun
            if took > self._slowest_commit:
                self._slowest_commit = took

    def slowest_commit(self) -> float:
        """The longest a commit took since the last call, or has been waiting for so far
        (overload protection's measure of the disk); a store that can tell the time its disk
        takes (``slowest_write``) is asked instead, as its commits may also wait for deliveries
        it holds for their acknowledgements."""
        if self._slowest_write is not None:
            return self._slowest_write()
        slowest, self._slowest_commit = self._slowest_commit, 0.0
        if self._commits:
            slowest = max(slowest, time.monotonic() - next(iter(self._commits.values())))
        return slowest

    # -- sessions ------------------------------------------------------------------------------

    def save_session(self, session: Session) -> None:
        session.stored = True
        self.store.save_session(stored_session(session))

    def save_subscription(self, session: Session, subscription: Subscription) -> None:
        save = getattr(self.store, "save_subscription", None)
        if save is None:  # a store of extension API 1.0: the whole session again
            self.save_session(session)
            return
        s = subscription
        save(session.client_id, api.StoredSubscription(
            s.topic_filter, s.qos, s.no_local, s.retain_as_published, s.retain_handling,
            s.subscription_id))

    def delete_subscription(self, session: Session, topic_filter: str) -> None:
        delete = getattr(self.store, "delete_subscription", None)
        if delete is None:
            self.save_session(session)
            return
        delete(session.client_id, topic_filter)

    def delete_session(self, client_id: str) -> None:
        """The session is gone: its record, queue and in-flight exchanges."""
        self.store.delete_session(client_id)

    def ended(self, session: Session) -> None:
        """``session`` ended here: what the store (and a replicating store's backups: its
        will) holds of it goes. A clean session the store never had leaves nothing to delete:
        no write, no work for the store's writer, for each clean client that leaves."""
        if session.stored or hasattr(self.store, "save_will"):
            self.store.delete_session(session.client_id)

    def enqueue(self, session: Session, pending: Pending) -> None:
        self._seq += 1
        pending.seq = self._seq
        self.store.enqueue(session.client_id, pending.seq, stored_message(pending))

    def dequeue(self, session: Session, pending: Pending) -> None:
        if pending.seq:
            self.store.dequeue(session.client_id, pending.seq)
            pending.seq = 0

    def sent(self, session: Session, packet_id: int, outbound: Outbound) -> None:
        """A QoS 1/2 delivery entered the window (from the queue, if it was queued).

        A QoS 1 one keeps (or gets) a queue row, marked with its packet id, until its PUBACK:
        one row per message instead of a queue row and an in-flight row. A QoS 2 one moves
        to an in-flight row, which keeps its state (PUBREC) and, once done, its identity.
        """
        pending = outbound.pending
        send_queued = self._send_queued
        if pending.qos == 1 and send_queued is not None and outbound.state != "pubrel":
            if not pending.seq:  # sent at once, never queued: its row now
                self.enqueue(session, pending)
            if send_queued(session.client_id, pending.seq, packet_id) is not False:
                return
        with self.atomic():  # never out of the queue without being in the window
            self.dequeue(session, pending)
            self.store.save_inflight(outbound_record(session.client_id, packet_id, outbound))

    def released(self, session: Session, packet_id: int) -> None:
        """PUBREC came for an outbound QoS 2 delivery: only its PUBREL is left to finish."""
        self.store.save_inflight(_released_record(session.client_id, packet_id,
                                                  session.inflight.get(packet_id)))

    def acknowledged(self, session: Session, packet_id: int, outbound: Outbound) -> None:
        """The delivery is done (PUBACK, PUBCOMP): its row goes. A QoS 2 one's identity is
        kept instead, so that no copy of it reaches the session as new after a restart."""
        pending = outbound.pending
        if pending.seq:  # a QoS 1 delivery that kept its queue row (send_queued)
            self.dequeue(session, pending)
            return
        with self.atomic():  # never the row gone without the identity kept
            self.store.delete_inflight(session.client_id, packet_id, "out")
            if pending.qos == 2:
                self.took(session, pending.message.mid)

    def took(self, session: Session, mid: MessageId | None) -> None:
        """The session's client had the message ``mid``, and no row of it says so."""
        if mid is not None and self._remember is not None:
            self._remember(session.client_id, mid[0], mid[1])

    def received_qos2(self, session: Session, packet_id: int,
                      forwarded: Message | None = None) -> None:
        """An inbound QoS 2 PUBLISH was routed; its PUBREL is awaited. ``forwarded``: the
        message, with its identity, whose forwards to other nodes wait for this record's
        commit; the record keeps it, for a node that takes the session over."""
        stored = _stored_forwarded(forwarded)
        self.store.save_inflight(api.StoredInflight(session.client_id, packet_id, "in", "pubrec",
                                                    stored))

    def released_qos2(self, session: Session, packet_id: int) -> None:
        self.store.delete_inflight(session.client_id, packet_id, "in")

    # -- wills -------------------------------------------------------------------------------

    def will(self, session: Session, delay: float = 0.0) -> None:
        """The session's will changed (set at CONNECT, pending after a disconnect, gone).

        Only a replicating store keeps wills (for the node that takes over a failed one's
        clients); a plain store has no place for them.
        """
        save = getattr(self.store, "save_will", None)
        if save is not None:
            save(session.client_id, will_fields(session, delay))

    # -- retained messages ---------------------------------------------------------------------

    def save_retained(self, message: Message) -> None:
        self.store.save_retained(stored_retained(message))

    def delete_retained(self, topic: str) -> None:
        self.store.delete_retained(topic)

    # -- a session as one thing ----------------------------------------------------------------

    @staticmethod
    def export(session: Session) -> SessionRecords:
        client_id = session.client_id
        queue = [(index, stored_message(p)) for index, p in enumerate(session.queue, 1)]
        inflight = [outbound_record(client_id, pid, o) for pid, o in session.inflight.items()]
        unconfirmed = session.unconfirmed or {}
        inflight += [api.StoredInflight(client_id, pid, "in", "pubrec",
                                        _stored_forwarded(unconfirmed.get(pid)))
                     for pid in session.inbound_qos2]
        seen = list(session.seen) if session.seen else None
        return SessionRecords(stored_session(session), queue, inflight, seen)

    @staticmethod
    def stored(session: Session) -> SessionRecords:
        """A session as the store holds it: queued messages at their positions, and what its
        client has had (not what is still queued or sent, which the rows say)."""
        records = Records.export(session)
        # QoS 1 deliveries in the window that kept their queue rows (send_queued)
        sent = {pid: o.pending for pid, o in session.inflight.items() if o.pending.seq}
        if sent:
            records.inflight = [i for i in records.inflight
                                if i.direction == "in" or i.packet_id not in sent]
            records.sent = {p.seq: pid for pid, p in sent.items()}
        records.queue = sorted(((p.seq, stored_message(p)) for p in (*sent.values(), *session.queue)
                                if p.seq), key=lambda row: row[0])
        records.seen = had(session)
        return records

    def write_all(self, session: Session, keep_positions: bool = False) -> None:
        """Store a session that arrived whole (from another node): record, queue, window.

        ``keep_positions``: the queue keeps the positions it had (a replica's), so that copies
        of one session on two nodes can be merged by position later. One transaction: nothing
        of it is held for an acknowledgement its client (not connected here yet) cannot send.
        """
        with self.atomic():
            self._write_all(session, keep_positions)

    def _write_all(self, session: Session, keep_positions: bool) -> None:
        self.save_session(session)
        for mid in had(session):  # what its client had on the other node: no row says it
            self.took(session, mid)
        for pending in session.queue:
            if keep_positions and pending.seq:
                self.restored_seq(pending.seq)
                self.store.enqueue(session.client_id, pending.seq, stored_message(pending))
            else:
                self.enqueue(session, pending)
        for pid, outbound in session.inflight.items():
            pending = outbound.pending
            if pending.seq and self._send_queued is not None:  # sent from its queue row
                if keep_positions:
                    self.restored_seq(pending.seq)
                    self.store.enqueue(session.client_id, pending.seq, stored_message(pending))
                else:
                    self.enqueue(session, pending)
                if self._send_queued(session.client_id, pending.seq, pid) is not False:
                    continue
                self.dequeue(session, pending)  # declined: an in-flight row after all
            pending.seq = 0  # its row is an in-flight one
            self.store.save_inflight(outbound_record(session.client_id, pid, outbound))
        unconfirmed = session.unconfirmed or {}
        for pid in session.inbound_qos2:
            self.received_qos2(session, pid, unconfirmed.get(pid))
