"""PUBLISH end to end: size limits, topic aliases, expiry, properties, request/response, interop."""

from __future__ import annotations

import queue
import shutil
import subprocess
import threading
import time
import uuid

import paho.mqtt.client as paho
import pytest
from e2e.rawclient import RawClient, offline_subscriber, subscriber_and_publisher

from hive_core import mqtt

pytestmark = pytest.mark.timeout(30)

P = mqtt.PropertyId
RC = mqtt.ReasonCode
WAIT = 5.0

PASS_THROUGH = {
    "PAYLOAD_FORMAT_INDICATOR": 1,
    "CONTENT_TYPE": "application/json; charset=utf-8",
    "RESPONSE_TOPIC": "replies/for/me",
    "CORRELATION_DATA": b"\x00\x01corr\xff",
    "USER_PROPERTY": [("a", "1"), ("b", "2"), ("a", "3"), ("a", "1"), ("", "")],
}
PASS_THROUGH_IDS = {P[name]: value for name, value in PASS_THROUGH.items()}


def small_packets(size: int) -> str:
    return f"<mqtt><packets><max-packet-size>{size}</max-packet-size></packets></mqtt>"


# ---------------------------------------------------------------------- maximum packet size


def test_publish_above_max_packet_size_disconnects_0x95(hive_factory):
    node = hive_factory(body=small_packets(1000))
    with RawClient(node.port) as pub:
        connack = pub.connect(5, "big-pub")
        assert connack.properties[P.MAXIMUM_PACKET_SIZE] == 1000
        pub.publish_acknowledged("big", b"x" * 900, 1)  # fits
        pub.publish("big", b"x" * 2000, 1)
        pub.expect_disconnect(RC.PACKET_TOO_LARGE)


def test_publish_above_max_packet_size_closes_v311(hive_factory):
    node = hive_factory(body=small_packets(1000))
    with RawClient(node.port) as pub:
        pub.connect(4, "big-pub-311")
        pub.publish("big", b"x" * 2000, 0)
        assert pub.expect_closed() == []


@pytest.mark.parametrize("qos", [0, 1])
def test_client_maximum_packet_size_skips_larger_messages(hive, qos):
    with subscriber_and_publisher(hive.port, "sized", qos, "sized",
                                  MAXIMUM_PACKET_SIZE=200) as (sub, pub):
        for payload in (b"L" * 500, b"small", b"L" * 190, b"after"):
            pub.publish_acknowledged("sized", payload, qos)
        got = []
        for _ in range(2):
            packet = sub.expect(mqtt.Publish)
            got.append(packet.payload)
            sub.acknowledge(packet)
        sub.expect_nothing(0.5)
        assert got == [b"small", b"after"]


def test_max_packet_size_boundary_inbound(hive_factory):
    node = hive_factory(body=small_packets(1000))
    exact = mqtt.Publish("edge", b"x" * 900, 1, False, False, 1)
    exact.payload += b"x" * (1000 - len(mqtt.encode_packet(exact, 5)))
    assert len(mqtt.encode_packet(exact, 5)) == 1000
    with RawClient(node.port) as pub:
        pub.connect(5, "edge-pub")
        pub.send(exact)
        assert pub.expect(mqtt.PubAck).packet_id == 1
        pub.publish("edge", exact.payload + b"x", 1)
        pub.expect_disconnect(RC.PACKET_TOO_LARGE)


def test_max_packet_size_boundary_outbound(hive):
    with subscriber_and_publisher(hive.port, "edge", 1, "edge",
                                  MAXIMUM_PACKET_SIZE=100) as (sub, pub):
        sized = mqtt.Publish("edge", b"", 1, False, False, 1)
        fits = b"f" * (100 - len(mqtt.encode_packet(sized, 5)))
        pub.publish_acknowledged("edge", fits + b"+", 1)
        pub.publish_acknowledged("edge", fits, 1)
        packet = sub.expect(mqtt.Publish)
        assert packet.payload == fits
        assert len(mqtt.encode_packet(packet, 5)) == 100


