"""Topic names, topic filters and how they match (spec 4.7 and 4.8.2)."""

from __future__ import annotations

from ._errors import MalformedPacket
from ._types import ReasonCode

_SHARE_PREFIX = "$share/"


def validate_topic_name(topic: str) -> None:
    """Refuse a topic name a PUBLISH may not carry (MQTT-4.7.3-1/2, MQTT-4.7.1-1)."""
    if not topic:
        raise MalformedPacket("topic name is empty", ReasonCode.TOPIC_NAME_INVALID)
    if "+" in topic or "#" in topic:
        raise MalformedPacket(
            f"topic name contains a wildcard: {topic!r}", ReasonCode.TOPIC_NAME_INVALID
        )
    if "\x00" in topic:
        raise MalformedPacket("topic name contains U+0000", ReasonCode.TOPIC_NAME_INVALID)
    if len(topic) > 0x3FFF and len(topic.encode()) > 0xFFFF:
        raise MalformedPacket("topic name longer than 65535 bytes", ReasonCode.TOPIC_NAME_INVALID)


def validate_topic_filter(topic_filter: str) -> None:
    """Refuse a topic filter a SUBSCRIBE or UNSUBSCRIBE may not carry (spec 4.7, 4.8.2)."""
    if not topic_filter:
        raise MalformedPacket("topic filter is empty", ReasonCode.TOPIC_FILTER_INVALID)
    if "\x00" in topic_filter:
        raise MalformedPacket("topic filter contains U+0000", ReasonCode.TOPIC_FILTER_INVALID)
    if len(topic_filter) > 0x3FFF and len(topic_filter.encode()) > 0xFFFF:
        raise MalformedPacket(
            "topic filter longer than 65535 bytes", ReasonCode.TOPIC_FILTER_INVALID
        )
    if topic_filter.startswith(_SHARE_PREFIX):
        shared = parse_shared_subscription(topic_filter)
        if shared is None:
            raise MalformedPacket(
                f"shared subscription without a topic filter: {topic_filter!r}",
                ReasonCode.TOPIC_FILTER_INVALID,
            )
        group, topic_filter = shared
        if not group or "+" in group or "#" in group:
            raise MalformedPacket(
                f"invalid share name {group!r} (MQTT-4.8.2-1/2)", ReasonCode.TOPIC_FILTER_INVALID
            )
        if not topic_filter:
            raise MalformedPacket(
                "shared subscription with an empty topic filter", ReasonCode.TOPIC_FILTER_INVALID
            )
    if "+" not in topic_filter and "#" not in topic_filter:
        return
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != last):
            raise MalformedPacket(
                f"'#' must be the whole last level (MQTT-4.7.1-2): {topic_filter!r}",
                ReasonCode.TOPIC_FILTER_INVALID,
            )
        if "+" in level and level != "+":
            raise MalformedPacket(
                f"'+' must fill a whole level (MQTT-4.7.1-3): {topic_filter!r}",
                ReasonCode.TOPIC_FILTER_INVALID,
            )


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
