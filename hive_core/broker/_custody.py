"""Custody of this node's sessions toward the cluster: handing them over, taking them in.

A session moves between nodes when its client connects elsewhere (:meth:`export_session` here,
:meth:`fetch_session_elsewhere` there), is taken from a failed node's replica
(:meth:`adopt_sessions`, :meth:`adopt_wills`), or meets a copy of itself after a split (the
merges: :meth:`merge_queue`, :meth:`merge_window`). :class:`SessionCustody` keeps the one piece
of state these need beyond the broker's session registry: the sessions held for a handover
until the other node confirms or declines. The cluster reaches it through the broker's
``custody`` (the :class:`~hive_core.broker.SessionHolder` and
:class:`~hive_core.broker.ReplicaSource` roles).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from hive_core.broker._expiry import SessionClock
from hive_core.broker._handover import MessageId, had, takes
from hive_core.broker._merge import merge_had, merge_window
from hive_core.broker._metrics import BrokerMetrics
from hive_core.broker._outbox import Outbox
from hive_core.broker._ports import ClusterPort, Queued, QueuedRecord, SessionUnavailable
from hive_core.broker._records import (
    Records,
    SessionRecords,
    outbound_record,
    pending_from,
    session_from,
    stored_message,
    will_fields,
    will_from,
)
from hive_core.broker._session import Session, Subscription
from hive_core.mqtt import ReasonCode as RC
from hive_core.persistence import StoredInflight

log = logging.getLogger("hive.broker")


class SessionRegistry(Protocol):
    """What the custody asks of the broker that owns the sessions (``broker/_broker.py``)."""

    sessions: dict[str, Session]
    records: Records
    outbox: Outbox
    metrics: BrokerMetrics
    clock: SessionClock
    cluster: ClusterPort | None

    def flush(self) -> None: ...

    def adopt(self, session: Session, now: float) -> None: ...

    def end_session(self, session: Session, deleted: bool = True) -> None: ...

    def publish_will(self, session: Session) -> None: ...

    def remove_from_tree(self, subscription: Subscription) -> None: ...


class SessionCustody:
    """The broker's sessions as the cluster moves them (see the module docstring)."""

    def __init__(self, broker: SessionRegistry) -> None:
        self.broker = broker
        # Sessions another node is taking over: (session, its queue when exported) until the
        # other node confirms or declines (release_session).
        self._held: dict[str, tuple[Session, set[int]]] = {}

    def sessions_elsewhere(self) -> bool:
        """Whether a CONNECT must first ask other nodes for its session."""
        return self.broker.cluster is not None and self.broker.cluster.has_peers

    async def fetch_session_elsewhere(self, client_id: str) -> None:
        """Before a CONNACK in a cluster: bring the client's session here from its node.
        :class:`SessionUnavailable` (the client is refused, not given an empty session) when
        that node does not hand it over in time, or a merge meanwhile kept another copy."""
        cluster = self.broker.cluster
        if cluster is None or not cluster.has_peers:
            return
        handover = await cluster.fetch_session(client_id)
        if handover is None:
            return
        try:
            self.import_session(handover.records)
            await self.broker.records.commit()
        except BaseException:
            handover.decline()
            raise
        if client_id not in self.broker.sessions:  # given up for a newer copy while it was stored
            handover.decline()  # the node that handed it over keeps it: the client resumes there
            raise SessionUnavailable("a merge kept another node's copy of the session")
        handover.confirm()

    def taken_over_elsewhere(self, client_id: str) -> None:
        """The client connected on another node, which owns its session now: end it here."""
        session = self.broker.sessions.get(client_id)
        if session is None or client_id in self._held:
            return  # a session being handed over ends when the new node confirms it
        if session.connection is not None:
            log.info("client %r connected on another node: closing it here", client_id)
            session.connection.close(RC.SESSION_TAKEN_OVER,
                                     "another connection took the session over")
            session = self.broker.sessions.get(client_id)  # closing ends a session with expiry 0
        if session is not None:
            self.broker.end_session(session, deleted=False)

    def owned_sessions(self) -> list[str]:
        return list(self.broker.sessions)

    def has_session(self, client_id: str) -> bool:
        """Whether this node holds a session of ``client_id`` (connected or not)."""
        return client_id in self.broker.sessions

    def filters_of(self, client_id: str) -> list[str]:
        session = self.broker.sessions.get(client_id)
        return list(session.subscriptions) if session is not None else []

    def is_connected(self, client_id: str) -> bool:
        session = self.broker.sessions.get(client_id)
        return session is not None and session.connection is not None

    def export_session(self, client_id: str) -> SessionRecords | None:
        """The state of a session another node takes over; None when this node has none.

        The client's connection here closes, but the session stays, held, until the other
        node confirms it has stored the copy (:meth:`release_session`): a handover that fails
        half way loses nothing.
        """
        session = self.broker.sessions.get(client_id)
        if session is None:
            return None
        if session.connection is not None:
            log.info("client %r connected on another node: its session moves there", client_id)
            session.connection.close(RC.SESSION_TAKEN_OVER,
                                     "another connection took the session over")
            session = self.broker.sessions.get(client_id)  # closing ends a session with expiry 0
            if session is None:
                return None
        self.broker.clock.cancel_will(client_id)  # the client is back (elsewhere): no will
        if session.will is not None:
            session.will = None
            self.broker.records.will(session)
        self._held[client_id] = (session, {id(p) for p in session.queue})
        return self.broker.records.export(session)

    def release_session(self, client_id: str, taken: bool) -> list[Queued]:
        """End a handover: forget the session if the other node ``taken`` it, else keep it.

        Returns what was queued for it here since it was exported, for the new node.
        """
        held = self._held.pop(client_id, None)
        if held is None:
            return []
        session, exported = held
        if not taken or self.broker.sessions.get(client_id) is not session \
                or session.connection is not None:
            return []  # not taken, or the client came back here meanwhile: it stays
        tail = [(stored_message(p), p.message.mid) for p in session.queue
                if id(p) not in exported]
        self.broker.end_session(session, deleted=False)
        return tail

    def import_session(self, records: SessionRecords, keep_positions: bool = False) -> None:
        """Take over a session another node handed over (before this node's CONNACK).

        A copy here that no client uses (one that lost a merge to the node handing the session
        over, and waited to be dropped) is folded in, as its MERGE_QUEUE would have been: its
        queue but for what the imported session took, what its client had, its window."""
        client_id = records.session.client_id
        existing = self.broker.sessions.get(client_id)
        stale = None
        if existing is not None:
            if existing.connection is not None:
                return
            stale = ([(m, mid) for _seq, m, mid, _rescued in
                      self.queued_records(client_id, with_window=False)],
                     self.taken_identities(client_id), self.inbound_qos2(client_id),
                     self.window_records(client_id))
            self.broker.end_session(existing, deleted=False)
        now = time.time()
        session = session_from(records, now)
        self.broker.adopt(session, now)
        self.broker.records.write_all(session, keep_positions)
        if stale is not None:
            queue, taken, inbound, window = stale
            if queue or taken or inbound:
                self.merge_queue(client_id, queue, taken, inbound)
            if window:
                self.merge_window(client_id, window)

    def append_handed_over(self, client_id: str, messages: list[Queued]) -> None:
        """What the old node queued for a session while handing it over: queue it here,
        but not what the session took already (it reached this node directly as well)."""
        session = self.broker.sessions.get(client_id)
        for stored, mid in messages:
            pending = pending_from(stored)
            pending.message.mid = mid
            if session is None:
                count = self.broker.metrics.count_drop("session-gone")
                self.broker.outbox.drop_warning(pending, client_id, "session-gone", count)
                continue
            if not takes(session, mid):
                self.broker.metrics.handover_duplicates_skipped += 1
                continue
            self.broker.outbox.deliver(session, pending)
        self.broker.flush()

    def queued_records(self, client_id: str, with_window: bool = True) -> list[QueuedRecord]:
        """The queue of a session (``with_window``: after what was sent and not acknowledged):
        position, record, identity and rescue of each message."""
        session = self.broker.sessions.get(client_id)
        if session is None:
            return []
        # Sent and not acknowledged first (a PUBREC counts: the client has it): they are
        # older than the queue, and the client may never have had them.
        # One sent straight from the window has no queue position: -1, which no mark covers.
        sent = [(o.pending.seq or -1, o.pending) for o in session.inflight.values()
                if o.state != "pubrel"] if with_window else []
        return [(seq, stored_message(p), p.message.mid, p.message.rescued)
                for seq, p in (*sent, *((p.seq, p) for p in session.queue)) if seq]

    def window_records(self, client_id: str) -> list[StoredInflight]:
        """A session's window: what was sent its client and is not finished, by packet id."""
        session = self.broker.sessions.get(client_id)
        if session is None:
            return []
        return [outbound_record(client_id, pid, o) for pid, o in session.inflight.items()]

    def taken_identities(self, client_id: str) -> list[MessageId]:
        session = self.broker.sessions.get(client_id)
        return had(session) if session is not None else []

    def inbound_qos2(self, client_id: str) -> list[int]:
        session = self.broker.sessions.get(client_id)
        return sorted(session.inbound_qos2) if session is not None else []

    def merge_window(self, client_id: str, window: list[StoredInflight]) -> None:
        """The window of a dropped copy of this session (broker/_merge.py)."""
        session = self.broker.sessions.get(client_id)
        if client_id in self._held:
            # Being handed over: the export has gone, and only what is queued since goes
            # after it (the tail). What that copy sent and its client did not finish goes
            # there as new deliveries (each taken once by its identity); one its client
            # holds already (PUBREC) has no way there, and is not sent again.
            self.append_handed_over(client_id, [
                (record.message, (record.message.origin, record.message.serial)
                 if record.message.serial else None)
                for record in window if record.state != "pubrel" and record.message])
            return
        if session is not None:
            merge_window(self.broker.outbox, self.broker.records, session, window)
            self.broker.flush()

    def merge_queue(self, client_id: str, messages: list[Queued],
                    taken: list[MessageId] | None = None,
                    inbound: list[int] | None = None) -> None:
        """A dropped copy's queue, and what its client had and sent (broker/_merge.py)."""
        session = self.broker.sessions.get(client_id)
        if session is not None:
            merge_had(self.broker.records, self.broker.metrics, session, taken, inbound)
        self.append_handed_over(client_id, messages)

    def replica_records(self) -> list[SessionRecords]:
        """Every session the store holds, as records (with their queue positions): what a
        node's new backup starts from."""
        return [self.broker.records.stored(session) for session in self.broker.sessions.values()
                if session.expiry_interval > 0]

    def adopt_sessions(self, records: list[SessionRecords]) -> list[str]:
        """Sessions of a failed node, from its replica here: they are this node's now.

        A client connected here under the same id keeps its session; a copy held here takes
        the replica's messages in. Returns the client ids taken.
        """
        adopted = []
        for record in records:
            client_id = record.session.client_id
            existing = self.broker.sessions.get(client_id)
            if existing is not None and existing.connection is not None:
                continue
            if existing is not None:
                # A copy here already (a split, then the failed node kept it): both copies
                # hold messages the other lacks. This one stays and takes the replica's queue
                # and window, each message once (by identity).
                # What the failed node's client completed (its store's identities) goes first.
                self.merge_queue(client_id, [
                    (message, (message.origin, message.serial) if message.serial else None)
                    for _seq, message in record.queue], taken=record.seen)
                self.merge_window(client_id, [i for i in record.inflight if i.direction == "out"])
                existing.taken_over = True
                adopted.append(client_id)
                continue
            self.import_session(record, keep_positions=True)
            self.broker.sessions[client_id].taken_over = True
            adopted.append(client_id)
        return adopted

    def replica_wills(self) -> list[list[Any]]:
        """[client id, will fields] of every will here that has not gone out yet."""
        return [[s.client_id, fields] for s in self.broker.sessions.values()
                if (fields := will_fields(s, self.broker.clock.will_delay(s) if s.will else 0))]

    def adopt_wills(self, wills: list[list[Any]]) -> int:
        """Wills of a failed node's clients: each goes out at its time (at once for a client
        that was connected, unless it had a will delay), unless the client is back."""
        now = time.time()
        published = 0
        for client_id, fields in wills:
            will, delay, gone_at = will_from(fields)
            remaining = delay - (now - gone_at) if gone_at is not None else delay
            session = self.broker.sessions.get(client_id)
            if session is not None and session.connection is not None:
                continue  # it reconnected here meanwhile
            if session is None:  # a session that ended with its connection
                session = Session(client_id, 5, 0)
                session.will = will
                self.broker.publish_will(session)
                published += 1
                continue
            session.will = will
            if remaining <= 0:
                self.broker.publish_will(session)
                published += 1
            else:
                self.broker.clock.will_after(session, remaining)
                self.broker.records.will(session, remaining)
        return published

    def forget_sessions(self) -> None:
        """The node leaves and its sessions live on in the cluster: drop them here.

        The other nodes keep routing their subscriptions here until the BYE: what they send
        meanwhile goes to the node that takes the sessions over (TAKEN_OVER).
        """
        broker = self.broker
        cluster, broker.cluster = broker.cluster, None  # no FILTER_REMOVE, no SESSION_GONE
        for session in list(broker.sessions.values()):
            broker.clock.cancel_expiry(session.client_id)
            self.broker.clock.cancel_will(session.client_id)
            for subscription in session.subscriptions.values():
                self.broker.remove_from_tree(subscription)
            session.clear()
            del self.broker.sessions[session.client_id]
            self.broker.records.delete_session(session.client_id)
        self.broker.cluster = cluster
