"""A real MQTT client for extension authors' tests: paho-mqtt whose calls wait for the answers.

    client = mqtt_client(hive_node)                 # the pytest fixture makes one
    assert not client.connect("user", "pw").is_failure
    client.subscribe("t/#")                          # returns the SUBACK's reason code
    client.publish("t/1", b"x", qos=1)               # returns the PUBACK's reason code
    message = client.receive()                       # a paho MQTTMessage, or TimeoutError

Every wait has a deadline (``timeout``, 10 s by default); a client is closed at the end of the
test that made it.
"""

from __future__ import annotations

import queue
import threading
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt
    from paho.mqtt.properties import Properties
    from paho.mqtt.reasoncodes import ReasonCode

__all__ = ["MQTTV5", "MQTTV311", "MqttTestClient"]

MQTTV311, MQTTV5 = 4, 5  # paho's protocol numbers
TIMEOUT = 10.0


def _paho() -> Any:
    try:
        import paho.mqtt.client as mqtt
    except ImportError:
        raise ImportError("the mqtt_client fixture of hive-broker needs paho-mqtt 2: pip install "
                          "'paho-mqtt>=2'") from None
    return mqtt


class MqttTestClient:
    """One paho client on a node: ``connect``, ``subscribe`` and ``publish`` wait for the ack.

    ``node`` is anything with ``host`` and ``port`` (the ``hive_node`` fixture's node).
    ``protocol`` is ``MQTTV5`` (5) or ``MQTTV311`` (4). ``client`` is the paho client itself,
    for what this class does not wrap (a will, properties on CONNECT, ...).
    """

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, node: Any, client_id: str = "", protocol: int = MQTTV5,
                 timeout: float = TIMEOUT) -> None:
        paho = _paho()
        self.host, self.port = str(node.host), int(node.port)
        self.timeout = timeout
        self.client: mqtt.Client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=client_id or f"test-{uuid.uuid4().hex[:8]}", protocol=protocol)
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
            if not self._acked.wait_for(lambda: mid in self._acks, self.timeout):
                raise TimeoutError(f"no acknowledgement for message id {mid} within "
                                   f"{self.timeout} s")
            return self._acks.pop(mid)

    def connect(self, username: str | None = None, password: str | None = None,
                keepalive: int = 30) -> ReasonCode:
        """Connect and return the CONNACK's reason code (``code.is_failure`` when refused).

        An MQTT 3.1.1 client's CONNACK return code comes back as the matching reason code too.
        """
        if username is not None:
            self.client.username_pw_set(username, password)
        self.client.connect(self.host, self.port, keepalive=keepalive)
        self.client.loop_start()
        try:
            return self._connack.get(timeout=self.timeout)
        except queue.Empty:
            raise TimeoutError(f"no CONNACK within {self.timeout} s") from None

    def subscribe(self, topic_filter: str, qos: int = 1) -> ReasonCode:
        """Subscribe to one filter; the SUBACK's reason code for it."""
        _, mid = self.client.subscribe(topic_filter, qos)
        if mid is None:
            raise RuntimeError(f"cannot subscribe to {topic_filter!r}: not connected")
        codes = self._wait_ack(mid)
        return codes[0]

    def publish(self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False,
                properties: Properties | None = None) -> ReasonCode | None:
        """Publish; for QoS 1 and 2 the PUBACK's / PUBREC's reason code, for QoS 0 None.

        An MQTT 3.1.1 acknowledgement has no reason code: it always reads as success.
        """
        info = self.client.publish(topic, payload, qos=qos, retain=retain,
                                   properties=properties)
        if qos == 0:
            info.wait_for_publish(self.timeout)
            return None
        return self._wait_ack(info.mid)

    def receive(self, timeout: float | None = None) -> mqtt.MQTTMessage:
        """The next message delivered to this client; TimeoutError when none comes."""
        try:
            return self.messages.get(timeout=self.timeout if timeout is None else timeout)
        except queue.Empty:
            raise TimeoutError("no message received") from None

    def nothing_received(self, wait: float = 0.5) -> bool:
        """Whether no message arrives within ``wait`` seconds."""
        try:
            self.messages.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        """Disconnect (if connected) and stop the network thread."""
        if self.client.is_connected():
            self.client.disconnect()
        self.client.loop_stop()
