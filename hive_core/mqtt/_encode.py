"""Packets to bytes. `encode_publish` is the broker's hot path; `encode_packet` does the rest."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ._errors import PacketTooLarge
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
    UnsubAck,
    Unsubscribe,
)
from ._properties import encode_properties, property_block
from ._wire import MAX_VARIABLE_INTEGER, binary_bytes, encode_variable_integer, string_bytes

_pack_short_header = struct.Struct(">BBH").pack  # first byte, remaining length < 128, topic length
_pack_uint16 = struct.Struct(">H").pack

PINGRESP = b"\xd0\x00"
PUBACK, PUBREC, PUBREL, PUBCOMP = 0x40, 0x50, 0x62, 0x70
"""First bytes of the four QoS acknowledgements (PUBREL carries its required flag bits)."""
_DUP = 0x08


def encode_ack(first: int, packet_id: int, reason_code: int = 0, version: int = 4) -> bytes:
    """PUBACK, PUBREC, PUBREL or PUBCOMP (``first`` is one of the constants above).

    The reason code is written only for MQTT 5 and only when it is not success, as the
    specification allows (3.4.2.1); the broker's hot path calls this once per acknowledgement.
    """
    if reason_code and version == 5:
        return bytes((first, 3, packet_id >> 8, packet_id & 0xFF, reason_code))
    return bytes((first, 2, packet_id >> 8, packet_id & 0xFF))


def with_dup(head: bytes) -> bytes:
    """A PUBLISH head (its bytes up to the packet identifier) with the DUP flag set."""
    return bytes((head[0] | _DUP,)) + head[1:]


def encode_publish(
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    dup: bool,
    packet_id: int | None,
    properties: bytes | None,
    protocol_version: int,
) -> bytes:
    """Encode a PUBLISH; `properties` is an encoded property block without its length prefix."""
    topic_raw = topic.encode()
    topic_size = len(topic_raw)
    first = 0x30 | (qos << 1)
    if retain:
        first |= 0x01
    if dup:
        first |= 0x08
    remaining = 2 + topic_size + len(payload)
    if qos:
        if not packet_id:
            raise ValueError("a PUBLISH with QoS > 0 needs a non-zero packet identifier")
        topic_raw += _pack_uint16(packet_id)
        remaining += 2
    if protocol_version == 5:
        if properties:
            size = len(properties)
            topic_raw += encode_variable_integer(size) + properties
            remaining += size + (1 if size < 0x80 else len(encode_variable_integer(size)))
        else:
            topic_raw += b"\x00"
            remaining += 1
    if remaining < 0x80:
        return _pack_short_header(first, remaining, topic_size) + topic_raw + payload
    if remaining > MAX_VARIABLE_INTEGER:
        raise PacketTooLarge(f"remaining length {remaining} is over the protocol's maximum")
    return b"".join(
        (
            bytes((first,)),
            encode_variable_integer(remaining),
            _pack_uint16(topic_size),
            topic_raw,
            payload,
        )
    )


def encode_packet(packet: Packet, protocol_version: int) -> bytes:
    """Encode any packet in the layout of `protocol_version`."""
    if type(packet) is Publish:
        return encode_publish(
            packet.topic,
            packet.payload,
            packet.qos,
            packet.retain,
            packet.dup,
            packet.packet_id,
            encode_properties(packet.properties) if protocol_version == 5 else None,
            protocol_version,
        )
    first, body = _ENCODERS[type(packet)](packet, protocol_version)
    size = len(body)
    if size < 0x80:
        return bytes((first, size)) + body
    if size > MAX_VARIABLE_INTEGER:
        raise PacketTooLarge(f"remaining length {size} is over the protocol's maximum")
    return bytes((first,)) + encode_variable_integer(size) + body


def _connect(packet: Connect, version: int) -> tuple[int, bytes]:
    if packet.protocol_version != version:
        raise ValueError(
            f"CONNECT of protocol version {packet.protocol_version} encoded as version {version}"
        )
    will = packet.will
    flags = 0x02 if packet.clean_start else 0
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if packet.password is not None:
        flags |= 0x40
    if packet.username is not None:
        flags |= 0x80
    parts = [
        b"\x00\x06MQIsdp\x03" if version == 3 else b"\x00\x04MQTT" + bytes((version,)),
        bytes((flags,)),
        _pack_uint16(packet.keep_alive),
    ]
    if version == 5:
        parts.append(property_block(packet.properties))
    parts.append(string_bytes(packet.client_id))
    if will is not None:
        if version == 5:
            parts.append(property_block(will.properties))
        parts.append(string_bytes(will.topic))
        parts.append(binary_bytes(will.payload))
    if packet.username is not None:
        parts.append(string_bytes(packet.username))
    if packet.password is not None:
        parts.append(binary_bytes(packet.password))
    return 0x10, b"".join(parts)


def _connack(packet: ConnAck, version: int) -> tuple[int, bytes]:
    head = bytes((1 if packet.session_present else 0, packet.reason_code))
    if version == 5:
        return 0x20, head + property_block(packet.properties)
    return 0x20, head


def _ack(packet: PubAck | PubRec | PubRel | PubComp, version: int) -> tuple[int, bytes]:
    first = (packet.packet_type << 4) | (0x02 if isinstance(packet, PubRel) else 0)
    body = _pack_uint16(packet.packet_id)
    if version == 5 and (packet.reason_code or packet.properties):
        body += bytes((packet.reason_code,))
        if packet.properties:
            body += property_block(packet.properties)
    return first, body


def _subscribe(packet: Subscribe, version: int) -> tuple[int, bytes]:
    parts = [_pack_uint16(packet.packet_id)]
    if version == 5:
        parts.append(property_block(packet.properties))
    for request in packet.subscriptions:
        options = request.qos
        if version == 5:
            options |= (
                (0x04 if request.no_local else 0)
                | (0x08 if request.retain_as_published else 0)
                | (request.retain_handling << 4)
            )
        parts.append(string_bytes(request.topic_filter))
        parts.append(bytes((options,)))
    return 0x82, b"".join(parts)


def _suback(packet: SubAck, version: int) -> tuple[int, bytes]:
    body = _pack_uint16(packet.packet_id)
    if version == 5:
        body += property_block(packet.properties)
    return 0x90, body + bytes(packet.reason_codes)


def _unsubscribe(packet: Unsubscribe, version: int) -> tuple[int, bytes]:
    parts = [_pack_uint16(packet.packet_id)]
    if version == 5:
        parts.append(property_block(packet.properties))
    parts.extend(string_bytes(topic_filter) for topic_filter in packet.topic_filters)
    return 0xA2, b"".join(parts)


def _unsuback(packet: UnsubAck, version: int) -> tuple[int, bytes]:
    body = _pack_uint16(packet.packet_id)
    if version == 5:
        body += property_block(packet.properties) + bytes(packet.reason_codes)
    return 0xB0, body


def _pingreq(packet: PingReq, version: int) -> tuple[int, bytes]:
    return 0xC0, b""


def _pingresp(packet: PingResp, version: int) -> tuple[int, bytes]:
    return 0xD0, b""


def _disconnect_or_auth(packet: Disconnect | Auth, version: int) -> tuple[int, bytes]:
    first = packet.packet_type << 4
    if version < 5:
        if isinstance(packet, Auth):
            raise ValueError("AUTH exists only in MQTT 5")
        return first, b""
    if not packet.reason_code and not packet.properties:
        return first, b""
    body = bytes((packet.reason_code,))
    if packet.properties:
        body += property_block(packet.properties)
    return first, body


_ENCODERS: dict[type, Callable[[Any, int], tuple[int, bytes]]] = {
    Connect: _connect,
    ConnAck: _connack,
    PubAck: _ack,
    PubRec: _ack,
    PubRel: _ack,
    PubComp: _ack,
    Subscribe: _subscribe,
    SubAck: _suback,
    Unsubscribe: _unsubscribe,
    UnsubAck: _unsuback,
    PingReq: _pingreq,
    PingResp: _pingresp,
    Disconnect: _disconnect_or_auth,
    Auth: _disconnect_or_auth,
}
