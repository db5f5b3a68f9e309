"""Application messages inside one node, and their outbound encoding (once per fan-out)."""

from __future__ import annotations

import time
from typing import Any

from hive_core.mqtt import PropertyId, encode_properties, encode_publish
from hive_ext_api import PublishMessage

_EXPIRY = PropertyId.MESSAGE_EXPIRY_INTERVAL
_SUB_ID = PropertyId.SUBSCRIPTION_IDENTIFIER
_ALIAS = PropertyId.TOPIC_ALIAS
_USER = PropertyId.USER_PROPERTY


class Message:
    """One published message, shared by every delivery of it.

    ``properties`` holds what passes through to subscribers unchanged (payload format, content type,
    response topic, correlation data, user properties, message expiry); topic alias and
    subscription identifiers are per delivery and never stored here.
    """

    __slots__ = ("_encoded", "expiry_at", "mid", "payload", "properties", "publisher_id", "qos",
                 "rescued", "retain", "topic")

    def __init__(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: dict[PropertyId, Any] | None,
        publisher_id: str,
        expiry_at: float | None = None,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties or None
        self.publisher_id = publisher_id
        self.expiry_at = expiry_at
        # In a cluster, once it is sent to another node: (origin node id, origin's serial).
        self.mid: tuple[str, int] | None = None
        # Rescued for a failed node (a takeover): (that node, the origin's incarnation, the
        # frame's place in what the origin sent it). If the node was only frozen, it may have
        # handled it after all: a merge then skips it (see Forwarding.handled_before).
        self.rescued: tuple[str, int, int] | None = None
        self._encoded: dict[tuple[Any, ...], tuple[bytes, bytes]] | None = None

    def expired(self, now: float) -> bool:
        return self.expiry_at is not None and now >= self.expiry_at

    @property
    def has_properties(self) -> bool:
        """Any MQTT 5 property, a message expiry included (``hive_ext_api.ReceivedPublish``)."""
        return self.properties is not None or self.expiry_at is not None

    def remaining_expiry(self) -> int | None:
        """The message expiry interval a subscriber would see now (None: never expires)."""
        if self.expiry_at is None:
            return None
        return max(0, int(self.expiry_at - time.time() + 0.999))

    def to_publish_message(self) -> PublishMessage:
        """A copy as extensions see it, with its properties (``hive_ext_api.PublishMessage``)."""
        props = self.properties or {}
        return PublishMessage(
            self.topic, self.payload, self.qos, self.retain, list(props.get(_USER, ())),
            props.get(PropertyId.CONTENT_TYPE), props.get(PropertyId.RESPONSE_TOPIC),
            props.get(PropertyId.CORRELATION_DATA),
            props.get(PropertyId.PAYLOAD_FORMAT_INDICATOR), self.remaining_expiry())

    def properties_for(self, subscription_ids: tuple[int, ...] | None) -> dict[PropertyId, Any]:
        props = dict(self.properties) if self.properties else {}
        if self.expiry_at is not None:
            props[_EXPIRY] = self.remaining_expiry()
        if subscription_ids:
            props[_SUB_ID] = list(subscription_ids)
        return props

    def encoded(
        self, version: int, qos: int, retain: bool, subscription_ids: tuple[int, ...] | None
    ) -> tuple[bytes, bytes]:
        """The PUBLISH bytes split around the packet identifier: (head, tail).

        For QoS 0 the whole packet is ``head`` and ``tail`` is empty; for QoS 1/2 a delivery writes
        head + packet id + tail. Cached per distinct variant, so a fan-out encodes each once.
        """
        v5 = version == 5
        key = (v5, qos, retain, subscription_ids if v5 else None)
        cache = self._encoded
        if cache is None:
            cache = self._encoded = {}
        elif self.expiry_at is None or not v5:  # a v5 expiry counts down: encode afresh
            hit = cache.get(key)
            if hit is not None:
                return hit
        props = None
        if v5 and (self.properties or subscription_ids or self.expiry_at is not None):
            props = encode_properties(self.properties_for(subscription_ids))
        raw = encode_publish(self.topic, self.payload, qos, retain, False, 1 if qos else None,
                             props, version)
        if qos:
            at = _packet_id_offset(raw, self.topic)
            parts = (raw[:at], raw[at + 2 :])
        else:
            parts = (raw, b"")
        cache[key] = parts
        return parts

    def encoded_with_alias(
        self, version: int, qos: int, retain: bool, subscription_ids: tuple[int, ...] | None,
        alias: int, send_topic: bool,
    ) -> tuple[bytes, bytes]:
        """A per-client variant carrying an outbound topic alias (never cached)."""
        props = self.properties_for(subscription_ids)
        props[_ALIAS] = alias
        topic = self.topic if send_topic else ""
        raw = encode_publish(topic, self.payload, qos, retain, False, 1 if qos else None,
                             encode_properties(props), version)
        if qos:
            at = _packet_id_offset(raw, topic)
            return raw[:at], raw[at + 2 :]
        return raw, b""

    def release_cache(self) -> None:
        self._encoded = None


def _packet_id_offset(raw: bytes, topic: str) -> int:
    i = 1
    while raw[i] & 0x80:
        i += 1
    return i + 1 + 2 + len(topic.encode())
