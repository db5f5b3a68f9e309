"""Bytes to packets: `decode_packet` for one packet, `PacketDecoder` for a connection's stream."""

from __future__ import annotations

from collections.abc import Callable

from ._errors import InsufficientData, MalformedPacket, ProtocolError
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
from ._properties import WILL_PROPERTIES, read_property_block
from ._topics import validate_topic_name
from ._types import (
    AUTH_REASON_CODES,
    CONNACK_REASON_CODES,
    DISCONNECT_REASON_CODES,
    PUBACK_REASON_CODES,
    PUBREL_REASON_CODES,
    SUBACK_REASON_CODES,
    SUBACK_V3_RETURN_CODES,
    UNSUBACK_REASON_CODES,
    PacketType,
    Properties,
    PropertyId,
    ReasonCode,
)
from ._wire import (
    Buffer,
    decode_variable_integer,
    read_binary,
    read_byte,
    read_string,
    read_uint16,
)

_TOPIC_ALIAS = PropertyId.TOPIC_ALIAS
_SUBSCRIPTION_IDENTIFIER = PropertyId.SUBSCRIPTION_IDENTIFIER
_SHARE_PREFIX = "$share/"

BodyDecoder = Callable[[int, Buffer, int, int, int], Packet]


def decode_packet(data: Buffer, protocol_version: int | None) -> tuple[Packet, int]:
    """Decode the packet at the start of `data`; return it and the number of bytes it took.

    `protocol_version` None means no CONNECT has been seen: only a CONNECT decodes, and it
    carries its own version. Raises InsufficientData if `data` holds only part of a packet.
    """
    if len(data) < 2:
        raise InsufficientData("fixed header is incomplete")
    remaining, start = decode_variable_integer(data, 1)
    stop = start + remaining
    if stop > len(data):
        raise InsufficientData("packet is incomplete")
    return decode_body(data[0], data, start, stop, protocol_version), stop


def decode_body(first: int, data: Buffer, pos: int, end: int, version: int | None) -> Packet:
    """Decode the packet whose first byte is `first` and whose body is data[pos:end]."""
    kind = first >> 4
    flags = first & 0x0F
    if kind == 1:
        if flags:
            raise MalformedPacket("CONNECT fixed header flags must be 0 (MQTT-2.1.3-1)")
        return _decode_connect(data, pos, end)
    if version is None:
        raise ProtocolError("the first packet must be CONNECT (MQTT-3.1.0-1)")
    if kind == 3:
        return _decode_publish(flags, data, pos, end, version)
    if kind == 0 or (kind == 15 and version < 5):
        raise MalformedPacket(f"reserved packet type {kind}")
    expected_flags = 2 if kind in (6, 8, 10) else 0
    if flags != expected_flags:
        raise MalformedPacket(
            f"{PacketType(kind).name} fixed header flags must be {expected_flags} (MQTT-2.1.3-1)"
        )
    return _BODY_DECODERS[kind](kind, data, pos, end, version)


def _decode_connect(data: Buffer, pos: int, end: int) -> Connect:
    name, pos = read_string(data, pos, end)
    level, pos = read_byte(data, pos, end)
    if not ((name == "MQTT" and level in (4, 5)) or (name == "MQIsdp" and level == 3)):
        raise MalformedPacket(
            f"unsupported protocol {name!r} level {level} (MQTT-3.1.2-1/2)",
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
        )
    flags, pos = read_byte(data, pos, end)
    if flags & 0x01:
        raise MalformedPacket("CONNECT reserved flag is set (MQTT-3.1.2-3)")
    will_flag = flags & 0x04
    will_qos = (flags >> 3) & 0x03
    will_retain = bool(flags & 0x20)
    if will_flag:
        if will_qos == 3:
            raise MalformedPacket("will QoS 3 (MQTT-3.1.2-12)")
    elif will_qos or will_retain:
        raise MalformedPacket("will QoS or retain set without a will (MQTT-3.1.2-11/13)")
    has_password = flags & 0x40
    has_username = flags & 0x80
    if has_password and not has_username and level < 5:
        raise MalformedPacket("password without a user name (MQTT-3.1.2-22)")
    keep_alive, pos = read_uint16(data, pos, end)
    properties: Properties = {}
    if level == 5:
        properties, pos = read_property_block(data, pos, end, PacketType.CONNECT)
    client_id, pos = read_string(data, pos, end)
    clean_start = bool(flags & 0x02)
    if level == 4 and not client_id and not clean_start:
        raise MalformedPacket(
            "empty client identifier needs clean session (MQTT-3.1.3-8)",
            ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
        )
    will = None
    if will_flag:
        will_properties: Properties = {}
        if level == 5:
            will_properties, pos = read_property_block(data, pos, end, WILL_PROPERTIES)
        will_topic, pos = read_string(data, pos, end)
        validate_topic_name(will_topic)
        will_payload, pos = read_binary(data, pos, end)
        will = Will(will_topic, will_payload, will_qos, will_retain, will_properties)
    username = None
    if has_username:
        username, pos = read_string(data, pos, end)
    password = None
    if has_password:
        password, pos = read_binary(data, pos, end)
    if pos != end:
        raise MalformedPacket("CONNECT has bytes after its payload")
    return Connect(
        client_id, level, clean_start, keep_alive, username, password, will, properties, name
    )


