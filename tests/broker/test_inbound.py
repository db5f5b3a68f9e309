"""The rules of an inbound PUBLISH's properties (broker/_inbound.py): one call each."""

from __future__ import annotations

from hive_core.broker._extension_flow import Refusal
from hive_core.broker._inbound import NO_ALIASES, publish_properties
from hive_core.broker._settings import BrokerSettings
from hive_core.mqtt import PropertyId, ReasonCode

P = PropertyId
RC = ReasonCode
SETTINGS = BrokerSettings(topic_alias_maximum=5, max_message_expiry=60)


def clock() -> float:
    return 1000.0


def test_an_alias_is_learnt_then_resolved_and_not_passed_on() -> None:
    learnt = publish_properties("a/b", {P.TOPIC_ALIAS: 2, P.USER_PROPERTY: [("k", "v")]},
                                NO_ALIASES, SETTINGS, clock)
    assert not isinstance(learnt, Refusal)
    topic, props, expiry_at, aliases = learnt
    assert (topic, props, expiry_at, aliases) == ("a/b", {P.USER_PROPERTY: [("k", "v")]}, None,
                                                  {2: "a/b"})
    resolved = publish_properties("", {P.TOPIC_ALIAS: 2}, aliases, SETTINGS, clock)
    assert not isinstance(resolved, Refusal) and resolved[0] == "a/b" and resolved[3] is aliases


def test_a_wrong_alias_or_a_subscription_id_is_refused() -> None:
    assert publish_properties("t", {P.TOPIC_ALIAS: 6}, NO_ALIASES, SETTINGS, clock) == \
        Refusal(RC.TOPIC_ALIAS_INVALID, "topic alias 6 out of range")
    assert publish_properties("", {P.TOPIC_ALIAS: 3}, NO_ALIASES, SETTINGS, clock) == \
        Refusal(RC.PROTOCOL_ERROR, "unknown topic alias 3")
    assert publish_properties("t", {P.SUBSCRIPTION_IDENTIFIER: [1]}, NO_ALIASES, SETTINGS,
                              clock) == Refusal(RC.PROTOCOL_ERROR, "PUBLISH from a client "
                                                                   "with a subscription id")


def test_an_expiry_interval_becomes_a_time_capped_by_the_node() -> None:
    answer = publish_properties("t", {P.MESSAGE_EXPIRY_INTERVAL: 3600}, NO_ALIASES, SETTINGS,
                                clock)
    assert not isinstance(answer, Refusal)
    assert answer[1] == {} and answer[2] == 1060.0
    assert NO_ALIASES == {}  # the shared empty stays empty
