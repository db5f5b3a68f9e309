"""A small raw-socket MQTT client for tests that must see (or shape) the wire.

Built on hive_core.mqtt's codec. Import it as ``from e2e.rawclient import RawClient`` (``tests/`` is
on sys.path through tests/conftest.py)::

    client = RawClient(hive.port)
    connack = client.connect(5, client_id="c1", RECEIVE_MAXIMUM=2)
    client.send(mqtt.Subscribe(1, [mqtt.SubscriptionRequest("t", qos=1)]))
    client.expect(mqtt.SubAck)
    publish = client.expect(mqtt.Publish, timeout=5)
    client.acknowledge(publish)  # PUBACK, or PUBREC, PUBREL, PUBCOMP

    with subscriber_and_publisher(hive.port, "t/#", 1, "c2") as (sub, pub):
        pub.publish_acknowledged("t/1", b"x", 1)  # sends PUBLISH, waits for the PUBACK

Property keyword arguments are PropertyId names. Every wait has a deadline; nothing retries.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from hive_core import mqtt

__all__ = ["ConnectionClosed", "RawClient", "offline_subscriber", "persistent_subscriber",
           "subscriber_and_publisher"]

T = TypeVar("T")


class ConnectionClosed(AssertionError):
    """The broker closed the connection while a packet was expected."""


class RawClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.timeout = timeout
        self.version = 4
        self.decoder = mqtt.PacketDecoder(protocol_version=4, server=False)
        self.received: list[mqtt.Packet] = []  # decoded but not yet returned
        self.closed = False
        self._next_id = 0

    # ------------------------------------------------------------------ sending

    def connect(self, version: int = 5, client_id: str = "", clean_start: bool = True,
                keep_alive: int = 60, will: mqtt.Will | None = None, username: str | None = None,
                password: bytes | None = None, timeout: float | None = None,
                **props: Any) -> mqtt.ConnAck:
        """Send CONNECT and return the CONNACK; ``props`` are PropertyId names (MQTT 5)."""
        self.version = version
        self.decoder = mqtt.PacketDecoder(protocol_version=version, server=False)
        properties = {mqtt.PropertyId[name]: value for name, value in props.items()}
        self.send(mqtt.Connect(client_id, version, clean_start, keep_alive, username, password,
                               will, properties))
        return self.expect(mqtt.ConnAck, timeout)

    def send(self, packet: mqtt.Packet) -> None:
        self.send_raw(mqtt.encode_packet(packet, self.version))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def packet_id(self) -> int:
        self._next_id = self._next_id % 65535 + 1
        return self._next_id

    def subscribe(self, topic_filter: str, qos: int = 0, **props: Any) -> mqtt.SubAck:
        """SUBSCRIBE to one filter and return the SUBACK."""
        properties = {mqtt.PropertyId[name]: value for name, value in props.items()}
        request = mqtt.SubscriptionRequest(topic_filter, qos)
        self.send(mqtt.Subscribe(self.packet_id(), [request], properties))
        return self.expect(mqtt.SubAck)

    def publish(self, topic: str, payload: bytes = b"", qos: int = 0, retain: bool = False,
                packet_id: int | None = None, **props: Any) -> int | None:
        """Send a PUBLISH (acks are the caller's business); return its packet id."""
        if qos and packet_id is None:
            packet_id = self.packet_id()
        properties = {mqtt.PropertyId[name]: value for name, value in props.items()}
        self.send(mqtt.Publish(topic, payload, qos, retain, False, packet_id, properties))
        return packet_id

    def publish_acknowledged(self, topic: str, payload: bytes = b"", qos: int = 1,
                             retain: bool = False, packet_id: int | None = None,
                             **props: Any) -> mqtt.PubAck | mqtt.PubRec | None:
        """Send a PUBLISH and finish the publisher's side of its QoS flow: wait for the PUBACK
        (QoS 1), or the PUBREC, send the PUBREL and wait for the PUBCOMP (QoS 2). Return the
        PUBACK or the PUBREC (None at QoS 0, which has no flow)."""
        packet_id = self.publish(topic, payload, qos, retain, packet_id, **props)
        if qos == 1:
            return self.expect(mqtt.PubAck)
        if qos == 2:
            assert packet_id is not None  # publish() gives one at QoS 1 and 2
            received = self.expect(mqtt.PubRec)
            self.send(mqtt.PubRel(packet_id))
            assert self.expect(mqtt.PubComp).packet_id == packet_id
            return received
        return None

    def acknowledge(self, delivery: mqtt.Publish) -> None:
        """Finish the receiver's side of ``delivery``'s QoS flow: PUBACK (QoS 1), or PUBREC,
        the node's PUBREL for the same packet id, PUBCOMP (QoS 2); nothing at QoS 0."""
        if delivery.qos == 0:
            return
        packet_id = delivery.packet_id
        assert packet_id is not None, delivery
        if delivery.qos == 1:
            self.send(mqtt.PubAck(packet_id))
        else:
            self.send(mqtt.PubRec(packet_id))
            assert self.expect(mqtt.PubRel).packet_id == packet_id
            self.send(mqtt.PubComp(packet_id))

    def disconnect(self, reason_code: int = 0, **props: Any) -> None:
        properties = {mqtt.PropertyId[name]: value for name, value in props.items()}
        self.send(mqtt.Disconnect(reason_code, properties))
        self.close()

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    # ------------------------------------------------------------------ receiving

    def receive(self, timeout: float | None = None) -> mqtt.Packet | None:
        """The next packet, or None if none arrives in time; ConnectionClosed at end of stream."""
        if self.received:
            return self.received.pop(0)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.received:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return None
            except ConnectionError as exc:
                raise ConnectionClosed(f"connection reset: {exc}") from exc
            if not data:
                raise ConnectionClosed("the broker closed the connection")
            self.received.extend(self.decoder.feed(data))
        return self.received.pop(0)

    def expect(self, kind: type[T], timeout: float | None = None) -> T:
        """The next packet, which must be of type ``kind``."""
        packet = self.receive(timeout)
        if packet is None:
            raise AssertionError(f"no {kind.__name__} within {timeout or self.timeout} s")
        if not isinstance(packet, kind):
            raise AssertionError(f"expected {kind.__name__}, got {packet!r}")
        return packet

    def expect_nothing(self, timeout: float = 0.5) -> None:
        """No packet arrives within ``timeout`` seconds."""
        packet = self.receive(timeout)
        assert packet is None, f"unexpected {packet!r}"

    def expect_closed(self, timeout: float | None = None) -> list[mqtt.Packet]:
        """The broker closes the connection in time; return the packets it sent before."""
        seen: list[mqtt.Packet] = []
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"connection still open; received {seen!r}")
            try:
                packet = self.receive(left)
            except ConnectionClosed:
                return seen
            if packet is not None:
                seen.append(packet)

    def expect_disconnect(self, reason_code: int,
                          timeout: float | None = None) -> mqtt.Disconnect:
        """A DISCONNECT with ``reason_code`` (other packets before it are skipped), then close."""
        seen = self.expect_closed(timeout)
        disconnects = [p for p in seen if isinstance(p, mqtt.Disconnect)]
        assert disconnects, f"closed without DISCONNECT; received {seen!r}"
        assert disconnects[-1].reason_code == reason_code, disconnects[-1]
        return disconnects[-1]

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def subscriber_and_publisher(port: int, topic_filter: str, qos: int, name: str, version: int = 5,
                             **props: Any) -> Iterator[tuple[RawClient, RawClient]]:
    """Two clients of ``version``: ``<name>-sub``, connected with ``props`` (PropertyId names)
    and granted ``qos`` on ``topic_filter``, and ``<name>-pub``; both closed at the end."""
    with RawClient(port) as sub, RawClient(port) as pub:
        sub.connect(version, f"{name}-sub", **props)
        assert sub.subscribe(topic_filter, qos).reason_codes == [qos]
        pub.connect(version, f"{name}-pub")
        yield sub, pub


def persistent_subscriber(port: int, client_id: str, topic_filter: str, qos: int = 1,
                          version: int = 5, **props: Any) -> RawClient:
    """A client whose session outlives its connection (MQTT 5: a session expiry of 300 s;
    earlier versions: clean session off), subscribed to ``topic_filter`` at ``qos`` and still
    connected; ``props`` are PropertyId names for the CONNECT."""
    if version == 5:
        props.setdefault("SESSION_EXPIRY_INTERVAL", 300)
    sub = RawClient(port)
    sub.connect(version, client_id, clean_start=False, **props)
    sub.subscribe(topic_filter, qos)
    return sub


def offline_subscriber(port: int, client_id: str, topic_filter: str, qos: int = 1,
                       version: int = 5, **props: Any) -> None:
    """A persistent_subscriber, disconnected."""
    persistent_subscriber(port, client_id, topic_filter, qos, version, **props).disconnect()