def test_client_maximum_packet_size_applies_to_queued_messages(hive):
    offline_subscriber(hive.port, "small-offline", "sized/offline", MAXIMUM_PACKET_SIZE=200)
    with RawClient(hive.port) as pub:
        pub.connect(5, "sized-offline-pub")
        for payload in (b"L" * 500, b"small", b"L" * 400, b"after"):
            pub.publish_acknowledged("sized/offline", payload, 1)
    with RawClient(hive.port) as sub:
        sub.connect(5, "small-offline", clean_start=False, SESSION_EXPIRY_INTERVAL=300,
                    MAXIMUM_PACKET_SIZE=200)
        got = []
        for _ in range(2):
            packet = sub.expect(mqtt.Publish)
            sub.send(mqtt.PubAck(packet.packet_id))
            got.append(packet.payload)
        sub.expect_nothing(0.5)
        assert got == [b"small", b"after"]


def test_skipped_large_message_does_not_spend_a_topic_alias(hive):
    with subscriber_and_publisher(hive.port, "sized/alias", 0, "alias-size",
                                  MAXIMUM_PACKET_SIZE=200, TOPIC_ALIAS_MAXIMUM=5) as (sub, pub):
        pub.publish("sized/alias", b"L" * 500)
        pub.publish("sized/alias", b"small")
        packet = sub.expect(mqtt.Publish)
        assert packet.payload == b"small"
        # The client never saw the large one, so it must learn the topic from this one.
        assert packet.topic == "sized/alias"


# ---------------------------------------------------------------------- topic aliases


def test_inbound_topic_alias_resolves_for_subscribers(hive):
    with RawClient(hive.port) as sub, RawClient(hive.port) as pub:
        sub.connect(4, "alias-in-sub")
        sub.subscribe("alias/#", 1)
        connack = pub.connect(5, "alias-in-pub")
        assert connack.properties[P.TOPIC_ALIAS_MAXIMUM] == 5
        pub.publish_acknowledged("alias/one", b"1", 1, TOPIC_ALIAS=3)
        pub.publish_acknowledged("", b"2", 1, TOPIC_ALIAS=3)
        pub.publish_acknowledged("alias/two", b"3", 1, TOPIC_ALIAS=3)  # re-map alias 3
        pub.publish_acknowledged("", b"4", 1, TOPIC_ALIAS=3)
        got = []
        for _ in range(4):
            packet = sub.expect(mqtt.Publish)
            sub.send(mqtt.PubAck(packet.packet_id))
            got.append((packet.topic, packet.payload))
        assert got == [("alias/one", b"1"), ("alias/one", b"2"), ("alias/two", b"3"),
                       ("alias/two", b"4")]


def test_inbound_topic_alias_not_forwarded_to_v5_subscriber(hive):
    # no TOPIC_ALIAS_MAXIMUM: the subscriber must never get an alias
    with subscriber_and_publisher(hive.port, "alias/fwd", 0, "alias-fwd") as (sub, pub):
        pub.publish("alias/fwd", b"1", TOPIC_ALIAS=1)
        pub.publish("", b"2", TOPIC_ALIAS=1)
        for payload in (b"1", b"2"):
            packet = sub.expect(mqtt.Publish)
            assert (packet.topic, packet.payload) == ("alias/fwd", payload)
            assert P.TOPIC_ALIAS not in packet.properties


def test_inbound_topic_alias_above_maximum_disconnects_0x94(hive):
    with RawClient(hive.port) as pub:
        pub.connect(5, "alias-big")
        pub.publish("alias/x", b"1", TOPIC_ALIAS=6)
        pub.expect_disconnect(RC.TOPIC_ALIAS_INVALID)


def test_inbound_unknown_topic_alias_is_a_protocol_error(hive):
    with RawClient(hive.port) as pub:
        pub.connect(5, "alias-unknown")
        pub.publish("", b"1", TOPIC_ALIAS=2)
        pub.expect_disconnect(RC.PROTOCOL_ERROR)


