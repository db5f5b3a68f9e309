"""Retained messages end to end: set, replace, clear, expire, and the feature switch.

Runs against real `hive run` processes with paho-mqtt and mosquitto_sub. "Nothing else arrived" is
proven with a barrier: a later live message on the same connection, whose deliveries keep their
order.
"""

from __future__ import annotations

import queue
import subprocess
import time

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

pytestmark = pytest.mark.timeout(30)

WAIT = 5.0


def expiring(seconds: int) -> Properties:
    props = Properties(PacketTypes.PUBLISH)
    props.MessageExpiryInterval = seconds
    return props


# ---------------------------------------------------------------------------- set, replace, clear


@pytest.mark.parametrize("version", [5, 4])
def test_a_retained_message_goes_to_a_later_subscriber_with_the_retain_flag(
        hive, peers, version) -> None:
    peers(hive.port, version=version).publish("state", "on", qos=1, retain=True)
    sub = peers(hive.port, version=version)
    sub.subscribe("state", qos=1)
    got = sub.expect()
    assert [(m.topic, m.payload, m.retain, m.qos) for m in got] == [("state", b"on", True, 1)]


def test_a_retained_message_outlives_its_publisher(hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("state", "on", qos=0, retain=True)
    pub.close()
    sub = peers(hive.port)
    sub.subscribe("state")
    assert [m.payload for m in sub.expect()] == [b"on"]


def test_a_new_retained_message_replaces_the_old_one(hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("state", "first", qos=1, retain=True)
    pub.publish("state", "second", qos=1, retain=True)
    pub.publish("state", "not retained", qos=1)  # does not touch the retained one
    sub = peers(hive.port)
    sub.subscribe("state", qos=1)
    assert [m.payload for m in sub.expect()] == [b"second"]
    pub.publish("state", "live", qos=1)
    assert [m.payload for m in sub.expect()] == [b"live"]


def test_an_empty_retained_message_clears_the_topic(hive, peers) -> None:
    pub, current = peers(hive.port), peers(hive.port)
    pub.publish("state", "on", qos=1, retain=True)
    current.subscribe("state", qos=1)
    assert [m.payload for m in current.expect()] == [b"on"]
    pub.publish("state", b"", qos=1, retain=True)
    # a current subscriber sees the empty message like any other (MQTT-3.3.1-6 is about storing)
    assert [(m.payload, m.retain) for m in current.expect()] == [(b"", False)]
    later = peers(hive.port)
    later.subscribe("state", qos=1)
    pub.publish("state", "live", qos=1)
    assert [(m.payload, m.retain) for m in later.expect()] == [(b"live", False)]


def test_clearing_a_topic_without_a_retained_message_is_harmless(hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("never", b"", qos=1, retain=True)
    pub.publish("other", "kept", qos=1, retain=True)
    sub = peers(hive.port)
    sub.subscribe("#", qos=1)
    assert [(m.topic, m.payload) for m in sub.expect()] == [("other", b"kept")]
    sub.nothing_more()


def test_a_wildcard_subscription_gets_every_matching_retained_message(hive, peers) -> None:
    pub = peers(hive.port)
    for topic in ("home/hall/light", "home/hall/temp", "home/kitchen/light", "home",
                  "office/light", "$home/light"):
        pub.publish(topic, topic, qos=1, retain=True)
    sub = peers(hive.port)
    sub.subscribe("home/#", qos=1)
    got = sub.expect(4)
    assert sorted(m.topic for m in got) == [
        "home", "home/hall/light", "home/hall/temp", "home/kitchen/light"]
    assert all(m.retain for m in got)
    sub.subscribe("+/+/light", qos=1)
    assert sorted(m.topic for m in sub.expect(2)) == ["home/hall/light", "home/kitchen/light"]
    sub.subscribe("#", qos=1)  # every retained message but those under a '$' topic
    assert len(sub.expect(5)) == 5
    sub.subscribe("$home/#", qos=1)
    assert [m.topic for m in sub.expect()] == ["$home/light"]
    sub.nothing_more()


def test_a_retained_message_is_delivered_at_the_lower_of_its_qos_and_the_granted_qos(
        hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("q/two", "2", qos=2, retain=True)
    pub.publish("q/zero", "0", qos=0, retain=True)
    sub = peers(hive.port)
    sub.subscribe("q/+", qos=1)
    got = {m.topic: m.qos for m in sub.expect(2)}
    assert got == {"q/two": 1, "q/zero": 0}


def test_a_retained_message_carries_the_subscription_id(hive, peers) -> None:
    peers(hive.port).publish("state/a", "on", qos=1, retain=True)
    sub = peers(hive.port)
    sub.subscribe("state/+", qos=1, sid=9)
    assert [(m.payload, m.subscription_ids) for m in sub.expect()] == [(b"on", (9,))]


def test_mosquitto_sub_sees_the_retained_flag(hive) -> None:
    subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(hive.port), "-t", "m/state",
                    "-m", "kept", "-r", "-q", "1"], check=True, timeout=WAIT)
    out = subprocess.run(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(hive.port), "-t", "m/#", "-C", "1",
         "-W", "5", "-F", "%r %t %p"],
        capture_output=True, text=True, timeout=10, check=True,
    ).stdout
    assert out.splitlines() == ["1 m/state kept"]
    out = subprocess.run(  # and -R (--remove-retained off) style: only new messages
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(hive.port), "-t", "m/#", "-C", "1",
         "-W", "2", "-R"],
        capture_output=True, text=True, timeout=10,
    )
    assert out.stdout == ""  # -R skips messages with the retain flag, so it waits and times out


