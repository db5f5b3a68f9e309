"""Membership and routing: many nodes, one logical broker.

Full mesh and masterless. Discovery only proposes addresses; joining, leaving and failure
handling are done here. Every node tells every other which topic filters have subscribers on
it, so a PUBLISH crosses to a node only when that node wants it, once per node.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from hive_core import __version__
from hive_core.broker import (
    BrokerPort,
    Message,
    RemoteGroups,
    SessionRecords,
    SessionUnavailable,
    SharedKey,
)
from hive_core.cluster import _progress as progress
from hive_core.cluster._auth import PeerAuthentication
from hive_core.cluster._client_queries import ClientQueries
from hive_core.cluster._client_services import SERVICE_FRAMES, ClusterClients
from hive_core.cluster._forwarding import Forwarding
from hive_core.cluster._health import HealthCheck, HealthCheckSettings
from hive_core.cluster._latency import Latencies, LatencySnapshot
from hive_core.cluster._link import PeerLink
from hive_core.cluster._overload import PeerPressure
from hive_core.cluster._replication import (
    ReplicaFolder,
    Replicas,
    ReplicaShelf,
    ReplicatingStore,
    Replicator,
    Watermarks,
    in_record_parts,
    message_fields,
    successors,
)
from hive_core.cluster._routing import RoutingTable
from hive_core.cluster._transport import NodeTransport, NodeUnreachable, TcpTransport
from hive_core.cluster._udp import UdpTransport
from hive_core.cluster._upgrade import ProtocolWindow
from hive_core.cluster._wire import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameKind,
    encode_frame,
    encode_publish_frame,
)
from hive_core.mqtt import decode_properties, encode_properties
from hive_core.plugins import WarningGate
from hive_ext_api import (
    ClusterMember,
    ClusterNodeAddress,
    StoredInflight,
    StoredMessage,
    StoredSession,
    StoredSubscription,
)

if TYPE_CHECKING:
    from hive_core.plugins import Extensions

log = logging.getLogger("hive.cluster")

_PUBLISH = FrameKind.PUBLISH
FLUSH_PUBLISHES = 256
"""PUBLISH frames from other nodes between two flushes of the local subscribers' output."""
ABSENT_KEEP = 300.0
"""Seconds a node that left stays routed to: its topic filters are kept and what it would get
is kept for it (in memory, up to 64 MB) until it is back, when it gets it all. Until sessions
are replicated, this is what lets a paused or restarted node's persistent sessions miss
nothing. A node away longer is forgotten, and what was kept for it is dropped and counted."""
RETAINED_VERSIONS = 1_000_000
"""Versions of retained topics kept (live ones and clears); beyond it the oldest clears go."""
ENDED_SESSIONS = 1_000_000
"""Tombstones of ended sessions kept; beyond it the oldest half goes."""
SIMULTANEOUS_DIALS = 1.0
"""Seconds after a member joined within which a second link from it is a dial that crossed
this node's own (both decide by node id); later it is the member reached under another address."""
@dataclass(slots=True)
class ClusterSettings:
    bind_host: str
    bind_port: int
    external_host: str
    external_port: int
    heartbeat_interval: float = 3.0
    heartbeat_timeout: float = 9.0
    connect_timeout: float = 5.0
    server_ssl: ssl.SSLContext | None = None
    client_ssl: ssl.SSLContext | None = None
    transport_kind: str = "tcp"  # or "udp" (no TLS there)
    health_check: HealthCheckSettings | None = None  # None: the TCP health check is off
    discovery_reload_interval: float = 60.0  # <discovery><extension><reload-interval>
    shared_secret: str | None = field(default=None, repr=False)  # <authentication>: peers prove it
    replica_count: int = 1  # <replication><replica-count>: this node and replica_count - 1 backups
    replicas_folder: Path | None = None  # where the replicas of other nodes are kept
    protocol: int = PROTOCOL_VERSION  # the highest node protocol spoken (lower: test an upgrade)
    progress_interval: float = 10.0  # seconds between "still ongoing" lines of a long sync
    disaster_window: float = 60.0  # seconds within which departures count as one disaster


@dataclass(slots=True)
class Member:
    node_id: str
    address: ClusterNodeAddress
    version: str
    protocol: int
    link: PeerLink
    incarnation: int = 0  # when the peer process started: a higher one means it restarted
    joined_at: float = field(default_factory=time.monotonic)
    synced: bool = False  # its SYNCED arrived: this node knows what the peer holds
    merging: bool = False  # back after a split: merging until its SYNCED
    arrival_stamps: bool = False  # its HELLO said so: its PUBLISH frames may carry routed_at
    session_seen: bool = False  # its HELLO said so: a SESSION's first part may carry its seen ids
    # Its load as its last HEARTBEAT said: [connections, sessions, messages in, messages out]
    load: list[int] | None = None
    load_at: float = 0.0  # Unix time it arrived
    previous: tuple[float, list[int]] | None = None  # the heartbeat's before: for rates


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
    forwards_dropped: int  # kept too long or too many: given up on
    authentication_failures: int = 0  # links refused: the peer did not prove the shared secret
    replica_count: int = 1  # as configured
    backups: list[str] = field(default_factory=list)  # the nodes holding this node's replica
    replicas_held: list[str] = field(default_factory=list)  # the nodes whose replica is here
    replication_lag: dict[str, int] = field(default_factory=dict)  # ops not acknowledged, by backup
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

PART_BYTES = 1024 * 1024
"""Payload bytes per frame when a session's queue or the retained messages cross in parts."""


def in_parts(items: list[Any], size: Callable[[Any], int]) -> Iterator[list[Any]]:
    """``items`` in consecutive lists of about PART_BYTES each (at least one item each)."""
    part: list[Any] = []
    total = 0
    for item in items:
        part.append(item)
        total += size(item) + 64
        if total >= PART_BYTES:
            yield part
            part, total = [], 0
    if part:
        yield part


class _SessionFetch:
    """One SESSION_FETCH to the node that holds the session: its answer, part by part."""

    def __init__(self, request: int, client_id: str, link: PeerLink) -> None:
        self.request = request
        self.client_id = client_id
        self.link = link
        self.records: SessionRecords | None = None
        self.failed: str | None = None
        self.done = anyio.Event()

    def part(self, body: list[Any] | None, more: bool) -> None:
        if body is not None:
            if self.records is None:
                self.records = session_from(body)
            else:
                self.records.queue += queue_from(body)
        if not more:
            self.done.set()

    def fail(self, why: str) -> None:
        self.failed = why
        self.done.set()


@dataclass(slots=True)
class _Handover:
    """A session fetched from ``link``'s node (implements the broker's ``Handover``)."""

    records: SessionRecords
    fetch: _SessionFetch

    def confirm(self) -> None:
        self.fetch.link.send(FrameKind.SESSION_TAKEN, [self.fetch.request, self.fetch.client_id])

    def decline(self) -> None:
        self.fetch.link.send(FrameKind.SESSION_DECLINED,
                             [self.fetch.request, self.fetch.client_id])


def session_parts(records: SessionRecords, seen: bool = False) -> Iterator[list[Any]]:
    """A session as frame bodies: the record, the window and the first messages of the queue,
    then the rest of the queue in parts of about PART_BYTES (a queue may be any size)."""
    record, inflight = records.session, records.inflight
    subscriptions = [[s.topic_filter, s.qos, s.no_local, s.retain_as_published,
                      s.retain_handling, s.subscription_id] for s in record.subscriptions.values()]
    parts = in_parts([[seq, message_fields(m)] for seq, m in records.queue],
                     lambda item: len(item[1][1]))
    first = [
        [record.client_id, record.protocol_version, record.expiry_interval,
         record.disconnected_at, subscriptions],
        next(parts, []),
        [[i.packet_id, i.direction, i.state, message_fields(i.message) if i.message else None]
         for i in inflight],
    ]
    if seen:  # a node that takes them (its HELLO said so): the identities the session took
        first.append([list(mid) for mid in records.seen or ()])
    yield first
    yield from ([part] for part in parts)


def session_from(body: list[Any]) -> SessionRecords:
    (client_id, version, expiry, disconnected_at, subscriptions), queue, inflight = body[:3]
    seen = [(str(o), int(n)) for o, n in body[3]] if len(body) > 3 else None
    record = StoredSession(client_id, version, expiry, disconnected_at, {
        s[0]: StoredSubscription(s[0], s[1], s[2], s[3], s[4], s[5]) for s in subscriptions})
    return SessionRecords(
        record,
        [(seq, StoredMessage(*fields)) for seq, fields in queue],
        [StoredInflight(client_id, pid, direction, state,
                        StoredMessage(*fields) if fields else None)
         for pid, direction, state, fields in inflight],
        seen)


def queue_from(body: list[Any]) -> list[tuple[int, StoredMessage]]:
    """A later part of a session: more of its queue."""
    return [(seq, StoredMessage(*fields)) for seq, fields in body[0]]


def message_body(message: Message) -> list[Any]:
    props = encode_properties(message.properties) if message.properties else b""
    return [message.topic, message.payload, message.qos, message.retain, props,
            message.expiry_at, message.publisher_id]


def message_from(body: list[Any]) -> Message:
    topic, payload, qos, retain, props, expiry_at, publisher = body[:7]
    return Message(topic, payload, qos, retain, decode_properties(props) if props else None,
                   publisher, expiry_at)