def test_inbound_topic_alias_disabled(hive_factory):
    node = hive_factory(body="<mqtt><topic-alias><enabled>false</enabled></topic-alias></mqtt>")
    with RawClient(node.port) as pub:
        connack = pub.connect(5, "alias-off")
        assert P.TOPIC_ALIAS_MAXIMUM not in connack.properties
        pub.publish("alias/x", b"1", TOPIC_ALIAS=1)
        pub.expect_disconnect(RC.TOPIC_ALIAS_INVALID)


@pytest.mark.parametrize("qos", [0, 1])
def test_outbound_topic_alias(hive, qos):
    with subscriber_and_publisher(hive.port, "out/#", qos, "alias-out",
                                  TOPIC_ALIAS_MAXIMUM=5) as (sub, pub):
        for topic in ("out/a", "out/a", "out/b", "out/a", "out/b"):
            pub.publish_acknowledged(topic, topic.encode(), qos)
        seen: dict[int, str] = {}
        for topic in ("out/a", "out/a", "out/b", "out/a", "out/b"):
            packet = sub.expect(mqtt.Publish)
            sub.acknowledge(packet)
            alias = packet.properties[P.TOPIC_ALIAS]
            assert 1 <= alias <= 5
            if alias in seen:
                assert packet.topic == ""
            else:
                assert packet.topic == topic
                seen[alias] = topic
            assert seen[alias] == topic
            assert packet.payload == topic.encode()
        assert len(seen) == 2


def test_outbound_topic_aliases_start_over_on_reconnect(hive):
    with RawClient(hive.port) as pub:
        pub.connect(5, "alias-re-pub")
        for _ in range(2):
            with RawClient(hive.port) as sub:
                sub.connect(5, "alias-re-sub", clean_start=False, TOPIC_ALIAS_MAXIMUM=5,
                            SESSION_EXPIRY_INTERVAL=60)
                sub.subscribe("re/alias", 0)
                pub.publish("re/alias", b"x")
                packet = sub.expect(mqtt.Publish)
                assert packet.topic == "re/alias"
                assert P.TOPIC_ALIAS in packet.properties


def test_outbound_topic_aliases_run_out(hive_factory):
    node = hive_factory(body="<mqtt><topic-alias><max-per-client>2</max-per-client>"
                             "</topic-alias></mqtt>")
    with subscriber_and_publisher(node.port, "few/#", 0, "alias-few",
                                  TOPIC_ALIAS_MAXIMUM=10) as (sub, pub):  # the node allows 2
        for topic in ("few/1", "few/2", "few/3", "few/3"):
            pub.publish(topic, b"x")
        aliases = []
        for topic in ("few/1", "few/2", "few/3", "few/3"):
            packet = sub.expect(mqtt.Publish)
            assert packet.topic == topic  # 3 has no alias: always the full topic
            aliases.append(packet.properties.get(P.TOPIC_ALIAS))
        assert aliases[:2] == [1, 2] and aliases[2:] == [None, None]


# ---------------------------------------------------------------------- message expiry


def test_queued_message_expires_for_offline_session(hive):
    offline_subscriber(hive.port, "expiry-sub", "exp")
    with RawClient(hive.port) as pub:
        pub.connect(5, "expiry-pub")
        pub.publish_acknowledged("exp", b"short", 1, MESSAGE_EXPIRY_INTERVAL=1)
        pub.publish_acknowledged("exp", b"long", 1, MESSAGE_EXPIRY_INTERVAL=100)
        pub.publish_acknowledged("exp", b"forever", 1)
    time.sleep(2.2)
    with RawClient(hive.port) as sub:
        sub.connect(5, "expiry-sub", clean_start=False, SESSION_EXPIRY_INTERVAL=300)
        long = sub.expect(mqtt.Publish)
        sub.send(mqtt.PubAck(long.packet_id))
        assert long.payload == b"long"
        assert 90 <= long.properties[P.MESSAGE_EXPIRY_INTERVAL] <= 98
        forever = sub.expect(mqtt.Publish)
        sub.send(mqtt.PubAck(forever.packet_id))
        assert forever.payload == b"forever"
        assert P.MESSAGE_EXPIRY_INTERVAL not in forever.properties
        sub.expect_nothing(0.5)


