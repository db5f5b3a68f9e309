"""What the parts of the cluster ask of each other: the settings, a member, and one port each.

``Membership``, ``Custody`` and ``Takeover`` each own their state and handle the frames about
it; they reach each other only through the ports here (and the node's :class:`NodeContext`),
never by importing one another, so each can be read, and replaced in a test, on its own.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup

from hive_core.cluster._auth import PeerAuthentication
from hive_core.cluster._forwarding import Forwarding, HeldForwards
from hive_core.cluster._health import HealthCheck, HealthCheckSettings
from hive_core.cluster._kept import KeptOnDisk
from hive_core.cluster._link import PeerLink
from hive_core.cluster._merge_wait import MergeWait
from hive_core.cluster._replication import Replicator
from hive_core.cluster._routing import RoutingTable
from hive_core.cluster._transport import NodeTransport
from hive_core.cluster._wire import PROTOCOL_VERSION, FrameKind
from hive_ext_api import ClusterNodeAddress

if TYPE_CHECKING:
    from hive_core.broker import BrokerPort
    from hive_core.plugins import Extensions

log = logging.getLogger("hive.cluster")


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
    # time.monotonic looked up at each call: a simulation patches it
    joined_at: float = field(default_factory=lambda: time.monotonic())
    synced: bool = False  # its SYNCED arrived: this node knows what the peer holds
    merging: bool = False  # back after a split: merging until its SYNCED
    arrival_stamps: bool = False  # its HELLO said so: its PUBLISH frames may carry routed_at
    session_seen: bool = False  # its HELLO said so: a SESSION's first part may carry its seen ids
    identities: bool = False  # its HELLO said so: stored messages may carry their identity
    forwards_on: bool = False  # its HELLO said so: it takes SESSION_PUBLISH
    taken_ops: bool = False  # its HELLO said so: as a backup, it reads TAKEN replication ops
    sent_ops: bool = False  # its HELLO said so: as a backup, it reads SEND_QUEUED ops
    filters_known: bool = False  # its FILTERS arrived on this link
    beats_sent: int = 0  # HEARTBEATs sent it on this link
    beats_read: int = 0  # HEARTBEATs read from it on this link
    beats_echoed: int = 0  # how many of this node's it said it had read (its latest heartbeat)
    # Its load as its last HEARTBEAT said: [connections, sessions, messages in, messages out]
    load: list[int] | None = None
    load_at: float = 0.0  # Unix time it arrived
    previous: tuple[float, list[int]] | None = None  # the heartbeat's before: for rates


FrameHandler = Callable[[Member, Any], None]
"""What a part of the cluster does with a frame from a member: (member, body)."""


class MembershipPort(Protocol):
    """What the other parts ask of :class:`~hive_core.cluster._membership.Membership`."""

    absent: dict[str, float]
    absent_at: dict[str, tuple[ClusterNodeAddress, int]]
    spoke: dict[str, tuple[int, bool]]
    takes_kept: set[str]
    counts_tails: set[str]

    def expect(self, node_id: str, address: ClusterNodeAddress, incarnation: int) -> None: ...

    def remove(self, peer_id: str, why: str) -> None: ...

    def seen_of_known(self) -> tuple[int, int]: ...

    def on_smaller_side(self) -> bool: ...

    unheard: set[str]


class CustodyPort(Protocol):
    """What the other parts ask of :class:`~hive_core.cluster._custody.Custody`."""

    adopted_marks: dict[str, int]

    def hold(self, client_ids: list[str]) -> None: ...

    def owner_of(self, client_id: str) -> str | None: ...

    def send_owned(self, member: Member, client_ids: list[str]) -> None: ...

    def member_joined(self, node_id: str) -> None: ...

    def forget_node(self, node_id: str, for_good: bool = False) -> None: ...

    def link_lost(self, link: PeerLink) -> None: ...

    def member_left(self, peer_id: str) -> None: ...

    def merge_queue(self, body: list[Any]) -> None: ...

    def take_tail(self, body: list[Any]) -> None: ...


class TakeoverPort(Protocol):
    """What the other parts ask of :class:`~hive_core.cluster._takeover.Takeover`."""

    replicator: Replicator | None
    taking: dict[str, anyio.Event]

    def holds_replica(self, node_id: str) -> bool: ...

    def rescuing(self, client_id: str) -> bool: ...

    async def taken(self, *failed: str) -> None: ...

    def taker_of(self, failed: str) -> str | None: ...

    def check_resume(self, client_id: str, held_here: bool,
                     owners: Mapping[str, Any]) -> None: ...

    def ring_changed(self, renewed: str | None = None) -> None: ...

    def link_swapped(self, peer_id: str) -> None: ...

    def member_left(self, member: Member, why: str) -> None: ...


class MovedPort(Protocol):
    """What the other parts ask of :class:`~hive_core.cluster._moved.Moved`."""

    def exported(self, client_id: str, filters: Collection[str]) -> None: ...

    def moved_away(self, client_id: str, node_id: str) -> None: ...

    def drop_copy(self, client_id: str, node_id: str) -> None: ...

    def came_back(self, client_id: str) -> None: ...

    def went_to(self, client_id: str) -> str | None: ...

    def member_joined(self, member: Member) -> None: ...

    def taken_over(self, failed: str, client_ids: Collection[str]) -> None: ...

    def routed(self, peer_id: str, token: int) -> bool: ...

    def forgotten(self, peer_id: str) -> None: ...

    def deliver(self, body: list[Any], peer_id: str,
                among: Collection[str] | None = None) -> None: ...


class Beside:
    """Work a part of the cluster starts from a frame or a callback (a takeover, a session
    handed over once it is whole here), run in the cluster's task group: it ends when the
    cluster stops, nothing holds a bare task, and a failure is logged and ends only itself.
    Started from plain callbacks, so it goes through a queue to a task of that group."""

    def __init__(self) -> None:
        self._waiting: asyncio.Queue[tuple[Callable[[], Awaitable[None]], str]] = asyncio.Queue()

    def start(self, work: Callable[[], Awaitable[None]], what: str) -> None:
        self._waiting.put_nowait((work, what))

    async def run(self, tasks: TaskGroup) -> None:
        """In the cluster's task group, while it runs: start what waits, as it comes."""
        while True:
            work, what = await self._waiting.get()
            tasks.start_soon(self._guarded, work, what, name=what)

    @staticmethod
    async def _guarded(work: Callable[[], Awaitable[None]], what: str) -> None:
        try:
            await work()
        except Exception:
            log.exception("cluster: %s failed", what)


class NodeContext(Protocol):
    """The node the parts belong to (:class:`~hive_core.cluster.Cluster`): what they share."""

    node_id: str
    settings: ClusterSettings
    broker: BrokerPort
    extensions: Extensions
    address: ClusterNodeAddress
    incarnation: int
    transport: NodeTransport
    authentication: PeerAuthentication
    health: HealthCheck | None
    table: RoutingTable
    forwarding: Forwarding
    held: HeldForwards
    kept: KeptOnDisk | None
    merge_wait: MergeWait
    members: dict[str, Member]
    stopping: bool
    tasks: TaskGroup | None
    beside: Beside
    leaving_since: float | None

    @property
    def membership(self) -> MembershipPort: ...

    @property
    def custody(self) -> CustodyPort: ...

    @property
    def takeover(self) -> TakeoverPort: ...

    @property
    def moved(self) -> MovedPort: ...

    def on_frame(self, link: PeerLink, kind: FrameKind, body: Any) -> None: ...

    def synchronise(self, member: Member) -> None: ...

    def local_filters(self) -> list[str]: ...

    def acknowledge_soon(self, peer_id: str) -> None: ...
