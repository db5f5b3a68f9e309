"""One client's MQTT protocol driven in memory: no sockets, no processes (h11's way of testing).

Each :class:`Peer` is a client whose bytes go straight into a :class:`Channel` of a real
:class:`Broker` (in-memory store); what the channel writes comes back decoded. The broker batches
output per loop iteration, so every step flushes it before the test looks.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from hive_core import mqtt
from hive_core.broker import Broker, BrokerSettings, Channel, Message
from hive_core.persistence import MemorySessionStore, Snapshot, StoredMessage

from ._memory_io import Io

P = mqtt.PropertyId
RC = mqtt.ReasonCode


class Peer:
    _ids = itertools.count(1)

    def __init__(self, broker: Broker, version: int = 5) -> None:
        self.broker = broker
        self.version = version
        self.io = Io(version)
        self.channel = Channel(broker, self.io)
        self._seen = 0
        self.leftover: list[Any] = []  # what connect() and subscribe() read past their answer

    def send(self, *packets: Any) -> None:
        self.channel.receive_data(b"".join(mqtt.encode_packet(p, self.version) for p in packets))
        self.broker.flush()

    def new(self) -> list[Any]:
        """What arrived since the last call."""
        packets = self.leftover + self.io.packets[self._seen:]
        self.leftover = []
        self._seen = len(self.io.packets)
        return packets

    def connect(self, client_id: str, **options: Any) -> mqtt.ConnAck:
        self.send(mqtt.Connect(client_id, self.version, **options))
        packets = self.new()
        assert packets and isinstance(packets[0], mqtt.ConnAck), packets
        self.leftover = packets[1:]
        return packets[0]

    def subscribe(self, *filters: str, qos: int = 1, **options: Any) -> mqtt.SubAck:
        pid = next(self._ids)
        requests = [mqtt.SubscriptionRequest(f, qos, **options) for f in filters]
        self.send(mqtt.Subscribe(pid, requests))
        packets = self.new()
        suback = [p for p in packets if isinstance(p, mqtt.SubAck)]
        assert suback and suback[0].packet_id == pid
        self.leftover = [p for p in packets if not isinstance(p, mqtt.SubAck)]
        return suback[0]

    def publishes(self) -> list[mqtt.Publish]:
        return [p for p in self.new() if isinstance(p, mqtt.Publish)]


def subscriber_and_publisher(broker: Broker, topic_filter: str, qos: int = 1,
                             **connect: Any) -> tuple[Peer, Peer]:
    """Subscriber "s" (CONNECT with ``connect``) to ``topic_filter`` at ``qos``, then publisher
    "p": both connected."""
    sub = Peer(broker)
    sub.connect("s", **connect)
    sub.subscribe(topic_filter, qos=qos)
    pub = Peer(broker)
    pub.connect("p")
    return sub, pub


def run(scenario: Callable[[Broker], Awaitable[None]], store: MemorySessionStore | None = None,
        **settings: Any) -> None:
    async def main() -> None:
        broker = Broker(BrokerSettings(**settings), store or MemorySessionStore())
        broker.start(Snapshot())
        try:
            await scenario(broker)
        finally:
            await broker.stop()

    asyncio.run(main())


async def settle() -> None:
    """Let spawned steps (acknowledgements after a commit, extension steps) run."""
    for _ in range(10):
        await asyncio.sleep(0)


# ---------------------------------------------------------------------------- CONNECT


def test_the_first_packet_must_be_connect() -> None:
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker, version=4)
        peer.send(mqtt.PingReq())
        assert peer.io.closed
        assert peer.new() == []  # MQTT 3: nothing to say before CONNECT, just close

    run(scenario)


def test_connack_announces_the_node_limits_to_an_mqtt5_client() -> None:
    async def scenario(broker: Broker) -> None:
        ack = Peer(broker).connect("c", properties={P.SESSION_EXPIRY_INTERVAL: 10_000})
        assert ack.reason_code == 0 and not ack.session_present
        assert ack.properties[P.RECEIVE_MAXIMUM] == 100
        assert ack.properties[P.TOPIC_ALIAS_MAXIMUM] == 5
        assert ack.properties[P.MAXIMUM_QOS] == 1
        assert ack.properties[P.SESSION_EXPIRY_INTERVAL] == 3600  # capped

    run(scenario, maximum_qos=1, max_session_expiry=3600)


def test_an_empty_client_id_is_assigned_for_mqtt5_and_refused_for_a_persistent_v311() -> None:
    async def scenario(broker: Broker) -> None:
        ack = Peer(broker).connect("")
        assert ack.properties[P.ASSIGNED_CLIENT_IDENTIFIER].startswith("hive-")
        v311 = Peer(broker, version=4)
        ack = v311.connect("", clean_start=False)
        assert ack.reason_code == 2  # identifier rejected
        assert v311.io.closed

    run(scenario)


def test_a_client_id_longer_than_allowed_is_refused() -> None:
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker)
        ack = peer.connect("x" * 9)
        assert ack.reason_code == RC.CLIENT_IDENTIFIER_NOT_VALID
        assert peer.io.closed

    run(scenario, max_client_id_length=8)


def test_max_connections_refuses_a_new_client_but_not_a_takeover() -> None:
    async def scenario(broker: Broker) -> None:
        assert Peer(broker).connect("a").reason_code == 0
        assert Peer(broker).connect("b").reason_code == RC.QUOTA_EXCEEDED
        assert Peer(broker).connect("a").reason_code == 0

    run(scenario, max_connections=1)


def test_a_will_above_the_maximum_qos_is_refused() -> None:
    async def scenario(broker: Broker) -> None:
        ack = Peer(broker).connect("c", will=mqtt.Will("w", b"x", qos=2))
        assert ack.reason_code == RC.QOS_NOT_SUPPORTED

    run(scenario, maximum_qos=1)


def test_keep_alive_above_the_maximum_is_lowered_and_arms_the_deadline() -> None:
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker)
        assert peer.io.deadline == 10.0  # no CONNECT yet: the connect timeout
        ack = peer.connect("c", keep_alive=600)
        assert ack.properties[P.SERVER_KEEP_ALIVE] == 60
        assert peer.io.deadline == 90.0  # 1.5 x keep alive

    run(scenario, max_keep_alive=60)


def test_a_missed_keep_alive_closes_with_0x8d() -> None:
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker)
        peer.connect("c", keep_alive=10)
        peer.channel.check_deadline(peer.channel.last_read + 5)
        assert not peer.io.closed and peer.io.deadline == pytest.approx(10.0)
        peer.channel.check_deadline(peer.channel.last_read + 16)
        assert peer.io.closed
        assert [p.reason_code for p in peer.new() if isinstance(p, mqtt.Disconnect)] == [0x8D]

    run(scenario)


def test_a_second_connect_is_a_protocol_error() -> None:
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker)
        peer.connect("c")
        peer.send(mqtt.Connect("c", 5))
        assert [p.reason_code for p in peer.new() if isinstance(p, mqtt.Disconnect)] == [0x82]
        assert peer.io.closed

    run(scenario)


def test_ping() -> None:
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker, version=4)
        peer.connect("c")
        peer.send(mqtt.PingReq())
        assert peer.new() == [mqtt.PingResp()]

    run(scenario)


# ---------------------------------------------------------------------------- takeover, expiry


def test_a_second_connection_takes_the_session_over() -> None:
    async def scenario(broker: Broker) -> None:
        first = Peer(broker)
        first.connect("c", clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 60})
        first.subscribe("t/#")
        second = Peer(broker)
        ack = second.connect("c", clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 60})
        assert ack.session_present
        assert [p.reason_code for p in first.new() if isinstance(p, mqtt.Disconnect)] == [0x8E]
        assert first.io.closed
        publisher = Peer(broker)
        publisher.connect("p")
        publisher.send(mqtt.Publish("t/1", b"x", qos=0))
        assert [p.payload for p in second.publishes()] == [b"x"]

    run(scenario)


def test_a_session_outlives_its_connection_until_it_expires() -> None:
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker)
        peer.connect("c", clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 1})
        peer.subscribe("t")
        peer.channel.connection_lost()
        assert "c" in broker.sessions
        publisher = Peer(broker)
        publisher.connect("p")
        publisher.send(mqtt.Publish("t", b"queued", qos=1, packet_id=1))
        await asyncio.sleep(1.3)
        assert "c" not in broker.sessions
        back = Peer(broker)
        assert not back.connect("c", clean_start=False).session_present

    run(scenario)


def test_a_clean_start_discards_the_old_session() -> None:
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker)
        peer.connect("c", clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 60})
        peer.subscribe("t")
        peer.send(mqtt.Disconnect())
        ack = Peer(broker).connect("c", clean_start=True)
        assert not ack.session_present
        assert broker.sessions["c"].subscriptions == {}

    run(scenario)


def test_the_will_goes_out_when_the_connection_breaks_not_after_disconnect() -> None:
    async def scenario(broker: Broker) -> None:
        watcher = Peer(broker)
        watcher.connect("w")
        watcher.subscribe("wills/#", qos=0)
        polite = Peer(broker)
        polite.connect("polite", will=mqtt.Will("wills/polite", b"gone"))
        polite.send(mqtt.Disconnect())
        rude = Peer(broker)
        rude.connect("rude", will=mqtt.Will("wills/rude", b"gone"))
        rude.channel.connection_lost()
        broker.flush()
        assert [p.topic for p in watcher.publishes()] == ["wills/rude"]

    run(scenario)


# ---------------------------------------------------------------------------- QoS 1 and 2


def test_qos1_from_publisher_to_subscriber_and_back() -> None:
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "t", qos=1)
        pub.send(mqtt.Publish("t", b"one", qos=1, packet_id=7))
        assert pub.new() == [mqtt.PubAck(7)]
        (delivery,) = sub.publishes()
        assert delivery.qos == 1 and delivery.payload == b"one"
        assert broker.sessions["s"].inflight
        sub.send(mqtt.PubAck(delivery.packet_id))
        assert not broker.sessions["s"].inflight

    run(scenario)


def test_qos1_without_a_subscriber_is_acknowledged_with_no_matching_subscribers() -> None:
    async def scenario(broker: Broker) -> None:
        pub = Peer(broker)
        pub.connect("p")
        pub.send(mqtt.Publish("nobody", b"x", qos=1, packet_id=3))
        assert pub.new() == [mqtt.PubAck(3, RC.NO_MATCHING_SUBSCRIBERS)]

    run(scenario)


def test_inbound_qos2_is_routed_once_whatever_the_duplicates() -> None:
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "t", qos=0)
        pub.send(mqtt.Publish("t", b"once", qos=2, packet_id=9))
        assert pub.new() == [mqtt.PubRec(9)]
        pub.send(mqtt.Publish("t", b"once", qos=2, packet_id=9, dup=True))
        assert pub.new() == [mqtt.PubRec(9)]
        assert [p.payload for p in sub.publishes()] == [b"once"]
        pub.send(mqtt.PubRel(9))
        assert pub.new() == [mqtt.PubComp(9)]
        pub.send(mqtt.PubRel(9))  # unknown now
        assert pub.new() == [mqtt.PubComp(9, RC.PACKET_IDENTIFIER_NOT_FOUND)]

    run(scenario)


def test_outbound_qos2_publish_pubrec_pubrel_pubcomp() -> None:
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "t", qos=2)
        pub.send(mqtt.Publish("t", b"x", qos=2, packet_id=1))
        (delivery,) = sub.publishes()
        pid = delivery.packet_id
        sub.send(mqtt.PubRec(pid))
        assert sub.new() == [mqtt.PubRel(pid)]
        assert broker.sessions["s"].inflight[pid].state == "pubrel"
        sub.send(mqtt.PubComp(pid))
        assert not broker.sessions["s"].inflight

    run(scenario)


def test_persistent_acknowledgements_wait_for_the_store_and_keep_their_order() -> None:
    async def scenario(broker: Broker) -> None:
        sub = Peer(broker)
        sub.connect("s", clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 60})
        sub.subscribe("t", qos=1)
        sub.channel.connection_lost()  # offline: deliveries are queued in the store
        pub = Peer(broker)
        pub.connect("p")
        pub.send(mqtt.Publish("t", b"1", qos=1, packet_id=1),
                 mqtt.Publish("other", b"2", qos=1, packet_id=2))
        assert pub.new() == []  # the first waits for its commit, the second waits behind it
        await settle()
        broker.flush()
        assert pub.new() == [mqtt.PubAck(1), mqtt.PubAck(2, RC.NO_MATCHING_SUBSCRIBERS)]
        back = Peer(broker)
        assert back.connect("s", clean_start=False).session_present
        assert [p.payload for p in back.leftover if isinstance(p, mqtt.Publish)] == [b"1"]

    run(scenario)


def test_the_client_receive_maximum_limits_what_is_in_flight() -> None:
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "t", qos=1, properties={P.RECEIVE_MAXIMUM: 2})
        for pid in range(1, 6):
            pub.send(mqtt.Publish("t", str(pid).encode(), qos=1, packet_id=pid))
        first = sub.publishes()
        assert [p.payload for p in first] == [b"1", b"2"]
        sub.send(mqtt.PubAck(first[0].packet_id))
        assert [p.payload for p in sub.publishes()] == [b"3"]
        assert len(broker.sessions["s"].queue) == 2

    run(scenario)


def test_more_qos2_in_flight_than_the_server_receive_maximum_is_refused_with_0x93() -> None:
    async def scenario(broker: Broker) -> None:
        pub = Peer(broker)
        pub.connect("p")
        for pid in range(1, 4):
            pub.send(mqtt.Publish("t", b"x", qos=2, packet_id=pid))
        assert not pub.io.closed
        pub.send(mqtt.Publish("t", b"x", qos=2, packet_id=4))
        await closed(pub)
        assert [p.reason_code for p in pub.new() if isinstance(p, mqtt.Disconnect)] == [0x93]
        assert pub.io.closed

    run(scenario, server_receive_maximum=3, receive_maximum_strategy="disconnect")


async def closed(peer: Any) -> None:
    """Until ``peer``'s connection is closed (a refusal past the receive maximum waits for the
    acknowledgements of what was routed before it)."""
    for _ in range(200):
        if peer.io.closed:
            return
        await asyncio.sleep(0.005)


def test_the_default_strategy_refuses_an_mqtt5_client_past_the_receive_maximum() -> None:
    async def scenario(broker: Broker) -> None:
        pub = Peer(broker)
        pub.connect("p")
        pub.send(*[mqtt.Publish("t", b"x", qos=2, packet_id=pid) for pid in range(1, 4)])
        assert not pub.io.closed
        pub.send(mqtt.Publish("t", b"x", qos=2, packet_id=4))
        await closed(pub)
        out = pub.new()
        # What was routed is acknowledged first, then DISCONNECT 0x93: a client that resends
        # its backlog after each reconnect gets further each time.
        assert [type(p).__name__ for p in out] == ["PubRec", "PubRec", "PubRec", "Disconnect"]
        assert [p.reason_code for p in out if isinstance(p, mqtt.Disconnect)] == [0x93]
        assert pub.io.closed

    run(scenario, server_receive_maximum=3)


@pytest.mark.parametrize(("version", "strategy"), [(5, "throttle"), (4, "throttle"),
                                                   (4, "disconnect")])
def test_past_the_receive_maximum_reading_pauses_until_the_acknowledgements_are_out(
        version: int, strategy: str) -> None:
    """Strategy throttle, and any strategy for an MQTT 3 client (never told a maximum, no
    0x93): a client that sends a backlog at once (paho after a reconnect) is slowed down, not
    disconnected; nothing is refused."""
    async def scenario(broker: Broker) -> None:
        sub = Peer(broker)
        sub.connect("s", clean_start=False, properties=PERSISTENT)
        sub.subscribe("t", qos=1)
        sub.channel.connection_lost()  # acknowledgements now wait for the store
        pub = Peer(broker, version)
        pub.connect("p")
        pub.send(*[mqtt.Publish("t", b"x", qos=1, packet_id=pid) for pid in range(1, 6)])
        assert not pub.io.reading and not pub.io.closed
        assert broker.metrics.receive_maximum_throttled == 1
        await settle()
        broker.flush()
        assert pub.io.reading
        assert pub.new() == [mqtt.PubAck(pid) for pid in range(1, 6)]
        assert len(broker.sessions["s"].queue) == 5

    run(scenario, server_receive_maximum=3, receive_maximum_strategy=strategy)


def test_unacknowledged_deliveries_are_sent_again_with_dup_after_a_reconnect() -> None:
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "t", qos=1, clean_start=False,
                                            properties={P.SESSION_EXPIRY_INTERVAL: 60})
        pub.send(mqtt.Publish("t", b"x", qos=1, packet_id=1))
        (first,) = sub.publishes()
        sub.channel.connection_lost()
        back = Peer(broker)
        back.connect("s", clean_start=False)
        (again,) = [p for p in back.leftover if isinstance(p, mqtt.Publish)]
        assert again.dup and again.packet_id == first.packet_id and again.payload == b"x"

    run(scenario)


# ---------------------------------------------------------------------------- topic aliases


def test_inbound_topic_aliases_resolve_and_bad_ones_are_refused() -> None:
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "long/topic/name", qos=0)
        pub.send(mqtt.Publish("long/topic/name", b"1", properties={P.TOPIC_ALIAS: 1}),
                 mqtt.Publish("", b"2", properties={P.TOPIC_ALIAS: 1}))
        assert [(p.topic, p.payload) for p in sub.publishes()] == [
            ("long/topic/name", b"1"), ("long/topic/name", b"2")]
        pub.send(mqtt.Publish("", b"3", properties={P.TOPIC_ALIAS: 2}))
        assert [p.reason_code for p in pub.new() if isinstance(p, mqtt.Disconnect)] == [0x82]
        other = Peer(broker)
        other.connect("o")
        other.send(mqtt.Publish("t", b"x", properties={P.TOPIC_ALIAS: 6}))
        assert [p.reason_code for p in other.new() if isinstance(p, mqtt.Disconnect)] == [0x94]

    run(scenario)


def test_outbound_topic_aliases_send_the_topic_once() -> None:
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "t/#", qos=0,
                                            properties={P.TOPIC_ALIAS_MAXIMUM: 2})
        for payload in (b"1", b"2"):
            pub.send(mqtt.Publish("t/a", payload))
        first, second = sub.publishes()
        assert first.topic == "t/a" and first.properties[P.TOPIC_ALIAS] == 1
        assert second.topic == "" and second.properties[P.TOPIC_ALIAS] == 1

    run(scenario)


# ---------------------------------------------------------------------------- subscriptions


def test_subscribe_unsubscribe_and_retained_messages() -> None:
    async def scenario(broker: Broker) -> None:
        pub = Peer(broker)
        pub.connect("p")
        pub.send(mqtt.Publish("r/1", b"kept", retain=True))
        sub = Peer(broker)
        sub.connect("s")
        suback = sub.subscribe("r/+", "bad/#/filter", qos=1)
        assert suback.reason_codes == [1, RC.TOPIC_FILTER_INVALID]
        assert [(p.topic, p.retain) for p in sub.publishes()] == [("r/1", True)]
        sub.send(mqtt.Unsubscribe(99, ["r/+", "never"]))
        assert sub.new() == [mqtt.UnsubAck(99, [0, RC.NO_SUBSCRIPTION_EXISTED])]

    run(scenario)


def test_no_local_on_a_shared_subscription_is_a_protocol_error() -> None:
    async def scenario(broker: Broker) -> None:
        sub = Peer(broker)
        sub.connect("s")
        sub.send(mqtt.Subscribe(1, [mqtt.SubscriptionRequest("$share/g/t", 1, no_local=True)]))
        assert [p.reason_code for p in sub.new() if isinstance(p, mqtt.Disconnect)] == [0x82]

    run(scenario)


def test_sys_topics_are_closed_to_publishers() -> None:
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "$SYS/#")
        pub.send(mqtt.Publish("$SYS/broker/x", b"fake", qos=1, packet_id=1))
        assert pub.new() == [mqtt.PubAck(1, RC.NOT_AUTHORIZED)]
        assert sub.publishes() == []

    run(scenario)


def test_auth_without_a_method_is_a_protocol_error() -> None:
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker)
        peer.connect("c")
        peer.send(mqtt.Auth(RC.RE_AUTHENTICATE, {P.AUTHENTICATION_METHOD: "x"}))
        assert [p.reason_code for p in peer.new() if isinstance(p, mqtt.Disconnect)] == [0x82]

    run(scenario)


# ---------------------------------------------------------------------------- QoS 2 and the disk

PERSISTENT = {P.SESSION_EXPIRY_INTERVAL: 3600}


def test_pubcomp_waits_until_the_release_is_on_disk() -> None:
    async def scenario(broker: Broker) -> None:
        pub = Peer(broker)
        pub.connect("p", clean_start=False, properties=PERSISTENT)
        pub.send(mqtt.Publish("t", b"x", qos=2, packet_id=4))
        await settle()
        broker.flush()
        assert pub.new() == [mqtt.PubRec(4, RC.NO_MATCHING_SUBSCRIBERS)]
        pub.send(mqtt.PubRel(4))
        assert pub.new() == []  # the release is not durable yet
        await settle()
        broker.flush()
        assert pub.new() == [mqtt.PubComp(4)]

    run(scenario)


def test_an_open_qos2_exchange_is_a_resend_with_or_without_dup() -> None:
    """paho resends an unacknowledged QoS 2 PUBLISH without DUP after some reconnects: it must
    not be routed twice."""
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "t", qos=0)
        pub.send(mqtt.Publish("t", b"once", qos=2, packet_id=7))
        pub.send(mqtt.Publish("t", b"once", qos=2, packet_id=7))
        pub.send(mqtt.Publish("t", b"once", qos=2, packet_id=7, dup=True))
        assert [p.payload for p in sub.publishes()] == [b"once"]
        assert pub.new() == [mqtt.PubRec(7)] * 3

    run(scenario)


def test_pubrel_and_a_qos2_delivery_wait_until_their_state_is_on_disk() -> None:
    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "t", qos=2, clean_start=False,
                                            properties=PERSISTENT)
        pub.send(mqtt.Publish("t", b"x", qos=2, packet_id=1))
        assert sub.publishes() == []  # its packet id is not durable yet
        await settle()
        broker.flush()
        (delivery,) = sub.publishes()
        sub.send(mqtt.PubRec(delivery.packet_id))
        assert sub.new() == []
        await settle()
        broker.flush()
        assert sub.new() == [mqtt.PubRel(delivery.packet_id)]

    run(scenario)


def test_a_message_dropped_for_a_subscriber_is_counted_by_reason_and_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(broker: Broker) -> None:
        sub = Peer(broker)
        sub.connect("s", clean_start=False, properties=PERSISTENT)
        sub.subscribe("t", qos=1)
        sub.channel.connection_lost()
        pub = Peer(broker)
        pub.connect("p")
        for pid in range(1, 6):
            pub.send(mqtt.Publish("t", b"x", qos=1, packet_id=pid))
        assert broker.metrics.dropped == {"queue-full": 3}
        assert broker.stats().metrics.dropped == {"queue-full": 3}
        warnings = [r for r in caplog.records if "dropped a message" in r.getMessage()]
        assert len(warnings) == 1 and "queue was full" in warnings[0].getMessage()

    run(scenario, max_queue_size=2)


# ---------------------------------------------------------------------------- limits


def test_a_topic_deeper_than_the_limit_is_refused_and_the_rest_is_served() -> None:
    async def scenario(broker: Broker) -> None:
        deep = "/".join(["l"] * 1500)
        sub = Peer(broker)
        sub.connect("s")
        assert sub.subscribe(deep, "a/b/c/d", qos=1).reason_codes == [RC.TOPIC_FILTER_INVALID, 1]
        assert not sub.io.closed
        will = Peer(broker)
        assert will.connect("w", will=mqtt.Will(deep, b"x")).reason_code == RC.TOPIC_NAME_INVALID
        pub = Peer(broker)
        pub.connect("p")
        pub.send(mqtt.Publish("a/b/c/d", b"fits", qos=1, packet_id=1))
        assert [p.payload for p in sub.publishes()] == [b"fits"]
        pub.send(mqtt.Publish(deep, b"too deep", qos=1, packet_id=2))
        assert [p.reason_code for p in pub.new() if isinstance(p, mqtt.Disconnect)] == [0x90]
        assert pub.io.closed and not sub.io.closed

    run(scenario, max_topic_levels=4)


def test_within_the_limit_a_very_deep_topic_is_served() -> None:
    async def scenario(broker: Broker) -> None:
        deep = "/".join(["l"] * 3000)
        sub = Peer(broker)
        sub.connect("s")
        assert sub.subscribe(deep, "+/" + deep.split("/", 1)[1], qos=1).reason_codes == [1, 1]
        pub = Peer(broker)
        pub.connect("p")
        pub.send(mqtt.Publish(deep, b"x", qos=1, packet_id=1))
        assert len(sub.publishes()) == 1  # one delivery for both matching subscriptions
        assert pub.new() == [mqtt.PubAck(1)]

    run(scenario, max_topic_levels=5000)


class CountingStore(MemorySessionStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        if name in ("save_session", "save_subscription", "delete_subscription"):
            calls = object.__getattribute__(self, "calls")
            calls[name] = calls.get(name, 0) + 1
        return object.__getattribute__(self, name)


def test_a_subscribe_writes_its_subscription_not_the_whole_session() -> None:
    """Saving the whole session on each SUBSCRIBE made 20,000 of them take minutes."""
    store = CountingStore()

    async def scenario(broker: Broker) -> None:
        sub = Peer(broker)
        sub.connect("s", clean_start=False, properties=PERSISTENT)
        store.calls.clear()
        for i in range(500):
            sub.subscribe(f"t/{i}")
        sub.send(mqtt.Unsubscribe(9999, ["t/7"]))
        assert store.calls == {"save_subscription": 500, "delete_subscription": 1}
        assert set(store.contents().sessions["s"].subscriptions) == {
            f"t/{i}" for i in range(500) if i != 7}

    run(scenario, store)


class DecliningStore(MemorySessionStore):
    """A store that declines to mark queue rows as sent (a replicating store while one of its
    backups cannot read the mark)."""

    def send_queued(self, client_id: str, seq: int, packet_id: int) -> bool:  # type: ignore[override]
        return False


@pytest.mark.parametrize("declines", [False, True])
def test_a_qos1_delivery_keeps_its_queue_row_or_moves_to_an_in_flight_one_if_declined(
        declines: bool) -> None:
    store = DecliningStore() if declines else MemorySessionStore()

    async def scenario(broker: Broker) -> None:
        sub, pub = subscriber_and_publisher(broker, "t", clean_start=False,
                                            properties=PERSISTENT)
        pub.send(mqtt.Publish("t", b"x", qos=1, packet_id=1))
        (delivery,) = sub.publishes()
        contents = store.contents()
        if declines:
            assert contents.sent == {} and "s" not in contents.queues
            assert [(i.packet_id, i.direction) for i in contents.inflight["s"]] == [
                (delivery.packet_id, "out")]
        else:
            assert contents.sent == {"s": {contents.queues["s"][0][0]: delivery.packet_id}}
            assert "s" not in contents.inflight
        sub.send(mqtt.PubAck(delivery.packet_id))
        await settle()
        contents = store.contents()
        assert "s" not in contents.queues and "s" not in contents.inflight

    run(scenario, store)


# ---------------------------------------------------------------- handover windows


def test_a_message_that_arrived_directly_before_a_merge_is_skipped_in_the_merged_queue() -> None:
    """A restarted node claims a copy of a session this node keeps (OWNED) on its own link;
    a message routed to both copies may reach this node directly first. The session remembers
    its identity, and the copy in MERGE_QUEUE is skipped."""
    async def scenario(broker: Broker) -> None:
        peer = Peer(broker)
        peer.connect("keeper", clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 600})
        peer.subscribe("merge/#", qos=2)

        def routed(serial: int) -> Message:
            message = Message("merge/t", b"%d" % serial, 2, False, None, "elsewhere")
            message.mid = ("node-c", serial)
            return message

        broker.publish(routed(1), from_cluster=True)  # directly, before any window
        await settle()
        tail = [(StoredMessage("merge/t", b"%d" % n, 2, publisher_id="elsewhere"), ("node-c", n))
                for n in (1, 2)]
        broker.custody.append_handed_over("keeper", tail)
        await settle()
        payloads = [p.payload for p in peer.publishes()]
        assert payloads == [b"1", b"2"]  # 1 once (directly), 2 from the tail
        assert broker.metrics.handover_duplicates_skipped == 1

    run(scenario)


# ---------------------------------------------------------------------------- the fence


class FenceOnly:
    """The part of a cluster a fenced read asks (cluster/_fence.py): what to wait for."""

    def __init__(self) -> None:
        self.lifted = asyncio.Event()

    def input_waits(self, now: float) -> Awaitable[bool]:
        return self.lifted.wait()


@pytest.mark.parametrize("closed_meanwhile", [False, True])
def test_input_read_while_the_node_is_fenced_waits_and_a_closed_clients_is_dropped(
        closed_meanwhile: bool) -> None:
    """After a pause the node's clients' input waits until the members confirmed what they
    did meanwhile; then it is handled in order. A client that closed its connection
    meanwhile has gone elsewhere and sends again what was not acknowledged: its input is not
    handled (routed now, it would arrive twice)."""
    async def scenario(broker: Broker) -> None:
        sub, pub = Peer(broker), Peer(broker)
        sub.connect("s")
        sub.subscribe("t", qos=1)
        pub.connect("p")
        fence = FenceOnly()
        broker.cluster, broker.input_fence.up = fence, True  # type: ignore[assignment]
        pub.send(mqtt.Publish("t", b"1", 1, packet_id=1), mqtt.Publish("t", b"2", 1, packet_id=2))
        await settle()
        assert sub.publishes() == [] and pub.new() == []
        if closed_meanwhile:
            pub.channel.connection_lost()
        broker.cluster, broker.input_fence.up = None, False
        fence.lifted.set()
        await settle()
        broker.flush()
        if closed_meanwhile:
            assert sub.publishes() == []
        else:
            assert [p.payload for p in sub.publishes()] == [b"1", b"2"]
            assert [type(p) for p in pub.new()] == [mqtt.PubAck, mqtt.PubAck]

    run(scenario)


class GatedStore(MemorySessionStore):
    """Commits wait while ``gate`` is clear: a backup that does not answer, a slow disk."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()

    async def commit(self) -> None:
        await self.gate.wait()


