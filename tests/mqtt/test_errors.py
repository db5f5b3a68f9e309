# ruff: noqa: E501
"""Malformed and forbidden input, keyed by the specification's rule, refused with the right code.

Rule keys are MQTT 5 normative statements unless prefixed "3.1.1:"; a key in parentheses names
a section where the statement has no number.
"""

from __future__ import annotations

import pytest

from hive_core.mqtt import (
    Connect,
    InsufficientData,
    MalformedPacket,
    MQTTError,
    PacketDecoder,
    PacketTooLarge,
    ProtocolError,
    ReasonCode,
    decode_packet,
    encode_packet,
    encode_variable_integer,
)

MALFORMED = ReasonCode.MALFORMED_PACKET
PROTOCOL = ReasonCode.PROTOCOL_ERROR


def packet(first: int, body: bytes) -> bytes:
    return bytes((first,)) + encode_variable_integer(len(body)) + body


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


def props(raw: bytes) -> bytes:
    return encode_variable_integer(len(raw)) + raw


def connect(
    flags: int = 0x02,
    level: int = 5,
    name: str = "MQTT",
    properties: bytes = b"\x00",
    payload: bytes = s("client"),
) -> bytes:
    header = s(name) + bytes((level, flags)) + b"\x00\x3c"
    return packet(0x10, header + (properties if level == 5 else b"") + payload)


def publish(
    first: int = 0x30, topic: bytes | str = "a/b", tail: bytes = b"\x00", payload: bytes = b"x"
) -> bytes:
    return packet(first, s(topic) + tail + payload)


def subscribe(
    payload: bytes, version: int = 5, first: int = 0x82, pid: bytes = b"\x00\x01"
) -> bytes:
    return packet(first, pid + (b"\x00" if version == 5 else b"") + payload)


