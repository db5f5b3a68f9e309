"""One client's session as state: subscriptions, the queue, the QoS window, the will.

A :class:`Session` outlives its connections (when its expiry interval is above 0). It holds only
data, so it can be exported, replicated and restored as one thing (``_records.py`` maps it to the
store's records); the rules that change it live with their owners: the outbound window in
``_outbox.py``, expiry and wills in ``_expiry.py``, the inbound flows in ``_channel.py``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hive_core.persistence import NEVER_EXPIRES

if TYPE_CHECKING:
    from hive_core.broker._message import Message
    from hive_core.mqtt import Will
    from hive_ext_api import ClientInfo


class Link(Protocol):
    """A session's live connection, as the broker sees it (a :class:`Channel` is one).

    ``out`` collects encoded packets until the broker's batched flush writes them; the broker
    appends to it directly on the QoS 0 hot path.
    """

    out: list[bytes]
    version: int
    closed: bool
    congested: bool
    send_window: int
    max_out_packet: int
    out_alias_max: int
    outbound_aliases: dict[str, int]
    info: ClientInfo | None
    outbound_chain: Any  # the async outbound interceptor step in progress, or None
    keep_alive: int

    def send(self, data: bytes) -> None: ...

    def send_after_commit(self, data: bytes, durable: bool = True) -> None:
        """Send once the store has made durable what ``data`` depends on."""
        ...

    def close(self, reason: int | None = None, reason_string: str | None = None) -> None: ...

    def client_info(self) -> ClientInfo: ...


@dataclass(slots=True, eq=False)
class Subscription:
    session: Session
    topic_filter: str  # the filter as the client sent it (with "$share/group/" when shared)
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    subscription_id: int | None = None
    share_group: str | None = None


@dataclass(slots=True)
class Pending:
    """A delivery waiting for room in the window (or for the client to come back)."""

    message: Message
    qos: int
    subscription_ids: tuple[int, ...] | None
    retain: bool
    seq: int = 0  # position in the persistent queue; 0 when not persisted


@dataclass(slots=True)
class Outbound:
    """A QoS 1/2 delivery the client has not finished acknowledging."""

    pending: Pending
    state: str = "publish"  # "publish" until PUBREC, then "pubrel" (QoS 2); "held": not resent yet


class _Empty:
    """Mutators of a shared empty container: none may add to it (a bug, not a no-op)."""

    __slots__ = ()

    def _refuse(self, *args: Any) -> None:
        raise TypeError("this empty container is shared by sessions: add through the Session")

    append = appendleft = extend = extendleft = insert = add = update = _refuse
    __iadd__ = __ior__ = __ixor__ = symmetric_difference_update = _refuse
    __setitem__ = setdefault = _refuse

    def __copy__(self) -> Any:  # a copy is the shared empty again, not a new one
        return self

    def __deepcopy__(self, memo: Any) -> Any:
        return self

    def __reduce__(self) -> Any:
        return "NO_QUEUE" if isinstance(self, deque) else "NO_IDS" if isinstance(self, set) \
            else "NO_OUTPUT" if isinstance(self, list) else "NO_ENTRIES"


class _NoQueue(_Empty, deque):  # type: ignore[misc]
    __slots__ = ()


class _NoIds(_Empty, set):  # type: ignore[misc]
    __slots__ = ()


class _NoEntries(_Empty, dict):  # type: ignore[misc]
    __slots__ = ()


class _NoOutput(_Empty, list):  # type: ignore[misc]
    __slots__ = ()


NO_QUEUE: deque[Any] = _NoQueue()
NO_IDS: set[int] = _NoIds()
NO_ENTRIES: dict[Any, Any] = _NoEntries()
NO_OUTPUT: list[bytes] = _NoOutput()  # a link with nothing to write (see Link.out)


class Session:
    """Everything MQTT keeps for one client id between connections."""

    __slots__ = (
        "client_id", "connection", "disconnected_at", "expiry_interval", "inbound_qos2",
        "inflight", "next_packet_id", "protocol_version", "queue", "seen", "stored",
        "subscriptions", "taken_over", "unconfirmed", "will",
    )

    def __init__(self, client_id: str, protocol_version: int, expiry_interval: int,
                 stored: bool = True) -> None:
        self.client_id = client_id
        self.protocol_version = protocol_version
        self.expiry_interval = expiry_interval
        self.connection: Link | None = None
        # Shared read-only empties until first used (subscribed(), queued(), window(),
        # received_qos2()): a deque's first block is 600 bytes, an empty set 200 and a dict
        # 64, and most connections never use some of them.
        self.subscriptions: dict[str, Subscription] = NO_ENTRIES
        self.queue: deque[Pending] = NO_QUEUE
        self.inflight: dict[int, Outbound] = NO_ENTRIES
        self.inbound_qos2: set[int] = NO_IDS
        # Of those, the messages whose forwards to other nodes waited for their record
        # (cluster/_forwarding.py HeldForwards): their records carry them until the forwards are
        # acknowledged, for a node that takes the session over. None until the first.
        self.unconfirmed: dict[int, Message] | None = None
        self.next_packet_id = 1
        self.disconnected_at: float | None = None
        self.will: Will | None = None
        # The identities of the messages from other nodes (or routed across the cluster)
        # this session took, newest last (see _handover.py); made on first use.
        self.seen: dict[tuple[str, int], None] | None = None
        # Taken over from a failed node's replica, and no client connected to it here since:
        # what another copy says its client did meanwhile (a split) is newer than this.
        self.taken_over = False
        # The store may hold a record of it (False: a clean session that never had one, whose
        # end needs no delete written).
        self.stored = stored

    def subscribed(self) -> dict[str, Subscription]:
        """The subscriptions, to add to: made on the first one."""
        subscriptions = self.subscriptions
        if subscriptions is NO_ENTRIES:
            subscriptions = self.subscriptions = {}
        return subscriptions

    def window(self) -> dict[int, Outbound]:
        """What was sent and not finished, to add to: made on the first QoS 1/2 delivery."""
        inflight = self.inflight
        if inflight is NO_ENTRIES:
            inflight = self.inflight = {}
        return inflight

    def queued(self) -> deque[Pending]:
        """The queue, to add to: made on the first message queued."""
        queue = self.queue
        if queue is NO_QUEUE:
            queue = self.queue = deque()
        return queue

    def received_qos2(self, packet_id: int, forwarded: Message | None = None) -> None:
        """The client's QoS 2 PUBLISH ``packet_id`` was routed: its PUBREL is awaited.
        ``forwarded``: its forwards to other nodes wait for its record (``unconfirmed``)."""
        ids = self.inbound_qos2
        if ids is NO_IDS:
            ids = self.inbound_qos2 = set()
        ids.add(packet_id)
        if forwarded is not None:
            self.unconfirmed = self.unconfirmed or {}
            self.unconfirmed[packet_id] = forwarded

    @property
    def persistent(self) -> bool:
        """Outlives its connection, so its state goes to the store."""
        return self.expiry_interval > 0

    @property
    def never_expires(self) -> bool:
        return self.expiry_interval == NEVER_EXPIRES

    def allocate_packet_id(self) -> int:
        pid = self.next_packet_id
        inflight = self.inflight
        while pid in inflight:
            pid = pid % 65535 + 1
        self.next_packet_id = pid % 65535 + 1
        return pid

    def clear(self) -> None:
        """Forget subscriptions, queue and in-flight state (the session ends)."""
        self.subscriptions.clear()
        self.queue = NO_QUEUE
        self.inflight.clear()
        self.inbound_qos2 = NO_IDS
        self.unconfirmed = None
