"""A paho client that turns callbacks into waits with deadlines, and mosquitto tool runners.

    client = PahoClient(hive.port, "c1", version=5, expiry=60).connect()
    assert client.session_present is False
    client.subscribe("t", qos=1)
    message = client.next_message()

Import it as ``from e2e._session_helpers import PahoClient`` (tests/ is on sys.path).
"""

from __future__ import annotations

import queue
import subprocess
import threading
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

__all__ = ["WAIT", "PahoClient", "mosquitto_pub", "mosquitto_sub", "props", "retained_on"]

WAIT = 5.0


def props(packet_type: int, **values: Any) -> Properties:
    """MQTT 5 properties by paho's attribute names, e.g. ``SessionExpiryInterval=60``."""
    properties = Properties(packet_type)
    for name, value in values.items():
        setattr(properties, name, value)
    return properties


class PahoClient:
    """One paho client on its own network thread; never reconnects on its own."""

    def __init__(self, port: int, client_id: str = "", version: int = 5, clean: bool = True,
                 expiry: int | None = None, keepalive: int = 60, manual_ack: bool = False,
                 will: tuple[str, bytes, int, bool] | None = None,
                 will_props: Properties | None = None, bind_address: str = "",
                 **connect_props: Any) -> None:
        self.port = port
        self.bind_address = bind_address  # the client's source address, e.g. 127.0.0.2
        self.version = version
        self.clean = clean
        self.keepalive = keepalive
        self.connect_props: dict[str, Any] = dict(connect_props)
        if expiry is not None:
            self.connect_props["SessionExpiryInterval"] = expiry
        protocol = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
        kwargs: dict[str, Any] = {}
        if version != 5:
            kwargs["clean_session"] = clean
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=protocol, reconnect_on_failure=False,
                                  manual_ack=manual_ack, **kwargs)
        if will is not None:
            topic, payload, qos, retain = will
            self.client.will_set(topic, payload, qos, retain, properties=will_props)
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.session_present: bool | None = None
        self.reason_code: int | None = None
        self.connack_props: Properties | None = None
        self.disconnect_reason: int | None = None
        self.disconnect_props: Properties | None = None
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._subacks: queue.Queue[list[int]] = queue.Queue()
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe

    # ------------------------------------------------------------------ callbacks

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        self.session_present = bool(flags.session_present)
        self.reason_code = int(reason.value)
        self.connack_props = properties
        self.connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                       properties: Any) -> None:
        self.disconnect_reason = int(reason.value)
        self.disconnect_props = properties
        self.disconnected.set()
        self.connected.set()  # a refused CONNECT ends the wait too

    def _on_message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        self.messages.put(message)

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any,
                      properties: Any) -> None:
        self._subacks.put([int(r.value) for r in reasons])

    # ------------------------------------------------------------------ actions

    def connect(self, timeout: float = WAIT, expect_success: bool = True) -> PahoClient:
        """CONNECT and wait for the CONNACK (or for the refusal)."""
        kwargs: dict[str, Any] = {}
        if self.version == 5:
            kwargs["clean_start"] = self.clean
            if self.connect_props:
                kwargs["properties"] = props(PacketTypes.CONNECT, **self.connect_props)
        self.client.connect("127.0.0.1", self.port, self.keepalive,
                            bind_address=self.bind_address, **kwargs)
        self.client.loop_start()
        assert self.connected.wait(timeout), "no CONNACK in time"
        if expect_success:
            assert self.reason_code == 0, f"CONNECT refused: 0x{self.reason_code or 0:02X}"
        return self

    def subscribe(self, topic: str, qos: int = 1, timeout: float = WAIT) -> list[int]:
        self.client.subscribe(topic, qos)
        try:
            return self._subacks.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no SUBACK for {topic!r}") from None

    def publish(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False,
                timeout: float = WAIT) -> None:
        """Publish and wait until the broker acknowledged it (QoS > 0)."""
        info = self.client.publish(topic, payload, qos, retain)
        info.wait_for_publish(timeout)
        assert info.is_published(), f"publish to {topic!r} not acknowledged"

    def next_message(self, timeout: float = WAIT) -> mqtt.MQTTMessage:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message within {timeout} s") from None

    def no_message(self, within: float) -> None:
        try:
            message = self.messages.get(timeout=within)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected message on {message.topic!r}: {message.payload!r}")

    def disconnect(self, reason: int | None = None, timeout: float = WAIT,
                   **disconnect_props: Any) -> None:
        """A normal DISCONNECT (MQTT 5: with ``reason`` and properties), then stop the loop."""
        kwargs: dict[str, Any] = {}
        if self.version == 5:
            if reason is not None:
                from paho.mqtt.reasoncodes import ReasonCode
                kwargs["reasoncode"] = ReasonCode(PacketTypes.DISCONNECT, identifier=reason)
            if disconnect_props:
                kwargs["properties"] = props(PacketTypes.DISCONNECT, **disconnect_props)
        self.client.disconnect(**kwargs)
        self.disconnected.wait(timeout)
        self.client.loop_stop()

    def wait_disconnected(self, timeout: float = WAIT) -> int | None:
        """Wait until the broker ends the connection; the DISCONNECT reason code paho saw."""
        assert self.disconnected.wait(timeout), "still connected"
        return self.disconnect_reason

    def close(self) -> None:
        """Teardown: stop the network thread whatever the state."""
        try:
            if not self.disconnected.is_set() and self.client.is_connected():
                self.client.disconnect()
                self.disconnected.wait(1.0)
        finally:
            self.client.loop_stop()


def retained_on(port: int, topic_filter: str, quiet: float = 0.5) -> dict[str, bytes]:
    """The retained messages a new subscription to ``topic_filter`` gets (topic -> payload),
    read until none comes for ``quiet`` seconds."""
    reader = PahoClient(port, "").connect()
    try:
        reader.subscribe(topic_filter, qos=1)
        found = {}
        while True:
            try:
                got = reader.next_message(timeout=quiet)
            except AssertionError:  # nothing more
                return found
            found[got.topic] = got.payload
    finally:
        reader.close()


def mosquitto_pub(port: int, topic: str, message: str, qos: int = 1, retain: bool = False,
                  version: str = "mqttv311", timeout: float = WAIT) -> None:
    """One mosquitto_pub run; it exits after the broker acknowledged the message."""
    args = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-t", topic, "-m", message,
            "-q", str(qos), "-V", version]
    if retain:
        args.append("-r")
    subprocess.run(args, check=True, timeout=timeout, capture_output=True)


def mosquitto_sub(port: int, topic: str, *extra: str, qos: int = 1, version: str = "mqttv311",
                  timeout: float = WAIT + 5) -> subprocess.CompletedProcess[str]:
    """One mosquitto_sub run with ``extra`` flags (e.g. -c -i id -C 3 -W 5); output as text."""
    args = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-t", topic, "-q", str(qos),
            "-V", version, *extra]
    return subprocess.run(args, timeout=timeout, capture_output=True, text=True)
