"""The rules of a CONNECT (broker/_connect.py), each one call: no connection, no loop, no clock."""

from __future__ import annotations

from typing import Any

import pytest

from hive_core.broker._connect import ConnectTerms, connect_terms, limits_into
from hive_core.broker._extension_flow import Refusal
from hive_core.broker._settings import BrokerSettings
from hive_core.mqtt import Connect, PropertyId, ReasonCode, Will

P = PropertyId
RC = ReasonCode


def terms(connect: Connect, settings: BrokerSettings | None = None, room: bool = True,
          ack: dict[PropertyId, Any] | None = None) -> ConnectTerms | Refusal:
    return connect_terms(connect, {} if ack is None else ack, settings or BrokerSettings(),
                         lambda _client_id: room)


def test_an_mqtt5_client_without_an_id_is_given_one_and_told() -> None:
    ack: dict[PropertyId, Any] = {}
    answer = terms(Connect("", 5), ack=ack)
    assert isinstance(answer, ConnectTerms)
    assert answer.client_id.startswith("hive-") and ack[P.ASSIGNED_CLIENT_IDENTIFIER] == \
        answer.client_id


def test_an_mqtt311_clean_client_without_an_id_is_given_one_silently() -> None:
    ack: dict[PropertyId, Any] = {}
    answer = terms(Connect("", 4, clean_start=True), ack=ack)
    assert isinstance(answer, ConnectTerms) and answer.client_id.startswith("hive-")
    assert ack == {}


@pytest.mark.parametrize("connect", [Connect("", 4, clean_start=False), Connect("", 3)])
def test_an_empty_id_is_refused_where_mqtt_says_so(connect: Connect) -> None:
    assert terms(connect) == Refusal(RC.CLIENT_IDENTIFIER_NOT_VALID)


def test_a_too_long_id_and_a_full_node_are_refused() -> None:
    assert terms(Connect("x" * 11), BrokerSettings(max_client_id_length=10)) == \
        Refusal(RC.CLIENT_IDENTIFIER_NOT_VALID)
    assert terms(Connect("c"), room=False) == Refusal(RC.QUOTA_EXCEEDED)


@pytest.mark.parametrize(("will", "settings", "refusal"), [
    (Will("$SYS/x", b""), BrokerSettings(), Refusal(RC.NOT_AUTHORIZED,
                                                    "a will may not be published under $SYS/")),
    (Will("t", b"", qos=2), BrokerSettings(maximum_qos=1), Refusal(RC.QOS_NOT_SUPPORTED)),
    (Will("t", b"", retain=True), BrokerSettings(retain_available=False),
     Refusal(RC.RETAIN_NOT_SUPPORTED)),
])
def test_a_will_the_node_cannot_take_is_refused(will: Will, settings: BrokerSettings,
                                                refusal: Refusal) -> None:
    assert terms(Connect("c", will=will), settings) == refusal


def test_keep_alive_is_capped_and_an_mqtt5_client_told() -> None:
    settings = BrokerSettings(max_keep_alive=30, allow_unlimited_keep_alive=False)
    ack: dict[PropertyId, Any] = {}
    answer = terms(Connect("c", 5, keep_alive=0), settings, ack=ack)
    assert isinstance(answer, ConnectTerms) and answer.keep_alive == 30
    assert ack[P.SERVER_KEEP_ALIVE] == 30
    answer = terms(Connect("c", 4, keep_alive=90), settings)
    assert isinstance(answer, ConnectTerms) and answer.keep_alive == 30


def test_an_mqtt5_clients_limits_and_expiry_are_taken_and_capped() -> None:
    settings = BrokerSettings(max_session_expiry=100, inflight_window=50,
                              topic_alias_maximum=5)
    ack: dict[PropertyId, Any] = {}
    answer = terms(Connect("c", 5, properties={
        P.SESSION_EXPIRY_INTERVAL: 3600, P.RECEIVE_MAXIMUM: 10, P.MAXIMUM_PACKET_SIZE: 1000,
        P.TOPIC_ALIAS_MAXIMUM: 20, P.REQUEST_PROBLEM_INFORMATION: 0}), settings, ack=ack)
    assert isinstance(answer, ConnectTerms)
    assert (answer.expiry, answer.requested_expiry, ack[P.SESSION_EXPIRY_INTERVAL]) == (
        100, 3600, 100)
    assert (answer.send_window, answer.max_out_packet, answer.out_alias_max) == (10, 1000, 5)
    assert answer.problem_info is False


def test_an_mqtt3_session_lives_until_the_nodes_maximum_unless_clean() -> None:
    settings = BrokerSettings(max_session_expiry=100)
    kept, clean = terms(Connect("c", 4, clean_start=False), settings), terms(Connect("c", 4))
    assert isinstance(kept, ConnectTerms) and isinstance(clean, ConnectTerms)
    assert (kept.expiry, clean.expiry) == (100, 0)


def test_the_connack_announces_only_the_limits_that_differ_from_mqtts_defaults() -> None:
    ack: dict[PropertyId, Any] = {}
    limits_into(ack, BrokerSettings(), {}, "c")
    default_ack = dict(ack)
    limits_into(ack, BrokerSettings(maximum_qos=1, retain_available=False), {}, "c")
    assert ack[P.MAXIMUM_QOS] == 1 and ack[P.RETAIN_AVAILABLE] == 0
    assert P.MAXIMUM_QOS not in default_ack
