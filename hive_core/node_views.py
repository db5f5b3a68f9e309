"""What the control center shows of a running node, read from its broker and cluster.

The node composes the layers; this module answers the control center's questions
(:class:`hive_core.admin.ControlCenterNode`) from them, so that the admin layer never reaches
into the broker's sessions itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hive_core.mqtt import ReasonCode

if TYPE_CHECKING:
    from hive_core.broker import Broker, Session
    from hive_core.cluster import Cluster
    from hive_core.plugins import Extensions


class NodeViews:
    """The control center's view of one node (see :class:`ControlCenterNode`)."""

    def __init__(self, node_id: str, broker: Broker, cluster: Callable[[], Cluster | None],
                 extensions: Extensions) -> None:
        self.node_id = node_id
        self.broker = broker
        self._cluster = cluster  # the node's, once it has joined one
        self.extensions = extensions

    @property
    def cluster(self) -> Cluster | None:
        return self._cluster()

    def node_loads(self) -> dict[str, tuple[float, list[int]]]:
        loads = {self.node_id: (time.time(), self.broker.load())}
        cluster = self.cluster
        if cluster is not None:
            loads.update(cluster.loads())
        return loads

    def _summary(self, session: Session) -> dict[str, Any]:
        link = session.connection
        return {"client_id": session.client_id, "node": self.node_id,
                "connected": link is not None, "persistent": session.persistent,
                "subscriptions": len(session.subscriptions), "queued": len(session.queue),
                "inflight": len(session.inflight)}

    async def find_clients(self, text: str, limit: int) -> list[dict[str, Any]]:
        found = [self._summary(session) for client_id, session in self.broker.sessions.items()
                 if text in client_id]
        found.sort(key=lambda item: item["client_id"])
        found = found[:limit]
        cluster = self.cluster
        if cluster is not None and len(found) < limit:
            here = {item["client_id"] for item in found}
            elsewhere = sorted((client_id, owner) for client_id, owner
                               in cluster.owner_directory().items()
                               if text in client_id and client_id not in here)
            elsewhere = elsewhere[:limit - len(found)]
            answers = await self._ask_owners(cluster, elsewhere)
            found += [_summary_of(answers.get(client_id)) or
                      {"client_id": client_id, "node": owner, "connected": None,
                       "persistent": None, "subscriptions": None, "queued": None,
                       "inflight": None} for client_id, owner in elsewhere]
        return found

    @staticmethod
    async def _ask_owners(cluster: Cluster, owned: list[tuple[str, str]]
                          ) -> dict[str, dict[str, Any] | None]:
        """The owners' answers about their clients, asked at once (one question per node)."""
        by_owner: dict[str, list[str]] = {}
        for client_id, owner in owned:
            by_owner.setdefault(owner, []).append(client_id)
        answers: dict[str, dict[str, Any] | None] = {}
        for answer in await asyncio.gather(*(cluster.client_details_from(owner, ids)
                                             for owner, ids in by_owner.items())):
            answers.update(answer)
        return answers

    async def client_details(self, client_id: str) -> dict[str, Any] | None:
        """One session's details, from this node or from the member that holds it."""
        details = self.local_client_details(client_id)
        cluster = self.cluster
        if details is not None or cluster is None:
            return None if details is None else {**details, "here": True}
        owner = cluster.owner_directory().get(client_id)
        if owner is None:
            return None
        answer = (await cluster.client_details_from(owner, [client_id])).get(client_id)
        return {**answer, "here": False} if isinstance(answer, dict) else None

    def local_client_details(self, client_id: str) -> dict[str, Any] | None:
        """One session of this node (what this node answers a peer's question with)."""
        session = self.broker.sessions.get(client_id)
        if session is None:
            return None
        details = self._summary(session)
        link = session.connection
        info = link.client_info() if link is not None else None
        details.update({
            "protocol_version": {3: "3.1", 4: "3.1.1", 5: "5.0"}.get(session.protocol_version,
                                                                  str(session.protocol_version)),
            "session_expiry_interval": session.expiry_interval,
            "remote_address": (f"{info.remote_address[0]}:{info.remote_address[1]}"
                               if info is not None and info.remote_address else None),
            "username": info.username if info is not None else None,
            "listener": info.listener if info is not None else None,
            "disconnected_at": (time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                              time.gmtime(session.disconnected_at))
                                if session.disconnected_at else None),
            "will": session.will is not None,
            "subscription_list": [{"topic_filter": s.topic_filter, "qos": s.qos,
                                   "no_local": s.no_local,
                                   "retain_as_published": s.retain_as_published,
                                   "subscription_id": s.subscription_id}
                                  for s in session.subscriptions.values()]})
        return details

    def disconnect_client(self, client_id: str) -> str | None:
        session = self.broker.sessions.get(client_id)
        if session is None:
            cluster = self.cluster
            owner = cluster.owner_directory().get(client_id) if cluster is not None else None
            if owner is not None:
                return f"{client_id!r} is on node {owner}: disconnect it there"
            return f"no client {client_id!r} on this node"
        if session.connection is None:
            return f"{client_id!r} is not connected (its session waits for it)"
        session.connection.close(ReasonCode.ADMINISTRATIVE_ACTION,
                                 "disconnected by an administrator")
        return None

    def retained_view(self, text: str, limit: int) -> dict[str, Any]:
        messages = sorted((m for m in self.broker.retained.live() if text in m.topic),
                          key=lambda m: m.topic)
        return {"total": len(self.broker.retained), "matching": len(messages),
                "items": [{"topic": m.topic, "qos": m.qos, "bytes": len(m.payload),
                           "payload": _preview(m.payload), "publisher": m.publisher_id}
                          for m in messages[:limit]]}

    def subscriptions_view(self, text: str, limit: int) -> dict[str, Any]:
        local: dict[str, int] = {}
        for session in self.broker.sessions.values():
            for topic_filter in session.subscriptions:
                if text in topic_filter:
                    local[topic_filter] = local.get(topic_filter, 0) + 1
        remote: dict[str, list[str]] = {}
        cluster = self.cluster
        if cluster is not None:
            for node_id, filters in cluster.stats().remote_filters.items():
                remote[node_id] = [f for f in filters if text in f][:limit]
        return {"node": self.node_id,
                "local": [{"topic_filter": f, "sessions": n}
                          for f, n in sorted(local.items())[:limit]],
                "remote": remote}

    def extensions_view(self) -> list[dict[str, Any]]:
        failures = self.extensions.failures
        return [{"name": r.name, "version": r.version, "source": r.source, "active": r.active,
                 "reason": r.reason or None, "failures": failures.get(r.name, 0)}
                for r in self.extensions.manager.records]


_SUMMARY = ("client_id", "node", "connected", "persistent", "subscriptions", "queued",
            "inflight")


def _summary_of(details: Any) -> dict[str, Any] | None:
    """A search row from a peer's answer (None when it had no such session)."""
    if not isinstance(details, dict):
        return None
    return {key: details.get(key) for key in _SUMMARY}


def _preview(payload: bytes, size: int = 200) -> str:
    """The start of a payload as text when it is UTF-8, else as hex."""
    head = payload[:size]
    try:
        text = head.decode()
    except UnicodeDecodeError:
        return head.hex(" ") + (" ..." if len(payload) > size else "")
    return text + ("..." if len(payload) > size else "")

