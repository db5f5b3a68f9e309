"""What the broker keeps across restarts, in the shape every persistence backend stores it.

These records are plain data: the broker builds them, a backend writes and reads them back.
Properties travel as the encoded MQTT 5 property block (bytes), so a backend never needs the codec.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = ["NEVER_EXPIRES", "Direction", "PersistenceError", "SessionStore", "Snapshot",
           "StoredInflight", "StoredMessage", "StoredSession", "StoredSubscription"]

NEVER_EXPIRES = 0xFFFFFFFF


class PersistenceError(Exception):
    """A session store could not open, or could not make a write durable.

    The one exception a :class:`SessionStore` raises for a failure of its storage; put the
    underlying error (``sqlite3.Error``, ``OSError``, a driver's error) in ``__cause__``
    (``raise PersistenceError(...) from exc``). The broker never acknowledges what a failed
    ``commit`` should have made durable: it closes that client's connection, and the client
    sends it again.
    """


@dataclass(slots=True)
class StoredMessage:
    """An application message as a session queue, an in-flight slot or the retained store has it."""

    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    properties: bytes = b""  # encoded MQTT 5 PUBLISH properties, without the length prefix
    expiry_at: float | None = None  # Unix time after which the message is dropped; None: never
    publisher_id: str = ""  # the client id that published it (for "no local")
    # Its identity in a cluster (API 1.5): the node that routed it first and its serial there.
    # A session that took it once takes no copy of it again. "" and 0: none (a single node,
    # or a store that does not keep them: such a message is never taken for a copy).
    origin: str = ""
    serial: int = 0


@dataclass(slots=True, frozen=True)
class StoredSubscription:
    """One subscription of a persistent session, with its MQTT 5 options."""

    topic_filter: str  # as the client sent it, "$share/group/filter" included
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    subscription_id: int | None = None


@dataclass(slots=True)
class StoredSession:
    """A persistent session: one that outlives its connection."""

    client_id: str
    protocol_version: int
    expiry_interval: int  # seconds after disconnect; NEVER_EXPIRES for v3 persistent sessions
    disconnected_at: float | None = None  # Unix time; None while connected
    subscriptions: dict[str, StoredSubscription] = field(default_factory=dict)


Direction = Literal["out", "in"]


@dataclass(slots=True)
class StoredInflight:
    """A QoS 1/2 exchange not yet finished.

    out: the node sent PUBLISH (state "publish") or got PUBREC and sent PUBREL (state "pubrel").
    in:  the node got a QoS 2 PUBLISH, routed it, sent PUBREC and waits for PUBREL (state "pubrec";
         message is None because routing already happened).
    """

    client_id: str
    packet_id: int
    direction: Direction
    state: Literal["publish", "pubrel", "pubrec"]
    message: StoredMessage | None = None


@dataclass(slots=True)
class Snapshot:
    """Everything a backend holds, read once when the node starts."""

    sessions: dict[str, StoredSession] = field(default_factory=dict)
    queues: dict[str, list[tuple[int, StoredMessage]]] = field(default_factory=dict)  # by seq
    inflight: dict[str, list[StoredInflight]] = field(default_factory=dict)
    retained: dict[str, StoredMessage] = field(default_factory=dict)
    # API 1.6: what ``remember_taken`` kept, by client, oldest first.
    taken: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    # API 1.8: the queued messages ``send_queued`` marked, by client: seq -> packet id. They
    # are in ``queues`` too, at their positions.
    sent: dict[str, dict[int, int]] = field(default_factory=dict)


class SessionStore(Protocol):
    """The storage behind persistent sessions and retained messages.

    Write methods are synchronous and cheap: they append to the pending batch and never touch the
    disk on the caller's thread. ``commit`` resolves once every write made before the call is
    durable; one disk sync covers all of them (group commit). A write that a later write cancels
    before the batch is flushed may never hit the disk. The broker calls every method from its
    event loop.

    Optional, since API 1.8: ``send_queued(client_id, seq, packet_id)``. The queued message at
    ``seq`` was sent to its client as ``packet_id`` (QoS 1): it keeps its row and position until
    acknowledged (``dequeue``), and :attr:`Snapshot.sent` gives the packet id back, so that a
    restart sends it again under the same id. The broker does not wait for this write: after a
    crash before it is durable, the message is sent again as a new one. Without the method the
    broker writes ``dequeue`` and ``save_inflight`` (the message a second time) instead.
    """

    async def open(self) -> Snapshot:
        """Open the storage and read everything it holds, once, when the node starts.

        :raises PersistenceError: the storage cannot be opened or read (the node does not
            start, and says why).
        """
        ...

    async def close(self) -> None:
        """Write what is pending and release the storage (the node stops).

        :raises PersistenceError: the last batch could not be made durable.
        """
        ...

    def save_session(self, session: StoredSession) -> None:
        """Insert or replace a session's record (its subscriptions included): the client
        connected, subscribed, unsubscribed or disconnected."""
        ...

    def save_subscription(self, client_id: str, subscription: StoredSubscription) -> None:
        """Add or replace one subscription of a stored session (a SUBSCRIBE).

        Costs one write whatever the number of subscriptions the session holds.

        .. versionadded:: 1.1
        """
        ...

    def delete_subscription(self, client_id: str, topic_filter: str) -> None:
        """Remove one subscription of a stored session (an UNSUBSCRIBE).

        .. versionadded:: 1.1
        """
        ...

    def delete_session(self, client_id: str) -> None:
        """The session ended (expired, or a clean start replaced it): its record, queue and
        in-flight exchanges go."""
        ...

    def enqueue(self, client_id: str, seq: int, message: StoredMessage) -> None:
        """A QoS 1/2 message waits for an offline or busy client at queue position ``seq``
        (positions grow; a position is never reused).

        In a cluster, a client id that starts with U+0000 (which no MQTT client id can hold)
        is a queue of messages the node keeps for another node that has not acknowledged them;
        it has no session record. Keep its rows like any queue's and return them in
        :attr:`Snapshot.queues`."""
        ...

    def dequeue(self, client_id: str, seq: int) -> None:
        """The message at ``seq`` left the queue (sent, expired or dropped)."""
        ...

    def save_inflight(self, inflight: StoredInflight) -> None:
        """Insert or replace an unfinished QoS 1/2 exchange; replacing keeps its place in the
        order exchanges started (the order of resends after a reconnect)."""
        ...

    def delete_inflight(self, client_id: str, packet_id: int, direction: Direction) -> None:
        """The exchange finished (PUBACK, PUBCOMP, or PUBREL for an inbound QoS 2 message)."""
        ...

    def save_retained(self, message: StoredMessage) -> None:
        """Set the retained message of ``message.topic``."""
        ...

    def delete_retained(self, topic: str) -> None:
        """Clear the retained message of ``topic``."""
        ...

    def remember_taken(self, client_id: str, origin: str, serial: int) -> None:
        """A session's client completed a QoS 2 delivery of the message with this cluster
        identity (PUBCOMP), or a merge said it had it: its in-flight row goes, and the identity
        is kept instead, so that a copy of the message arriving after a restart (a healed
        split, a rescue) is not delivered as a new one. A store may keep only the newest few
        thousand per client; ``delete_session`` drops them. Optional: a store without it
        works, and may then let a QoS 2 message reach a session twice after a restart that
        follows a split.

        .. versionadded:: 1.6
        """
        ...

    def atomic(self) -> AbstractContextManager[None]:
        """A context in which the writes made go to the disk together or not at all.

        The broker groups writes that must not be split by a crash (a delivery leaving the queue
        for the in-flight window; an inbound QoS 2 message routed and its packet id kept).
        A store that makes every write durable on its own may return ``nullcontext()``.

        .. versionadded:: 1.1
        """
        ...

    async def commit(self) -> None:
        """Resolve once every write made before this call is durable (a write that a later
        one cancelled, such as an enqueue and its dequeue, need never be written).

        :raises PersistenceError: the batch could not be written; its writes stay pending and
            are retried. The broker then acknowledges nothing that depended on them.
        """
        ...