# (rule, protocol version the decoder is in (None: expecting CONNECT), server side, bytes,
#  exception class, reason code)
CASES: list[tuple[str, int | None, bool, bytes, type[MQTTError], ReasonCode]] = [
    ("MQTT-1.5.4-1 ill-formed UTF-8", 5, True, publish(topic=b"a\xff"), MalformedPacket, MALFORMED),
    ("MQTT-1.5.4-1 encoded surrogate", 5, True, publish(topic=b"\xed\xa0\x80"), MalformedPacket, MALFORMED),
    ("MQTT-1.5.4-1 surrogate in a property", 5, True, publish(tail=props(b"\x03" + s(b"\xed\xbf\xbf"))), MalformedPacket, MALFORMED),
    ("MQTT-1.5.4-2 U+0000 in topic", 4, True, publish(topic="a\x00b", tail=b""), MalformedPacket, MALFORMED),
    ("MQTT-1.5.4-2 U+0000 in client id", None, True, connect(payload=s("a\x00")), MalformedPacket, MALFORMED),
    ("MQTT-1.5.5-1 remaining length of 5 bytes", 5, True, b"\x30\xff\xff\xff\xff\x01", MalformedPacket, MALFORMED),
    ("MQTT-2.1.3-1 PUBREL flags 0", 5, True, packet(0x60, b"\x00\x01"), MalformedPacket, MALFORMED),
    ("MQTT-2.1.3-1 SUBSCRIBE flags 0", 5, True, subscribe(s("a") + b"\x00", first=0x80), MalformedPacket, MALFORMED),
    ("MQTT-2.1.3-1 UNSUBSCRIBE flags 0", 4, True, packet(0xA0, b"\x00\x01" + s("a")), MalformedPacket, MALFORMED),
    ("MQTT-2.1.3-1 PINGREQ flags 1", 4, True, b"\xc1\x00", MalformedPacket, MALFORMED),
    ("MQTT-2.1.3-1 CONNECT flags 1", None, True, b"\x11" + connect()[1:], MalformedPacket, MALFORMED),
    ("MQTT-2.2.1-3 PUBLISH packet id 0", 5, True, publish(0x32, tail=b"\x00\x00\x00"), ProtocolError, PROTOCOL),
    ("MQTT-2.2.1-3 SUBSCRIBE packet id 0", 5, True, subscribe(s("a") + b"\x00", pid=b"\x00\x00"), ProtocolError, PROTOCOL),
    ("(2.2.2.2) property not allowed on the packet", 5, True, publish(tail=props(b"\x11\x00\x00\x00\x01")), MalformedPacket, MALFORMED),
    ("(2.2.2.2) will delay outside will properties", None, True, connect(properties=props(b"\x18\x00\x00\x00\x01")), MalformedPacket, MALFORMED),
    ("(2.2.2.2) unknown property identifier", 5, True, publish(tail=props(b"\x7f\x00")), MalformedPacket, MALFORMED),
    ("(2.2.2.2) property appears twice", 5, True, publish(tail=props(b"\x01\x00\x01\x01")), ProtocolError, PROTOCOL),
    ("(2.2.2.1) property length past the packet", 5, True, publish(tail=b"\x05\x01\x00", payload=b""), MalformedPacket, MALFORMED),
    ("(2.2.2.1) property value past the property length", 5, True, publish(tail=b"\x02\x02\x00\x00\x00\x01"), MalformedPacket, MALFORMED),
    ("MQTT-3.1.0-1 first packet is not CONNECT", None, True, b"\xc0\x00", ProtocolError, PROTOCOL),
    ("MQTT-3.1.0-2 second CONNECT", 5, True, connect(), ProtocolError, PROTOCOL),
    ("MQTT-3.1.2-1 protocol name", None, True, connect(name="MQTX"), MalformedPacket, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION),
    ("MQTT-3.1.2-2 protocol level 6", None, True, connect(level=6), MalformedPacket, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION),
    ("MQTT-3.1.2-2 MQIsdp with level 4", None, True, connect(level=4, name="MQIsdp"), MalformedPacket, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION),
    ("MQTT-3.1.2-3 reserved connect flag", None, True, connect(flags=0x03), MalformedPacket, MALFORMED),
    ("MQTT-3.1.2-11 will QoS without will flag", None, True, connect(flags=0x0A), MalformedPacket, MALFORMED),
    ("MQTT-3.1.2-12 will QoS 3", None, True, connect(flags=0x1E, payload=s("c") + b"\x00" + s("t") + s("p")), MalformedPacket, MALFORMED),
    ("MQTT-3.1.2-13 will retain without will flag", None, True, connect(flags=0x22), MalformedPacket, MALFORMED),
    ("3.1.1:MQTT-3.1.2-22 password without user name", None, True, connect(flags=0x42, level=4, payload=s("c") + s("pw")), MalformedPacket, MALFORMED),
    ("3.1.1:MQTT-3.1.3-8 empty client id, no clean session", None, True, connect(flags=0, level=4, payload=s("")), MalformedPacket, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID),
    ("(3.1.3) will topic with a wildcard", None, True, connect(flags=0x06, level=4, payload=s("c") + s("a/#") + s("p")), MalformedPacket, ReasonCode.TOPIC_NAME_INVALID),
    ("(3.1) CONNECT bytes after the payload", None, True, connect(payload=s("c") + b"\x00"), MalformedPacket, MALFORMED),
    ("(3.1) CONNECT payload past remaining length", None, True, connect(payload=s("client")[:-1]), MalformedPacket, MALFORMED),
    ("(3.1.2.11.3) receive maximum 0", None, True, connect(properties=props(b"\x21\x00\x00")), ProtocolError, PROTOCOL),
    ("(3.1.2.11.4) maximum packet size 0", None, True, connect(properties=props(b"\x27\x00\x00\x00\x00")), ProtocolError, PROTOCOL),
    ("(3.1.2.11.6) request response information 2", None, True, connect(properties=props(b"\x19\x02")), ProtocolError, PROTOCOL),
    ("(3.1.2.11.7) request problem information 2", None, True, connect(properties=props(b"\x17\x02")), ProtocolError, PROTOCOL),
    ("MQTT-3.2.2-1 CONNACK reserved flags", 4, False, packet(0x20, b"\x02\x00"), MalformedPacket, MALFORMED),
    ("(3.2.2.3.4) maximum QoS 2", 5, False, packet(0x20, b"\x00\x00" + props(b"\x24\x02")), ProtocolError, PROTOCOL),
    ("(3.2.2.3.5) retain available 2", 5, False, packet(0x20, b"\x00\x00" + props(b"\x25\x02")), ProtocolError, PROTOCOL),
    ("MQTT-3.3.1-4 QoS 3", 5, True, publish(0x36, tail=b"\x00\x01\x00"), MalformedPacket, MALFORMED),
    ("MQTT-3.3.1-2 DUP with QoS 0", 5, True, publish(0x38), MalformedPacket, MALFORMED),
    ("3.1.1:MQTT-3.3.1-2 DUP with QoS 0", 4, True, publish(0x38, tail=b""), MalformedPacket, MALFORMED),
    ("MQTT-3.3.2-2 topic name with '+'", 5, True, publish(topic="a/+"), MalformedPacket, ReasonCode.TOPIC_NAME_INVALID),
    ("MQTT-3.3.2-2 topic name with '#'", 4, True, publish(topic="#", tail=b""), MalformedPacket, ReasonCode.TOPIC_NAME_INVALID),
    ("3.1.1:MQTT-4.7.3-1 empty topic name", 4, True, publish(topic="", tail=b""), MalformedPacket, ReasonCode.TOPIC_NAME_INVALID),
    ("(3.3.2.3.4) empty topic name without topic alias", 5, True, publish(topic=""), ProtocolError, PROTOCOL),
    ("MQTT-3.3.2-8 topic alias 0", 5, True, publish(tail=props(b"\x23\x00\x00")), ProtocolError, ReasonCode.TOPIC_ALIAS_INVALID),
    ("(3.3.2.3.2) payload format indicator 2", 5, True, publish(tail=props(b"\x01\x02")), ProtocolError, PROTOCOL),
    ("MQTT-3.3.4-6 subscription identifier from a client", 5, True, publish(tail=props(b"\x0b\x01")), ProtocolError, PROTOCOL),
    ("(3.3) PUBLISH topic past remaining length", 5, True, packet(0x30, b"\x00\x0aab"), MalformedPacket, MALFORMED),
    ("(3.3) PUBLISH packet id past remaining length", 4, True, packet(0x32, s("a") + b"\x01"), MalformedPacket, MALFORMED),
    ("3.1.1:(3.4) PUBACK remaining length 3", 4, True, packet(0x40, b"\x00\x01\x00"), MalformedPacket, MALFORMED),
    ("(3.4.2.1) PUBACK reason code not allowed", 5, True, packet(0x40, b"\x00\x01\x92"), MalformedPacket, MALFORMED),
    ("(3.6) PUBREL trailing bytes after properties", 5, True, packet(0x62, b"\x00\x01\x00\x00\xff"), MalformedPacket, MALFORMED),
    ("MQTT-3.8.3-2 SUBSCRIBE without topic filters", 5, True, subscribe(b""), ProtocolError, PROTOCOL),
    ("3.1.1:MQTT-3.8.3-3 SUBSCRIBE without topic filters", 4, True, subscribe(b"", version=4), ProtocolError, PROTOCOL),
    ("MQTT-3.8.3-5 subscription options reserved bits", 5, True, subscribe(s("a") + b"\x40"), MalformedPacket, MALFORMED),
    ("(3.8.3.1) retain handling 3", 5, True, subscribe(s("a") + b"\x30"), ProtocolError, PROTOCOL),
    ("(3.8.3.1) subscription QoS 3", 5, True, subscribe(s("a") + b"\x03"), ProtocolError, PROTOCOL),
    ("3.1.1:MQTT-3-8.3-4 subscription reserved bits", 4, True, subscribe(s("a") + b"\x04", version=4), MalformedPacket, MALFORMED),
    ("MQTT-3.8.3-4 no local on a shared subscription", 5, True, subscribe(s("$share/g/a") + b"\x04"), ProtocolError, PROTOCOL),
    ("(3.8.3) topic filter without options", 5, True, subscribe(s("a")), MalformedPacket, MALFORMED),
    ("(3.8.2.1.2) subscription identifier 0", 5, True, packet(0x82, b"\x00\x01" + props(b"\x0b\x00") + s("a") + b"\x00"), ProtocolError, PROTOCOL),
    ("(3.8.2.1.2) two subscription identifiers", 5, True, packet(0x82, b"\x00\x01" + props(b"\x0b\x01\x0b\x02") + s("a") + b"\x00"), ProtocolError, PROTOCOL),
    ("3.1.1:(3.9.3) SUBACK return code 3", 4, False, packet(0x90, b"\x00\x01\x03"), MalformedPacket, MALFORMED),
    ("MQTT-3.10.3-2 UNSUBSCRIBE without topic filters", 5, True, packet(0xA2, b"\x00\x01\x00"), ProtocolError, PROTOCOL),
    ("3.1.1:(3.12) PINGREQ remaining length 1", 4, True, b"\xc0\x01\x00", MalformedPacket, MALFORMED),
    ("(3.14.2.1) DISCONNECT reason code not allowed", 5, True, packet(0xE0, b"\x05"), MalformedPacket, MALFORMED),
    ("3.1.1:(2.2.1) AUTH is a reserved packet type", 4, True, b"\xf0\x00", MalformedPacket, MALFORMED),
    ("(2.1.2) packet type 0 is reserved", 5, True, b"\x00\x00", MalformedPacket, MALFORMED),
    ("(2.1.2) CONNACK sent by a client", 5, True, packet(0x20, b"\x00\x00\x00"), ProtocolError, PROTOCOL),
    ("(2.1.2) SUBSCRIBE sent by a server", 5, False, subscribe(s("a") + b"\x00"), ProtocolError, PROTOCOL),
    ("3.1.1:(3.14) DISCONNECT sent by a server", 4, False, b"\xe0\x00", ProtocolError, PROTOCOL),
]  # fmt: skip


