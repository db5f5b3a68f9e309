"""The rules of an inbound PUBLISH's properties, decided without the connection.

:func:`publish_properties` resolves a topic alias (and learns a new one), refuses a subscription
identifier or an alias out of range, turns a message expiry interval into a time, and drops what
does not pass on to subscribers: one pure call, which the channel makes only for a PUBLISH that
has properties (an MQTT 3 one never does).
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from hive_core.broker._extension_flow import Refusal
from hive_core.broker._settings import BrokerSettings
from hive_core.mqtt import PropertyId, ReasonCode

P = PropertyId
RC = ReasonCode
NO_ALIASES: Any = MappingProxyType({})
"""What no connection adds to until it uses topic aliases (an empty dict is 64 bytes)."""
_PASS_THROUGH_DROP = (P.TOPIC_ALIAS, P.MESSAGE_EXPIRY_INTERVAL)

Inbound = tuple[str, dict[PropertyId, Any], float | None, dict[int, str]]


def publish_properties(topic: str, props: dict[PropertyId, Any], aliases: dict[int, str],
                       settings: BrokerSettings,
                       wall_time: Callable[[], float]) -> Inbound | Refusal:
    """(topic, properties for subscribers, expiry time or None, the connection's aliases now),
    or why the PUBLISH is refused. ``aliases`` is the connection's (``NO_ALIASES`` until it
    uses one); ``wall_time`` is read only for a message expiry interval."""
    alias = props.get(P.TOPIC_ALIAS)
    if alias is not None:
        if not 0 < alias <= (settings.topic_alias_maximum if settings.topic_alias_enabled
                             else 0):
            return Refusal(RC.TOPIC_ALIAS_INVALID, f"topic alias {alias} out of range")
        if topic:
            if aliases is NO_ALIASES:
                aliases = {}
            aliases[alias] = topic
        else:
            known = aliases.get(alias)
            if known is None:
                return Refusal(RC.PROTOCOL_ERROR, f"unknown topic alias {alias}")
            topic = known
    if P.SUBSCRIPTION_IDENTIFIER in props:
        return Refusal(RC.PROTOCOL_ERROR, "PUBLISH from a client with a subscription id")
    expiry_at = None
    interval = props.get(P.MESSAGE_EXPIRY_INTERVAL)
    if interval is not None:
        expiry_at = wall_time() + min(interval, settings.max_message_expiry)
    if alias is not None or interval is not None:
        props = {k: v for k, v in props.items() if k not in _PASS_THROUGH_DROP}
    return topic, props, expiry_at, aliases
