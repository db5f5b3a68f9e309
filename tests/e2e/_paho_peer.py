"""A paho-mqtt peer for end-to-end tests: waits with deadlines, records what arrived."""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

WAIT = 5.0


# ---------------------------------------------------------------------------- a paho peer


@dataclass(frozen=True)
class Received:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...]


class Peer:
    """One paho client; what it receives lands in queues the test waits on, with deadlines."""

    _ids = itertools.count()

    def __init__(self, port: int, client_id: str | None = None, version: int = 5,
                 clean: bool = True, session_expiry: int = 0) -> None:
        self.v5 = version == 5
        self.client_id = client_id or f"peer-{next(self._ids)}"
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2, client_id=self.client_id,
            protocol={5: paho.MQTTv5, 4: paho.MQTTv311, 3: paho.MQTTv31}[version],
            clean_session=None if self.v5 else clean,
        )
        self.messages: queue.Queue[Received] = queue.Queue()
        self.disconnects: queue.Queue[int] = queue.Queue()
        self.connack: queue.Queue[tuple[int, Any]] = queue.Queue()
        self._acks: dict[int, list[int]] = {}
        self._cond = threading.Condition()
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_ack
        self.client.on_unsubscribe = self._on_ack
        self.client.on_disconnect = self._on_disconnect
        kwargs: dict[str, Any] = {}
        if self.v5:
            kwargs["clean_start"] = clean
            kwargs["properties"] = Properties(PacketTypes.CONNECT)
            kwargs["properties"].SessionExpiryInterval = session_expiry
        self.client.connect("127.0.0.1", port, keepalive=30, **kwargs)
        self.client.loop_start()
        code, self.connack_properties = self.connack.get(timeout=WAIT)
        assert code == 0, f"CONNACK {code:#x}"

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        self.connack.put((reason.value, properties))

    def _on_message(self, client: Any, userdata: Any, msg: paho.MQTTMessage) -> None:
        ids: tuple[int, ...] = ()
        if self.v5 and msg.properties is not None:
            found = getattr(msg.properties, "SubscriptionIdentifier", None)
            if found is not None:
                ids = tuple(found) if isinstance(found, list) else (found,)
        self.messages.put(Received(msg.topic, msg.payload, msg.qos, bool(msg.retain), ids))

    def _on_ack(self, client: Any, userdata: Any, mid: int, reason_codes: Any,
                properties: Any) -> None:
        with self._cond:
            self._acks[mid] = [getattr(rc, "value", rc) for rc in reason_codes]
            self._cond.notify_all()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                       properties: Any) -> None:
        self.disconnects.put(reason.value)

    def _ack(self, mid: int) -> list[int]:
        with self._cond:
            assert self._cond.wait_for(lambda: mid in self._acks, WAIT), "no SUBACK/UNSUBACK"
            return self._acks.pop(mid)

    def subscribe(self, topic: str | list[str], qos: int = 0, *, no_local: bool = False,
                  retain_as_published: bool = False, retain_handling: int = 0,
                  sid: int | None = None) -> list[int]:
        """SUBSCRIBE one or several filters with the same options; the SUBACK's codes."""
        topics = [topic] if isinstance(topic, str) else topic
        props = None
        if sid is not None:
            props = Properties(PacketTypes.SUBSCRIBE)
            props.SubscriptionIdentifier = sid
        if self.v5:
            options = SubscribeOptions(qos=qos, noLocal=no_local,
                                       retainAsPublished=retain_as_published,
                                       retainHandling=retain_handling)
            result, mid = self.client.subscribe([(t, options) for t in topics], properties=props)
        else:
            result, mid = self.client.subscribe([(t, qos) for t in topics])
        assert result == paho.MQTT_ERR_SUCCESS
        return self._ack(mid)

    def unsubscribe(self, topic: str | list[str]) -> list[int]:
        result, mid = self.client.unsubscribe(topic)
        assert result == paho.MQTT_ERR_SUCCESS
        codes = self._ack(mid)
        return codes if self.v5 else []

    def publish(self, topic: str, payload: bytes | str = b"", qos: int = 0,
                retain: bool = False, properties: Properties | None = None) -> None:
        """Publish and wait until sent (QoS 0) or acknowledged, so it has been routed."""
        info = self.client.publish(topic, payload, qos, retain, properties)
        info.wait_for_publish(WAIT)
        assert info.is_published()

    def expect(self, count: int = 1, timeout: float = WAIT) -> list[Received]:
        got = []
        deadline = time.monotonic() + timeout
        for _ in range(count):
            try:
                got.append(self.messages.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"{self.client_id}: got {got}, wanted {count}") from None
        return got

    def until(self, payload: bytes) -> list[Received]:
        """Everything received up to (not including) the message carrying `payload`."""
        before = []
        while True:
            message = self.expect()[0]
            if message.payload == payload:
                return before
            before.append(message)

    def nothing_more(self, seconds: float = 0.3) -> None:
        time.sleep(seconds)
        assert self.messages.empty(), f"unexpected {self.messages.get_nowait()}"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def peers() -> Iterator[Callable[..., Peer]]:
    opened: list[Peer] = []

    def open_peer(port: int, client_id: str | None = None, version: int = 5,
                  clean: bool = True, session_expiry: int = 0) -> Peer:
        peer = Peer(port, client_id, version, clean, session_expiry)
        opened.append(peer)
        return peer

    yield open_peer
    for peer in opened:
        peer.close()


def topics(messages: list[Received]) -> list[str]:
    return [m.topic for m in messages]
