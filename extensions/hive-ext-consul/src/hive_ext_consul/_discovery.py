"""Consul cluster discovery: the hooks, and what one node does with the agent.

- ``hive_discovery_init``: register this node as an instance of the service, with a TTL check
  that passes from the start; then mark the check passing every update-interval.
- ``hive_discovery_reload``: read the service's instances whose checks pass; register this node
  again when it is not among them (the agent restarted, or forgot it); answer their addresses.
- ``hive_discovery_destroy``: stop passing the check and deregister the instance.

A node that dies stops passing its check: after ``consul-ttl`` the check goes critical and the
instance drops out of every node's answer (and the agent removes it after
``consul-deregister-critical-after``). Consul failing never stops the node: the call is counted
and logged (rate-limited) and the reload answers ``None`` ("no news"); the next one retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from hive_ext_api import (
    CallFailed,
    ClusterNodeAddress,
    Counter,
    ExtensionContext,
    OutageLog,
    ServiceCalls,
    hookimpl,
)

from hive_ext_consul._agent import (
    AgentRefused,
    ConsulUnavailable,
    MalformedInstance,
    ServiceInstance,
    consul_client,
    instance_from,
)
from hive_ext_consul._config import CONFIG_ENV, ConsulSettings, config_path, load_settings

NAME = "consul-discovery"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Registration:
    node_id: str
    host: str
    port: int


@dataclass(slots=True)
class Survey:
    """What one look at the catalog found (made on the Consul thread, reported on the loop)."""

    addresses: list[ClusterNodeAddress] = field(default_factory=list)
    malformed: dict[str, str] = field(default_factory=dict)  # instance: why it was skipped
    registered_again: bool = False


@dataclass(slots=True)
class Counters:
    errors: Counter | None = None
    malformed: Counter | None = None
    queries: Counter | None = None

    def inc(self, name: str, amount: int = 1) -> None:
        counter = getattr(self, name)
        if counter is not None and amount:
            counter.inc(amount)


class ConsulDiscovery:
    """One node's Consul discovery (``create_plugin`` makes one per node)."""

    def __init__(self) -> None:
        self.log = logging.getLogger(f"hive.ext.{NAME}")
        self.settings: ConsulSettings | None = None
        self.service: ServiceInstance | None = None
        self.calls: ServiceCalls | None = None
        self.counters = Counters()
        self.own: Registration | None = None
        self.resolved = 0  # addresses the last successful reload answered
        self._refresher: asyncio.Task[None] | None = None
        self._malformed: dict[str, str] = {}  # instances already reported, each logged once

    # ---------------------------------------------------------------- lifecycle

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        self.log = context.log
        if not context.extension_discovery:
            self.log.info("%s: idle: %s", NAME, context.discovery_idle_reason())
            return
        path = config_path(context.data_dir)
        if not context.discovery_named and not path.exists() and not os.environ.get(CONFIG_ENV):
            # Several discovery extensions may be installed: one nobody set up stays out.
            self.log.info("%s: idle: no settings of its own (no %s); write them there, or "
                          "name it in <discovery><extension><name>%s</name> to use the local "
                          "agent with every default", NAME, path, context.name)
            return
        settings = load_settings(path)  # ConfigError refuses
        if not path.exists():
            self.log.info("%s: no %s: every setting has its default", NAME, path)
        self.start(settings, ServiceInstance(consul_client(settings), settings),
                   context.services.metrics if context.services is not None else None)

    def start(self, settings: ConsulSettings, service: ServiceInstance,
              metrics: Any = None) -> None:
        """Use ``service`` as ``settings`` say; ``metrics`` is the node's registry, if any."""
        self.settings, self.service = settings, service
        if metrics is not None:
            self.counters = Counters(
                metrics.counter(f"{NAME}.errors", "calls to Consul that failed or timed out"),
                metrics.counter(f"{NAME}.instances.malformed", "healthy instances of the "
                                "service that are not Hive nodes (each counted once)"),
                metrics.counter(f"{NAME}.queries", "reloads that read the catalog"))
            metrics.gauge(f"{NAME}.resolved-addresses", lambda: float(self.resolved),
                          "node addresses the last reload found")
        self.calls = ServiceCalls(OutageLog(self.log, NAME, self.counters.errors),
                                  expected=(ConsulUnavailable,))
        self.log.info("%s: service %s at %s%s; check TTL %g s, passed every %g s "
                      "(configuration: %s)", NAME, settings.service_name, settings.url,
                      f", datacenter {settings.datacenter}" if settings.datacenter else "",
                      settings.ttl_s, settings.update_interval_s, settings.source)

    @hookimpl
    async def hive_extension_stop(self) -> None:
        await self._stop_refreshing()
        if self.calls is not None:
            self.calls.close()

    # ---------------------------------------------------------------- discovery hooks

    @hookimpl
    async def hive_discovery_init(self, own_address: ClusterNodeAddress,
                                  cluster_id: str) -> None:
        service, settings = self.service, self.settings
        if service is None or settings is None:
            return
        own = self.own = Registration(cluster_id, own_address.host, own_address.port)
        with contextlib.suppress(CallFailed):
            await self._call("register this node",
                             partial(service.register, own.node_id, own.host, own.port))
            self.log.info("%s: registered this node as %s (%s:%d)", NAME,
                          service.instance_id(own.node_id, settings.service_name), own.host,
                          own.port)
        self._refresher = asyncio.create_task(self._keep_passing(), name=f"{NAME} TTL check")

    @hookimpl
    async def hive_discovery_reload(self) -> list[ClusterNodeAddress] | None:
        if self.service is None:
            return None
        try:
            survey = await self._call("read the healthy instances",
                                      partial(self._survey, self.own))
        except CallFailed:
            return None  # no news: the node keeps the members it has
        self._report(survey)
        return survey.addresses

    @hookimpl
    async def hive_discovery_destroy(self) -> None:
        await self._stop_refreshing()
        own, service = self.own, self.service
        if own is None or service is None:
            return
        self.own = None
        with contextlib.suppress(CallFailed):
            await self._call("deregister this node", partial(service.deregister, own.node_id))
            self.log.info("%s: deregistered this node", NAME)

    # ---------------------------------------------------------------- the work

    async def _call(self, doing: str, call: Callable[[], T]) -> T:
        """``call()`` on the Consul thread; CallFailed (counted and logged) when it failed."""
        assert self.calls is not None
        return await self.calls.run(doing, call)

    def _pass_or_register(self, own: Registration) -> bool:
        """On the Consul thread: pass the check; register again (True) when the agent forgot it."""
        assert self.service is not None
        try:
            self.service.keep_passing(own.node_id)
        except AgentRefused:  # reachable, but without the check: it restarted, or forgot
            self.service.register(own.node_id, own.host, own.port)
            return True
        return False

    async def _keep_passing(self) -> None:
        assert self.settings is not None
        while True:
            await asyncio.sleep(self.settings.update_interval_s)
            own = self.own
            if own is None:
                continue
            try:
                registered_again = await self._call("pass this node's TTL check",
                                                    partial(self._pass_or_register, own))
            except CallFailed:
                continue
            if registered_again:
                self.log.info("%s: the agent did not know this node's check: registered again",
                              NAME)

    async def _stop_refreshing(self) -> None:
        task, self._refresher = self._refresher, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _survey(self, own: Registration | None) -> Survey:
        """The healthy instances' addresses; registers this node again when it is missing.

        Runs on the Consul thread: it touches only the agent and its arguments.
        """
        assert self.service is not None
        survey = Survey()
        addresses: dict[ClusterNodeAddress, None] = {}
        own_seen = False
        for number, entry in enumerate(self.service.healthy()):
            try:
                instance = instance_from(entry)
            except MalformedInstance as exc:
                service = entry.get("Service") if isinstance(entry, dict) else None
                name = service.get("ID") if isinstance(service, dict) else None
                survey.malformed[str(name or f"entry {number}")] = str(exc)
                continue
            own_seen = own_seen or (own is not None and instance.node_id == own.node_id)
            addresses[ClusterNodeAddress(instance.host, instance.port)] = None
        if own is not None and not own_seen:
            self.service.register(own.node_id, own.host, own.port)
            survey.registered_again = True
            addresses[ClusterNodeAddress(own.host, own.port)] = None
        survey.addresses = list(addresses)
        return survey

    def _report(self, survey: Survey) -> None:
        """Count and log what a survey found (on the loop: metrics are not thread-safe)."""
        self.counters.inc("queries")
        self.resolved = len(survey.addresses)
        if survey.registered_again:
            self.log.info("%s: this node was not among the healthy instances: registered again",
                          NAME)
        new = {key: why for key, why in survey.malformed.items() if self._malformed.get(key) != why}
        for key, why in new.items():
            self.log.warning("%s: skipping instance %s of service %s: not a Hive node (%s)",
                             NAME, key, self.settings.service_name if self.settings else "?", why)
        self.counters.inc("malformed", len(new))
        self._malformed = dict(survey.malformed)
