"""The cluster: many nodes, one logical broker.

Full mesh and masterless. :class:`Cluster` is this node's part in it and the broker's
:class:`~hive_core.broker.ClusterPort`; the state it keeps is split by what owns it:

- :class:`~hive_core.cluster._membership.Membership`: the members, their links, the absent
  nodes, dialling and failure detection;
- :class:`~hive_core.cluster._routing.RoutingTable`: which topic filters each node has
  subscribers for, so a PUBLISH crosses to a node only when that node wants it, once per node;
- :class:`~hive_core.cluster._forwarding.Forwarding`: what was sent to each peer and not yet
  acknowledged, and what arrived from it (replayed after a reconnect, skipped if handled);
- :class:`~hive_core.cluster._custody.Custody`: which node holds each session (custody epochs),
  sessions moving between nodes, and two copies merged after a split;
- :class:`~hive_core.cluster._takeover.Takeover`: replication on the ring and the takeover of a
  failed node's sessions;
- the retained messages' versions, and the PUBLISH path, here.

Each part handles the frames of its own state (``frame_handlers``); :meth:`Cluster.on_frame`
takes the hot path (PUBLISH) itself and looks the others up in one table.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from hive_core import __version__
from hive_core.broker import BrokerPort, Message, RemoteGroups, SessionRecords, SharedKey
from hive_core.cluster import _progress as progress
from hive_core.cluster._auth import PeerAuthentication
from hive_core.cluster._client_queries import ClientQueries
from hive_core.cluster._client_services import SERVICE_FRAMES, ClusterClients
from hive_core.cluster._custody import Custody
from hive_core.cluster._forwarding import ForwardAcks, Forwarding, HeldForwards
from hive_core.cluster._health import HealthCheck
from hive_core.cluster._kept import KeptOnDisk
from hive_core.cluster._latency import Latencies, LatencySnapshot
from hive_core.cluster._link import PeerLink
from hive_core.cluster._membership import Membership
from hive_core.cluster._merge_wait import MergeWait
from hive_core.cluster._moved import Moved
from hive_core.cluster._overload import PeerPressure
from hive_core.cluster._parts import Beside, ClusterSettings, FrameHandler, Member
from hive_core.cluster._replication import ReplicaShelf, ReplicatingStore
from hive_core.cluster._retained_versions import RetainedVersions
from hive_core.cluster._routing import RoutingTable
from hive_core.cluster._session_frames import Handover, in_parts, message_body, message_from
from hive_core.cluster._takeover import Takeover
from hive_core.cluster._transport import NodeTransport, TcpTransport
from hive_core.cluster._udp import UdpTransport
from hive_core.cluster._wire import (
    FrameKind,
    encode_frame,
    encode_publish_frame,
)
from hive_core.mqtt import decode_properties, encode_properties
from hive_ext_api import ClusterMember, ClusterNodeAddress, SessionStore, Snapshot, StoredInflight

if TYPE_CHECKING:
    from hive_core.plugins import Extensions

log = logging.getLogger("hive.cluster")

_PUBLISH = FrameKind.PUBLISH
FLUSH_PUBLISHES = 256
"""PUBLISH frames from other nodes between two flushes of the local subscribers' output."""


@dataclass(slots=True)
class ClusterMetrics:
    publishes_forwarded: int = 0
    publishes_received: int = 0
    frames_by_kind: Counter[int] = field(default_factory=Counter)  # all but PUBLISH
    publish_frames: int = 0  # PUBLISH frames, counted apart: the hot path

    @property
    def frames_in(self) -> Counter[str]:
        """Frames received, by kind name."""
        counts = Counter({FrameKind(kind).name: n for kind, n in self.frames_by_kind.items()})
        if self.publish_frames:
            counts[FrameKind.PUBLISH.name] += self.publish_frames
        return counts


