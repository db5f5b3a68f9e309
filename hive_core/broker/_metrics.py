"""What one node's broker counts: connections, messages in and out, what it had to drop."""

from __future__ import annotations

from dataclasses import dataclass, field

from hive_core.broker._overload import OverloadStats


@dataclass(slots=True)
class BrokerMetrics:
    connections_accepted: int = 0
    protocol_errors: int = 0
    messages_in: int = 0
    messages_out: int = 0
    messages_in_by_qos: list[int] = field(default_factory=lambda: [0, 0, 0])  # index: QoS
    messages_out_by_qos: list[int] = field(default_factory=lambda: [0, 0, 0])
    messages_dropped: int = 0  # all reasons together
    dropped: dict[str, int] = field(default_factory=dict)  # by reason (see DROP_REASONS)
    messages_queued: int = 0
    receive_maximum_throttled: int = 0  # times a client sent past its receive maximum
    proxy_protocol_refused: int = 0  # connections closed for a missing or bad PROXY header
    handover_duplicates_skipped: int = 0  # reached a moved session directly and in its tail

    def count_drop(self, reason: str) -> int:
        """One more message dropped for ``reason``: how many so far for it."""
        self.messages_dropped += 1
        count = self.dropped[reason] = self.dropped.get(reason, 0) + 1
        return count


DROP_REASONS = {
    "queue-full": "the subscriber's queue was full",
    "expired": "its message expiry interval passed before delivery",
    "too-large": "it is larger than the maximum packet size the subscriber accepts",
    "extension": "an outbound interceptor stopped it",
    "invalid-topic": "an outbound interceptor gave it an invalid topic",
    "session-gone": "its session ended while it moved to another node",
}
"""Why the node drops a message for a subscriber (the keys of ``BrokerMetrics.dropped``)."""


@dataclass(slots=True, frozen=True)
class BrokerStats:
    """A node's broker at one moment: its counters and the sizes of what it holds."""

    metrics: BrokerMetrics
    connections_current: int
    sessions: int
    retained_messages: int
    subscriptions: int = 0  # of every session here, shared ones included
    queued_messages: int = 0  # waiting in the sessions' queues
    overload: OverloadStats | None = None  # None: <overload-protection> disabled
