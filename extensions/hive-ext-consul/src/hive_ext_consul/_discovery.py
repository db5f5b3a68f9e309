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
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Literal, TypeVar

from hive_ext_api import ClusterNodeAddress, Counter, ExtensionContext, ExtensionRefused, hookimpl

from hive_ext_consul._agent import (
    AgentRefused,
    ConsulUnavailable,
    MalformedInstance,
    ServiceInstance,
    consul_client,
    instance_from,
)
from hive_ext_consul._config import ConfigError, ConsulSettings, config_path, load_settings
from hive_ext_consul._outage import Outage
from hive_ext_consul._worker import Worker

NAME = "consul-discovery"
T = TypeVar("T")


class _Outcome(enum.Enum):
    FAILED = "failed"


FAILED: Final = _Outcome.FAILED
"""What an attempt answers when the call failed (its own answer may well be None)."""


def discovery_selected(node_config: Any) -> bool:
    """Whether the node's ``<cluster>`` is enabled with ``<discovery><extension/>``."""
    if node_config is None:  # started by hand (a unit test): the caller decides
        return True
    cluster = getattr(node_config, "cluster", None)
    return bool(getattr(cluster, "enabled", False)) and \
        getattr(cluster, "discovery_kind", None) == "extension"


@dataclass(frozen=True, slots=True)
class Registration:
    node_id: str
    host: str
    port: int


@dataclass(slots=True)
class Survey:
    """What one look at the catalog found (made on the worker thread, reported on the loop)."""

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
        self.worker: Worker | None = None
        self.outage = Outage(self.log, None, NAME)
        self.counters = Counters()
        self.own: Registration | None = None
        self.resolved = 0  # addresses the last successful reload answered
        self._refresher: asyncio.Task[None] | None = None
        self._malformed: dict[str, str] = {}  # instances already reported, each logged once

    # ---------------------------------------------------------------- lifecycle

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        self.log = context.log
        if not discovery_selected(context.node_config):
            self.log.info("%s: idle: this node's <cluster> does not use <discovery><extension/>",
                          NAME)
            return
        path = config_path(context.data_dir)
        try:
            settings = load_settings(path)
        except ConfigError as exc:
            raise ExtensionRefused(str(exc)) from None
        if not path.exists():
            self.log.info("%s: no %s: every setting has its default", NAME, path)
        self.start(settings, ServiceInstance(consul_client(settings), settings),
                   context.services.metrics if context.services is not None else None)

    def start(self, settings: ConsulSettings, service: ServiceInstance,
              metrics: Any = None) -> None:
        """Use ``service`` as ``settings`` say; ``metrics`` is the node's registry, if any."""
        self.settings, self.service = settings, service
        self.worker = Worker(NAME)
        if metrics is not None:
            self.counters = Counters(
                metrics.counter(f"{NAME}.errors", "calls to Consul that failed or timed out"),
                metrics.counter(f"{NAME}.instances.malformed", "healthy instances of the "
                                "service that are not Hive nodes (each counted once)"),
                metrics.counter(f"{NAME}.queries", "reloads that read the catalog"))
            metrics.gauge(f"{NAME}.resolved-addresses", lambda: float(self.resolved),
                          "node addresses the last reload found")
        self.outage = Outage(self.log, self.counters.errors, NAME)
        self.log.info("%s: service %s at %s%s; check TTL %g s, passed every %g s "
                      "(configuration: %s)", NAME, settings.service_name, settings.url,
                      f", datacenter {settings.datacenter}" if settings.datacenter else "",
                      settings.ttl_s, settings.update_interval_s, settings.source)

    @hookimpl
    async def hive_extension_stop(self) -> None:
        await self._stop_refreshing()
        if self.worker is not None:
            self.worker.close()

    # ---------------------------------------------------------------- discovery hooks

    @hookimpl
    async def hive_discovery_init(self, own_address: ClusterNodeAddress,
                                  cluster_id: str) -> None:
        service, settings = self.service, self.settings
        if service is None or settings is None:
            return
        own = self.own = Registration(cluster_id, own_address.host, own_address.port)
        if await self._attempt("register this node", partial(
                service.register, own.node_id, own.host, own.port)) is not FAILED:
            self.log.info("%s: registered this node as %s (%s:%d)", NAME,
                          service.instance_id(own.node_id, settings.service_name), own.host,
                          own.port)
        self._refresher = asyncio.create_task(self._keep_passing(), name=f"{NAME} TTL check")

    @hookimpl
    async def hive_discovery_reload(self) -> list[ClusterNodeAddress] | None:
        if self.service is None:
            return None
        survey = await self._attempt("read the healthy instances",
                                     partial(self._survey, self.own))
        if survey is FAILED:
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
        if await self._attempt("deregister this node",
                               partial(service.deregister, own.node_id)) is not FAILED:
            self.log.info("%s: deregistered this node", NAME)

    # ---------------------------------------------------------------- the work

    async def _attempt(self, doing: str,
                       call: Callable[[], T]) -> T | Literal[_Outcome.FAILED]:
        """``call()`` on the worker; FAILED when it failed (counted, and logged if need be)."""
        assert self.worker is not None
        try:
            result = await self.worker.run(call)
        except ConsulUnavailable as exc:
            self.outage.failed(doing, str(exc))
            return FAILED
        except TimeoutError:
            self.outage.failed(doing, f"Consul did not answer within {self.worker.budget_s:g} s")
            return FAILED
        except Exception as exc:  # a bug or a library surprise: still never the node's problem
            self.log.debug("%s: %s failed", NAME, doing, exc_info=True)
            self.outage.failed(doing, f"{type(exc).__name__}: {exc}")
            return FAILED
        self.outage.answered()
        return result

    def _pass_or_register(self, own: Registration) -> bool:
        """Runs on the worker: pass the check; register again (True) when the agent forgot it."""
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
            if own is not None and await self._attempt(
                    "pass this node's TTL check", partial(self._pass_or_register, own)) is True:
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

        Runs on the worker thread: it touches only the agent and its arguments.
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
