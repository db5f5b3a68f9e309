"""Consul cluster discovery: what one node does with the agent.

- register (``hive_discovery_init``): register this node as an instance of the service, with a
  TTL check that passes from the start; then mark the check passing every update-interval.
- survey (``hive_discovery_reload``): read the service's instances whose checks pass; register
  this node again when it is not among them (the agent restarted, or forgot it).
- deregister (``hive_discovery_destroy``): deregister the instance.

A node that dies stops passing its check: after ``consul-ttl`` the check goes critical and the
instance drops out of every node's answer (and the agent removes it after
``consul-deregister-critical-after``). :class:`PollingDiscovery` does the rest: idle unless set
up, the calls off the loop and bounded, Consul failing counted and logged once per outage while
the reload answers "no news", the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hive_ext_api import ClusterNodeAddress, ExtensionContext, PollingDiscovery, Survey

from hive_ext_consul._agent import (
    AgentRefused,
    ConsulUnavailable,
    MalformedInstance,
    ServiceInstance,
    consul_client,
    instance_from,
)
from hive_ext_consul._config import CONFIG_ENV, CONFIG_FILE_NAME, ConsulSettings, load_settings

NAME = "consul-discovery"


@dataclass(frozen=True, slots=True)
class Registration:
    node_id: str
    host: str
    port: int


class ConsulDiscovery(PollingDiscovery[ConsulSettings, ServiceInstance, Registration]):
    """One node's Consul discovery (``create_plugin`` makes one per node)."""

    NAME = NAME
    SERVICE = "Consul"
    UNAVAILABLE = (ConsulUnavailable,)
    CONFIG_ENV = CONFIG_ENV
    CONFIG_FILE_NAME = CONFIG_FILE_NAME
    IDLE_HINT = ("write them there, or name it in <discovery><extension><name>{name}</name> to "
                 "use the local agent with every default")
    QUERIES = "reloads that read the catalog"
    MALFORMED = ("instances.malformed", "healthy instances of the service that are not Hive "
                 "nodes (each counted once)")
    REGISTER = "register this node"
    REFRESH = "pass this node's TTL check"
    SURVEY = "read the healthy instances"
    DEREGISTER = "deregister this node"

    def configure(self, context: ExtensionContext,
                  path: Path) -> tuple[ConsulSettings, ServiceInstance]:
        settings = load_settings(path)  # ConfigError refuses
        if not path.exists():
            self.log.info("%s: no %s: every setting has its default", NAME, path)
        return settings, ServiceInstance(consul_client(settings), settings)

    def describe(self, settings: ConsulSettings) -> str:
        datacenter = f", datacenter {settings.datacenter}" if settings.datacenter else ""
        return (f"service {settings.service_name} at {settings.url}{datacenter}; check TTL "
                f"{settings.ttl_s:g} s, passed every {settings.update_interval_s:g} s "
                f"(configuration: {settings.source})")

    def refresh_interval(self, settings: ConsulSettings) -> float:
        return settings.update_interval_s

    def own_entry(self, node_id: str, address: ClusterNodeAddress) -> Registration:
        return Registration(node_id, address.host, address.port)

    def register(self, own: Registration) -> str:
        assert self.client is not None and self.settings is not None
        self.client.register(own.node_id, own.host, own.port)
        return self.client.instance_id(own.node_id, self.settings.service_name)

    def refresh(self, own: Registration) -> str | None:
        """Pass the check; register again when the agent forgot it."""
        assert self.client is not None
        try:
            self.client.keep_passing(own.node_id)
        except AgentRefused:  # reachable, but without the check: it restarted, or forgot
            self.client.register(own.node_id, own.host, own.port)
            return "the agent did not know this node's check: registered again"
        return None

    def deregister(self, own: Registration) -> str:
        assert self.client is not None
        self.client.deregister(own.node_id)
        return "deregistered this node"

    def malformed_line(self, entry: str, why: str) -> str:
        service = self.settings.service_name if self.settings else "?"
        return f"skipping instance {entry} of service {service}: not a Hive node ({why})"

    def survey(self, own: Registration | None) -> Survey:
        """The healthy instances' addresses; registers this node again when it is missing."""
        assert self.client is not None
        survey = Survey()
        own_seen = False
        for number, entry in enumerate(self.client.healthy()):
            try:
                instance = instance_from(entry)
            except MalformedInstance as exc:
                service = entry.get("Service") if isinstance(entry, dict) else None
                name = service.get("ID") if isinstance(service, dict) else None
                survey.malformed[str(name or f"entry {number}")] = str(exc)
                continue
            own_seen = own_seen or (own is not None and instance.node_id == own.node_id)
            survey.found(instance.host, instance.port)
        if own is not None and not own_seen:
            self.client.register(own.node_id, own.host, own.port)
            survey.notes.append("this node was not among the healthy instances: registered "
                                "again")
            survey.found(own.host, own.port)
        return survey
