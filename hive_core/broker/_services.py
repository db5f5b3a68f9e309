"""The node's services as extensions see them (``hive_ext_api.HiveServices``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from hive_core.broker._message import Message
from hive_core.mqtt import MQTTError, PropertyId, topic_matches, validate_topic_name
from hive_ext_api import (
    ClientInfo,
    ClusterMember,
    ClusterNodeAddress,
    RetainedInfo,
    SubscriptionInfo,
)

if TYPE_CHECKING:
    from hive_core.broker._broker import Broker


@dataclass(slots=True)
class ExtensionCounter:
    name: str
    description: str = ""
    value: int = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


@dataclass(slots=True)
class ExtensionMetrics:
    """Counters and gauges registered by extensions, beside the broker's own metrics."""

    counters: dict[str, ExtensionCounter] = field(default_factory=dict)
    gauges: dict[str, tuple[Callable[[], float], str]] = field(default_factory=dict)

    def counter(self, name: str, description: str = "") -> ExtensionCounter:
        counter = self.counters.get(name)
        if counter is None:
            counter = self.counters[name] = ExtensionCounter(name, description)
        return counter

    def gauge(self, name: str, read: Callable[[], float], description: str = "") -> None:
        self.gauges[name] = (read, description)


class ClusterSide(Protocol):
    """The cluster's answers to the services that span it (hive_core.cluster.ClusterClients)."""

    async def clients(self) -> list[ClientInfo]: ...

    async def disconnect(self, client_id: str, reason_code: int) -> str | None: ...


class NodeServices:
    """What an extension may ask of the node; backed by the broker."""

    def __init__(self, node_id: str = "", version: str = "",
                 members: Callable[[], list[ClusterMember]] | None = None) -> None:
        self._broker_or_none: Broker | None = None
        self._members = members
        self._node_id = node_id
        self._version = version
        self._metrics = ExtensionMetrics()
        self._cluster: ClusterSide | None = None

    @property
    def node_id(self) -> str:
        return self._node_id

    def bind(self, broker: Broker) -> None:
        """The broker exists once the store is open; extensions use the services after that."""
        self._broker_or_none = broker

    def members_from(self, members: Callable[[], list[ClusterMember]] | None) -> None:
        """Where the cluster's member list comes from (None: this node is alone)."""
        self._members = members

    def cluster_from(self, cluster: ClusterSide | None) -> None:
        """Who answers the services across the cluster (None: this node is alone)."""
        self._cluster = cluster

    @property
    def _broker(self) -> Broker:
        if self._broker_or_none is None:
            raise RuntimeError("the node's services are available once the node has started")
        return self._broker_or_none

    @property
    def metrics(self) -> ExtensionMetrics:
        return self._metrics

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False,
                user_properties: list[tuple[str, str]] | None = None) -> None:
        try:
            validate_topic_name(topic)
        except MQTTError as exc:  # extensions see Python's errors, not the codec's
            raise ValueError(f"cannot publish to {topic!r}: {exc}") from None
        if qos not in (0, 1, 2):
            raise ValueError(f"QoS must be 0, 1 or 2, not {qos!r}")
        props = ({PropertyId.USER_PROPERTY: [(str(k), str(v)) for k, v in user_properties]}
                 if user_properties else None)
        self._broker.publish(Message(topic, bytes(payload), qos, retain, props, ""))
        self._broker.flush()

    def clients(self) -> list[ClientInfo]:
        return [dataclasses.replace(session.connection.client_info(), node=self._node_id)
                for session in self._broker.sessions.values()
                if session.connection is not None and not session.connection.closed]

    async def cluster_clients(self) -> list[ClientInfo]:
        if self._cluster is None:
            return sorted(self.clients(), key=lambda client: client.client_id)
        return await self._cluster.clients()

    async def cluster_disconnect(self, client_id: str, reason_code: int = 0x98) -> str | None:
        if self._cluster is None:
            return self._node_id if self.disconnect(client_id, reason_code) else None
        return await self._cluster.disconnect(client_id, reason_code)

    def disconnect(self, client_id: str, reason_code: int = 0x98) -> bool:
        session = self._broker.sessions.get(client_id)
        if session is None or session.connection is None:
            return False
        session.connection.close(reason_code, "disconnected by an extension")
        return True

    def subscriptions(self, client_id: str) -> list[SubscriptionInfo]:
        session = self._broker.sessions.get(client_id)
        if session is None:
            return []
        return [SubscriptionInfo(s.topic_filter, s.qos, s.no_local, s.retain_as_published,
                                 s.retain_handling, s.subscription_id)
                for s in session.subscriptions.values()]

    def retained(self, topic_filter: str = "#") -> list[RetainedInfo]:
        now = time.time()
        return [RetainedInfo(topic, message.payload, message.qos)
                for topic, message in self._broker.retained.items()
                if not message.expired(now) and topic_matches(topic_filter, topic)]

    def cluster_members(self) -> list[ClusterMember]:
        if self._members is not None:
            return self._members()
        return [ClusterMember(self._node_id, ClusterNodeAddress("127.0.0.1", 0), "RUNNING",
                              self._version)]