class Cluster:
    """This node's membership in the cluster: links to every peer, and what crosses them.

    Implements the broker's :class:`~hive_core.broker.ClusterPort`; talks to the broker only
    through its :class:`~hive_core.broker.BrokerPort`.
    """

    def __init__(self, node_id: str, settings: ClusterSettings, broker: BrokerPort,
                 extensions: Extensions, transport: NodeTransport | None = None,
                 store: ReplicatingStore | None = None,
                 replica_shelf: ReplicaShelf | None = None) -> None:
        self.node_id = node_id
        self.settings = settings
        self.broker = broker
        self.extensions = extensions
        self.members: dict[str, Member] = {}
        self.client_queries = ClientQueries()  # the control center's questions to the owners
        self.table = RoutingTable()
        self.metrics = ClusterMetrics()
        self.address = ClusterNodeAddress(settings.external_host, settings.external_port)
        self._local_filters: Counter[str] = Counter()
        self._links: set[PeerLink] = set()
        self._dialing: set[ClusterNodeAddress] = set()
        # Addresses dialled and the node each reached: a node behind NAT, or listed under two
        # addresses, is one node, not a new one at every discovery reload.
        self._reached: dict[ClusterNodeAddress, str] = {}
        self._protocols = ProtocolWindow(settings.protocol)  # whom it can cluster with
        self.delivery_times = Latencies()  # routed on a peer until delivered here, by peer
        self._delivery_countdown = 1  # the first message is timed, then one in DELIVERY_SAMPLE
        self.client_services: ClusterClients | None = None  # extensions' questions, both ways
        self._dialled: dict[PeerLink, ClusterNodeAddress] = {}
        self._unreachable = WarningGate(log)  # one warning per address and minute
        self._shared_turn: dict[SharedKey, int] = {}
        self.transport = transport if transport is not None else (
            UdpTransport(settings.bind_host, settings.bind_port)
            if settings.transport_kind == "udp" else TcpTransport(
                settings.bind_host, settings.bind_port, settings.server_ssl, settings.client_ssl))
        self.health = None if settings.health_check is None else HealthCheck(
            node_id, settings.health_check, self._health_failed, settings.connect_timeout)
        # The cluster's background work (discovery, heartbeat, dialling peers) runs in a task
        # group of its own, inside the node's task group (or a task of its own when started
        # without one); stop() cancels it and waits until it is over.
        self._tasks: TaskGroup | None = None
        self._background: anyio.CancelScope | None = None
        self._background_over: anyio.Event | None = None
        self._own_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._fetches: dict[int, _SessionFetch] = {}
        self._fetch_seq = 0
        # Which node holds the session of a client id (other nodes only), and since when (ns;
        # 0: unknown, as after a restart): a CONNECT asks that node and no other; of two
        # holders, the newer wins. Learnt from OWNED on join, CLIENT_CONNECTED, SESSION_GONE.
        self.owners: dict[str, tuple[str, int]] = {}
        self.owned_since: dict[str, int] = {}  # the same for this node's own sessions
        # Sessions this node exported and holds until the asking node confirms: by link.
        self._handing: dict[PeerLink, set[str]] = {}
        # ROUTE_TO sent, copies to drop once every member answered: token -> (keeper, the
        # sessions with the keeper's claim, the members not answered yet).
        self._barriers: dict[int, tuple[str, list[tuple[str, tuple[bool, int, bool]]],
                                        set[str]]] = {}
        self._barrier_serial = 0
        self._dial_requests: asyncio.Queue[ClusterNodeAddress] = asyncio.Queue()
        # This node's last two loads, taken at heartbeats: (Unix time, load), for its rates.
        self._own_loads: tuple[tuple[float, list[int]] | None,
                               tuple[float, list[int]] | None] = (None, None)
        self.forwarding = Forwarding()
        self.peer_pressure = PeerPressure(self.members, self.forwarding)  # overload protection
        self._absent: dict[str, float] = {}  # nodes that left: when they are forgotten
        # The node protocol each node last spoke here, and whether it took arrival stamps.
        self._spoke: dict[str, tuple[int, bool]] = {}
        self._ack_due: set[str] = set()  # peers whose data frames were handled, not acknowledged
        self._ack_task: asyncio.Task[None] | None = None
        self.incarnation = time.time_ns()
        # The serial of the last message sent to other nodes: from the clock at the start, so
        # that it grows across restarts too (no node sends a message per nanosecond).
        self._serial = self.incarnation
        self.authentication = PeerAuthentication(settings.shared_secret, settings.connect_timeout)
        # Replication (_replication.py): this node's backups, and the replicas held here.
        replicating = (store is not None and settings.replica_count > 1
                       and settings.protocol >= 3
                       and (settings.replicas_folder is not None or replica_shelf is not None))
        self.replicator = Replicator(
            store, self._replica_snapshot, self._watermarks, self._send_snapshot,
            self._send_ops, self._send_release) if replicating and store is not None else None
        shelf = replica_shelf if replica_shelf is not None else (
            ReplicaFolder(settings.replicas_folder)
            if settings.replicas_folder is not None else None)
        self.replicas = Replicas(shelf, self._acknowledge_replica, self._replica_missing) \
            if replicating and shelf is not None else None
        self._resync_asked: set[str] = set()
        self._taking: dict[str, anyio.Event] = {}  # failed nodes whose sessions are being taken
        self.adopted_from: dict[str, set[str]] = {}  # failed node -> client ids taken from it
        # client id -> the last queue position its replica held when taken over here: a copy
        # of the session elsewhere (a split) had everything up to it too.
        self.adopted_marks: dict[str, int] = {}
        self._absent_at: dict[str, tuple[ClusterNodeAddress, int]] = {}  # address, incarnation
        # Retained messages: the version of each topic's last set or clear (clears kept as
        # tombstones, so that a node that missed one cannot bring the message back).
        self.retained_versions: dict[str, int] = {}
        self.ended_sessions: dict[str, int] = {}  # client id -> when its session ended (ns)
        self._clock = 0
        self.merges = 0
        self._excluding: dict[str, set[str]] = {}  # peer -> failed nodes it has not rescued yet
        self._departures: list[tuple[float, str]] = []  # (monotonic time, node) of failures
        self._leaving_since: float | None = None
        self._handed_over = False  # leaving: forwarded messages are no longer acknowledged
        self.takeovers = 0
        self.sessions_taken_over = 0
        self.messages_rescued = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self, tasks: TaskGroup | None = None) -> None:
        """Listen, register with discovery, start the background work in ``tasks``, join."""
        self._local_filters.update(self.broker.local_filters())
        bound = await self.transport.listen(self._new_link)
        if not self.settings.external_port:
            self.address = ClusterNodeAddress(self.address.host, bound.port)
        if bound.host not in ("0.0.0.0", "::"):  # a list naming this node's own bind address
            self._reached[ClusterNodeAddress(bound.host, bound.port)] = self.node_id
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
            await self._join()
        log.info("Finished cluster join process successfully.")
        self._log_view()

    async def _run_background(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                              started: anyio.Event | None = None) -> None:
        assert self._background_over is not None
        try:
            with anyio.CancelScope() as self._background:
                async with anyio.create_task_group() as self._tasks:
                    self._tasks.start_soon(self._discover)
                    self._tasks.start_soon(self._heartbeat)
                    self._tasks.start_soon(self._dialer)
                    task_status.started()
                    if started is not None:
                        started.set()
        finally:
            self._tasks = None
            self._background_over.set()

    async def _join(self) -> None:
        """First round of discovery: reach every node proposed, within the connect timeout."""
        try:
            addresses = await self.extensions.discovery_reload()
        except Exception:
            log.exception("cluster discovery failed; trying again at the next reload")
            return
        with anyio.move_on_after(self.settings.connect_timeout):
            async with anyio.create_task_group() as dials:
                for address in addresses or ():
                    if not self._known(address):
                        dials.start_soon(self._connect, address)
        # Give the handshakes the links just opened a moment to finish, and the members the
        # time to say what they hold (SYNCED ends it): a session another node took over while
        # this one was away is not served here as if it were still this node's.
        with anyio.move_on_after(min(1.0, self.settings.connect_timeout)):
            while any(link.peer_id is None for link in self._links if link.outbound):
                await anyio.sleep(0.02)
        with anyio.move_on_after(self.settings.connect_timeout):
            while any(not m.synced for m in self.members.values() if m.protocol >= 3):
                await anyio.sleep(0.02)

    def leaving(self) -> None:
        """The node is about to stop: what its clients leave behind goes to its backups first
        (the broker's stop commits it, and a commit waits for the backups)."""
        if self.replicator is not None and self.replicator.backups:
            self._leaving_since = time.monotonic()
            log.info("Starting cluster replication process. This may take a while. "
                     "Please do not shut down Hive.")
            progress.while_true(lambda: not self._stopping,  # until stop() has the answer
                                progress.REPLICATION, self.settings.progress_interval)

    async def stop(self) -> None:
        if self._leaving_since is not None and self.replicator is not None:
            replicated = False
            # From here on nothing forwarded to this node is acknowledged: the senders keep it
            # and hand it to the node that takes this one's sessions over (TAKEN_OVER).
            self._handed_over = True
            with anyio.move_on_after(self.settings.connect_timeout):
                await self.replicator.replicated(self.replicator.ship())
                replicated = True
            if replicated:
                log.info("Finished cluster replication successfully in %d ms.",
                         (time.monotonic() - self._leaving_since) * 1000)
                # The next node takes them over at the BYE: a copy kept here would come back
                # at the next start as if it were still this node's.
                self.replicator.detach()  # what follows is not for the backups
                self.broker.forget_sessions()
            else:
                log.warning("Cluster replication did not finish within %.0f s: this node keeps "
                            "its sessions", self.settings.connect_timeout)
        self._stopping = True
        if self._ack_task is not None:
            self._ack_task.cancel()
        if self._background is not None and self._background_over is not None:
            self._background.cancel()
            await self._background_over.wait()
        for member in list(self.members.values()):
            member.link.send(FrameKind.BYE, self.node_id)
            member.link.close()
        for link in list(self._links):
            link.close()
        await self.transport.close()
        if self.health is not None:  # after the BYEs: peers learn why this node left
            await self.health.close()
        await self.extensions.discovery_destroy(self.address)
        if self.replicas is not None:
            await self.replicas.close()
        self.broker.attach_cluster(None)

    # ------------------------------------------------------------------ discovery and joining

    async def _discover(self) -> None:
        while not self._stopping:
            interval = await self.extensions.discovery_reload_interval(
                self.settings.discovery_reload_interval)
            await anyio.sleep(interval)
            try:
                addresses = await self.extensions.discovery_reload()
            except Exception:
                log.exception("cluster discovery failed; trying again at the next reload")
                addresses = None
            for address in addresses or ():
                self._dial(address)

    def _known(self, address: ClusterNodeAddress) -> bool:
        if address == self.address:
            return True
        reached = self._reached.get(address)
        if reached is not None and (reached == self.node_id or reached in self.members):
            return True
        return any(m.address == address for m in self.members.values())

    def _dial(self, address: ClusterNodeAddress) -> None:
        if self._stopping or self._tasks is None or self._known(address) \
                or address in self._dialing:
            return
        self._dialing.add(address)
        # Often called from a link's callback, not from a task: anyio's task group cannot
        # start a task from there (with sniffio installed it cannot tell the event loop), so
        # the dialer task, inside the group, starts it.
        self._dial_requests.put_nowait(address)

    async def _dialer(self) -> None:
        assert self._tasks is not None
        while True:
            address = await self._dial_requests.get()
            self._tasks.start_soon(self._dial_once, address)

    async def _dial_once(self, address: ClusterNodeAddress) -> None:
        try:
            await self._connect(address)
        finally:
            self._dialing.discard(address)

    async def _connect(self, address: ClusterNodeAddress) -> None:
        try:
            link = await self.transport.dial(
                address, lambda: self._new_link(outbound=True),
                self.settings.connect_timeout)
        except NodeUnreachable as exc:
            self._unreachable.warn(f"{address.host}:{address.port}", "cannot reach cluster node "
                                   "%s; trying again at the next discovery reload", exc)
            return
        self._unreachable.clear(f"{address.host}:{address.port}")
        self._dialled[link] = address
        self._links.add(link)
        link.send(FrameKind.HELLO, self._hello())

    async def client_details_from(self, node_id: str, client_ids: list[str],
                                  timeout: float = 2.0) -> dict[str, dict[str, Any] | None]:
        """The details of sessions that member ``node_id`` holds ({} when it does not answer)."""
        member = self.members.get(node_id)
        if member is None:
            return {}
        return await self.client_queries.ask(member.link, client_ids, timeout)

    def _new_link(self, outbound: bool = False) -> PeerLink:
        link = PeerLink(self._on_frame, self._on_lost, outbound, self.authentication)
        link.stale_after = self.settings.heartbeat_timeout
        return link

    def _hello(self) -> dict[str, Any]:
        return {"id": self.node_id, "protocol": self.settings.protocol,
                "min_protocol": MIN_PROTOCOL_VERSION, "version": __version__,
                "host": self.address.host, "port": self.address.port,
                "incarnation": self.incarnation, "arrival_stamps": 1, "session_seen": 1,
                **self._health_hello()}

    def _health_hello(self) -> dict[str, Any]:
        """Where peers hold their health connection to this node (older peers ignore it)."""
        if self.health is None:
            return {}
        hello: dict[str, Any] = {"health_port": self.health.port}
        if self.health.host:
            hello["health_host"] = self.health.host
        return hello

    def _establish(self, link: PeerLink, hello: dict[str, Any], answer: bool = False) -> None:
        peer_id = str(hello["id"])
        dialled = self._dialled.pop(link, None)
        if dialled is not None:
            self._reached[dialled] = peer_id
        if peer_id == self.node_id:
            link.close()  # discovery listed this node itself
            return
        protocol = min(int(hello["protocol"]), self.settings.protocol)
        refusal = self._protocols.refusal(peer_id, hello)
        if refusal is not None:
            if refusal:
                log.error("%s", refusal)
            link.close()
            return
        existing = self.members.get(peer_id)
        incarnation = int(hello.get("incarnation", 0))
        swapped = False  # the same member on another link: no news for the log
        if existing is not None and not existing.link.closed:
            if incarnation > existing.incarnation:
                keep_new = True  # the peer restarted: its old link is dead, whatever it looks
            elif link.outbound == existing.link.outbound:
                # One node opened both: it reached the same peer under a second address.
                # Keep the first link; the WELCOME tells the dialling node whom it reached.
                if answer:
                    link.send(FrameKind.WELCOME, self._hello())
                link.close()
                return
            else:
                # Both dialled at once: keep the link opened by the node with the smaller id.
                keep_new = (link.outbound and self.node_id < peer_id) or (
                    not link.outbound and peer_id < self.node_id)
            now = time.monotonic()
            if keep_new and now - existing.link.last_read < 2 * self.settings.heartbeat_interval \
                    and now - existing.joined_at > SIMULTANEOUS_DIALS:
                # Its member is connected and answering: not a restart, not a crossing dial.
                if incarnation == existing.incarnation:
                    # The same process, reached under another address (NAT, two names): the
                    # WELCOME tells it whom it reached, so that it stops dialling it.
                    if answer:
                        link.send(FrameKind.WELCOME, self._hello())
                else:
                    log.error("a second link (from %s) claims the node id %s of a member that "
                              "is connected and answering: refused", link.peer_address, peer_id)
                link.close()
                return
            if not keep_new:
                if answer and time.monotonic() - existing.joined_at > SIMULTANEOUS_DIALS:
                    # Not a dial crossing ours: the peer reached this node under another
                    # address. The WELCOME tells it whom; it keeps the old link as well.
                    link.send(FrameKind.WELCOME, self._hello())
                link.close()
                return
            swapped = incarnation == existing.incarnation
            existing.link.peer_id = None
            existing.link.close()
        link.peer_id = peer_id
        self._absent.pop(peer_id, None)
        away = self._absent_at.pop(peer_id, None)
        merging = away is not None and away[1] == incarnation and protocol >= 3
        address = ClusterNodeAddress(str(hello["host"]), int(hello["port"]))
        self._spoke[peer_id] = (protocol, bool(hello.get("arrival_stamps")))
        self.members[peer_id] = Member(peer_id, address, str(hello.get("version", "")),
                                       protocol, link, incarnation, merging=merging,
                                       arrival_stamps=bool(hello.get("arrival_stamps")),
                                       session_seen=bool(hello.get("session_seen")))
        if merging:
            # A session here may have a copy there (a takeover while apart), and the members
            # route to both for a moment: each session takes each message once (its identity).
            log.info("Starting cluster merge process. This may take a while. Please do not "
                     "shut down Hive. (node %s is back after being unreachable)", peer_id)
            merge, interval = self.members[peer_id], self.settings.progress_interval
            progress.while_true(lambda: merge.merging and self.members.get(peer_id) is merge
                                and not self._stopping, progress.MERGE, interval)
        if self.health is not None and hello.get("health_port"):
            self.health.watch(peer_id, incarnation, str(hello.get("health_host") or address.host),
                              int(hello["health_port"]))
        if swapped:
            log.debug("Cluster node %s: now on the link %s opened", peer_id,
                      "this node" if link.outbound else "it")
        else:
            log.info("Cluster node %s (%s:%d, Hive %s) joined the cluster; node protocol %d",
                     peer_id, address.host, address.port, hello.get("version"), protocol)
        if answer:  # WELCOME first: the dialling node drops every frame before it
            link.send(FrameKind.WELCOME, self._hello())
        link.send(FrameKind.FILTERS, sorted(self._local_filters))
        versions = self.retained_versions
        retained = [[*message_body(m), versions.get(m.topic, 0)]
                    for m in self.broker.retained_messages()]
        if protocol >= 3:  # the clears the peer may have missed
            live = {m.topic for m in self.broker.retained_messages()}
            retained += [[topic, b"", 0, True, b"", None, "", version]
                         for topic, version in versions.items() if topic not in live]
        for part in in_parts(retained, lambda body: len(body[1])):
            link.send(FrameKind.RETAINED, part)
        self._send_owned(self.members[peer_id], self.broker.owned_sessions())
        first, frames = self.forwarding.replay(peer_id)
        link.send(FrameKind.REPLAY, [self.incarnation, first])
        for frame in frames:
            link.send_encoded(frame)
        link.send(FrameKind.MEMBERS, [[m.address.host, m.address.port]
                                      for m in self.members.values() if m.node_id != peer_id])
        if protocol >= 3:
            link.send(FrameKind.SYNCED)
        if not swapped:
            self._log_view()
        # A new member, or one that restarted (its copy of a replica is stale): the ring again.
        self._ring_changed(renewed=None if swapped else peer_id)

    def _send_owned(self, member: Member, client_ids: list[str]) -> None:
        """OWNED: the sessions this node holds (since when, for protocol 3), in parts."""
        since, connected = self.owned_since, self.broker.is_connected
        body: list[Any] = client_ids if member.protocol < 3 else [
            [c, since.get(c, 0), connected(c)] for c in client_ids]
        for at in range(0, len(body), 10_000):
            member.link.send(FrameKind.OWNED, body[at:at + 10_000])

    def _log_view(self) -> None:
        names = sorted([self.node_id, *self.members])
        log.info("Cluster size = %d, members : %s.", len(names), names)

    def _on_lost(self, link: PeerLink) -> None:
        self._links.discard(link)
        self._dialled.pop(link, None)
        for client_id in self._handing.pop(link, ()):
            self.broker.release_session(client_id, taken=False)  # not confirmed: kept here
        for fetch in self._fetches.values():
            if fetch.link is link:
                fetch.fail("the connection to the node holding it closed")
        peer_id = link.peer_id
        if peer_id is not None and self.members.get(peer_id) is not None \
                and self.members[peer_id].link is link:
            self._remove(peer_id, "its connection closed")

    def _remove(self, peer_id: str, why: str) -> None:
        member = self.members.pop(peer_id, None)
        if member is None:
            return
        member.link.close()
        # Its filters stay in the table and what it would get is kept for it (ABSENT_KEEP).
        self._absent[peer_id] = time.monotonic() + ABSENT_KEEP
        if why != "it shut down":  # unreachable, not gone: dialled until it is back
            self._absent_at[peer_id] = (member.address, member.incarnation)
        self.forwarding.left(peer_id)
        if self.health is not None:
            self.health.forget(peer_id)
        log.warning("Cluster node %s left the cluster: %s", peer_id, why)
        self._log_view()
        self._excluding.pop(peer_id, None)  # it will not rescue anything now
        for token in list(self._barriers):
            self._routed(peer_id, token)
        if self.replicator is not None:
            self.replicator.lost(peer_id)
            self._ring_changed()
            if why != "it shut down" and not self._stopping:
                self._check_disaster(peer_id)
            if not self._stopping and self._taker_of(peer_id) == self.node_id \
                    and self.replicas is not None \
                    and self.replicas.holds(peer_id) and peer_id not in self._taking:
                self._taking[peer_id] = anyio.Event()
                probe = member.address if why == "its connection closed" else None
                # The larger side of a split takes a node over; a node that sees no more than
                # half of the nodes it knew (itself included) takes it over only if the node
                # is surely dead (its port refuses), not merely out of reach.
                known = 1 + len(self.members) + len(self._absent_at)
                majority = 2 * (1 + len(self.members)) > known
                asyncio.get_running_loop().create_task(
                    self._take_over(peer_id, probe, majority, member.address))

    def _forget(self, peer_id: str) -> None:
        """A node away for longer than ABSENT_KEEP: no more routing to it."""
        del self._absent[peer_id]
        self._spoke.pop(peer_id, None)
        self._absent_at.pop(peer_id, None)  # discovery finds it again if it comes back
        self.table.drop(peer_id)
        self.broker.remote_routes_changed()
        dropped = self.forwarding.abandon(peer_id)
        self.forwarding.dropped += dropped
        for client_id, (owner, _epoch) in list(self.owners.items()):
            if owner == peer_id:  # its clients get new sessions now, not a refusal
                del self.owners[client_id]
        log.warning("Cluster node %s has been away for %.0f s: forgetting its subscriptions%s",
                    peer_id, ABSENT_KEEP,
                    f" and dropping the {dropped} messages kept for it" if dropped else "")

    # ------------------------------------------------------------------ failure detection

    def _health_failed(self, peer_id: str, incarnation: int, why: str) -> None:
        member = self.members.get(peer_id)
        if member is not None and member.incarnation == incarnation:
            self._remove(peer_id, f"TCP health check failed: {why}")

    async def _heartbeat(self) -> None:
        interval = self.settings.heartbeat_interval
        timeout = self.settings.heartbeat_timeout
        last = time.monotonic()
        while not self._stopping:
            await anyio.sleep(interval)
            now = time.monotonic()
            paused, last = now - last - interval, now
            if paused > timeout / 2:
                # This process did not run (SIGSTOP, a VM pause): the peers' silence is its own.
                log.warning("this node did not run for %.1f s: the silence of the other nodes "
                            "in that time is not held against them", paused)
                for member in self.members.values():
                    member.link.last_read = now
                continue
            for peer_id, until in list(self._absent.items()):
                if now > until:
                    self._forget(peer_id)
            # A node that failed may be back (a split healed, a restart): no need to wait for
            # the next discovery round to find out.
            for address, _incarnation in list(self._absent_at.values()):
                self._dial(address)
            load = self.broker.load()  # every member sees every node's (the control center)
            self._own_loads = (self._own_loads[1], (time.time(), load))
            for member in list(self.members.values()):
                silent = now - member.link.last_read
                if silent > timeout:
                    self._remove(member.node_id, f"no heartbeat for {silent:.1f} s")
                else:
                    member.link.send(FrameKind.HEARTBEAT, load)

    # ------------------------------------------------------------------ frames

    def _on_frame(self, link: PeerLink, kind: FrameKind, body: Any) -> None:
        metrics = self.metrics
        if kind is _PUBLISH:  # the hot path: checked first, no Counter, no helper calls
            metrics.publish_frames += 1
            peer_id = link.peer_id
            member = self.members.get(peer_id) if peer_id else None
            if member is None or member.link is not link:
                return
            if not self.forwarding.arrived(peer_id):  # type: ignore[arg-type]
                return  # sent again after a reconnect, handled before
            metrics.publishes_received += 1
            topic, payload, qos, retain, props, expiry_at, publisher, serial, routed_at = body
            message = Message(topic, payload, qos, retain,
                              decode_properties(props) if props else None, publisher, expiry_at)
            if serial:
                message.mid = (peer_id, serial)  # type: ignore[assignment]
            if not serial and self._excluding and self._excluding.get(peer_id):  # type: ignore[arg-type]
                # A message without identity (a node of protocol 3), maybe routed by the peer
                # before it heard of a takeover: the sessions taken over get it from the
                # failed node's share (RESCUED), not twice. With an identity, each session
                # takes it once whichever way comes first, and one routed to the taker after
                # the takeover (in no share) is not lost.
                self.broker.publish_among(message, self._adopted_of(peer_id), among=False)  # type: ignore[arg-type]
            else:
                self.broker.publish_from_peer(message)
            if routed_at:  # handed to the subscribers' connections (written after this read)
                self._delivery_countdown -= 1
                if self._delivery_countdown <= 0:  # one in DELIVERY_SAMPLE, counted for all
                    self._delivery_countdown = DELIVERY_SAMPLE
                    self.delivery_times.observe(peer_id, time.time() - routed_at,  # type: ignore[arg-type]
                                                DELIVERY_SAMPLE)
            self._acknowledge_soon(peer_id)  # type: ignore[arg-type]
            # mark_dirty flushes once after the whole read; a long read (thousands of
            # frames) is flushed in slices too, so the subscribers' side starts early.
            if not metrics.publishes_received % FLUSH_PUBLISHES:
                self.broker.flush()
            return
        metrics.frames_by_kind[kind] += 1
        if kind is FrameKind.HELLO:
            self._links.add(link)
            self._establish(link, body, answer=True)
            return
        if kind is FrameKind.WELCOME:
            self._establish(link, body)
            return
        peer_id = link.peer_id
        member = self.members.get(peer_id) if peer_id else None
        if member is None or member.link is not link:
            return  # a frame before the handshake, or on a link that lost the tie-break
        if kind is FrameKind.CLIENT_QUERY or kind is FrameKind.CLIENT_ANSWER:
            self.client_queries.on_frame(link, kind, body)
            return
        if kind is FrameKind.SHARED_PUBLISH:
            if self.forwarding.arrived(member.node_id):
                self.metrics.publishes_received += 1
                self.broker.deliver_shared(body[0], body[1], message_from(body[2]))
                self._acknowledge_soon(member.node_id)
        elif kind is FrameKind.FORWARD_ACK:
            self.forwarding.acknowledged_by(member.node_id, int(body))
        elif kind is FrameKind.REPLAY:
            self.forwarding.replaying(member.node_id, int(body[0]), int(body[1]))
            self._acknowledge_soon(member.node_id)  # what it holds and this node had handled
        elif kind is FrameKind.FILTER_ADD:
            self.table.add(member.node_id, body)
            self.broker.remote_routes_changed()
        elif kind is FrameKind.FILTER_REMOVE:
            self.table.remove(member.node_id, body)
            self.broker.remote_routes_changed()
        elif kind is FrameKind.FILTERS:
            self.table.replace(member.node_id, list(body))
            self.broker.remote_routes_changed()
        elif kind is FrameKind.RETAIN:
            self._apply_retained(body, join=False)
        elif kind is FrameKind.RETAINED:
            for item in body:
                self._apply_retained(item, join=True)
        elif kind is FrameKind.SESSION_FETCH:
            failed = str(body[2]) if len(body) > 2 and body[2] else None
            self._hand_over(link, int(body[0]), str(body[1]), failed)
        elif kind is FrameKind.SESSION:
            request, client_id, part, more = body
            fetch = self._fetches.get(request)
            if fetch is not None and fetch.link is link:
                fetch.part(part, more)
            elif part is not None and len(part) >= 3:  # the first part of an answer too late
                link.send(FrameKind.SESSION_DECLINED, [request, client_id])
        elif kind is FrameKind.SESSION_TAKEN:
            client_id = str(body[1])
            self._handing.get(link, set()).discard(client_id)
            tail = self.broker.release_session(client_id, taken=True)
            identified = member.protocol >= 4
            entries = [[*message_fields(m), *(mid or ("", 0))] if identified
                       else message_fields(m) for m, mid in tail]
            for part in in_parts(entries, lambda f: len(f[1])):
                link.send(FrameKind.SESSION_TAIL, [client_id, part])
        elif kind is FrameKind.SESSION_DECLINED:
            client_id = str(body[1])
            self._handing.get(link, set()).discard(client_id)
            self.broker.release_session(client_id, taken=False)
        elif kind is FrameKind.SESSION_TAIL:
            self.broker.append_handed_over(str(body[0]), [
                (StoredMessage(*fields[:7]),
                 (str(fields[7]), int(fields[8])) if len(fields) > 8 and fields[8] else None)
                for fields in body[1]])
        elif kind is FrameKind.CLIENT_CONNECTED:
            self._on_client_connected(member.node_id, body)
        elif kind is FrameKind.OWNED:
            self._on_owned(member.node_id, body)
        elif kind is FrameKind.SESSION_GONE:
            client_id = str(body[0]) if isinstance(body, list) else str(body)
            owner = self.owners.get(client_id)
            if owner is not None and owner[0] == member.node_id:
                del self.owners[client_id]
            if isinstance(body, list):  # the session is over: a tombstone
                version = self._session_ended(client_id, int(body[1]))
                if self.replicator is not None and not self.broker.is_connected(client_id) and \
                        client_id in self.broker.owned_sessions() and \
                        self.owned_since.get(client_id, 0) < version:
                    log.info("the session of %r ended on node %s after this node's copy was "
                             "made: dropping the copy", client_id, member.node_id)
                    self.owned_since.pop(client_id, None)
                    self.broker.taken_over_elsewhere(client_id)
        elif kind is FrameKind.REPL_OPS:
            if self.replicas is not None:
                self.replicas.ops(member.node_id, int(body[0]), body[1], body[2])
        elif kind is FrameKind.REPL_ACK:
            if self.replicator is not None:
                self.replicator.acknowledged(member.node_id, int(body))
        elif kind is FrameKind.REPL_RESYNC:
            if self.replicator is not None and member.node_id in self.replicator.backups:
                log.info("node %s holds no replica of this node's sessions any more: sending "
                         "them again", member.node_id)
                self._ring_changed(renewed=member.node_id)
        elif kind is FrameKind.REPL_SNAPSHOT:
            self._resync_asked.discard(member.node_id)
            if self.replicas is not None:
                self.replicas.snapshot_part(member.node_id, int(body[0]), bool(body[1]),
                                            body[2], body[3], bool(body[4]))
        elif kind is FrameKind.REPL_RELEASE:
            if self.replicas is not None:
                self.replicas.release(member.node_id)
        elif kind is FrameKind.TAKEN_OVER:
            self._rescue_for(member, str(body[0]), body[1])
        elif kind is FrameKind.RESCUED:
            self._deliver_rescued(str(body[0]), body[1], member.node_id, member.incarnation,
                                  int(body[2]) if len(body) > 2 else 0)
        elif kind is FrameKind.RESCUE_DONE:
            self._excluding.get(member.node_id, set()).discard(str(body))
        elif kind is FrameKind.ROUTE_TO:
            self._on_route_to(member, body)
        elif kind is FrameKind.ROUTED:
            self._routed(member.node_id, int(body))
        elif kind is FrameKind.MERGE_QUEUE:
            self._merge_queue(str(body[0]), int(body[1]), body[2])
        elif kind is FrameKind.SYNCED:
            member.synced = True
            if member.merging:
                member.merging = False
                log.info("Finished cluster merge process successfully.")
        elif kind is FrameKind.MEMBERS:
            for host, port in body:
                self._dial(ClusterNodeAddress(str(host), int(port)))
        elif kind is FrameKind.HEARTBEAT:
            if isinstance(body, list) and len(body) >= 4:  # older nodes send none
                if member.load is not None:
                    member.previous = (member.load_at, member.load)
                member.load = [int(value) for value in body[:4]]
                member.load_at = time.time()
        elif kind is FrameKind.BYE:
            self._remove(member.node_id, "it shut down")
        elif kind is FrameKind.OVERLOAD:
            self.peer_pressure.heard(member.node_id, body)
        elif kind in SERVICE_FRAMES and self.client_services is not None:
            self.client_services.on_frame(member, kind, body)

    def _broadcast(self, kind: FrameKind, body: Any) -> None:
        for member in self.members.values():
            member.link.send(kind, body)

    # ------------------------------------------------------------------ the broker's side

    @property
    def has_peers(self) -> bool:
        # Out of reach counts: a node cut off from all others must still ask (and refuse a
        # CONNECT whose session is over there), not open a fresh session.
        return bool(self.members or self._absent_at)

    def remote_routes(self, topic: str) -> tuple[frozenset[str], RemoteGroups]:
        return self.table.match(topic)

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

    def forward(self, message: Message, nodes: frozenset[str]) -> None:
        """Send a local publisher's message to every interested node, once per node."""
        props = message.properties
        raw_props = encode_properties(props) if props else b""
        serial = self.identify(message)[1]  # the same message, wherever it ends up queued
        frame = encode_publish_frame(  # once, whatever the fan-out
            message.topic, message.payload, message.qos, message.retain, raw_props,
            message.expiry_at, message.publisher_id, serial, time.time())
        unstamped = legacy = None  # for a node without arrival stamps; of protocol 3: no serial
        forwarding = self.forwarding
        for node_id in nodes:
            member = self.members.get(node_id)
            if member is not None:
                protocol, stamps = member.protocol, member.arrival_stamps
            elif node_id in self._absent:
                # Kept for an absent node, with its identity if it spoke protocol 4: a copy of
                # a session there may get it twice (a merge), and only the identity tells.
                protocol, stamps = self._spoke.get(node_id, (0, False))
            else:
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
        member = self.members.get(node_id)
        if member is not None:
            frame = encode_frame(FrameKind.SHARED_PUBLISH,
                                 [key[0], key[1], message_body(message)])
            member.link.send_encoded(frame)
            self.forwarding.sent(node_id, frame)
            self.metrics.publishes_forwarded += 1

    async def forwards_acknowledged(self) -> None:
        """Until the peers have acknowledged every message sent to them so far (or left)."""
        await self.forwarding.acknowledged(self.members)

    def _acknowledge_soon(self, peer_id: str) -> None:
        self._ack_due.add(peer_id)
        if self._ack_task is None:
            self._ack_task = asyncio.get_running_loop().create_task(self._acknowledge())

    async def _acknowledge(self) -> None:
        """FORWARD_ACK to the peers whose frames were handled, once their deliveries are
        durable here (one commit and one small frame per peer for a whole read)."""
        try:
            while self._ack_due:
                await asyncio.sleep(0)  # the rest of this read first
                peers, self._ack_due = self._ack_due, set()
                handled = {peer: self.forwarding.handled(peer) for peer in peers}
                await self.broker.commit()
                if self._handed_over:
                    return
                for peer, count in handled.items():
                    member = self.members.get(peer)
                    if member is not None:
                        member.link.send(FrameKind.FORWARD_ACK, count)
        except Exception:
            log.exception("could not acknowledge messages from other nodes; they will be sent "
                          "again after a reconnect")
        finally:
            self._ack_task = None

    def retained_changed(self, message: Message) -> None:
        version = self._retained_version(message.topic)
        self._broadcast(FrameKind.RETAIN, [*message_body(message), version])

    def _retained_version(self, topic: str, seen: int = 0) -> int:
        """A new version for ``topic``'s retained message: later than any this node has made
        or seen (a hybrid logical clock: wall-clock nanoseconds, moved on by what arrives)."""
        self._clock = max(self._clock + 1, time.time_ns(), seen)
        self.retained_versions[topic] = self._clock
        if len(self.retained_versions) > RETAINED_VERSIONS:
            self._trim_retained_versions()
        return self._clock

    def _trim_retained_versions(self) -> None:
        live = {m.topic for m in self.broker.retained_messages()}
        clears = sorted((v, t) for t, v in self.retained_versions.items() if t not in live)
        for _version, topic in clears[:len(clears) // 2]:  # the oldest clears go first
            del self.retained_versions[topic]

    def _apply_retained(self, body: list[Any], join: bool) -> None:
        """A retained message (or clear) from a peer: the newer version wins. A message
        without a version (an older peer, or one restored from disk) never replaces one that
        has a version, and at a join only fills a gap."""
        message = message_from(body)
        version = int(body[7]) if len(body) > 7 and body[7] else 0
        topic = message.topic
        known = self.retained_versions.get(topic, 0)
        if version:
            if version <= known:
                return
            self._clock = max(self._clock, version)
            self.retained_versions[topic] = version
            self.broker.apply_retained(message)
        elif not known:
            self.broker.apply_retained(message, only_if_absent=join)

    def _hand_over(self, link: PeerLink, request: int, client_id: str,
                   failed: str | None = None) -> None:
        """Another node asks for a session: send it in parts, hold it until it confirms.

        ``failed``: the asking node found the session's node dead and asks this one as the
        node that takes it over; if this node has not found out yet, it answers once it has
        (or not at all, and the client is refused and tries again).
        """
        if self._leaving_since is not None:
            return  # leaving: the asking node asks the node that takes over, after the BYE
        if failed is not None and failed in self.members and self.replicas is not None \
                and self.replicas.holds(failed):
            async def when_taken() -> None:
                with anyio.move_on_after(self.settings.connect_timeout):
                    while failed in self.members:
                        await anyio.sleep(0.02)
                if failed not in self.members and not link.closed:
                    self._hand_over(link, request, client_id)
            asyncio.get_running_loop().create_task(when_taken())
            return
        if self._taking or self._rescuing(client_id):
            # Among the sessions being taken over: it moves on once it is here whole (what
            # the other nodes kept for the failed node included), so that no message reaches
            # it both through the rescue and directly on its new node.
            async def later() -> None:
                await self._taken(*self._taking)
                with anyio.move_on_after(self.settings.connect_timeout):
                    while self._rescuing(client_id):
                        await anyio.sleep(0.01)
                if not link.closed:
                    self._hand_over(link, request, client_id)
            asyncio.get_running_loop().create_task(later())
            return
        records = self.broker.export_session(client_id)
        self.broker.flush()  # the client's connection here closes now, with its reason
        if records is None:
            link.send(FrameKind.SESSION, [request, client_id, None, False])
            return
        self._handing.setdefault(link, set()).add(client_id)
        asking = self.members.get(link.peer_id) if link.peer_id else None
        parts = list(session_parts(records, seen=asking is not None and asking.session_seen))
        for index, part in enumerate(parts):
            link.send(FrameKind.SESSION, [request, client_id, part, index < len(parts) - 1])

    async def fetch_session(self, client_id: str) -> _Handover | None:
        """Before a client's CONNACK: the node that holds its session hands it over.

        Only that node is asked (the ``owners`` directory says which); None when no member
        holds one. Raises :class:`SessionUnavailable` when the owner does not answer within
        the connect timeout: its copy stays where it is, and the client may try again.
        """
        for attempt in (1, 2):
            entry = self.owners.get(client_id)
            owner = entry[0] if entry is not None else None
            if owner is not None and owner not in self.members and self.replicator is not None:
                # Its node failed or left: the node taking its sessions over has it (or will).
                taker = self._taker_of(owner)
                if taker == self.node_id:
                    await self._taken(owner)
                    if not self.broker.has_session(client_id) and \
                            self.owner_of(client_id) == owner and owner not in self.members:
                        # Not taken over (its node still answers, or no replica was complete
                        # here): a fresh session would hide the real one, which lives on.
                        raise SessionUnavailable(
                            f"the node holding the session ({owner}) is unreachable")
                    return None  # here now, if it was in the replica
                owner = taker
            elif owner is None and self._taking:
                await self._taken(*self._taking)  # it may be among what is taken over here
                return None
            member = self.members.get(owner) if owner is not None else None
            if member is None or member.link.closed:
                if owner is not None and self.replicator is not None:
                    raise SessionUnavailable(
                        f"the node holding the session ({owner}) is unreachable")
                return None
            self._fetch_seq += 1
            request = self._fetch_seq
            fetch = self._fetches[request] = _SessionFetch(request, client_id, member.link)
            failed = entry[0] if entry is not None and entry[0] != owner else None
            try:
                member.link.send(FrameKind.SESSION_FETCH, [request, client_id, failed])
                with anyio.move_on_after(self.settings.connect_timeout):
                    await fetch.done.wait()
            finally:
                del self._fetches[request]
            if not fetch.done.is_set():
                log.warning("node %s did not hand over the session of %r within %.0f s: "
                            "the client is refused and may try again", owner, client_id,
                            self.settings.connect_timeout)
                raise SessionUnavailable(
                    f"the node holding the session ({owner}) did not answer")
            if fetch.failed is not None:
                if attempt == 1 and owner not in self.members and self.replicator is not None:
                    continue  # it left meanwhile (a node stopping answers no more fetches)
                raise SessionUnavailable(f"the session could not be fetched: {fetch.failed}")
            if fetch.records is None:
                self.owners.pop(client_id, None)
                return None
            return _Handover(fetch.records, fetch)
        return None

    def custody_epoch(self, client_id: str, above: int = 0) -> int:
        """A new custody epoch for ``client_id``'s session: higher than any this node knows
        of (its own copy's, the directory's, ``above``). Epochs only grow, so every node keeps
        the same holder in its directory whatever order the claims arrive in; they start from
        the clock (nanoseconds) so that they also order after the claims of older nodes."""
        known = max(self.owned_since.get(client_id, 0),
                    self.owners.get(client_id, ("", 0))[1], above)
        return max(time.time_ns(), known + 1)

    def _on_client_connected(self, node_id: str, body: Any) -> None:
        """CLIENT_CONNECTED: the client is on ``node_id`` now, with this custody epoch; a
        claim older than the copy here (late, from before a split or a takeover) changes
        nothing."""
        client_id, since = (str(body[0]), int(body[1])) if isinstance(body, list) \
            else (str(body), time.time_ns())
        if since < self.owned_since.get(client_id, 0):
            log.info("node %s says client %r connected there, before this node took its "
                     "session over: ignored", node_id, client_id)
            return
        current = self.owners.get(client_id)
        if current is None or since >= current[1]:
            self.owners[client_id] = (node_id, since)
        self.owned_since.pop(client_id, None)
        self.broker.taken_over_elsewhere(client_id)

    def client_connected(self, client_id: str) -> None:
        since = self.owned_since[client_id] = self.custody_epoch(client_id)
        self.owners.pop(client_id, None)
        for member in self.members.values():
            member.link.send(FrameKind.CLIENT_CONNECTED,
                             [client_id, since] if member.protocol >= 3 else client_id)

    def session_ended(self, client_id: str, deleted: bool = True) -> None:
        self.owned_since.pop(client_id, None)
        if not deleted:
            self._broadcast(FrameKind.SESSION_GONE, client_id)
            return
        # A tombstone: a copy of the session older than this (on a node that was away) is
        # dropped when that node comes back, not resurrected.
        version = self._session_ended(client_id, time.time_ns())
        for member in self.members.values():
            member.link.send(FrameKind.SESSION_GONE,
                             [client_id, version] if member.protocol >= 3 else client_id)

    def _session_ended(self, client_id: str, version: int) -> int:
        ended = self.ended_sessions
        version = max(version, ended.get(client_id, 0))
        ended[client_id] = version
        if len(ended) > ENDED_SESSIONS:
            for old in sorted(ended, key=ended.__getitem__)[:len(ended) // 2]:
                del ended[old]
        return version

    def loads(self) -> dict[str, tuple[float, list[int]]]:
        """Each member's load as its last heartbeat said: (when it arrived, [connections,
        sessions, messages in, messages out])."""
        return {m.node_id: (m.load_at, m.load) for m in self.members.values()
                if m.load is not None}

    def load_report(self) -> dict[str, dict[str, Any]]:
        """Every node's load, this one's included, with its message rates over the last
        heartbeat interval (None until two heartbeats came): what `hive cluster status` and
        /api/v1/cluster/nodes show for members no one asked directly."""
        report = {}
        own = self._own_loads
        sources = [(self.node_id, own[1], own[0])]
        sources += [(m.node_id, (m.load_at, m.load) if m.load is not None else None,
                     m.previous) for m in self.members.values()]
        for node_id, now, before in sources:
            if now is None:
                continue
            at, load = now
            entry: dict[str, Any] = {"connections": load[0], "sessions": load[1],
                                     "messages_in_per_second": None,
                                     "messages_out_per_second": None}
            if before is not None and at > before[0]:
                span = at - before[0]
                if load[2] >= before[1][2] and load[3] >= before[1][3]:
                    entry["messages_in_per_second"] = round((load[2] - before[1][2]) / span, 1)
                    entry["messages_out_per_second"] = round((load[3] - before[1][3]) / span, 1)
            report[node_id] = entry
        return report

    def owner_directory(self) -> dict[str, str]:
        """Which other node holds each client's session, as far as this node knows."""
        return {client_id: entry[0] for client_id, entry in self.owners.items()}

    def owner_of(self, client_id: str) -> str | None:
        """The other node holding the session of ``client_id``, as far as this node knows."""
        entry = self.owners.get(client_id)
        return entry[0] if entry is not None else None

    def adopt_imported(self, records: list[SessionRecords]) -> list[str]:
        """Sessions imported from a backup: this node's own from now on. The peers learn that
        it holds them (OWNED: a CONNECT elsewhere fetches them from here) and route their
        subscriptions here (FILTER_ADD, sent as each enters the topic tree). Returns the client
        ids taken (a client connected here meanwhile keeps its session)."""
        adopted = self.broker.adopt_sessions(records)
        for client_id in adopted:
            self.owned_since[client_id] = self.custody_epoch(client_id)
            self.owners.pop(client_id, None)
        if adopted:
            for member in self.members.values():
                self._send_owned(member, adopted)
        return adopted

    def _on_owned(self, node_id: str, body: list[Any]) -> None:
        """OWNED from ``node_id``. Of two nodes holding a session (after a failure or a
        split), one keeps it: the one with the client connected, else the newer holder (then
        the smaller node id). The other hands its queue on (MERGE_QUEUE) and drops its copy."""
        local = set(self.broker.owned_sessions())
        dropped: list[tuple[str, tuple[bool, int, bool]]] = []
        kept: list[str] = []
        for item in body:
            if isinstance(item, list):
                client_id, since = str(item[0]), int(item[1])
                connected = bool(item[2]) if len(item) > 2 else False
            else:
                client_id, since, connected = str(item), 0, False
            if client_id in local:
                theirs = (connected, since, node_id < self.node_id)
                mine = (self.broker.is_connected(client_id),
                        self.owned_since.get(client_id, 0), self.node_id < node_id)
                if theirs > mine:
                    dropped.append((client_id, theirs))
                elif since >= mine[1]:
                    # This copy stays (its client is here) although the other claim is newer:
                    # a custody epoch above it, told to every member, so that no directory
                    # keeps naming the node whose copy goes.
                    self.owned_since[client_id] = self.custody_epoch(client_id, above=since)
                    kept.append(client_id)
                continue
            ended = self.ended_sessions.get(client_id, 0)
            # Ended after that copy was made. Only with replication: then a session that
            # lived on after the end has a newer copy on the node that took it over.
            if ended > since and not connected and self.replicator is not None:
                member = self.members.get(node_id)
                if member is not None:
                    member.link.send(FrameKind.SESSION_GONE, [client_id, ended])
                continue
            current = self.owners.get(client_id)
            if current is None or since >= current[1]:
                self.owners[client_id] = (node_id, since)
        if kept:
            for member in self.members.values():
                self._send_owned(member, kept)
        if dropped:
            self._route_to_keeper(node_id, dropped)

    def _route_to_keeper(self, keeper: str,
                         dropped: list[tuple[str, tuple[bool, int, bool]]]) -> None:
        """Before this node drops its copies (and their filters) for ``keeper``, the other
        members route what matches the keeper's filters to it (ROUTE_TO), even those not
        linked to it yet: a node back after a split re-links one peer after the other. The
        copies end once every member has answered (ROUTED): what a member routed here before
        is in this node's queue by then and goes to the keeper with it (MERGE_QUEUE); without
        that, a message in flight to this node, or published on a member that has no route to
        the keeper yet, would match nobody and be lost."""
        member = self.members.get(keeper)
        if member is None:
            return
        self._barrier_serial += 1
        token = self._barrier_serial
        body = [token, keeper, member.address.host, member.address.port, member.incarnation,
                sorted(self.table.filters_of(keeper))]
        waiting = set()
        for other in self.members.values():
            if other.node_id != keeper and other.protocol >= 4:
                other.link.send(FrameKind.ROUTE_TO, body)
                waiting.add(other.node_id)
        self._barriers[token] = (keeper, dropped, waiting)
        if waiting:
            asyncio.get_running_loop().call_later(
                self.settings.connect_timeout, self._drop_copies, token)
        else:
            self._drop_copies(token)

    def _routed(self, peer_id: str, token: int) -> None:
        """ROUTED (or the member left): one answer fewer to wait for."""
        barrier = self._barriers.get(token)
        if barrier is not None:
            barrier[2].discard(peer_id)
            if not barrier[2]:
                self._drop_copies(token)

    def _drop_copies(self, token: int) -> None:
        barrier = self._barriers.pop(token, None)
        if barrier is None:
            return
        keeper, dropped, waiting = barrier
        if waiting:
            log.warning("nodes %s did not confirm routing to node %s in %.0f s: dropping the "
                        "copies it keeps anyway", ", ".join(sorted(waiting)), keeper,
                        self.settings.connect_timeout)
        local = set(self.broker.owned_sessions())
        for client_id, theirs in dropped:
            if client_id not in local:
                continue  # ended here meanwhile
            mine = (self.broker.is_connected(client_id), self.owned_since.get(client_id, 0),
                    self.node_id < keeper)
            if theirs > mine:  # else its client connected here meanwhile: this copy stays
                self._drop_copy(client_id, keeper, theirs[1])

    def _on_route_to(self, member: Member, body: list[Any]) -> None:
        """ROUTE_TO: another member drops its copies for ``keeper``. Not linked to the keeper
        yet: its filters are routed to it from now on and what they match is kept for it (as
        for an absent member) until the link is up, then sent (REPLAY). ROUTED answers."""
        token, keeper = int(body[0]), str(body[1])
        if keeper != self.node_id:
            # Linked to the keeper or not, its filters are routed to it from now on: a link
            # that closes before the keeper's own FILTERS arrived leaves them in the table
            # (kept for it while it is away), not missing.
            for topic_filter in body[5]:
                self.table.add(keeper, str(topic_filter))
            self.broker.remote_routes_changed()
        if keeper != self.node_id and keeper not in self.members:
            address = ClusterNodeAddress(str(body[2]), int(body[3]))
            self._absent[keeper] = time.monotonic() + ABSENT_KEEP
            self._absent_at[keeper] = (address, int(body[4]))
            log.info("node %s keeps sessions node %s held: routing its %d filters to it until "
                     "it is linked here", keeper, member.node_id, len(body[5]))
            self._dial(address)
        # After every message routed to the sender before now: it drops its copies on this.
        member.link.send(FrameKind.ROUTED, token)

    def _drop_copy(self, client_id: str, keeper: str, since: int) -> None:
        """Another node keeps this session: hand it what was queued here, end the copy."""
        member = self.members.get(keeper)
        mark = self.adopted_marks.pop(client_id, 0)
        queue = self.broker.queued_records(client_id)
        if member is not None and member.protocol >= 3:
            identified = member.protocol >= 4
            entries = [[seq, message_fields(m), *(mid or ("", 0)), *(rescued or ("", 0, 0))]
                       if identified else [seq, message_fields(m)]
                       for seq, m, mid, rescued in queue]
            parts = list(in_parts(entries, lambda item: len(item[1][1]))) or [[]]
            for part in parts:
                member.link.send(FrameKind.MERGE_QUEUE, [client_id, mark, part])
        log.info("the session of %r is also on node %s, which keeps it: %d queued messages "
                 "handed to it, the copy here dropped", client_id, keeper, len(queue))
        self.owned_since.pop(client_id, None)
        self.broker.taken_over_elsewhere(client_id)
        self.owners[client_id] = (keeper, since)
        self.merges += 1

    def _merge_queue(self, client_id: str, mark: int, entries: list[list[Any]]) -> None:
        """MERGE_QUEUE: the queue of a dropped copy. Positions up to the marks were in both
        copies (a replica's; delivered or queued here already); the rest were queued there
        while the copies were apart: they are added here."""
        mark = max(mark, self.adopted_marks.get(client_id, 0))
        new: list[tuple[StoredMessage, tuple[str, int] | None]] = []
        handled = 0
        for entry in entries:
            seq, fields = entry[0], entry[1]
            if seq <= mark:
                continue
            origin, serial = (str(entry[2]), int(entry[3])) if len(entry) > 3 else ("", 0)
            if len(entry) > 6 and entry[4] == self.node_id and origin and \
                    int(entry[6]) <= self.forwarding.handled_before(origin, int(entry[5])):
                # Rescued from this node by a takeover while it was frozen, yet handled here
                # before (its replica had not recorded it): delivered already.
                handled += 1
                continue
            new.append((StoredMessage(*fields), (origin, serial) if serial else None))
        if handled:
            log.info("the copy of %r held elsewhere had %d messages this node had handled "
                     "already: not added again", client_id, handled)
        if new:
            self.broker.merge_queue(client_id, new)

    # ------------------------------------------------------------------ replication

    def _ring_changed(self, renewed: str | None = None) -> None:
        """Members came or went: this node's backups are the next ones on the ring."""
        replicator = self.replicator
        if replicator is None or self._stopping:
            return
        if renewed is not None:
            replicator.lost(renewed)  # a restarted backup starts again from a snapshot
        ring = [m.node_id for m in self.members.values() if m.protocol >= 3]
        replicator.set_backups(successors(self.node_id, ring, self.settings.replica_count - 1))

    def _taker_of(self, failed: str) -> str | None:
        """The first member after ``failed`` on the ring: it takes its sessions over."""
        ring = [m.node_id for m in self.members.values() if m.protocol >= 3]
        ring.append(self.node_id)
        after = successors(failed, ring, len(ring))
        return after[0] if after else None

    def _check_disaster(self, node_id: str) -> None:
        now = time.monotonic()
        window = self.settings.disaster_window
        self._departures = [(t, n) for t, n in self._departures if now - t < window]
        self._departures = [(t, n) for t, n in self._departures if n != node_id]
        self._departures.append((now, node_id))
        gone = len(self._departures)
        if gone >= self.settings.replica_count:
            log.warning(
                "Cluster disaster detected at %s: %d nodes left the cluster within %.0f s "
                "(%s), and replica-count is %d: not every replica is reachable, some "
                "persistent data may be unavailable until those nodes return",
                time.strftime("%Y-%m-%d %H:%M:%S %Z"), gone, window,
                ", ".join(n for _t, n in self._departures), self.settings.replica_count)

    def _watermarks(self) -> Watermarks:
        return {peer: [seen.incarnation, seen.handled]
                for peer, seen in self.forwarding.incoming.items()}

    def _replica_snapshot(self) -> tuple[list[SessionRecords], list[list[Any]]]:
        return self.broker.replica_records(), self.broker.replica_wills()

    def _send_snapshot(self, node_id: str, seq: int, records: list[SessionRecords],
                       wills: list[list[Any]]) -> None:
        member = self.members.get(node_id)
        if member is None:
            return
        parts = list(in_record_parts(records, PART_BYTES))
        for index, part in enumerate(parts):
            member.link.send(FrameKind.REPL_SNAPSHOT,
                             [seq, index == 0, part, wills if index == 0 else [],
                              index < len(parts) - 1])

    def _send_ops(self, node_id: str, first: int, ops: list[Any],
                  watermarks: Watermarks) -> None:
        member = self.members.get(node_id)
        if member is not None:
            member.link.send(FrameKind.REPL_OPS, [first, ops, watermarks])

    def _send_release(self, node_id: str) -> None:
        member = self.members.get(node_id)
        if member is not None:
            member.link.send(FrameKind.REPL_RELEASE)

    def _replica_missing(self, origin: str) -> None:
        member = self.members.get(origin)
        if member is not None and origin not in self._resync_asked:
            self._resync_asked.add(origin)  # once, until its snapshot comes
            member.link.send(FrameKind.REPL_RESYNC)

    def _acknowledge_replica(self, origin: str, seq: int) -> None:
        member = self.members.get(origin)
        if member is not None:
            member.link.send(FrameKind.REPL_ACK, seq)

    async def _taken(self, *failed: str) -> None:
        """Until the takeovers of ``failed`` under way here are over."""
        for node_id in failed:
            event = self._taking.get(node_id)
            if event is not None:
                with anyio.move_on_after(self.settings.connect_timeout):
                    await event.wait()

    async def _take_over(self, failed: str, probe: ClusterNodeAddress | None = None,
                         majority: bool = True,
                         address: ClusterNodeAddress | None = None) -> None:
        """``failed`` left and this node follows it on the ring: its sessions become ours.

        ``probe``: the link closed without a heartbeat timeout; the node is taken over only if
        its port no longer answers (after a pause of this node, the peers close its links).
        Without ``majority`` (this node sees no more than half of the nodes), only if its port
        at ``address`` refuses: a node out of reach (a split) keeps its sessions, and the
        larger side takes them over.
        """
        began = time.monotonic()
        event = self._taking[failed]
        try:
            assert self.replicas is not None
            asked = probe if probe is not None else (address if not majority else None)
            verdict = await self.transport.answers(asked) if asked is not None else False
            if verdict:
                log.warning("node %s closed its link to this node but still answers: its "
                            "sessions stay with it", failed)
                return
            if verdict is None and not majority:
                log.warning("node %s does not answer, and this node sees %d of the %d nodes it "
                            "knew: its sessions are not taken over here (the larger side takes "
                            "them, or the node keeps them)", failed, 1 + len(self.members),
                            1 + len(self.members) + len(self._absent_at))
                return
            taken = await self.replicas.take(failed)
            if taken is None:
                return
            if failed in self.members:  # it came back meanwhile: it keeps its sessions
                log.info("node %s is back: its sessions stay with it", failed)
                return
            # From here on, one step: the peers hear of it before any frame the adoption sends.
            for member in self.members.values():
                if member.protocol >= 3:
                    member.link.send(FrameKind.TAKEN_OVER, [failed, taken.watermarks])
                    self._excluding.setdefault(member.node_id, set()).add(failed)
            adopted = self.broker.adopt_sessions(taken.records)
            marks = {r.session.client_id: max((seq for seq, _m in r.queue), default=0)
                     for r in taken.records}
            for client_id in adopted:
                self.owned_since[client_id] = self.custody_epoch(client_id)
                self.owners.pop(client_id, None)
                self.adopted_marks[client_id] = marks.get(client_id, 0)
            self.adopted_from.setdefault(failed, set()).update(adopted)
            first, rescued = self._unhandled(failed, taken.watermarks)
            self._drop_node(failed)
            self._deliver_rescued(failed, rescued, self.node_id, self.incarnation, first)
            wills = self.broker.adopt_wills(taken.wills)
            for member in self.members.values():
                member.link.send(FrameKind.FILTERS, sorted(self._local_filters))
                self._send_owned(member, adopted)
            self.takeovers += 1
            self.sessions_taken_over += len(adopted)
            log.warning("Took over the %d persistent sessions of failed node %s from its replica "
                        "in %d ms (%d messages it had not handled delivered to them, %d of its "
                        "clients' wills published, %d pending)", len(adopted), failed,
                        (time.monotonic() - began) * 1000, len(rescued), wills,
                        len(taken.wills) - wills)
            await self.broker.commit()
        except Exception:
            log.exception("could not take over the sessions of node %s", failed)
        finally:
            del self._taking[failed]
            event.set()

    def _rescuing(self, client_id: str) -> bool:
        """Whether ``client_id`` was taken over from a node whose share some peer has not
        finished sending."""
        return any(client_id in self.adopted_from.get(failed, ())
                   for failed_nodes in self._excluding.values() for failed in failed_nodes)

    def _adopted_of(self, peer_id: str) -> set[str]:
        ids: set[str] = set()
        for failed in self._excluding.get(peer_id, ()):
            ids |= self.adopted_from.get(failed, set())
        return ids

    def _unhandled(self, failed: str, watermarks: Watermarks) -> tuple[int, list[bytes]]:
        """The data frames kept for ``failed`` that its replica does not account for, and the
        place of the first."""
        out = self.forwarding.outgoing.get(failed)
        if out is None:
            return 0, []
        mark = watermarks.get(self.node_id)
        handled = mark[1] if mark is not None and mark[0] == self.incarnation else 0
        skip = max(0, handled - out.acked)
        return out.acked + skip + 1, list(out.frames)[skip:]

    def _drop_node(self, node_id: str) -> None:
        """A failed node whose sessions were taken over: nothing is routed or kept for it."""
        self._absent.pop(node_id, None)
        self.table.drop(node_id)
        self.forwarding.abandon(node_id)
        for client_id, (owner, _since) in list(self.owners.items()):
            if owner == node_id:
                del self.owners[client_id]
        self.broker.remote_routes_changed()

    def _rescue_for(self, taker: Member, failed: str, watermarks: Watermarks) -> None:
        """TAKEN_OVER: send the taker what was kept for ``failed``, route its share there."""
        if failed in self.members:
            # The taker found it dead before this node did: its sessions are the taker's now,
            # so what this node sends it from here on must go there (it dials again anyway).
            self._remove(failed, f"node {taker.node_id} took its sessions over")
        if failed not in self.members:
            place, rescued = self._unhandled(failed, watermarks)
            for part in in_parts(rescued, len):
                taker.link.send(FrameKind.RESCUED, [failed, part, place])
                place += len(part)
            for topic_filter in self.table.filters_of(failed):
                self.table.add(taker.node_id, topic_filter)  # until the taker's FILTERS
            self._drop_node(failed)
        taker.link.send(FrameKind.RESCUE_DONE, failed)

    def _deliver_rescued(self, failed: str, frames: list[bytes], origin: str,
                         incarnation: int, place: int) -> None:
        """Frames a failed node had not handled (the first at ``place`` in what ``origin``
        sent it): for the sessions taken over from it only."""
        adopted = self.adopted_from.get(failed, set())
        decoder = FrameDecoder()
        for at, frame in enumerate(frames, place):
            for kind, body in decoder.feed(frame):
                self.messages_rescued += 1
                if kind is FrameKind.PUBLISH:
                    topic, payload, qos, retain, props, expiry_at, publisher, serial, _ = body
                    message = Message(topic, payload, qos, retain,
                                      decode_properties(props) if props else None, publisher,
                                      expiry_at)
                    if serial:
                        message.mid = (origin, serial)
                    if place:
                        message.rescued = (failed, incarnation, at)
                    self.broker.publish_among(message, adopted, among=True)
                elif kind is FrameKind.SHARED_PUBLISH:
                    self.broker.deliver_shared(body[0], body[1], message_from(body[2]))
        self.broker.flush()

    # ------------------------------------------------------------------ views

    def stats(self) -> ClusterStats:
        links = [m.link for m in self.members.values()]
        return ClusterStats(
            members=1 + len(self.members), connections=len(links),
            publishes_forwarded=self.metrics.publishes_forwarded,
            publishes_received=self.metrics.publishes_received,
            frames_in=dict(sorted(self.metrics.frames_in.items())),
            frames_out=sum(link.frames_out for link in links),
            remote_filters={peer: sorted(self.table.filters_of(peer))
                            for peer in sorted(self.members)},
            absent=sorted(self._absent),
            forwards_unacknowledged=sum(len(out.frames)
                                        for out in self.forwarding.outgoing.values()),
            forwards_replayed=self.forwarding.replayed,
            forwards_duplicates=self.forwarding.duplicates,
            forwards_dropped=self.forwarding.dropped,
            authentication_failures=self.authentication.failures,
            replica_count=self.settings.replica_count,
            backups=sorted(self.replicator.backups) if self.replicator is not None else [],
            replicas_held=sorted(self.replicas.held) if self.replicas is not None else [],
            replication_lag=self.replicator.lag() if self.replicator is not None else {},
            takeovers=self.takeovers, sessions_taken_over=self.sessions_taken_over,
            messages_rescued=self.messages_rescued, merges=self.merges,
            peer_traffic={peer: (m.link.bytes_out, m.link.bytes_in)
                          for peer, m in sorted(self.members.items())},
            delivery_latency=self.delivery_times.snapshot(),
            forward_ack_latency=self.forwarding.ack_times.snapshot(),
            replication_ack_latency=(self.replicator.ack_times.snapshot()
                                     if self.replicator is not None else {}))

    def view(self) -> list[ClusterMember]:
        own = ClusterMember(self.node_id, self.address, "RUNNING", __version__)
        return [own, *(ClusterMember(m.node_id, m.address, "RUNNING", m.version)
                       for m in self.members.values())]
