"""The rules of a CONNECT, decided without the connection: who the client is, on what terms.

:func:`connect_terms` takes the CONNECT, the CONNACK properties extensions answered and the
node's settings, and answers the :class:`ConnectTerms` the channel applies (the client id, keep
alive, session expiry, the client's own limits, the CONNACK's properties), or the
:class:`~hive_core.broker._extension_flow.Refusal` it answers with. No I/O and no clock: each
rule is one call in a unit test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hive_core.broker._extension_flow import Refusal
from hive_core.broker._settings import BrokerSettings
from hive_core.mqtt import MAX_PACKET_SIZE, Connect, PropertyId, ReasonCode

P = PropertyId
RC = ReasonCode


@dataclass(slots=True)
class ConnectTerms:
    """What the node agreed to with a client at CONNECT."""

    client_id: str  # as sent, or assigned by the node
    keep_alive: int  # seconds, as the node allows it
    expiry: int  # the session expiry, capped by the node
    requested_expiry: int  # what the client asked for (MQTT 5), before the cap
    send_window: int  # QoS 1/2 messages in flight to it at most (its receive maximum)
    max_out_packet: int  # the biggest packet it takes
    out_alias_max: int  # topic aliases the node may send it
    problem_info: bool  # it wants reason strings and user properties on errors
    ack: dict[PropertyId, Any]  # the CONNACK's properties


def connect_terms(connect: Connect, ack: dict[PropertyId, Any], settings: BrokerSettings,
                  has_room_for: Callable[[str], bool]) -> ConnectTerms | Refusal:
    """The terms of ``connect`` (``ack``: the CONNACK properties so far, added to), or why it
    is refused; ``has_room_for(client_id)``: whether max-connections lets it in."""
    version = connect.protocol_version
    v5 = version == 5
    client_id = connect.client_id
    if not client_id:
        if not (v5 or (version == 4 and connect.clean_start)):
            return Refusal(RC.CLIENT_IDENTIFIER_NOT_VALID)
        client_id = f"hive-{uuid.uuid4().hex}"
        if v5:
            ack[P.ASSIGNED_CLIENT_IDENTIFIER] = client_id
    if len(client_id) > settings.max_client_id_length:
        return Refusal(RC.CLIENT_IDENTIFIER_NOT_VALID)
    if not has_room_for(client_id):
        return Refusal(RC.QUOTA_EXCEEDED)
    refusal = _will_refusal(connect, settings)
    if refusal is not None:
        return refusal
    keep_alive = connect.keep_alive
    if keep_alive > settings.max_keep_alive or (
            keep_alive == 0 and not settings.allow_unlimited_keep_alive):
        keep_alive = settings.max_keep_alive
        if v5:
            ack[P.SERVER_KEEP_ALIVE] = keep_alive
    terms = ConnectTerms(client_id, keep_alive, 0, 0, settings.inflight_window, MAX_PACKET_SIZE,
                         0, True, ack)
    if not v5:
        terms.expiry = 0 if connect.clean_start else min(0xFFFFFFFF, settings.max_session_expiry)
        return terms
    props = connect.properties
    terms.expiry = terms.requested_expiry = props.get(P.SESSION_EXPIRY_INTERVAL, 0)
    if terms.expiry > settings.max_session_expiry:
        terms.expiry = ack[P.SESSION_EXPIRY_INTERVAL] = settings.max_session_expiry
    terms.send_window = min(props.get(P.RECEIVE_MAXIMUM, 65535), settings.inflight_window)
    terms.max_out_packet = props.get(P.MAXIMUM_PACKET_SIZE, MAX_PACKET_SIZE)
    terms.out_alias_max = min(props.get(P.TOPIC_ALIAS_MAXIMUM, 0), settings.topic_alias_maximum
                              if settings.topic_alias_enabled else 0)
    terms.problem_info = props.get(P.REQUEST_PROBLEM_INFORMATION, 1) == 1
    return terms


def _will_refusal(connect: Connect, settings: BrokerSettings) -> Refusal | None:
    will = connect.will
    if will is None:
        return None
    if will.topic.startswith("$SYS/") or will.topic == "$SYS":
        return Refusal(RC.NOT_AUTHORIZED, "a will may not be published under $SYS/")
    if will.qos > settings.maximum_qos:
        return Refusal(RC.QOS_NOT_SUPPORTED)
    if will.retain and not settings.retain_available:
        return Refusal(RC.RETAIN_NOT_SUPPORTED)
    too_big = settings.topic_too_big(will.topic)
    return Refusal(RC.TOPIC_NAME_INVALID, f"will: {too_big}") if too_big else None


def limits_into(ack: dict[PropertyId, Any], settings: BrokerSettings,
                props: dict[PropertyId, Any], client_id: str) -> None:
    """The node's limits a MQTT 5 CONNACK announces (only those that differ from the default)."""
    if settings.server_receive_maximum != 65535:
        ack[P.RECEIVE_MAXIMUM] = settings.server_receive_maximum
    if settings.maximum_qos < 2:
        ack[P.MAXIMUM_QOS] = settings.maximum_qos
    if not settings.retain_available:
        ack[P.RETAIN_AVAILABLE] = 0
    if settings.max_packet_size < MAX_PACKET_SIZE:
        ack[P.MAXIMUM_PACKET_SIZE] = settings.max_packet_size
    if settings.topic_alias_enabled and settings.topic_alias_maximum:
        ack[P.TOPIC_ALIAS_MAXIMUM] = settings.topic_alias_maximum
    if not settings.wildcard_subscriptions:
        ack[P.WILDCARD_SUBSCRIPTION_AVAILABLE] = 0
    if not settings.subscription_identifiers:
        ack[P.SUBSCRIPTION_IDENTIFIER_AVAILABLE] = 0
    if not settings.shared_subscriptions:
        ack[P.SHARED_SUBSCRIPTION_AVAILABLE] = 0
    if props.get(P.REQUEST_RESPONSE_INFORMATION) == 1:
        ack[P.RESPONSE_INFORMATION] = settings.response_information + client_id