def _decode_publish(flags: int, data: Buffer, pos: int, end: int, version: int) -> Publish:
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise MalformedPacket("PUBLISH with QoS 3 (MQTT-3.3.1-4)")
    dup = bool(flags & 0x08)
    if dup and not qos and version != 3:
        raise MalformedPacket("PUBLISH with DUP set and QoS 0 (MQTT-3.3.1-2)")
    topic, pos = read_string(data, pos, end)
    packet_id = None
    if qos:
        packet_id, pos = read_uint16(data, pos, end)
        if not packet_id:
            raise ProtocolError("PUBLISH with QoS > 0 and packet identifier 0 (MQTT-2.2.1-3)")
    properties: Properties = {}
    if version == 5:
        properties, pos = read_property_block(data, pos, end, PacketType.PUBLISH)
    check_publish_topic(topic, properties, version)
    return Publish(topic, bytes(data[pos:end]), qos, bool(flags & 0x01), dup, packet_id, properties)


def check_publish_topic(topic: str, properties: Properties, version: int) -> None:
    """Refuse a PUBLISH topic: wildcards always, empty unless MQTT 5 names a topic alias."""
    if not topic:
        if version < 5:
            raise MalformedPacket("PUBLISH with an empty topic", ReasonCode.TOPIC_NAME_INVALID)
        if _TOPIC_ALIAS not in properties:
            raise ProtocolError("PUBLISH with an empty topic and no topic alias")
    elif "+" in topic or "#" in topic:
        raise MalformedPacket(
            f"PUBLISH topic contains a wildcard (MQTT-3.3.2-2): {topic!r}",
            ReasonCode.TOPIC_NAME_INVALID,
        )


def _decode_ack(kind: int, data: Buffer, pos: int, end: int, version: int) -> Packet:
    """PUBACK, PUBREC, PUBREL and PUBCOMP share one layout."""
    cls, reason_codes = _ACKS[kind]
    if version < 5:
        if end - pos != 2:
            raise MalformedPacket(f"{cls.__name__} must have a remaining length of 2")
        return cls((data[pos] << 8) | data[pos + 1])
    packet_id, pos = read_uint16(data, pos, end)
    if pos == end:
        return cls(packet_id)
    reason_code = data[pos]
    if reason_code not in reason_codes:
        raise MalformedPacket(f"{cls.__name__} with invalid reason code 0x{reason_code:02X}")
    if pos + 1 == end:
        return cls(packet_id, reason_code)
    properties, pos = read_property_block(data, pos + 1, end, kind)
    _expect_end(pos, end, cls.__name__)
    return cls(packet_id, reason_code, properties)


_ACKS: dict[int, tuple[type[PubAck | PubRec | PubRel | PubComp], frozenset[int]]] = {
    4: (PubAck, PUBACK_REASON_CODES),
    5: (PubRec, PUBACK_REASON_CODES),
    6: (PubRel, PUBREL_REASON_CODES),
    7: (PubComp, PUBREL_REASON_CODES),
}


def _decode_connack(kind: int, data: Buffer, pos: int, end: int, version: int) -> ConnAck:
    ack_flags, pos = read_byte(data, pos, end)
    if ack_flags & 0xFE:
        raise MalformedPacket("CONNACK reserved flags are set (MQTT-3.2.2-1)")
    reason_code, pos = read_byte(data, pos, end)
    properties: Properties = {}
    if version < 5:
        if reason_code > 5:
            raise MalformedPacket(f"CONNACK with invalid return code {reason_code}")
    else:
        if reason_code not in CONNACK_REASON_CODES:
            raise MalformedPacket(f"CONNACK with invalid reason code 0x{reason_code:02X}")
        properties, pos = read_property_block(data, pos, end, kind)
    _expect_end(pos, end, "CONNACK")
    return ConnAck(bool(ack_flags), reason_code, properties)


def _decode_subscribe(kind: int, data: Buffer, pos: int, end: int, version: int) -> Subscribe:
    packet_id, pos = _read_packet_id(data, pos, end)
    properties: Properties = {}
    if version == 5:
        properties, pos = read_property_block(data, pos, end, kind)
        if len(properties.get(_SUBSCRIPTION_IDENTIFIER, ())) > 1:
            raise ProtocolError("SUBSCRIBE with more than one subscription identifier")
    subscriptions = []
    while pos < end:
        topic_filter, pos = read_string(data, pos, end)
        if pos >= end:
            raise MalformedPacket("SUBSCRIBE topic filter without subscription options")
        options = data[pos]
        pos += 1
        qos = options & 0x03
        if version == 5:
            if options & 0xC0:
                raise MalformedPacket("subscription options reserved bits set (MQTT-3.8.3-5)")
            if qos == 3:
                raise ProtocolError("subscription with QoS 3")
            retain_handling = (options >> 4) & 0x03
            if retain_handling == 3:
                raise ProtocolError("subscription with retain handling 3")
            no_local = bool(options & 0x04)
            if no_local and topic_filter.startswith(_SHARE_PREFIX):
                raise ProtocolError("no local on a shared subscription (MQTT-3.8.3-4)")
            subscriptions.append(
                SubscriptionRequest(
                    topic_filter, qos, no_local, bool(options & 0x08), retain_handling
                )
            )
        else:
            if options & 0xFC or qos == 3:
                raise MalformedPacket("subscription QoS or reserved bits invalid (MQTT-3-8.3-4)")
            subscriptions.append(SubscriptionRequest(topic_filter, qos))
    if not subscriptions:
        raise ProtocolError("SUBSCRIBE without a topic filter (MQTT-3.8.3-2)")
    return Subscribe(packet_id, subscriptions, properties)