@pytest.mark.parametrize(
    ("version", "server", "raw", "error", "reason_code"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_refused(
    version: int | None, server: bool, raw: bytes, error: type[MQTTError], reason_code: ReasonCode
) -> None:
    with pytest.raises(error) as caught:
        PacketDecoder(version, server=server).feed(raw)
    assert type(caught.value) is error
    assert caught.value.reason_code == reason_code


def test_the_table_is_large_and_keys_are_unique() -> None:
    keys = [case[0] for case in CASES]
    assert len(keys) >= 30
    assert len(set(keys)) == len(keys)


def test_packet_too_large_is_refused_from_the_fixed_header() -> None:
    decoder = PacketDecoder(5, max_packet_size=100)
    with pytest.raises(PacketTooLarge) as caught:
        decoder.feed(b"\x30\xe4\x00")  # remaining length 100: 103 bytes in all, none of them here
    assert caught.value.reason_code == ReasonCode.PACKET_TOO_LARGE


def test_max_packet_size_counts_the_whole_packet() -> None:
    raw = packet(0x30, s("a") + b"\x00" + b"x" * 93)  # 2 + 97 bytes
    assert len(raw) == 99
    assert len(PacketDecoder(5, max_packet_size=99).feed(raw)) == 1
    with pytest.raises(PacketTooLarge):
        PacketDecoder(5, max_packet_size=98).feed(raw)


def test_password_without_user_name_is_allowed_in_mqtt_5() -> None:
    (decoded,) = PacketDecoder().feed(connect(flags=0x42, payload=s("c") + s("pw")))
    assert isinstance(decoded, Connect)
    assert decoded.username is None
    assert decoded.password == b"pw"


def test_dup_with_qos_0_is_tolerated_in_mqtt_3_1() -> None:
    (decoded,) = PacketDecoder(3).feed(publish(0x38, tail=b""))
    assert decoded.dup is True  # type: ignore[union-attr]


def test_refused_connect_still_tells_the_protocol_version() -> None:
    decoder = PacketDecoder()
    with pytest.raises(MalformedPacket):
        decoder.feed(connect(flags=0x03, level=4))
    assert decoder.protocol_version == 4


def test_decode_packet_raises_insufficient_data_on_empty_input() -> None:
    with pytest.raises(InsufficientData):
        decode_packet(b"", 5)
    with pytest.raises(MalformedPacket):
        decode_packet(b"\x30\xff\xff\xff\xff", 5)


def test_encoded_connect_of_3_1_uses_its_protocol_name() -> None:
    encoded = encode_packet(Connect("c", protocol_version=3, protocol_name="MQIsdp"), 3)
    assert encoded[2:10] == b"\x00\x06MQIsdp"
