"""One node's broker: the sessions it holds, who wants which topic, and the way of a PUBLISH.

The broker owns the session registry and the topic tree, and routes: :meth:`Broker.route` answers
in one lookup who wants a topic here and on other nodes, :meth:`Broker.publish` delivers along
that answer. What it does not own it delegates: the way out to one subscriber to
:class:`Outbox`, retained messages to :class:`RetainedMessages`, timers to :class:`SessionClock`,
the store to :class:`Records`, other nodes to a :class:`ClusterPort`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

from hive_core.broker._custody import SessionCustody
from hive_core.broker._deadlines import Deadlines
from hive_core.broker._expiry import SessionClock
from hive_core.broker._handover import takes
from hive_core.broker._message import Message
from hive_core.broker._metrics import BrokerMetrics, BrokerStats
from hive_core.broker._outbox import Outbox
from hive_core.broker._overload_monitor import OverloadMonitor
from hive_core.broker._ports import (
    NO_GROUPS,
    NO_NODES,
    ClusterPort,
    InputFence,
    Route,
)
from hive_core.broker._records import (
    Records,
    retained_from,
    session_from,
    snapshot_records,
)
from hive_core.broker._retained import RetainedMessages
from hive_core.broker._session import Link, Pending, Session, Subscription
from hive_core.broker._settings import BrokerSettings
from hive_core.broker._topic_tree import SharedGroup, TopicTree, aggregate_without_no_local
from hive_core.mqtt import (
    MQTTError,
    PropertyId,
    ReasonCode,
    SubscriptionRequest,
    Will,
    parse_shared_subscription,
    validate_topic_filter,
)
from hive_core.persistence import SessionStore, Snapshot, StoredMessage
from hive_core.plugins import Extensions

log = logging.getLogger("hive.broker")
_NOTHING_HELD: AbstractContextManager[Callable[[], bool]] = nullcontext(lambda: False)
access_log = logging.getLogger("hive.access")  # connects and disconnects: one line each
P = PropertyId
RC = ReasonCode
_ROUTE_CACHE_LIMIT = 50_000


class Broker:
    """The sessions of one node and the routing of its messages (see the module docstring)."""

    def __init__(self, settings: BrokerSettings, store: SessionStore,
                 extensions: Extensions | None = None) -> None:
        self.settings = settings
        self.store = store
        self.extensions = extensions if extensions is not None else Extensions.none()
        self.metrics = BrokerMetrics()
        self.records = Records(store)
        self.retained = RetainedMessages(self.records)
        self.outbox = Outbox(settings, self.records, self.metrics, self.extensions, self.spawn)
        self.clock = SessionClock(self._expired, self._will_due)
        # The clocks the connections read (a simulation or a test may give its own).
        self.monotonic: Callable[[], float] = time.monotonic
        self.wall_time: Callable[[], float] = time.time
        self.deadlines = Deadlines()  # the connections' CONNECT and keep-alive deadlines
        self.cluster: ClusterPort | None = None  # set while this node is part of a cluster
        self.input_fence = InputFence()  # the cluster's: clients' input waits after a pause
        self.sessions: dict[str, Session] = {}
        self.custody = SessionCustody(self)  # the sessions as the cluster moves them
        self.subscriptions = TopicTree()
        self.connections: set[Link] = set()
        self.connected_count = 0
        self._routes: dict[str, Route] = {}
        self._dirty: list[Any] = []
        self._flush_scheduled = False
        self._received: list[Message] = []  # accepted from clients, for hive_publishes_received
        self._tasks: set[asyncio.Task[Any]] = set()
        self._client_events: dict[str, asyncio.Task[None]] = {}  # the last one, by client id
        self.overload: OverloadMonitor | None = None  # <overload-protection> (node.py)

    # ------------------------------------------------------------------ lifecycle

    def start(self, snapshot: Snapshot) -> None:
        now = time.time()
        self.retained.restore(snapshot.retained)
        for records in snapshot_records(snapshot):
            self.adopt(session_from(records, now), now)
        if snapshot.sessions or snapshot.retained:
            log.info("restored %d sessions and %d retained messages",
                     len(snapshot.sessions), len(snapshot.retained))

    async def stop(self) -> None:
        for link in list(self.connections):
            link.close(RC.SERVER_SHUTTING_DOWN, "the node is shutting down")
        self.flush()
        if self._client_events:  # extensions hear of the clients the stop disconnected
            await asyncio.wait(list(self._client_events.values()),
                               timeout=self.extensions.deadline + 1)
        for task in list(self._tasks):
            task.cancel()
        self.clock.stop()
        self.deadlines.close()
        await self.records.commit()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coro`` beside the loop's work; the broker cancels it when it stops."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

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

    def load(self) -> list[int]:
        """[connections, sessions, messages in, messages out]: what a heartbeat tells peers."""
        metrics = self.metrics
        return [self.connected_count, len(self.sessions), metrics.messages_in,
                metrics.messages_out]

    def stats(self) -> BrokerStats:
        m = self.metrics
        metrics = replace(m, dropped=dict(m.dropped), messages_in_by_qos=list(m.messages_in_by_qos),
                          messages_out_by_qos=list(m.messages_out_by_qos))
        sessions = self.sessions.values()
        return BrokerStats(metrics, self.connected_count, len(self.sessions), len(self.retained),
                           sum(len(s.subscriptions) for s in sessions),
                           sum(len(s.queue) for s in sessions),
                           self.overload.protection.stats() if self.overload else None)

    # ------------------------------------------------------------------ output batching

    def mark_dirty(self, link: Any) -> None:
        """``link`` has output: it is written once, at the end of this loop iteration."""
        self._dirty.append(link)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def received(self, message: Message) -> None:
        """A client's PUBLISH was accepted: recorders (``hive_publishes_received``) get it
        with the others of this loop iteration, before any of them causes a write."""
        received = self._received
        received.append(message)
        if len(received) == 1 and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def record_received(self) -> None:
        """Hand what was accepted to the recorders: first thing before any output is written
        (the channels' here, the cluster links' in theirs)."""
        received = self._received
        if received:
            self._received = []
            self.extensions.publishes_received(received)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._received:
            self.record_received()
        dirty, self._dirty = self._dirty, []
        for link in dirty:
            link.flush()

    # ------------------------------------------------------------------ connections

    def accept(self, link: Link) -> None:
        self.connections.add(link)
        self.metrics.connections_accepted += 1

    def has_room_for(self, client_id: str) -> bool:
        """``max-connections`` allows this client in (a takeover adds no connection)."""
        limit = self.settings.max_connections
        if limit < 0 or self.connected_count < limit:
            return True
        current = self.sessions.get(client_id)
        return current is not None and current.connection is not None

    def attach(self, link: Link, client_id: str, version: int, clean_start: bool, expiry: int,
               will: Will | None) -> tuple[Session, bool]:
        """Give the connection its session (taking it over from an older connection)."""
        session = self.sessions.get(client_id)
        if session is not None and session.connection is not None:
            log.info("client %r taken over by a new connection", client_id)
            session.connection.close(RC.SESSION_TAKEN_OVER,
                                     "another connection took the session over")
            session = self.sessions.get(client_id)  # closing ends a session with expiry 0
        if session is not None and clean_start:
            self.end_session(session)
            session = None
        present = session is not None
        if session is None:
            session = Session(client_id, version, expiry, stored=expiry > 0)
            self.sessions[client_id] = session
        else:
            self.clock.cancel_expiry(client_id)
            self.clock.cancel_will(client_id)  # came back before the will delay ran out
            session.expiry_interval = expiry
            session.protocol_version = version
        session.connection = link
        session.taken_over = False
        session.disconnected_at = None
        session.will = will
        self.records.will(session, self.clock.will_delay(session) if will is not None else 0)
        self.connected_count += 1
        if self.cluster is not None:
            self.cluster.client_connected(client_id)
        if session.persistent:
            self.records.save_session(session)
        elif present:
            self.records.delete_session(client_id)
        return session, present

    def resume(self, session: Session) -> None:
        """After CONNACK: finish what was in flight, then the queue."""
        self.outbox.resume(session)

    def connection_closed(self, link: Link, session: Session | None, graceful: bool,
                          will_discarded: bool) -> None:
        """The connection is gone: the session stays (expiry > 0) or ends, the will may go out.

        ``graceful``: the client sent DISCONNECT; ``will_discarded``: with reason 0x00.
        """
        self.connections.discard(link)
        if session is None or session.connection is not link:
            return
        access_log.info(
            "client %r disconnected (%s)", session.client_id,
            "it sent DISCONNECT" if graceful else "connection lost or closed by the node")
        if link.info is not None and self.extensions.watches_clients:
            self.client_event(session.client_id, self.extensions.client_disconnected(
                link.info, graceful))
        self.connected_count -= 1
        session.connection = None
        session.disconnected_at = time.time()
        if session.will is not None and not will_discarded:
            delay = self.clock.will_delay(session)
            if delay <= 0:
                self.publish_will(session)
            else:
                self.clock.will_after(session, delay)
                self.records.will(session, delay)  # pending: from now on, a delay to run
        elif session.will is not None:
            session.will = None
            self.records.will(session)
        if session.expiry_interval == 0:
            self.end_session(session)
        else:
            self.records.save_session(session)
            if not session.never_expires:
                self.clock.expire_after(session, session.expiry_interval)

    def _expired(self, session: Session) -> None:
        if session.connection is None and self.sessions.get(session.client_id) is session:
            log.info("session of %r expired", session.client_id)
            self.end_session(session)

    def end_session(self, session: Session, deleted: bool = True) -> None:
        """Discard the session: subscriptions, queue, in-flight; a pending will goes out now.

        ``deleted``: the session is over (expired, replaced by a clean start), not moved to
        another node: a copy elsewhere must not bring it back.
        """
        if self.clock.cancel_will(session.client_id):
            self.publish_will(session)
        self.clock.cancel_expiry(session.client_id)
        for subscription in session.subscriptions.values():
            self.remove_from_tree(subscription)
        session.clear()
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
            if self.cluster is not None:
                self.cluster.session_ended(session.client_id, deleted)
        self.records.ended(session)

    def adopt(self, session: Session, now: float) -> None:
        """Take a restored or imported session in: its subscriptions, queue and expiry."""
        for subscription in session.subscriptions.values():
            self._add_to_tree(subscription)
        for pending in (*session.queue, *(o.pending for o in session.inflight.values())):
            self.records.restored_seq(pending.seq)
        self.sessions[session.client_id] = session
        if not session.never_expires:
            disconnected_at = session.disconnected_at or now
            self.clock.expire_after(session,
                                    session.expiry_interval - (now - disconnected_at))

    # ------------------------------------------------------------------ wills

    def _will_due(self, session: Session) -> None:
        self.publish_will(session)

    def publish_will(self, session: Session) -> None:
        """Publish the session's will now (at most once)."""
        will, session.will = session.will, None
        if will is None:
            return
        self.records.will(session)
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

    def route(self, topic: str) -> Route:
        """Who wants ``topic``: sessions and shared groups here, other nodes (cached per topic)."""
        deliveries, groups = self.subscriptions.match(topic)
        cluster = self.cluster
        if cluster is None:
            route = Route(deliveries, groups, NO_NODES, NO_GROUPS)
        else:
            nodes, remote_groups = cluster.remote_routes(topic)
            route = Route(deliveries, groups, nodes, remote_groups)
        routes = self._routes
        if len(routes) >= _ROUTE_CACHE_LIMIT:
            routes.clear()
        routes[topic] = route
        return route

    def routes_changed(self) -> None:
        self._routes.clear()

    remote_routes_changed = routes_changed

    def publish(self, message: Message, from_cluster: bool = False) -> tuple[bool, bool]:
        """Route a message to everyone who wants it; (anyone matched, a durable write made).

        A message from a local client also goes to the other nodes that want it; one that came
        from another node (``from_cluster``) reaches only this node's plain subscribers: the
        node it was published on chose who in each shared group gets it.
        """
        metrics = self.metrics
        metrics.messages_in += 1
        metrics.messages_in_by_qos[message.qos] += 1
        durable = False
        cluster = self.cluster
        if message.retain and not from_cluster:
            if cluster is not None:
                cluster.retained_changed(message)
            durable = self.retained.apply(message)
        topic = message.topic
        route = self._routes.get(topic) or self.route(topic)
        deliveries = route.deliveries
        publisher = message.publisher_id
        qos = message.qos
        plain = not self.extensions.intercepts_outbound
        deliver = self.outbox.deliver
        mid = message.mid if from_cluster else None
        if not from_cluster and cluster is not None and qos:  # alone, it may reach absent nodes
            # Its identity before any delivery: a copy of a session being handed over or
            # merged may get it from another node too, and must know it when it comes.
            mid = cluster.identify(message)
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
            link = session.connection
            if (granted == 0 and link is not None and plain and not link.congested
                    and not link.out_alias_max):
                # The hot path: QoS 0 to a connected client, encoded once per variant.
                data = message.encoded(link.version, 0, retain, delivery.subscription_ids)[0]
                if len(data) <= link.max_out_packet:
                    out = link.out
                    if out:
                        out.append(data)
                    else:
                        link.out = [data]
                        self.mark_dirty(link)
                    sent += 1
                continue
            if mid is not None and qos and not takes(session, mid):
                metrics.handover_duplicates_skipped += 1
                continue  # it came another way first (a handover's tail, a merge, a rescue)
            if deliver(session, Pending(message, granted, delivery.subscription_ids, retain)):
                durable = True
        if sent:
            metrics.messages_out += sent
            metrics.messages_out_by_qos[0] += sent
        matched = bool(deliveries)
        if from_cluster:
            return matched, durable
        groups = route.groups
        if cluster is not None:
            if route.nodes:
                cluster.forward(message, route.nodes)
                matched = True
                durable = durable or message.qos > 0  # acknowledged once the nodes have it
            if route.remote_groups:
                groups, sent_on = choose_shared(cluster, message, groups, route)
                matched = matched or sent_on
                durable = durable or (sent_on and message.qos > 0)
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
        return True, self.outbox.deliver(member.session, Pending(
            message, granted, (sid,) if sid else None, retain))

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, session: Session, requests: list[SubscriptionRequest],
                  subscription_id: int | None, version: int) -> tuple[list[int], list[bool]] | None:
        """Add the subscriptions; one reason code each, and whether each existed before.

        None when the request breaks the protocol (the connection must be closed).
        """
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
            if shared and request.no_local and version == 5:
                return None  # MQTT-3.8.3-4: a protocol error
            if not settings.wildcard_subscriptions and ("+" in plain or "#" in plain):
                codes.append(RC.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED)
                continue
            if settings.topic_too_big(topic_filter):
                codes.append(RC.TOPIC_FILTER_INVALID)
                continue
            granted = min(request.qos, settings.maximum_qos)
            subscription = Subscription(
                session, topic_filter, granted, request.no_local, request.retain_as_published,
                request.retain_handling, subscription_id, shared[0] if shared else None)
            session.subscribed()[topic_filter] = subscription
            self._add_to_tree(subscription)
            if session.persistent:
                self.records.save_subscription(session, subscription)
            codes.append(granted)
        return codes, existed

    def unsubscribe(self, session: Session, filters: Iterable[str]) -> list[int]:
        codes: list[int] = []
        for topic_filter in filters:
            subscription = session.subscriptions.pop(topic_filter, None)
            if subscription is None:
                codes.append(RC.NO_SUBSCRIPTION_EXISTED)
            else:
                self.remove_from_tree(subscription)
                if session.persistent:
                    self.records.delete_subscription(session, topic_filter)
                codes.append(RC.SUCCESS)
        return codes

    def send_retained_for(self, session: Session, requests: list[SubscriptionRequest],
                          codes: list[int], existed: list[bool]) -> None:
        """The retained messages a SUBSCRIBE asks for (retain handling), after its SUBACK."""
        if not self.retained:
            return
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
            for message in self.retained.matching(topic_filter):
                self.outbox.deliver(session, Pending(message, min(message.qos, code),
                                                     (sid,) if sid else None, True))

    def _add_to_tree(self, subscription: Subscription) -> None:
        shared = parse_shared_subscription(subscription.topic_filter)
        plain = shared[1] if shared else subscription.topic_filter
        self._routes.clear()
        if self.subscriptions.add(plain, subscription) and self.cluster is not None:
            self.cluster.filter_added(subscription.topic_filter)

    def remove_from_tree(self, subscription: Subscription) -> None:
        shared = parse_shared_subscription(subscription.topic_filter)
        plain = shared[1] if shared else subscription.topic_filter
        self._routes.clear()
        removed = self.subscriptions.remove(plain, subscription.session.client_id,
                                            subscription.share_group)
        if removed and self.cluster is not None:
            self.cluster.filter_removed(subscription.topic_filter)

    # ------------------------------------------------------------------ the cluster's side

    def attach_cluster(self, cluster: ClusterPort | None) -> None:
        self.cluster = cluster
        self._routes.clear()

    async def commit(self) -> None:
        await self.records.commit()

    def forwards_held(self) -> AbstractContextManager[Callable[[], bool]]:  # (ChannelHost)
        return self.cluster.forwards_held() if self.cluster is not None else _NOTHING_HELD

    async def settle(self) -> None:
        """Until what was written and forwarded so far is durable here and acknowledged by the
        nodes it went to: then a publisher may be told its message is safe."""
        await self.records.commit()
        if self.cluster is not None:
            await self.cluster.forwards_acknowledged()

    def input_waits(self, now: float) -> Awaitable[None] | None:
        """What a client's input waits for after this node did not run (cluster/_fence.py)."""
        return self.cluster.input_waits(now) if self.cluster is not None else None

    def refused(self, message: Message) -> bool:
        """Whether a local QoS 1/2 message is refused: a node it is for keeps too much already."""
        if self.cluster is None:
            return False
        route = self._routes.get(message.topic) or self.route(message.topic)
        return bool(route.nodes) and self.cluster.refuses(route.nodes)

    def publish_from_peer(self, message: Message) -> None:
        self.publish(message, from_cluster=True)

    def deliver_shared(self, group_name: str, topic_filter: str, message: Message) -> None:
        group = self.subscriptions.shared_group(topic_filter, group_name)
        if group is not None:
            self._deliver_to_group(group, message)

    def apply_retained(self, message: Message, only_if_absent: bool = False) -> bool:
        return self.retained.apply(message, only_if_absent)

    def retained_messages(self) -> list[Message]:
        return self.retained.live()

    def local_filters(self) -> list[str]:
        return [f for session in self.sessions.values() for f in session.subscriptions]

    def import_retained(self, stored: StoredMessage) -> bool:
        """A retained message from a backup: set unless its topic has one here (that one
        wins). It reaches the other nodes as a local publisher's would, and no subscriber:
        an import restores state, it publishes nothing. Whether it was set."""
        message = retained_from(stored)
        if not message.payload or message.topic in self.retained:
            return False
        if self.cluster is not None:
            self.cluster.retained_changed(message)
        self.retained.apply(message)
        return True

    def share_again(self, message: Message) -> None:  # (PeerDelivery)
        route = self._routes.get(message.topic) or self.route(message.topic)
        groups = route.groups
        if self.cluster is not None and route.remote_groups:
            groups, _sent_on = choose_shared(self.cluster, message, groups, route)
        for group in groups:
            self._deliver_to_group(group, message)

    def deliver_again(self, message: Message) -> None:  # (PeerDelivery)
        self.publish_among(message, (), among=False, again=True)

    def publish_among(self, message: Message, client_ids: Collection[str],
                      among: bool, again: bool = False) -> None:
        """A message from another node for the plain subscribers here whose client id is (``among``)
        or is not in ``client_ids``: a takeover's slow path. ``again``: see deliver_again."""
        if not again:
            self.metrics.messages_in += 1
            self.metrics.messages_in_by_qos[message.qos] += 1
        deliveries, _groups = self.subscriptions.match(message.topic)
        publisher = message.publisher_id
        for delivery in deliveries:
            session = delivery.session
            if (session.client_id in client_ids) is not among:
                continue
            if delivery.no_local_filters and session.client_id == publisher:
                own = aggregate_without_no_local(delivery)
                if own is None:
                    continue
                delivery = own
            granted = min(delivery.qos, message.qos)
            if again and not granted:
                continue  # QoS 0 takes no identity (the fast path above): it had it
            if message.qos and not takes(session, message.mid):
                self.metrics.handover_duplicates_skipped += not again  # (again: most had it)
                continue  # it reached the session another way first
            retain = message.retain and delivery.retain_as_published
            self.outbox.deliver(session, Pending(message, granted, delivery.subscription_ids,
                                                 retain))


def choose_shared(cluster: ClusterPort, message: Message, groups: list[SharedGroup],
                  route: Route) -> tuple[list[SharedGroup], bool]:
    """Each shared group with members elsewhere: which node serves it for this message.

    Returns the groups this node serves, and whether the message went to another node.
    """
    local = {(g.name, g.topic_filter): g for g in groups}
    remote = route.remote_groups
    served = []
    sent_on = False
    for key in local.keys() | remote.keys():
        group = local.get(key)
        target = cluster.pick_shared(key, remote.get(key, NO_NODES), group is not None)
        if target is not None:
            cluster.send_shared(target, key, message)
            sent_on = True
        elif group is not None:
            served.append(group)
    return served, sent_on
