"""The MQTT codec: bytes to packets and back for MQTT 3.1, 3.1.1 and 5.0, with no I/O."""

from . import _packets
from ._decode import decode_packet
from ._encode import (
    PINGRESP,
    PUBACK,
    PUBCOMP,
    PUBREC,
    PUBREL,
    encode_ack,
    encode_packet,
    encode_publish,
    with_dup,
)
from ._errors import InsufficientData, MalformedPacket, MQTTError, PacketTooLarge, ProtocolError
from ._packets import *  # noqa: F403  (the packet classes, named once in _packets.__all__)
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
    v3_return_code,
)
from ._wire import decode_variable_integer, encode_variable_integer

__all__ = [
    "MAX_PACKET_SIZE",
    "PINGRESP",
    "PUBACK",
    "PUBCOMP",
    "PUBREC",
    "PUBREL",
    "WILL_PROPERTIES",
    "ConnectReturnCode",
    "InsufficientData",
    "MQTTError",
    "MalformedPacket",
    "PacketDecoder",
    "PacketTooLarge",
    "PacketType",
    "Properties",
    "PropertyId",
    "ProtocolError",
    "ProtocolVersion",
    "ReasonCode",
    "decode_packet",
    "decode_properties",
    "decode_variable_integer",
    "encode_ack",
    "encode_packet",
    "encode_properties",
    "encode_publish",
    "encode_variable_integer",
    "parse_shared_subscription",
    "topic_matches",
    "v3_return_code",
    "validate_topic_filter",
    "validate_topic_name",
    "with_dup",
]
__all__ += _packets.__all__
