"""Many nodes, one logical broker: membership, node transport, routing between nodes."""

from hive_core.cluster._client_services import ClusterClients
from hive_core.cluster._cluster import Cluster, ClusterMetrics, ClusterSettings, ClusterStats
from hive_core.cluster._health import HealthCheck, HealthCheckSettings
from hive_core.cluster._latency import LatencySnapshot
from hive_core.cluster._parts import Member
from hive_core.cluster._progress import progress_interval
from hive_core.cluster._replication import ReplicaFolder, ReplicaShelf, ReplicatingStore
from hive_core.cluster._routing import RoutingTable
from hive_core.cluster._transport import NodeTransport, NodeUnreachable, TcpTransport
from hive_core.cluster._udp import UdpTiming, UdpTransport
from hive_core.cluster._wire import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameKind,
    encode_frame,
)

__all__ = [
    "MIN_PROTOCOL_VERSION", "PROTOCOL_VERSION", "Cluster", "ClusterClients", "ClusterMetrics",
    "ClusterSettings", "ClusterStats", "FrameDecoder", "FrameKind", "HealthCheck",
    "HealthCheckSettings", "LatencySnapshot", "Member", "NodeTransport", "NodeUnreachable",
    "ReplicaFolder", "ReplicaShelf", "ReplicatingStore", "RoutingTable", "TcpTransport",
    "UdpTiming", "UdpTransport", "encode_frame", "progress_interval",
]
