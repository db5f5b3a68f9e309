"""Hypothesis strategies for every MQTT packet, in the layout of each protocol version."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from hive_core import mqtt
from hive_core.mqtt import WILL_PROPERTIES, PacketType, PropertyId, _types
from hive_core.mqtt._properties import _PROPERTY_SPEC

VERSIONS = (3, 4, 5)

text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
)
topic_names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#"),
    min_size=1,
    max_size=12,
)
topic_filters = st.lists(
    st.one_of(st.just("+"), st.sampled_from(["a", "b", "$SYS", "ü", ""]), topic_names),
    min_size=1,
    max_size=4,
).map("/".join) | topic_names.map(lambda t: t + "/#")
packet_ids = st.integers(1, 0xFFFF)
uint16 = st.integers(1, 0xFFFF)
uint32 = st.integers(1, 0xFFFFFFFF)
binary = st.binary(max_size=16)

_VALUES: dict[PropertyId, st.SearchStrategy[Any]] = {
    PropertyId.PAYLOAD_FORMAT_INDICATOR: st.integers(0, 1),
    PropertyId.MESSAGE_EXPIRY_INTERVAL: uint32,
    PropertyId.CONTENT_TYPE: text,
    PropertyId.RESPONSE_TOPIC: topic_names,
    PropertyId.CORRELATION_DATA: binary,
    PropertyId.SUBSCRIPTION_IDENTIFIER: st.lists(st.integers(1, 268_435_455), min_size=1),
    PropertyId.SESSION_EXPIRY_INTERVAL: st.integers(0, 0xFFFFFFFF),
    PropertyId.ASSIGNED_CLIENT_IDENTIFIER: text,
    PropertyId.SERVER_KEEP_ALIVE: st.integers(0, 0xFFFF),
    PropertyId.AUTHENTICATION_METHOD: text,
    PropertyId.AUTHENTICATION_DATA: binary,
    PropertyId.REQUEST_PROBLEM_INFORMATION: st.integers(0, 1),
    PropertyId.WILL_DELAY_INTERVAL: st.integers(0, 0xFFFFFFFF),
    PropertyId.REQUEST_RESPONSE_INFORMATION: st.integers(0, 1),
    PropertyId.RESPONSE_INFORMATION: text,
    PropertyId.SERVER_REFERENCE: text,
    PropertyId.REASON_STRING: text,
    PropertyId.RECEIVE_MAXIMUM: uint16,
    PropertyId.TOPIC_ALIAS_MAXIMUM: st.integers(0, 0xFFFF),
    PropertyId.TOPIC_ALIAS: uint16,
    PropertyId.MAXIMUM_QOS: st.integers(0, 1),
    PropertyId.RETAIN_AVAILABLE: st.integers(0, 1),
    PropertyId.USER_PROPERTY: st.lists(st.tuples(text, text), min_size=1, max_size=3),
    PropertyId.MAXIMUM_PACKET_SIZE: uint32,
    PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE: st.integers(0, 1),
    PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE: st.integers(0, 1),
    PropertyId.SHARED_SUBSCRIPTION_AVAILABLE: st.integers(0, 1),
}


@st.composite
def properties(
    draw: st.DrawFn, context: int, version: int, exclude: frozenset[PropertyId] = frozenset()
) -> dict[PropertyId, Any]:
    """Properties allowed in `context` (a packet type or WILL_PROPERTIES); {} before MQTT 5."""
    if version < 5:
        return {}
    allowed = [pid for pid, (_, contexts) in _PROPERTY_SPEC.items() if context in contexts]
    chosen = draw(st.lists(st.sampled_from(allowed), unique=True, max_size=4))
    result = {pid: draw(_VALUES[pid]) for pid in chosen if pid not in exclude}
    if context == PacketType.SUBSCRIBE and PropertyId.SUBSCRIPTION_IDENTIFIER in result:
        result[PropertyId.SUBSCRIPTION_IDENTIFIER] = result[PropertyId.SUBSCRIPTION_IDENTIFIER][:1]
    return result


@st.composite
def wills(draw: st.DrawFn, version: int) -> mqtt.Will:
    return mqtt.Will(
        draw(topic_names),
        draw(binary),
        draw(st.integers(0, 2)),
        draw(st.booleans()),
        draw(properties(WILL_PROPERTIES, version)),
    )


@st.composite
def connects(draw: st.DrawFn, version: int) -> mqtt.Connect:
    username = draw(st.none() | text)
    password = draw(st.none() | binary)
    if version < 5 and username is None:
        password = None  # MQTT-3.1.2-22
    client_id = draw(text)
    clean_start = draw(st.booleans())
    if version == 4 and not client_id:
        clean_start = True  # MQTT-3.1.3-8
    return mqtt.Connect(
        client_id=client_id,
        protocol_version=version,
        clean_start=clean_start,
        keep_alive=draw(st.integers(0, 0xFFFF)),
        username=username,
        password=password,
        will=draw(st.none() | wills(version)),
        properties=draw(properties(PacketType.CONNECT, version)),
        protocol_name="MQIsdp" if version == 3 else "MQTT",
    )


@st.composite
def connacks(draw: st.DrawFn, version: int) -> mqtt.ConnAck:
    codes = sorted(_types.CONNACK_REASON_CODES) if version == 5 else list(range(6))
    return mqtt.ConnAck(
        draw(st.booleans()),
        draw(st.sampled_from(codes)),
        draw(properties(PacketType.CONNACK, version)),
    )


@st.composite
def publishes(draw: st.DrawFn, version: int, from_client: bool = False) -> mqtt.Publish:
    qos = draw(st.integers(0, 2))
    exclude = frozenset({PropertyId.SUBSCRIPTION_IDENTIFIER}) if from_client else frozenset()
    props = draw(properties(PacketType.PUBLISH, version, exclude))
    topic = draw(topic_names)
    if PropertyId.TOPIC_ALIAS in props and draw(st.booleans()):
        topic = ""
    return mqtt.Publish(
        topic=topic,
        payload=draw(st.binary(max_size=300)),
        qos=qos,
        retain=draw(st.booleans()),
        dup=draw(st.booleans()) if qos else False,
        packet_id=draw(packet_ids) if qos else None,
        properties=props,
    )


def _acks(
    cls: type[mqtt.PubAck | mqtt.PubRec | mqtt.PubRel | mqtt.PubComp],
    codes: frozenset[int],
    version: int,
) -> st.SearchStrategy[mqtt.Packet]:
    if version < 5:
        return st.builds(cls, packet_ids)
    return st.builds(
        cls, packet_ids, st.sampled_from(sorted(codes)), properties(cls.packet_type, version)
    )


@st.composite
def subscribes(draw: st.DrawFn, version: int) -> mqtt.Subscribe:
    requests = []
    for topic_filter in draw(st.lists(topic_filters, min_size=1, max_size=4)):
        if version == 5:
            requests.append(
                mqtt.SubscriptionRequest(
                    topic_filter,
                    draw(st.integers(0, 2)),
                    # no local is a protocol error on a shared subscription (MQTT-3.8.3-4)
                    draw(st.booleans()) and not topic_filter.startswith("$share/"),
                    draw(st.booleans()),
                    draw(st.integers(0, 2)),
                )
            )
        else:
            requests.append(mqtt.SubscriptionRequest(topic_filter, draw(st.integers(0, 2))))
    return mqtt.Subscribe(
        draw(packet_ids), requests, draw(properties(PacketType.SUBSCRIBE, version))
    )


@st.composite
def subacks(draw: st.DrawFn, version: int) -> mqtt.SubAck:
    codes = _types.SUBACK_REASON_CODES if version == 5 else _types.SUBACK_V3_RETURN_CODES
    return mqtt.SubAck(
        draw(packet_ids),
        draw(st.lists(st.sampled_from(sorted(codes)), min_size=1, max_size=4)),
        draw(properties(PacketType.SUBACK, version)),
    )


@st.composite
def unsubscribes(draw: st.DrawFn, version: int) -> mqtt.Unsubscribe:
    return mqtt.Unsubscribe(
        draw(packet_ids),
        draw(st.lists(topic_filters, min_size=1, max_size=4)),
        draw(properties(PacketType.UNSUBSCRIBE, version)),
    )


@st.composite
def unsubacks(draw: st.DrawFn, version: int) -> mqtt.UnsubAck:
    if version < 5:
        return mqtt.UnsubAck(draw(packet_ids))
    return mqtt.UnsubAck(
        draw(packet_ids),
        draw(
            st.lists(st.sampled_from(sorted(_types.UNSUBACK_REASON_CODES)), min_size=1, max_size=4)
        ),
        draw(properties(PacketType.UNSUBACK, version)),
    )


@st.composite
def disconnects(draw: st.DrawFn, version: int) -> mqtt.Disconnect:
    if version < 5:
        return mqtt.Disconnect()
    return mqtt.Disconnect(
        draw(st.sampled_from(sorted(_types.DISCONNECT_REASON_CODES))),
        draw(properties(PacketType.DISCONNECT, version)),
    )


@st.composite
def auths(draw: st.DrawFn) -> mqtt.Auth:
    return mqtt.Auth(
        draw(st.sampled_from(sorted(_types.AUTH_REASON_CODES))),
        draw(properties(PacketType.AUTH, 5)),
    )


def _qos_acknowledgements(version: int) -> list[st.SearchStrategy[mqtt.Packet]]:
    """PUBACK, PUBREC, PUBREL and PUBCOMP: clients and servers both send them."""
    return [
        _acks(mqtt.PubAck, _types.PUBACK_REASON_CODES, version),
        _acks(mqtt.PubRec, _types.PUBACK_REASON_CODES, version),
        _acks(mqtt.PubRel, _types.PUBREL_REASON_CODES, version),
        _acks(mqtt.PubComp, _types.PUBREL_REASON_CODES, version),
    ]


def client_packets(version: int) -> st.SearchStrategy[mqtt.Packet]:
    """What a client sends after CONNECT."""
    options: list[st.SearchStrategy[Any]] = [
        publishes(version, from_client=True),
        *_qos_acknowledgements(version),
        subscribes(version),
        unsubscribes(version),
        st.just(mqtt.PingReq()),
        disconnects(version),
    ]
    if version == 5:
        options.append(auths())
    return st.one_of(options)


def server_packets(version: int) -> st.SearchStrategy[mqtt.Packet]:
    """What a server sends."""
    options: list[st.SearchStrategy[Any]] = [
        connacks(version),
        publishes(version),
        *_qos_acknowledgements(version),
        subacks(version),
        unsubacks(version),
        st.just(mqtt.PingResp()),
    ]
    if version == 5:
        options += [disconnects(version), auths()]
    return st.one_of(options)


def any_packet(version: int) -> st.SearchStrategy[mqtt.Packet]:
    return st.one_of(connects(version), client_packets(version), server_packets(version))
