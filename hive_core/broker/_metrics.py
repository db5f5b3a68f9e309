"""What one node's broker counts: connections, messages in and out, what it had to drop."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class BrokerMetrics:
    connections_accepted: int = 0
    protocol_errors: int = 0
    messages_in: int = 0
    messages_out: int = 0
    messages_dropped: int = 0
    messages_queued: int = 0
    receive_maximum_throttled: int = 0  # times a client sent past its receive maximum


@dataclass(slots=True, frozen=True)
class BrokerStats:
    """A node's broker at one moment: its counters and the sizes of what it holds."""

    metrics: BrokerMetrics
    connections_current: int
    sessions: int
    retained_messages: int
