"""``hive_publishes_received``: a loop iteration's accepted PUBLISHes in one call, in order,
before anything they caused is written (their acknowledgements, deliveries, cluster frames)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from broker.test_channel import Peer, subscriber_and_publisher

from hive_core.broker import Broker, BrokerSettings
from hive_core.cluster._link import FLUSH_FRAMES, PeerLink
from hive_core.cluster._wire import FrameKind
from hive_core.mqtt import PropertyId, PubAck, Publish, PubRec
from hive_core.persistence import MemorySessionStore, Snapshot
from hive_core.plugins import ExtensionManager, Extensions
from hive_ext_api import ClientInfo, PublishMessage, ReasonCode, ReceivedPublish, hookimpl


class Recorder:
    """Keeps what each call saw, and what the publisher had been sent by then."""

    def __init__(self, publisher: Callable[[], list[Any]]) -> None:
        self.publisher = publisher
        self.calls: list[list[tuple[Any, ...]]] = []
        self.acks_before: list[int] = []

    @hookimpl
    def hive_publishes_received(self, publishes: list[ReceivedPublish]) -> None:
        self.calls.append([(p.topic, p.payload, p.qos, p.retain, p.publisher_id,
                            p.has_properties, p.to_publish_message().user_properties)
                           for p in publishes])
        self.acks_before.append(sum(isinstance(p, PubAck | PubRec) for p in self.publisher()))


class Gatekeeper:
    """Refuses topics under ``no/``, moves the rest under ``in/``."""

    @hookimpl
    def hive_intercept_publish_inbound(self, client: ClientInfo,
                                       publish: PublishMessage) -> int | None:
        if publish.topic.startswith("no/"):
            return ReasonCode.NOT_AUTHORIZED
        publish.topic = "in/" + publish.topic
        return None


class AsyncRecorder:
    @hookimpl
    async def hive_publishes_received(self, publishes: list[ReceivedPublish]) -> None:
        raise AssertionError("never awaited")


def broker_with(*plugins: tuple[str, Any]) -> tuple[Broker, Extensions]:
    manager = ExtensionManager(builtins=(), discover_installed=False)
    for name, plugin in plugins:
        manager.register(name, plugin)
    extensions = Extensions(manager)
    broker = Broker(BrokerSettings(), MemorySessionStore(), extensions)
    broker.start(Snapshot())
    return broker, extensions


def test_one_call_per_read_in_order_as_routed_before_the_acknowledgements() -> None:
    async def main() -> None:
        pub: Peer | None = None
        recorder = Recorder(lambda: pub.io.packets if pub is not None else [])
        broker, extensions = broker_with(("gate", Gatekeeper()), ("recorder", recorder))
        assert extensions.records_publishes
        try:
            sub, pub = subscriber_and_publisher(broker, "in/#", qos=2)
            pub.new()
            pub.send(Publish("a", b"0", 0),
                     Publish("b", b"1", 1, packet_id=1),
                     Publish("no/x", b"2", 1, packet_id=2),  # refused: not recorded
                     Publish("c", b"3", 2, True, packet_id=3,
                             properties={PropertyId.USER_PROPERTY: [("k", "v")]}))
            assert recorder.calls == [[
                ("in/a", b"0", 0, False, "p", False, []),
                ("in/b", b"1", 1, False, "p", False, []),
                ("in/c", b"3", 2, True, "p", True, [("k", "v")]),
            ]]
            assert recorder.acks_before == [0]  # the hook came before the writes
            await asyncio.sleep(0.05)  # the PUBREC waits for its commit
            broker.flush()
            answers = pub.new()
            assert [type(p) for p in answers] == [PubAck, PubAck, PubRec]
            assert [p.topic for p in sub.publishes()] == ["in/a", "in/b", "in/c"]
            # The QoS 2 message again (the client did not see its PUBREC): answered, not
            # routed, so not recorded twice.
            pub.send(Publish("c", b"3", 2, True, packet_id=3, dup=True))
            await asyncio.sleep(0.05)
            broker.flush()
            assert len(recorder.calls) == 1
            assert [type(p) for p in pub.new()] == [PubRec]
        finally:
            await broker.stop()

    asyncio.run(main())


def test_an_async_recorder_is_logged_as_failed_and_the_node_serves_on() -> None:
    async def main() -> None:
        broker, extensions = broker_with(("recorder", AsyncRecorder()))
        try:
            sub, pub = subscriber_and_publisher(broker, "t")
            pub.send(Publish("t", b"x", 1, packet_id=1))
            assert [p.payload for p in sub.publishes()] == [b"x"]
            assert extensions.failures["recorder"] == 1
        finally:
            await broker.stop()

    asyncio.run(main())


class Transport:
    def __init__(self, order: list[str]) -> None:
        self.order = order

    def write(self, data: bytes) -> None:
        self.order.append("write")


def test_a_cluster_link_hands_the_batch_over_before_each_write() -> None:
    """A long read can fill a link's batch of frames, written at once (FLUSH_FRAMES): the
    recorders get what was accepted before those frames leave, as before the broker's flush."""
    order: list[str] = []

    async def main() -> None:
        link = PeerLink(lambda *_: None, lambda _: None, outbound=True)
        link.connection_made(Transport(order))  # type: ignore[arg-type]
        link.before_write = lambda: order.append("record")
        for _ in range(FLUSH_FRAMES):
            link.send(FrameKind.HEARTBEAT, [0, 0, 0, 0])
        assert order == ["record", "write"]  # at once, within this turn of the loop
        link.send(FrameKind.HEARTBEAT, [0, 0, 0, 0])
        await asyncio.sleep(0)  # the end of the turn writes the rest
        assert order == ["record", "write", "record", "write"]

    asyncio.run(main())
