"""The MQTT codec: bytes to packets and back for MQTT 3.1, 3.1.1 and 5.0, with no I/O."""

from ._decode import decode_packet
from ._encode import encode_packet, encode_publish
from ._errors import InsufficientData, MalformedPacket, MQTTError, PacketTooLarge, ProtocolError
from ._packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    UnsubAck,
    Unsubscribe,
    Will,
)
from ._properties import WILL_PROPERTIES, decode_properties, encode_properties
from ._stream import MAX_PACKET_SIZE, PacketDecoder
from ._topics import (
    parse_shared_subscription,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)
from ._types import (
    ConnectReturnCode,
    PacketType,
    Properties,
    PropertyId,
    ProtocolVersion,
    ReasonCode,
)
from ._wire import decode_variable_integer, encode_variable_integer

__all__ = [
    "MAX_PACKET_SIZE",
    "WILL_PROPERTIES",
    "Auth",
    "ConnAck",
    "Connect",
    "ConnectReturnCode",
    "Disconnect",
    "InsufficientData",
    "MQTTError",
    "MalformedPacket",
    "Packet",
    "PacketDecoder",
    "PacketTooLarge",
    "PacketType",
    "PingReq",
    "PingResp",
    "Properties",
    "PropertyId",
    "ProtocolError",
    "ProtocolVersion",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "ReasonCode",
    "SubAck",
    "Subscribe",
    "SubscriptionRequest",
    "UnsubAck",
    "Unsubscribe",
    "Will",
    "decode_packet",
    "decode_properties",
    "decode_variable_integer",
    "encode_packet",
    "encode_properties",
    "encode_publish",
    "encode_variable_integer",
    "parse_shared_subscription",
    "topic_matches",
    "validate_topic_filter",
    "validate_topic_name",
]
