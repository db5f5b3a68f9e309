"""Built-in plugin: static cluster discovery, the node list from config.xml.

Re-read every few seconds, so nodes may start in any order and a node that comes back is found
again without anyone being reconfigured.
"""

from __future__ import annotations

from hive_ext_api import ClusterNodeAddress, ExtensionContext, hookimpl

RELOAD_INTERVAL = 5.0


class StaticDiscovery:
    def __init__(self) -> None:
        self.nodes: list[ClusterNodeAddress] | None = None

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        cluster = getattr(context.node_config, "cluster", None)
        if cluster is None or not cluster.enabled or cluster.discovery_kind != "static":
            return
        transport = cluster.effective_transport()
        discovery = cluster.effective_discovery()
        self.nodes = [ClusterNodeAddress(*node.address(transport.bind_port))
                      for node in discovery.nodes]

    @hookimpl
    def hive_discovery_reload(self) -> list[ClusterNodeAddress] | None:
        return list(self.nodes) if self.nodes is not None else None

    @hookimpl
    def hive_discovery_reload_interval(self) -> float | None:
        return RELOAD_INTERVAL if self.nodes is not None else None


def create_plugin() -> StaticDiscovery:
    """One instance per node: nodes in one process (tests) must not share the list."""
    return StaticDiscovery()
