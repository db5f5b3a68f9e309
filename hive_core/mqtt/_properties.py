"""MQTT 5 properties (spec 2.2.2): their wire types, where each may appear, and their codec."""

from __future__ import annotations

from ._errors import MalformedPacket, ProtocolError
from ._types import PacketType, Properties, PropertyId, ReasonCode
from ._wire import (
    Buffer,
    binary_bytes,
    decode_utf8,
    encode_variable_integer,
    read_variable_integer,
    string_bytes,
)

# Where a property may appear: a packet type, or the will properties of CONNECT.
WILL_PROPERTIES = 0

_BYTE, _UINT16, _UINT32, _VARINT, _STRING, _BINARY, _STRING_PAIR = range(7)

P = PacketType
_PUBLISH_AND_WILL = frozenset({P.PUBLISH, WILL_PROPERTIES})
_ACKS = frozenset({P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP, P.SUBACK, P.UNSUBACK})

# identifier -> (wire type, contexts where it is allowed), from spec table 2-4
_PROPERTY_SPEC: dict[PropertyId, tuple[int, frozenset[int]]] = {
    PropertyId.PAYLOAD_FORMAT_INDICATOR: (_BYTE, _PUBLISH_AND_WILL),
    PropertyId.MESSAGE_EXPIRY_INTERVAL: (_UINT32, _PUBLISH_AND_WILL),
    PropertyId.CONTENT_TYPE: (_STRING, _PUBLISH_AND_WILL),
    PropertyId.RESPONSE_TOPIC: (_STRING, _PUBLISH_AND_WILL),
    PropertyId.CORRELATION_DATA: (_BINARY, _PUBLISH_AND_WILL),
    PropertyId.SUBSCRIPTION_IDENTIFIER: (_VARINT, frozenset({P.PUBLISH, P.SUBSCRIBE})),
    PropertyId.SESSION_EXPIRY_INTERVAL: (_UINT32, frozenset({P.CONNECT, P.CONNACK, P.DISCONNECT})),
    PropertyId.ASSIGNED_CLIENT_IDENTIFIER: (_STRING, frozenset({P.CONNACK})),
    PropertyId.SERVER_KEEP_ALIVE: (_UINT16, frozenset({P.CONNACK})),
    PropertyId.AUTHENTICATION_METHOD: (_STRING, frozenset({P.CONNECT, P.CONNACK, P.AUTH})),
    PropertyId.AUTHENTICATION_DATA: (_BINARY, frozenset({P.CONNECT, P.CONNACK, P.AUTH})),
    PropertyId.REQUEST_PROBLEM_INFORMATION: (_BYTE, frozenset({P.CONNECT})),
    PropertyId.WILL_DELAY_INTERVAL: (_UINT32, frozenset({WILL_PROPERTIES})),
    PropertyId.REQUEST_RESPONSE_INFORMATION: (_BYTE, frozenset({P.CONNECT})),
    PropertyId.RESPONSE_INFORMATION: (_STRING, frozenset({P.CONNACK})),
    PropertyId.SERVER_REFERENCE: (_STRING, frozenset({P.CONNACK, P.DISCONNECT})),
    PropertyId.REASON_STRING: (_STRING, _ACKS | {P.CONNACK, P.DISCONNECT, P.AUTH}),
    PropertyId.RECEIVE_MAXIMUM: (_UINT16, frozenset({P.CONNECT, P.CONNACK})),
    PropertyId.TOPIC_ALIAS_MAXIMUM: (_UINT16, frozenset({P.CONNECT, P.CONNACK})),
    PropertyId.TOPIC_ALIAS: (_UINT16, frozenset({P.PUBLISH})),
    PropertyId.MAXIMUM_QOS: (_BYTE, frozenset({P.CONNACK})),
    PropertyId.RETAIN_AVAILABLE: (_BYTE, frozenset({P.CONNACK})),
    PropertyId.USER_PROPERTY: (_STRING_PAIR, frozenset(PacketType) | {WILL_PROPERTIES}),
    PropertyId.MAXIMUM_PACKET_SIZE: (_UINT32, frozenset({P.CONNECT, P.CONNACK})),
    PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE: (_BYTE, frozenset({P.CONNACK})),
    PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE: (_BYTE, frozenset({P.CONNACK})),
    PropertyId.SHARED_SUBSCRIPTION_AVAILABLE: (_BYTE, frozenset({P.CONNACK})),
}
# Indexed by the identifier byte, for the decoder: (PropertyId, wire type, contexts) or None.
_BY_BYTE: list[tuple[PropertyId, int, frozenset[int]] | None] = [None] * 256
for _pid, (_kind, _contexts) in _PROPERTY_SPEC.items():
    _BY_BYTE[_pid] = (_pid, _kind, _contexts)

