"""Topic names, topic filters, shared subscriptions and matching (spec 4.7, 4.8.2)."""

from __future__ import annotations

import pytest

from hive_core.mqtt import (
    MalformedPacket,
    ReasonCode,
    parse_shared_subscription,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)

VALID_NAMES = ["a", "a/b", "/", "/a", "a/", "$SYS/broker/load", "ü/€", " ", "a//b", "x" * 65535]
INVALID_NAMES = ["", "a/+", "+", "#", "a/#", "a+b", "a\x00b", "é" * 32768]


@pytest.mark.parametrize("topic", VALID_NAMES)
def test_valid_topic_name(topic: str) -> None:
    validate_topic_name(topic)


@pytest.mark.parametrize("topic", INVALID_NAMES)
def test_invalid_topic_name(topic: str) -> None:
    with pytest.raises(MalformedPacket) as caught:
        validate_topic_name(topic)
    assert caught.value.reason_code == ReasonCode.TOPIC_NAME_INVALID


VALID_FILTERS = [
    "#",
    "+",
    "a/#",
    "a/+/b",
    "+/+",
    "/+",
    "+/",
    "a//#",
    "$SYS/#",
    "sport/tennis/player1",
    "$share/g/a/b",
    "$share/g/#",
    "$share/g/+/x",
    "$share/group-1//",
    "$sharex/#",
    "$share",
]
INVALID_FILTERS = [
    "",
    "a#",
    "a/#/b",
    "#/a",
    "a/b#",
    "a+",
    "+a/b",
    "a/+b",
    "a\x00",
    "$share/g",
    "$share/g/",
    "$share//a",
    "$share/g+/a",
    "$share/g#/a",
    "$share/g/a/#/b",
    "é" * 32768,
]


@pytest.mark.parametrize("topic_filter", VALID_FILTERS)
def test_valid_topic_filter(topic_filter: str) -> None:
    validate_topic_filter(topic_filter)


@pytest.mark.parametrize("topic_filter", INVALID_FILTERS)
def test_invalid_topic_filter(topic_filter: str) -> None:
    with pytest.raises(MalformedPacket) as caught:
        validate_topic_filter(topic_filter)
    assert caught.value.reason_code == ReasonCode.TOPIC_FILTER_INVALID


@pytest.mark.parametrize(
    ("topic_filter", "expected"),
    [
        ("$share/g/a/b", ("g", "a/b")),
        ("$share/g/#", ("g", "#")),
        ("$share/g//", ("g", "/")),
        ("$share/g", None),
        ("a/b", None),
        ("$SYS/x", None),
        ("$sharegroup/a", None),
    ],
)
def test_parse_shared_subscription(topic_filter: str, expected: tuple[str, str] | None) -> None:
    assert parse_shared_subscription(topic_filter) == expected


MATCHES = [
    ("a/b", "a/b", True),
    ("a/b", "a/c", False),
    ("a/b", "a/b/c", False),
    ("#", "a", True),
    ("#", "a/b/c", True),
    ("#", "/", True),
    ("a/#", "a", True),  # the parent level matches (4.7.1.2)
    ("a/#", "a/b/c", True),
    ("a/#", "ab", False),
    ("a/#", "b/a", False),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking/wimbledon", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/tennis/+", "sport/tennis", False),
    ("sport/+", "sport/", True),
    ("+", "a", True),
    ("+", "a/b", False),
    ("+", "/finance", False),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+/b/+", "a/b/c", True),
    ("+/#", "a", True),
    ("a//b", "a//b", True),
    ("a/+/b", "a//b", True),
    # MQTT-4.7.2-1: wildcards at the first level do not match $ topics
    ("#", "$SYS/broker", False),
    ("+/broker", "$SYS/broker", False),
    ("+", "$SYS", False),
    ("$SYS/#", "$SYS/broker/load", True),
    ("$SYS/+/load", "$SYS/broker/load", True),
    ("$SYS", "$SYS", True),
    ("a/#", "a/$SYS", True),
    # shared subscriptions match by their filter
    ("$share/g/a/+", "a/b", True),
    ("$share/g/#", "a/b", True),
    ("$share/g/#", "$SYS/x", False),
    ("$share/g/a", "b", False),
    ("$share/g", "$share/g", False),
]


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), MATCHES)
def test_topic_matches(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_matches(topic_filter, topic) is expected
