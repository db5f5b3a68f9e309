"""The store behind ``<persistence><mode>in-memory``: the file store's semantics, in dicts.

Nothing survives the process, so ``open`` always finds an empty store and ``commit`` has nothing
to wait for.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace

from hive_ext_api import (
    Direction,
    Snapshot,
    StoredInflight,
    StoredMessage,
    StoredSession,
    StoredSubscription,
)

from ._batch import InflightKey, copy_session
from ._file_store import TAKEN_KEEP


class MemorySessionStore:
    def __init__(self) -> None:
        self._sessions: dict[str, StoredSession] = {}
        self._queues: dict[str, dict[int, StoredMessage]] = {}
        # Dicts keep insertion order: the order exchanges started, as the file store's rowid does.
        self._inflight: dict[str, dict[InflightKey, StoredInflight]] = {}
        self._retained: dict[str, StoredMessage] = {}
        self._taken: dict[str, dict[tuple[str, int], None]] = {}  # newest last
        self._sent: dict[str, dict[int, int]] = {}  # by client: seq -> packet id

    async def open(self) -> Snapshot:
        return Snapshot()

    async def close(self) -> None:
        pass

    def atomic(self) -> AbstractContextManager[None]:
        return nullcontext()  # every write is whole the moment it is made

    def save_session(self, session: StoredSession) -> None:
        self._sessions[session.client_id] = copy_session(session)

    def save_subscription(self, client_id: str, subscription: StoredSubscription) -> None:
        session = self._sessions.get(client_id)
        if session is not None:
            session.subscriptions[subscription.topic_filter] = subscription

    def delete_subscription(self, client_id: str, topic_filter: str) -> None:
        session = self._sessions.get(client_id)
        if session is not None:
            session.subscriptions.pop(topic_filter, None)

    def delete_session(self, client_id: str) -> None:
        self._sessions.pop(client_id, None)
        self._queues.pop(client_id, None)
        self._sent.pop(client_id, None)
        self._inflight.pop(client_id, None)
        self._taken.pop(client_id, None)

    def remember_taken(self, client_id: str, origin: str, serial: int) -> None:
        taken = self._taken.setdefault(client_id, {})
        taken[(origin, serial)] = None
        if len(taken) > TAKEN_KEEP:
            del taken[next(iter(taken))]

    def enqueue(self, client_id: str, seq: int, message: StoredMessage) -> None:
        self._queues.setdefault(client_id, {})[seq] = message
        self._unmark(client_id, seq)

    def send_queued(self, client_id: str, seq: int, packet_id: int) -> None:
        if seq in self._queues.get(client_id, ()):
            self._sent.setdefault(client_id, {})[seq] = packet_id

    def dequeue(self, client_id: str, seq: int) -> None:
        queue = self._queues.get(client_id)
        if queue is not None:
            queue.pop(seq, None)
            if not queue:
                del self._queues[client_id]
        self._unmark(client_id, seq)

    def _unmark(self, client_id: str, seq: int) -> None:
        sent = self._sent.get(client_id)
        if sent is not None and sent.pop(seq, None) is not None and not sent:
            del self._sent[client_id]

    def save_inflight(self, inflight: StoredInflight) -> None:
        exchanges = self._inflight.setdefault(inflight.client_id, {})
        exchanges[(inflight.packet_id, inflight.direction)] = inflight

    def delete_inflight(self, client_id: str, packet_id: int, direction: Direction) -> None:
        exchanges = self._inflight.get(client_id)
        if exchanges is not None:
            exchanges.pop((packet_id, direction), None)
            if not exchanges:
                del self._inflight[client_id]

    def save_retained(self, message: StoredMessage) -> None:
        self._retained[message.topic] = message

    def delete_retained(self, topic: str) -> None:
        self._retained.pop(topic, None)

    async def commit(self) -> None:
        pass

    def contents(self, now: float | None = None) -> Snapshot:
        """What a file store holding the same writes would load at ``now`` (default: the clock).

        Like a load, it leaves out queued and retained messages that expired before ``now``;
        and, as a load deletes them, it forgets the queued ones (a mark of one by a later
        ``send_queued`` would otherwise bring it back). A queued message marked sent stays:
        its delivery has started.
        """
        now = time.time() if now is None else now

        def live(message: StoredMessage) -> bool:
            return message.expiry_at is None or message.expiry_at >= now

        snapshot = Snapshot()
        snapshot.sessions = {c: copy_session(s) for c, s in self._sessions.items()}
        for client_id, queue in list(self._queues.items()):
            sent = self._sent.get(client_id, {})
            for seq in [s for s, m in queue.items() if not live(m) and s not in sent]:
                self.dequeue(client_id, seq)
            messages = [(seq, replace(m)) for seq, m in sorted(queue.items())]
            if messages:
                snapshot.queues[client_id] = messages
            if sent:
                snapshot.sent[client_id] = dict(sent)
        for client_id, exchanges in self._inflight.items():
            snapshot.inflight[client_id] = [replace(i) for i in exchanges.values()]
        snapshot.retained = {t: replace(m) for t, m in self._retained.items() if live(m)}
        snapshot.taken = {c: list(taken) for c, taken in self._taken.items()}
        return snapshot