def test_a_qos2_publish_sent_again_on_a_new_connection_waits_for_its_commit_too() -> None:
    """Sim seed 565: the first send of a QoS 2 PUBLISH waited for the commit (a backup out of
    reach), the client reconnected, and the resend went out at once; the node that took the
    session over from the backup's replica, which lacked the send, delivered it as new."""
    store = GatedStore()

    async def scenario(broker: Broker) -> None:
        sub = Peer(broker)
        sub.connect("s", clean_start=False, properties=PERSISTENT)
        sub.subscribe("t", qos=2)
        pub = Peer(broker)
        pub.connect("p")
        store.gate.clear()
        pub.send(mqtt.Publish("t", b"x", qos=2, packet_id=1))
        await settle()
        assert sub.publishes() == []  # its packet id is not committed yet
        sub.channel.connection_lost()
        again = Peer(broker)
        assert again.connect("s", clean_start=False, properties=PERSISTENT).session_present
        await settle()
        assert again.publishes() == [] and pub.new() == []
        store.gate.set()
        await settle()
        resent = again.publishes()
        assert [(p.payload, p.qos, p.dup) for p in resent] == [(b"x", 2, True)]
        assert pub.new() == [mqtt.PubRec(1)]

    run(scenario, store)


def test_acknowledgements_keep_the_order_of_their_publishes_while_a_commit_waits() -> None:
    """A PUBACK that needs no commit (no persistent subscriber) does not overtake one that
    waits for the store (MQTT-4.6.0-2), also while that one's commit is already under way."""
    store = GatedStore()

    async def scenario(broker: Broker) -> None:
        _sub, pub = subscriber_and_publisher(broker, "kept", 1, clean_start=False,
                                             properties=PERSISTENT)
        store.gate.clear()
        try:
            pub.send(mqtt.Publish("kept", b"1", qos=1, packet_id=1))
            await settle()  # its acknowledgement's commit is under way, and waits
            pub.send(mqtt.Publish("nobody", b"2", qos=1, packet_id=2))
            await settle()
            assert pub.new() == []
        finally:
            store.gate.set()
        await settle()
        assert pub.new() == [mqtt.PubAck(1),
                             mqtt.PubAck(2, mqtt.ReasonCode.NO_MATCHING_SUBSCRIBERS)]

    run(scenario, store)
