"""The REST API's resources: health, cluster members and metrics of the node, as JSON.

Paths follow HiveMQ's REST API (``/api/v1/...``); each document is built when asked for,
from the live broker and cluster, so it is never stale.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from hive_core import __version__
from hive_core.admin._http import Document, serve_http

if TYPE_CHECKING:
    from hive_core.config import HttpListener
    from hive_core.node import HiveNode

log = logging.getLogger("hive.admin")

API_PREFIX = "/api/v1"


def health(node: HiveNode) -> dict[str, Any]:
    cluster = node.cluster
    return {"status": "UP", "node_id": node.services.node_id, "version": __version__,
            "cluster": {"enabled": cluster is not None,
                        "size": 1 + len(cluster.members) if cluster is not None else 1}}


def cluster_nodes(node: HiveNode) -> dict[str, Any]:
    """Every member this node sees, itself first (``this_node`` marks it)."""
    own_id = node.services.node_id
    cluster = node.cluster
    if cluster is None:
        return {"items": [{"id": own_id, "state": "RUNNING", "address": None, "port": None,
                           "version": __version__, "this_node": True}]}
    return {"items": [{"id": member.node_id, "state": member.state,
                       "address": member.address.host, "port": member.address.port,
                       "version": member.version, "this_node": member.node_id == own_id}
                      for member in cluster.view()]}


def metrics(node: HiveNode) -> dict[str, Any]:
    broker = node.broker
    document: dict[str, Any] = {"node_id": node.services.node_id}
    if broker is not None:
        document["broker"] = {**asdict(broker.metrics),
                              "connections_current": broker.connected_count,
                              "sessions": len(broker.sessions),
                              "retained_messages": len(broker.retained)}
    cluster = node.cluster
    if cluster is not None:
        links = [m.link for m in cluster.members.values()]
        document["cluster"] = {
            "members": 1 + len(cluster.members),
            "connections": len(links),
            "publishes_forwarded": cluster.metrics.publishes_forwarded,
            "publishes_received": cluster.metrics.publishes_received,
            "frames_in": dict(sorted(cluster.metrics.frames_in.items())),
            "frames_out": sum(link.frames_out for link in links),
            # which topic filters each member told this node it has subscribers for
            "remote_filters": {peer: sorted(cluster.table.filters_of(peer))
                               for peer in sorted(cluster.members)},
        }
    return document


@dataclass
class RestApi:
    """The node's REST API listeners; ``bound`` holds (host, port) of each once started."""

    node: HiveNode
    bound: list[tuple[str, int]] = field(default_factory=list)
    _servers: list[asyncio.Server] = field(default_factory=list)

    def routes(self) -> dict[str, Document]:
        node = self.node
        return {f"{API_PREFIX}/health": lambda: health(node),
                f"{API_PREFIX}/cluster/nodes": lambda: cluster_nodes(node),
                f"{API_PREFIX}/metrics": lambda: metrics(node)}

    async def start(self, listeners: tuple[HttpListener, ...]) -> None:
        routes = self.routes()
        for listener in listeners:
            server = await serve_http(routes, listener.bind_address, listener.port)
            self._servers.append(server)
            sock = server.sockets[0]
            host, port = sock.getsockname()[:2]
            if sock.family == socket.AF_INET6:
                host = f"[{host}]"
            self.bound.append((host, port))
            log.info("Started REST API on address %s and on port %d", host, port)

    def close(self) -> None:
        for server in self._servers:
            server.close()
