"""Prefix rules (``legacy/`` -> ``sensors/``) and the JSON envelope that stamps a message."""

from __future__ import annotations

import json
from typing import Any

DEFAULT_RULES: dict[str, str] = {"legacy/": "sensors/"}


class RulesError(ValueError):
    """The rules text does not say ``from=to,from=to``, or a side is not a plain topic prefix."""


def parse_rules(text: str) -> dict[str, str]:
    """``"legacy/=sensors/,old/=new/"`` -> ``{"legacy/": "sensors/", "old/": "new/"}``."""
    rules: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        source, sep, target = item.partition("=")
        if not sep or not source:
            raise RulesError(f"rule {item!r} is not 'from-prefix=to-prefix'")
        for side in (source, target):
            if "+" in side or "#" in side or side.startswith("$"):
                raise RulesError(f"rule {item!r}: prefixes are plain topic levels, "
                                 "without wildcards or a leading $")
        rules[source] = target
    return rules


def rewrite_topic(topic: str, rules: dict[str, str]) -> str | None:
    """The topic after the longest matching prefix rule, or None when no rule matches."""
    best = max((source for source in rules if topic.startswith(source)), key=len, default=None)
    if best is None:
        return None
    rewritten = rules[best] + topic[len(best):]
    return rewritten or None  # an empty topic is not a topic: leave the message alone


def looks_like_json(payload: bytes) -> bool:
    return payload.lstrip()[:1] in (b"{", b"[")


def wrap_json(payload: bytes, timestamp_ms: int, received_by: str) -> bytes | None:
    """``{"timestamp": ..., "received_by": ..., "payload": <the JSON>}``, or None if not JSON."""
    if not looks_like_json(payload):
        return None
    try:
        document: Any = json.loads(payload)
    except ValueError:  # UnicodeDecodeError is one too
        return None
    envelope = {"timestamp": timestamp_ms, "received_by": received_by, "payload": document}
    return json.dumps(envelope, separators=(",", ":")).encode()