def _decode_suback(kind: int, data: Buffer, pos: int, end: int, version: int) -> SubAck:
    packet_id, pos = read_uint16(data, pos, end)
    properties: Properties = {}
    allowed = SUBACK_V3_RETURN_CODES
    if version == 5:
        properties, pos = read_property_block(data, pos, end, kind)
        allowed = SUBACK_REASON_CODES
    reason_codes = _read_reason_codes(data, pos, end, allowed, "SUBACK")
    return SubAck(packet_id, reason_codes, properties)


def _decode_unsubscribe(kind: int, data: Buffer, pos: int, end: int, version: int) -> Unsubscribe:
    packet_id, pos = _read_packet_id(data, pos, end)
    properties: Properties = {}
    if version == 5:
        properties, pos = read_property_block(data, pos, end, kind)
    topic_filters = []
    while pos < end:
        topic_filter, pos = read_string(data, pos, end)
        topic_filters.append(topic_filter)
    if not topic_filters:
        raise ProtocolError("UNSUBSCRIBE without a topic filter (MQTT-3.10.3-2)")
    return Unsubscribe(packet_id, topic_filters, properties)


def _decode_unsuback(kind: int, data: Buffer, pos: int, end: int, version: int) -> UnsubAck:
    if version < 5:
        if end - pos != 2:
            raise MalformedPacket("UNSUBACK must have a remaining length of 2")
        return UnsubAck((data[pos] << 8) | data[pos + 1])
    packet_id, pos = read_uint16(data, pos, end)
    properties, pos = read_property_block(data, pos, end, kind)
    reason_codes = _read_reason_codes(data, pos, end, UNSUBACK_REASON_CODES, "UNSUBACK")
    return UnsubAck(packet_id, reason_codes, properties)


def _decode_ping(kind: int, data: Buffer, pos: int, end: int, version: int) -> Packet:
    if pos != end:
        raise MalformedPacket(f"{PacketType(kind).name} must have a remaining length of 0")
    return PingReq() if kind == 12 else PingResp()


def _decode_disconnect_or_auth(kind: int, data: Buffer, pos: int, end: int, version: int) -> Packet:
    cls: type[Disconnect | Auth] = Disconnect if kind == 14 else Auth
    if version < 5:
        if pos != end:
            raise MalformedPacket("DISCONNECT must have a remaining length of 0")
        return Disconnect()
    if pos == end:
        return cls()
    reason_code = data[pos]
    allowed = DISCONNECT_REASON_CODES if kind == 14 else AUTH_REASON_CODES
    if reason_code not in allowed:
        raise MalformedPacket(f"{cls.__name__} with invalid reason code 0x{reason_code:02X}")
    if pos + 1 == end:
        return cls(reason_code)
    properties, pos = read_property_block(data, pos + 1, end, kind)
    _expect_end(pos, end, cls.__name__)
    return cls(reason_code, properties)


def _read_packet_id(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    packet_id, pos = read_uint16(data, pos, end)
    if not packet_id:
        raise ProtocolError("packet identifier 0 (MQTT-2.2.1-3)")
    return packet_id, pos


def _read_reason_codes(
    data: Buffer, pos: int, end: int, allowed: frozenset[int], name: str
) -> list[int]:
    """The reason codes that fill the rest of a SUBACK or UNSUBACK: at least one, each allowed."""
    reason_codes = list(data[pos:end])
    if not reason_codes:
        raise MalformedPacket(f"{name} without a reason code")
    for code in reason_codes:
        if code not in allowed:
            raise MalformedPacket(f"{name} with invalid reason code 0x{code:02X}")
    return reason_codes


def _expect_end(pos: int, end: int, name: str) -> None:
    if pos != end:
        raise MalformedPacket(f"{name} has bytes after its properties")


_BODY_DECODERS: dict[int, BodyDecoder] = {
    2: _decode_connack,
    4: _decode_ack,
    5: _decode_ack,
    6: _decode_ack,
    7: _decode_ack,
    8: _decode_subscribe,
    9: _decode_suback,
    10: _decode_unsubscribe,
    11: _decode_unsuback,
    12: _decode_ping,
    13: _decode_ping,
    14: _decode_disconnect_or_auth,
    15: _decode_disconnect_or_auth,
}
