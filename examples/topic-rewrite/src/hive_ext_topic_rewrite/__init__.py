"""Hive example extension: an inbound interceptor that moves topics and stamps messages.

- Topics: the longest matching prefix rule applies, ``legacy/dev-1/temperature`` becomes
  ``sensors/dev-1/temperature`` by default. ``HIVE_TOPIC_REWRITE_RULES="a/=b/,c/=d/"``
  replaces the defaults.
- Every message gets the user properties ``received-by`` (``HIVE_TOPIC_REWRITE_NODE``, default
  the host name) and ``received-at`` (UTC, ISO 8601); MQTT 3 subscribers do not see them.
- A JSON payload is wrapped as ``{"timestamp": <ms>, "received_by": ..., "payload": <JSON>}``,
  unless ``HIVE_TOPIC_REWRITE_WRAP_JSON=0``.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hive_ext_api import ExtensionContext, ExtensionRefused, PublishMessage, hookimpl

from hive_ext_topic_rewrite._rules import (
    DEFAULT_RULES,
    RulesError,
    parse_rules,
    rewrite_topic,
    wrap_json,
)

__version__ = "1.0.0"

HIVE_API = ">=1.0,<2"

RULES_ENV = "HIVE_TOPIC_REWRITE_RULES"
NODE_ENV = "HIVE_TOPIC_REWRITE_NODE"
WRAP_JSON_ENV = "HIVE_TOPIC_REWRITE_WRAP_JSON"

__all__ = ["DEFAULT_RULES", "HIVE_API", "NODE_ENV", "RULES_ENV", "WRAP_JSON_ENV", "parse_rules",
           "rewrite_topic", "wrap_json"]


@dataclass(frozen=True, slots=True)
class Settings:
    rules: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_RULES))
    node_name: str = field(default_factory=socket.gethostname)
    wrap_json: bool = True


_settings = Settings()


@hookimpl
def hive_extension_start(context: ExtensionContext) -> None:
    try:
        rules = parse_rules(os.environ[RULES_ENV]) if RULES_ENV in os.environ else DEFAULT_RULES
    except RulesError as exc:
        raise ExtensionRefused(f"{RULES_ENV}: {exc}") from None
    global _settings
    _settings = Settings(
        rules=dict(rules),
        node_name=os.environ.get(NODE_ENV) or socket.gethostname(),
        wrap_json=os.environ.get(WRAP_JSON_ENV, "1").strip().lower() not in (
            "0", "false", "no", "off"))
    context.log.info("topic-rewrite: rules %s, received-by %s, JSON envelope %s", _settings.rules,
                     _settings.node_name, "on" if _settings.wrap_json else "off")


@hookimpl
def hive_intercept_publish_inbound(publish: PublishMessage) -> None:
    rewritten = rewrite_topic(publish.topic, _settings.rules)
    if rewritten is not None:
        publish.topic = rewritten
    now_ms = time.time_ns() // 1_000_000
    publish.user_properties.append(("received-by", _settings.node_name))
    received_at = datetime.fromtimestamp(now_ms / 1000, UTC).isoformat(timespec="milliseconds")
    publish.user_properties.append(("received-at", received_at))
    if _settings.wrap_json:
        wrapped = wrap_json(publish.payload, now_ms, _settings.node_name)
        if wrapped is not None:
            publish.payload = wrapped
            publish.content_type = "application/json"
            publish.payload_format_indicator = 1
