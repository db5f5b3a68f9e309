"""One client's session: subscriptions, the queue of pending deliveries, the QoS window."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hive_core.persistence._model import NEVER_EXPIRES

if TYPE_CHECKING:
    from hive_core.broker._connection import ClientConnection
    from hive_core.broker._message import Message
    from hive_core.broker._topic_tree import Subscription
    from hive_core.mqtt import Will


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


class Session:
    __slots__ = (
        "client_id", "connection", "disconnected_at", "expiry_handle", "expiry_interval",
        "inbound_qos2", "inflight", "next_packet_id", "outbound_aliases", "protocol_version",
        "queue", "subscriptions", "will", "will_handle",
    )

    def __init__(self, client_id: str, protocol_version: int, expiry_interval: int) -> None:
        self.client_id = client_id
        self.protocol_version = protocol_version
        self.expiry_interval = expiry_interval
        self.connection: ClientConnection | None = None
        self.subscriptions: dict[str, Subscription] = {}
        self.queue: deque[Pending] = deque()
        self.inflight: dict[int, Outbound] = {}
        self.inbound_qos2: set[int] = set()
        self.next_packet_id = 1
        self.disconnected_at: float | None = None
        self.expiry_handle: asyncio.TimerHandle | None = None
        self.will: Will | None = None
        self.will_handle: asyncio.TimerHandle | None = None
        self.outbound_aliases: dict[str, int] = {}

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
