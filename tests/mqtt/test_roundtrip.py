"""Every packet of every protocol version survives encode then decode, alone and in a stream."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hive_core.mqtt import (
    Connect,
    Packet,
    PacketDecoder,
    Publish,
    decode_packet,
    decode_properties,
    decode_variable_integer,
    encode_packet,
    encode_properties,
    encode_publish,
    encode_variable_integer,
)

from .strategies import VERSIONS, any_packet, client_packets, connects, properties, server_packets


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_packet_round_trips(version: int, data: st.DataObject) -> None:
    packet = data.draw(any_packet(version))
    encoded = encode_packet(packet, version)
    decoded, consumed = decode_packet(encoded, None if isinstance(packet, Connect) else version)
    assert decoded == packet
    assert consumed == len(encoded)
    assert decode_packet(memoryview(encoded + b"\xc0\x00"), version)[1] == len(encoded)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_server_stream_in_random_chunks(version: int, data: st.DataObject) -> None:
    packets: list[Packet] = [data.draw(connects(version))]
    packets += data.draw(st.lists(client_packets(version), max_size=12))
    _assert_stream_decodes(packets, PacketDecoder(), version, data)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_client_stream_in_random_chunks(version: int, data: st.DataObject) -> None:
    packets = data.draw(st.lists(server_packets(version), max_size=12))
    _assert_stream_decodes(packets, PacketDecoder(version, server=False), version, data)


def _assert_stream_decodes(
    packets: list[Packet], decoder: PacketDecoder, version: int, data: st.DataObject
) -> None:
    stream = b"".join(encode_packet(packet, version) for packet in packets)
    decoded: list[Packet] = []
    pos = 0
    while pos < len(stream):
        size = data.draw(st.integers(1, 64) | st.integers(1, len(stream)))
        decoded += decoder.feed(stream[pos : pos + size])
        pos += size
    assert decoded == packets
    assert decoder.protocol_version == version


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_encode_publish_matches_encode_packet(version: int, data: st.DataObject) -> None:
    qos = data.draw(st.integers(0, 2))
    packet = Publish(
        data.draw(st.text(alphabet="ab/é", min_size=1)),
        data.draw(st.binary(max_size=200)),
        qos,
        data.draw(st.booleans()),
        data.draw(st.booleans()) if qos else False,
        data.draw(st.integers(1, 0xFFFF)) if qos else None,
        data.draw(properties(3, version)),
    )
    encoded_properties = encode_properties(packet.properties) if version == 5 else None
    fast = encode_publish(
        packet.topic,
        packet.payload,
        packet.qos,
        packet.retain,
        packet.dup,
        packet.packet_id,
        encoded_properties,
        version,
    )
    assert fast == encode_packet(packet, version)


@settings(deadline=None)
@given(properties(3, 5) | properties(1, 5) | properties(2, 5) | properties(0, 5))
def test_properties_round_trip(props: dict) -> None:  # type: ignore[type-arg]
    assert decode_properties(encode_properties(props)) == props


@given(st.integers(0, 268_435_455))
def test_variable_integer_round_trips(value: int) -> None:
    encoded = encode_variable_integer(value)
    assert len(encoded) == 1 + (value >= 128) + (value >= 16_384) + (value >= 2_097_152)
    assert decode_variable_integer(memoryview(b"\xff" + encoded), 1) == (value, len(encoded) + 1)
