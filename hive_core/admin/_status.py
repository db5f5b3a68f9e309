"""What the REST API shows of a node: the node implements it, the API only formats."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hive_core.broker import BrokerStats
    from hive_core.cluster import ClusterStats
    from hive_core.plugins import HookTime
    from hive_ext_api import ClusterMember


class NodeStatus(Protocol):
    """What the REST API shows of a node (the node answers; the API only formats)."""

    @property
    def node_id(self) -> str: ...

    def cluster_members(self) -> list[ClusterMember] | None:
        """Every member this node sees, itself first; None when it is not clustered."""
        ...

    def broker_stats(self) -> BrokerStats | None:
        """None before the broker runs."""
        ...

    def cluster_stats(self) -> ClusterStats | None:
        """None when the node is not clustered."""
        ...

    def extension_metrics(self) -> dict[str, float]:
        """The counters and gauges extensions registered, by name."""
        ...

    def extension_counter_names(self) -> set[str]:
        """Which of ``extension_metrics`` are counters (the rest are gauges)."""
        ...

    def extension_metric_descriptions(self) -> dict[str, str]:
        """What each of ``extension_metrics`` is, as its extension described it."""
        ...

    def extension_failures(self) -> dict[str, int]:
        """Failed hook calls (raised, or past the deadline), by extension."""
        ...

    def member_loads(self) -> dict[str, dict[str, Any]]:
        """Each member's connections, sessions and message rates as the cluster's heartbeats
        carry them, by node id (empty when not clustered)."""
        ...

    def extension_hook_times(self) -> list[HookTime]:
        """Calls of each extension's hooks and the time they took, by hook and extension."""
        ...

    def readiness(self) -> str | None:
        """None when the node serves clients (listeners open, cluster joined and synced);
        else what it is doing instead ("starting", "joining the cluster", "stopping")."""
        ...