@dataclass(slots=True, frozen=True)
class ClusterStats:
    """This node's view of the cluster at one moment."""

    members: int  # this node included
    connections: int  # links to other members
    publishes_forwarded: int
    publishes_received: int
    frames_in: dict[str, int]  # by frame kind
    frames_out: int
    remote_filters: dict[str, list[str]]  # the topic filters each member has subscribers for
    absent: list[str]  # nodes that left less than ABSENT_KEEP ago: still routed to
    forwards_unacknowledged: int  # messages sent to other nodes and kept until they confirm
    forwards_replayed: int  # sent again after a reconnect
    forwards_duplicates: int  # received again after a reconnect, and skipped
    forwards_dropped: int  # given up on (the node forgotten), or QoS 0 not sent to a full node
    forwards_refused: int = 0  # local QoS 1/2 publishes refused: a node they were for was full
    forwards_on_disk: int = 0  # messages kept for silent nodes, on disk now (see _kept.py)
    forwards_written_to_disk: int = 0  # such messages written so far
    authentication_failures: int = 0  # links refused: the peer did not prove the shared secret
    replica_count: int = 1  # as configured
    backups: list[str] = field(default_factory=list)  # the nodes holding this node's replica
    replicas_held: list[str] = field(default_factory=list)  # the nodes whose replica is here
    replication_lag: dict[str, int] = field(default_factory=dict)  # ops not acknowledged, by backup
    # QoS 1 deliveries whose ops were held from the backups: acknowledged meanwhile (nothing
    # replicated), or shipped when the hold ran out (see _replication_hold.py)
    replication_spared: int = 0
    replication_late: int = 0
    takeovers: int = 0  # failed nodes whose sessions this node took over
    sessions_taken_over: int = 0
    messages_rescued: int = 0  # kept for a failed node, delivered to its sessions here
    merges: int = 0  # copies of a session dropped here for another node's (a split healed)
    # by peer node: (bytes sent, bytes received) on the current link, since it opened
    peer_traffic: dict[str, tuple[int, int]] = field(default_factory=dict)
    # by peer node (hive_core/cluster/_latency.py): its messages' time from routing there to
    # delivery here; forward and replication acknowledgement round trips to it
    delivery_latency: dict[str, LatencySnapshot] = field(default_factory=dict)
    forward_ack_latency: dict[str, LatencySnapshot] = field(default_factory=dict)
    replication_ack_latency: dict[str, LatencySnapshot] = field(default_factory=dict)



DELIVERY_SAMPLE = 16
"""Messages from other nodes per timed one (its observation counts for all of them): the
clock read and the histogram cost about a tenth of a message's way through a node."""


