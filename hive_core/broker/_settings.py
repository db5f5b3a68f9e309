"""The knobs one node's MQTT logic runs with, independent of how they were configured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

UNLIMITED = -1


@dataclass(slots=True, frozen=True)
class BrokerSettings:
    max_keep_alive: int = 65535
    allow_unlimited_keep_alive: bool = True
    max_session_expiry: int = 0xFFFFFFFF
    max_message_expiry: int = 0xFFFFFFFF + 1  # HiveMQ's default: above the field's range, so no cap
    max_packet_size: int = 268_435_460
    server_receive_maximum: int = 100
    receive_maximum_strategy: Literal["throttle", "disconnect"] = "disconnect"
    topic_alias_enabled: bool = True
    topic_alias_maximum: int = 5
    maximum_qos: int = 2
    max_queue_size: int = 1000
    queue_strategy: Literal["discard", "discard-oldest"] = "discard"
    inflight_window: int = 32
    retain_available: bool = True
    wildcard_subscriptions: bool = True
    shared_subscriptions: bool = True
    subscription_identifiers: bool = True
    max_connections: int = UNLIMITED
    max_client_id_length: int = 65535
    max_topic_length: int = 65535
    max_topic_levels: int = 200

    def topic_too_big(self, topic: str) -> str | None:
        """Why ``topic`` (a name or a filter) is past the node's limits, or None."""
        if len(topic) > self.max_topic_length:
            return f"topic longer than {self.max_topic_length} characters"
        if topic.count("/") >= self.max_topic_levels:
            return f"topic deeper than {self.max_topic_levels} levels"
        return None
    connect_timeout: float = 10.0  # seconds from TCP accept to a CONNECT
    max_pre_connect_size: int = 65536  # bytes a client may send before its CONNECT is accepted
    response_information: str = "hive/response/"