def test_live_delivery_carries_expiry_interval(hive):
    with subscriber_and_publisher(hive.port, "exp/live", 0, "expiry-live") as (sub, pub):
        pub.publish("exp/live", b"x", MESSAGE_EXPIRY_INTERVAL=60)
        packet = sub.expect(mqtt.Publish)
        assert 59 <= packet.properties[P.MESSAGE_EXPIRY_INTERVAL] <= 60


def test_retained_message_expires(hive):
    with RawClient(hive.port) as pub:
        pub.connect(5, "retain-exp-pub")
        pub.publish_acknowledged("exp/retained", b"soon gone", 1, retain=True,
                                 MESSAGE_EXPIRY_INTERVAL=1)
        pub.publish_acknowledged("exp/kept", b"kept", 1, retain=True, MESSAGE_EXPIRY_INTERVAL=100)
    time.sleep(2.2)
    with RawClient(hive.port) as sub:
        sub.connect(5, "retain-exp-sub")
        sub.subscribe("exp/#", 0)
        packet = sub.expect(mqtt.Publish)
        assert (packet.topic, packet.retain) == ("exp/kept", True)
        assert packet.properties[P.MESSAGE_EXPIRY_INTERVAL] <= 98
        sub.expect_nothing(0.5)


# ---------------------------------------------------------------------- properties


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_publish_properties_pass_through_unchanged(hive, qos):
    with subscriber_and_publisher(hive.port, "props", 2, "props") as (sub, pub):
        pub.publish("props", b"{}", qos, **PASS_THROUGH)
        packet = sub.expect(mqtt.Publish)
        assert packet.qos == qos
        assert packet.properties == PASS_THROUGH_IDS
        assert list(packet.properties[P.USER_PROPERTY]) == PASS_THROUGH["USER_PROPERTY"]


def test_publish_properties_pass_through_to_offline_session(hive):
    offline_subscriber(hive.port, "props-offline", "props/offline")
    with RawClient(hive.port) as pub:
        pub.connect(5, "props-offline-pub")
        pub.publish_acknowledged("props/offline", b"{}", 1, **PASS_THROUGH)
    with RawClient(hive.port) as sub:
        sub.connect(5, "props-offline", clean_start=False, SESSION_EXPIRY_INTERVAL=300)
        packet = sub.expect(mqtt.Publish)
        assert packet.properties == PASS_THROUGH_IDS


def test_publish_properties_survive_a_restart(hive):
    offline_subscriber(hive.port, "props-restart", "props/restart")
    with RawClient(hive.port) as pub:
        pub.connect(5, "props-restart-pub")
        pub.publish_acknowledged("props/restart", b"{}", 1, **PASS_THROUGH)
        pub.publish_acknowledged("props/retained", b"r", 1, retain=True, **PASS_THROUGH)
    hive.restart()
    with RawClient(hive.port) as sub:
        assert sub.connect(5, "props-restart", clean_start=False,
                           SESSION_EXPIRY_INTERVAL=300).session_present
        packet = sub.expect(mqtt.Publish)
        assert packet.payload == b"{}"
        assert packet.properties == PASS_THROUGH_IDS
        sub.send(mqtt.PubAck(packet.packet_id))
        sub.subscribe("props/retained", 0)
        retained = sub.expect(mqtt.Publish)
        assert retained.retain and retained.properties == PASS_THROUGH_IDS


