"""Every strict prefix of a valid packet asks for more bytes and yields no packet."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hive_core.mqtt import Connect, InsufficientData, PacketDecoder, decode_packet, encode_packet

from .strategies import VERSIONS, any_packet


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_strict_prefix_is_insufficient(version: int, data: st.DataObject) -> None:
    packet = data.draw(any_packet(version))
    encoded = encode_packet(packet, version)
    is_connect = isinstance(packet, Connect)
    for size in range(len(encoded)):
        prefix = encoded[:size]
        with pytest.raises(InsufficientData):
            decode_packet(prefix, None if is_connect else version)
        decoder = (
            PacketDecoder() if is_connect else PacketDecoder(version, server=_to_server(packet))
        )
        assert decoder.feed(prefix) == []
        assert decoder.feed(encoded[size:]) == [packet]


def _to_server(packet: object) -> bool:
    name = type(packet).__name__
    return name not in {"ConnAck", "SubAck", "UnsubAck", "PingResp"} and not (
        name == "Publish" and 11 in getattr(packet, "properties", {})
    )


def test_prefix_of_a_long_remaining_length() -> None:
    encoded = encode_packet(Connect("c", will=None, username="u" * 300), 4)
    assert encoded[1] & 0x80 and encoded[2] < 0x80
    for size in range(1, 4):
        with pytest.raises(InsufficientData):
            decode_packet(encoded[:size], None)
        assert PacketDecoder().feed(encoded[:size]) == []
