"""Hive cluster discovery on Docker: the nodes of one Docker network or one Swarm service.

Two modes (the ``mode`` setting):

- ``engine``: the Docker Engine API lists the running containers that carry the ``label`` and
  are attached to the ``network``; each one's IP on that network, with its ``cluster-port-label``
  label or the ``cluster-port``, is a node.
- ``dns``: the A records of ``dns-name`` (``tasks.<service>`` in a swarm) are the nodes, at
  ``cluster-port``.

Settings come from ``docker-discovery.properties`` (``$HIVE_DOCKER_DISCOVERY_CONFIG``, else in the
extension's data folder) and ``HIVE_DOCKER_DISCOVERY_*`` variables; the README lists them all.
A failed query is logged (when an outage begins, once a minute while it lasts, and when it
ends), counted in the node's metrics (``docker-discovery.*``) and answers "no news", so the node
keeps its cluster members and asks again at the next reload
(``<discovery><extension><reload-interval>``).
"""

from __future__ import annotations

import os

from hive_ext_api import ClusterNodeAddress, ExtensionContext, SettingError, hookimpl

from hive_ext_docker._discovery import METRIC_PREFIX, DockerDiscovery
from hive_ext_docker._dns import DnsSource, nodes_from_response
from hive_ext_docker._engine import EngineSource, nodes_from_containers
from hive_ext_docker._settings import (
    CONFIG_ENV,
    ENV_PREFIX,
    FILE_NAME,
    KEYS,
    DnsSettings,
    EngineSettings,
    Label,
    config_path,
    environment_overrides,
    load_settings,
    parse_settings,
)
from hive_ext_docker._source import ERROR_KINDS, Found, NodeSource, SourceError

__version__ = "1.0.0"

HIVE_API = ">=1.4,<2"  # 1.2: read_properties, OutageLog, extension_discovery; 1.4: discovery_named

__all__ = [
    "CONFIG_ENV",
    "ERROR_KINDS",
    "FILE_NAME",
    "HIVE_API",
    "KEYS",
    "METRIC_PREFIX",
    "DnsSettings",
    "DnsSource",
    "DockerDiscovery",
    "DockerDiscoveryPlugin",
    "EngineSettings",
    "EngineSource",
    "Found",
    "Label",
    "NodeSource",
    "SettingError",
    "SourceError",
    "create_plugin",
    "load_settings",
    "nodes_from_containers",
    "nodes_from_response",
    "parse_settings",
]


class DockerDiscoveryPlugin:
    """The extension's hooks for one node (``create_plugin`` makes one per node)."""

    def __init__(self) -> None:
        self.discovery: DockerDiscovery | None = None

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        if not context.extension_discovery:
            context.log.info("docker-discovery: idle: %s", context.discovery_idle_reason())
            return
        path, named = config_path(os.environ, context.data_dir)
        if not (context.discovery_named or named or path.exists()
                or environment_overrides(os.environ)):
            # Several discovery extensions may be installed: one nobody set up stays out.
            context.log.info("docker-discovery: idle: no settings of its own (no %s, no %s* "
                             "variables); set at least mode to use it", path, ENV_PREFIX)
            return
        settings = load_settings(os.environ, context.data_dir)  # SettingError refuses
        source: NodeSource = (EngineSource(settings) if isinstance(settings, EngineSettings)
                              else DnsSource(settings))
        metrics = context.services.metrics if context.services is not None else None
        self.discovery = DockerDiscovery(source, context.log, metrics)
        context.log.info("docker-discovery: nodes from %s", source.describe())

    @hookimpl
    def hive_extension_stop(self) -> None:
        discovery, self.discovery = self.discovery, None
        if discovery is not None:
            discovery.source.close()

    @hookimpl
    def hive_discovery_init(self, own_address: ClusterNodeAddress) -> None:
        # Nothing to register: the container (its labels) or the task (its DNS record) is the
        # registration. The own address gives the default port and a self-check.
        if self.discovery is not None:
            self.discovery.own_address = own_address

    @hookimpl
    async def hive_discovery_reload(self) -> list[ClusterNodeAddress] | None:
        return await self.discovery.reload() if self.discovery is not None else None


def create_plugin() -> DockerDiscoveryPlugin:
    """One instance per node (Hive calls this for an installed extension)."""
    return DockerDiscoveryPlugin()
