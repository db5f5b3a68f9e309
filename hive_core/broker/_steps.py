"""The steps of a client connection that wait: for an extension's answer, the cluster, the disk.

The channel (``broker/_channel.py``) is synchronous and knows no event loop. Where its protocol
must wait, it hands one of these coroutines to the broker, which runs it as a task
(``Channel.defer``): the coroutine awaits, then
calls the channel back (``accept_connect``, ``finish_subscribe``, ...), and meanwhile later
packets wait in the channel, in order, until :meth:`Channel.step_done` hands them on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, Protocol

from hive_core.broker import _extension_flow as flow
from hive_core.broker._acks import CommittedAcks, NoAcks
from hive_core.broker._extension_flow import Refusal
from hive_core.broker._message import Message
from hive_core.broker._ports import SessionUnavailable
from hive_core.broker._settings import BrokerSettings
from hive_core.mqtt import Auth, Connect, PropertyId, Publish, ReasonCode, Subscribe, Unsubscribe
from hive_core.plugins import Extensions
from hive_ext_api import ClientInfo

log = logging.getLogger("hive.connection")
RC = ReasonCode


class SessionFetch(Protocol):
    """Where a CONNECT's session is (``_custody.py``): here, or on another node to fetch."""

    def sessions_elsewhere(self) -> bool: ...

    async def fetch_session_elsewhere(self, client_id: str) -> None: ...


class StepBroker(Protocol):
    """What the steps ask of the broker."""

    @property
    def settings(self) -> BrokerSettings: ...

    @property
    def extensions(self) -> Extensions: ...

    @property
    def custody(self) -> SessionFetch: ...


class Channel(Protocol):
    """What the steps ask of the channel they wait for (``broker/_channel.py``)."""

    @property
    def broker(self) -> StepBroker: ...

    version: int
    client_id: str
    username: str | None
    closed: bool
    peer_gone: bool
    info: ClientInfo | None
    auth_method: str | None
    auth_waiter: asyncio.Future[Auth | None] | None
    acks: CommittedAcks | NoAcks

    def client_info(self) -> ClientInfo: ...

    def send_auth(self, properties: dict[PropertyId, Any]) -> None: ...

    async def next_auth(self) -> Auth | None: ...

    def session_elsewhere(self, connect: Connect) -> bool: ...

    def accept_connect(self, connect: Connect, ack: dict[PropertyId, Any]) -> None: ...

    def refuse_connect(self, reason: int, reason_string: str | None = None) -> None: ...

    def refuse(self, reason: int, message: str) -> None: ...

    def send_packet(self, packet: Any) -> None: ...

    def route(self, packet: Publish, message: Message) -> None: ...

    def publish_refused(self, packet: Publish, code: int, cluster: bool = False) -> None: ...

    def finish_subscribe(self, packet: Subscribe, refused: dict[int, int]) -> None: ...

    def finish_unsubscribe(self, packet_id: int, filters: list[str]) -> None: ...

    def step_done(self) -> None: ...


async def run(channel: Channel, step: Awaitable[Any]) -> None:
    """Run ``step``; then the channel goes on with what waited meanwhile."""
    try:
        await step
    except Exception:
        log.exception("internal error in an extension step for %r", channel.client_id or "?")
        channel.refuse(RC.IMPLEMENTATION_SPECIFIC_ERROR, "internal error")
    channel.step_done()


async def connect_in_cluster(channel: Channel, connect: Connect,
                             ack: dict[PropertyId, Any]) -> None:
    """Authenticated; the session lives on another node: bring it here, then connect."""
    channel.version = connect.protocol_version  # a refusal answers in the client's version
    channel.client_id = connect.client_id
    try:
        await channel.broker.custody.fetch_session_elsewhere(connect.client_id)
    except SessionUnavailable as exc:
        if not channel.closed:
            channel.refuse_connect(RC.SERVER_UNAVAILABLE, str(exc))
        return
    if not channel.closed:
        channel.accept_connect(connect, ack)


async def connect_with_extensions(channel: Channel, connect: Connect) -> None:
    """Extensions authenticate the client (and may change its CONNECT), then it connects."""
    channel.version = connect.protocol_version
    channel.username = connect.username
    channel.client_id = connect.client_id
    decision = await flow.connect(channel.broker.extensions, channel.client_info(), connect,
                                  channel)
    if decision is None or channel.closed:
        return
    if isinstance(decision, Refusal):
        channel.refuse_connect(decision.reason_code, decision.reason_string)
    elif channel.session_elsewhere(connect):
        await connect_in_cluster(channel, connect, decision)
    else:
        channel.accept_connect(connect, decision)


async def next_auth(channel: Channel) -> Auth | None:
    """The client's next AUTH packet in an exchange, or None (closed, or too slow: refused)."""
    if channel.closed or channel.peer_gone:
        return None
    waiter: asyncio.Future[Auth | None] = asyncio.get_running_loop().create_future()
    channel.auth_waiter = waiter
    try:
        return await asyncio.wait_for(waiter, channel.broker.settings.connect_timeout)
    except TimeoutError:
        channel.refuse(RC.NOT_AUTHORIZED, "no AUTH reply in time")
        return None
    finally:
        if channel.auth_waiter is waiter:  # cancelled by the timeout: nothing answers it now
            channel.auth_waiter = None


async def reauthenticate(channel: Channel, packet: Auth) -> None:
    """An AUTH from a connected client: extensions decide, the client is told."""
    outcome = await flow.reauthenticate(channel.broker.extensions, channel.client_info(), packet,
                                        channel.auth_method, channel)
    if outcome is None or channel.closed:
        return
    if isinstance(outcome, Refusal):
        channel.refuse(outcome.reason_code, outcome.reason_string or "re-authentication failed")
    else:
        channel.send_packet(Auth(RC.SUCCESS, outcome))


async def close_when_acknowledged(channel: Channel, reason: int, message: str) -> None:
    """Close with ``reason`` once the acknowledgements waiting for the disk are out."""
    await channel.acks.sent()
    if not channel.closed:
        channel.refuse(reason, message)


async def publish_when_checked(channel: Channel, packet: Publish, message: Message,
                               verdict: Awaitable[int | None]) -> None:
    """Route the PUBLISH once extensions let it through; else refuse it with their code."""
    code = await verdict
    if channel.closed:
        return
    if code is None:
        channel.route(packet, message)
    else:
        channel.publish_refused(packet, code)


async def subscribe_checked(channel: Channel, packet: Subscribe) -> None:
    """Subscribe what extensions let through."""
    assert channel.info is not None
    refused = await flow.subscribe(channel.broker.extensions, channel.info, packet)
    channel.finish_subscribe(packet, refused)


async def unsubscribe_intercepted(channel: Channel, packet: Unsubscribe) -> None:
    """Unsubscribe what extensions leave of the filters."""
    assert channel.info is not None
    filters = await flow.unsubscribe(channel.broker.extensions, channel.info,
                                     list(packet.topic_filters))
    if not channel.closed:
        channel.finish_unsubscribe(packet.packet_id, filters[:len(packet.topic_filters)])
