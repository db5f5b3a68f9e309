"""MQTT's rules for what a topic, a filter or an identifier may be (spec 1.5, 2.2.1, 3.8.2,
4.7, 4.8.2), as plain checks that say what is wrong.

The broker's codec refuses a packet by them, and whatever reads persistent state from outside
(a backup file, a data folder) holds each record to the same rules: a record the MQTT path
would have refused must not get in through a file.
"""

from __future__ import annotations

MAX_STRING_BYTES = 0xFFFF  # a UTF-8 Encoded String's length prefix
MAX_PACKET_ID = 0xFFFF
MAX_SUBSCRIPTION_ID = 268_435_455  # a Variable Byte Integer's maximum
MAX_PAYLOAD = 268_435_455
SHARE_PREFIX = "$share/"


def topic_name_problem(topic: object) -> str | None:
    """Why ``topic`` may not be a PUBLISH's topic name (MQTT-4.7.3-1/2, MQTT-4.7.1-1), or
    None when it may."""
    if not isinstance(topic, str):
        return f"topic name is not a string: {type(topic).__name__}"
    if not topic:
        return "topic name is empty"
    if "+" in topic or "#" in topic:
        return f"topic name contains a wildcard: {topic!r}"
    if "\x00" in topic:
        return "topic name contains U+0000"
    if len(topic) > 0x3FFF and _utf8_length(topic) > MAX_STRING_BYTES:
        return "topic name longer than 65535 bytes"
    return None


def topic_filter_problem(topic_filter: object) -> str | None:
    """Why ``topic_filter`` may not be in a SUBSCRIBE (spec 4.7, 4.8.2), or None when it may."""
    if not isinstance(topic_filter, str):
        return f"topic filter is not a string: {type(topic_filter).__name__}"
    if not topic_filter:
        return "topic filter is empty"
    if "\x00" in topic_filter:
        return "topic filter contains U+0000"
    if len(topic_filter) > 0x3FFF and _utf8_length(topic_filter) > MAX_STRING_BYTES:
        return "topic filter longer than 65535 bytes"
    if topic_filter.startswith(SHARE_PREFIX):
        group, slash, rest = topic_filter[len(SHARE_PREFIX):].partition("/")
        if not slash:
            return f"shared subscription without a topic filter: {topic_filter!r}"
        if not group or "+" in group or "#" in group:
            return f"invalid share name {group!r} (MQTT-4.8.2-1/2)"
        if not rest:
            return "shared subscription with an empty topic filter"
        topic_filter = rest
    if "+" not in topic_filter and "#" not in topic_filter:
        return None
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != last):
            return f"'#' must be the whole last level (MQTT-4.7.1-2): {topic_filter!r}"
        if "+" in level and level != "+":
            return f"'+' must fill a whole level (MQTT-4.7.1-3): {topic_filter!r}"
    return None


def is_reserved_topic(topic: str) -> bool:
    """``$SYS`` and below: the broker's own topics, which no client (and no file) publishes."""
    return topic == "$SYS" or topic.startswith("$SYS/")


def qos_problem(qos: object) -> str | None:
    if type(qos) is not int or not 0 <= qos <= 2:
        return f"QoS {qos!r} is not 0, 1 or 2"
    return None


def packet_id_problem(packet_id: object) -> str | None:
    if type(packet_id) is not int or not 1 <= packet_id <= MAX_PACKET_ID:
        return f"packet identifier {packet_id!r} is outside 1..{MAX_PACKET_ID}"
    return None


def subscription_id_problem(subscription_id: object) -> str | None:
    """None is no identifier; one must be 1..268435455 (MQTT-3.8.2.1.2)."""
    if subscription_id is None:
        return None
    if type(subscription_id) is not int or not 1 <= subscription_id <= MAX_SUBSCRIPTION_ID:
        return f"subscription identifier {subscription_id!r} is outside 1..{MAX_SUBSCRIPTION_ID}"
    return None


def client_id_problem(client_id: object) -> str | None:
    if not isinstance(client_id, str):
        return f"client id is not a string: {type(client_id).__name__}"
    if "\x00" in client_id:
        return "client id contains U+0000"
    if len(client_id) > 0x3FFF and _utf8_length(client_id) > MAX_STRING_BYTES:
        return "client id longer than 65535 bytes"
    return None


def _utf8_length(text: str) -> int:
    try:
        return len(text.encode())
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 string at all
        return MAX_STRING_BYTES + 1
