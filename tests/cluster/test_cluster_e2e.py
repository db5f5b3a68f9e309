"""A cluster as an operator runs it: real `hive run` nodes on loopback, static discovery.

Membership (any start order, kill -9, a frozen node, restart), routing only to interested
nodes (shown with the REST metrics), retained messages, client id takeover, per-publisher
order for QoS 1 and 2, and shared subscriptions spanning the cluster.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections import Counter

import pytest
from e2e._session_helpers import PahoClient, mosquitto_pub, props
from paho.mqtt.client import MQTTMessage
from paho.mqtt.packettypes import PacketTypes

from cluster._nodes import (
    HEARTBEAT,
    MosquittoSub,
    cluster_nodes,
    metrics,
    node_id,
    remote_filters,
    start_cluster,
    wait_for,
    wait_for_members,
    wait_for_route,
)

pytestmark = pytest.mark.timeout(30)

TIMEOUT = HEARTBEAT[1] / 1000


def client(node, name: str = "", **kwargs) -> PahoClient:  # type: ignore[no-untyped-def]
    return PahoClient(node.port, name or f"c-{uuid.uuid4().hex[:8]}", **kwargs).connect()


def first_message(node, topic_filter: str) -> MQTTMessage:  # type: ignore[no-untyped-def]
    """What a new subscription to ``topic_filter`` on ``node`` gets first (the client closed)."""
    subscriber = client(node)
    try:
        subscriber.subscribe(topic_filter, qos=1)
        return subscriber.next_message()
    finally:
        subscriber.close()


def ids_seen(node) -> set[str]:  # type: ignore[no-untyped-def]
    return {m["id"] for m in cluster_nodes(node)}


def test_three_nodes_started_in_any_order_form_one_cluster(hive_factory):
    nodes = start_cluster(hive_factory, 3, order=[2, 0, 1])
    wait_for_members(nodes, 3)
    everyone = {node_id(n) for n in nodes}
    for node in nodes:
        assert ids_seen(node) == everyone
        node.wait_for_log(r"Cluster size = 3, members")


def test_publish_on_one_node_reaches_paho_and_mosquitto_subscribers_on_the_others(
        hive_factory):
    a, b, c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    paho = client(b)
    mosquitto = None
    try:
        paho.subscribe("plant/+/temperature", qos=1)
        mosquitto = MosquittoSub(c.port, "plant/#", qos=1, count=3)
        wait_for_route(a, b, "plant/+/temperature")
        wait_for_route(a, c, "plant/#")
        for value in ("20.5", "21.0", "21.5"):
            mosquitto_pub(a.port, "plant/hall-1/temperature", value, qos=1)
        assert [paho.next_message().payload for _ in range(3)] == [b"20.5", b"21.0", b"21.5"]
        mosquitto.proc.wait(5)
        assert mosquitto.messages() == [f"plant/hall-1/temperature {v}"
                                        for v in ("20.5", "21.0", "21.5")]
    finally:
        paho.close()
        if mosquitto is not None:
            mosquitto.close()


def test_a_node_without_interested_subscribers_receives_no_publish(hive_factory):
    a, b, c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    interested, elsewhere = client(b), client(c)
    try:
        interested.subscribe("orders/#", qos=1)
        elsewhere.subscribe("invoices/#", qos=1)
        wait_for_route(a, b, "orders/#")
        wait_for_route(a, c, "invoices/#")
        publisher = client(a)
        for n in range(20):
            publisher.publish(f"orders/{n}", str(n), qos=1)
        publisher.close()
        assert [interested.next_message().payload for _ in range(20)] == \
            [str(n).encode() for n in range(20)]
        elsewhere.no_message(0.3)
        assert metrics(a)["cluster"]["publishes_forwarded"] == 20
        assert metrics(b)["cluster"]["publishes_received"] == 20
        assert metrics(b)["cluster"]["frames_in"]["PUBLISH"] == 20
        uninterested = metrics(c)["cluster"]
        assert uninterested["publishes_received"] == 0
        assert "PUBLISH" not in uninterested["frames_in"]
        assert "SHARED_PUBLISH" not in uninterested["frames_in"]
    finally:
        interested.close()
        elsewhere.close()


def test_kill_9_is_noticed_within_the_heartbeat_timeout_and_the_node_rejoins(hive_factory):
    a, b, c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    lost = node_id(c)
    c.kill()
    killed = time.monotonic()
    for node in (a, b):
        wait_for(lambda n=node: lost not in ids_seen(n), TIMEOUT + 1.0,
                 f"{node.folder.name} drops the killed node")
    assert time.monotonic() - killed < TIMEOUT + 1.0
    a.wait_for_log(rf"Cluster node {lost} left the cluster")
    c.start()  # same data folder: same node id
    wait_for_members(nodes, 3)
    assert lost in ids_seen(a) and lost in ids_seen(b)
    # The rejoined node is routed to again.
    subscriber = client(c)
    try:
        subscriber.subscribe("after/rejoin", qos=1)
        wait_for_route(a, c, "after/rejoin")
        mosquitto_pub(a.port, "after/rejoin", "back", qos=1)
        assert subscriber.next_message().payload == b"back"
    finally:
        subscriber.close()


def test_a_frozen_node_is_dropped_by_heartbeat_and_comes_back_when_it_thaws(hive_factory):
    a, b, c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    frozen = node_id(c)
    os.kill(c.pid, signal.SIGSTOP)  # its sockets stay open: only the heartbeat can tell
    try:
        stopped = time.monotonic()
        for node in (a, b):
            wait_for(lambda n=node: frozen not in ids_seen(n), TIMEOUT + 2 * HEARTBEAT[0] / 1000
                     + 1.0, f"{node.folder.name} drops the frozen node")
        assert time.monotonic() - stopped >= TIMEOUT * 0.9
        # The heartbeat found it out; a node may learn it first from the one that took the
        # frozen node's sessions over ("left the cluster: node X took its sessions over").
        noticed = rf"Cluster node {frozen} left the cluster: no heartbeat"
        wait_for(lambda: any(re.search(noticed, n.log) for n in (a, b)), 5,
                 "a node to notice the missing heartbeat")
    finally:
        os.kill(c.pid, signal.SIGCONT)
    # Static discovery looks again every 5 s: the thawed node is taken back.
    wait_for_members(nodes, 3, timeout=15.0)


def test_retained_messages_published_on_one_node_are_seen_from_any_other(hive_factory):
    a, b, c = start_cluster(hive_factory, 3, order=[0, 1])
    wait_for_members([a, b], 2)
    mosquitto_pub(a.port, "site/config", "v1", qos=1, retain=True)
    wait_for(lambda: metrics(b)["broker"]["retained_messages"] == 1, 5, "b holds it")
    message = first_message(b, "site/#")
    assert (message.topic, message.payload, message.retain) == ("site/config", b"v1", True)
    c.start()  # joins later: gets what the cluster retains
    wait_for_members([a, b, c], 3)
    message = first_message(c, "site/+")
    assert (message.topic, message.payload, message.retain) == ("site/config", b"v1", True)
    mosquitto_pub(c.port, "site/config", "", qos=1, retain=True)  # cleared from any node
    for node in (a, b, c):
        wait_for(lambda n=node: metrics(n)["broker"]["retained_messages"] == 0, 5,
                 f"{node.folder.name} cleared it")


def test_connecting_with_a_client_id_on_b_takes_the_session_over_from_a(hive_factory):
    a, b, _c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    old = client(a, "sensor-17")
    new = None
    try:
        new = client(b, "sensor-17")
        assert old.wait_disconnected() == 0x8E  # Session taken over
        time.sleep(0.3)
        assert new.client.is_connected() and not new.disconnected.is_set()
        assert metrics(a)["broker"]["connections_current"] == 0
        assert metrics(b)["broker"]["connections_current"] == 1
        # And back again, with MQTT 3.1.1: the node just left closes its connection.
        again = client(a, "sensor-17", version=4)
        try:
            new.wait_disconnected()
            assert again.client.is_connected()
        finally:
            again.close()
    finally:
        old.close()
        if new is not None:
            new.close()


@pytest.mark.parametrize("qos", [1, 2])
def test_messages_keep_their_order_per_publisher_and_topic_across_nodes(hive_factory, qos):
    a, b, c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    subscribers = [client(b), client(c)]
    publishers = [PahoClient(node.port, f"pub-{node.folder.name}") for node in (a, c)]
    for publisher in publishers:  # paho ignores the server's receive maximum (10)
        publisher.client.max_inflight_messages_set(10)
        publisher.connect()
    try:
        for subscriber in subscribers:
            subscriber.subscribe("stream/#", qos=qos)
        wait_for_route(a, b, "stream/#")
        wait_for_route(a, c, "stream/#")
        wait_for_route(c, b, "stream/#")
        count = 150
        infos = [(p.client.publish(f"stream/{topic}", f"{who}:{n}", qos))
                 for n in range(count) for who, p in enumerate(publishers)
                 for topic in ("x", "y")]
        for info in infos:
            info.wait_for_publish(10)
        for subscriber in subscribers:
            got: dict[tuple[str, str], list[int]] = {}
            for _ in range(count * 4):
                message = subscriber.next_message()
                who, n = message.payload.decode().split(":")
                got.setdefault((who, message.topic), []).append(int(n))
            assert len(got) == 4
            for sequence in got.values():
                assert sequence == list(range(count))
    finally:
        for paho in subscribers + publishers:
            paho.close()


def test_a_shared_subscription_spans_the_cluster_each_message_to_one_member(hive_factory):
    a, b, c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    members = [client(a), client(b), client(c), client(c)]
    shared = "$share/workers/jobs/#"
    try:
        for member in members:
            member.subscribe(shared, qos=1)
        for publisher_node in (a, b):
            for other in nodes:
                if other is not publisher_node:
                    wait_for_route(publisher_node, other, shared)
        for node in (a, b):
            publisher = client(node)
            for n in range(30):
                publisher.publish(f"jobs/{node.folder.name}", f"{node.folder.name}-{n}", qos=1)
            publisher.close()
        time.sleep(0.5)
        got = [[m.payload.decode() for m in drain(member)] for member in members]
        everything = Counter(p for payloads in got for p in payloads)
        assert set(everything) == {f"{n.folder.name}-{i}" for n in (a, b) for i in range(30)}
        assert max(everything.values()) == 1, "a message went to two members"
        assert all(payloads for payloads in got), [len(p) for p in got]
    finally:
        for member in members:
            member.close()


def drain(paho: PahoClient) -> list:  # type: ignore[type-arg]
    out = []
    while not paho.messages.empty():
        out.append(paho.messages.get())
    return out


def leave_a_session(node, client_id: str,  # type: ignore[no-untyped-def]
                    topic_filter: str) -> None:
    """A persistent session (expiry 300 s) on ``node``, subscribed to ``topic_filter``, its
    client gone."""
    first = client(node, client_id, clean=False, expiry=300)
    first.subscribe(topic_filter, qos=1)
    first.disconnect()


def test_a_persistent_session_made_on_a_is_resumed_on_b(hive_factory):
    a, b, _c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    leave_a_session(a, "meter-9", "meter/9/cmd")
    wait_for_route(b, a, "meter/9/cmd")
    mosquitto_pub(b.port, "meter/9/cmd", "reboot", qos=1)  # queued on A for the offline session
    resumed = client(b, "meter-9", clean=False, expiry=300)
    try:
        assert resumed.session_present is True
        assert resumed.next_message(2).payload == b"reboot"
        # The session moved: B holds the subscription now, A forgot it.
        wait_for_route(a, b, "meter/9/cmd")
        mosquitto_pub(a.port, "meter/9/cmd", "again", qos=1)
        assert resumed.next_message(2).payload == b"again"
    finally:
        resumed.close()


def test_a_clean_start_on_b_discards_the_session_held_on_a(hive_factory):
    a, b, _c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    leave_a_session(a, "meter-10", "meter/10/cmd")
    fresh = client(b, "meter-10", clean=True)
    try:
        assert fresh.session_present is False
        wait_for(lambda: "meter/10/cmd" not in remote_filters(b).get(node_id(a), []), 5,
                 "A to drop the old session's subscription")
    finally:
        fresh.close()


def test_a_delayed_will_is_dropped_when_the_client_resumes_on_another_node(hive_factory):
    a, b, c = nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    watcher = client(c, "watcher")
    watcher.subscribe("wills/#", qos=1)
    wait_for_route(a, c, "wills/#")
    first = PahoClient(a.port, "meter-11", clean=False, expiry=300,
                       will=("wills/meter-11", b"gone", 1, False),
                       will_props=props(PacketTypes.WILLMESSAGE, WillDelayInterval=3)).connect()
    first.disconnect(reason=0x04)  # "disconnect with will": the will waits out its delay
    resumed = client(b, "meter-11", clean=False, expiry=300)
    try:
        assert resumed.session_present is True
        # The will's delay passes: the client came back, so no will may appear anywhere.
        time.sleep(4)
        assert watcher.messages.empty()
    finally:
        resumed.close()
        watcher.close()
