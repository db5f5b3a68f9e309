"""<mqtt> (protocol limits and features) and <restrictions> (connection limits)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_xml import element

from ._base import ConfigModel, Milliseconds, NonNegativeInt, PositiveInt, XmlBool

__all__ = [
    "FeatureSwitch",
    "InflightWindow",
    "KeepAlive",
    "MessageExpiry",
    "Mqtt",
    "Packets",
    "QualityOfService",
    "QueuedMessages",
    "ReceiveMaximum",
    "Restrictions",
    "SessionExpiry",
    "TopicAlias",
]

UInt16 = Annotated[int, Field(ge=1, le=65535)]


class QueuedMessages(ConfigModel, tag="queued-messages"):
    """Messages kept for an offline or slow client."""

    max_queue_size: PositiveInt = element(tag="max-queue-size", default=1000)
    """Messages kept per client at most; what comes beyond follows <strategy>."""
    strategy: Literal["discard", "discard-oldest"] = element(tag="strategy", default="discard")
    """When the queue is full: drop the new message, or drop the oldest queued one."""


class TopicAlias(ConfigModel, tag="topic-alias"):
    enabled: XmlBool = element(tag="enabled", default=True)
    """Whether MQTT 5 clients may use topic aliases."""
    max_per_client: UInt16 = element(tag="max-per-client", default=5)
    """Topic aliases a client may set up (the CONNACK's Topic Alias Maximum)."""


class MessageExpiry(ConfigModel, tag="message-expiry"):
    max_interval: PositiveInt = element(tag="max-interval", default=4294967296)
    """Seconds; the default (2**32) is beyond what MQTT can express, i.e. no expiry."""


class SessionExpiry(ConfigModel, tag="session-expiry"):
    max_interval: Annotated[int, Field(ge=0, le=4294967295)] = element(
        tag="max-interval", default=4294967295
    )
    """Seconds; 4294967295 means a session never expires."""


class Packets(ConfigModel, tag="packets"):
    max_packet_size: Annotated[int, Field(ge=1, le=268435460)] = element(
        tag="max-packet-size", default=268435460
    )
    """Bytes; a bigger packet from a client closes its connection (MQTT 5: 0x95)."""


class ReceiveMaximum(ConfigModel, tag="receive-maximum"):
    server_receive_maximum: UInt16 = element(tag="server-receive-maximum", default=100)
    """QoS 1/2 PUBLISHes a client may have waiting for their acknowledgement (announced in
    MQTT 5 CONNACKs)."""
    strategy: Literal["throttle", "disconnect"] = element(tag="strategy", default="disconnect")
    """Hive addition: what happens to a client that sends more. ``disconnect``: an MQTT 5
    client gets DISCONNECT with 0x93 (receive maximum exceeded), as MQTT 5 (3.3.4) says; an
    MQTT 3 client, never told a maximum, is throttled. ``throttle``: the node stops reading
    from the client until acknowledgements have gone out (nothing is refused or dropped), for
    clients that ignore the announced maximum, such as paho resending a backlog larger than
    it at once after a reconnect."""


class KeepAlive(ConfigModel, tag="keep-alive"):
    allow_unlimited: XmlBool = element(tag="allow-unlimited", default=True)
    """Whether a client may ask for keep-alive 0 (never time out)."""
    max_keep_alive: UInt16 = element(tag="max-keep-alive", default=65535)
    """Seconds; a client asking for more gets this (MQTT 5: Server Keep Alive)."""


class FeatureSwitch(ConfigModel):
    """An element holding only <enabled>, such as <shared-subscriptions>."""

    enabled: XmlBool = element(tag="enabled", default=True)
    """Whether the feature is on."""


class QualityOfService(ConfigModel, tag="quality-of-service"):
    max_qos: Annotated[int, Field(ge=0, le=2)] = element(tag="max-qos", default=2)
    """The highest QoS the node accepts and grants."""


class InflightWindow(ConfigModel, tag="inflight-window"):
    """Hive addition: outbound QoS 1/2 messages in flight per client.

    A v5 client's receive maximum lowers it for that client.
    """

    max_messages: UInt16 = element(tag="max-messages", default=32)
    """Outbound QoS 1 and 2 messages in flight per client at most."""


class Mqtt(ConfigModel, tag="mqtt"):
    queued_messages: QueuedMessages = element(default_factory=QueuedMessages)
    """Messages kept for offline or slow clients."""
    topic_alias: TopicAlias = element(default_factory=TopicAlias)
    """MQTT 5 topic aliases."""
    message_expiry: MessageExpiry = element(default_factory=MessageExpiry)
    """The longest message expiry interval granted."""
    session_expiry: SessionExpiry = element(default_factory=SessionExpiry)
    """The longest session expiry interval granted."""
    packets: Packets = element(default_factory=Packets)
    """The largest packet accepted."""
    receive_maximum: ReceiveMaximum = element(default_factory=ReceiveMaximum)
    """Flow control of what clients send."""
    keep_alive: KeepAlive = element(default_factory=KeepAlive)
    """The keep alive clients may ask for."""
    subscription_identifier: FeatureSwitch = element(
        tag="subscription-identifier", default_factory=FeatureSwitch
    )
    """Whether MQTT 5 clients may give subscription identifiers."""
    wildcard_subscriptions: FeatureSwitch = element(
        tag="wildcard-subscriptions", default_factory=FeatureSwitch
    )
    """Whether filters may hold + and #."""
    shared_subscriptions: FeatureSwitch = element(
        tag="shared-subscriptions", default_factory=FeatureSwitch
    )
    """Whether clients may subscribe to `$share/<group>/<filter>`."""
    quality_of_service: QualityOfService = element(default_factory=QualityOfService)
    """The highest QoS."""
    retained_messages: FeatureSwitch = element(
        tag="retained-messages", default_factory=FeatureSwitch
    )
    """Whether retained messages are kept (off: MQTT 5 Retain Available 0)."""
    inflight_window: InflightWindow = element(default_factory=InflightWindow)
    """Outbound QoS 1 and 2 messages in flight per client."""


class Restrictions(ConfigModel, tag="restrictions"):
    max_connections: int = element(tag="max-connections", default=-1)
    """Clients connected to this node at once at most (0x97 beyond it); -1: unlimited."""
    max_client_id_length: UInt16 = element(tag="max-client-id-length", default=65535)
    """Characters; a longer client id is refused (0x85)."""
    max_topic_length: UInt16 = element(tag="max-topic-length", default=65535)
    """Characters; a longer topic or filter is refused."""
    max_topic_levels: int = element(tag="max-topic-levels", default=200, ge=1, le=32768)
    """Levels (``a/b/c`` has 3); a deeper topic (0x90) or filter (0x8F) is refused."""
    no_connect_idle_timeout: Milliseconds = element(tag="no-connect-idle-timeout", default=10000)
    """Milliseconds a new connection may take to send CONNECT before it is closed."""
    max_pre_connect_size: int = element(tag="max-pre-connect-size", default=65536, ge=16,
                                        le=268_435_460)
    """Bytes a client may send before its CONNECT is accepted (the CONNECT with its will and
    credentials, and what follows it while authentication runs); more is refused (0x95)."""
    incoming_bandwidth_throttling: NonNegativeInt = element(
        tag="incoming-bandwidth-throttling", default=0
    )
    """Bytes per second each client may send (reading pauses beyond it); 0: no limit."""

    @field_validator("max_connections")
    @classmethod
    def _unlimited_or_positive(cls, value: int) -> int:
        if value != -1 and value < 1:
            raise ValueError("expected -1 (unlimited) or a positive integer")
        return value

    @property
    def connection_limit(self) -> int | None:
        """max_connections, or None when unlimited."""
        return None if self.max_connections == -1 else self.max_connections
