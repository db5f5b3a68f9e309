"""QoS 0, 1 and 2 end to end: flows, packet identifiers, redelivery, windows and limits."""

from __future__ import annotations

import queue
import threading
import uuid

import paho.mqtt.client as paho
import pytest
from e2e.rawclient import (
    RawClient,
    offline_subscriber,
    persistent_subscriber,
    subscriber_and_publisher,
)
from paho.mqtt.reasoncodes import ReasonCode as PahoReasonCode

from hive_core import mqtt

pytestmark = pytest.mark.timeout(30)

P = mqtt.PropertyId
RC = mqtt.ReasonCode
WAIT = 5.0


class Paho:
    """A paho client on a background loop: messages in a queue, acks as events."""

    def __init__(self, port: int, version: int = 5, client_id: str | None = None,
                 clean: bool = True) -> None:
        protocol = paho.MQTTv5 if version == 5 else paho.MQTTv311
        self.client_id = client_id or f"paho-{uuid.uuid4().hex[:8]}"
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=self.client_id,
                                  protocol=protocol,
                                  clean_session=None if version == 5 else clean)
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.subacks: queue.Queue[list[int]] = queue.Queue()
        self.connected = threading.Event()
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        self.client.on_connect = lambda c, u, f, rc, p: self.connected.set()
        self.client.on_subscribe = lambda c, u, mid, codes, p: self.subacks.put(
            [code.value if isinstance(code, PahoReasonCode) else code for code in codes])
        kwargs = {"clean_start": clean} if version == 5 else {}
        self.client.connect("127.0.0.1", port, keepalive=30, **kwargs)
        self.client.loop_start()
        assert self.connected.wait(WAIT), "paho did not connect"

    def subscribe(self, topic: str, qos: int) -> list[int]:
        self.client.subscribe(topic, qos)
        return self.subacks.get(timeout=WAIT)

    def publish(self, topic: str, payload: bytes, qos: int) -> None:
        info = self.client.publish(topic, payload, qos)
        info.wait_for_publish(WAIT)
        assert info.is_published()

    def get(self, timeout: float = WAIT) -> paho.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def nothing(self, timeout: float = 0.5) -> None:
        with pytest.raises(queue.Empty):
            self.messages.get(timeout=timeout)

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def paho_clients():
    made: list[Paho] = []

    def make(port: int, version: int = 5, **kwargs) -> Paho:
        client = Paho(port, version, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.stop()


# ---------------------------------------------------------------------- QoS levels


@pytest.mark.parametrize("version", [4, 5])
def test_granted_qos_is_min_of_publish_and_subscription(hive, paho_clients, version):
    publisher = paho_clients(hive.port, version)
    for sub_qos in (0, 1, 2):
        subscriber = paho_clients(hive.port, version)
        assert subscriber.subscribe(f"levels/{sub_qos}", sub_qos) == [sub_qos]
        for pub_qos in (0, 1, 2):
            payload = f"{pub_qos}->{sub_qos}".encode()
            publisher.publish(f"levels/{sub_qos}", payload, pub_qos)
            message = subscriber.get()
            assert message.payload == payload
            assert message.qos == min(pub_qos, sub_qos)
        subscriber.nothing(0.2)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_qos1_flow_on_the_wire(hive, version):
    with subscriber_and_publisher(hive.port, "q1", 1, "q1", version) as (sub, pub):
        ack = pub.publish_acknowledged("q1", b"one", 1, packet_id=0x1234)
        assert ack.packet_id == 0x1234 and ack.reason_code == 0
        first = sub.expect(mqtt.Publish)
        assert (first.topic, first.payload, first.qos, first.dup) == ("q1", b"one", 1, False)
        assert first.packet_id
        pub.publish_acknowledged("q1", b"two", 1, packet_id=0x1235)
        second = sub.expect(mqtt.Publish)
        assert second.packet_id and second.packet_id != first.packet_id  # both in flight
        sub.send(mqtt.PubAck(first.packet_id))
        sub.send(mqtt.PubAck(second.packet_id))
        sub.expect_nothing(0.3)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_qos2_flow_on_the_wire(hive, version):
    with subscriber_and_publisher(hive.port, "q2", 2, "q2", version) as (sub, pub):
        rec = pub.publish_acknowledged("q2", b"exactly", 2, packet_id=77)  # PUBREL, PUBCOMP 77
        assert rec.packet_id == 77 and rec.reason_code == 0
        delivered = sub.expect(mqtt.Publish)
        assert (delivered.payload, delivered.qos) == (b"exactly", 2)
        sub.acknowledge(delivered)  # PUBREC, the node's PUBREL for its packet id, PUBCOMP
        sub.expect_nothing(0.3)


@pytest.mark.parametrize("qos, ack", [(1, mqtt.PubAck), (2, mqtt.PubRec)])
def test_no_matching_subscribers_reason_v5(hive, qos, ack):
    with RawClient(hive.port) as pub:
        pub.connect(5, "lonely")
        pub.publish("nobody/listens", b"x", qos, packet_id=9)
        reply = pub.expect(ack)
        assert reply.packet_id == 9
        assert reply.reason_code == RC.NO_MATCHING_SUBSCRIBERS


def test_no_matching_subscribers_v311_plain_ack(hive):
    with RawClient(hive.port) as pub:
        pub.connect(4, "lonely311")
        pub.publish("nobody/listens", b"x", 1, packet_id=9)
        reply = pub.expect(mqtt.PubAck)
        assert (reply.packet_id, reply.reason_code) == (9, 0)


# ---------------------------------------------------------------------- redelivery


@pytest.mark.parametrize("version", [4, 5])
def test_unacked_messages_redelivered_with_dup_after_reconnect(hive, version):
    persistent = {"SESSION_EXPIRY_INTERVAL": 300} if version == 5 else {}
    sub = persistent_subscriber(hive.port, "redeliver", "re/#", 2, version)
    with RawClient(hive.port) as pub:
        pub.connect(version, "re-pub")
        pub.publish_acknowledged("re/1", b"q1", 1)
        pub.publish_acknowledged("re/2", b"q2", 2, packet_id=50)
    first = {p.payload: p for p in (sub.expect(mqtt.Publish), sub.expect(mqtt.Publish))}
    assert not any(p.dup for p in first.values())
    sub.close()  # no acks at all

    sub = RawClient(hive.port)
    connack = sub.connect(version, "redeliver", clean_start=False, **persistent)
    assert connack.session_present
    again = {p.payload: p for p in (sub.expect(mqtt.Publish), sub.expect(mqtt.Publish))}
    assert set(again) == {b"q1", b"q2"}
    for payload, packet in again.items():
        assert packet.dup, packet
        assert packet.packet_id == first[payload].packet_id
        assert packet.qos == first[payload].qos
    # Finish QoS 1, and take QoS 2 as far as PUBREC, then go away again.
    sub.send(mqtt.PubAck(again[b"q1"].packet_id))
    qos2_id = again[b"q2"].packet_id
    sub.send(mqtt.PubRec(qos2_id))
    assert sub.expect(mqtt.PubRel).packet_id == qos2_id
    sub.close()

    sub = RawClient(hive.port)
    sub.connect(version, "redeliver", clean_start=False, **persistent)
    assert sub.expect(mqtt.PubRel).packet_id == qos2_id  # the release is resent, not the PUBLISH
    sub.send(mqtt.PubComp(qos2_id))
    sub.expect_nothing(0.5)
    sub.close()


def test_inbound_qos2_duplicate_routed_once(hive, paho_clients):
    subscriber = paho_clients(hive.port, 5)
    subscriber.subscribe("once", 2)
    with RawClient(hive.port) as pub:
        pub.connect(5, "dup-pub")
        pub.publish("once", b"only once", 2, packet_id=7)
        assert pub.expect(mqtt.PubRec).packet_id == 7
        pub.send(mqtt.Publish("once", b"only once", 2, False, True, 7))  # DUP resend before PUBREL
        assert pub.expect(mqtt.PubRec).packet_id == 7
        pub.send(mqtt.PubRel(7))
        assert pub.expect(mqtt.PubComp).packet_id == 7
        # The id is free again: a new message with it is a new message.
        pub.publish_acknowledged("once", b"next", 2, packet_id=7)
    assert subscriber.get().payload == b"only once"
    assert subscriber.get().payload == b"next"
    subscriber.nothing(0.5)


# ---------------------------------------------------------------------- windows


def test_client_receive_maximum_limits_unacked_deliveries(hive):
    with subscriber_and_publisher(hive.port, "rm", 1, "rm", RECEIVE_MAXIMUM=2) as (sub, pub):
        for i in range(5):
            pub.publish_acknowledged("rm", str(i).encode(), 1)
        got = [sub.expect(mqtt.Publish), sub.expect(mqtt.Publish)]
        sub.expect_nothing(0.5)
        assert [p.payload for p in got] == [b"0", b"1"]
        sub.send(mqtt.PubAck(got[0].packet_id))
        third = sub.expect(mqtt.Publish)
        assert third.payload == b"2"
        sub.expect_nothing(0.3)
        sub.send(mqtt.PubAck(got[1].packet_id))
        sub.send(mqtt.PubAck(third.packet_id))
        rest = [sub.expect(mqtt.Publish), sub.expect(mqtt.Publish)]
        assert [p.payload for p in rest] == [b"3", b"4"]


def test_exceeding_server_receive_maximum_disconnects_0x93(hive_factory):
    node = hive_factory(body="<mqtt><receive-maximum><server-receive-maximum>2"
                             "</server-receive-maximum><strategy>disconnect</strategy>"
                             "</receive-maximum></mqtt>")
    with RawClient(node.port) as pub:
        connack = pub.connect(5, "greedy")
        assert connack.properties[P.RECEIVE_MAXIMUM] == 2
        pub.publish("rx", b"1", 2)
        pub.expect(mqtt.PubRec)
        pub.publish("rx", b"2", 2)
        pub.expect(mqtt.PubRec)
        pub.publish("rx", b"3", 2)
        pub.expect_disconnect(RC.RECEIVE_MAXIMUM_EXCEEDED)


def test_flow_control2_a_default_node_disconnects_past_its_receive_maximum_0x93(hive):
    """The Eclipse Paho interoperability test ``test_flow_control2`` (client_test5.py) on a
    node with no configuration: announced Receive Maximum + 1 QoS 2 PUBLISHes, none of their
    PUBRECs answered, must end in a DISCONNECT 0x93 the client reads (MQTT 5, 3.3.4)."""
    with RawClient(hive.port) as client:
        connack = client.connect(5, "flow-control2", RECEIVE_MAXIMUM=2,
                                 SESSION_EXPIRY_INTERVAL=0)
        server_receive_maximum = connack.properties.get(P.RECEIVE_MAXIMUM, 65535)
        assert server_receive_maximum == 100
        client.send_raw(b"".join(
            mqtt.encode_packet(mqtt.Publish("flow/t", b"message %d" % i, 2, False, False, i), 5)
            for i in range(1, server_receive_maximum + 2)))
        disconnect = client.expect_disconnect(RC.RECEIVE_MAXIMUM_EXCEEDED)
        assert disconnect.reason_code == 0x93


def test_a_default_paho_v5_publisher_loses_nothing(hive_factory):
    """paho keeps 20 QoS 1/2 messages in flight (it ignores the CONNACK's Receive Maximum):
    far inside the default 100, so a default node's 0x93 never hits it, even when every
    acknowledgement waits for the disk (persistent sessions)."""
    from cluster._nodes import metrics
    from conftest import free_port

    rest = free_port()
    node = hive_factory(
        body="<rest-api><enabled>true</enabled><listeners><http>"
             f"<port>{rest}</port><bind-address>127.0.0.1</bind-address></http></listeners>"
             "</rest-api>", rest=rest)
    subscriber = Paho(node.port, 5, client_id="default-sub", clean=False)
    publisher = Paho(node.port, 5, client_id="default-pub", clean=False)
    disconnects: queue.Queue[int] = queue.Queue()
    publisher.client.on_disconnect = lambda c, u, f, reason, p: disconnects.put(reason.value)
    try:
        assert subscriber.subscribe("rx/#", 2) == [2]
        sent = [publisher.client.publish("rx/t", b"%d" % i, 1 + i % 2) for i in range(400)]
        for info in sent:
            info.wait_for_publish(WAIT)
            assert info.is_published() and info.rc == 0
        got = [int(subscriber.get().payload) for _ in range(400)]
        for qos in (1, 2):  # ordered per QoS (MQTT 4.6): a QoS 2 message waits for its PUBREL
            assert [n for n in got if 1 + n % 2 == qos] == list(range(qos - 1, 400, 2))
        assert publisher.client.is_connected() and disconnects.empty()
        counters = metrics(node)["broker"]
        assert counters["receive_maximum_throttled"] == 0
        assert counters["protocol_errors"] == 0
    finally:
        publisher.stop()
        subscriber.stop()


def test_server_receive_maximum_frees_slots_on_pubrel(hive_factory):
    node = hive_factory(body="<mqtt><receive-maximum><server-receive-maximum>2"
                             "</server-receive-maximum></receive-maximum></mqtt>")
    with RawClient(node.port) as pub:
        pub.connect(5, "polite")
        for i in range(6):
            pub.publish_acknowledged("rx", str(i).encode(), 2)


def test_inflight_window_v311(hive_factory):
    node = hive_factory(body="<mqtt><inflight-window><max-messages>2</max-messages>"
                             "</inflight-window></mqtt>")
    with subscriber_and_publisher(node.port, "win", 1, "window", 4) as (sub, pub):
        for i in range(4):
            pub.publish_acknowledged("win", str(i).encode(), 1)
        got = [sub.expect(mqtt.Publish), sub.expect(mqtt.Publish)]
        sub.expect_nothing(0.5)
        sub.send(mqtt.PubAck(got[0].packet_id))
        sub.send(mqtt.PubAck(got[1].packet_id))
        rest = [sub.expect(mqtt.Publish), sub.expect(mqtt.Publish)]
        assert [p.payload for p in got + rest] == [b"0", b"1", b"2", b"3"]


# ---------------------------------------------------------------------- maximum QoS

MAX_QOS_1 = "<mqtt><quality-of-service><max-qos>1</max-qos></quality-of-service></mqtt>"


def test_max_qos_caps_suback_and_connack(hive_factory):
    node = hive_factory(body=MAX_QOS_1)
    with RawClient(node.port) as v5, RawClient(node.port) as v4:
        connack = v5.connect(5, "mq5")
        assert connack.properties[P.MAXIMUM_QOS] == 1
        assert v5.subscribe("mq/#", 2).reason_codes == [1]
        v4.connect(4, "mq4")
        assert v4.subscribe("mq/#", 2).reason_codes == [1]
        assert v4.subscribe("mq0", 0).reason_codes == [0]


def test_max_qos_v5_publish_qos2_disconnects_0x9b(hive_factory):
    node = hive_factory(body=MAX_QOS_1)
    with RawClient(node.port) as pub:
        pub.connect(5, "too-high")
        pub.publish("mq", b"x", 2)
        pub.expect_disconnect(RC.QOS_NOT_SUPPORTED)


def test_max_qos_qos1_publish_still_accepted(hive_factory):
    node = hive_factory(body=MAX_QOS_1)
    with RawClient(node.port) as sub, RawClient(node.port) as pub:
        sub.connect(5, "mq-sub")
        sub.subscribe("mq", 2)
        pub.connect(5, "mq-pub")
        assert pub.publish_acknowledged("mq", b"x", 1, packet_id=3).packet_id == 3
        assert sub.expect(mqtt.Publish).qos == 1


# ---------------------------------------------------------------------- queued messages


def _queue_body(strategy: str) -> str:
    return ("<mqtt><queued-messages><max-queue-size>3</max-queue-size>"
            f"<strategy>{strategy}</strategy></queued-messages></mqtt>")


@pytest.mark.parametrize("strategy, expected", [
    ("discard", [b"0", b"1", b"2"]),
    ("discard-oldest", [b"3", b"4", b"5"]),
])
def test_queue_limit_for_offline_session(hive_factory, strategy, expected):
    node = hive_factory(body=_queue_body(strategy))
    offline_subscriber(node.port, "queued", "qq")
    with RawClient(node.port) as pub:
        pub.connect(5, "queue-pub")
        for i in range(6):
            pub.publish_acknowledged("qq", str(i).encode(), 1)
    with RawClient(node.port) as sub:
        assert sub.connect(5, "queued", clean_start=False,
                           SESSION_EXPIRY_INTERVAL=300).session_present
        got = []
        for _ in expected:
            packet = sub.expect(mqtt.Publish)
            got.append(packet.payload)
            sub.send(mqtt.PubAck(packet.packet_id))
        sub.expect_nothing(0.5)
        assert got == expected


def test_connack_is_first(hive):
    """Queued deliveries never overtake the CONNACK."""
    offline_subscriber(hive.port, "first", "f", version=4)
    with RawClient(hive.port) as pub:
        pub.connect(4, "first-pub")
        pub.publish_acknowledged("f", b"queued", 1)
    with RawClient(hive.port) as sub:
        assert isinstance(sub.connect(4, "first", clean_start=False), mqtt.ConnAck)
        assert sub.expect(mqtt.Publish).payload == b"queued"


def test_suback_packet_id_echoed(hive):
    with RawClient(hive.port) as sub:
        sub.connect(5, "sid")
        sub._next_id = 4999
        ack = sub.subscribe("x", 1)
        assert isinstance(ack, mqtt.SubAck) and ack.packet_id == 5000


def test_server_receive_maximum_pipelined_qos2_from_persistent_session(hive_factory):
    """Two QoS 2 publishes at once are within a receive maximum of 2, even while the
    PUBRECs wait for the store (a persistent publisher session)."""
    node = hive_factory(body="<mqtt><receive-maximum><server-receive-maximum>2"
                             "</server-receive-maximum></receive-maximum></mqtt>")
    with RawClient(node.port) as pub:
        pub.connect(5, "pipelined", SESSION_EXPIRY_INTERVAL=300)
        pub.send_raw(mqtt.encode_packet(mqtt.Publish("rx", b"1", 2, False, False, 1), 5)
                     + mqtt.encode_packet(mqtt.Publish("rx", b"2", 2, False, False, 2), 5))
        assert {pub.expect(mqtt.PubRec).packet_id, pub.expect(mqtt.PubRec).packet_id} == {1, 2}
        for pid in (1, 2):
            pub.send(mqtt.PubRel(pid))
            assert pub.expect(mqtt.PubComp).packet_id == pid


@pytest.mark.parametrize("version", [4, 5])
def test_inbound_qos2_exactly_once_across_reconnect(hive, paho_clients, version):
    persistent = {"SESSION_EXPIRY_INTERVAL": 300} if version == 5 else {}
    subscriber = paho_clients(hive.port, 5)
    subscriber.subscribe("once/re", 2)
    pub = RawClient(hive.port)
    pub.connect(version, "once-re", clean_start=False, **persistent)
    pub.publish("once/re", b"m", 2, packet_id=11)
    pub.expect(mqtt.PubRec)
    pub.close()  # gone before PUBREL
    assert subscriber.get().payload == b"m"
    with RawClient(hive.port) as pub:
        assert pub.connect(version, "once-re", clean_start=False, **persistent).session_present
        pub.send(mqtt.Publish("once/re", b"m", 2, False, True, 11))  # the client's resend
        assert pub.expect(mqtt.PubRec).packet_id == 11
        pub.send(mqtt.PubRel(11))
        assert pub.expect(mqtt.PubComp).packet_id == 11
    subscriber.nothing(0.5)


def test_unacked_messages_redelivered_after_takeover(hive):
    old = persistent_subscriber(hive.port, "taken", "take", 1)
    with RawClient(hive.port) as pub:
        pub.connect(5, "take-pub")
        pub.publish_acknowledged("take", b"m", 1)
    first = old.expect(mqtt.Publish)
    with RawClient(hive.port) as new:
        assert new.connect(5, "taken", clean_start=False,
                           SESSION_EXPIRY_INTERVAL=300).session_present
        again = new.expect(mqtt.Publish)
        assert (again.payload, again.dup, again.packet_id) == (b"m", True, first.packet_id)
        new.send(mqtt.PubAck(again.packet_id))
        old.expect_disconnect(RC.SESSION_TAKEN_OVER)
        new.expect_nothing(0.3)
    old.close()


def test_unacked_messages_redelivered_after_restart(hive):
    sub = persistent_subscriber(hive.port, "restarted", "rs/#", 2)
    with RawClient(hive.port) as pub:
        pub.connect(5, "rs-pub")
        pub.publish_acknowledged("rs/1", b"q1", 1)
        pub.publish_acknowledged("rs/2", b"q2", 2, packet_id=5)
    first = {p.payload: p.packet_id for p in (sub.expect(mqtt.Publish), sub.expect(mqtt.Publish))}
    sub.close()
    hive.restart()
    with RawClient(hive.port) as sub:
        assert sub.connect(5, "restarted", clean_start=False,
                           SESSION_EXPIRY_INTERVAL=300).session_present
        again = {p.payload: p for p in (sub.expect(mqtt.Publish), sub.expect(mqtt.Publish))}
        assert {k: p.packet_id for k, p in again.items()} == first
        assert all(p.dup for p in again.values())
        sub.acknowledge(again[b"q1"])  # QoS 1: PUBACK
        sub.acknowledge(again[b"q2"])  # QoS 2: PUBREC, the node's PUBREL, PUBCOMP
        sub.expect_nothing(0.3)


# ---------------------------------------------------------------------- odd acknowledgements


def test_unknown_packet_ids_in_acks_v5(hive):
    with RawClient(hive.port) as client:
        client.connect(5, "odd-acks")
        client.send(mqtt.PubRel(321))
        comp = client.expect(mqtt.PubComp)
        assert (comp.packet_id, comp.reason_code) == (321, RC.PACKET_IDENTIFIER_NOT_FOUND)
        client.send(mqtt.PubRec(322))
        rel = client.expect(mqtt.PubRel)
        assert (rel.packet_id, rel.reason_code) == (322, RC.PACKET_IDENTIFIER_NOT_FOUND)
        client.send(mqtt.PubAck(323))  # nothing to answer, and no reason to close
        client.send(mqtt.PubComp(324))
        client.expect_nothing(0.3)
        assert client.subscribe("still/here", 1).reason_codes == [1]


def test_qos2_without_subscribers_completes(hive):
    with RawClient(hive.port) as pub:
        pub.connect(5, "q2-lonely")
        pub.publish("nobody", b"x", 2, packet_id=4)
        assert pub.expect(mqtt.PubRec).reason_code == RC.NO_MATCHING_SUBSCRIBERS
        pub.send(mqtt.PubRel(4))
        comp = pub.expect(mqtt.PubComp)
        assert (comp.packet_id, comp.reason_code) == (4, 0)


def test_max_qos_v311_publish_qos2_closes(hive_factory):
    node = hive_factory(body=MAX_QOS_1)
    with RawClient(node.port) as pub:
        pub.connect(4, "too-high-311")
        pub.publish("mq", b"x", 2)
        assert pub.expect_closed() == []


def test_max_qos_will_qos2_refused_v5(hive_factory):
    node = hive_factory(body=MAX_QOS_1)
    with RawClient(node.port) as client:
        connack = client.connect(5, "will-too-high", will=mqtt.Will("w", b"x", 2))
        assert connack.reason_code == RC.QOS_NOT_SUPPORTED
        client.expect_closed()


def test_inflight_window_caps_a_larger_receive_maximum(hive_factory):
    node = hive_factory(body="<mqtt><inflight-window><max-messages>2</max-messages>"
                             "</inflight-window></mqtt>")
    with subscriber_and_publisher(node.port, "win5", 1, "window-v5",
                                  RECEIVE_MAXIMUM=10) as (sub, pub):
        for i in range(3):
            pub.publish_acknowledged("win5", str(i).encode(), 1)
        first = sub.expect(mqtt.Publish)
        sub.expect(mqtt.Publish)
        sub.expect_nothing(0.5)
        sub.send(mqtt.PubAck(first.packet_id))
        assert sub.expect(mqtt.Publish).payload == b"2"


def test_message_expires_while_waiting_for_the_window(hive):
    with subscriber_and_publisher(hive.port, "slow", 1, "slow", RECEIVE_MAXIMUM=1) as (sub, pub):
        pub.publish("slow", b"first", 1)
        pub.publish("slow", b"expires", 1, MESSAGE_EXPIRY_INTERVAL=1)
        pub.publish("slow", b"last", 1)
        for _ in range(3):
            pub.expect(mqtt.PubAck)
        first = sub.expect(mqtt.Publish)
        sub.expect_nothing(2.2)
        sub.send(mqtt.PubAck(first.packet_id))
        last = sub.expect(mqtt.Publish)
        assert last.payload == b"last"


def test_queue_limit_applies_to_a_slow_online_client(hive_factory):
    node = hive_factory(body=_queue_body("discard"))
    with subscriber_and_publisher(node.port, "slowq", 1, "slow-online",
                                  RECEIVE_MAXIMUM=1) as (sub, pub):
        for i in range(6):
            pub.publish_acknowledged("slowq", str(i).encode(), 1)
        got = []
        for _ in range(4):  # one in flight, three queued
            packet = sub.expect(mqtt.Publish)
            got.append(packet.payload)
            sub.send(mqtt.PubAck(packet.packet_id))
        sub.expect_nothing(0.5)
        assert got == [b"0", b"1", b"2", b"3"]


def test_dup_flag_not_propagated_to_subscribers(hive):
    with subscriber_and_publisher(hive.port, "dup", 1, "dup") as (sub, pub):
        pub.send(mqtt.Publish("dup", b"resent", 1, False, True, 8))
        assert pub.expect(mqtt.PubAck).packet_id == 8
        packet = sub.expect(mqtt.Publish)
        assert (packet.payload, packet.dup) == (b"resent", False)


def test_inbound_qos2_exactly_once_across_restart(hive):
    persistent = {"SESSION_EXPIRY_INTERVAL": 300}
    sub = persistent_subscriber(hive.port, "once-restart-sub", "once/restart", 2)
    pub = RawClient(hive.port)
    pub.connect(5, "once-restart", **persistent)
    pub.publish("once/restart", b"m", 2, packet_id=12)
    pub.expect(mqtt.PubRec)
    pub.close()
    delivered = sub.expect(mqtt.Publish)
    assert delivered.payload == b"m"
    sub.acknowledge(delivered)
    sub.expect_nothing(0.3)
    sub.close()
    hive.restart()
    with RawClient(hive.port) as sub, RawClient(hive.port) as pub:
        assert sub.connect(5, "once-restart-sub", clean_start=False, **persistent).session_present
        assert pub.connect(5, "once-restart", clean_start=False, **persistent).session_present
        pub.send(mqtt.Publish("once/restart", b"m", 2, False, True, 12))
        assert pub.expect(mqtt.PubRec).packet_id == 12
        pub.send(mqtt.PubRel(12))
        assert pub.expect(mqtt.PubComp).packet_id == 12
        sub.expect_nothing(0.5)


def test_queue_order_survives_restart(hive):
    offline_subscriber(hive.port, "ordered", "ord", 2, version=4)
    with RawClient(hive.port) as pub:
        pub.connect(4, "ordered-pub")
        for i in range(5):
            pub.publish_acknowledged("ord", str(i).encode(), 1 + i % 2)
    hive.restart()
    with RawClient(hive.port) as sub:
        assert sub.connect(4, "ordered", clean_start=False).session_present
        got = [sub.expect(mqtt.Publish) for _ in range(5)]  # all fit in the window
        for packet in got:
            ack = mqtt.PubAck if packet.qos == 1 else mqtt.PubRec
            sub.send(ack(packet.packet_id))
        for packet in got[1::2]:
            assert sub.expect(mqtt.PubRel).packet_id == packet.packet_id
            sub.send(mqtt.PubComp(packet.packet_id))
        sub.expect_nothing(0.3)
        assert [(p.payload, p.qos) for p in got] == [(str(i).encode(), 1 + i % 2) for i in range(5)]


@pytest.mark.parametrize("qos", [1, 2])
def test_many_messages_arrive_once_and_in_order(hive, paho_clients, qos):
    subscriber = paho_clients(hive.port, 5)
    subscriber.subscribe("bulk", qos)
    publisher = paho_clients(hive.port, 4)
    infos = [publisher.client.publish("bulk", str(i).encode(), qos) for i in range(300)]
    for info in infos:
        info.wait_for_publish(WAIT)
    got = [int(subscriber.get().payload) for _ in range(300)]
    assert got == list(range(300))
    subscriber.nothing(0.3)


def test_redelivery_respects_receive_maximum_of_the_new_connection(hive):
    persistent = {"SESSION_EXPIRY_INTERVAL": 300}
    sub = persistent_subscriber(hive.port, "rm-again", "rma", 1, RECEIVE_MAXIMUM=4)
    with RawClient(hive.port) as pub:
        pub.connect(5, "rm-again-pub")
        for i in range(4):
            pub.publish_acknowledged("rma", str(i).encode(), 1)
    for _ in range(4):
        sub.expect(mqtt.Publish)
    sub.close()
    with RawClient(hive.port) as sub:
        sub.connect(5, "rm-again", clean_start=False, RECEIVE_MAXIMUM=2, **persistent)
        first = [sub.expect(mqtt.Publish), sub.expect(mqtt.Publish)]
        sub.expect_nothing(0.5)
        sub.send(mqtt.PubAck(first[0].packet_id))
        held = sub.expect(mqtt.Publish)
        assert (held.payload, held.dup) == (b"2", True)
        sub.expect_nothing(0.3)
        sub.send(mqtt.PubAck(first[1].packet_id))
        assert sub.expect(mqtt.Publish).payload == b"3"


@pytest.mark.parametrize("strategy", ["<strategy>throttle</strategy>", ""])
def test_a_client_sending_past_the_receive_maximum_is_throttled_not_refused(hive_factory,
                                                                           strategy):
    """paho keeps 20 in flight whatever the CONNACK says; the node slows it down instead:
    with strategy ``throttle``, and with the default ``disconnect`` for an MQTT 3.1.1 client,
    which was never told a receive maximum and has no 0x93 to be told it went past it."""
    from cluster._nodes import metrics
    from conftest import free_port

    rest = free_port()
    node = hive_factory(
        body="<mqtt><receive-maximum><server-receive-maximum>2</server-receive-maximum>"
             f"{strategy}</receive-maximum></mqtt>"
             "<rest-api><enabled>true</enabled><listeners><http>"
             f"<port>{rest}</port><bind-address>127.0.0.1</bind-address></http></listeners>"
             "</rest-api>", rest=rest)
    # persistent sessions: acknowledgements wait for the disk, and paho's window fills
    subscriber = Paho(node.port, 4, client_id="throttled-sub", clean=False)
    publisher = Paho(node.port, 4, client_id="throttled-pub", clean=False)
    try:
        assert subscriber.subscribe("rx/#", 1) == [1]
        sent = [publisher.client.publish("rx/t", b"%d" % i, 1) for i in range(200)]
        for info in sent:
            info.wait_for_publish(WAIT)
            assert info.is_published() and info.rc == 0
        got = [subscriber.get().payload for _ in range(200)]
        assert got == [b"%d" % i for i in range(200)]
        assert publisher.client.is_connected()
        counters = metrics(node)["broker"]
        assert counters["receive_maximum_throttled"] > 0
        assert counters["protocol_errors"] == 0
    finally:
        publisher.stop()
        subscriber.stop()