def test_v311_subscriber_gets_payload_without_properties(hive):
    with RawClient(hive.port) as sub, RawClient(hive.port) as pub:
        sub.connect(4, "props-311")
        sub.subscribe("props/311", 1)
        pub.connect(5, "props-311-pub")
        pub.publish_acknowledged("props/311", b"plain", 1, MESSAGE_EXPIRY_INTERVAL=30,
                                 **PASS_THROUGH)
        packet = sub.expect(mqtt.Publish)
        assert (packet.topic, packet.payload, packet.qos) == ("props/311", b"plain", 1)


# ---------------------------------------------------------------------- payloads and topics


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_multibyte_topic_and_odd_payloads(hive, version, qos):
    topic = "größe/蜂/🐝"
    payloads = [b"", b"\x00\xff" * 3, bytes(range(256)) * 600]  # the last needs a 3 byte length
    with subscriber_and_publisher(hive.port, "größe/+/#", 2, "odd", version) as (sub, pub):
        for payload in payloads:
            pub.publish_acknowledged(topic, payload, qos)
        got = [sub.expect(mqtt.Publish) for _ in payloads]
        assert [(p.topic, p.payload, p.qos) for p in got] == [(topic, b, qos) for b in payloads]
        for packet in got:
            sub.acknowledge(packet)
        sub.expect_nothing(0.2)


def test_megabyte_payload_with_paho(hive):
    client, messages = paho_subscriber(hive.port, "big/payload", version=5)
    try:
        publisher = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="big-paho",
                                protocol=paho.MQTTv311)
        publisher.connect("127.0.0.1", hive.port, 30)
        publisher.loop_start()
        payload = bytes(range(256)) * 4096  # 1 MiB
        for qos in (1, 2):
            publisher.publish("big/payload", payload, qos).wait_for_publish(WAIT)
            message = messages.get(timeout=WAIT)
            assert message.payload == payload and message.qos == qos
        publisher.disconnect()
        publisher.loop_stop()
    finally:
        client.disconnect()
        client.loop_stop()


# ---------------------------------------------------------------------- request / response


def test_response_information_only_when_requested(hive):
    with RawClient(hive.port) as asking, RawClient(hive.port) as plain:
        info = asking.connect(5, "asker", REQUEST_RESPONSE_INFORMATION=1).properties
        assert isinstance(info[P.RESPONSE_INFORMATION], str)
        assert info[P.RESPONSE_INFORMATION]
        assert P.RESPONSE_INFORMATION not in plain.connect(5, "plain").properties
        with RawClient(hive.port) as declined:
            props = declined.connect(5, "declined", REQUEST_RESPONSE_INFORMATION=0).properties
            assert P.RESPONSE_INFORMATION not in props


def test_request_response_round_trip(hive):
    with RawClient(hive.port) as requester, RawClient(hive.port) as responder:
        base = requester.connect(5, "requester", REQUEST_RESPONSE_INFORMATION=1).properties[
            P.RESPONSE_INFORMATION]
        reply_to = f"{base.rstrip('/')}/calc"
        requester.subscribe(reply_to, 1)
        responder.connect(5, "responder")
        responder.subscribe("service/calc", 1)

        requester.publish_acknowledged("service/calc", b"6*7", 1, RESPONSE_TOPIC=reply_to,
                                       CORRELATION_DATA=b"req-1")
        request = responder.expect(mqtt.Publish)
        responder.send(mqtt.PubAck(request.packet_id))
        assert request.properties[P.RESPONSE_TOPIC] == reply_to
        assert request.properties[P.CORRELATION_DATA] == b"req-1"

        responder.publish_acknowledged(request.properties[P.RESPONSE_TOPIC], b"42", 1,
                                       CORRELATION_DATA=request.properties[P.CORRELATION_DATA])
        response = requester.expect(mqtt.Publish)
        assert (response.topic, response.payload) == (reply_to, b"42")
        assert response.properties[P.CORRELATION_DATA] == b"req-1"


# ---------------------------------------------------------------------- interoperability