# Properties whose only values are 0 and 1 (a Protocol Error otherwise).
_BOOLEAN_BYTES = frozenset(
    {
        PropertyId.PAYLOAD_FORMAT_INDICATOR,
        PropertyId.REQUEST_PROBLEM_INFORMATION,
        PropertyId.REQUEST_RESPONSE_INFORMATION,
        PropertyId.MAXIMUM_QOS,
        PropertyId.RETAIN_AVAILABLE,
        PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE,
        PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
        PropertyId.SHARED_SUBSCRIPTION_AVAILABLE,
    }
)
# Properties for which 0 is a Protocol Error.
_NON_ZERO = frozenset(
    {
        PropertyId.RECEIVE_MAXIMUM,
        PropertyId.MAXIMUM_PACKET_SIZE,
        PropertyId.SUBSCRIPTION_IDENTIFIER,
    }
)


def read_properties(data: Buffer, pos: int, end: int, context: int | None) -> Properties:
    """Decode the property block data[pos:end] (no length prefix).

    `context` is the packet type (or WILL_PROPERTIES) the block belongs to; None skips the check
    of where each property is allowed.
    """
    properties: Properties = {}
    by_byte = _BY_BYTE
    while pos < end:
        spec = by_byte[data[pos]]  # every identifier is below 0x80, so a one byte varint
        if spec is None:
            raise MalformedPacket(f"unknown property identifier 0x{data[pos]:02X}")
        pid, kind, contexts = spec
        if context is not None and context not in contexts:
            raise MalformedPacket(f"property {pid.name} is not allowed here")
        pos += 1
        value: object
        if kind == _BYTE:
            if pos >= end:
                raise MalformedPacket(f"property {pid.name} runs past the property block")
            value = data[pos]
            pos += 1
            if value > 1 and pid in _BOOLEAN_BYTES:
                raise ProtocolError(f"property {pid.name} must be 0 or 1, not {value}")
        elif kind in (_UINT16, _UINT32):
            size = 2 if kind == _UINT16 else 4
            if pos + size > end:
                raise MalformedPacket(f"property {pid.name} runs past the property block")
            value = int.from_bytes(data[pos : pos + size], "big")
            pos += size
            if value == 0:
                if pid == PropertyId.TOPIC_ALIAS:
                    raise ProtocolError("topic alias 0", ReasonCode.TOPIC_ALIAS_INVALID)
                if pid in _NON_ZERO:
                    raise ProtocolError(f"property {pid.name} must not be 0")
        elif kind == _VARINT:
            value, pos = read_variable_integer(data, pos, end)
            if value == 0:
                raise ProtocolError("subscription identifier 0")
            properties.setdefault(pid, []).append(value)
            continue
        elif kind == _STRING_PAIR:
            name, pos = _read_string(data, pos, end)
            text, pos = _read_string(data, pos, end)
            properties.setdefault(pid, []).append((name, text))
            continue
        elif kind == _STRING:
            value, pos = _read_string(data, pos, end)
        else:
            if pos + 2 > end:
                raise MalformedPacket(f"property {pid.name} runs past the property block")
            stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
            if stop > end:
                raise MalformedPacket(f"property {pid.name} runs past the property block")
            value = bytes(data[pos + 2 : stop])
            pos = stop
        if pid in properties:
            raise ProtocolError(f"property {pid.name} appears twice")
        properties[pid] = value
    return properties


def _read_string(data: Buffer, pos: int, end: int) -> tuple[str, int]:
    if pos + 2 > end:
        raise MalformedPacket("string property runs past the property block")
    stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise MalformedPacket("string property runs past the property block")
    return decode_utf8(data[pos + 2 : stop]), stop


def read_property_block(data: Buffer, pos: int, end: int, context: int) -> tuple[Properties, int]:
    """Decode a length-prefixed property block at `pos`; return it and the position after it."""
    if pos < end and data[pos] == 0:
        return {}, pos + 1
    length, pos = read_variable_integer(data, pos, end)
    stop = pos + length
    if stop > end:
        raise MalformedPacket("property length runs past the packet")
    return read_properties(data, pos, stop, context), stop


def decode_properties(data: Buffer, packet_type: int | None = None) -> Properties:
    """Decode a property block without its length prefix.

    With `packet_type` (a PacketType, or 0 for will properties) a property not allowed there is
    refused as MalformedPacket.
    """
    return read_properties(data, 0, len(data), packet_type)


def encode_properties(properties: Properties) -> bytes:
    """Encode properties without the length prefix, in the dict's order."""
    if not properties:
        return b""
    out = bytearray()
    for pid, value in properties.items():
        kind = _PROPERTY_SPEC[pid][0]
        if kind == _STRING_PAIR:
            for name, text in value:
                out.append(pid)
                out += string_bytes(name)
                out += string_bytes(text)
        elif kind == _VARINT:
            for number in [value] if isinstance(value, int) else value:
                out.append(pid)
                out += encode_variable_integer(number)
        elif kind == _BYTE:
            out.append(pid)
            out.append(value)
        elif kind == _UINT16:
            out.append(pid)
            out += value.to_bytes(2, "big")
        elif kind == _UINT32:
            out.append(pid)
            out += value.to_bytes(4, "big")
        elif kind == _STRING:
            out.append(pid)
            out += string_bytes(value)
        else:
            out.append(pid)
            out += binary_bytes(value)
    return bytes(out)


def property_block(properties: Properties) -> bytes:
    """Encoded properties with their length prefix."""
    if not properties:
        return b"\x00"
    encoded = encode_properties(properties)
    return encode_variable_integer(len(encoded)) + encoded
