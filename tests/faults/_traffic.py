"""Traffic for fault tests: a steady numbered stream, counted at both ends.

A :class:`Publisher` sends numbered messages from a persistent paho session (reconnecting on its
own, as paho does by default) and records which numbers the broker acknowledged (PUBACK for
QoS 1, PUBCOMP for QoS 2). A :class:`Subscriber` on a persistent session records every number it
receives. :class:`Tally` turns both into the figures a fault test reports: published,
acknowledged, received, lost (acknowledged but never received: must be 0) and duplicated.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

_ids = itertools.count(1)


def _client(client_id: str, version: int, expiry: int) -> tuple[mqtt.Client, dict[str, Any]]:
    protocol = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
    kwargs: dict[str, Any] = {} if version == 5 else {"clean_session": False}
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=protocol, **kwargs)
    client.reconnect_delay_set(0.05, 0.5)
    connect: dict[str, Any] = {}
    if version == 5:
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = expiry
        connect = {"clean_start": False, "properties": properties}
    return client, connect


class _Endpoint:
    """One paho client that reconnects on its own, possibly to the next of several ports."""

    def __init__(self, ports: Sequence[int], client_id: str, version: int, expiry: int) -> None:
        self.ports = list(ports)
        self.client, self._connect = _client(client_id, version, expiry)
        self.connects = 0
        self.refusals = 0
        self.disconnects: Counter[int] = Counter()  # by reason code
        self.sessions_present: list[bool] = []  # the CONNACK's flag, connect by connect
        self.connected_at: list[float] = []  # monotonic time of each CONNACK
        self.connected = threading.Event()
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self._turn = 0
        # paho-mqtt 2.2 runs its "reconnect reset" of outgoing messages on every reconnect
        # attempt, also the ones that fail while a node restarts: the second run turns a QoS 2
        # message awaiting PUBCOMP ("resend PUBREL") into a new PUBLISH without DUP, which no
        # broker can tell from a new message. Keeping such messages as they are fixes it.
        client = self.client
        reset = client._messages_reconnect_reset_out

        def reset_keeping_releases() -> None:
            with client._out_message_mutex:
                releasing = [m for m in client._out_messages.values()
                             if m.state == mqtt.mqtt_ms_resend_pubrel]
                reset()
                for message in releasing:
                    message.state = mqtt.mqtt_ms_resend_pubrel

        client._messages_reconnect_reset_out = reset_keeping_releases  # type: ignore[method-assign]

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        if reason.is_failure:
            self.refusals += 1
            return
        self.connects += 1
        self.sessions_present.append(bool(flags.session_present))
        self.connected_at.append(time.monotonic())
        self.connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                       properties: Any) -> None:
        self.connected.clear()
        self.disconnects[int(reason.value)] += 1
        if len(self.ports) > 1:  # the next node (as a client behind a load balancer would)
            self._turn = (self._turn + 1) % len(self.ports)
            client.connect_async("127.0.0.1", self.ports[self._turn], 30, **self._connect)

    def start(self, timeout: float = 10.0) -> None:
        self.client.connect_async("127.0.0.1", self.ports[0], 30, **self._connect)
        self.client.loop_start()
        assert self.connected.wait(timeout), "no CONNACK in time"

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Subscriber(_Endpoint):
    def __init__(self, ports: Sequence[int], topic: str, qos: int, version: int = 5,
                 client_id: str | None = None, expiry: int = 3600) -> None:
        super().__init__(ports, client_id or f"fault-sub-{next(_ids)}", version, expiry)
        self.topic = topic
        self.qos = qos
        self.received: Counter[int] = Counter()
        self._lock = threading.Lock()
        self.client.on_message = self._on_message

    def start(self, timeout: float = 10.0) -> None:
        super().start(timeout)
        done = threading.Event()
        self.client.on_subscribe = lambda *args: done.set()
        self.client.subscribe(self.topic, self.qos)
        assert done.wait(timeout), "no SUBACK in time"

    def _on_message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.received[int(message.payload.split(b" ", 1)[0])] += 1

    def snapshot(self) -> Counter[int]:
        with self._lock:
            return Counter(self.received)


class Publisher(_Endpoint):
    """Publishes ``count`` numbered messages at ``rate`` per second on a thread of its own."""

    def __init__(self, ports: Sequence[int], topic: str, qos: int, count: int, rate: float,
                 version: int = 5, client_id: str | None = None, expiry: int = 3600,
                 payload_size: int = 16, first: int = 1) -> None:
        super().__init__(ports, client_id or f"fault-pub-{next(_ids)}", version, expiry)
        self.topic = topic
        self.qos = qos
        self.first = first  # numbers first .. first + count - 1: publishers do not overlap
        self.count = count
        self.rate = rate
        self.padding = b"x" * max(0, payload_size - 8)
        self.published = 0
        self.acknowledged: set[int] = set()
        self._by_mid: dict[int, int] = {}
        self._early: dict[int, bool] = {}  # acknowledged before publish() returned its mid
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.client.on_publish = self._on_publish

    def start(self, timeout: float = 10.0) -> None:
        super().start(timeout)
        self._thread.start()

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any,
                    properties: Any) -> None:
        # PUBCOMP 0x92: the node had finished the exchange (its PUBCOMP was lost in a crash);
        # the message was acknowledged with the PUBREC before.
        done = not reason.is_failure or int(reason.value) == 0x92
        with self._lock:
            number = self._by_mid.pop(mid, None)
            if number is None:
                self._early[mid] = done
            elif done:
                self.acknowledged.add(number)

    def _run(self) -> None:
        started = time.monotonic()
        for index, number in enumerate(range(self.first, self.first + self.count), 1):
            pause = started + index / self.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            self.publish_one(number)

    def publish_one(self, number: int) -> None:
        """Publish message ``number`` now (the thread's loop, or a test's own step)."""
        # paho calls on_publish holding its own lock: never call paho holding ours
        info = self.client.publish(self.topic, b"%d " % number + self.padding, self.qos)
        with self._lock:
            self.published += 1
            if info.mid in self._early:
                if self._early.pop(info.mid):
                    self.acknowledged.add(number)
            else:
                self._by_mid[info.mid] = number

    def finished(self) -> bool:
        return not self._thread.is_alive()

    def all_acknowledged(self) -> bool:
        with self._lock:
            return self.finished() and len(self.acknowledged) == self.count


@dataclass
class Tally:
    published: int
    acknowledged: int
    received: int
    lost: int
    duplicated: int
    lost_numbers: list[int]
    duplicated_numbers: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, publishers: Sequence[Publisher], subscriber: Subscriber) -> Tally:
        received = subscriber.snapshot()
        acknowledged: set[int] = set()
        for publisher in publishers:
            acknowledged |= publisher.acknowledged
        lost = sorted(acknowledged - set(received))
        return cls(sum(p.published for p in publishers), len(acknowledged), len(received),
                   len(lost), sum(n - 1 for n in received.values()), lost[:20],
                   sorted(k for k, n in received.items() if n > 1)[:20])

    def check(self, qos: int) -> None:
        """Nothing acknowledged was lost; at QoS 2, nothing arrived twice."""
        assert self.lost == 0, self
        if qos == 2:
            assert self.duplicated == 0, self

    def __str__(self) -> str:
        return (f"published {self.published}, acknowledged {self.acknowledged}, received "
                f"{self.received}, lost {self.lost}, duplicated {self.duplicated}"
                + (f" (first lost: {self.lost_numbers})" if self.lost else "")
                + (f" (duplicated: {self.duplicated_numbers})" if self.duplicated else ""))


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_delivered(publisher: Publisher, subscriber: Subscriber, sent: float = 60,
                   acknowledged: float = 60, arrived: float = 60) -> None:
    """Until the publisher has sent everything, the broker acknowledged all of it, and every
    acknowledged message reached the subscriber (each within its own timeout)."""
    wait_until(publisher.finished, sent, "the publisher to send everything")
    wait_until(publisher.all_acknowledged, acknowledged, "every message to be acknowledged")
    wait_until(lambda: publisher.acknowledged <= set(subscriber.snapshot()), arrived,
               "every acknowledged message to arrive")


def traffic_both_ways(nodes: Sequence[Any], topic: str, publishers_on: tuple[int, int],
                      count: int = 200, rate: float = 400) -> None:
    """A QoS 1 subscriber on the older node (0) and one on a newer node (1); ``count`` messages
    published on each of ``publishers_on`` in turn reach both, every one acknowledged."""
    old_side = Subscriber([nodes[0].port], f"{topic}/#", 1)
    new_side = Subscriber([nodes[1].port], f"{topic}/#", 1)
    old_side.start()
    new_side.start()
    time.sleep(0.5)
    try:
        for first, index in zip((1, 1001), publishers_on, strict=True):
            publisher = Publisher([nodes[index].port], f"{topic}/x", 1, count=count, rate=rate,
                                  first=first)
            publisher.start()
            wait_until(publisher.all_acknowledged, 30, "acknowledgements")
            publisher.stop()
            for subscriber in (old_side, new_side):
                wait_until(lambda s=subscriber, p=publisher: p.acknowledged <= set(s.snapshot()),
                           20, "the messages on both sides")
    finally:
        old_side.stop()
        new_side.stop()


def frozen_until(pid: int, condition: Callable[[], bool], timeout: float, what: str) -> None:
    """SIGSTOP the process ``pid`` until ``condition`` holds, then SIGCONT it (also when the
    wait times out)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(condition, timeout, what)
    finally:
        os.kill(pid, signal.SIGCONT)
