"""Arbitrary bytes are either packets or an MQTTError, never a crash of another kind."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hive_core.mqtt import (
    Connect,
    MQTTError,
    PacketDecoder,
    PropertyId,
    Publish,
    Subscribe,
    SubscriptionRequest,
    Will,
    decode_packet,
    encode_packet,
)

from .strategies import VERSIONS


def _session_start(version: int) -> bytes:
    """A CONNECT using every field, then a PUBLISH and a SUBSCRIBE with properties."""
    v5 = version == 5
    connect = Connect(
        "client",
        version,
        keep_alive=30,
        username="user",
        password=b"secret",
        will=Will("w/t", b"bye", 1, True, {PropertyId.WILL_DELAY_INTERVAL: 5} if v5 else {}),
        properties={PropertyId.RECEIVE_MAXIMUM: 10, PropertyId.USER_PROPERTY: [("k", "v")]}
        if v5
        else {},
        protocol_name="MQIsdp" if version == 3 else "MQTT",
    )
    publish = Publish(
        "a/b", b"payload", 1, packet_id=7,
        properties={PropertyId.CONTENT_TYPE: "text", PropertyId.TOPIC_ALIAS: 3} if v5 else {},
    )  # fmt: skip
    subscribe = Subscribe(
        9,
        [SubscriptionRequest("a/+", 1), SubscriptionRequest("$share/g/#", 2)],
        {PropertyId.SUBSCRIPTION_IDENTIFIER: [4]} if v5 else {},
    )
    return b"".join(encode_packet(packet, version) for packet in (connect, publish, subscribe))


PREFIXES = {version: _session_start(version) for version in VERSIONS}


def _feed_all(decoder: PacketDecoder, chunks: list[bytes]) -> None:
    with contextlib.suppress(MQTTError):
        for chunk in chunks:
            decoder.feed(chunk)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8), st.booleans())
@example([b"\x10\x0c\x00\x04MQTT\x05\x02\x00\x3c\x03\x21"], True)
def test_random_bytes_on_a_fresh_connection(chunks: list[bytes], server: bool) -> None:
    _feed_all(PacketDecoder(None if server else 5, server=server), chunks)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8), st.booleans())
def test_random_bytes_after_connect(version: int, chunks: list[bytes], server: bool) -> None:
    _feed_all(PacketDecoder(version, server=server), chunks)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 15), st.binary(max_size=80))
def test_random_body_under_every_first_nibble(version: int, kind: int, body: bytes) -> None:
    # a valid fixed header in front of random bytes reaches every body decoder
    first = (kind << 4) | (2 if kind in (6, 8, 10) else 0)
    raw = bytes((first, len(body))) + body
    for protocol_version in (version, None):
        with contextlib.suppress(MQTTError):
            decode_packet(raw, protocol_version)


@pytest.mark.parametrize("version", VERSIONS)
def test_session_start_decodes(version: int) -> None:
    assert len(PacketDecoder().feed(PREFIXES[version])) == 3


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_valid_packets(version: int, data: st.DataObject) -> None:
    raw = bytearray(PREFIXES[version])
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    decoder = PacketDecoder()
    _feed_all(decoder, [bytes(raw)])
