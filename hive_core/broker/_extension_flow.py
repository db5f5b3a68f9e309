"""The steps of the MQTT flows where extensions have a say: CONNECT, AUTH, PUBLISH, SUBSCRIBE.

Only taken when an extension implements the hook concerned; a node without extensions never
enters this module. Each step answers with a decision (accept with these CONNACK properties,
refuse with this reason code, these subscriptions, ...) and leaves it to the channel to act on it;
an enhanced-authentication exchange talks to the client through an :class:`AuthConversation`.
A step answers synchronously when every implementation is a plain ``def``; an ``async``
implementation makes it return an awaitable, and the channel then holds its later packets back
until the answer is in (so order is kept).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from hive_core.broker._message import Message
from hive_core.mqtt import (
    Auth,
    Connect,
    MQTTError,
    PropertyId,
    ReasonCode,
    Subscribe,
    SubscriptionRequest,
    validate_topic_name,
)
from hive_core.plugins import Extensions
from hive_ext_api import (
    AuthExchange,
    ClientInfo,
    ConnectInfo,
    PublishMessage,
    SubscriptionInfo,
)

log = logging.getLogger("hive.extensions")

P = PropertyId
RC = ReasonCode


@dataclass(slots=True, frozen=True)
class Refusal:
    """An extension said no: the reason code (and string) the client is refused with."""

    reason_code: int
    reason_string: str | None = None


class AuthConversation(Protocol):
    """The client's side of an AUTH exchange, as the channel offers it."""

    def send_auth(self, properties: dict[PropertyId, Any]) -> None:
        """Send AUTH (continue authentication) with these properties, now."""
        ...

    async def next_auth(self) -> Auth | None:
        """The client's next AUTH packet; None when the connection ended or took too long."""
        ...


def refusal(answer: Any) -> int | None:
    """An authorizer's answer as a reason code to refuse with, or None to allow."""
    if answer is None or answer is True:
        return None
    if answer is False:
        return RC.NOT_AUTHORIZED
    code = int(answer)
    return code if code >= 0x80 else None


# ---------------------------------------------------------------------------- CONNECT and AUTH


def connect_info(info: ClientInfo, packet: Connect) -> ConnectInfo:
    props = packet.properties
    return ConnectInfo(info, packet.password, packet.clean_start, packet.keep_alive,
                       props.get(P.SESSION_EXPIRY_INTERVAL, 0),
                       list(props.get(P.USER_PROPERTY, ())),
                       props.get(P.AUTHENTICATION_METHOD), props.get(P.AUTHENTICATION_DATA))


async def connect(extensions: Extensions, info: ClientInfo, packet: Connect,
                  conversation: AuthConversation) -> dict[PropertyId, Any] | Refusal | None:
    """Authenticate (simple or enhanced), authorize the will, run the connect interceptors.

    Returns the CONNACK properties to accept with (``packet`` may have been changed by an
    interceptor), a :class:`Refusal`, or None when the connection ended during the exchange.
    """
    props = packet.properties
    request = connect_info(info, packet)
    ack: dict[PropertyId, Any] = {}
    method = request.authentication_method
    if method is not None:
        exchange = AuthExchange(info, method, request.authentication_data, 0)
        outcome = await authenticate_enhanced(extensions, exchange, conversation)
        if not isinstance(outcome, bytes):
            return outcome
        ack[P.AUTHENTICATION_METHOD] = method
        if outcome:
            ack[P.AUTHENTICATION_DATA] = outcome
    else:
        decision = await extensions.authenticate(request)
        if not decision.allow:
            return Refusal(decision.reason_code, decision.reason_string)
        if decision.user_properties:  # into the CONNACK (MQTT 5 clients only see them)
            ack[P.USER_PROPERTY] = [(str(k), str(v)) for k, v in decision.user_properties]
    will = packet.will
    if will is not None and extensions.authorizes_publish:
        answer = await extensions.resolved(
            extensions.authorize_publish(info, will.topic, will.qos, will.retain))
        code = refusal(answer)
        if code is not None:
            return Refusal(code, "the will may not be published")
    if extensions.intercepts_connect:
        await extensions.intercept_connect(request)
        packet.client_id = info.client_id
        packet.username = info.username
        keep_alive = min(max(int(request.keep_alive), 0), 0xFFFF)
        if keep_alive != packet.keep_alive and packet.protocol_version == 5:
            ack[P.SERVER_KEEP_ALIVE] = keep_alive  # else the client pings on its own schedule
        packet.keep_alive = keep_alive
        if request.user_properties:
            props[P.USER_PROPERTY] = [(str(k), str(v)) for k, v in request.user_properties]
        else:
            props.pop(P.USER_PROPERTY, None)
    return ack


