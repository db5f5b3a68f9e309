"""One node's MQTT logic, independent of sockets and of the cluster.

The public names: the :class:`Broker` (sessions and routing), a client's :class:`Channel`
(its MQTT protocol, socket-free) and :class:`ClientConnection` (the asyncio shell around one),
the :class:`Session` state and its :class:`SessionRecords`, and the two ports of the seam with
the cluster (:class:`ClusterPort`, :class:`BrokerPort`), and overload protection
(:class:`OverloadMonitor`).
"""

from hive_core.broker._broker import Broker
from hive_core.broker._channel import Channel, ChannelIo
from hive_core.broker._connection import ClientConnection, Transport
from hive_core.broker._message import Message
from hive_core.broker._metrics import DROP_REASONS, BrokerMetrics, BrokerStats
from hive_core.broker._overload import OverloadStats
from hive_core.broker._overload_monitor import (
    ClusterPressure,
    OverloadedConnection,
    OverloadMonitor,
)
from hive_core.broker._ports import (
    BrokerPort,
    ClusterPort,
    Handover,
    NodeView,
    PeerDelivery,
    RemoteGroups,
    ReplicaSource,
    RetainedSync,
    Route,
    SessionCustodyPort,
    SessionHolder,
    SessionUnavailable,
    SharedKey,
)
from hive_core.broker._records import (
    SessionRecords,
    properties_problem,
    snapshot_records,
    stored_retained,
)
from hive_core.broker._services import ExtensionMetrics, NodeServices
from hive_core.broker._session import Session
from hive_core.broker._settings import BrokerSettings

__all__ = [
    "DROP_REASONS",
    "Broker",
    "BrokerMetrics",
    "BrokerPort",
    "BrokerSettings",
    "BrokerStats",
    "Channel",
    "ChannelIo",
    "ClientConnection",
    "ClusterPort",
    "ClusterPressure",
    "ExtensionMetrics",
    "Handover",
    "Message",
    "NodeServices",
    "NodeView",
    "OverloadMonitor",
    "OverloadStats",
    "OverloadedConnection",
    "PeerDelivery",
    "RemoteGroups",
    "ReplicaSource",
    "RetainedSync",
    "Route",
    "Session",
    "SessionCustodyPort",
    "SessionHolder",
    "SessionRecords",
    "SessionUnavailable",
    "SharedKey",
    "Transport",
    "properties_problem",
    "snapshot_records",
    "stored_retained",
]