class Cluster:
    """This node's membership in the cluster: links to every peer, and what crosses them.

    Implements the broker's :class:`~hive_core.broker.ClusterPort`; talks to the broker only
    through its :class:`~hive_core.broker.BrokerPort`.
    """

    def __init__(self, node_id: str, settings: ClusterSettings, broker: BrokerPort,
                 extensions: Extensions, transport: NodeTransport | None = None,
                 store: ReplicatingStore | None = None,
                 replica_shelf: ReplicaShelf | None = None,
                 kept_store: SessionStore | None = None) -> None:
        self.node_id = node_id
        self.settings = settings
        self.broker = broker
        self.extensions = extensions
        self.address = ClusterNodeAddress(settings.external_host, settings.external_port)
        self.incarnation = time.time_ns()
        # The serial of the last message sent to other nodes: from the clock at the start, so
        # that it grows across restarts too (no node sends a message per nanosecond).
        self._serial = self.incarnation
        self.client_queries = ClientQueries()  # the control center's questions to the owners
        self.client_services: ClusterClients | None = None  # extensions' questions, both ways
        self.table = RoutingTable()
        self.forwarding = Forwarding()
        # Messages kept for a silent node go to disk (the node's store: ``store`` when it
        # replicates, or ``kept_store``), so that its publishers stop waiting for that node.
        disk_store = kept_store if kept_store is not None else store
        self.kept = KeptOnDisk(node_id, disk_store) if disk_store is not None else None
        self.forwarding.keep_on(self.kept)
        self.merge_wait = MergeWait(  # messages from a merging node, held for copies kept here
            lambda message, ids: broker.publish_among(message, ids, among=True),
            settings.connect_timeout)
        self.metrics = ClusterMetrics()
        self.delivery_times = Latencies()  # routed on a peer until delivered here, by peer
        self._delivery_countdown = 1  # the first message is timed, then one in DELIVERY_SAMPLE
        self._local_filters: Counter[str] = Counter()
        self._shared_turn: dict[SharedKey, int] = {}
        self.retained = RetainedVersions(broker)  # the version of each topic's set or clear
        self.transport = transport if transport is not None else (
            UdpTransport(settings.bind_host, settings.bind_port)
            if settings.transport_kind == "udp" else TcpTransport(
                settings.bind_host, settings.bind_port, settings.server_ssl, settings.client_ssl))
        self.authentication = PeerAuthentication(settings.shared_secret, settings.connect_timeout)
        # Background work (discovery, heartbeat, dials, and the parts' work: beside) runs in a
        # task group inside the node's (or in a task of its own); stop() cancels it and waits.
        self.tasks: TaskGroup | None = None
        self.beside = Beside()
        self.held = HeldForwards(broker.commit, self.beside.start)  # QoS 2: after the record
        # Inbound QoS 2 records from before a restart that carry their message (HeldForwards):
        # its forwards may not have left, so it goes again after the join.
        self.unconfirmed: list[StoredInflight] = []
        self._background: anyio.CancelScope | None = None
        self._background_over: anyio.Event | None = None
        self._own_task: asyncio.Task[None] | None = None
        self.stopping = False
        self.leaving_since: float | None = None
        self.membership = Membership(self)
        self.members = self.membership.members  # the same dict: the hot path reads it
        self.acks = ForwardAcks(self.forwarding, lambda: self.broker.commit(), self.members)
        self.peer_pressure = PeerPressure(self.members, self.forwarding)  # overload protection
        self.health = None if settings.health_check is None else HealthCheck(
            node_id, settings.health_check, self.membership.health_failed,
            settings.connect_timeout)
        self.custody = Custody(self)
        self.takeover = Takeover(self, store, replica_shelf)
        self.moved = Moved(self)  # sessions that left while nodes may still route here
        self.replicator = self.takeover.replicator
        if self.kept is not None:  # rows only while every backup reads them as rows
            self.kept.allowed = lambda: self.replicator is None or all(
                b in self.membership.takes_kept for b in self.replicator.backups)
        self.replicas = self.takeover.replicas
        self._handlers: dict[FrameKind, FrameHandler] = {
            FrameKind.SHARED_PUBLISH: self._on_shared_publish,
            FrameKind.FORWARD_ACK: lambda member, body: self.forwarding.acknowledged_by(
                member.node_id, int(body)),
            FrameKind.REPLAY: self._on_replay,
            FrameKind.KEPT_PUBLISH: self._on_kept_publish,
            FrameKind.FILTER_ADD: lambda member, body: self._routes(self.table.add,
                                                                    member, body),
            FrameKind.FILTER_REMOVE: lambda member, body: self._routes(self.table.remove,
                                                                       member, body),
            FrameKind.FILTERS: self._on_filters,
            **self.retained.frame_handlers(),
            FrameKind.OVERLOAD: lambda member, body: self.peer_pressure.heard(member.node_id,
                                                                               body),
            **self.membership.frame_handlers(),
            **self.custody.frame_handlers(),
            **self.takeover.frame_handlers(),
            **self.moved.frame_handlers(),
        }
        for kind in (FrameKind.CLIENT_QUERY, FrameKind.CLIENT_ANSWER):
            self._handlers[kind] = partial(self._on_client_query, kind)
        for kind in SERVICE_FRAMES:
            self._handlers[kind] = partial(self._on_service, kind)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, tasks: TaskGroup | None = None) -> None:
        """Listen, register with discovery, start the background work in ``tasks``, join."""
        self._local_filters.update(self.broker.local_filters())
        bound = await self.transport.listen(self.membership.new_link)
        if not self.settings.external_port:
            self.address = ClusterNodeAddress(self.address.host, bound.port)
        if bound.host not in ("0.0.0.0", "::"):  # a list naming this node's own bind address
            self.membership.reached[ClusterNodeAddress(bound.host, bound.port)] = self.node_id
        log.info("Cluster node %s listening on %s:%d (external %s:%d)", self.node_id,
                 bound.host, bound.port, self.address.host, self.address.port)
        if self.health is not None:
            await self.health.start()
        self.broker.attach_cluster(self)
        await self.extensions.discovery_init(self.address, self.node_id)
        # Before the join: peers named by gossip during the join are dialled in this group.
        self._background_over = anyio.Event()
        if tasks is not None:
            await tasks.start(self._run_background)
        else:
            started = anyio.Event()
            self._own_task = asyncio.get_running_loop().create_task(
                self._run_background(started=started))
            await started.wait()
        log.info("Starting cluster join process. This may take a while. "
                 "Please do not shut down Hive.")
        async with progress.still_ongoing(progress.JOIN, self.settings.progress_interval):
            await self.membership.join()
        log.info("Finished cluster join process successfully.")
        self.membership.log_view()
        unconfirmed, self.unconfirmed = self.unconfirmed, []
        if self.kept is not None and (self.kept.restored or unconfirmed):
            with self.kept.atomic():  # the old rows go in the batch that keeps them anew
                self.takeover.publish_kept(self.kept.take_restored())
                self.takeover.publish_unconfirmed(unconfirmed)
            await self.broker.commit()

    def restore(self, snapshot: Snapshot) -> None:
        """From the store as it was before a restart, what goes on again after the join:
        messages kept for silent nodes, and QoS 2 messages not confirmed forwarded."""
        if self.kept is not None:
            self.kept.restore(snapshot)
        self.unconfirmed = [i for rows in snapshot.inflight.values() for i in rows]

    async def _run_background(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                              started: anyio.Event | None = None) -> None:
        assert self._background_over is not None
        try:
            with anyio.CancelScope() as self._background:
                async with anyio.create_task_group() as self.tasks:
                    self.tasks.start_soon(self.beside.run, self.tasks)
                    self.tasks.start_soon(self.membership.discover)
                    self.tasks.start_soon(self.membership.heartbeat)
                    self.tasks.start_soon(self.membership.dialer, self.tasks)
                    self.tasks.start_soon(self.acks.run, self.tasks)
                    task_status.started()
                    if started is not None:
                        started.set()
        finally:
            self.tasks = None
            self._background_over.set()

    def leaving(self) -> None:
        """The node is about to stop: what its clients leave behind goes to its backups first
        (the broker's stop commits it, and a commit waits for the backups)."""
        if self.replicator is not None and self.replicator.backups:
            self.leaving_since = time.monotonic()
            log.info("Starting cluster replication process. This may take a while. "
                     "Please do not shut down Hive.")
            progress.while_true(lambda: not self.stopping,  # until stop() has the answer
                                progress.REPLICATION, self.settings.progress_interval)

    async def stop(self) -> None:
        if self.leaving_since is not None and self.replicator is not None:
            replicated = False
            # From here on nothing forwarded to this node is acknowledged: the senders keep it
            # and hand it to the node that takes this one's sessions over (TAKEN_OVER).
            self.acks.handed_over = True
            with anyio.move_on_after(self.settings.connect_timeout):
                self.replicator.store.release_held()  # its queues go whole to the backups
                await self.replicator.replicated(self.replicator.ship())
                replicated = True
            if replicated:
                log.info("Finished cluster replication successfully in %d ms.",
                         (time.monotonic() - self.leaving_since) * 1000)
                # The next node takes them over at the BYE: a copy kept here would come back
                # at the next start as if it were still this node's.
                self.replicator.detach()  # what follows is not for the backups
                self.broker.custody.forget_sessions()
                if self.kept is not None:
                    self.kept.forget()
            else:
                log.warning("Cluster replication did not finish within %.0f s: this node keeps "
                            "its sessions", self.settings.connect_timeout)
        self.stopping = True
        if self._background is not None and self._background_over is not None:
            self._background.cancel()
            await self._background_over.wait()
        for member in list(self.members.values()):
            member.link.send(FrameKind.BYE, self.node_id)
            member.link.close()
        for link in list(self.membership.links):
            link.close()
        await self.transport.close()
        if self.health is not None:  # after the BYEs: peers learn why this node left
            await self.health.close()
        await self.extensions.discovery_destroy(self.address)
        if self.replicas is not None:
            await self.replicas.close()
        self.broker.attach_cluster(None)

    async def client_details_from(self, node_id: str, client_ids: list[str],
                                  timeout: float = 2.0) -> dict[str, dict[str, Any] | None]:
        """The details of sessions that member ``node_id`` holds ({} when it does not answer)."""
        member = self.members.get(node_id)
        if member is None:
            return {}
        return await self.client_queries.ask(member.link, client_ids, timeout)

    # ------------------------------------------------------------------ frames

    def on_frame(self, link: PeerLink, kind: FrameKind, body: Any) -> None:
        if kind is _PUBLISH:  # the hot path: checked first, no Counter, no table
            self._on_publish(link, body)
            return
        self.metrics.frames_by_kind[kind] += 1
        if kind is FrameKind.HELLO:
            self.membership.links.add(link)
            self.membership.establish(link, body, answer=True)
            return
        if kind is FrameKind.WELCOME:
            self.membership.establish(link, body)
            return
        peer_id = link.peer_id
        member = self.members.get(peer_id) if peer_id else None
        if member is None or member.link is not link:
            return  # a frame before the handshake, or on a link that lost the tie-break
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(member, body)

    def _on_publish(self, link: PeerLink, body: Any) -> None:
        metrics = self.metrics
        metrics.publish_frames += 1
        peer_id = link.peer_id
        member = self.members.get(peer_id) if peer_id else None
        if member is None or member.link is not link:
            return
        if not self.forwarding.arrived(member.node_id):
            return  # sent again after a reconnect, handled before
        metrics.publishes_received += 1
        topic, payload, qos, retain, props, expiry_at, publisher, serial, routed_at = body
        message = Message(topic, payload, qos, retain,
                          decode_properties(props) if props else None, publisher, expiry_at)
        if serial:
            message.mid = (member.node_id, serial)
        excluding = self.takeover.excluding
        if not serial and excluding and excluding.get(member.node_id):
            # A message without identity (a node of protocol 3), maybe routed by the peer
            # before it heard of a takeover: the sessions taken over get it from the
            # failed node's share (RESCUED), not twice. With an identity, each session
            # takes it once whichever way comes first, and one routed to the taker after
            # the takeover (in no share) is not lost.
            self.broker.publish_among(message, self.takeover.adopted_of(member.node_id),
                                      among=False)
        elif self.merge_wait.waiting and (held := self.merge_wait.hold(message)):
            self.broker.publish_among(message, held, among=False)  # the others: at once
        else:
            self.broker.publish_from_peer(message)
        if self.moved.sessions:  # routed here for a session that left, by a node not told yet
            self.moved.arrived(member.node_id, message)
        if routed_at:  # handed to the subscribers' connections (written after this read)
            self._delivery_countdown -= 1
            if self._delivery_countdown <= 0:  # one in DELIVERY_SAMPLE, counted for all
                self._delivery_countdown = DELIVERY_SAMPLE
                self.delivery_times.observe(member.node_id, time.time() - routed_at,
                                            DELIVERY_SAMPLE)
        self.acks.soon(member.node_id)
        # mark_dirty flushes once after the whole read; a long read (thousands of
        # frames) is flushed in slices too, so the subscribers' side starts early.
        if not metrics.publishes_received % FLUSH_PUBLISHES:
            self.broker.flush()

    def _on_shared_publish(self, member: Member, body: Any) -> None:
        if self.forwarding.arrived(member.node_id):
            self.metrics.publishes_received += 1
            self.broker.deliver_shared(body[0], body[1], message_from(body[2]))
            self.acks.soon(member.node_id)

    def _on_kept_publish(self, member: Member, body: Any) -> None:
        if self.forwarding.arrived(member.node_id):
            self.metrics.publishes_received += 1
            message = message_from(body[2])
            if body[1]:
                message.mid = (str(body[0]), int(body[1]))
            if self.merge_wait.waiting and (held := self.merge_wait.hold(message)):
                self.broker.publish_among(message, held, among=False)
            else:
                self.broker.publish_from_peer(message)
            if self.moved.sessions:
                self.moved.arrived(member.node_id, message)
            self.acks.soon(member.node_id)

    def _on_replay(self, member: Member, body: Any) -> None:
        self.forwarding.replaying(member.node_id, int(body[0]), int(body[1]))
        self.acks.soon(member.node_id)  # what it holds and this node had handled

    def _on_filters(self, member: Member, body: Any) -> None:
        member.filters_known = True
        self._routes(self.table.replace, member, list(body))

    def _routes(self, change: Any, member: Member, body: Any) -> None:
        change(member.node_id, body)
        self.broker.remote_routes_changed()

    def _on_client_query(self, kind: FrameKind, member: Member, body: Any) -> None:
        self.client_queries.on_frame(member.link, kind, body)

    def _on_service(self, kind: FrameKind, member: Member, body: Any) -> None:
        if self.client_services is not None:
            self.client_services.on_frame(member, kind, body)

    def synchronise(self, member: Member) -> None:
        """A member joined: what it must know of this node (filters, retained messages and
        their versions, the sessions held here) and what was kept for it (REPLAY)."""
        link, protocol = member.link, member.protocol
        link.send(FrameKind.FILTERS, self.local_filters())
        retained = self.retained.for_peer(protocol)
        for part in in_parts(retained, lambda body: len(body[1])):
            link.send(FrameKind.RETAINED, part)
        self.custody.send_owned(member, self.broker.custody.owned_sessions())
        first, frames = self.forwarding.replay(member.node_id)
        link.send(FrameKind.REPLAY, [self.incarnation, first])
        for frame in frames:
            link.send_encoded(frame)
        if self.kept is not None and member.node_id in self.kept.waiting:
            with self.kept.atomic():  # kept on disk for it while it was away
                self.takeover.send_kept(member.node_id, self.kept.take_waiting(member.node_id))

    # ------------------------------------------------------------------ the broker's side

    def input_waits(self, now: float) -> Awaitable[None] | None:
        membership = self.membership
        return membership.fence.lifted() if membership.fence_input(now) else None

    @property
    def has_peers(self) -> bool:
        return self.membership.has_peers

    def remote_routes(self, topic: str) -> tuple[frozenset[str], RemoteGroups]:
        return self.table.match(topic)

    def local_filters(self) -> list[str]:
        """The topic filters local sessions subscribe to, as FILTERS sends them."""
        return sorted(self._local_filters)

    def filter_added(self, topic_filter: str) -> None:
        """A local session subscribed to ``topic_filter`` (as sent, $share included)."""
        self._local_filters[topic_filter] += 1
        if self._local_filters[topic_filter] == 1:
            self._broadcast(FrameKind.FILTER_ADD, topic_filter)

    def filter_removed(self, topic_filter: str) -> None:
        count = self._local_filters[topic_filter] - 1
        if count > 0:
            self._local_filters[topic_filter] = count
            return
        del self._local_filters[topic_filter]
        self._broadcast(FrameKind.FILTER_REMOVE, topic_filter)

    def _broadcast(self, kind: FrameKind, body: Any) -> None:
        for member in self.members.values():
            member.link.send(kind, body)

    def forwards_held(self) -> AbstractContextManager[Callable[[], bool]]:
        """Within the block, sends to other nodes wait for the next commit (HeldForwards)."""
        return self.held.block()

    def forward(self, message: Message, nodes: frozenset[str]) -> None:
        """Send a local publisher's message to every interested node, once per node."""
        if self.held.holding:
            self.identify(message)
            self.held.hold(partial(self._forward_held, message, nodes))
            return
        self._forward(message, nodes)

    def _forward_held(self, message: Message, nodes: frozenset[str]) -> None:
        """A held message's forwards, a commit after it was routed: what went out meanwhile
        must not make it miss a session (docs/architecture.md). A session that moved here
        from a node it went to gets it here (one that had it takes no copy); a node gone
        meanwhile is replaced by where its topic routes now; ROUTED waits for these."""
        absent = self.membership.absent
        gone = [n for n in nodes if n not in self.members and n not in absent]
        self._forward(message, nodes)
        if gone:
            now = self.table.match(message.topic)[0]
            self._forward(message, frozenset(n for n in now if n not in nodes))
        self.broker.deliver_again(message)

    def _forward(self, message: Message, nodes: frozenset[str]) -> None:
        props = message.properties
        raw_props = encode_properties(props) if props else b""
        serial = self.identify(message)[1]  # the same message, wherever it ends up queued
        frame = encode_publish_frame(  # once, whatever the fan-out
            message.topic, message.payload, message.qos, message.retain, raw_props,
            message.expiry_at, message.publisher_id, serial, time.time())
        unstamped = legacy = None  # for a node without arrival stamps; of protocol 3: no serial
        forwarding = self.forwarding
        absent, spoke = self.membership.absent, self.membership.spoke
        for node_id in nodes:
            member = self.members.get(node_id)
            if member is not None:
                protocol, stamps = member.protocol, member.arrival_stamps
            elif node_id in absent:
                # Kept for an absent node, with its identity if it spoke protocol 4: a copy of
                # a session there may get it twice (a merge), and only the identity tells.
                protocol, stamps = spoke.get(node_id, (0, False))
            else:
                continue
            if not message.qos and forwarding.full(node_id):
                forwarding.not_sent(node_id)  # QoS 0 is not kept past the bound
                continue
            if protocol >= 4 and stamps:
                sent = frame
            elif protocol >= 4:
                sent = unstamped = unstamped or encode_publish_frame(
                    message.topic, message.payload, message.qos, message.retain, raw_props,
                    message.expiry_at, message.publisher_id, serial)
            else:
                sent = legacy = legacy or encode_publish_frame(
                    message.topic, message.payload, message.qos, message.retain, raw_props,
                    message.expiry_at, message.publisher_id)
            if member is not None:
                member.link.send_encoded(sent)
            forwarding.sent(node_id, sent)  # kept until acknowledged, sent again if need be
            self.metrics.publishes_forwarded += 1

    def identify(self, message: Message) -> tuple[str, int]:
        mid = message.mid
        if mid is None:
            self._serial = serial = self._serial + 1
            mid = message.mid = (self.node_id, serial)
        return mid

    def pick_shared(self, key: SharedKey, remote: frozenset[str], local: bool) -> str | None:
        """Which node delivers this message to group ``key``: None for this node."""
        candidates = sorted(n for n in remote if n in self.members)
        if local:
            candidates.append(self.node_id)
        if not candidates:
            return None
        turn = self._shared_turn.get(key, 0)
        self._shared_turn[key] = turn + 1
        chosen = candidates[turn % len(candidates)]
        return None if chosen == self.node_id else chosen

    def send_shared(self, node_id: str, key: SharedKey, message: Message) -> None:
        if self.held.holding:
            self.held.hold(partial(self._send_shared_held, node_id, key, message))
            return
        self._send_shared(node_id, key, message)

    def _send_shared_held(self, node_id: str, key: SharedKey, message: Message) -> None:
        """Taken over or forgotten meanwhile: the group's member is chosen again."""
        if node_id not in self.members and node_id not in self.membership.absent:
            node_id = self.pick_shared(key, self.table.match(message.topic)[1].get(
                key, frozenset()), local=False) or self.node_id
        if node_id == self.node_id:  # no other node has a member now: one here, if any
            self.broker.deliver_shared(key[0], key[1], message)
        else:
            self._send_shared(node_id, key, message)

    def _send_shared(self, node_id: str, key: SharedKey, message: Message) -> None:
        member = self.members.get(node_id)
        # (Absent: it left after it was picked, while the send was held; kept for it.)
        if member is not None or node_id in self.membership.absent:
            frame = encode_frame(FrameKind.SHARED_PUBLISH,
                                 [key[0], key[1], message_body(message)])
            if member is not None:
                member.link.send_encoded(frame)
            self.forwarding.sent(node_id, frame)
            self.metrics.publishes_forwarded += 1

    def refuses(self, nodes: frozenset[str]) -> bool:
        """Whether a local publisher's QoS 1/2 message for ``nodes`` is refused: one of them
        has not acknowledged as much as this node keeps for a node (it is frozen or cut off),
        and acknowledging the message would promise what cannot be kept."""
        return self.forwarding.refuses(nodes)

    async def forwards_acknowledged(self) -> None:
        """Until the peers have acknowledged every message sent to them so far (or left)."""
        await self.held.sent()  # (held ones included: they go out first)
        await self.forwarding.acknowledged(self.members)

    def acknowledge_soon(self, peer_id: str) -> None:
        """A data frame from ``peer_id`` was handled: FORWARD_ACK once it is durable here."""
        self.acks.soon(peer_id)

    # ------------------------------------------------------------------ retained messages

    def retained_changed(self, message: Message) -> None:
        self._broadcast(FrameKind.RETAIN, self.retained.changed(message))

    # ------------------------------------------------------------------ sessions (Custody)

    async def fetch_session(self, client_id: str) -> Handover | None:
        return await self.custody.fetch(client_id)

    def custody_epoch(self, client_id: str, above: int = 0) -> int:
        return self.custody.epoch(client_id, above)

    def client_connected(self, client_id: str) -> None:
        self.custody.client_connected(client_id)

    def session_ended(self, client_id: str, deleted: bool = True) -> None:
        self.custody.session_ended(client_id, deleted)

    def owner_directory(self) -> dict[str, str]:
        """Which other node holds each client's session, as far as this node knows."""
        return {client_id: entry[0] for client_id, entry in self.custody.owners.items()}

    def owner_of(self, client_id: str) -> str | None:
        return self.custody.owner_of(client_id)

    def adopt_imported(self, records: list[SessionRecords]) -> list[str]:
        """Sessions imported from a backup: this node's own from now on. The peers learn that
        it holds them (OWNED: a CONNECT elsewhere fetches them from here) and route their
        subscriptions here (FILTER_ADD, sent as each enters the topic tree). Returns the client
        ids taken (a client connected here meanwhile keeps its session)."""
        adopted = self.broker.custody.adopt_sessions(records)
        self.custody.hold(adopted)
        if adopted:
            for member in self.members.values():
                self.custody.send_owned(member, adopted)
        return adopted

    # ------------------------------------------------------------------ views

    def loads(self) -> dict[str, tuple[float, list[int]]]:
        return self.membership.loads()

    def load_report(self) -> dict[str, dict[str, Any]]:
        return self.membership.load_report()

    def stats(self) -> ClusterStats:
        return cluster_stats(self)

    def view(self) -> list[ClusterMember]:
        own = ClusterMember(self.node_id, self.address, "RUNNING", __version__)
        return [own, *(ClusterMember(m.node_id, m.address, "RUNNING", m.version)
                       for m in self.members.values())]


