"""The users file, the node fixture's extension, and a paho client that waits for answers."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

import hive_ext_file_auth
from hive_ext_file_auth._hash_cli import entry

TIMEOUT = 10.0


class TestClient:
    """One paho client on the node: ``connect``, ``subscribe``, ``publish`` wait for the ack."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, host: str, port: int, client_id: str = "",
                 protocol: int = mqtt.MQTTv5) -> None:
        self.host, self.port = host, port
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                  client_id=client_id or f"test-{uuid.uuid4().hex[:8]}",
                                  protocol=protocol)
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._connack: queue.Queue[ReasonCode] = queue.Queue()
        self._acks: dict[int, Any] = {}
        self._acked = threading.Condition()
        self.client.on_connect = lambda _c, _u, _f, code, _p: self._connack.put(code)
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self.client.on_subscribe = lambda _c, _u, mid, codes, _p: self._ack(mid, codes)
        self.client.on_publish = lambda _c, _u, mid, code, _p: self._ack(mid, code)

    def _ack(self, mid: int, answer: Any) -> None:
        with self._acked:
            self._acks[mid] = answer
            self._acked.notify_all()

    def _wait_ack(self, mid: int) -> Any:
        with self._acked:
            if not self._acked.wait_for(lambda: mid in self._acks, TIMEOUT):
                raise TimeoutError(f"no acknowledgement for message id {mid}")
            return self._acks.pop(mid)

    def connect(self, username: str | None = None, password: str | None = None) -> ReasonCode:
        """Connect and return the CONNACK's reason code (``code.is_failure`` when refused)."""
        if username is not None:
            self.client.username_pw_set(username, password)
        self.client.connect(self.host, self.port, keepalive=30)
        self.client.loop_start()
        return self._connack.get(timeout=TIMEOUT)

    def subscribe(self, topic_filter: str, qos: int = 1) -> ReasonCode:
        _, mid = self.client.subscribe(topic_filter, qos)
        codes = self._wait_ack(mid)
        return codes[0]

    def publish(self, topic: str, payload: bytes | str, qos: int = 1,
                properties: Properties | None = None) -> ReasonCode | None:
        """Publish; for QoS 1 and 2 return the PUBACK / PUBREC reason code."""
        info = self.client.publish(topic, payload, qos=qos, properties=properties)
        if qos == 0:
            info.wait_for_publish(TIMEOUT)
            return None
        return self._wait_ack(info.mid)  # type: ignore[no-any-return]

    def receive(self, timeout: float = TIMEOUT) -> mqtt.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def nothing_received(self, wait: float = 0.5) -> bool:
        try:
            self.messages.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        if self.client.is_connected():
            self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def mqtt_client() -> Iterator[Callable[..., TestClient]]:
    """``mqtt_client(node, client_id="", protocol=MQTTv5)``: a client, closed after the test."""
    clients: list[TestClient] = []

    def make(node: Any, client_id: str = "", protocol: int = mqtt.MQTTv5) -> TestClient:
        client = TestClient(node.host, node.port, client_id, protocol)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


# ---------------------------------------------------------------------------- this example

PASSWORDS = {"sensor-1": "s3cret-1", "dashboard": "d4sh"}


@pytest.fixture
def passwords() -> dict[str, str]:
    return dict(PASSWORDS)


@pytest.fixture
def users_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A users file with a sensor and a dashboard, named by HIVE_FILE_AUTH_USERS."""
    path = tmp_path / "users.toml"
    path.write_text(
        entry("sensor-1", PASSWORDS["sensor-1"], ["sensors/{username}/#"],
              ["commands/{client_id}/#"])
        + entry("dashboard", PASSWORDS["dashboard"], [], ["sensors/#"]))
    monkeypatch.setenv(hive_ext_file_auth.USERS_ENV, str(path))
    return path


@pytest.fixture
def hive_extensions(users_file: Any) -> list[Any]:
    return [hive_ext_file_auth]
