"""Cluster discovery through a service every node reaches: a bucket, a catalog, an HTTP API.

Such an extension makes four blocking calls to its service: register this node, keep its entry
fresh, read the entries of the live nodes, and remove this node's entry when it leaves.
:class:`PollingDiscovery` does everything around those calls, the same way for every service:

- it stays idle unless the node's discovery is an extension and this one is set up (it has a
  settings file, or ``<discovery><extension><name>`` names it);
- each call runs off the node's loop and bounded in time (:class:`ServiceCalls`); a failure is
  counted in ``NAME.errors`` and logged once per outage (:class:`OutageLog`), and a reload whose
  call failed answers ``None``, "no news": the node keeps the members it has;
- it counts ``NAME.queries``, logs and counts each malformed entry once, and shows
  ``NAME.resolved-addresses``;
- one task of its own refreshes this node's entry every ``refresh_interval_s``; destroy and stop
  end it.

A subclass says its name, its service, its settings file, how to read the settings and make the
client (:meth:`PollingDiscovery.configure`), and makes the four calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from hive_ext_api._properties import settings_file
from hive_ext_api._service_calls import CallFailed, OutageLog, ServiceCalls
from hive_ext_api._services import Counter, ExtensionContext, MetricsRegistry
from hive_ext_api._types import ClusterNodeAddress
from hive_ext_api.hookspecs import hookimpl

SettingsT = TypeVar("SettingsT")
ClientT = TypeVar("ClientT")
OwnT = TypeVar("OwnT")
T = TypeVar("T")


@dataclass(slots=True)
class Survey:
    """What one reading of the service found: made on the service's thread, told on the loop
    (the node's metrics and the log's handlers are not thread-safe)."""

    addresses: list[ClusterNodeAddress] = field(default_factory=list)
    malformed: dict[str, str] = field(default_factory=dict)
    """Entries that are not nodes' (a key, an instance id): why each was skipped."""
    notes: list[str] = field(default_factory=list)
    """What to log (as info) about the reading: an entry rewritten, a dead node's removed."""
    counts: dict[str, int] = field(default_factory=dict)
    """How much to add to the subclass's own counters (``COUNTERS``), by name."""

    def found(self, host: str, port: int) -> None:
        """A live node at ``host:port`` (each address is answered once)."""
        address = ClusterNodeAddress(host, port)
        if address not in self.addresses:
            self.addresses.append(address)

    def count(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to the counter ``name`` (one of ``COUNTERS``) when told."""
        self.counts[name] = self.counts.get(name, 0) + amount


class PollingDiscovery(Generic[SettingsT, ClientT, OwnT]):
    """One node's discovery through a shared service (``create_plugin`` makes one per node).

    ``SettingsT`` is what the settings file says, ``ClientT`` what talks to the service, and
    ``OwnT`` this node's entry in it. The class attributes name things; the methods that raise
    :class:`NotImplementedError` are the subclass's part.
    """

    NAME: ClassVar[str] = "discovery"
    """The extension's name: every log line and metric name starts with it."""
    SERVICE: ClassVar[str] = "the service"
    """The service's name, in the metrics' descriptions (``S3``, ``Consul``)."""
    UNAVAILABLE: ClassVar[tuple[type[Exception], ...]] = ()
    """The client's errors that mean "the service did not answer": logged without a traceback."""
    CONFIG_ENV: ClassVar[str] = ""
    """The environment variable that may give the settings file's path."""
    CONFIG_FILE_NAME: ClassVar[str] = ""
    """The settings file's name in the extension's data folder."""
    IDLE_HINT: ClassVar[str] = "write them there to use it"
    """How to set the extension up, told when it stays idle for want of settings."""
    QUERIES: ClassVar[str] = "reloads that read the service"
    """The description of the ``queries`` counter."""
    MALFORMED: ClassVar[tuple[str, str]] = ("entries.malformed", "entries that are not nodes'")
    """The malformed-entries counter: its name after ``NAME.``, and its description."""
    COUNTERS: ClassVar[tuple[tuple[str, str], ...]] = ()
    """More counters a survey may add to (:meth:`Survey.count`): names and descriptions."""
    REGISTER: ClassVar[str] = "register this node"
    """What :meth:`register` does, as an outage line says it ("cannot register this node")."""
    REFRESH: ClassVar[str] = "update this node's entry"
    """What :meth:`refresh` does."""
    SURVEY: ClassVar[str] = "read the node entries"
    """What :meth:`survey` does."""
    DEREGISTER: ClassVar[str] = "remove this node's entry"
    """What :meth:`deregister` does."""

    def __init__(self) -> None:
        self.log = logging.getLogger(f"hive.ext.{self.NAME}")
        self.settings: SettingsT | None = None
        self.client: ClientT | None = None
        self.calls: ServiceCalls | None = None
        self.own: OwnT | None = None  # this node's entry, from init to destroy
        self.resolved = 0  # addresses the last successful reload answered
        self.refresh_interval_s = 0.0
        self._counters: dict[str, Counter] = {}
        self._refresher: asyncio.Task[None] | None = None
        self._malformed: dict[str, str] = {}  # entries already told, so each is logged once

    # ---------------------------------------------------------------- the subclass's part

    def configure(self, context: ExtensionContext, path: Path) -> tuple[SettingsT, ClientT]:
        """The settings of the file at ``path`` and a client made from them; a
        :class:`SettingError` refuses the extension."""
        raise NotImplementedError

    def describe(self, settings: SettingsT) -> str:
        """One line on what the extension uses (logged at start)."""
        raise NotImplementedError

    def refresh_interval(self, settings: SettingsT) -> float:
        """Seconds between two refreshes of this node's entry (0: never)."""
        raise NotImplementedError

    def own_entry(self, node_id: str, address: ClusterNodeAddress) -> OwnT:
        """This node's entry (made at init, kept until destroy)."""
        raise NotImplementedError

    def register(self, own: OwnT) -> str:
        """On the service's thread: enter ``own``; answers its name in the service."""
        raise NotImplementedError

    def refresh(self, own: OwnT) -> str | None:
        """On the service's thread: show ``own`` is alive; answers a line to log, if any."""
        raise NotImplementedError

    def survey(self, own: OwnT | None) -> Survey:
        """On the service's thread: the live nodes; enters ``own`` again if it is missing."""
        raise NotImplementedError

    def deregister(self, own: OwnT) -> str:
        """On the service's thread: remove ``own``; answers the line to log."""
        raise NotImplementedError

    def malformed_line(self, entry: str, why: str) -> str:
        """The warning for an entry that is not a node's."""
        return f"skipping {entry}: not a node's entry ({why})"

    # ---------------------------------------------------------------- lifecycle

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        """Read the settings and start, unless this extension is not the node's discovery."""
        self.log = context.log
        if not context.extension_discovery:
            self.log.info("%s: idle: %s", self.NAME, context.discovery_idle_reason())
            return
        path = settings_file(self.CONFIG_ENV, self.CONFIG_FILE_NAME, context.data_dir)
        if not context.discovery_named and not path.exists() \
                and not os.environ.get(self.CONFIG_ENV):
            # Several discovery extensions may be installed: one nobody set up stays out.
            self.log.info("%s: idle: no settings of its own (no %s); %s", self.NAME, path,
                          self.IDLE_HINT.format(name=context.name))
            return
        settings, client = self.configure(context, path)
        self.start(settings, client,
                   context.services.metrics if context.services is not None else None)

    def start(self, settings: SettingsT, client: ClientT,
              metrics: MetricsRegistry | Any = None) -> None:
        """Use ``client`` as ``settings`` say; ``metrics`` is the node's registry, if any."""
        self.settings, self.client = settings, client
        self.refresh_interval_s = self.refresh_interval(settings)
        errors = None
        if metrics is not None:
            errors = metrics.counter(f"{self.NAME}.errors",
                                     f"calls to {self.SERVICE} that failed or timed out")
            described = (("queries", self.QUERIES), self.MALFORMED, *self.COUNTERS)
            self._counters = {name: metrics.counter(f"{self.NAME}.{name}", description)
                              for name, description in described}
            metrics.gauge(f"{self.NAME}.resolved-addresses", lambda: float(self.resolved),
                          "node addresses the last reload found")
        self.calls = ServiceCalls(OutageLog(self.log, self.NAME, errors),
                                  expected=self.UNAVAILABLE)
        self.log.info("%s: %s", self.NAME, self.describe(settings))

    @hookimpl
    async def hive_extension_stop(self) -> None:
        """Stop refreshing and let the calls' thread go."""
        await self._stop_refreshing()
        if self.calls is not None:
            self.calls.close()

    # ---------------------------------------------------------------- discovery hooks

    @hookimpl
    async def hive_discovery_init(self, own_address: ClusterNodeAddress,
                                  cluster_id: str) -> None:
        """Enter this node, and refresh its entry from now on."""
        if self.calls is None:
            return
        own = self.own = self.own_entry(cluster_id, own_address)
        with contextlib.suppress(CallFailed):
            name = await self._call(self.REGISTER, partial(self.register, own))
            self.log.info("%s: registered this node as %s (%s:%d)", self.NAME, name,
                          own_address.host, own_address.port)
        if self.refresh_interval_s > 0:
            self._refresher = asyncio.create_task(self._refresh(), name=f"{self.NAME} refresh")

    @hookimpl
    async def hive_discovery_reload(self) -> list[ClusterNodeAddress] | None:
        """The live nodes' addresses, or ``None`` when the service did not answer."""
        if self.calls is None:
            return None
        try:
            survey = await self._call(self.SURVEY, partial(self.survey, self.own))
        except CallFailed:
            return None  # no news: the node keeps the members it has
        self._tell(survey)
        return survey.addresses

    @hookimpl
    async def hive_discovery_destroy(self) -> None:
        """Stop refreshing and remove this node's entry."""
        await self._stop_refreshing()
        own = self.own
        if own is None or self.calls is None:
            return
        self.own = None
        with contextlib.suppress(CallFailed):
            line = await self._call(self.DEREGISTER, partial(self.deregister, own))
            self.log.info("%s: %s", self.NAME, line)

    # ---------------------------------------------------------------- the work

    async def _call(self, doing: str, call: Callable[[], T]) -> T:
        assert self.calls is not None
        return await self.calls.run(doing, call)

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval_s)
            own = self.own
            if own is None:
                continue
            with contextlib.suppress(CallFailed):
                line = await self._call(self.REFRESH, partial(self.refresh, own))
                if line:
                    self.log.info("%s: %s", self.NAME, line)

    async def _stop_refreshing(self) -> None:
        task, self._refresher = self._refresher, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _count(self, name: str, amount: int = 1) -> None:
        counter = self._counters.get(name)
        if counter is not None and amount:
            counter.inc(amount)

    def _tell(self, survey: Survey) -> None:
        """Count and log what a survey found."""
        self._count("queries")
        self.resolved = len(survey.addresses)
        for line in survey.notes:
            self.log.info("%s: %s", self.NAME, line)
        for name, amount in survey.counts.items():
            self._count(name, amount)
        new = {entry: why for entry, why in survey.malformed.items()
               if self._malformed.get(entry) != why}
        for entry, why in new.items():
            self.log.warning("%s: %s", self.NAME, self.malformed_line(entry, why))
        self._count(self.MALFORMED[0], len(new))
        self._malformed = dict(survey.malformed)
