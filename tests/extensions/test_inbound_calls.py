"""Plain-function inbound interceptors run inline, whatever arguments they declare, in order."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.test_channel import Peer

from hive_core.broker import Broker, BrokerSettings
from hive_core.mqtt import Publish
from hive_core.persistence import MemorySessionStore, Snapshot
from hive_core.plugins import ExtensionManager, Extensions
from hive_ext_api import ClientInfo, PublishMessage, hookimpl


class PayloadOnly:
    """Declares only ``publish``: gets it without ``client``."""

    @hookimpl
    def hive_intercept_publish_inbound(self, publish: PublishMessage) -> None:
        publish.payload = publish.payload.upper()


class Reversed:
    """Declares ``publish`` before ``client``."""

    def __init__(self) -> None:
        self.clients: list[str] = []

    @hookimpl
    def hive_intercept_publish_inbound(self, publish: PublishMessage,
                                       client: ClientInfo) -> None:
        self.clients.append(client.client_id)
        publish.topic = "moved/" + publish.topic


class Broken:
    @hookimpl
    def hive_intercept_publish_inbound(self, client: ClientInfo,
                                       publish: PublishMessage) -> None:
        raise RuntimeError("boom")


def test_every_plain_interceptor_sees_its_arguments_and_a_failure_is_counted() -> None:
    reversed_ = Reversed()

    async def main() -> Any:
        manager = ExtensionManager(builtins=(), discover_installed=False)
        for name, plugin in (("broken", Broken()), ("payload", PayloadOnly()),
                             ("reversed", reversed_)):
            manager.register(name, plugin)
        extensions = Extensions(manager)
        assert extensions.inbound_calls is not None and len(extensions.inbound_calls) == 3
        broker = Broker(BrokerSettings(), MemorySessionStore(), extensions)
        broker.start(Snapshot())
        try:
            sub = Peer(broker)
            sub.connect("s")
            sub.subscribe("moved/#", qos=0)
            pub = Peer(broker)
            pub.connect("p")
            pub.send(Publish("t", b"quiet", 0))
            got = sub.publishes()
            assert [(p.topic, p.payload) for p in got] == [("moved/t", b"QUIET")]
            assert reversed_.clients == ["p"]
            assert extensions.failures["broken"] == 1
        finally:
            await broker.stop()

    asyncio.run(main())
