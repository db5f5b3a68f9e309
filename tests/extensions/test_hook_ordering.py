"""A hook never reorders what a client sent, nor hides what it acknowledged.

- What a client sent before its DISCONNECT is handled, also when an ``async`` interceptor makes it
  wait and the client has closed the socket meanwhile (what mosquitto_pub does).
- A subscription is in place before its SUBACK leaves, whatever hooks run on SUBSCRIBE: a
  message published right after the SUBACK reaches the subscriber.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from e2e._session_helpers import PahoClient, mosquitto_pub
from e2e.rawclient import RawClient

from hive_core.mqtt import Connect, Disconnect, Publish, Will, encode_packet
from hive_ext_api import ClientInfo, PublishMessage, SubscriptionInfo, hookimpl

pytestmark = pytest.mark.timeout(90)


class AsyncInbound:
    @hookimpl
    async def hive_intercept_publish_inbound(self, publish: PublishMessage) -> None:
        await asyncio.sleep(0.05)


class SyncSubscribeHook:
    @hookimpl
    def hive_intercept_subscribe(self, client: ClientInfo,
                                 subscriptions: list[SubscriptionInfo]) -> None:
        pass


class AsyncSubscribeHook:
    @hookimpl
    async def hive_intercept_subscribe(self, client: ClientInfo,
                                       subscriptions: list[SubscriptionInfo]) -> None:
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("hive_extensions", [[AsyncInbound()]], ids=["async-inbound"])
def test_publish_then_disconnect_then_close_is_delivered(hive_node: Any) -> None:
    with RawClient(hive_node.port) as watcher:
        watcher.connect(5, "watcher")
        watcher.subscribe("last/#", 0)
        for version in ("mqttv311", "mqttv5"):
            mosquitto_pub(hive_node.port, f"last/{version}", "words", qos=0, version=version)
        assert {watcher.expect(Publish).topic for _ in range(2)} == {"last/mqttv311",
                                                                  "last/mqttv5"}


@pytest.mark.parametrize("hive_extensions", [[AsyncInbound()]], ids=["async-inbound"])
def test_a_disconnect_behind_a_waiting_hook_still_discards_the_will(hive_node: Any) -> None:
    with RawClient(hive_node.port) as watcher:
        watcher.connect(5, "watcher")
        watcher.subscribe("wills/#", 0)
        sock = socket.create_connection(("127.0.0.1", hive_node.port))
        sock.sendall(encode_packet(Connect("leaver", 5, will=Will("wills/leaver", b"gone")), 5)
                     + encode_packet(Publish("words", b"x"), 5)
                     + encode_packet(Disconnect(0), 5))
        sock.close()
        watcher.expect_nothing(1.0)


@pytest.mark.parametrize("hive_extensions", [[SyncSubscribeHook()], [AsyncSubscribeHook()]],
                         ids=["sync", "async"])
def test_a_message_published_after_the_suback_arrives(hive_node: Any) -> None:
    subscriber = PahoClient(hive_node.port, "orderly", version=5).connect()
    publisher = RawClient(hive_node.port)
    try:
        publisher.connect(5, "prompt")
        missed = []
        for trial in range(40):
            topic = f"order/{trial}"
            subscriber.subscribe(topic, qos=0)  # returns once the SUBACK is in
            publisher.publish(topic, b"now")
            try:
                subscriber.next_message(timeout=2.0)
            except AssertionError:
                missed.append(trial)
        assert missed == []
    finally:
        publisher.close()
        subscriber.close()
