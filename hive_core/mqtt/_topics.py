"""Topic names, topic filters and how they match (spec 4.7 and 4.8.2)."""

from __future__ import annotations

from hive_ext_api.mqtt_rules import topic_filter_problem, topic_name_problem

from ._errors import MalformedPacket
from ._types import ReasonCode

_SHARE_PREFIX = "$share/"


def validate_topic_name(topic: str) -> None:
    """Refuse a topic name a PUBLISH may not carry (MQTT-4.7.3-1/2, MQTT-4.7.1-1)."""
    problem = topic_name_problem(topic)
    if problem is not None:
        raise MalformedPacket(problem, ReasonCode.TOPIC_NAME_INVALID)


def validate_topic_filter(topic_filter: str) -> None:
    """Refuse a topic filter a SUBSCRIBE or UNSUBSCRIBE may not carry (spec 4.7, 4.8.2)."""
    problem = topic_filter_problem(topic_filter)
    if problem is not None:
        raise MalformedPacket(problem, ReasonCode.TOPIC_FILTER_INVALID)


def parse_shared_subscription(topic_filter: str) -> tuple[str, str] | None:
    """Split "$share/g/a/b" into ("g", "a/b"); None when the filter is not a shared one."""
    if not topic_filter.startswith(_SHARE_PREFIX):
        return None
    group, slash, rest = topic_filter[len(_SHARE_PREFIX) :].partition("/")
    if not slash:
        return None
    return group, rest


def topic_matches(topic_filter: str, topic: str) -> bool:
    """Whether `topic` matches `topic_filter`; a shared subscription matches by its filter.

    Filters starting with a wildcard do not match topics starting with '$' (MQTT-4.7.2-1).
    """
    if topic_filter.startswith(_SHARE_PREFIX):
        shared = parse_shared_subscription(topic_filter)
        if shared is None:
            return False
        topic_filter = shared[1]
    if "+" not in topic_filter and "#" not in topic_filter:
        return topic_filter == topic
    if topic.startswith("$") and topic_filter[0] in "+#":
        return False
    filter_levels = topic_filter.split("/")
    topic_levels = topic.split("/")
    topic_count = len(topic_levels)
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True  # also matches the parent level: "a/#" matches "a"
        if index >= topic_count:
            return False
        if level != "+" and level != topic_levels[index]:
            return False
    return len(filter_levels) == topic_count
