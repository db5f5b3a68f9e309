"""The channel on its own, as h11 tests its ``Connection``: no broker, no socket, no event loop.

A :class:`Host` is the broker as the channel sees it (``broker/_host.py``'s ``ChannelHost``): it
records what the channel asks (a message to route, a session to attach, a delivery acknowledged)
and answers as a test says. Time is whatever the test passes in. What the channel hands over to
wait on (a commit, the cluster's fence) is a coroutine the test steps through by hand: every test
here is a plain function, so a channel that reached for a clock, a loop or a task would fail it.
``test_channel.py`` drives the same channel through a real broker.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator, Iterable
from contextlib import nullcontext
from typing import Any

from hive_core import mqtt
from hive_core.broker import BrokerSettings, Channel, Message
from hive_core.broker._metrics import BrokerMetrics
from hive_core.broker._ports import InputFence
from hive_core.broker._session import Outbound, Pending, Session
from hive_core.plugins import Extensions

from ._memory_io import Io

P = mqtt.PropertyId
RC = mqtt.ReasonCode


class Gate:
    """Something a step waits on until the test opens it (a commit, the cluster's fence)."""

    def __init__(self) -> None:
        self.open = False

    def __await__(self) -> Generator[None, None, None]:
        while not self.open:
            yield


class Outbox:
    """The outbound window: which deliveries the client acknowledged or released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def drain(self, session: Session) -> None:
        self.calls.append(("drain", session.client_id, 0))

    def acknowledged(self, session: Session, packet_id: int) -> None:
        self.calls.append(("acknowledged", session.client_id, packet_id))

    def released(self, session: Session, packet_id: int, outbound: Outbound) -> None:
        self.calls.append(("released", session.client_id, packet_id))


class Records:
    """The store's side of inbound QoS 2: what the channel wrote."""

    def __init__(self) -> None:
        self.atomic = nullcontext
        self.writes: list[tuple[str, int]] = []

    def received_qos2(self, session: Session, packet_id: int,
                      forwarded: Message | None = None) -> None:
        self.writes.append(("received", packet_id))

    def released_qos2(self, session: Session, packet_id: int) -> None:
        self.writes.append(("released", packet_id))


class Host:
    """A broker as the channel sees it, recording what it is asked."""

    def __init__(self, **settings: Any) -> None:
        self.settings = BrokerSettings(**settings)
        self.metrics = BrokerMetrics()
        self.extensions = Extensions.none()
        self.outbox = Outbox()
        self.records = Records()
        self.custody = self
        self.input_fence = InputFence()
        self.now = 500.0
        self.monotonic = lambda: self.now
        self.wall_time = lambda: 1_800_000_000.0 + self.now
        self.steps: list[Coroutine[Any, Any, None]] = []
        self.dirty: list[Channel] = []
        self.sessions: dict[str, Session] = {}
        self.published: list[Message] = []
        self.subscribed: list[tuple[str, str, int]] = []
        self.closed: list[tuple[str | None, bool, bool]] = []
        self.commits = 0
        self.commit_gate: Gate | None = None  # commits wait on it while it is shut
        self.fence_gate: Gate | None = None  # input waits on it after a pause
        self.matched = True

    # -- what the channel hands over to wait on, stepped by the test

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> Coroutine[Any, Any, None]:
        self.steps.append(coroutine)
        return coroutine

    def run_steps(self) -> None:
        """Step every waiting coroutine until each is done or waits on a shut gate."""
        progress = True
        while progress:
            progress = False
            for step in list(self.steps):
                try:
                    step.send(None)
                except StopIteration:
                    self.steps.remove(step)
                    progress = True
        self.flush()

    async def commit(self) -> None:
        self.commits += 1
        if self.commit_gate is not None:
            await self.commit_gate

    async def settle(self) -> None:
        await self.commit()

    def input_waits(self, now: float) -> Gate | None:
        return self.fence_gate

    def sessions_elsewhere(self) -> bool:
        return False

    async def fetch_session_elsewhere(self, client_id: str) -> None:
        raise AssertionError("no other node")

    # -- output

    def mark_dirty(self, link: Channel) -> None:
        self.dirty.append(link)

    def flush(self) -> None:
        dirty, self.dirty = self.dirty, []
        for link in dirty:
            link.flush()

    # -- sessions

    def accept(self, link: Channel) -> None:
        pass

    def has_room_for(self, client_id: str) -> bool:
        return True

    def attach(self, link: Channel, client_id: str, version: int, clean_start: bool,
               expiry: int, will: Any) -> tuple[Session, bool]:
        session = None if clean_start else self.sessions.get(client_id)
        present = session is not None
        if session is None:
            session = self.sessions[client_id] = Session(client_id, version, expiry,
                                                         stored=expiry > 0)
        session.connection = link  # type: ignore[assignment]
        return session, present

    def resume(self, session: Session) -> None:
        self.outbox.drain(session)

    def connection_closed(self, link: Channel, session: Session | None, graceful: bool,
                          will_discarded: bool) -> None:
        self.closed.append((session.client_id if session else None, graceful, will_discarded))

    # -- messages and subscriptions

    def refused(self, message: Message) -> bool:
        return False

    def publish(self, message: Message, from_cluster: bool = False) -> tuple[bool, bool]:
        self.published.append(message)
        return self.matched, message.qos > 0

    def forwards_held(self) -> nullcontext[Any]:
        return nullcontext(lambda: False)  # no other node

    def subscribe(self, session: Session, requests: list[mqtt.SubscriptionRequest],
                  subscription_id: int | None, version: int
                  ) -> tuple[list[int], list[bool]] | None:
        self.subscribed += [(session.client_id, r.topic_filter, r.qos) for r in requests]
        return [r.qos if not r.topic_filter.startswith("bad/") else RC.TOPIC_FILTER_INVALID
                for r in requests], [False] * len(requests)

    def unsubscribe(self, session: Session, filters: Iterable[str]) -> list[int]:
        return [RC.SUCCESS for _ in filters]

    def send_retained_for(self, session: Session, requests: list[mqtt.SubscriptionRequest],
                          codes: list[int], existed: list[bool]) -> None:
        pass

    def client_event(self, client_id: str, event: Coroutine[Any, Any, None]) -> None:
        event.close()


class Client:
    def __init__(self, host: Host, version: int = 5) -> None:
        self.host = host
        self.version = version
        self.io = Io(version)
        self.channel = Channel(host, self.io)  # type: ignore[arg-type]
        self._seen = 0

    def send(self, *packets: Any) -> list[Any]:
        """Send ``packets``; what the channel wrote back (its output is written per batch)."""
        self.channel.receive_data(b"".join(mqtt.encode_packet(p, self.version) for p in packets))
        self.host.flush()
        return self.new()

    def new(self) -> list[Any]:
        packets = self.io.packets[self._seen:]
        self._seen = len(self.io.packets)
        return packets

    def connect(self, client_id: str = "c", **options: Any) -> mqtt.ConnAck:
        packets = self.send(mqtt.Connect(client_id, self.version, **options))
        assert len(packets) == 1 and isinstance(packets[0], mqtt.ConnAck), packets
        return packets[0]


def test_the_first_packet_must_be_a_connect() -> None:
    host = Host()
    client = Client(host)
    assert client.send(mqtt.PingReq()) == []
    assert client.io.closed
    assert host.closed == [(None, False, False)]
    assert host.metrics.protocol_errors == 1


def test_connect_attaches_a_session_and_arms_the_keep_alive() -> None:
    host = Host()
    client = Client(host)
    ack = client.connect("dev1", keep_alive=20, clean_start=False,
                         properties={P.SESSION_EXPIRY_INTERVAL: 60})
    assert ack.reason_code == RC.SUCCESS and not ack.session_present
    assert host.sessions["dev1"].expiry_interval == 60
    assert client.io.deadline == 30  # one and a half keep alives (MQTT 3.1.2.10)
    assert host.outbox.calls == [("drain", "dev1", 0)]  # what was in flight, then the queue
    again = Client(host)
    assert again.connect("dev1", clean_start=False,
                         properties={P.SESSION_EXPIRY_INTERVAL: 60}).session_present


def test_no_connect_in_time_closes_without_a_disconnect() -> None:
    host = Host(connect_timeout=10)
    client = Client(host)
    assert client.io.deadline == 10
    client.channel.check_deadline(host.now + 10)
    assert client.io.closed and client.new() == []


def test_the_keep_alive_deadline_follows_the_time_passed_in() -> None:
    host = Host()
    client = Client(host)
    client.connect(keep_alive=10)
    host.now += 9
    client.send(mqtt.PingReq())
    client.channel.check_deadline(host.now + 6)  # 6 s after the last read: 9 s are left
    assert not client.io.closed and client.io.deadline == 9
    client.channel.check_deadline(host.now + 15)
    host.flush()
    assert client.io.closed
    assert [(type(p), p.reason_code) for p in client.new()] == \
        [(mqtt.Disconnect, RC.KEEP_ALIVE_TIMEOUT)]


def test_ping_and_qos0_need_nothing_waited_for() -> None:
    host = Host()
    client = Client(host)
    client.connect()
    assert [type(p) for p in client.send(mqtt.PingReq())] == [mqtt.PingResp]
    assert client.send(mqtt.Publish("a/b", b"x", 0)) == []
    assert [(m.topic, m.payload, m.qos) for m in host.published] == [("a/b", b"x", 0)]
    assert host.steps == [] and host.commits == 0


def test_pubacks_wait_for_one_commit_and_keep_their_order() -> None:
    host = Host()
    host.commit_gate = Gate()
    client = Client(host)
    client.connect()
    assert client.send(mqtt.Publish("a", b"1", 1, packet_id=1),
                       mqtt.Publish("a", b"2", 1, packet_id=2),
                       mqtt.Publish("a", b"3", 1, packet_id=3)) == []
    host.run_steps()
    assert client.new() == [] and host.commits == 1  # routed, not acknowledged before the disk
    host.commit_gate.open = True
    host.run_steps()
    assert [(type(p), p.packet_id) for p in client.new()] == \
        [(mqtt.PubAck, 1), (mqtt.PubAck, 2), (mqtt.PubAck, 3)]
    assert host.commits == 1 and len(host.published) == 3


def test_no_matching_subscribers_is_said_in_the_puback() -> None:
    host = Host()
    host.matched = False
    client = Client(host)
    client.connect()
    client.send(mqtt.Publish("a", b"1", 1, packet_id=7))
    host.run_steps()
    [ack] = client.new()
    assert (ack.packet_id, ack.reason_code) == (7, RC.NO_MATCHING_SUBSCRIBERS)


def test_inbound_qos2_is_routed_once_until_released() -> None:
    host = Host()
    client = Client(host)
    client.connect("q2", clean_start=False, properties={P.SESSION_EXPIRY_INTERVAL: 60})
    client.send(mqtt.Publish("t", b"once", 2, packet_id=5))
    client.send(mqtt.Publish("t", b"once", 2, packet_id=5, dup=True))
    client.send(mqtt.Publish("t", b"once", 2, packet_id=5))  # resent without DUP: still a resend
    host.run_steps()
    assert [type(p) for p in client.new()] == [mqtt.PubRec, mqtt.PubRec, mqtt.PubRec]
    assert len(host.published) == 1
    client.send(mqtt.PubRel(5))
    host.run_steps()
    [comp] = client.new()
    assert isinstance(comp, mqtt.PubComp) and comp.reason_code == RC.SUCCESS
    assert host.records.writes == [("received", 5), ("released", 5)]
    client.send(mqtt.Publish("t", b"next", 2, packet_id=5))  # the id is free again: a new message
    host.run_steps()
    assert len(host.published) == 2 and [type(p) for p in client.new()] == [mqtt.PubRec]


def test_a_pubrel_for_an_unknown_id_is_answered_with_0x92() -> None:
    host = Host()
    client = Client(host)
    client.connect()
    [comp] = client.send(mqtt.PubRel(9))  # nothing to commit: at once
    assert (comp.packet_id, comp.reason_code) == (9, RC.PACKET_IDENTIFIER_NOT_FOUND)


def test_topic_aliases_resolve_and_one_past_the_maximum_is_refused() -> None:
    host = Host(topic_alias_maximum=2)
    client = Client(host)
    client.connect()
    client.send(mqtt.Publish("long/topic", b"1", 0, properties={P.TOPIC_ALIAS: 1}))
    client.send(mqtt.Publish("", b"2", 0, properties={P.TOPIC_ALIAS: 1}))
    assert [m.topic for m in host.published] == ["long/topic", "long/topic"]
    answer = client.send(mqtt.Publish("x", b"3", 0, properties={P.TOPIC_ALIAS: 3}))
    assert [(type(p), p.reason_code) for p in answer] == [(mqtt.Disconnect, RC.TOPIC_ALIAS_INVALID)]
    assert client.io.closed and len(host.published) == 2


def test_clients_may_not_publish_under_sys() -> None:
    host = Host()
    client = Client(host)
    client.connect()
    [ack] = client.send(mqtt.Publish("$SYS/broker/uptime", b"0", 1, packet_id=2))
    assert ack.reason_code == RC.NOT_AUTHORIZED and host.published == []


def test_past_the_receive_maximum_a_throttled_client_is_read_again_after_its_acks() -> None:
    host = Host(server_receive_maximum=2, receive_maximum_strategy="throttle")
    host.commit_gate = Gate()
    client = Client(host)
    client.connect()
    client.send(*(mqtt.Publish("a", b"x", 1, packet_id=i) for i in (1, 2, 3)))
    assert not client.io.reading and host.metrics.receive_maximum_throttled == 1
    assert len(host.published) == 3  # handled: nothing the client sent is lost
    host.commit_gate.open = True
    host.run_steps()
    assert client.io.reading and len(client.new()) == 3


def test_a_qos_above_the_maximum_is_refused_with_0x9b() -> None:
    host = Host(maximum_qos=1)
    client = Client(host)
    client.connect()
    answer = client.send(mqtt.Publish("a", b"x", 2, packet_id=1))
    assert [(type(p), p.reason_code) for p in answer] == [(mqtt.Disconnect, RC.QOS_NOT_SUPPORTED)]
    assert host.published == []


def test_acknowledgements_of_deliveries_go_to_the_outbound_window() -> None:
    host = Host()
    client = Client(host)
    client.connect("sub")
    session = host.sessions["sub"]
    message = Message("t", b"x", 2, False, {}, "pub")
    session.window()[4] = Outbound(Pending(message, 2, None, False))
    # nothing to commit: at once
    [rel] = client.send(mqtt.PubAck(3), mqtt.PubRec(4), mqtt.PubComp(4))
    assert host.outbox.calls[1:] == [("acknowledged", "sub", 3), ("released", "sub", 4),
                                     ("acknowledged", "sub", 4)]
    assert isinstance(rel, mqtt.PubRel) and rel.packet_id == 4
    [rel] = client.send(mqtt.PubRec(8))  # nothing in flight with that id
    assert (rel.packet_id, rel.reason_code) == (8, RC.PACKET_IDENTIFIER_NOT_FOUND)


def test_subscribe_and_unsubscribe_are_answered_with_the_hosts_codes() -> None:
    host = Host()
    client = Client(host, version=4)
    client.connect()
    [ack] = client.send(mqtt.Subscribe(1, [mqtt.SubscriptionRequest("a/#", 1),
                                           mqtt.SubscriptionRequest("bad/+", 2)]))
    # MQTT 3: 0x80, any failure
    assert isinstance(ack, mqtt.SubAck) and ack.reason_codes == [1, 0x80]
    assert host.subscribed == [("c", "a/#", 1), ("c", "bad/+", 2)]
    [ack] = client.send(mqtt.Unsubscribe(2, ["a/#"]))
    assert isinstance(ack, mqtt.UnsubAck) and ack.packet_id == 2


def test_subscription_identifiers_when_disabled_close_with_0xa1() -> None:
    host = Host(subscription_identifiers=False)
    client = Client(host)
    client.connect()
    answer = client.send(mqtt.Subscribe(1, [mqtt.SubscriptionRequest("a", 0)],
                                        {P.SUBSCRIPTION_IDENTIFIER: [3]}))
    assert [(type(p), p.reason_code) for p in answer] == \
        [(mqtt.Disconnect, RC.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED)]
    assert host.subscribed == []


def test_disconnect_says_whether_the_will_goes() -> None:
    host = Host()
    for reason, discarded in ((RC.SUCCESS, True), (RC.DISCONNECT_WITH_WILL_MESSAGE, False)):
        client = Client(host)
        client.connect(f"w{reason}")
        client.send(mqtt.Disconnect(reason))
        assert client.io.closed
        assert host.closed[-1] == (f"w{reason}", True, discarded)


def test_a_session_expiry_raised_from_zero_at_disconnect_is_a_protocol_error() -> None:
    host = Host()
    client = Client(host)
    client.connect()
    answer = client.send(mqtt.Disconnect(RC.SUCCESS, {P.SESSION_EXPIRY_INTERVAL: 30}))
    assert [(type(p), p.reason_code) for p in answer] == [(mqtt.Disconnect, RC.PROTOCOL_ERROR)]
    assert host.closed == [("c", False, False)]


def test_a_second_connect_is_a_protocol_error() -> None:
    host = Host()
    client = Client(host)
    client.connect()
    answer = client.send(mqtt.Connect("c", 5))
    assert [(type(p), p.reason_code) for p in answer] == [(mqtt.Disconnect, RC.PROTOCOL_ERROR)]


def fenced_client() -> tuple[Host, Client]:
    """A connected client on a node that has just paused: its input waits on the fence."""
    host = Host()
    client = Client(host)
    client.connect()
    host.fence_gate = Gate()
    host.input_fence.up = True
    return host, client


def test_input_after_a_pause_waits_for_the_fence_and_keeps_its_order() -> None:
    host, client = fenced_client()
    client.send(mqtt.Publish("a", b"1", 0), mqtt.Publish("a", b"2", 1, packet_id=1), mqtt.PingReq())
    client.send(mqtt.Publish("a", b"3", 0))
    host.run_steps()
    assert host.published == [] and client.new() == []
    host.input_fence.up = False
    host.fence_gate.open = True
    host.run_steps()
    assert [m.payload for m in host.published] == [b"1", b"2", b"3"]
    # the PUBACK after its commit
    assert [type(p) for p in client.new()] == [mqtt.PingResp, mqtt.PubAck]


def test_input_of_a_client_gone_while_fenced_is_dropped() -> None:
    host, client = fenced_client()
    client.send(mqtt.Publish("a", b"1", 1, packet_id=1))
    client.channel.connection_lost()
    host.fence_gate.open = True
    host.run_steps()
    # It sends again, on its next connection, what was not acknowledged: routed here now,
    # that PUBLISH could be routed twice.
    assert host.published == []
    assert host.closed == [("c", False, False)]


def test_a_malformed_packet_after_connect_closes_with_its_reason() -> None:
    host = Host()
    client = Client(host)
    client.connect()
    client.channel.receive_data(bytes([0x36, 0x04, 0x00, 0x01, 0x61, 0x00]))  # PUBLISH, QoS 3
    host.flush()
    [answer] = client.new()
    assert (type(answer), answer.reason_code) == (mqtt.Disconnect, RC.MALFORMED_PACKET)
    assert client.io.closed and host.published == []
