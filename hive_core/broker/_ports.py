"""The seam between one node's broker and the cluster, as two typed ports.

The broker never imports the cluster, and the cluster uses only these names of the broker:
:class:`ClusterPort` is what the broker asks of the cluster (who else wants a topic, send a
message there, fetch a session from wherever it lives), :class:`BrokerPort` what the cluster asks
of the broker, as roles a part of the cluster takes one or two of: :class:`PeerDelivery` (publish
what a peer sent), :class:`RetainedSync`, :class:`NodeView` (load, filters, the input fence),
and the broker's custody of sessions, :class:`SessionHolder` (hand a session over, merge copies)
and :class:`ReplicaSource` (what backups copy, what a taker adopts).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from hive_core.broker._handover import MessageId
from hive_core.broker._message import Message
from hive_core.broker._records import SessionRecords
from hive_core.broker._topic_tree import Delivery, SharedGroup
from hive_core.persistence import StoredInflight, StoredMessage

SharedKey = tuple[str, str]  # (group name, topic filter without the $share prefix)
RemoteGroups = dict[SharedKey, frozenset[str]]  # shared groups with members on other nodes
NO_NODES: frozenset[str] = frozenset()
NO_GROUPS: RemoteGroups = {}
Queued = tuple[StoredMessage, MessageId | None]  # a queued message, and its cluster identity
# Position, record, identity, and (failed node, origin incarnation, place) if it was rescued.
QueuedRecord = tuple[int, StoredMessage, MessageId | None, tuple[str, int, int] | None]


class Route(NamedTuple):
    """Everyone who wants a topic, on this node and on the others: the answer of one lookup."""

    deliveries: list[Delivery]  # this node's sessions with a plain subscription
    groups: list[SharedGroup]  # this node's shared groups
    nodes: frozenset[str]  # other nodes with plain subscribers
    remote_groups: RemoteGroups  # shared groups with members on other nodes (by node id)


@dataclass(slots=True)
class InputFence:
    """Whether clients' input waits for the cluster (cluster/_fence.py): the node's last
    heartbeat tick, how long after it input counts as arriving after a pause, and whether a
    fence is up. Read by every client read: two attributes, no call."""

    ticked: float = 0.0
    after: float = math.inf
    up: bool = False


class ClusterPort(Protocol):
    """What the broker asks of the cluster it belongs to."""

    @property
    def has_peers(self) -> bool:
        """Other nodes are members now, or out of reach for a while (a session may live on
        one of them)."""
        ...

    def remote_routes(self, topic: str) -> tuple[frozenset[str], RemoteGroups]:
        """The other nodes with plain subscribers for ``topic``, and the shared groups there."""
        ...

    def input_waits(self, now: float) -> Awaitable[None] | None:
        """A client's input arrived after a pause of this node, or while it is fenced: what
        it waits for (the members' confirmation of what they did meanwhile), or None."""
        ...

    def identify(self, message: Message) -> tuple[str, int]:
        """Give a local publisher's message its identity across the cluster (origin node,
        serial), before it is delivered anywhere; forward() sends it with that identity."""
        ...

    def forward(self, message: Message, nodes: frozenset[str]) -> None:
        """Send a local publisher's message to ``nodes`` (once each)."""
        ...

    def forwards_held(self) -> AbstractContextManager[Callable[[], bool]]:
        """A block whose sends to other nodes (forward(), send_shared()) wait for the next
        commit: a QoS 2 message reaches no other node before its publisher's record of it is
        durable. What the block yields tells whether it held any."""
        ...

    def pick_shared(self, key: SharedKey, remote: frozenset[str], local: bool) -> str | None:
        """Which node serves shared group ``key`` for one message: None for this node."""
        ...

    def send_shared(self, node_id: str, key: SharedKey, message: Message) -> None:
        """Hand one message to the member of shared group ``key`` on ``node_id``."""
        ...

    def filter_added(self, topic_filter: str) -> None:
        """A local session subscribed to ``topic_filter`` (as sent, ``$share/...`` included)."""
        ...

    def filter_removed(self, topic_filter: str) -> None: ...

    def retained_changed(self, message: Message) -> None:
        """A local publisher set or cleared a retained message (empty payload clears)."""
        ...

    def client_connected(self, client_id: str) -> None:
        """A client connected here: another node holding a connection for it closes that."""
        ...

    def session_ended(self, client_id: str, deleted: bool = True) -> None:
        """This node no longer holds a session for ``client_id`` (``deleted``: it is over,
        rather than moved to another node)."""
        ...

    def refuses(self, nodes: frozenset[str]) -> bool:
        """Whether a local QoS 1/2 message for ``nodes`` is refused: one of them keeps too
        much of this node's unacknowledged already."""
        ...

    async def forwards_acknowledged(self) -> None:
        """Until every message forwarded so far is acknowledged by its node (or that left)."""
        ...

    async def fetch_session(self, client_id: str) -> Handover | None:
        """The session of ``client_id`` from the node that holds it; None when no node does.

        Raises :class:`SessionUnavailable` when that node does not answer in time.
        """
        ...


class Handover(Protocol):
    """A session on its way from another node: confirmed once stored here, or declined."""

    records: SessionRecords

    def confirm(self) -> None:
        """Stored here: the old node forgets it (and sends what it queued meanwhile)."""
        ...

    def decline(self) -> None:
        """Not taken: the old node keeps it."""
        ...


class SessionUnavailable(Exception):
    """The node holding a client's session did not hand it over: the CONNECT is refused."""


class PeerDelivery(Protocol):
    """The broker as other nodes' messages reach it: what they route to its subscribers."""

    def publish_from_peer(self, message: Message) -> None:
        """A message another node routed here: for this node's plain subscribers only."""
        ...

    def deliver_shared(self, group_name: str, topic_filter: str, message: Message) -> None:
        """Another node chose this one to serve shared group ``group_name`` for a message."""
        ...

    def publish_among(self, message: Message, client_ids: Collection[str],
                      among: bool) -> None:
        """A message from another node for the local sessions in (or not in) ``client_ids``."""
        ...

    def share_again(self, message: Message) -> None:
        """A client's message whose sends to shared groups may not have left (its node failed
        while they waited for its record): each group that wants it chooses a member again,
        here or on another node."""
        ...

    def deliver_again(self, message: Message) -> None:
        """A local publisher's QoS 1/2 message (with its identity), routed a while ago, for
        this node's plain subscribers: those that came here since take it, the others had
        it."""
        ...

    def flush(self) -> None:
        """Write what is pending for local clients now."""
        ...

    def record_received(self) -> None:
        """Hand the PUBLISHes accepted from clients so far to the recorders
        (``hive_publishes_received``): before a link writes frames that may carry them."""
        ...

    async def commit(self) -> None:
        """Until everything written to the store so far is durable."""
        ...


class RetainedSync(Protocol):
    """The broker's retained messages, as nodes keep them the same."""

    def apply_retained(self, message: Message, only_if_absent: bool = False) -> bool:
        """Set or clear a retained message that another node sent."""
        ...

    def retained_messages(self) -> list[Message]:
        """This node's live retained messages (a joining node gets them)."""
        ...


class NodeView(Protocol):
    """What the broker tells the cluster about this node, and hears about the others."""

    input_fence: InputFence

    def load(self) -> list[int]:
        """[connections, sessions, messages in, messages out], for the peers' heartbeats."""
        ...

    def local_filters(self) -> list[str]:
        """Every topic filter a local session holds, once per session."""
        ...

    def remote_routes_changed(self) -> None:
        """Other nodes' subscriptions changed: cached routes are stale."""
        ...


class SessionHolder(Protocol):
    """The sessions held here as they move between nodes: handovers and merges of copies."""

    def export_session(self, client_id: str) -> SessionRecords | None:
        """Hand a session to another node: close its connection here and give its state; it
        is held here until :meth:`release_session`."""
        ...

    def release_session(self, client_id: str, taken: bool) -> list[Queued]:
        """The other node took the exported session (forget it; what was queued for it since
        the export is returned, with each message's identity) or did not (keep it)."""
        ...

    def append_handed_over(self, client_id: str, messages: list[Queued]) -> None:
        """What the old node queued for a session while it moved here (what reached this
        node directly as well is skipped)."""
        ...

    def owned_sessions(self) -> list[str]:
        """The client ids this node holds a session for."""
        ...

    def has_session(self, client_id: str) -> bool:
        """Whether this node holds a session of ``client_id`` (connected or not)."""
        ...

    def filters_of(self, client_id: str) -> list[str]:
        """The topic filters of a session held here (none when it is not)."""
        ...

    def is_connected(self, client_id: str) -> bool:
        """A client with this id is connected here."""
        ...

    def taken_over_elsewhere(self, client_id: str) -> None:
        """The client connected on another node, which owns its session now: end it here."""
        ...

    def queued_records(self, client_id: str, with_window: bool = True) -> list[QueuedRecord]:
        """A session's queue, by position: what a dropped copy hands on."""
        ...

    def taken_identities(self, client_id: str) -> list[MessageId]:
        """The identities of the messages a session took (oldest first): what a dropped copy
        hands on with its queue, so that the kept copy sends none of them again."""
        ...

    def window_records(self, client_id: str) -> list[StoredInflight]:
        """A session's window: what its client was sent and has not finished, by packet id."""
        ...

    def inbound_qos2(self, client_id: str) -> list[int]:
        """The packet ids of the QoS 2 PUBLISHes the session's client sent and not yet
        released (PUBREL): routed already, so a copy of them sent again is not."""
        ...

    def merge_window(self, client_id: str, window: list[StoredInflight]) -> None:
        """The window of a dropped copy of this session: finished from here, under the same
        packet ids (the client may hold them)."""
        ...

    def merge_queue(self, client_id: str, messages: list[Queued],
                    taken: list[MessageId] | None = None,
                    inbound: list[int] | None = None) -> None:
        """What a dropped copy of this session had queued: queue it here. ``taken``: what
        that copy's client surely had: not delivered again from here. ``inbound``: that
        copy's QoS 2 PUBLISHes routed and not released (see :meth:`inbound_qos2`)."""
        ...


class ReplicaSource(Protocol):
    """The sessions and wills as backups copy them, and as a failed node's are taken."""

    def replica_records(self) -> list[SessionRecords]:
        """Every stored session with its queue and window: a new backup's starting point."""
        ...

    def replica_wills(self) -> list[list[Any]]:
        """[client id, will fields] of every will not yet published (a new backup's start)."""
        ...

    def adopt_sessions(self, records: list[SessionRecords]) -> list[str]:
        """A failed node's sessions, from the replica here: take them (the client ids taken)."""
        ...

    def adopt_wills(self, wills: list[list[Any]]) -> int:
        """A failed node's pending wills: each published at its time (how many at once)."""
        ...

    def forget_sessions(self) -> None:
        """This node leaves; its backups have its sessions: drop them here, silently."""
        ...


class SessionCustodyPort(SessionHolder, ReplicaSource, Protocol):
    """Both roles of the broker's custody of sessions (``broker/_custody.py``)."""


class BrokerPort(PeerDelivery, RetainedSync, NodeView, Protocol):
    """What the cluster asks of the node's broker: its roles, each part of the cluster taking
    only its own (delivery, retained messages, the node's view; the custody of sessions)."""

    def attach_cluster(self, cluster: ClusterPort | None) -> None:
        """The node joined a cluster (or left it, with None)."""
        ...

    @property
    def custody(self) -> SessionCustodyPort:
        """The sessions as the cluster moves them: :class:`SessionHolder` and
        :class:`ReplicaSource`."""
        ...