async def authenticate_enhanced(extensions: Extensions, exchange: AuthExchange,
                                conversation: AuthConversation) -> bytes | Refusal | None:
    """Run an AUTH exchange to its end: the final data (b"" when none), a refusal, or None
    when the connection ended."""
    method = exchange.method
    while True:
        step = await extensions.enhanced_authenticate(exchange)
        if step is None:
            return Refusal(RC.BAD_AUTHENTICATION_METHOD, f"no extension handles {method!r}")
        if step.outcome == "success":
            return step.data or b""
        if step.outcome != "continue":
            return Refusal(step.reason_code, step.reason_string)
        props: dict[PropertyId, Any] = {P.AUTHENTICATION_METHOD: method}
        if step.data is not None:
            props[P.AUTHENTICATION_DATA] = step.data
        conversation.send_auth(props)
        reply = await conversation.next_auth()
        if reply is None:
            return None
        if (reply.reason_code != RC.CONTINUE_AUTHENTICATION
                or reply.properties.get(P.AUTHENTICATION_METHOD) != method):
            return Refusal(RC.PROTOCOL_ERROR, "AUTH with another method or reason")
        exchange.data = reply.properties.get(P.AUTHENTICATION_DATA)
        exchange.step += 1


async def reauthenticate(extensions: Extensions, info: ClientInfo, packet: Auth,
                         method: str | None,
                         conversation: AuthConversation) -> dict[PropertyId, Any] | Refusal | None:
    """A connected client asked to authenticate again (AUTH 0x19): the properties of the final
    AUTH (success), a refusal, or None when the connection ended."""
    props = packet.properties
    if method is None or props.get(P.AUTHENTICATION_METHOD) != method \
            or packet.reason_code != RC.RE_AUTHENTICATE:
        return Refusal(RC.PROTOCOL_ERROR, "re-authentication must use the CONNECT's method")
    exchange = AuthExchange(info, method, props.get(P.AUTHENTICATION_DATA), 0)
    outcome = await authenticate_enhanced(extensions, exchange, conversation)
    if not isinstance(outcome, bytes):
        return outcome
    done: dict[PropertyId, Any] = {P.AUTHENTICATION_METHOD: method}
    if outcome:
        done[P.AUTHENTICATION_DATA] = outcome
    return done


# ---------------------------------------------------------------------------- PUBLISH


def apply_publish_message(message: Message, publish: PublishMessage) -> None:
    """Write an interceptor's changes back into a message nobody else holds yet."""
    validate_topic_name(publish.topic)
    message.topic = publish.topic
    message.payload = bytes(publish.payload)
    message.qos = min(max(int(publish.qos), 0), 2)
    message.retain = bool(publish.retain)
    props: dict[PropertyId, Any] = dict(message.properties or {})
    for key, value in ((P.CONTENT_TYPE, publish.content_type),
                       (P.RESPONSE_TOPIC, publish.response_topic),
                       (P.CORRELATION_DATA, publish.correlation_data),
                       (P.PAYLOAD_FORMAT_INDICATOR, publish.payload_format_indicator)):
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    if publish.user_properties:
        props[P.USER_PROPERTY] = [(str(k), str(v)) for k, v in publish.user_properties]
    else:
        props.pop(P.USER_PROPERTY, None)
    message.properties = props or None
    interval = publish.message_expiry_interval
    if interval is None:
        message.expiry_at = None
    elif interval != message.remaining_expiry():  # unchanged: keep the exact deadline
        message.expiry_at = time.time() + max(0, int(interval))
    message.release_cache()