def cluster_stats(cluster: Cluster) -> ClusterStats:
    """What ``GET /api/v1/metrics`` shows of the cluster, now."""
    links = [m.link for m in cluster.members.values()]
    takeover, replicator = cluster.takeover, cluster.replicator
    hold = replicator.store.hold if replicator is not None else None
    return ClusterStats(
        members=1 + len(cluster.members), connections=len(links),
        publishes_forwarded=cluster.metrics.publishes_forwarded,
        publishes_received=cluster.metrics.publishes_received,
        frames_in=dict(sorted(cluster.metrics.frames_in.items())),
        frames_out=sum(link.frames_out for link in links),
        remote_filters={peer: sorted(cluster.table.filters_of(peer))
                        for peer in sorted(cluster.members)},
        absent=sorted(cluster.membership.absent),
        forwards_unacknowledged=sum(len(out.frames)
                                    for out in cluster.forwarding.outgoing.values()),
        forwards_replayed=cluster.forwarding.replayed,
        forwards_duplicates=cluster.forwarding.duplicates,
        forwards_dropped=cluster.forwarding.dropped, forwards_refused=cluster.forwarding.refused,
        forwards_on_disk=cluster.kept.rows if cluster.kept is not None else 0,
        forwards_written_to_disk=cluster.kept.written if cluster.kept is not None else 0,
        authentication_failures=cluster.authentication.failures,
        replica_count=cluster.settings.replica_count,
        backups=sorted(replicator.backups) if replicator is not None else [],
        replicas_held=sorted(cluster.replicas.held) if cluster.replicas is not None else [],
        replication_lag=replicator.lag() if replicator is not None else {},
        replication_spared=hold.stats.spared if hold is not None else 0,
        replication_late=hold.stats.late if hold is not None else 0,
        takeovers=takeover.takeovers, sessions_taken_over=takeover.sessions_taken_over,
        messages_rescued=takeover.messages_rescued, merges=cluster.custody.merges,
        peer_traffic={peer: (m.link.bytes_out, m.link.bytes_in)
                      for peer, m in sorted(cluster.members.items())},
        delivery_latency=cluster.delivery_times.snapshot(),
        forward_ack_latency=cluster.forwarding.ack_times.snapshot(),
        replication_ack_latency=(replicator.ack_times.snapshot()
                                 if replicator is not None else {}))
