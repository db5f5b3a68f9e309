"""The writes waiting for the next transaction, coalesced per key.

Each key (session, queued message, in-flight exchange, retained topic) holds only the last write
made to it since the batch began, so a batch costs at most one row per key however busy the key is.
A batch is touched only under the store's lock; it never copies a payload, it keeps a reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hive_ext_api import Direction, StoredInflight, StoredMessage, StoredSession, StoredSubscription

InflightKey = tuple[int, Direction]  # (packet_id, direction)


@dataclass(slots=True)
class QueueWrite:
    # None: delete the row (or, with packet_id, only mark the row on disk as sent)
    message: StoredMessage | None
    fresh: bool = False  # the row cannot be on disk yet, so a dequeue may simply forget the write
    packet_id: int | None = None  # sent to the client under this id (send_queued)
    number: int = 0  # the store's count of writes when this one was made (FileSessionStore)
    grouped: bool = False  # made in an atomic() block: it goes to the disk with the others


@dataclass(slots=True)
class InflightWrite:
    inflight: StoredInflight | None  # None: delete the row
    # Delete any stored row first, so the new one goes last: rows keep the order exchanges started.
    replace: bool = False
    fresh: bool = False  # no row of the exchange can be on disk, so its end may forget the write


def copy_session(session: StoredSession) -> StoredSession:
    """Freeze what the caller handed over; subscriptions is the only mutable part worth copying."""
    return replace(session, subscriptions=dict(session.subscriptions))


@dataclass(slots=True)
class PendingBatch:
    sessions: dict[str, StoredSession | None] = field(default_factory=dict)
    # Subscriptions added (or removed: None) on top of what the disk holds, by client and filter;
    # a session saved whole in this batch takes them into its own record instead.
    subscriptions: dict[str, dict[str, StoredSubscription | None]] = field(default_factory=dict)
    # Clients whose stored queue and in-flight rows go before anything else in the batch is written.
    purged: set[str] = field(default_factory=set)
    queues: dict[str, dict[int, QueueWrite]] = field(default_factory=dict)
    inflight: dict[str, dict[InflightKey, InflightWrite]] = field(default_factory=dict)
    retained: dict[str, StoredMessage | None] = field(default_factory=dict)
    # Identities of messages a session's client had (remember_taken), in the order they came.
    taken: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.sessions or self.subscriptions or self.purged or self.queues
                    or self.inflight or self.retained or self.taken)

    def save_session(self, session: StoredSession) -> None:
        self.sessions[session.client_id] = copy_session(session)
        self.subscriptions.pop(session.client_id, None)

    def save_subscription(self, client_id: str, subscription: StoredSubscription) -> None:
        if client_id in self.sessions:  # saved whole, or deleted, in this batch
            whole = self.sessions[client_id]
            if whole is not None:
                whole.subscriptions[subscription.topic_filter] = subscription
        else:
            self.subscriptions.setdefault(client_id, {})[subscription.topic_filter] = subscription

    def delete_subscription(self, client_id: str, topic_filter: str) -> None:
        if client_id in self.sessions:  # saved whole, or deleted, in this batch
            whole = self.sessions[client_id]
            if whole is not None:
                whole.subscriptions.pop(topic_filter, None)
        else:
            self.subscriptions.setdefault(client_id, {})[topic_filter] = None

    def delete_session(self, client_id: str) -> None:
        self.sessions[client_id] = None
        self.subscriptions.pop(client_id, None)
        self.purged.add(client_id)
        self.queues.pop(client_id, None)
        self.inflight.pop(client_id, None)
        self.taken.pop(client_id, None)

    def remember_taken(self, client_id: str, origin: str, serial: int) -> None:
        self.taken.setdefault(client_id, []).append((origin, serial))

    def enqueue(self, client_id: str, seq: int, message: StoredMessage, *, fresh: bool,
                number: int = 0, grouped: bool = False) -> None:
        queue = self.queues.setdefault(client_id, {})
        earlier = queue.get(seq)
        if earlier is not None and earlier.message is not None:
            fresh = earlier.fresh
        queue[seq] = QueueWrite(message, fresh or client_id in self.purged, number=number,
                                grouped=grouped)

    def send_queued(self, client_id: str, seq: int, packet_id: int) -> None:
        queue = self.queues.setdefault(client_id, {})
        earlier = queue.get(seq)
        if earlier is None:
            queue[seq] = QueueWrite(None, packet_id=packet_id)  # the row is on disk: mark it
        elif earlier.message is not None or earlier.packet_id is not None:
            earlier.packet_id = packet_id  # inserted (or marked) in this batch: one write
        # else dequeued already in this batch: nothing left to mark

    def dequeue(self, client_id: str, seq: int) -> None:
        queue = self.queues.setdefault(client_id, {})
        earlier = queue.get(seq)
        if earlier is not None and earlier.fresh:
            # Enqueued and dequeued in one batch: nothing reaches the disk, the payload is freed.
            del queue[seq]
            if not queue:
                del self.queues[client_id]
        else:
            queue[seq] = QueueWrite(None)

    def save_inflight(self, inflight: StoredInflight, *, fresh: bool = False) -> None:
        exchanges = self.inflight.setdefault(inflight.client_id, {})
        key = (inflight.packet_id, inflight.direction)
        earlier = exchanges.get(key)
        if earlier is None:
            fresh = fresh or inflight.client_id in self.purged  # purged first when written
            exchanges[key] = InflightWrite(inflight, fresh=fresh)
        elif earlier.inflight is None:
            del exchanges[key]  # deleted, then started again: it moves to the end
            exchanges[key] = InflightWrite(inflight, replace=True)
        else:
            exchanges[key] = InflightWrite(inflight, earlier.replace, earlier.fresh)

    def delete_inflight(self, client_id: str, packet_id: int, direction: Direction) -> None:
        exchanges = self.inflight.setdefault(client_id, {})
        key = (packet_id, direction)
        earlier = exchanges.pop(key, None)
        if earlier is not None and earlier.fresh:
            # Started and ended in one batch (a delivery acknowledged before the commit):
            # nothing reaches the disk.
            if not exchanges:
                del self.inflight[client_id]
            return
        exchanges[key] = InflightWrite(None)

    def save_retained(self, message: StoredMessage) -> None:
        self.retained[message.topic] = message

    def delete_retained(self, topic: str) -> None:
        self.retained[topic] = None

    def absorb(self, later: PendingBatch) -> None:
        """Apply ``later`` on top of this batch, as if its writes had been made here.

        Used when this batch failed to commit: the writes made meanwhile go into the same retry.
        """
        for client_id in later.purged:
            self.purged.add(client_id)
            self.queues.pop(client_id, None)
            self.inflight.pop(client_id, None)
            self.taken.pop(client_id, None)
        for client_id, session in later.sessions.items():
            self.sessions[client_id] = session
            self.subscriptions.pop(client_id, None)
        for client_id, subscription_writes in later.subscriptions.items():
            for topic_filter, subscription in subscription_writes.items():
                if subscription is None:
                    self.delete_subscription(client_id, topic_filter)
                else:
                    self.save_subscription(client_id, subscription)
        for client_id, writes in later.queues.items():
            queue = self.queues.setdefault(client_id, {})
            for seq, queue_write in writes.items():
                before = queue.get(seq)
                if queue_write.message is None and queue_write.packet_id is not None and \
                        before is not None:
                    if before.message is not None or before.packet_id is not None:
                        before.packet_id = queue_write.packet_id  # a mark on an insert or mark
                    # else a mark on a row this batch deletes: nothing left to mark
                else:
                    queue[seq] = queue_write
        for client_id, inflight_writes in later.inflight.items():
            exchanges = self.inflight.setdefault(client_id, {})
            for key, write in inflight_writes.items():
                earlier = exchanges.get(key)
                if earlier is None or earlier.inflight is None or write.replace:
                    exchanges.pop(key, None)
                    replace_row = write.replace or earlier is not None
                    exchanges[key] = InflightWrite(write.inflight, replace_row,
                                                   write.fresh and not replace_row)
                else:
                    exchanges[key] = InflightWrite(write.inflight, earlier.replace,
                                                   earlier.fresh)
        self.retained.update(later.retained)
        for client_id, identities in later.taken.items():
            self.taken.setdefault(client_id, []).extend(identities)
