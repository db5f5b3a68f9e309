"""Which topics a permission (an MQTT topic filter, wildcards allowed) lets a client use."""

from __future__ import annotations

SHARE_PREFIX = "$share/"


def is_valid_filter(topic_filter: str) -> bool:
    """An MQTT topic filter: ``+`` and ``#`` fill a whole level, ``#`` only as the last one."""
    if not topic_filter:
        return False
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if level == "#":
            if i != len(levels) - 1:
                return False
        elif level != "+" and ("+" in level or "#" in level):
            return False
    return True


def strip_share(topic_filter: str) -> str:
    """``$share/<group>/<filter>`` -> ``<filter>``: permissions are about the topics, not groups."""
    if topic_filter.startswith(SHARE_PREFIX):
        _, _, rest = topic_filter[len(SHARE_PREFIX):].partition("/")
        return rest
    return topic_filter


def covers(allowed: str, wanted: str) -> bool:
    """True when every topic ``wanted`` matches is also matched by ``allowed``.

    ``wanted`` is a topic name (publish) or a topic filter (subscribe): ``sensors/#`` covers
    ``sensors/+/temperature`` and ``sensors``; ``sensors/+/temperature`` does not cover
    ``sensors/#``. A filter starting with a wildcard never covers a ``$`` topic (MQTT 4.7.2).
    """
    if wanted.startswith("$") and allowed[:1] in ("+", "#"):
        return False
    allowed_levels = allowed.split("/")
    wanted_levels = wanted.split("/")
    for i, level in enumerate(allowed_levels):
        if level == "#":
            return True
        if i >= len(wanted_levels):
            return False
        if level == "+":
            if wanted_levels[i] == "#":
                return False
            continue
        if level != wanted_levels[i]:
            return False
    return len(allowed_levels) == len(wanted_levels)


def expand(permission: str, username: str, client_id: str) -> str | None:
    """Fill ``{username}`` and ``{client_id}`` in; None when a value would smuggle in a level."""
    for value, placeholder in ((username, "{username}"), (client_id, "{client_id}")):
        if placeholder in permission:
            if not value or any(c in value for c in "/+#"):
                return None
            permission = permission.replace(placeholder, value)
    return permission


def allows(permissions: tuple[str, ...], wanted: str, username: str, client_id: str) -> bool:
    """True when one of ``permissions`` covers ``wanted`` for this client."""
    for permission in permissions:
        expanded = expand(permission, username, client_id)
        if expanded is not None and covers(expanded, wanted):
            return True
    return False