def check_publish(extensions: Extensions, info: ClientInfo,
                  message: Message) -> int | Awaitable[int | None] | None:
    """Authorization, then the inbound interceptors: None lets the message through."""
    if extensions.authorizes_publish:
        answer = extensions.authorize_publish(info, message.topic, message.qos, message.retain)
        if inspect.isawaitable(answer):
            return _check_publish_later(extensions, info, message, answer)
        code = refusal(answer)
        if code is not None:
            return code
    if extensions.intercepts_inbound:
        return _intercept_inbound(extensions, info, message)
    return None


async def _check_publish_later(extensions: Extensions, info: ClientInfo, message: Message,
                               answer: Awaitable[Any]) -> int | None:
    code = refusal(await answer)
    if code is not None:
        return code
    if extensions.intercepts_inbound:
        result = _intercept_inbound(extensions, info, message)
        return await result if inspect.isawaitable(result) else result
    return None


def _intercept_inbound(extensions: Extensions, info: ClientInfo,
                       message: Message) -> int | Awaitable[int | None] | None:
    if message.properties or message.expiry_at is not None:
        publish = message.to_publish_message()
    else:  # most messages: nothing beyond topic, payload, QoS and retain to copy or compare
        # (every field given: filling the dataclass's defaults made the constructor 1.6x slower)
        publish = PublishMessage(message.topic, message.payload, message.qos, message.retain, [],
                                 None, None, None, None, None)
    calls = extensions.inbound_calls
    if calls is None:  # an async interceptor among them
        answer = extensions.first(_INBOUND, client=info, publish=publish)
    else:
        answer = None
        for impl, call, clock in calls:
            clock.countdown -= 1  # HookClock.call, inline: this runs per message
            try:
                if clock.countdown:
                    answer = call(info, publish)
                else:
                    answer = clock.timed_call(call, info, publish)
            except Exception:
                answer = extensions.failed(impl, _INBOUND, "raised")
            if answer is not None:
                break
    if answer is not None and inspect.isawaitable(answer):
        return _finish_intercept(message, publish, answer)
    return _applied(message, publish, answer)


_INBOUND = "hive_intercept_publish_inbound"


async def _finish_intercept(message: Message, publish: PublishMessage,
                            answer: Awaitable[Any]) -> int | None:
    return _applied(message, publish, await answer)


def _unchanged(message: Message, publish: PublishMessage) -> bool:
    if not (publish.topic == message.topic and publish.payload is message.payload
            and publish.qos == message.qos and publish.retain == message.retain):
        return False
    props = message.properties
    if not props and message.expiry_at is None:
        return (not publish.user_properties and publish.content_type is None
                and publish.response_topic is None and publish.correlation_data is None
                and publish.payload_format_indicator is None
                and publish.message_expiry_interval is None)
    props = props or {}
    return (publish.user_properties == list(props.get(P.USER_PROPERTY, ()))
            and publish.content_type == props.get(P.CONTENT_TYPE)
            and publish.response_topic == props.get(P.RESPONSE_TOPIC)
            and publish.correlation_data == props.get(P.CORRELATION_DATA)
            and publish.payload_format_indicator == props.get(P.PAYLOAD_FORMAT_INDICATOR)
            and publish.message_expiry_interval == message.remaining_expiry())


