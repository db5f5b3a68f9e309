"""One slotted dataclass per MQTT control packet; fields are in the units of the specification."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ._types import PacketType, Properties

__all__ = [
    "Auth",
    "ConnAck",
    "Connect",
    "Disconnect",
    "Packet",
    "PingReq",
    "PingResp",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "SubAck",
    "Subscribe",
    "SubscriptionRequest",
    "UnsubAck",
    "Unsubscribe",
    "Will",
]


@dataclass(slots=True)
class Will:
    """The will message carried by CONNECT."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Connect:
    """`protocol_name` is informational: the encoder writes the name that matches the level."""

    packet_type: ClassVar[PacketType] = PacketType.CONNECT

    client_id: str
    protocol_version: int = 4
    clean_start: bool = True
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = field(default_factory=dict)
    protocol_name: str = "MQTT"


@dataclass(slots=True)
class ConnAck:
    """In MQTT 3.x `reason_code` is the CONNACK return code (`ConnectReturnCode`)."""

    packet_type: ClassVar[PacketType] = PacketType.CONNACK

    session_present: bool = False
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Publish:
    """`topic` may be "" in MQTT 5 when a TOPIC_ALIAS property names it."""

    packet_type: ClassVar[PacketType] = PacketType.PUBLISH

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubAck:
    packet_type: ClassVar[PacketType] = PacketType.PUBACK

    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubRec:
    packet_type: ClassVar[PacketType] = PacketType.PUBREC

    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubRel:
    packet_type: ClassVar[PacketType] = PacketType.PUBREL

    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubComp:
    packet_type: ClassVar[PacketType] = PacketType.PUBCOMP

    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class SubscriptionRequest:
    """One topic filter of SUBSCRIBE with its subscription options."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    packet_type: ClassVar[PacketType] = PacketType.SUBSCRIBE

    packet_id: int
    subscriptions: list[SubscriptionRequest]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class SubAck:
    packet_type: ClassVar[PacketType] = PacketType.SUBACK

    packet_id: int
    reason_codes: list[int]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Unsubscribe:
    packet_type: ClassVar[PacketType] = PacketType.UNSUBSCRIBE

    packet_id: int
    topic_filters: list[str]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class UnsubAck:
    """MQTT 3.x UNSUBACK carries no reason codes on the wire; they decode as []."""

    packet_type: ClassVar[PacketType] = PacketType.UNSUBACK

    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PingReq:
    packet_type: ClassVar[PacketType] = PacketType.PINGREQ


@dataclass(slots=True)
class PingResp:
    packet_type: ClassVar[PacketType] = PacketType.PINGRESP


@dataclass(slots=True)
class Disconnect:
    packet_type: ClassVar[PacketType] = PacketType.DISCONNECT

    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Auth:
    packet_type: ClassVar[PacketType] = PacketType.AUTH

    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


Packet = (
    Connect | ConnAck | Publish | PubAck | PubRec | PubRel | PubComp | Subscribe | SubAck
    | Unsubscribe | UnsubAck | PingReq | PingResp | Disconnect | Auth
)  # fmt: skip
