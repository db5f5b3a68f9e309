"""What an extension may ask of the node it runs in."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hive_ext_api._types import ClientInfo, ClusterMember, RetainedInfo, SubscriptionInfo


class Counter(Protocol):
    """A count an extension keeps (``MetricsRegistry.counter``): it only grows."""

    def inc(self, amount: int = 1) -> None:
        """Add ``amount`` (1 unless told)."""
        ...

    @property
    def value(self) -> int:
        """The count so far."""
        ...


class MetricsRegistry(Protocol):
    """Register metrics that show up beside the node's own (names are prefixed by the node)."""

    def counter(self, name: str, description: str = "") -> Counter:
        """The counter called ``name`` (the same object for the same name), shown with
        ``description`` in ``/api/v1/metrics`` and Prometheus."""
        ...

    def gauge(self, name: str, read: Callable[[], float], description: str = "") -> None:
        """A value the node reads with ``read()`` whenever the metrics are asked for; keep
        ``read`` fast and non-blocking."""
        ...


class HiveServices(Protocol):
    """The node's services, available from :class:`ExtensionContext.services`."""

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False,
                user_properties: list[tuple[str, str]] | None = None) -> None:
        """Publish as the node itself (the publisher id is empty, so no-local never hides it)."""
        ...

    async def cluster_clients(self) -> list[ClientInfo]:
        """The clients connected anywhere in the cluster now, sorted by client id, each with
        ``node``: the id of the node it is connected to (API 1.4).

        Every member is asked and waited for 3 s at most; a node that does not answer (an
        earlier build, or one too busy) is logged and its clients are missing. On a node
        without a cluster, the same as :meth:`clients`.
        """
        ...

    async def cluster_disconnect(self, client_id: str, reason_code: int = 0x98) -> str | None:
        """Close a client's connection wherever in the cluster it is connected (MQTT 5
        clients get DISCONNECT ``reason_code``), as HiveMQ's ``ClientService`` does (API 1.4).

        Returns the id of the node it was connected to, or None when no node had it connected.
        The node holding its session is asked first, then every other member (3 s each at
        most).
        """
        ...

    def clients(self) -> list[ClientInfo]:
        """The clients connected to this node now (``node`` is this node's id); the local
        variant of :meth:`cluster_clients`, answered without asking anyone."""
        ...

    def disconnect(self, client_id: str, reason_code: int = 0x98) -> bool:
        """Close a client's connection on this node (MQTT 5 clients get DISCONNECT
        ``reason_code``); the local variant of :meth:`cluster_disconnect`.

        Returns False when no such client is connected here.
        """
        ...

    def subscriptions(self, client_id: str) -> list[SubscriptionInfo]:
        """The subscriptions of a session (connected or not); empty when there is none."""
        ...

    def retained(self, topic_filter: str = "#") -> list[RetainedInfo]:
        """The retained messages whose topics match ``topic_filter``."""
        ...

    def cluster_members(self) -> list[ClusterMember]:
        """The members of the cluster as this node sees them (itself included)."""
        ...

    @property
    def metrics(self) -> MetricsRegistry:
        """Where the extension registers metrics of its own."""
        ...


@dataclass(slots=True)
class ExtensionContext:
    """What an extension gets at start: its name, a folder of its own, the node's services."""

    name: str
    data_dir: Path
    services: HiveServices
    log: logging.Logger
    node_config: Any = None  # the node's parsed configuration (read-only)
    node_data_dir: Path | None = None  # the node's data folder (a persistence backend's home)

    @property
    def extension_discovery(self) -> bool:
        """Whether the node's ``<cluster>`` is enabled and asks extensions for its nodes
        (``<discovery><extension/>``), and, when ``<discovery><extension><name>`` names one
        extension, whether it is this one. True without a node configuration: an extension
        started by hand, in a test, is told what to do by its caller (API 1.2)."""
        if self.node_config is None:
            return True
        cluster = getattr(self.node_config, "cluster", None)
        if not (bool(getattr(cluster, "enabled", False))
                and getattr(cluster, "discovery_kind", None) == "extension"):
            return False
        chosen = self.discovery_choice
        return chosen is None or chosen == self.name

    @property
    def discovery_choice(self) -> str | None:
        """The extension ``<discovery><extension><name>`` names, or None (API 1.4)."""
        cluster = getattr(self.node_config, "cluster", None)
        discovery = getattr(cluster, "discovery", None)
        return getattr(getattr(discovery, "extension", None), "name", None)

    def discovery_idle_reason(self) -> str:
        """Why :attr:`extension_discovery` is False, for a discovery extension's INFO line."""
        chosen = self.discovery_choice
        if chosen is not None and chosen != self.name:
            return f"<discovery><extension><name> names {chosen}"
        return "this node's <cluster> does not use <discovery><extension/>"

    @property
    def discovery_named(self) -> bool:
        """Whether this extension is the one ``<discovery><extension><name>`` names, so it runs
        even on its default settings; without a name, a discovery extension with no settings
        of its own stays idle (several may be installed together). True without a node
        configuration, like :attr:`extension_discovery` (API 1.4)."""
        return self.node_config is None or (
            self.extension_discovery and self.discovery_choice == self.name)
