"""topic-rewrite on a real node: subscribers see the rewritten topic and the stamped message."""

from __future__ import annotations

import json
import time
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

import hive_ext_topic_rewrite
from hive_ext_topic_rewrite import parse_rules, rewrite_topic, wrap_json


def _user_properties(message: mqtt.MQTTMessage) -> dict[str, str]:
    return dict(getattr(message.properties, "UserProperty", []) or [])


def test_legacy_topic_is_moved_and_json_is_wrapped(hive_node: Any, mqtt_client: Any) -> None:
    subscriber = mqtt_client(hive_node)
    subscriber.connect()
    subscriber.subscribe("sensors/#")
    publisher = mqtt_client(hive_node)
    publisher.connect()

    before = time.time_ns() // 1_000_000
    reading = {"device_id": "device-123", "temperature": 25.5}
    publisher.publish("legacy/device-123/temperature", json.dumps(reading))

    message = subscriber.receive()
    assert message.topic == "sensors/device-123/temperature"
    envelope = json.loads(message.payload)
    assert envelope["payload"] == reading
    assert envelope["received_by"] == "hive-test-node"
    assert before <= envelope["timestamp"] <= time.time_ns() // 1_000_000
    properties = _user_properties(message)
    assert properties["received-by"] == "hive-test-node"
    assert properties["received-at"].endswith("+00:00")
    assert message.properties.ContentType == "application/json"


def test_other_topics_and_plain_payloads_keep_their_shape(hive_node: Any,
                                                          mqtt_client: Any) -> None:
    subscriber = mqtt_client(hive_node)
    subscriber.connect()
    subscriber.subscribe("#")
    publisher = mqtt_client(hive_node)
    publisher.connect()
    properties = Properties(PacketTypes.PUBLISH)
    properties.UserProperty = ("unit", "celsius")

    publisher.publish("sensors/device-7/temperature", b"21.5", properties=properties)

    message = subscriber.receive()
    assert (message.topic, message.payload) == ("sensors/device-7/temperature", b"21.5")
    assert _user_properties(message) == {"unit": "celsius", "received-by": "hive-test-node",
                                         "received-at": _user_properties(message)["received-at"]}
    assert subscriber.nothing_received()


def test_mqtt3_subscriber_sees_the_envelope(hive_node: Any, mqtt_client: Any) -> None:
    subscriber = mqtt_client(hive_node, protocol=mqtt.MQTTv311)
    subscriber.connect()
    subscriber.subscribe("sensors/+/temperature")
    publisher = mqtt_client(hive_node, protocol=mqtt.MQTTv311)
    publisher.connect()

    publisher.publish("legacy/device-9/temperature", b'{"temperature": 19.0}', qos=0)

    message = subscriber.receive()
    assert message.topic == "sensors/device-9/temperature"
    assert json.loads(message.payload)["payload"] == {"temperature": 19.0}


def test_rules_from_the_environment(hive_node_factory: Any, mqtt_client: Any,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hive_ext_topic_rewrite.RULES_ENV, "site/=plant-1/site/, site/test/=lab/")
    monkeypatch.setenv(hive_ext_topic_rewrite.WRAP_JSON_ENV, "0")
    node = hive_node_factory(extensions=[hive_ext_topic_rewrite])
    subscriber = mqtt_client(node)
    subscriber.connect()
    subscriber.subscribe("#")
    publisher = mqtt_client(node)
    publisher.connect()

    publisher.publish("site/line-2/pressure", b'{"bar": 1.2}')
    publisher.publish("site/test/pressure", b"0.9")

    first, second = subscriber.receive(), subscriber.receive()
    assert (first.topic, first.payload) == ("plant-1/site/line-2/pressure", b'{"bar": 1.2}')
    assert (second.topic, second.payload) == ("lab/pressure", b"0.9")


def test_bad_rules_refuse_to_start(hive_node_factory: Any,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hive_ext_topic_rewrite.RULES_ENV, "sensors/+/=x/")
    node = hive_node_factory(extensions=[hive_ext_topic_rewrite])
    records = [r for r in node.extensions.manager.records
               if r.module is hive_ext_topic_rewrite
               or r.name in ("topic-rewrite", hive_ext_topic_rewrite.__name__)]
    assert len(records) == 1 and not records[0].active
    assert "without wildcards" in records[0].reason


@pytest.mark.parametrize(("topic", "expected"), [
    ("legacy/a/b", "sensors/a/b"),
    ("legacy", None),
    ("sensors/a", None),
])
def test_default_rule(topic: str, expected: str | None) -> None:
    assert rewrite_topic(topic, hive_ext_topic_rewrite.DEFAULT_RULES) == expected


def test_longest_prefix_wins_and_bad_rules_are_named() -> None:
    rules = parse_rules("a/=x/, a/b/=y/")
    assert rewrite_topic("a/b/c", rules) == "y/c"
    assert rewrite_topic("a/c", rules) == "x/c"
    with pytest.raises(ValueError, match="from-prefix=to-prefix"):
        parse_rules("a/")
    with pytest.raises(ValueError, match="wildcards"):
        parse_rules("a/#=b/")


def test_only_json_is_wrapped() -> None:
    assert wrap_json(b"21.5", 1, "n") is None
    assert wrap_json(b"{not json", 1, "n") is None
    assert wrap_json(b"\xff{", 1, "n") is None
    assert json.loads(wrap_json(b' [1, 2]', 5, "n") or b"") == {
        "timestamp": 5, "received_by": "n", "payload": [1, 2]}


def test_installed_under_the_extensions_entry_point() -> None:
    from importlib.metadata import entry_points

    (entry_point,) = entry_points(group="hive.extensions", name="topic-rewrite")
    assert entry_point.load() is hive_ext_topic_rewrite