LINE_BUFFERED = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
needs_mosquitto = pytest.mark.skipif(
    shutil.which("mosquitto_pub") is None or shutil.which("mosquitto_sub") is None,
    reason="mosquitto clients not on PATH",
)


def paho_subscriber(port: int, topic: str, version: int = 4) -> tuple[paho.Client, queue.Queue]:
    messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
    subscribed = threading.Event()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"p-{uuid.uuid4().hex[:8]}",
                         protocol=paho.MQTTv5 if version == 5 else paho.MQTTv311)
    client.on_message = lambda c, u, m: messages.put(m)
    client.on_subscribe = lambda *args: subscribed.set()
    client.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, 2)
    client.connect("127.0.0.1", port, 30)
    client.loop_start()
    assert subscribed.wait(WAIT)
    return client, messages


@needs_mosquitto
@pytest.mark.parametrize("version", ["mqttv31", "mqttv311", "mqttv5"])
def test_mosquitto_pub_to_paho(hive, version):
    client, messages = paho_subscriber(hive.port, "interop/in")
    try:
        for qos in (0, 1, 2):
            subprocess.run(
                ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(hive.port), "-V", version,
                 "-q", str(qos), "-t", "interop/in", "-m", f"from mosquitto {qos}"],
                check=True, timeout=WAIT, capture_output=True,
            )
            message = messages.get(timeout=WAIT)
            assert message.payload == f"from mosquitto {qos}".encode()
            assert message.qos == qos
    finally:
        client.disconnect()
        client.loop_stop()


@needs_mosquitto
@pytest.mark.parametrize("version", ["mqttv31", "mqttv311", "mqttv5"])
def test_paho_to_mosquitto_sub(hive, version):
    sub = subprocess.Popen(
        [*LINE_BUFFERED, "mosquitto_sub", "-h", "127.0.0.1", "-p", str(hive.port),
         "-V", version, "-q", "2", "-t", "interop/out", "-C", "3", "-W", "10", "-v", "-d"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert sub.stdout is not None
        for line in sub.stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + WAIT
        while "SUBACK" not in lines.get(timeout=max(0.01, deadline - time.monotonic())):
            pass
        client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="paho-interop",
                             protocol=paho.MQTTv311)
        client.connect("127.0.0.1", hive.port, 30)
        client.loop_start()
        for qos in (0, 1, 2):
            client.publish("interop/out", f"from paho {qos}", qos).wait_for_publish(WAIT)
        client.disconnect()
        client.loop_stop()
        assert sub.wait(WAIT) == 0
        reader.join(WAIT)  # its last lines may still be on their way into the queue
        received = []
        while not lines.empty():
            received.append(lines.get())
        for qos in (0, 1, 2):
            assert f"interop/out from paho {qos}\n" in received
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait(5)


@needs_mosquitto
def test_mosquitto_v5_user_properties_reach_paho(hive):
    client, messages = paho_subscriber(hive.port, "interop/props", version=5)
    try:
        subprocess.run(
            ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(hive.port), "-V", "mqttv5",
             "-q", "1", "-t", "interop/props", "-m", "p",
             "-D", "publish", "user-property", "k", "v",
             "-D", "publish", "content-type", "text/plain"],
            check=True, timeout=WAIT, capture_output=True,
        )
        message = messages.get(timeout=WAIT)
        assert message.properties.UserProperty == [("k", "v")]
        assert message.properties.ContentType == "text/plain"
    finally:
        client.disconnect()
        client.loop_stop()


def test_message_expiry_capped_by_node_maximum(hive_factory):
    node = hive_factory(body="<mqtt><message-expiry><max-interval>10</max-interval>"
                             "</message-expiry></mqtt>")
    with subscriber_and_publisher(node.port, "cap", 0, "cap") as (sub, pub):
        pub.publish("cap", b"x", MESSAGE_EXPIRY_INTERVAL=100)
        assert 9 <= sub.expect(mqtt.Publish).properties[P.MESSAGE_EXPIRY_INTERVAL] <= 10
