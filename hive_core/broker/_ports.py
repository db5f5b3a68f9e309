"""The seam between one node's broker and the cluster, as two typed ports.

The broker never imports the cluster, and the cluster uses only these names of the broker:
:class:`ClusterPort` is what the broker asks of the cluster (who else wants a topic, send a
message there, fetch a session from wherever it lives), :class:`BrokerPort` what the cluster asks
of the broker (publish what a peer sent, hand a session over, the retained messages).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from hive_core.broker._message import Message
from hive_core.broker._records import SessionRecords
from hive_core.broker._topic_tree import Delivery, SharedGroup

SharedKey = tuple[str, str]  # (group name, topic filter without the $share prefix)
RemoteGroups = dict[SharedKey, frozenset[str]]  # shared groups with members on other nodes
NO_NODES: frozenset[str] = frozenset()
NO_GROUPS: RemoteGroups = {}


class Route(NamedTuple):
    """Everyone who wants a topic, on this node and on the others: the answer of one lookup."""

    deliveries: list[Delivery]  # this node's sessions with a plain subscription
    groups: list[SharedGroup]  # this node's shared groups
    nodes: frozenset[str]  # other nodes with plain subscribers
    remote_groups: RemoteGroups  # shared groups with members on other nodes (by node id)


class ClusterPort(Protocol):
    """What the broker asks of the cluster it belongs to."""

    @property
    def has_peers(self) -> bool:
        """Other nodes are members now (a session may live on one of them)."""
        ...

    def remote_routes(self, topic: str) -> tuple[frozenset[str], RemoteGroups]:
        """The other nodes with plain subscribers for ``topic``, and the shared groups there."""
        ...

    def forward(self, message: Message, nodes: frozenset[str]) -> None:
        """Send a local publisher's message to ``nodes`` (once each)."""
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

    async def fetch_session(self, client_id: str) -> Sequence[SessionRecords]:
        """The state of ``client_id``'s session from whichever node holds it (it forgets it)."""
        ...


class BrokerPort(Protocol):
    """What the cluster asks of the node's broker."""

    def attach_cluster(self, cluster: ClusterPort | None) -> None:
        """The node joined a cluster (or left it, with None)."""
        ...

    def publish_from_peer(self, message: Message) -> None:
        """A message another node routed here: for this node's plain subscribers only."""
        ...

    def deliver_shared(self, group_name: str, topic_filter: str, message: Message) -> None:
        """Another node chose this one to serve shared group ``group_name`` for a message."""
        ...

    def apply_retained(self, message: Message, only_if_absent: bool = False) -> bool:
        """Set or clear a retained message that another node sent."""
        ...

    def retained_messages(self) -> list[Message]:
        """This node's live retained messages (a joining node gets them)."""
        ...

    def export_session(self, client_id: str) -> SessionRecords | None:
        """Hand a session to another node: close its connection here, give it, forget it."""
        ...

    def taken_over_elsewhere(self, client_id: str) -> None:
        """The client connected on another node: close its connection here."""
        ...

    def local_filters(self) -> list[str]:
        """Every topic filter a local session holds, once per session."""
        ...

    def remote_routes_changed(self) -> None:
        """Other nodes' subscriptions changed: cached routes are stale."""
        ...

    def flush(self) -> None:
        """Write what is pending for local clients now."""
        ...
