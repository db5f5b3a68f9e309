"""Topic permissions: MQTT wildcard coverage, placeholders, shared subscriptions."""

import pytest

from hive_ext_file_auth._permissions import allows, covers, expand, is_valid_filter, strip_share


@pytest.mark.parametrize(("allowed", "wanted", "expected"), [
    ("sensors/#", "sensors/a/temperature", True),
    ("sensors/#", "sensors", True),
    ("sensors/#", "sensors/+/temperature", True),
    ("sensors/#", "sensors/#", True),
    ("sensors/+/temperature", "sensors/a/temperature", True),
    ("sensors/+/temperature", "sensors/+/temperature", True),
    ("sensors/+/temperature", "sensors/#", False),
    ("sensors/+/temperature", "sensors/a/humidity", False),
    ("sensors/+/temperature", "sensors/a/temperature/raw", False),
    ("sensors/a", "sensors/+", False),
    ("sensors/a", "sensors/a", True),
    ("#", "anything/at/all", True),
    ("#", "$SYS/broker/uptime", False),
    ("+/broker/uptime", "$SYS/broker/uptime", False),
    ("$SYS/#", "$SYS/broker/uptime", True),
])
def test_covers(allowed: str, wanted: str, expected: bool) -> None:
    assert covers(allowed, wanted) is expected


@pytest.mark.parametrize(("topic_filter", "valid"), [
    ("a/b", True), ("a/+/c", True), ("a/#", True), ("#", True), ("+", True),
    ("a/#/c", False), ("a+/b", False), ("a/b#", False), ("", False),
])
def test_valid_filters(topic_filter: str, valid: bool) -> None:
    assert is_valid_filter(topic_filter) is valid


def test_placeholders_are_filled_and_cannot_add_levels() -> None:
    assert expand("sensors/{username}/#", "s1", "c1") == "sensors/s1/#"
    assert expand("commands/{client_id}", "s1", "c1") == "commands/c1"
    assert expand("sensors/{username}/#", "a/b", "c1") is None
    assert expand("sensors/{client_id}/#", "s1", "#") is None
    assert allows(("sensors/{username}/#",), "sensors/s1/temperature", "s1", "c1")
    assert not allows(("sensors/{username}/#",), "sensors/s2/temperature", "s1", "c1")


def test_shared_subscriptions_are_checked_by_their_filter() -> None:
    assert strip_share("$share/group/sensors/#") == "sensors/#"
    assert strip_share("sensors/#") == "sensors/#"
