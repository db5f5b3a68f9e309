"""Sessions end to end: clean start, expiry, client ids, takeover, keep alive, wills, DISCONNECT,
connection limits, persistence across kill -9, and shutdown; against real `hive run` processes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import closing_all
from e2e._session_helpers import WAIT, PahoClient, mosquitto_pub, mosquitto_sub
from e2e.rawclient import RawClient

from hive_core.mqtt import (
    Connect,
    Disconnect,
    PingReq,
    PropertyId,
    PubAck,
    Publish,
    ReasonCode,
    Will,
)

pytestmark = pytest.mark.timeout(30)

P = PropertyId
RC = ReasonCode
Clients = Callable[..., PahoClient]


@pytest.fixture
def clients() -> Iterator[Clients]:
    """Make PahoClients that are all stopped at teardown."""
    with closing_all(PahoClient) as make:
        yield make


def node_with(hive_factory: Any, mqtt: str = "", restrictions: str = "") -> Any:
    body = (f"<mqtt>{mqtt}</mqtt>" if mqtt else "") + (
        f"<restrictions>{restrictions}</restrictions>" if restrictions else "")
    return hive_factory(body=body)


def will_watcher(clients: Clients, port: int, topic: str = "wills/#") -> PahoClient:
    watcher = clients(port, "watcher").connect()
    watcher.subscribe(topic, qos=1)
    return watcher


def dropped_with_will(port: int, client_id: str, will: Will, version: int = 4,
                      **connect: Any) -> None:
    """A client that connects with ``will`` (and ``connect``'s RawClient.connect arguments),
    then loses its connection: closed without a DISCONNECT."""
    raw = RawClient(port)
    raw.connect(version, client_id, will=will, **connect)
    raw.close()


# ---------------------------------------------------------------------- clean start, present flag


# MQTT 3.1.1 keeps a session for clean session 0; MQTT 5 for clean start 0 with an expiry.
KEPT_SESSIONS = [pytest.param({"version": 4}, "sessions/v3", id="v311"),
                 pytest.param({"version": 5, "expiry": 60}, "sessions/v5", id="v5")]


@pytest.mark.parametrize(("terms", "topic"), KEPT_SESSIONS)
def test_clean_start_false_resumes_with_session_present(hive, clients, terms, topic):
    first = clients(hive.port, "keeper", clean=False, **terms).connect()
    assert first.session_present is False
    first.subscribe(topic, qos=1)
    first.disconnect()

    again = clients(hive.port, "keeper", clean=False, **terms).connect()
    assert again.session_present is True
    clients(hive.port, "pub", version=terms["version"]).connect().publish(topic, b"kept", qos=1)
    assert again.next_message().payload == b"kept"  # the subscription came back with the session


@pytest.mark.parametrize(("terms", "topic", "clean_one_kept"), [
    # 3.1.1: the clean session ends with its connection; MQTT 5: it is kept for its expiry
    pytest.param({"version": 4}, "sessions/v3", False, id="v311"),
    pytest.param({"version": 5, "expiry": 60}, "sessions/v5", True, id="v5")])
def test_clean_start_true_discards_the_session(hive, clients, terms, topic, clean_one_kept):
    first = clients(hive.port, "keeper", clean=False, **terms).connect()
    first.subscribe(topic, qos=1)
    first.disconnect()

    clean = clients(hive.port, "keeper", clean=True, **terms).connect()
    assert clean.session_present is False
    clients(hive.port, "pub", version=terms["version"]).connect().publish(topic, b"x", qos=1)
    clean.no_message(0.5)
    clean.disconnect()

    after = clients(hive.port, "keeper", clean=False, **terms).connect()
    assert after.session_present is clean_one_kept


def test_v31_connack_never_carries_session_present(hive):
    for _ in range(2):  # the second CONNECT resumes a session, still no flag for MQTT 3.1
        with RawClient(hive.port) as raw:
            raw.version = 3
            raw.send(Connect("old-timer", 3, False, 60, protocol_name="MQIsdp"))
            raw.sock.settimeout(WAIT)
            assert raw.sock.recv(4) == b"\x20\x02\x00\x00"
            raw.disconnect()


def test_v5_session_without_expiry_ends_with_the_connection(hive, clients):
    first = clients(hive.port, "brief", clean=False).connect()
    first.subscribe("sessions/v5", qos=1)
    first.disconnect()

    again = clients(hive.port, "brief", clean=False).connect()
    assert again.session_present is False


# ---------------------------------------------------------------------- session expiry


def test_session_expires_after_its_interval(hive, clients):
    first = clients(hive.port, "short", expiry=2, clean=False).connect()
    first.disconnect()

    soon = clients(hive.port, "short", expiry=2, clean=False).connect()
    assert soon.session_present is True  # still there before the interval ran out
    soon.disconnect()

    time.sleep(3.0)  # the behaviour under test is the passing of time
    late = clients(hive.port, "short", expiry=2, clean=False).connect()
    assert late.session_present is False


def test_reconnect_replaces_the_session_expiry(hive, clients):
    first = clients(hive.port, "changing", expiry=3600, clean=False).connect()
    first.disconnect()
    shorter = clients(hive.port, "changing", expiry=1, clean=False).connect()
    assert shorter.session_present is True
    shorter.disconnect()

    time.sleep(2.0)
    again = clients(hive.port, "changing", expiry=1, clean=False).connect()
    assert again.session_present is False


def test_session_expiry_capped_by_max_interval(hive_factory, clients):
    node = node_with(hive_factory,
                     mqtt="<session-expiry><max-interval>1</max-interval></session-expiry>")
    first = clients(node.port, "greedy", expiry=3600, clean=False).connect()
    assert first.connack_props is not None
    assert first.connack_props.SessionExpiryInterval == 1
    first.disconnect()

    time.sleep(2.5)
    again = clients(node.port, "greedy", expiry=3600, clean=False).connect()
    assert again.session_present is False  # the cap, not the request, decided


def test_session_expiry_within_max_interval_is_not_echoed(hive_factory, clients):
    node = node_with(hive_factory,
                     mqtt="<session-expiry><max-interval>100</max-interval></session-expiry>")
    client = clients(node.port, "modest", expiry=50, clean=False).connect()
    assert not hasattr(client.connack_props, "SessionExpiryInterval")


def test_disconnect_with_session_expiry_zero_ends_the_session(hive, clients):
    first = clients(hive.port, "leaving", expiry=60, clean=False).connect()
    first.subscribe("sessions/x", qos=1)
    first.disconnect(reason=0, SessionExpiryInterval=0)

    again = clients(hive.port, "leaving", expiry=60, clean=False).connect()
    assert again.session_present is False


def test_disconnect_can_lengthen_session_expiry(hive, clients):
    first = clients(hive.port, "staying", expiry=1, clean=False).connect()
    first.disconnect(reason=0, SessionExpiryInterval=30)

    time.sleep(2.0)  # past the interval of the CONNECT, inside the one of the DISCONNECT
    again = clients(hive.port, "staying", expiry=1, clean=False).connect()
    assert again.session_present is True


def test_disconnect_raising_expiry_from_zero_is_a_protocol_error(hive):
    with RawClient(hive.port) as raw:
        assert raw.connect(5, "zero").reason_code == 0
        raw.send(Disconnect(0, {P.SESSION_EXPIRY_INTERVAL: 30}))
        raw.expect_disconnect(RC.PROTOCOL_ERROR)


def test_disconnect_expiry_after_a_connect_capped_to_zero_is_no_error(hive_factory):
    node = node_with(hive_factory,
                     mqtt="<session-expiry><max-interval>0</max-interval></session-expiry>")
    with RawClient(node.port) as raw:
        connack = raw.connect(5, "capped", SESSION_EXPIRY_INTERVAL=30)
        assert connack.properties[P.SESSION_EXPIRY_INTERVAL] == 0
        raw.send(Disconnect(0, {P.SESSION_EXPIRY_INTERVAL: 30}))
        assert raw.expect_closed() == []  # closed, without a DISCONNECT 0x82 back


# ---------------------------------------------------------------------- client identifiers


def test_v5_empty_client_id_gets_an_assigned_identifier(hive, clients):
    first = clients(hive.port, "", expiry=60, clean=False).connect()
    assert first.connack_props is not None
    assigned = first.connack_props.AssignedClientIdentifier
    assert assigned
    first.subscribe("ids/t", qos=1)
    first.disconnect()

    again = clients(hive.port, assigned, expiry=60, clean=False).connect()
    assert again.session_present is True  # the assigned id names a real session


def test_v311_empty_client_id_with_clean_session_is_accepted(hive):
    with RawClient(hive.port) as raw:
        connack = raw.connect(4, "", clean_start=True)
        assert connack.reason_code == 0
        assert connack.session_present is False


def test_v311_empty_client_id_without_clean_session_is_refused(hive):
    with RawClient(hive.port) as raw:
        connack = raw.connect(4, "", clean_start=False)
        assert connack.reason_code == 2  # identifier rejected
        raw.expect_closed()


def test_mosquitto_clients_with_generated_ids_connect(hive):
    mosquitto_pub(hive.port, "ids/mosquitto", "hello", qos=1, version="mqttv5")
    mosquitto_pub(hive.port, "ids/mosquitto", "hello", qos=1, version="mqttv311")


# ---------------------------------------------------------------------- takeover


def test_v311_takeover_closes_the_first_connection(hive, clients):
    first = clients(hive.port, "twin", version=4).connect()
    second = clients(hive.port, "twin", version=4).connect()
    first.wait_disconnected()
    second.subscribe("takeover/t", qos=1)
    clients(hive.port, "pub", version=4).connect().publish("takeover/t", b"still here")
    assert second.next_message().payload == b"still here"


def test_v5_takeover_sends_session_taken_over(hive, clients):
    first = clients(hive.port, "twin5").connect()
    clients(hive.port, "twin5").connect()
    assert first.wait_disconnected() == RC.SESSION_TAKEN_OVER


def test_takeover_keeps_the_persistent_session(hive, clients):
    first = clients(hive.port, "twin5", expiry=60, clean=False).connect()
    first.subscribe("takeover/kept", qos=1)
    second = clients(hive.port, "twin5", expiry=60, clean=False).connect()
    assert second.session_present is True
    assert first.wait_disconnected() == RC.SESSION_TAKEN_OVER
    clients(hive.port, "pub").connect().publish("takeover/kept", b"m")
    assert second.next_message().payload == b"m"


def test_takeover_of_a_clean_session_then_resume_finds_no_session(hive, clients):
    first = clients(hive.port, "twin3", version=4, clean=True).connect()
    second = clients(hive.port, "twin3", version=4, clean=False).connect()
    first.wait_disconnected()
    assert second.session_present is False  # the clean session ended with its connection
    third = clients(hive.port, "twin3", version=4, clean=False).connect()
    assert third.session_present is True
    second.wait_disconnected()  # the id still names one session: the third took it over


def test_takeover_publishes_the_will_of_the_first_connection(hive, clients):
    watcher = will_watcher(clients, hive.port)
    first = RawClient(hive.port)
    first.connect(4, "twin-will", will=Will("wills/twin", b"replaced", 1))
    with RawClient(hive.port) as second:
        assert second.connect(4, "twin-will").reason_code == 0
        assert watcher.next_message().payload == b"replaced"
        first.expect_closed()
    first.close()


def test_takeover_redelivers_what_the_first_connection_left_unacked(hive):
    first, delivered = unacked_delivery(hive.port, "twin-inflight", "takeover/inflight")
    with RawClient(hive.port) as second:
        assert second.connect(4, "twin-inflight", clean_start=False).session_present is True
        redelivered = second.expect(Publish)
        assert (redelivered.dup, redelivered.packet_id) == (True, delivered.packet_id)
        first.expect_closed()
    first.close()


# ---------------------------------------------------------------------- keep alive


def test_v311_silent_client_is_closed_after_one_and_a_half_keep_alive(hive):
    with RawClient(hive.port) as raw:
        assert raw.connect(4, "silent", keep_alive=2).reason_code == 0
        started = time.monotonic()
        raw.expect_closed(timeout=8)
        elapsed = time.monotonic() - started
    assert 2.8 <= elapsed <= 3.8, elapsed  # 1.5 x 2 s, and not 2 x (room for a busy machine)


def test_v5_silent_client_gets_keep_alive_timeout(hive):
    with RawClient(hive.port) as raw:
        assert raw.connect(5, "silent5", keep_alive=2).reason_code == 0
        started = time.monotonic()
        raw.expect_disconnect(RC.KEEP_ALIVE_TIMEOUT, timeout=8)
        elapsed = time.monotonic() - started
    assert 2.8 <= elapsed <= 3.8, elapsed


def test_pings_keep_a_client_alive(hive):
    with RawClient(hive.port) as raw:
        assert raw.connect(4, "pinger", keep_alive=1).reason_code == 0
        for _ in range(6):
            time.sleep(0.5)
            raw.send(PingReq())
            assert raw.receive(2.0) is not None  # PINGRESP, and still connected


@pytest.mark.parametrize(("keep_alive", "asked", "granted"), [
    ("<max-keep-alive>10</max-keep-alive>", 60, 10),  # the server's cap
    ("<allow-unlimited>false</allow-unlimited><max-keep-alive>20</max-keep-alive>", 0, 20),
], ids=["capped", "unlimited-refused"])
def test_server_keep_alive_caps_the_client_request(hive_factory, clients, keep_alive, asked,
                                                   granted):
    node = node_with(hive_factory, mqtt=f"<keep-alive>{keep_alive}</keep-alive>")
    client = clients(node.port, "asking", keepalive=asked).connect()
    assert client.connack_props is not None
    assert client.connack_props.ServerKeepAlive == granted
    modest = clients(node.port, "modest", keepalive=5).connect()  # within the cap: as asked
    assert not hasattr(modest.connack_props, "ServerKeepAlive")


# ---------------------------------------------------------------------- wills


def test_will_published_on_abnormal_close(hive, clients):
    watcher = will_watcher(clients, hive.port)
    dropped_with_will(hive.port, "doomed", Will("wills/doomed", b"gone", 1))
    message = watcher.next_message()
    assert (message.topic, message.payload) == ("wills/doomed", b"gone")


def test_will_published_on_keep_alive_timeout(hive, clients):
    watcher = will_watcher(clients, hive.port)
    with RawClient(hive.port) as raw:
        raw.connect(4, "mute", keep_alive=1, will=Will("wills/mute", b"timed out", 1))
        assert watcher.next_message(timeout=5).payload == b"timed out"


def test_no_will_on_normal_disconnect(hive, clients):
    watcher = will_watcher(clients, hive.port)
    polite = clients(hive.port, "polite", version=4, will=("wills/polite", b"no", 1, False))
    polite.connect().disconnect()
    with RawClient(hive.port) as raw:
        raw.connect(5, "polite5", will=Will("wills/polite5", b"no", 1))
        raw.disconnect(0)
    watcher.no_message(1.0)


def test_v5_disconnect_with_will_message_publishes_the_will(hive, clients):
    watcher = will_watcher(clients, hive.port)
    leaver = clients(hive.port, "leaver", will=("wills/leaver", b"bye", 1, False)).connect()
    leaver.disconnect(reason=RC.DISCONNECT_WITH_WILL_MESSAGE)
    assert watcher.next_message().payload == b"bye"


def test_will_delay_interval_holds_the_will_back(hive, clients):
    watcher = will_watcher(clients, hive.port)
    will = Will("wills/delayed", b"late", 1, False, {P.WILL_DELAY_INTERVAL: 2})
    dropped_with_will(hive.port, "delayed", will, 5, clean_start=False,
                      SESSION_EXPIRY_INTERVAL=60)
    started = time.monotonic()
    watcher.no_message(1.3)
    assert watcher.next_message(timeout=3).payload == b"late"
    assert time.monotonic() - started >= 1.8


def test_will_delay_cancelled_when_the_session_resumes(hive, clients):
    watcher = will_watcher(clients, hive.port)
    will = Will("wills/back", b"should not", 1, False, {P.WILL_DELAY_INTERVAL: 2})
    dropped_with_will(hive.port, "back", will, 5, clean_start=False, SESSION_EXPIRY_INTERVAL=60)
    with RawClient(hive.port) as again:
        assert again.connect(5, "back", clean_start=False,
                             SESSION_EXPIRY_INTERVAL=60).session_present is True
        watcher.no_message(3.0)


def test_clean_start_takeover_publishes_a_delayed_will_at_once(hive, clients):
    watcher = will_watcher(clients, hive.port)
    will = Will("wills/replaced", b"session over", 1, False, {P.WILL_DELAY_INTERVAL: 30})
    first = RawClient(hive.port)
    first.connect(5, "replaced", clean_start=False, SESSION_EXPIRY_INTERVAL=60, will=will)
    with RawClient(hive.port) as second:
        assert second.connect(5, "replaced", clean_start=True).session_present is False
        assert watcher.next_message(timeout=2).payload == b"session over"
        first.expect_disconnect(RC.SESSION_TAKEN_OVER)
    first.close()


def test_will_published_when_the_session_expires_before_the_delay(hive, clients):
    watcher = will_watcher(clients, hive.port)
    will = Will("wills/expiring", b"ended", 1, False, {P.WILL_DELAY_INTERVAL: 30})
    dropped_with_will(hive.port, "expiring", will, 5, clean_start=False,
                      SESSION_EXPIRY_INTERVAL=1)
    assert watcher.next_message(timeout=4).payload == b"ended"


def test_will_with_retain_is_retained(hive, clients):
    dropped_with_will(hive.port, "retainer", Will("wills/retained", b"last words", 1, True))
    # A watcher that subscribes after the fact still gets it, as a retained message.
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        result = mosquitto_sub(hive.port, "wills/retained", "-C", "1", "-W", "1", "-F", "%r %p")
        if result.stdout.strip():
            break
    assert result.stdout.strip() == "1 last words"


# ---------------------------------------------------------------------- DISCONNECT reason codes


def test_client_disconnect_reason_code_is_accepted(hive, clients):
    client = clients(hive.port, "unhappy").connect()
    client.disconnect(reason=RC.UNSPECIFIED_ERROR, ReasonString="client side trouble")
    # The broker took it as a normal close: no error, and the id can connect again.
    clients(hive.port, "unhappy").connect()
    assert "Traceback" not in hive.log and "internal error" not in hive.log


def test_second_connect_gets_disconnect_protocol_error(hive):
    with RawClient(hive.port) as raw:
        assert raw.connect(5, "twice").reason_code == 0
        raw.send(Connect("twice", 5))
        raw.expect_disconnect(RC.PROTOCOL_ERROR)


def test_v311_second_connect_closes_the_connection(hive):
    with RawClient(hive.port) as raw:
        assert raw.connect(4, "twice3").reason_code == 0
        raw.send(Connect("twice3", 4))
        assert raw.expect_closed() == []


def test_packet_before_connect_closes_the_connection(hive):
    with RawClient(hive.port) as raw:
        raw.send(PingReq())
        assert raw.expect_closed() == []


def test_protocol_error_publishes_the_will(hive, clients):
    watcher = will_watcher(clients, hive.port)
    with RawClient(hive.port) as raw:
        raw.connect(5, "clumsy", will=Will("wills/clumsy", b"broke it", 1))
        raw.send(Connect("clumsy", 5))
        raw.expect_disconnect(RC.PROTOCOL_ERROR)
    assert watcher.next_message().payload == b"broke it"


# ---------------------------------------------------------------------- connection limits


def test_connection_without_connect_is_closed_at_the_deadline(hive_factory):
    node = node_with(hive_factory,
                     restrictions="<no-connect-idle-timeout>500</no-connect-idle-timeout>")
    with RawClient(node.port) as raw:
        started = time.monotonic()
        assert raw.expect_closed(timeout=5) == []
        elapsed = time.monotonic() - started
    assert 0.4 <= elapsed <= 1.0, elapsed


def test_max_connections_refuses_v5_with_quota_exceeded(hive_factory, clients):
    node = node_with(hive_factory, restrictions="<max-connections>2</max-connections>")
    clients(node.port, "one").connect()
    clients(node.port, "two", version=4).connect()
    third = clients(node.port, "three").connect(expect_success=False)
    assert third.reason_code == RC.QUOTA_EXCEEDED


def test_max_connections_refuses_v311_with_server_unavailable(hive_factory, clients):
    node = node_with(hive_factory, restrictions="<max-connections>2</max-connections>")
    clients(node.port, "one").connect()
    second = clients(node.port, "two", version=4).connect()
    with RawClient(node.port) as raw:
        assert raw.connect(4, "three").reason_code == 3
        raw.expect_closed()
    second.disconnect()
    with RawClient(node.port) as raw:  # a slot is free again
        assert raw.connect(4, "four").reason_code == 0


def test_max_connections_still_allows_a_takeover(hive_factory, clients):
    node = node_with(hive_factory, restrictions="<max-connections>2</max-connections>")
    first = clients(node.port, "one").connect()
    clients(node.port, "two").connect()
    clients(node.port, "one").connect()  # replaces a connection: the count does not grow
    assert first.wait_disconnected() == RC.SESSION_TAKEN_OVER
    refused = clients(node.port, "three").connect(expect_success=False)
    assert refused.reason_code == RC.QUOTA_EXCEEDED


# ---------------------------------------------------------------------- persistence across kill -9


def test_queued_qos1_messages_survive_kill9_mosquitto(hive):
    subscribed = mosquitto_sub(hive.port, "persist/q", "-c", "-i", "durable", "-E")
    assert subscribed.returncode == 0, subscribed.stderr
    sent = [f"m{i}" for i in range(20)]
    for payload in sent:
        mosquitto_pub(hive.port, "persist/q", payload, qos=1)  # exits after PUBACK

    hive.kill()
    hive.start()
    got = mosquitto_sub(hive.port, "persist/q", "-c", "-i", "durable", "-C", str(len(sent)),
                        "-W", "8")
    assert got.stdout.split() == sent, got.stderr


def test_mosquitto_v5_session_with_expiry_gets_queued_messages(hive):
    session = ("-c", "-x", "60", "-i", "durable-mosq5")
    subscribed = mosquitto_sub(hive.port, "persist/m5", *session, "-E", version="mqttv5")
    assert subscribed.returncode == 0, subscribed.stderr
    for payload in ("a", "b", "c"):
        mosquitto_pub(hive.port, "persist/m5", payload, qos=1, version="mqttv5")
    got = mosquitto_sub(hive.port, "persist/m5", *session, "-C", "3", "-W", "5",
                        version="mqttv5")
    assert got.stdout.split() == ["a", "b", "c"], got.stderr


def test_queued_qos1_messages_survive_kill9_v5(hive, clients):
    subscriber = clients(hive.port, "durable5", expiry=3600, clean=False).connect()
    subscriber.subscribe("persist/v5", qos=1)
    subscriber.disconnect()
    publisher = clients(hive.port, "pub5").connect()
    sent = [f"v5-{i}".encode() for i in range(20)]
    for payload in sent:
        publisher.publish("persist/v5", payload, qos=1)
    publisher.close()

    hive.kill()
    hive.start()
    back = clients(hive.port, "durable5", expiry=3600, clean=False).connect()
    assert back.session_present is True
    got = [back.next_message().payload for _ in sent]
    assert got == sent
    back.no_message(0.3)


def test_pipelined_qos1_messages_survive_kill9(hive, clients):
    subscriber = clients(hive.port, "durable-many", version=4, clean=False).connect()
    subscriber.subscribe("persist/many", qos=1)
    subscriber.disconnect()
    publisher = clients(hive.port, "pub-many")
    publisher.client.max_inflight_messages_set(10)  # paho ignores the server's receive maximum
    publisher.connect()
    sent = [f"n{i}".encode() for i in range(300)]
    infos = [publisher.client.publish("persist/many", payload, qos=1) for payload in sent]
    for info in infos:  # all in flight together: acknowledged in batches by group commit
        info.wait_for_publish(WAIT)
        assert info.is_published()

    hive.kill()
    hive.start()
    back = clients(hive.port, "durable-many", version=4, clean=False).connect()
    got = [back.next_message().payload for _ in sent]
    assert got == sent


def test_retained_message_survives_kill9(hive, clients):
    mosquitto_pub(hive.port, "persist/retained", "kept", qos=1, retain=True)
    hive.kill()
    hive.start()
    got = mosquitto_sub(hive.port, "persist/retained", "-C", "1", "-W", "5")
    assert got.stdout.strip() == "kept", got.stderr
    reader = clients(hive.port, "reader").connect()
    reader.subscribe("persist/retained", qos=1)
    message = reader.next_message()
    assert (message.payload, message.retain) == (b"kept", True)


def test_retained_message_cleared_before_kill9_stays_cleared(hive, clients):
    mosquitto_pub(hive.port, "persist/cleared", "old", qos=1, retain=True)
    mosquitto_pub(hive.port, "persist/cleared", "", qos=1, retain=True)
    hive.kill()
    hive.start()
    reader = clients(hive.port, "reader").connect()
    reader.subscribe("persist/cleared", qos=1)
    reader.no_message(0.5)


def test_unsubscribe_survives_kill9(hive, clients):
    client = clients(hive.port, "fickle", version=4, clean=False).connect()
    client.subscribe("persist/a", qos=1)
    client.subscribe("persist/b", qos=1)
    client.client.unsubscribe("persist/a")
    client.disconnect()
    publisher = clients(hive.port, "pub", version=4).connect()
    publisher.publish("persist/a", b"not for you", qos=1)
    publisher.publish("persist/b", b"for you", qos=1)
    publisher.close()

    hive.kill()
    hive.start()
    back = clients(hive.port, "fickle", version=4, clean=False).connect()
    assert back.session_present is True
    assert back.next_message().payload == b"for you"
    back.no_message(0.5)


def unacked_delivery(port: int, client_id: str, topic: str) -> tuple[RawClient, Publish]:
    """A persistent v3.1.1 subscriber that received one QoS 1 message and did not ack it."""
    raw = RawClient(port)
    raw.connect(4, client_id, clean_start=False)
    raw.subscribe(topic, qos=1)
    with RawClient(port) as publisher:
        publisher.connect(4, "pub")
        pid = publisher.publish(topic, b"in flight", qos=1)
        assert publisher.expect(PubAck).packet_id == pid
    first = raw.expect(Publish)
    assert (first.payload, first.dup, first.qos) == (b"in flight", False, 1)
    return raw, first


def acknowledge_the_redelivery(port: int, client_id: str, first: Publish) -> None:
    """Resume ``client_id``'s session: ``first`` comes again, with DUP and its packet id; once
    acknowledged, nothing more."""
    with RawClient(port) as again:
        assert again.connect(4, client_id, clean_start=False).session_present is True
        redelivered = again.expect(Publish)
        assert redelivered.dup is True
        assert (redelivered.packet_id, redelivered.payload) == (first.packet_id, b"in flight")
        again.send(PubAck(redelivered.packet_id))
        again.expect_nothing(0.5)


def test_unacked_qos1_is_redelivered_with_dup_on_reconnect(hive):
    raw, first = unacked_delivery(hive.port, "forgetful", "persist/inflight")
    raw.close()
    acknowledge_the_redelivery(hive.port, "forgetful", first)
    with RawClient(hive.port) as third:  # acknowledged now: never again
        assert third.connect(4, "forgetful", clean_start=False).session_present is True
        third.expect_nothing(0.5)


def test_unacked_qos1_is_redelivered_with_dup_after_kill9(hive):
    raw, first = unacked_delivery(hive.port, "forgetful", "persist/inflight9")
    hive.kill()
    raw.close()
    hive.start()
    acknowledge_the_redelivery(hive.port, "forgetful", first)


def test_deliveries_acknowledged_or_not_when_the_node_is_killed(hive):
    """A connected subscriber's deliveries wait for their PUBACKs before they are written
    (``<delivery-hold>``); the publisher's PUBACK waits for that. After kill -9, exactly the
    deliveries it did not acknowledge come back, with DUP and their packet ids."""
    subscriber = RawClient(hive.port)
    subscriber.connect(4, "half-acks", clean_start=False)
    subscriber.subscribe("persist/half", qos=1)
    with RawClient(hive.port) as publisher:
        publisher.connect(4, "half-pub")
        packet_ids = [publisher.publish("persist/half", f"{n}".encode(), qos=1)
                      for n in range(30)]  # within the 32 in flight to an MQTT 3 client
        deliveries = [subscriber.expect(Publish) for _ in packet_ids]
        for delivery in deliveries[:15]:
            subscriber.send(PubAck(delivery.packet_id))
        acknowledged = {publisher.expect(PubAck).packet_id for _ in packet_ids}
        assert acknowledged == set(packet_ids)
    # A PUBACK that came after its delivery's hold ran out (a loaded machine) deletes a row;
    # the delete is written within a commit interval, and QoS 1 may deliver again before that.
    time.sleep(1.0)
    hive.kill()
    subscriber.close()
    hive.start()
    with RawClient(hive.port) as again:
        assert again.connect(4, "half-acks", clean_start=False).session_present is True
        redelivered = [again.expect(Publish) for _ in range(15)]
        assert [(p.payload, p.packet_id, p.dup) for p in redelivered] == [
            (d.payload, d.packet_id, True) for d in deliveries[15:]]
        for delivery in redelivered:
            again.send(PubAck(delivery.packet_id))
        again.expect_nothing(0.5)


def test_session_expiry_keeps_counting_across_restart(hive, clients):
    client = clients(hive.port, "mortal", expiry=2, clean=False).connect()
    client.disconnect()
    # A durable write acknowledged after the DISCONNECT: the disconnect time is on disk too.
    mosquitto_pub(hive.port, "sync/barrier", "x", qos=1, retain=True)
    hive.kill()
    time.sleep(2.5)
    hive.start()
    again = clients(hive.port, "mortal", expiry=2, clean=False).connect()
    assert again.session_present is False


# ---------------------------------------------------------------------- shutdown


def test_sigterm_disconnects_v5_clients_with_server_shutting_down(hive, clients):
    client = clients(hive.port, "bystander").connect()
    old = clients(hive.port, "bystander3", version=4).connect()
    assert hive.terminate() == 0
    assert "Hive stopped" in hive.log
    assert client.wait_disconnected() == RC.SERVER_SHUTTING_DOWN
    old.wait_disconnected()


def test_sigterm_keeps_persistent_sessions(hive, clients):
    client = clients(hive.port, "survivor", expiry=3600, clean=False).connect()
    client.subscribe("shutdown/t", qos=1)
    assert hive.terminate() == 0
    client.wait_disconnected()
    hive.start()
    again = clients(hive.port, "survivor", expiry=3600, clean=False).connect()
    assert again.session_present is True