# ---------------------------------------------------------------------------- expiry


def test_an_expired_retained_message_is_not_delivered(hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("state/short", "short", qos=1, retain=True, properties=expiring(1))
    pub.publish("state/long", "long", qos=1, retain=True, properties=expiring(60))
    early = peers(hive.port)
    early.subscribe("state/+", qos=1)
    assert sorted(m.payload for m in early.expect(2)) == [b"long", b"short"]
    time.sleep(2.0)
    late = peers(hive.port)
    late.subscribe("state/+", qos=1)
    assert [m.payload for m in late.expect()] == [b"long"]
    pub.publish("state/live", "live", qos=1)
    assert [m.payload for m in late.expect()] == [b"live"]


def test_a_retained_message_tells_how_long_it_has_left(hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("state/a", "on", qos=1, retain=True, properties=expiring(60))
    time.sleep(1.2)
    sub = peers(hive.port)
    expiry: queue.Queue[int] = queue.Queue()
    sub.client.on_message = lambda c, u, msg: expiry.put(msg.properties.MessageExpiryInterval)
    sub.subscribe("state/a", qos=1)
    assert 55 <= expiry.get(timeout=WAIT) < 60


# ---------------------------------------------------------------------------- the feature switch


def test_retained_messages_disabled(hive_factory, peers) -> None:
    node = hive_factory(body="<mqtt><retained-messages><enabled>false</enabled>"
                             "</retained-messages></mqtt>")
    sub = peers(node.port)
    assert sub.connack_properties.RetainAvailable == 0
    sub.subscribe("state", qos=1)
    pub = peers(node.port)
    pub.client.publish("state", "on", qos=1, retain=True)
    assert pub.disconnects.get(timeout=WAIT) == 0x9A
    other = peers(node.port)
    other.publish("state", "plain", qos=1)
    assert [m.payload for m in sub.expect()] == [b"plain"]  # the retained one was not routed
    late = peers(node.port)
    late.subscribe("state", qos=1)
    late.nothing_more()


def test_retained_messages_survive_a_restart(hive, peers) -> None:
    peers(hive.port).publish("state", "on", qos=1, retain=True)
    hive.restart()
    sub = peers(hive.port)
    sub.subscribe("state", qos=1)
    assert [(m.payload, m.retain) for m in sub.expect()] == [(b"on", True)]
