"""Subscriptions end to end: wildcards, options, identifiers, shared groups and feature switches.

Every test runs against a real `hive run` process with real clients (paho-mqtt, mosquitto_sub, and a
raw socket where paho refuses to send what the test needs). "Nothing else arrived" is proven with a
barrier: a later message on the same connection, since one connection's deliveries keep their order.
"""

from __future__ import annotations

import queue
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import closing_all
from e2e._paho_peer import (
    Peer,
    topics,
)
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

pytestmark = pytest.mark.timeout(30)

WAIT = 5.0


# ---------------------------------------------------------------------------- a raw client


def _str(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw


def _packet(head: int, body: bytes) -> bytes:
    length, size = b"", len(body)
    while True:
        byte, size = size % 128, size // 128
        length += bytes((byte | (0x80 if size else 0),))
        if not size:
            return bytes((head,)) + length + body


class RawClient:
    """For what paho will not send: invalid filters in SUBSCRIBE, wildcards in PUBLISH."""

    def __init__(self, port: int, client_id: str, version: int = 5) -> None:
        self.v5 = version == 5
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        props = b"\x00" if self.v5 else b""
        self.sock.sendall(_packet(0x10, _str("MQTT") + bytes((version, 0x02, 0, 30)) + props
                                  + _str(client_id)))
        head, body = self.read()
        assert head == 0x20 and body[1] == 0, f"CONNACK {head:#x} {body!r}"

    def read(self) -> tuple[int, bytes]:
        """The next packet, as (first byte, body); (-1, b"") when the server closed the socket."""
        head = self._exactly(1)
        if not head:
            return -1, b""
        size, shift = 0, 0
        while True:
            byte = self._exactly(1)[0]
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        return head[0], self._exactly(size)

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            try:
                chunk = self.sock.recv(count - len(data))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return b""
            data += chunk
        return data

    def subscribe(self, *filters: str, packet_id: int = 1) -> list[int]:
        props = b"\x00" if self.v5 else b""
        body = packet_id.to_bytes(2, "big") + props + b"".join(_str(f) + b"\x00" for f in filters)
        self.sock.sendall(_packet(0x82, body))
        head, body = self.read()
        assert head == 0x90, f"expected SUBACK, got {head:#x}"
        assert int.from_bytes(body[:2], "big") == packet_id
        return list(body[3:] if self.v5 else body[2:])

    def publish(self, topic: str, payload: bytes = b"x") -> None:
        props = b"\x00" if self.v5 else b""
        self.sock.sendall(_packet(0x30, _str(topic) + props + payload))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw_clients() -> Iterator[Callable[..., RawClient]]:
    with closing_all(RawClient) as open_raw:
        yield open_raw


# ---------------------------------------------------------------------------- wildcards


@pytest.mark.parametrize(("topic_filter", "published", "last", "matched"), [
    pytest.param("a/+/c", ("a/b/c", "a/c", "a/b/b/c", "a/b/c/d", "a//c", "b/b/c"), "a/end/c",
                 ["a/b/c", "a//c"], id="plus-matches-exactly-one-level"),
    pytest.param("a/#", ("a", "a/b", "a/b/c", "ab", "b/a", "/a"), "a/end",
                 ["a", "a/b", "a/b/c"], id="hash-matches-the-parent-level-and-everything-below"),
    pytest.param("+/+", ("a", "a/b", "a/b/c", "/x", "x/", "/"), "end/end",
                 ["a/b", "/x", "x/", "/"], id="plus-plus-matches-two-levels-including-empty-ones"),
    pytest.param("#", ("a", "a/b/c", "/", "$foo/x", "$SYS/x", "$foo", "x/$foo"), "end",
                 ["a", "a/b/c", "/", "x/$foo"],
                 id="hash-alone-matches-every-topic-but-those-starting-with-dollar"),
])
def test_wildcards(hive, peers, topic_filter: str, published: tuple[str, ...], last: str,
                   matched: list[str]) -> None:
    """What ``topic_filter`` gets of ``published``; ``last``, which it matches, is the barrier."""
    sub, pub = peers(hive.port), peers(hive.port)
    assert sub.subscribe(topic_filter) == [0]
    for topic in published:
        pub.publish(topic, topic)
    pub.publish(last, "end")
    assert topics(sub.until(b"end")) == matched


def test_dollar_topics_match_only_filters_that_name_their_first_level(hive, peers) -> None:
    pub = peers(hive.port)
    plus, dollar_hash, dollar_plus = peers(hive.port), peers(hive.port), peers(hive.port)
    plus.subscribe(["+/x", "+/end"])
    dollar_hash.subscribe(["$foo/#", "+/end"])
    dollar_plus.subscribe(["$foo/+", "+/end"])
    pub.publish("$foo/x", "dollar")
    pub.publish("$SYS/x", "sys")
    pub.publish("a/x", "plain")
    pub.publish("z/end", "end")
    assert [m.payload for m in plus.until(b"end")] == [b"plain"]
    assert [m.payload for m in dollar_hash.until(b"end")] == [b"dollar"]
    assert [m.payload for m in dollar_plus.until(b"end")] == [b"dollar"]


def test_only_the_sys_namespace_is_closed_to_publishers(hive, peers) -> None:
    sub, pub = peers(hive.port), peers(hive.port)
    sub.subscribe(["$SYS/#", "$SYSTEM/#", "$SYSx", "end"])
    for topic in ("$SYS/broker/uptime", "$SYS", "$SYSTEM/x", "$SYSx"):
        pub.publish(topic, topic, qos=1)
    pub.publish("end", "end")
    assert topics(sub.until(b"end")) == ["$SYSTEM/x", "$SYSx"]


def test_mqtt_3_1_wildcards(hive, peers) -> None:
    sub, pub = peers(hive.port, version=3), peers(hive.port, version=3)
    assert sub.subscribe(["a/+/c", "b/#"], qos=1) == [1, 1]
    for topic in ("a/b/c", "a/b", "b", "b/c/d"):
        pub.publish(topic, topic, qos=1)
    pub.publish("b/end", "end")
    assert topics(sub.until(b"end")) == ["a/b/c", "b", "b/c/d"]


def test_mosquitto_sub_with_a_wildcard_filter(hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("sensors/ready/temp", "ready", qos=1, retain=True)  # tells us it has subscribed
    sub = subprocess.Popen(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(hive.port), "-t", "sensors/+/temp",
         "-C", "3", "-W", "8", "-v"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert sub.stdout is not None
        first = _readline(sub.stdout)
        assert first == "sensors/ready/temp ready\n"
        pub.publish("sensors/kitchen/temp", "21")
        pub.publish("sensors/kitchen/humidity", "40")
        pub.publish("sensors/hall/temp", "19")
        out, err = sub.communicate(timeout=WAIT)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    assert sub.returncode == 0, err
    assert out.splitlines() == ["sensors/kitchen/temp 21", "sensors/hall/temp 19"]


def _readline(stream: Any, timeout: float = WAIT) -> str:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    return lines.get(timeout=timeout)


# ---------------------------------------------------------------------------- subscription options


def test_no_local_keeps_a_v5_clients_own_messages_from_it(hive, peers) -> None:
    me, other = peers(hive.port), peers(hive.port)
    me.subscribe("chat/#", qos=1, no_local=True)
    me.publish("chat/room", "mine", qos=1)
    other.publish("chat/room", "theirs", qos=1)
    assert [m.payload for m in me.expect()] == [b"theirs"]
    me.nothing_more()


def test_without_no_local_a_client_gets_its_own_messages(hive, peers) -> None:
    me = peers(hive.port)
    me.subscribe("chat/#", qos=1)
    me.publish("chat/room", "mine", qos=1)
    assert [m.payload for m in me.expect()] == [b"mine"]


def test_no_local_counts_per_filter_an_overlapping_filter_still_delivers(hive, peers) -> None:
    me = peers(hive.port)
    me.subscribe("chat/#", qos=1, no_local=True, sid=1)
    me.subscribe("chat/room", qos=1, sid=2)
    me.publish("chat/room", "mine", qos=1)
    got = me.expect()
    assert [(m.payload, m.subscription_ids) for m in got] == [(b"mine", (2,))]
    me.nothing_more()


def test_retain_as_published_keeps_the_retain_flag_on_live_delivery(hive, peers) -> None:
    kept, cleared, v311, pub = (peers(hive.port), peers(hive.port),
                                peers(hive.port, version=4), peers(hive.port))
    kept.subscribe("news", qos=1, retain_as_published=True)
    cleared.subscribe("news", qos=1)
    v311.subscribe("news", qos=1)
    pub.publish("news", "live", qos=1, retain=True)
    assert [(m.payload, m.retain) for m in kept.expect()] == [(b"live", True)]
    assert [(m.payload, m.retain) for m in cleared.expect()] == [(b"live", False)]
    assert [(m.payload, m.retain) for m in v311.expect()] == [(b"live", False)]


def test_retain_handling_0_sends_retained_messages_on_every_subscribe(hive, peers) -> None:
    peers(hive.port).publish("config/a", "A", qos=1, retain=True)
    sub = peers(hive.port)
    for _ in range(3):
        sub.subscribe("config/+", qos=1, retain_handling=0)
        assert [(m.payload, m.retain) for m in sub.expect()] == [(b"A", True)]
    sub.nothing_more()


def test_retain_handling_1_sends_retained_messages_only_for_a_new_subscription(
        hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("config/a", "A", qos=1, retain=True)
    sub = peers(hive.port)
    sub.subscribe("config/+", qos=1, retain_handling=1)
    assert [m.payload for m in sub.expect()] == [b"A"]
    sub.subscribe("config/+", qos=1, retain_handling=1)  # exists already: nothing
    pub.publish("config/b", "live", qos=1)
    assert [m.payload for m in sub.expect()] == [b"live"]
    sub.unsubscribe("config/+")
    sub.subscribe("config/+", qos=1, retain_handling=1)  # new again
    assert [m.payload for m in sub.expect()] == [b"A"]
    sub.nothing_more()


def test_retain_handling_2_never_sends_retained_messages(hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("config/a", "A", qos=1, retain=True)
    sub = peers(hive.port)
    sub.subscribe("config/+", qos=1, retain_handling=2)
    sub.subscribe("config/+", qos=1, retain_handling=2)
    pub.publish("config/b", "live", qos=1)
    assert [(m.payload, m.retain) for m in sub.expect()] == [(b"live", False)]
    sub.nothing_more()


# ---------------------------------------------------------------------------- subscription ids


def test_a_delivery_carries_the_id_of_the_matching_subscription(hive, peers) -> None:
    sub, pub = peers(hive.port), peers(hive.port)
    sub.subscribe("a/+", qos=1, sid=7)
    sub.subscribe("b/#", qos=1, sid=268_435_455)
    sub.subscribe("c", qos=1)
    pub.publish("a/x", "1", qos=1)
    pub.publish("b/x/y", "2", qos=1)
    pub.publish("c", "3", qos=1)
    got = sub.expect(3)
    assert [(m.topic, m.subscription_ids) for m in got] == [
        ("a/x", (7,)), ("b/x/y", (268_435_455,)), ("c", ())]


def test_a_resubscribe_replaces_the_subscription_id(hive, peers) -> None:
    sub, pub = peers(hive.port), peers(hive.port)
    sub.subscribe("a/+", qos=1, sid=7)
    sub.subscribe("a/+", qos=1, sid=8)
    pub.publish("a/x", "1", qos=1)
    assert [m.subscription_ids for m in sub.expect()] == [(8,)]
    sub.subscribe("a/+", qos=1)
    pub.publish("a/x", "2", qos=1)
    assert [m.subscription_ids for m in sub.expect()] == [()]


@pytest.mark.parametrize("qos_wide, qos_exact", [(0, 2), (2, 0), (1, 1)])
def test_overlapping_subscriptions_deliver_once_with_every_id_at_the_highest_qos(
        hive, peers, qos_wide, qos_exact) -> None:
    sub, pub = peers(hive.port), peers(hive.port)
    assert sub.subscribe("home/#", qos=qos_wide, sid=1) == [qos_wide]
    assert sub.subscribe("home/+/light", qos=qos_exact, sid=2) == [qos_exact]
    # paho hands a QoS 2 message over only at PUBREL: the end marker takes the same path.
    sub.subscribe("end", qos=2)
    pub.publish("home/hall/light", "on", qos=2)
    pub.publish("end", "end", qos=2)
    got = sub.until(b"end")
    assert len(got) == 1, got
    assert sorted(got[0].subscription_ids) == [1, 2]
    assert got[0].qos == max(qos_wide, qos_exact)


def test_overlapping_subscriptions_of_a_v311_client_deliver_once_at_the_highest_qos(
        hive, peers) -> None:
    sub, pub = peers(hive.port, version=4), peers(hive.port)
    sub.subscribe("home/#", qos=0)
    sub.subscribe("home/+/light", qos=1)
    sub.subscribe("end", qos=0)
    pub.publish("home/hall/light", "on", qos=1)
    pub.publish("end", "end")
    got = sub.until(b"end")
    assert [(m.payload, m.qos) for m in got] == [(b"on", 1)]


# ---------------------------------------------------------------------------- unsubscribe


def test_unsubscribe_answers_0x11_for_a_filter_that_was_not_subscribed(hive, peers) -> None:
    sub, pub = peers(hive.port), peers(hive.port)
    sub.subscribe(["a/+", "b", "end"], qos=1)
    assert sub.unsubscribe(["a/+", "never", "b"]) == [0x00, 0x11, 0x00]
    assert sub.unsubscribe("a/+") == [0x11]
    assert sub.unsubscribe("a/x") == [0x11]  # matching a filter is not being that filter
    pub.publish("a/x", "gone", qos=1)
    pub.publish("b", "gone", qos=1)
    pub.publish("end", "end", qos=1)
    assert sub.until(b"end") == []


def test_unsubscribe_keeps_the_other_subscriptions_of_the_session(hive, peers) -> None:
    sub, other, pub = peers(hive.port), peers(hive.port), peers(hive.port)
    sub.subscribe(["a/#", "a/b"], qos=1)
    other.subscribe("a/b", qos=1)
    assert sub.unsubscribe("a/b") == [0x00]
    pub.publish("a/b", "1", qos=1)
    assert [m.topic for m in sub.expect()] == ["a/b"]
    assert [m.topic for m in other.expect()] == ["a/b"]
    sub.nothing_more()


def test_v311_unsubscribe_stops_delivery(hive, peers) -> None:
    sub, pub = peers(hive.port, version=4), peers(hive.port)
    sub.subscribe(["a", "end"], qos=1)
    sub.unsubscribe("a")
    pub.publish("a", "gone", qos=1)
    pub.publish("end", "end", qos=1)
    assert sub.until(b"end") == []


# ---------------------------------------------------------------------------- shared subscriptions


def test_a_shared_group_delivers_each_message_to_exactly_one_member(hive, peers) -> None:
    members = [peers(hive.port) for _ in range(3)]
    for member in members:
        assert member.subscribe("$share/g/t/#", qos=1) == [1]
    pub = peers(hive.port)
    for n in range(30):
        pub.publish(f"t/{n % 4}", str(n), qos=1)
    deadline = time.monotonic() + WAIT
    got: dict[str, list[bytes]] = {m.client_id: [] for m in members}
    while sum(map(len, got.values())) < 30 and time.monotonic() < deadline:
        for member in members:
            while not member.messages.empty():
                got[member.client_id].append(member.messages.get_nowait().payload)
        time.sleep(0.02)
    for member in members:
        member.nothing_more(0.1)
    payloads = Counter(p for received in got.values() for p in received)
    assert payloads == Counter(str(n).encode() for n in range(30))  # each once, none lost
    assert all(received for received in got.values()), {k: len(v) for k, v in got.items()}


def test_two_groups_and_a_plain_subscriber_each_get_every_message(hive, peers) -> None:
    group_a = [peers(hive.port) for _ in range(2)]
    group_b = [peers(hive.port) for _ in range(2)]
    plain = peers(hive.port)
    for member in group_a:
        member.subscribe("$share/a/jobs/+", qos=1)
    for member in group_b:
        member.subscribe("$share/b/jobs/+", qos=1)
    plain.subscribe("jobs/+", qos=1)
    pub = peers(hive.port)
    for n in range(10):
        pub.publish("jobs/x", str(n), qos=1)
    sent = sorted(str(n).encode() for n in range(10))
    assert sorted(m.payload for m in plain.expect(10)) == sent

    def drain(group: list[Peer]) -> list[bytes]:
        deadline = time.monotonic() + WAIT
        got: list[bytes] = []
        while len(got) < 10 and time.monotonic() < deadline:
            for member in group:
                while not member.messages.empty():
                    got.append(member.messages.get_nowait().payload)
            time.sleep(0.02)
        return sorted(got)

    assert drain(group_a) == sent
    assert drain(group_b) == sent


def test_a_shared_subscription_carries_its_subscription_id(hive, peers) -> None:
    member, pub = peers(hive.port), peers(hive.port)
    member.subscribe("$share/g/ids/#", qos=1, sid=42)
    pub.publish("ids/x", "1", qos=1)
    assert [(m.payload, m.subscription_ids) for m in member.expect()] == [(b"1", (42,))]


def test_a_shared_subscription_honours_retain_as_published(hive, peers) -> None:
    kept, cleared, pub = peers(hive.port), peers(hive.port), peers(hive.port)
    kept.subscribe("$share/a/news", qos=1, retain_as_published=True)
    cleared.subscribe("$share/b/news", qos=1)
    pub.publish("news", "live", qos=1, retain=True)
    assert [(m.payload, m.retain) for m in kept.expect()] == [(b"live", True)]
    assert [(m.payload, m.retain) for m in cleared.expect()] == [(b"live", False)]


def test_a_shared_subscription_gets_no_retained_messages_on_subscribe(hive, peers) -> None:
    pub = peers(hive.port)
    pub.publish("state/a", "old", qos=1, retain=True)
    member = peers(hive.port)
    assert member.subscribe("$share/g/state/#", qos=1) == [1]
    pub.publish("state/b", "live", qos=1)
    assert [m.payload for m in member.expect()] == [b"live"]
    member.nothing_more()


def test_unsubscribing_a_shared_subscription_leaves_the_group(hive, peers) -> None:
    leaving, staying, pub = peers(hive.port), peers(hive.port), peers(hive.port)
    leaving.subscribe("$share/g/q", qos=1)
    staying.subscribe("$share/g/q", qos=1)
    assert leaving.unsubscribe("$share/g/q") == [0x00]
    assert leaving.unsubscribe("$share/g/q") == [0x11]
    for n in range(6):
        pub.publish("q", str(n), qos=1)
    assert len(staying.expect(6)) == 6
    leaving.nothing_more(0.1)


def test_a_shared_group_skips_a_member_that_disconnected(hive, peers) -> None:
    gone, staying, pub = peers(hive.port), peers(hive.port), peers(hive.port)
    gone.subscribe("$share/g/q", qos=0)
    staying.subscribe("$share/g/q", qos=0)
    gone.close()
    time.sleep(0.3)
    for n in range(4):
        pub.publish("q", str(n), qos=1)
    assert len(staying.expect(4)) == 4


def test_subscriptions_and_their_options_survive_a_restart(hive, peers) -> None:
    peers(hive.port).publish("cfg", "c", qos=1, retain=True)
    keeper = peers(hive.port, "keeper", session_expiry=300)
    keeper.subscribe("$share/g/jobs/#", qos=1, sid=4)
    keeper.subscribe("notes/#", qos=1, no_local=True, retain_as_published=True, sid=5)
    keeper.subscribe("cfg", qos=1, retain_handling=1)
    assert [m.payload for m in keeper.expect()] == [b"c"]
    keeper.close()
    hive.restart()
    keeper = peers(hive.port, "keeper", clean=False, session_expiry=300)
    keeper.subscribe("cfg", qos=1, retain_handling=1)  # the session has it: no retained
    pub = peers(hive.port)
    pub.publish("jobs/1", "job", qos=1)
    pub.publish("notes/a", "note", qos=1, retain=True)
    keeper.publish("notes/b", "mine", qos=1)
    pub.publish("cfg", "end", qos=1)
    got = keeper.until(b"end")
    assert [(m.payload, m.subscription_ids, m.retain) for m in got] == [
        (b"job", (4,), False), (b"note", (5,), True)]


# ---------------------------------------------------------------------------- feature switches


def test_wildcard_subscriptions_disabled(hive_factory, peers) -> None:
    node = hive_factory(body="<mqtt><wildcard-subscriptions><enabled>false</enabled>"
                             "</wildcard-subscriptions></mqtt>")
    sub = peers(node.port)
    assert sub.connack_properties.WildcardSubscriptionAvailable == 0
    assert sub.subscribe(["a/+", "a/#", "#", "a/b", "$share/g/c/+"], qos=1) == [
        0xA2, 0xA2, 0xA2, 1, 0xA2]
    v311 = peers(node.port, version=4)
    assert v311.subscribe(["a/+", "a/b"], qos=1) == [0x80, 1]


def test_shared_subscriptions_disabled(hive_factory, peers) -> None:
    node = hive_factory(body="<mqtt><shared-subscriptions><enabled>false</enabled>"
                             "</shared-subscriptions></mqtt>")
    sub, pub = peers(node.port), peers(node.port)
    assert sub.connack_properties.SharedSubscriptionAvailable == 0
    assert sub.subscribe(["$share/g/a", "a"], qos=1) == [0x9E, 1]
    pub.publish("a", "1", qos=1)
    assert len(sub.expect()) == 1
    sub.nothing_more()


def test_subscription_identifiers_disabled(hive_factory, peers) -> None:
    node = hive_factory(body="<mqtt><subscription-identifier><enabled>false</enabled>"
                             "</subscription-identifier></mqtt>")
    sub = peers(node.port)
    assert sub.connack_properties.SubscriptionIdentifierAvailable == 0
    assert sub.subscribe("a", qos=1) == [1]
    sub.client.subscribe("b", properties=_sid(3))
    assert sub.disconnects.get(timeout=WAIT) == 0xA1


def test_connack_announces_every_feature_by_default(hive, peers) -> None:
    props = peers(hive.port).connack_properties
    for name in ("WildcardSubscriptionAvailable", "SharedSubscriptionAvailable",
                 "SubscriptionIdentifierAvailable", "RetainAvailable"):
        assert getattr(props, name, 1) == 1, name


def _sid(value: int) -> Properties:
    props = Properties(PacketTypes.SUBSCRIBE)
    props.SubscriptionIdentifier = value
    return props


# ---------------------------------------------------------------------------- invalid input


@pytest.mark.parametrize("version, refused", [(5, 0x8F), (4, 0x80)])
def test_an_invalid_topic_filter_is_refused_in_the_suback(
        hive, raw_clients, peers, version, refused) -> None:
    raw = raw_clients(hive.port, "raw", version)
    filters = ("a/#/b", "a+", "#/a", "a/b#", "ok/+", "$share/g+/x", "$share//x", "$share/g/")
    assert raw.subscribe(*filters) == [refused] * 4 + [0] + [refused] * 3
    peers(hive.port).publish("ok/1", "still here")
    head, body = raw.read()
    assert head == 0x30 and body.endswith(b"still here")


def test_a_wildcard_in_a_v5_publish_topic_closes_that_connection_with_0x90(
        hive, raw_clients, peers) -> None:
    bystander = peers(hive.port)
    bystander.subscribe("#", qos=1)
    raw = raw_clients(hive.port, "bad-publisher")
    raw.publish("a/+", b"no")
    head, body = raw.read()
    assert head == 0xE0 and body[0] == 0x90, (hex(head), body)
    assert raw.read() == (-1, b"")
    other = peers(hive.port)
    other.publish("a/b", "fine", qos=1)
    assert [m.payload for m in bystander.expect()] == [b"fine"]
    bystander.publish("a/c", "me too", qos=1)


def test_a_wildcard_in_a_v311_publish_topic_closes_that_connection(
        hive, raw_clients, peers) -> None:
    bystander = peers(hive.port, version=4)
    bystander.subscribe("#", qos=1)
    raw = raw_clients(hive.port, "bad-publisher", version=4)
    raw.publish("a/#", b"no")
    assert raw.read() == (-1, b"")
    peers(hive.port, version=4).publish("a/b", "fine", qos=1)
    assert [m.payload for m in bystander.expect()] == [b"fine"]


def test_a_v311_suback_reports_failure_as_0x80(hive_factory, peers) -> None:
    node = hive_factory(body="<mqtt><wildcard-subscriptions><enabled>false</enabled>"
                             "</wildcard-subscriptions></mqtt>")
    sub = peers(node.port, version=4)
    assert sub.subscribe(["plain", "with/#", "other"], qos=2) == [2, 0x80, 2]


def test_granted_qos_is_capped_by_the_configured_maximum(hive_factory, peers) -> None:
    node = hive_factory(body="<mqtt><quality-of-service><max-qos>1</max-qos>"
                             "</quality-of-service></mqtt>")
    sub = peers(node.port)
    assert sub.subscribe(["a", "b"], qos=2) == [1, 1]
