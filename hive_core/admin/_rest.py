"""The REST API's resources: health, cluster members, metrics and backups of the node, as JSON.

Paths follow HiveMQ's REST API (``/api/v1/...``); each document is built when asked for,
from the live broker and cluster, so it is never stale. With ``<auth>`` enabled every path
needs credentials, except that a request without any still gets ``{"status": "UP"}`` from
the health path: load balancers and orchestrators probe it without credentials, and it
tells them nothing else (no node id, version or cluster size).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from hive_core import __version__
from hive_core.admin._auth import AuthStats, Gatekeeper
from hive_core.admin._backups import Backups
from hive_core.admin._http import Document, Raw, Reply, Routes, serve_http
from hive_core.admin._prometheus import CONTENT_TYPE, exposition
from hive_core.admin._status import NodeStatus
from hive_core.config import HttpsListener, is_loopback
from hive_core.net import bound_address, listen_error, server_context

if TYPE_CHECKING:
    from hive_core.config import HttpListener, RestApiAuth

log = logging.getLogger("hive.admin")

API_PREFIX = "/api/v1"


def health(node: NodeStatus) -> dict[str, Any]:
    members = node.cluster_members()
    return {"status": "UP", "node_id": node.node_id, "version": __version__,
            "cluster": {"enabled": members is not None,
                        "size": len(members) if members is not None else 1}}


def cluster_nodes(node: NodeStatus) -> dict[str, Any]:
    """Every member this node sees, itself first (``this_node`` marks it), each with its load
    as the cluster's heartbeats carry it (connections, sessions, message rates)."""
    own_id = node.node_id
    members = node.cluster_members()
    if members is None:
        return {"items": [{"id": own_id, "state": "RUNNING", "address": None, "port": None,
                           "version": __version__, "this_node": True}]}
    loads = node.member_loads()
    return {"items": [{"id": member.node_id, "state": member.state,
                       "address": member.address.host, "port": member.address.port,
                       "version": member.version, "this_node": member.node_id == own_id,
                       **({"load": loads[member.node_id]} if member.node_id in loads else {})}
                      for member in members]}


def liveness() -> dict[str, Any]:
    """Answered by the node's event loop: if it answers, the node is alive."""
    return {"status": "UP"}


def readiness(node: NodeStatus) -> Reply:
    """200 once the node serves clients (listeners open, cluster joined and synced); 503
    before that and while it stops, so that a load balancer sends clients elsewhere."""
    state = node.readiness()
    if state is None:
        return Reply(200, {"status": "UP"})
    return Reply(503, {"status": "DOWN", "detail": state})


def prometheus(node: NodeStatus) -> Raw:
    return Raw(CONTENT_TYPE.encode(), exposition(node))


def public_health() -> dict[str, Any]:
    """The health document for a request without credentials: the status only."""
    return {"status": "UP"}


def metrics(node: NodeStatus, rest_api: AuthStats | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {"node_id": node.node_id}
    broker = node.broker_stats()
    if broker is not None:
        document["broker"] = {**asdict(broker.metrics),
                              "connections_current": broker.connections_current,
                              "sessions": broker.sessions,
                              "retained_messages": broker.retained_messages}
        if broker.overload is not None:
            document["overload_protection"] = asdict(broker.overload)
    cluster = node.cluster_stats()
    if cluster is not None:
        document["cluster"] = asdict(cluster)
    if rest_api is not None:
        document["rest_api"] = asdict(rest_api)
    document["extensions"] = node.extension_metrics()
    return document


def https_context(listener: HttpsListener) -> ssl.SSLContext:
    """The TLS context of an <https> listener (the REST API's or the control center's)."""
    tls = listener.tls
    return server_context(
        tls.keystore.path, tls.keystore.password, tls.keystore.private_key_password,
        tls.truststore.path if tls.truststore else None,
        tls.truststore.password if tls.truststore else None,
        tls.client_authentication_mode, tls.protocols, tls.cipher_suites)


@dataclass
class RestApi:
    """The node's REST API listeners; ``bound`` holds (host, port) of each once started.

    ``auth`` (``<rest-api><auth>``) when enabled puts a :class:`Gatekeeper` before every path.
    ``backups``, when given, answers ``/api/v1/management/backups`` (admin/_backups.py).
    """

    node: NodeStatus
    auth: RestApiAuth | None = None
    backups: Backups | None = None
    bound: list[tuple[str, int]] = field(default_factory=list)
    _servers: list[asyncio.Server] = field(default_factory=list)
    _gatekeeper: Gatekeeper | None = None

    def __post_init__(self) -> None:
        if self.auth is not None and self.auth.enabled:
            self._gatekeeper = Gatekeeper(self.auth)

    def auth_stats(self) -> AuthStats:
        if self._gatekeeper is None:
            return AuthStats(authentication_enabled=False)
        return self._gatekeeper.stats

    def routes(self) -> Routes:
        node = self.node
        documents: dict[str, Document] = {
            f"{API_PREFIX}/health": lambda: health(node),
            f"{API_PREFIX}/cluster/nodes": lambda: cluster_nodes(node),
            f"{API_PREFIX}/health/liveness": liveness,
            f"{API_PREFIX}/health/readiness": lambda: readiness(node),
            f"{API_PREFIX}/metrics": lambda: metrics(node, self.auth_stats()),
            f"{API_PREFIX}/metrics/prometheus": lambda: prometheus(node),
            "/metrics": lambda: prometheus(node)}
        # Probes (load balancers, Kubernetes) carry no credentials: with <auth> on, they get
        # these without; liveness and readiness tell nothing but the state.
        public: dict[str, Document] = {f"{API_PREFIX}/health": public_health,
                                       f"{API_PREFIX}/health/liveness": liveness,
                                       f"{API_PREFIX}/health/readiness": lambda: readiness(node)}
        actions = self.backups.actions(API_PREFIX) if self.backups is not None else {}
        return Routes(documents, self._gatekeeper, public, actions, json_posts=True)

    async def start(self, listeners: tuple[HttpListener, ...]) -> None:
        routes = self.routes()
        for listener in listeners:
            context, handshake, kind = None, None, "http"
            if isinstance(listener, HttpsListener):
                # a key store that cannot be read raises TLSConfigError before anything binds
                context, kind = https_context(listener), "https"
                handshake = listener.tls.handshake_timeout / 1000
            try:
                server = await serve_http(routes, listener.bind_address, listener.port,
                                          context, handshake)
            except OSError as exc:
                raise listen_error(f"<rest-api><listeners><{kind}>", listener.bind_address,
                                   listener.port, exc) from exc
            self._servers.append(server)
            host, port = bound_address(server)
            self.bound.append((host, port))
            log.info("Started REST API%s%s on address %s and on port %d",
                     f" {listener.name}" if listener.name else "",
                     " over HTTPS" if context else "", host, port)
            if (context is None and self.auth is not None and self.auth.users
                    and not is_loopback(listener.bind_address)):
                log.warning("REST API on %s:%d takes passwords over plain HTTP: anyone on the "
                            "way can read them; prefer an <https> listener", host, port)
        if self._gatekeeper is not None:
            log.info("REST API authentication: %s", self._gatekeeper.summary)
        else:
            log.info("REST API authentication: off (the config allows that only on loopback "
                     "addresses and on HTTPS with client certificates required)")

    def close(self) -> None:
        for server in self._servers:
            server.close()
        if self._gatekeeper is not None:
            self._gatekeeper.close()
