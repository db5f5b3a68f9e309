"""The table of docs/extensions.md ("Saying no"): what a refusal looks like to MQTT 5 and to MQTT
3.1.1 clients. Uses the SDK's own ``mqtt_client`` fixture, as an extension author would."""

from __future__ import annotations

from typing import Any

import pytest
from e2e.rawclient import RawClient

from hive_core.mqtt import PropertyId, PubAck
from hive_ext_api import AuthDecision, ConnectInfo, ReasonCode, hookimpl

pytestmark = pytest.mark.timeout(60)


class Gate:
    """Refuses by topic: secret/ with False, quota/ with 0x97, vague/ with 0x80, low/ with 0x10;
    logs in by user name: the name is the reason code to refuse with ("ok" is let in)."""

    @hookimpl
    def hive_authorize_publish(self, topic: str) -> bool | int | None:
        for prefix, answer in (("secret/", False), ("quota/", ReasonCode.QUOTA_EXCEEDED),
                               ("vague/", ReasonCode.UNSPECIFIED_ERROR),
                               ("low/", ReasonCode.NO_MATCHING_SUBSCRIBERS)):
            if topic.startswith(prefix):
                return answer
        return None

    @hookimpl
    def hive_authenticate(self, connect: ConnectInfo) -> AuthDecision | None:
        if connect.username == "ok":
            return AuthDecision.accept()
        if connect.username == "tenant":
            return AuthDecision(True, 0, user_properties=[("tenant", "blue")])
        return AuthDecision.refuse(int(connect.username or "0x87", 16))


@pytest.fixture
def hive_extensions() -> list[Any]:
    return [Gate()]


@pytest.mark.parametrize(("topic", "code"), [
    ("secret/x", 0x87), ("quota/x", 0x97), ("vague/x", 0x80), ("low/x", 0x10)])
def test_a_v5_publisher_gets_the_code(hive_node: Any, mqtt_client: Any, topic: str,
                                      code: int) -> None:
    listener = mqtt_client(hive_node)
    listener.connect("ok")
    listener.subscribe("#")
    publisher = mqtt_client(hive_node)
    publisher.connect("ok")
    if code < 0x80:  # a success code allows: the message is delivered
        assert publisher.publish(topic, b"m", qos=1).value in (0x00, 0x10)
        assert listener.receive().topic == topic
        return
    assert publisher.publish(topic, b"m", qos=1).value == code
    assert listener.nothing_received()


def test_a_v311_publisher_gets_a_plain_puback_and_the_message_goes_nowhere(
        hive_node: Any, mqtt_client: Any) -> None:
    listener = mqtt_client(hive_node)
    listener.connect("ok")
    listener.subscribe("#")
    with RawClient(hive_node.port) as publisher:
        publisher.connect(4, "old-timer", username="ok")
        pid = publisher.publish("quota/x", b"m", qos=1)
        ack = publisher.expect(PubAck)
        assert ack.packet_id == pid and ack.reason_code == 0
        publisher.expect_nothing(0.3)  # and the connection stays open
        publisher.publish("open/x", b"n", qos=1)
        assert publisher.expect(PubAck).reason_code == 0
    assert listener.receive().topic == "open/x"
    assert listener.nothing_received()


@pytest.mark.parametrize(("code", "v311"), [
    (0x86, 4), (0x85, 2), (0x88, 3), (0x89, 3), (0x97, 3), (0x87, 5), (0x8A, 5), (0x80, 5)])
def test_a_refused_connect_per_protocol(hive_node: Any, code: int, v311: int) -> None:
    with RawClient(hive_node.port) as v5:
        assert v5.connect(5, "c5", username=f"{code:#04x}").reason_code == code
    with RawClient(hive_node.port) as old:
        assert old.connect(4, "c4", username=f"{code:#04x}").reason_code == v311


def test_the_user_properties_of_an_accepting_decision_reach_a_v5_client(hive_node: Any) -> None:
    with RawClient(hive_node.port) as client:
        connack = client.connect(5, "with-props", username="tenant")
        assert connack.reason_code == 0
        assert ("tenant", "blue") in connack.properties[PropertyId.USER_PROPERTY]
    with RawClient(hive_node.port) as old:
        assert old.connect(4, "old-props", username="tenant").reason_code == 0