def _applied(message: Message, publish: PublishMessage, answer: Any) -> int | None:
    if answer is not None and int(answer) >= 0x80:
        return int(answer)
    if _unchanged(message, publish):
        return None
    try:
        apply_publish_message(message, publish)
    except MQTTError:
        return RC.TOPIC_NAME_INVALID
    return None


# ---------------------------------------------------------------------------- SUBSCRIBE


def subscribe_hooks_inline(extensions: Extensions) -> bool:
    """Every SUBSCRIBE hook is a plain function: the channel runs them without waiting."""
    return (extensions.runs_inline("hive_intercept_subscribe")
            and extensions.runs_inline("hive_authorize_subscribe"))


def _wanted(requests: list[SubscriptionRequest]) -> list[SubscriptionInfo]:
    return [SubscriptionInfo(r.topic_filter, r.qos, r.no_local, r.retain_as_published,
                             r.retain_handling) for r in requests]


def _intercepted(info: ClientInfo, requests: list[SubscriptionRequest],
                 wanted: list[SubscriptionInfo]) -> list[SubscriptionRequest]:
    if len(wanted) == len(requests):
        return [SubscriptionRequest(w.topic_filter, min(max(int(w.qos), 0), 2), w.no_local,
                                    w.retain_as_published, w.retain_handling) for w in wanted]
    # the SUBACK must answer every filter the client sent, in order
    log.error("a subscribe interceptor changed the number of subscriptions of %r from %d to %d: "
              "its changes are ignored", info.client_id, len(requests), len(wanted))
    return requests


def subscribe_inline(extensions: Extensions, info: ClientInfo,
                     packet: Subscribe) -> dict[int, int]:
    """:func:`subscribe` for plain-function hooks, in the caller's turn of the loop."""
    requests = packet.subscriptions
    if extensions.intercepts_subscribe:
        wanted = _wanted(requests)
        extensions.each_inline("hive_intercept_subscribe", client=info, subscriptions=wanted)
        requests = _intercepted(info, requests, wanted)
    refused: dict[int, int] = {}
    if extensions.authorizes_subscribe:
        for index, request in enumerate(requests):
            code = refusal(extensions.authorize_subscribe(info, request.topic_filter,
                                                          request.qos))
            if code is not None:
                refused[index] = code
    packet.subscriptions = requests
    return refused


async def subscribe(extensions: Extensions, info: ClientInfo,
                    packet: Subscribe) -> dict[int, int]:
    """Interceptors may change the requests (in ``packet``); authorizers refuse some: their
    reason codes by the request's index."""
    requests = packet.subscriptions
    if extensions.intercepts_subscribe:
        wanted = _wanted(requests)
        await extensions.intercept_subscribe(info, wanted)
        requests = _intercepted(info, requests, wanted)
    refused: dict[int, int] = {}
    if extensions.authorizes_subscribe:
        for index, request in enumerate(requests):
            answer = await extensions.resolved(
                extensions.authorize_subscribe(info, request.topic_filter, request.qos))
            code = refusal(answer)
            if code is not None:
                refused[index] = code
    packet.subscriptions = requests
    return refused


async def unsubscribe(extensions: Extensions, info: ClientInfo, filters: list[str]) -> list[str]:
    await extensions.intercept_unsubscribe(info, filters)
    return filters


def with_refused(answer: tuple[list[int], list[bool]], refused: dict[int, int],
                 count: int) -> tuple[list[int], list[bool]]:
    """A SUBACK's codes (and whether each subscription existed) for all ``count`` requests:
    the broker's ``answer`` for those allowed, in order, and extensions' codes (by index) for
    those ``refused``."""
    if not refused:
        return answer
    codes: list[int] = []
    existed: list[bool] = []
    answers = iter(zip(*answer, strict=False))
    for index in range(count):
        if index in refused:
            codes.append(refused[index])
            existed.append(False)
        else:
            code, was = next(answers, (RC.UNSPECIFIED_ERROR, False))
            codes.append(code)
            existed.append(was)
    return codes, existed
