"""The way out to one subscriber: the QoS window, the queue behind it, resends and topic aliases.

A delivery goes into the session's window when the connection has room (receive maximum, not
congested), else into its queue; acknowledgements make room and :meth:`Outbox.drain` moves the
queue on. Every change of a persistent session's queue or window is written through
:class:`Records` before the broker acknowledges what caused it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from hive_core.broker import _extension_flow as flow
from hive_core.broker._message import Message
from hive_core.broker._metrics import DROP_REASONS, BrokerMetrics
from hive_core.broker._records import Records
from hive_core.broker._session import Link, Outbound, Pending, Session
from hive_core.broker._settings import BrokerSettings
from hive_core.mqtt import PUBREL, MQTTError, encode_ack, with_dup
from hive_core.plugins import Extensions, WarningGate
from hive_ext_api import PublishMessage

log = logging.getLogger("hive.broker")

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


def send_exchange(link: Link, session: Session, data: bytes, durable: bool) -> None:
    """A PUBLISH again, or a PUBREL, of a persistent session goes out after the state behind it
    is committed (``durable``: on disk and on the backups; else after what waits before it).
    A QoS 2 one sent first (a resend on a new connection while the first send still waited for
    the commit) would reach a client that, moving to a node that took the session over from a
    replica lacking that state, got the message again as new."""
    if session.persistent:
        link.send_after_commit(data, durable)
    else:
        link.send(data)


class Outbox:
    """Delivers to sessions; holds no state of its own (the sessions and their links do)."""

    def __init__(self, settings: BrokerSettings, records: Records, metrics: BrokerMetrics,
                 extensions: Extensions, spawn: Spawn) -> None:
        self.settings = settings
        self.records = records
        self.metrics = metrics
        self.extensions = extensions
        self.spawn = spawn
        self._drop_warnings = WarningGate(log, period=10.0)

    def _drop(self, session: Session, pending: Pending, reason: str) -> None:
        """A message will not reach this subscriber: counted by reason, logged (rate-limited)."""
        count = self.metrics.count_drop(reason)
        self.records.dequeue(session, pending)
        self.drop_warning(pending, session.client_id, reason, count)

    def drop_warning(self, pending: Pending, client_id: str, reason: str, count: int) -> None:
        self._drop_warnings.warn(
            reason, "dropped a message on %r for %r: %s (%d dropped so far for this reason)",
            pending.message.topic, client_id, DROP_REASONS[reason], count)

    def deliver(self, session: Session, pending: Pending) -> bool:
        """Send now if the window allows, else queue; True when the store was written."""
        link = session.connection
        if pending.qos == 0:
            if link is None:
                return False
            if link.congested:
                self.enqueue(session, pending)
                return False
            self._send(link, session, pending)
            return False
        if link is None or link.congested or session.queue or \
                len(session.inflight) >= link.send_window:
            return self.enqueue(session, pending)
        self._send(link, session, pending)
        return session.persistent

    def enqueue(self, session: Session, pending: Pending) -> bool:
        """Queue a delivery (dropping by the queue strategy when full); True when stored."""
        queue = session.queued()
        if len(queue) >= self.settings.max_queue_size:
            if self.settings.queue_strategy == "discard":
                self._drop(session, pending, "queue-full")
                return False
            self._drop(session, queue.popleft(), "queue-full")
        self.metrics.messages_queued += 1
        queue.append(pending)
        if session.persistent and pending.qos:
            self.records.enqueue(session, pending)
            return True
        return False

    def _send(self, link: Link, session: Session, pending: Pending) -> None:
        message = pending.message
        if message.expiry_at is not None and message.expired(time.time()):
            self._drop(session, pending, "expired")
            return
        if self.extensions.intercepts_outbound and link.info is not None:
            intercepted = self._intercept(link, session, pending)
            if intercepted is None:
                return
            pending = intercepted
        self._write(link, session, pending)

    def _write(self, link: Link, session: Session, pending: Pending) -> None:
        message = pending.message
        aliases = link.outbound_aliases
        aliases_before = len(aliases)
        if link.out_alias_max:
            head, tail = self._with_alias(link, pending)
        else:
            head, tail = message.encoded(link.version, pending.qos, pending.retain,
                                         pending.subscription_ids)
        if len(head) + len(tail) + (2 if pending.qos else 0) > link.max_out_packet:
            if len(aliases) > aliases_before:  # never sent: the alias is unused
                aliases.pop(message.topic, None)
            self._drop(session, pending, "too-large")  # the client cannot take it
            return
        metrics = self.metrics
        metrics.messages_out += 1
        metrics.messages_out_by_qos[pending.qos] += 1
        if pending.qos == 0:
            data = head
        else:
            pid = session.allocate_packet_id()
            outbound = session.window()[pid] = Outbound(pending)
            data = head + pid.to_bytes(2, "big") + tail
            if session.persistent:
                self.records.sent(session, pid, outbound)
        if session.persistent:
            # Exactly once: a QoS 2 packet id must be on disk before the client sees it, or a
            # crash would send the message again under another id. What follows it waits too,
            # so that deliveries keep the order they were published in, whatever their QoS.
            link.send_after_commit(data, pending.qos == 2)
        else:
            link.send(data)

    @staticmethod
    def _with_alias(link: Link, pending: Pending) -> tuple[bytes, bytes]:
        message = pending.message
        aliases = link.outbound_aliases
        alias = aliases.get(message.topic)
        if alias is not None:
            return message.encoded_with_alias(link.version, pending.qos, pending.retain,
                                              pending.subscription_ids, alias, False)
        if len(aliases) < link.out_alias_max:
            alias = len(aliases) + 1
            aliases[message.topic] = alias
            return message.encoded_with_alias(link.version, pending.qos, pending.retain,
                                              pending.subscription_ids, alias, True)
        return message.encoded(link.version, pending.qos, pending.retain,
                               pending.subscription_ids)

    # ------------------------------------------------------------------ outbound interceptors

    def _intercept(self, link: Link, session: Session, pending: Pending) -> Pending | None:
        """Run the outbound interceptors: the (possibly rewritten) delivery, or None to skip.

        An ``async`` interceptor, or one still pending for this connection, makes the delivery
        wait in a chain per connection, so deliveries keep their order.
        """
        publish = pending.message.to_publish_message()
        chain = link.outbound_chain
        if chain is None or chain.done():
            answer = self.extensions.first("hive_intercept_publish_outbound", client=link.info,
                                           publish=publish)
            if not inspect.isawaitable(answer):
                return self._intercepted(session, pending, publish, answer)
        else:
            answer = None
        link.outbound_chain = self.spawn(self._send_when_intercepted(
            link, session, pending, publish, answer, chain))
        return None

    async def _send_when_intercepted(self, link: Link, session: Session, pending: Pending,
                                     publish: PublishMessage, answer: Any,
                                     previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        if answer is None:
            answer = self.extensions.first("hive_intercept_publish_outbound", client=link.info,
                                           publish=publish)
        if inspect.isawaitable(answer):
            answer = await answer
        rewritten = self._intercepted(session, pending, publish, answer)
        if rewritten is None:
            return
        if link.closed or session.connection is not link:
            if rewritten.qos:
                self.enqueue(session, rewritten)
            return
        self._write(link, session, rewritten)

    def _intercepted(self, session: Session, pending: Pending, publish: PublishMessage,
                     answer: Any) -> Pending | None:
        if answer is False:
            self._drop(session, pending, "extension")
            return None
        original = pending.message
        copy = Message(original.topic, original.payload, original.qos, original.retain,
                       dict(original.properties) if original.properties else None,
                       original.publisher_id, original.expiry_at)
        try:
            flow.apply_publish_message(copy, publish)
        except MQTTError:
            self._drop(session, pending, "invalid-topic")
            return None
        return Pending(copy, min(pending.qos, copy.qos), pending.subscription_ids, copy.retain,
                       pending.seq)

    # ------------------------------------------------------------------ the window moving on

    def drain(self, session: Session) -> None:
        """Move queued deliveries into the window while it has room."""
        link = session.connection
        queue = session.queue
        if link is None:
            return
        now = time.time()
        while queue and not link.congested and not link.closed:
            pending = queue[0]
            if pending.qos and len(session.inflight) >= link.send_window:
                break
            queue.popleft()
            if pending.message.expired(now):
                self._drop(session, pending, "expired")
                continue
            self._send(link, session, pending)

    def resume(self, session: Session) -> None:
        """After CONNACK: finish what was in flight (DUP set), then the queue."""
        link = session.connection
        assert link is not None
        # The new connection's receive maximum holds for resends too: the rest wait ("held").
        room = link.send_window - sum(o.state == "pubrel" for o in session.inflight.values())
        for pid, outbound in session.inflight.items():
            if outbound.state == "pubrel":
                self.send_pubrel(link, session, pid)
            elif room > 0:
                room -= 1
                outbound.state = "publish"
                self.resend(link, session, pid, outbound)
            else:
                outbound.state = "held"
        self.drain(session)

    def resend(self, link: Link, session: Session, pid: int, outbound: Outbound) -> None:
        """PUBLISH again (DUP) a delivery in the window: after a reconnect, or from another
        copy of the session, whose client may have had it under this packet id."""
        pending = outbound.pending
        head, tail = pending.message.encoded(link.version, pending.qos, pending.retain,
                                             pending.subscription_ids)
        send_exchange(link, session, with_dup(head) + pid.to_bytes(2, "big") + tail,
                      pending.qos == 2)

    @staticmethod
    def send_pubrel(link: Link, session: Session, pid: int) -> None:
        send_exchange(link, session, encode_ack(PUBREL, pid), True)

    def acknowledged(self, session: Session, packet_id: int) -> None:
        """PUBACK, PUBCOMP (or a PUBREC refusing the message): the delivery is done."""
        outbound = session.inflight.pop(packet_id, None)
        if outbound is None:
            return
        if session.persistent:
            self.records.acknowledged(session, packet_id, outbound)
        link = session.connection
        if link is None:
            return
        if len(session.inflight) >= link.send_window:  # only after resume() held some back
            for pid, outbound in session.inflight.items():
                if outbound.state == "held":
                    outbound.state = "publish"
                    self.resend(link, session, pid, outbound)
                    return
        if session.queue:
            self.drain(session)

    def released(self, session: Session, packet_id: int, outbound: Outbound) -> None:
        """PUBREC for an outbound QoS 2 delivery: PUBREL is the next step."""
        outbound.state = "pubrel"
        if session.persistent:
            self.records.released(session, packet_id)
