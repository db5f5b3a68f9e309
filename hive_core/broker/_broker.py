"""One node's MQTT logic: sessions, routing, retained messages, wills, expiry and persistence."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hive_core.broker import _extension_flow as flow
from hive_core.broker._message import Message
from hive_core.broker._session import Outbound, Pending, Session
from hive_core.broker._settings import BrokerSettings
from hive_core.broker._topic_tree import (
    SharedGroup,
    Subscription,
    TopicTree,
    aggregate_without_no_local,
)
from hive_core.mqtt import (
    MQTTError,
    PropertyId,
    ReasonCode,
    SubscriptionRequest,
    Will,
    decode_properties,
    encode_properties,
    parse_shared_subscription,
    topic_matches,
    validate_topic_filter,
)
from hive_core.persistence._model import (
    SessionStore,
    Snapshot,
    StoredInflight,
    StoredMessage,
    StoredSession,
    StoredSubscription,
)
from hive_core.plugins import Extensions

if TYPE_CHECKING:
    from hive_core.broker._connection import ClientConnection
    from hive_core.cluster import Cluster
    from hive_ext_api import PublishMessage

log = logging.getLogger("hive.broker")
SessionRecords = tuple[StoredSession, list[tuple[int, StoredMessage]], list[StoredInflight]]
P = PropertyId
RC = ReasonCode
_DUP = 0x08


@dataclass(slots=True)
class Metrics:
    connections_accepted: int = 0
    protocol_errors: int = 0
    messages_in: int = 0
    messages_out: int = 0
    messages_dropped: int = 0
    messages_queued: int = 0


class Broker:
    def __init__(self, settings: BrokerSettings, store: SessionStore,
                 extensions: Extensions | None = None) -> None:
        self.settings = settings
        self.store = store
        self.extensions = extensions if extensions is not None else Extensions.none()
        self.cluster: Cluster | None = None  # set while this node is part of a cluster
        self.metrics = Metrics()
        self.sessions: dict[str, Session] = {}
        self.subscriptions = TopicTree()
        self.retained: dict[str, Message] = {}
        self.connections: set[ClientConnection] = set()
        self.connected_count = 0
        self._dirty: list[ClientConnection] = []
        self._flush_scheduled = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._client_events: dict[str, asyncio.Task[None]] = {}  # the last one, by client id
        self._seq = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, snapshot: Snapshot) -> None:
        self._loop = asyncio.get_running_loop()
        self._restore(snapshot)

    async def stop(self) -> None:
        for conn in list(self.connections):
            conn.close(RC.SERVER_SHUTTING_DOWN, "the node is shutting down")
        self.flush()
        if self._client_events:  # extensions hear of the clients the stop disconnected
            await asyncio.wait(list(self._client_events.values()),
                               timeout=self.extensions.deadline + 1)
        for task in list(self._tasks):
            task.cancel()
        for session in self.sessions.values():
            for handle in (session.expiry_handle, session.will_handle):
                if handle is not None:
                    handle.cancel()
        await self.store.commit()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def client_event(self, client_id: str, event: Coroutine[Any, Any, None]) -> None:
        """Tell extensions about a client, after what they were told about it before.

        Event hooks may be ``async``: without the chain, a takeover's "connected" could reach
        an extension before the "disconnected" of the connection it replaced.
        """
        previous = self._client_events.get(client_id)
        task = self._client_events[client_id] = self.spawn(self._after(previous, event))

        def forget(done: asyncio.Task[None]) -> None:
            if self._client_events.get(client_id) is done:
                del self._client_events[client_id]

        task.add_done_callback(forget)
        # Cancelled before it ran, the coroutine was never awaited: close it quietly.
        task.add_done_callback(lambda done: event.close() if done.cancelled() else None)

    @staticmethod
    async def _after(previous: asyncio.Task[None] | None,
                     event: Coroutine[Any, Any, None]) -> None:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])
        await event

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    # ------------------------------------------------------------------ output batching

    def mark_dirty(self, conn: ClientConnection) -> None:
        self._dirty.append(conn)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            conn.flush()

    # ------------------------------------------------------------------ connections

    def accept(self, conn: ClientConnection) -> None:
        self.connections.add(conn)
        self.metrics.connections_accepted += 1
        self._watch(conn, self.settings.connect_timeout)

    def attach(self, conn: ClientConnection, client_id: str, version: int, clean_start: bool,
               expiry: int, will: Will | None) -> tuple[Session, bool]:
        session = self.sessions.get(client_id)
        if session is not None and session.connection is not None:
            old = session.connection
            log.info("client %r taken over by a new connection", client_id)
            old.close(RC.SESSION_TAKEN_OVER, "another connection took the session over")
            session = self.sessions.get(client_id)  # closing ends a session with expiry 0
        if session is not None and clean_start:
            self._end_session(session)
            session = None
        present = session is not None
        if session is None:
            session = Session(client_id, version, expiry)
            self.sessions[client_id] = session
        else:
            if session.expiry_handle is not None:
                session.expiry_handle.cancel()
                session.expiry_handle = None
            if session.will_handle is not None:  # came back before the will delay ran out
                session.will_handle.cancel()
                session.will_handle = None
            session.expiry_interval = expiry
            session.protocol_version = version
        session.connection = conn
        session.disconnected_at = None
        session.will = will
        session.outbound_aliases = {}
        self.connected_count += 1
        if self.cluster is not None:
            self.cluster.client_connected(client_id)
        self._watch(conn, conn.keep_alive * 1.5)
        if session.persistent:
            self._save_session(session)
        elif present:
            self.store.delete_session(client_id)
        return session, present

    def resume(self, session: Session) -> None:
        """After CONNACK: finish what was in flight (DUP set), then the queue."""
        conn = session.connection
        assert conn is not None
        # The new connection's receive maximum holds for resends too: the rest wait ("held").
        room = conn.send_window - sum(o.state == "pubrel" for o in session.inflight.values())
        for pid, outbound in session.inflight.items():
            if outbound.state == "pubrel":
                conn.send(bytes((0x62, 2, pid >> 8, pid & 0xFF)))
            elif room > 0:
                room -= 1
                outbound.state = "publish"
                self._resend(conn, pid, outbound)
            else:
                outbound.state = "held"
        self.drain(session)

    @staticmethod
    def _resend(conn: ClientConnection, pid: int, outbound: Outbound) -> None:
        pending = outbound.pending
        head, tail = pending.message.encoded(conn.version, pending.qos, pending.retain,
                                             pending.subscription_ids)
        conn.send(bytes((head[0] | _DUP,)) + head[1:] + pid.to_bytes(2, "big") + tail)

    def connection_closed(self, conn: ClientConnection) -> None:
        self.connections.discard(conn)
        if conn.deadline is not None:
            conn.deadline.cancel()
            conn.deadline = None
        session = conn.session
        if session is None or session.connection is not conn:
            return
        if conn.info is not None and self.extensions.watches_clients:
            self.client_event(session.client_id, self.extensions.client_disconnected(
                conn.info, conn.disconnect_received))
        self.connected_count -= 1
        session.connection = None
        session.disconnected_at = time.time()
        if session.will is not None and not conn.will_sent_ok:
            self._schedule_will(session)
        else:
            session.will = None
        if session.expiry_interval == 0:
            self._end_session(session)
        else:
            self._save_session(session)
            if not session.never_expires:
                self._schedule_expiry(session, session.expiry_interval)

    def _schedule_expiry(self, session: Session, delay: float) -> None:
        loop = asyncio.get_running_loop()
        session.expiry_handle = loop.call_later(max(0.0, delay), self._expire, session)

    def _expire(self, session: Session) -> None:
        if session.connection is None and self.sessions.get(session.client_id) is session:
            log.info("session of %r expired", session.client_id)
            self._end_session(session)

    def _end_session(self, session: Session) -> None:
        """Discard the session: subscriptions, queue, in-flight; a pending will goes out now."""
        if session.will_handle is not None:
            session.will_handle.cancel()
            session.will_handle = None
            self._publish_will(session)
        if session.expiry_handle is not None:
            session.expiry_handle.cancel()
            session.expiry_handle = None
        for subscription in session.subscriptions.values():
            self._remove_from_tree(subscription)
        session.subscriptions.clear()
        session.queue.clear()
        session.inflight.clear()
        session.inbound_qos2.clear()
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
        self.store.delete_session(session.client_id)

    # ------------------------------------------------------------------ wills

    def _schedule_will(self, session: Session) -> None:
        will = session.will
        assert will is not None
        delay = will.properties.get(P.WILL_DELAY_INTERVAL, 0) if will.properties else 0
        if session.expiry_interval < delay:
            delay = session.expiry_interval
        if delay <= 0:
            self._publish_will(session)
        else:
            session.will_handle = asyncio.get_running_loop().call_later(
                delay, self._will_due, session)

    def _will_due(self, session: Session) -> None:
        session.will_handle = None
        self._publish_will(session)

    def _publish_will(self, session: Session) -> None:
        """Publish the session's will now (at most once)."""
        will, session.will = session.will, None
        if will is None:
            return
        props = dict(will.properties) if will.properties else {}
        props.pop(P.WILL_DELAY_INTERVAL, None)
        expiry_at = None
        interval = props.pop(P.MESSAGE_EXPIRY_INTERVAL, None)
        if interval is not None:
            expiry_at = time.time() + min(interval, self.settings.max_message_expiry)
        log.debug("publishing the will of %r", session.client_id)
        self.publish(Message(will.topic, will.payload, will.qos, will.retain, props,
                             session.client_id, expiry_at))
        self.flush()

    # ------------------------------------------------------------------ routing

    def publish(self, message: Message, from_cluster: bool = False) -> tuple[bool, bool]:
        """Route a message to every matching session; (anyone matched, a durable write made).

        A message from a local client also goes to the other nodes that want it; one that came
        from another node (``from_cluster``) reaches only this node's plain subscribers: the
        node it was published on chose who in each shared group gets it.
        """
        self.metrics.messages_in += 1
        durable = False
        if message.retain and not from_cluster:
            durable = self._retain(message)
        deliveries, groups = self.subscriptions.match(message.topic)
        publisher = message.publisher_id
        qos = message.qos
        plain = not self.extensions.intercepts_outbound
        sent = 0
        for delivery in deliveries:
            session = delivery.session
            if delivery.no_local_filters and session.client_id == publisher:
                own = aggregate_without_no_local(delivery)
                if own is None:
                    continue
                delivery = own
            granted = delivery.qos if delivery.qos < qos else qos
            retain = message.retain and delivery.retain_as_published
            conn = session.connection
            if (granted == 0 and conn is not None and plain and not conn.congested
                    and not conn.out_alias_max):
                # The hot path: QoS 0 to a connected client, encoded once per variant.
                data = message.encoded(conn.version, 0, retain, delivery.subscription_ids)[0]
                if len(data) <= conn.max_out_packet:
                    out = conn.out
                    if not out:
                        self.mark_dirty(conn)
                    out.append(data)
                    sent += 1
                continue
            if self._deliver(session, Pending(message, granted, delivery.subscription_ids, retain)):
                durable = True
        self.metrics.messages_out += sent
        matched = bool(deliveries)
        cluster = self.cluster
        if cluster is not None:
            if from_cluster:
                return matched, durable
            forwarded, remote_groups = cluster.forward(message)
            matched = matched or forwarded
            if remote_groups:
                local = {(g.name, g.topic_filter): g for g in groups}
                groups = []
                for key in local.keys() | remote_groups.keys():
                    group = local.get(key)
                    target = cluster.pick_shared(key, remote_groups.get(key, frozenset()),
                                                 group is not None)
                    if target is not None:
                        cluster.send_shared(target, key, message)
                        matched = True
                    elif group is not None:
                        groups.append(group)
        for group in groups:
            delivered, wrote = self._deliver_to_group(group, message)
            matched = matched or delivered
            durable = durable or wrote
        return matched, durable

    def _deliver_to_group(self, group: SharedGroup, message: Message) -> tuple[bool, bool]:
        """One member of a shared group gets the message: (someone did, the store was written)."""
        member = group.pick()
        if member is None:
            return False, False
        granted = min(member.qos, message.qos)
        sid = member.subscription_id
        retain = message.retain and member.retain_as_published  # MQTT-3.3.1-12/13
        return True, self._deliver(member.session, Pending(message, granted,
                                                           (sid,) if sid else None, retain))

    def deliver_shared(self, group_name: str, topic_filter: str, message: Message) -> None:
        """Another node chose this one to serve shared group ``group_name`` for a message."""
        group = self.subscriptions.shared_group(topic_filter, group_name)
        if group is not None:
            self._deliver_to_group(group, message)

    def _deliver(self, session: Session, pending: Pending) -> bool:
        """Send now if the window allows, else queue; True when the store was written."""
        conn = session.connection
        if pending.qos == 0:
            if conn is None:
                return False
            if conn.congested:
                self._enqueue(session, pending)
                return False
            self._send(conn, session, pending)
            return False
        if conn is None or conn.congested or session.queue or \
                len(session.inflight) >= conn.send_window:
            return self._enqueue(session, pending)
        self._send(conn, session, pending)
        return session.persistent

    def _enqueue(self, session: Session, pending: Pending) -> bool:
        queue = session.queue
        if len(queue) >= self.settings.max_queue_size:
            self.metrics.messages_dropped += 1
            if self.settings.queue_strategy == "discard":
                return False
            dropped = queue.popleft()
            if dropped.seq:
                self.store.dequeue(session.client_id, dropped.seq)
        self.metrics.messages_queued += 1
        if session.persistent and pending.qos:
            self._seq += 1
            pending.seq = self._seq
            self.store.enqueue(session.client_id, pending.seq, self._stored(pending))
            queue.append(pending)
            return True
        queue.append(pending)
        return False

    def _send(self, conn: ClientConnection, session: Session, pending: Pending) -> None:
        message = pending.message
        if message.expiry_at is not None and message.expired(time.time()):
            self.metrics.messages_dropped += 1
            return
        if self.extensions.intercepts_outbound and conn.info is not None:
            intercepted = self._intercept_outbound(conn, session, pending)
            if intercepted is None:
                return
            pending = intercepted
        self._deliver_now(conn, session, pending)

    def _deliver_now(self, conn: ClientConnection, session: Session, pending: Pending) -> None:
        message = pending.message
        alias_max = conn.out_alias_max
        aliases_before = len(session.outbound_aliases)
        if alias_max:
            head, tail = self._with_alias(conn, session, pending)
        else:
            head, tail = message.encoded(conn.version, pending.qos, pending.retain,
                                         pending.subscription_ids)
        if len(head) + len(tail) + (2 if pending.qos else 0) > conn.max_out_packet:
            self.metrics.messages_dropped += 1  # the client cannot take it: as if delivered
            if len(session.outbound_aliases) > aliases_before:  # never sent: the alias is unused
                session.outbound_aliases.pop(message.topic, None)
            if pending.seq:
                self.store.dequeue(session.client_id, pending.seq)
            return
        self.metrics.messages_out += 1
        if pending.qos == 0:
            conn.send(head)
            return
        pid = session.allocate_packet_id()
        session.inflight[pid] = Outbound(pending)
        if session.persistent:
            if pending.seq:
                self.store.dequeue(session.client_id, pending.seq)
                pending.seq = 0
            self.store.save_inflight(StoredInflight(session.client_id, pid, "out", "publish",
                                                    self._stored(pending)))
        conn.send(head + pid.to_bytes(2, "big") + tail)

    def _intercept_outbound(self, conn: ClientConnection, session: Session,
                            pending: Pending) -> Pending | None:
        """Run the outbound interceptors: the (possibly rewritten) delivery, or None to skip.

        An ``async`` interceptor, or one still pending for this connection, makes the delivery
        wait in a chain per connection, so deliveries keep their order.
        """
        publish = flow.to_publish_message(pending.message)
        if conn.outbound_chain is None or conn.outbound_chain.done():
            answer = self.extensions.first("hive_intercept_publish_outbound", client=conn.info,
                                           publish=publish)
            if not inspect.isawaitable(answer):
                return self._intercepted(session, pending, publish, answer)
        else:
            answer = None
        conn.outbound_chain = self.spawn(self._send_when_intercepted(
            conn, session, pending, publish, answer, conn.outbound_chain))
        return None

    async def _send_when_intercepted(self, conn: ClientConnection, session: Session,
                                     pending: Pending, publish: PublishMessage, answer: Any,
                                     previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        if answer is None:
            answer = self.extensions.first("hive_intercept_publish_outbound", client=conn.info,
                                           publish=publish)
        if inspect.isawaitable(answer):
            answer = await answer
        rewritten = self._intercepted(session, pending, publish, answer)
        if rewritten is None:
            return
        if conn.closed or session.connection is not conn:
            if rewritten.qos:
                self._enqueue(session, rewritten)
            return
        self._deliver_now(conn, session, rewritten)

    def _intercepted(self, session: Session, pending: Pending, publish: PublishMessage,
                     answer: Any) -> Pending | None:
        if answer is False:
            self.metrics.messages_dropped += 1
            if pending.seq:
                self.store.dequeue(session.client_id, pending.seq)
            return None
        original = pending.message
        copy = Message(original.topic, original.payload, original.qos, original.retain,
                       dict(original.properties) if original.properties else None,
                       original.publisher_id, original.expiry_at)
        try:
            flow.apply_publish_message(copy, publish)
        except MQTTError:
            log.error("an outbound interceptor set the invalid topic %r: message dropped",
                      publish.topic)
            return None
        return Pending(copy, min(pending.qos, copy.qos), pending.subscription_ids, copy.retain,
                       pending.seq)

    def _with_alias(self, conn: ClientConnection, session: Session,
                    pending: Pending) -> tuple[bytes, bytes]:
        message = pending.message
        aliases = session.outbound_aliases
        alias = aliases.get(message.topic)
        if alias is not None:
            return message.encoded_with_alias(conn.version, pending.qos, pending.retain,
                                              pending.subscription_ids, alias, False)
        if len(aliases) < conn.out_alias_max:
            alias = len(aliases) + 1
            aliases[message.topic] = alias
            return message.encoded_with_alias(conn.version, pending.qos, pending.retain,
                                              pending.subscription_ids, alias, True)
        return message.encoded(conn.version, pending.qos, pending.retain,
                               pending.subscription_ids)

    def drain(self, session: Session) -> None:
        """Move queued deliveries into the window while it has room."""
        conn = session.connection
        queue = session.queue
        if conn is None:
            return
        now = time.time()
        while queue and not conn.congested and not conn.closed:
            pending = queue[0]
            if pending.qos and len(session.inflight) >= conn.send_window:
                break
            queue.popleft()
            if pending.message.expired(now):
                self.metrics.messages_dropped += 1
                if pending.seq:
                    self.store.dequeue(session.client_id, pending.seq)
                continue
            self._send(conn, session, pending)

    def acknowledged(self, conn: ClientConnection, packet_id: int, done: bool) -> None:
        session = conn.session
        assert session is not None
        if session.inflight.pop(packet_id, None) is None:
            return
        if session.persistent:
            self.store.delete_inflight(session.client_id, packet_id, "out")
        if len(session.inflight) >= conn.send_window:  # only after resume() held some back
            for pid, outbound in session.inflight.items():
                if outbound.state == "held":
                    outbound.state = "publish"
                    self._resend(conn, pid, outbound)
                    return
        if session.queue:
            self.drain(session)

    def released(self, session: Session, packet_id: int, outbound: Outbound) -> None:
        outbound.state = "pubrel"
        if session.persistent:
            self.store.save_inflight(StoredInflight(session.client_id, packet_id, "out",
                                                    "pubrel", None))

    def save_inbound_qos2(self, session: Session, packet_id: int) -> None:
        self.store.save_inflight(StoredInflight(session.client_id, packet_id, "in", "pubrec"))

    # ------------------------------------------------------------------ retained

    def _retain(self, message: Message) -> bool:
        if self.cluster is not None:
            self.cluster.retained_changed(message)
        return self.apply_retained(message)

    def apply_retained(self, message: Message, only_if_absent: bool = False) -> bool:
        """Set or clear a retained message here (no replication); True when it hit the store."""
        if only_if_absent and message.topic in self.retained:
            return False
        if not message.payload:
            if self.retained.pop(message.topic, None) is not None:
                self.store.delete_retained(message.topic)
                return message.qos > 0
            return False
        self.retained[message.topic] = message
        self.store.save_retained(self._stored_retained(message))
        return message.qos > 0

    def send_retained_for(self, conn: ClientConnection, requests: list[SubscriptionRequest],
                          codes: list[int], existed: list[bool]) -> None:
        session = conn.session
        assert session is not None
        if not self.retained:
            return
        now = time.time()
        for request, code, was in zip(requests, codes, existed, strict=False):
            if code >= 0x80 or request.retain_handling == 2:
                continue
            if request.retain_handling == 1 and was:
                continue
            topic_filter = request.topic_filter
            if parse_shared_subscription(topic_filter) is not None:
                continue  # shared subscriptions get no retained messages
            sub = session.subscriptions.get(topic_filter)
            sid = sub.subscription_id if sub is not None else None
            if "+" in topic_filter or "#" in topic_filter:
                candidates = list(self.retained.items())
            else:  # no wildcard: one lookup, not a scan of every retained message
                exact = self.retained.get(topic_filter)
                candidates = [(topic_filter, exact)] if exact is not None else []
            for topic, message in candidates:
                if message.expired(now):
                    del self.retained[topic]
                    self.store.delete_retained(topic)
                    continue
                if topic_matches(topic_filter, topic):
                    granted = min(message.qos, code)
                    self._deliver(session, Pending(message, granted, (sid,) if sid else None,
                                                   True))

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, conn: ClientConnection, requests: list[SubscriptionRequest],
                  subscription_id: int | None) -> tuple[list[int], list[bool]]:
        """Add the subscriptions; one reason code each, and whether each existed before."""
        session = conn.session
        assert session is not None
        settings = self.settings
        codes: list[int] = []
        existed: list[bool] = []
        for request in requests:
            existed.append(request.topic_filter in session.subscriptions)
            topic_filter = request.topic_filter
            try:
                validate_topic_filter(topic_filter)
            except MQTTError:
                codes.append(RC.TOPIC_FILTER_INVALID)
                continue
            shared = parse_shared_subscription(topic_filter)
            plain = shared[1] if shared else topic_filter
            if shared and not settings.shared_subscriptions:
                codes.append(RC.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED)
                continue
            if shared and request.no_local and conn.version == 5:
                conn._refuse(RC.PROTOCOL_ERROR, "no local on a shared subscription")
                return [], []
            if not settings.wildcard_subscriptions and ("+" in plain or "#" in plain):
                codes.append(RC.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED)
                continue
            if len(topic_filter) > settings.max_topic_length:
                codes.append(RC.TOPIC_FILTER_INVALID)
                continue
            granted = min(request.qos, settings.maximum_qos)
            subscription = Subscription(
                session, topic_filter, granted, request.no_local, request.retain_as_published,
                request.retain_handling, subscription_id, shared[0] if shared else None)
            session.subscriptions[topic_filter] = subscription
            if self.subscriptions.add(plain, subscription) and self.cluster is not None:
                self.cluster.filter_added(topic_filter)
            codes.append(granted)
        if session.persistent:
            self._save_session(session)
        return codes, existed

    def unsubscribe(self, conn: ClientConnection, filters: Iterable[str]) -> list[int]:
        session = conn.session
        assert session is not None
        codes: list[int] = []
        for topic_filter in filters:
            subscription = session.subscriptions.pop(topic_filter, None)
            if subscription is None:
                codes.append(RC.NO_SUBSCRIPTION_EXISTED)
            else:
                self._remove_from_tree(subscription)
                codes.append(RC.SUCCESS)
        if session.persistent:
            self._save_session(session)
        return codes

    def _remove_from_tree(self, subscription: Subscription) -> None:
        shared = parse_shared_subscription(subscription.topic_filter)
        plain = shared[1] if shared else subscription.topic_filter
        removed = self.subscriptions.remove(plain, subscription.session.client_id,
                                            subscription.share_group)
        if removed and self.cluster is not None:
            self.cluster.filter_removed(subscription.topic_filter)

    def taken_over_elsewhere(self, client_id: str) -> None:
        """The client connected on another node: its connection here is closed (0x8E)."""
        session = self.sessions.get(client_id)
        if session is not None and session.connection is not None:
            log.info("client %r connected on another node: closing it here", client_id)
            session.connection.close(RC.SESSION_TAKEN_OVER,
                                     "another connection took the session over")

    def local_filters(self) -> list[str]:
        """Every topic filter a local session holds, once per session (for the cluster)."""
        return [f for session in self.sessions.values() for f in session.subscriptions]

    # ------------------------------------------------------------------ timers

    def _watch(self, conn: ClientConnection, delay: float) -> None:
        """Arm the connection's one timer: the CONNECT deadline, then keep alive (1.5 x)."""
        if conn.deadline is not None:
            conn.deadline.cancel()
            conn.deadline = None
        if delay > 0 and self._loop is not None:
            conn.deadline = self._loop.call_later(delay, self._deadline_passed, conn)

    def _deadline_passed(self, conn: ClientConnection) -> None:
        conn.deadline = None
        if conn.closed:
            return
        if conn.session is None:
            log.info("no CONNECT within %.1f s: closing", self.settings.connect_timeout)
            conn.close()
            return
        # Reads only move last_read; the timer is re-armed for what is left, not on every read.
        left = conn.last_read + conn.keep_alive * 1.5 - time.monotonic()
        if left > 0:
            self._watch(conn, left)
            return
        log.info("client %r missed its keep alive", conn.client_id)
        conn.close(RC.KEEP_ALIVE_TIMEOUT, "keep alive timeout")

    # ------------------------------------------------------------------ persistence

    def _save_session(self, session: Session) -> None:
        self.store.save_session(StoredSession(
            session.client_id, session.protocol_version, session.expiry_interval,
            session.disconnected_at,
            {f: StoredSubscription(f, s.qos, s.no_local, s.retain_as_published,
                                   s.retain_handling, s.subscription_id)
             for f, s in session.subscriptions.items()},
        ))

    @staticmethod
    def _stored(pending: Pending) -> StoredMessage:
        message = pending.message
        props = dict(message.properties) if message.properties else {}
        if pending.subscription_ids:
            props[P.SUBSCRIPTION_IDENTIFIER] = list(pending.subscription_ids)
        return StoredMessage(message.topic, message.payload, pending.qos, pending.retain,
                             encode_properties(props) if props else b"", message.expiry_at,
                             message.publisher_id)

    @staticmethod
    def _stored_retained(message: Message) -> StoredMessage:
        props = encode_properties(message.properties) if message.properties else b""
        return StoredMessage(message.topic, message.payload, message.qos, True, props,
                             message.expiry_at, message.publisher_id)

    @staticmethod
    def _pending_from(stored: StoredMessage) -> Pending:
        props = decode_properties(stored.properties) if stored.properties else {}
        sub_ids = props.pop(P.SUBSCRIPTION_IDENTIFIER, None)
        message = Message(stored.topic, stored.payload, stored.qos, stored.retain, props,
                          stored.publisher_id, stored.expiry_at)
        return Pending(message, stored.qos, tuple(sub_ids) if sub_ids else None, stored.retain)

    def _restore(self, snapshot: Snapshot) -> None:
        now = time.time()
        for topic, stored in snapshot.retained.items():
            props = decode_properties(stored.properties) if stored.properties else {}
            self.retained[topic] = Message(topic, stored.payload, stored.qos, True, props,
                                           stored.publisher_id, stored.expiry_at)
        for client_id, record in snapshot.sessions.items():
            self._restore_session(record, snapshot.queues.get(client_id, []),
                                  snapshot.inflight.get(client_id, []), now)
        if snapshot.sessions or snapshot.retained:
            log.info("restored %d sessions and %d retained messages",
                     len(snapshot.sessions), len(snapshot.retained))

    def _restore_session(self, record: StoredSession, queue: list[tuple[int, StoredMessage]],
                         inflight_records: list[StoredInflight], now: float) -> Session:
        client_id = record.client_id
        session = Session(client_id, record.protocol_version, record.expiry_interval)
        session.disconnected_at = record.disconnected_at or now
        for topic_filter, sub in record.subscriptions.items():
            shared = parse_shared_subscription(topic_filter)
            subscription = Subscription(session, topic_filter, sub.qos, sub.no_local,
                                        sub.retain_as_published, sub.retain_handling,
                                        sub.subscription_id, shared[0] if shared else None)
            session.subscriptions[topic_filter] = subscription
            if self.subscriptions.add(shared[1] if shared else topic_filter, subscription) \
                    and self.cluster is not None:
                self.cluster.filter_added(topic_filter)
        for seq, stored in queue:
            pending = self._pending_from(stored)
            pending.seq = seq
            self._seq = max(self._seq, seq)
            session.queue.append(pending)
        for inflight in inflight_records:
            if inflight.direction == "in":
                session.inbound_qos2.add(inflight.packet_id)
            elif inflight.message is not None or inflight.state == "pubrel":
                pending = (self._pending_from(inflight.message) if inflight.message
                           else Pending(Message("", b"", 2, False, None, ""), 2, None, False))
                session.inflight[inflight.packet_id] = Outbound(pending, inflight.state)
        self.sessions[client_id] = session
        if not session.never_expires:
            remaining = session.expiry_interval - (now - session.disconnected_at)
            self._schedule_expiry(session, remaining)
        return session

    # ------------------------------------------------------------------ sessions moving nodes

    def export_session(self, client_id: str) -> SessionRecords | None:
        """Hand a session to another node: close its connection here, give its state, forget it.

        None when this node has no persistent session for ``client_id``.
        """
        session = self.sessions.get(client_id)
        if session is None:
            return None
        if session.connection is not None:
            log.info("client %r connected on another node: its session moves there", client_id)
            session.connection.close(RC.SESSION_TAKEN_OVER,
                                     "another connection took the session over")
            session = self.sessions.get(client_id)  # closing ends a session with expiry 0
            if session is None:
                return None
        record = StoredSession(
            session.client_id, session.protocol_version, session.expiry_interval,
            session.disconnected_at,
            {f: StoredSubscription(f, s.qos, s.no_local, s.retain_as_published,
                                   s.retain_handling, s.subscription_id)
             for f, s in session.subscriptions.items()})
        queue = [(index, self._stored(p)) for index, p in enumerate(session.queue, 1)]
        inflight = [StoredInflight(client_id, pid, "out",
                                   "pubrel" if o.state == "pubrel" else "publish",
                                   None if o.state == "pubrel" else self._stored(o.pending))
                    for pid, o in session.inflight.items()]
        inflight += [StoredInflight(client_id, pid, "in", "pubrec")
                     for pid in session.inbound_qos2]
        if session.will_handle is not None:  # the client is back (elsewhere): no will
            session.will_handle.cancel()
            session.will_handle = None
        session.will = None
        self._end_session(session)
        return record, queue, inflight

    def import_session(self, records: SessionRecords) -> None:
        """Take over a session another node handed over (before this node's CONNACK)."""
        record, queue, inflight = records
        existing = self.sessions.get(record.client_id)
        if existing is not None:
            if existing.connection is not None:
                return
            self._end_session(existing)
        session = self._restore_session(record, queue, inflight, time.time())
        self._save_session(session)
        client_id = session.client_id
        for pending in session.queue:
            self._seq += 1
            pending.seq = self._seq
            self.store.enqueue(client_id, pending.seq, self._stored(pending))
        for pid, outbound in session.inflight.items():
            self.store.save_inflight(StoredInflight(
                client_id, pid, "out", "pubrel" if outbound.state == "pubrel" else "publish",
                None if outbound.state == "pubrel" else self._stored(outbound.pending)))
        for pid in session.inbound_qos2:
            self.save_inbound_qos2(session, pid)
