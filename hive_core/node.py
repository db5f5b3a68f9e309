"""A Hive node: the store, the broker, the cluster, the listeners, run until told to stop.

The node only composes: it builds each part from the configuration, starts them in order inside
one anyio task group (signals, the cluster's background work) and stops them in reverse order.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any, cast

import anyio
from anyio.abc import TaskGroup, TaskStatus

from hive_core import __version__
from hive_core.admin import Backups, ControlCenter, RestApi
from hive_core.broker import (
    Broker,
    BrokerSettings,
    BrokerStats,
    ClusterPressure,
    NodeServices,
    OverloadedConnection,
    OverloadMonitor,
)
from hive_core.cluster import (
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    Cluster,
    ClusterClients,
    ClusterSettings,
    ClusterStats,
    HealthCheckSettings,
    ReplicatingStore,
    progress_interval,
)
from hive_core.config import ConfigError, HiveConfig
from hive_core.net import (
    BoundListener,
    advertised_address,
    close_listeners,
    cluster_contexts,
    open_mqtt_listeners,
)
from hive_core.node_views import NodeViews
from hive_core.persistence import DataFolderLock, MemorySessionStore, keep_previous_data
from hive_core.plugins import DISABLED_BY_OPERATOR, ExtensionManager, Extensions, HookTime
from hive_ext_api import ClusterMember, ExtensionContext

log = logging.getLogger("hive")


def run_node(node: HiveNode) -> None:
    """Run a node until it stops: anyio on asyncio, with uvloop when it is installed.

    Once the node has started, what start-up made (modules, config, extensions, the sessions
    read from the store) is moved out of the garbage collector's sight (``gc.freeze``): it
    lives as long as the process, and a full collection no longer walks it. Measured with
    ``bench/run.py``: QoS 0 throughput +25 %, 19,000 connects 13 % faster.
    """
    try:
        import uvloop  # noqa: F401
    except ImportError:  # uvloop is optional: plain asyncio works, only slower
        use_uvloop = False
    else:
        use_uvloop = True

    async def run() -> None:
        await node.run(started=_freeze_startup_objects)

    anyio.run(run, backend="asyncio", backend_options={"use_uvloop": use_uvloop})


def _freeze_startup_objects() -> None:
    gc.collect()  # start-up's cyclic garbage goes first: frozen objects are never freed
    gc.freeze()


def node_id(data_dir: Path, name: str | None = None) -> str:
    """This node's id: ``<cluster><node-name>`` when given, else one made once and kept in its
    data folder."""
    if name:
        return name
    path = data_dir / "node-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        data_dir.mkdir(parents=True, exist_ok=True)
        new_id = uuid.uuid4().hex[:12]
        path.write_text(new_id + "\n")
        return new_id


def cluster_settings(config: HiveConfig) -> ClusterSettings:
    cluster = config.cluster
    transport = cluster.effective_transport()
    # Without a bind address: every interface, unless only this host can take part (then
    # loopback, so that the port is not open to others; see Cluster.outside_reach).
    bind_host = transport.bind_address or (
        "0.0.0.0" if cluster.outside_reach() is not None else "127.0.0.1")
    external_host, why = advertised_address(cluster, bind_host)
    if why != "configured":
        log.info("Cluster address other nodes are told to use: %s (%s)", external_host, why)
    heartbeat = cluster.effective_heartbeat()
    discovery = cluster.effective_discovery()
    reload_interval = float(getattr(discovery, "reload_interval", 60))
    tls = getattr(transport, "tls", None)
    # Node links use TLS both ways: accepting (server_ssl) and dialing (client_ssl).
    server_ssl, client_ssl = cluster_contexts(tls) if tls is not None and tls.enabled else (
        None, None)
    return ClusterSettings(
        bind_host, transport.bind_port, external_host,
        transport.external_port or transport.bind_port,
        heartbeat_interval=heartbeat.interval_ms / 1000,
        heartbeat_timeout=(heartbeat.timeout_ms / 1000) if heartbeat.enabled else float("inf"),
        server_ssl=server_ssl, client_ssl=client_ssl,
        transport_kind=cluster.transport_kind,  # UDP: nodes come from a discovery extension
        health_check=health_check_settings(config, bind_host),
        discovery_reload_interval=reload_interval,
        shared_secret=cluster.authentication.shared_secret,
        replica_count=cluster.replication.replica_count,
        protocol=node_protocol(),
        progress_interval=sync_progress_interval(),
    )


def sync_progress_interval() -> float:
    """Seconds between the "still ongoing" lines of a long join, merge or replication."""
    try:
        return progress_interval()
    except ValueError as exc:
        raise ConfigError(str(exc), source="environment") from None


def node_protocol() -> int:
    """The node protocol this node speaks: the newest, unless HIVE_NODE_PROTOCOL names an
    older one it still speaks (to rehearse a rolling upgrade: a node that acts as the
    previous release does on the wire)."""
    value = os.environ.get("HIVE_NODE_PROTOCOL")
    if not value:
        return PROTOCOL_VERSION
    try:
        protocol = int(value)
    except ValueError:
        raise ConfigError(f"HIVE_NODE_PROTOCOL={value!r}: expected a number",
                          source="environment") from None
    if not MIN_PROTOCOL_VERSION <= protocol <= PROTOCOL_VERSION:
        raise ConfigError(f"HIVE_NODE_PROTOCOL={protocol}: this Hive speaks node protocol "
                          f"{MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}", source="environment")
    return protocol


def health_check_settings(config: HiveConfig, bind_host: str) -> HealthCheckSettings | None:
    """<tcp-health-check> resolved: None when disabled; binds where the transport does."""
    check = config.cluster.failure_detection.tcp_health_check
    if not check.enabled:
        return None
    return HealthCheckSettings(check.bind_address or bind_host, check.bind_port,
                               check.port_range, check.external_address, check.external_port)


def settings_from(config: HiveConfig) -> BrokerSettings:
    mqtt = config.mqtt
    limits = config.restrictions
    return BrokerSettings(
        max_keep_alive=mqtt.keep_alive.max_keep_alive,
        allow_unlimited_keep_alive=mqtt.keep_alive.allow_unlimited,
        max_session_expiry=mqtt.session_expiry.max_interval,
        max_message_expiry=mqtt.message_expiry.max_interval,
        max_packet_size=mqtt.packets.max_packet_size,
        server_receive_maximum=mqtt.receive_maximum.server_receive_maximum,
        receive_maximum_strategy=mqtt.receive_maximum.strategy,
        topic_alias_enabled=mqtt.topic_alias.enabled,
        topic_alias_maximum=mqtt.topic_alias.max_per_client,
        maximum_qos=mqtt.quality_of_service.max_qos,
        max_queue_size=mqtt.queued_messages.max_queue_size,
        queue_strategy=mqtt.queued_messages.strategy,
        inflight_window=mqtt.inflight_window.max_messages,
        retain_available=mqtt.retained_messages.enabled,
        wildcard_subscriptions=mqtt.wildcard_subscriptions.enabled,
        shared_subscriptions=mqtt.shared_subscriptions.enabled,
        subscription_identifiers=mqtt.subscription_identifier.enabled,
        max_connections=limits.max_connections,
        max_client_id_length=limits.max_client_id_length,
        max_topic_length=limits.max_topic_length,
        max_topic_levels=limits.max_topic_levels,
        connect_timeout=limits.no_connect_idle_timeout / 1000,
        max_pre_connect_size=limits.max_pre_connect_size,
    )


class HiveNode:
    """One node: what it runs, and its state as the REST API shows it (``NodeStatus``)."""

    def __init__(self, config: HiveConfig, data_dir: Path, extra_extensions: Iterable[Any] = (),
                 load_installed: bool = True, backup_dir: Path | None = None) -> None:
        self.config = config
        self.data_dir = data_dir
        # Backups go beside the data folder, as HiveMQ's <home>/backup beside <home>/data.
        self.backup_dir = backup_dir if backup_dir is not None else data_dir.parent / "backup"
        in_memory = config.persistence.mode == "in-memory"
        self.backups = Backups(self, self.backup_dir,
                               None if in_memory else data_dir / "persistence" / "sessions.db")
        self.listeners: list[BoundListener] = []
        self.broker: Broker | None = None
        self.cluster: Cluster | None = None
        self.rest_api: RestApi | None = None
        self.control_center: ControlCenter | None = None
        manager = ExtensionManager(config.extensions.disabled,
                                   discover_installed=load_installed)
        taken: Counter[str] = Counter()
        for plugin in extra_extensions:
            # Modules by their name, objects by their class; a second of one class gets "-2".
            name = getattr(plugin, "__name__", None) or type(plugin).__name__
            taken[name] += 1
            manager.register(name if taken[name] == 1 else f"{name}-{taken[name]}", plugin)
        self.extensions = Extensions(manager)
        self.services = NodeServices(node_id=node_id(data_dir, config.cluster.node_name),
                                     version=__version__)
        self._stop_requested = False
        self._stopping: anyio.Event | None = None  # made in run(): it belongs to the event loop
        self._not_ready: str | None = "starting"  # why it does not serve clients; None: it does

    def _context(self, name: str) -> ExtensionContext:
        folder = self.data_dir / "extensions" / name
        return ExtensionContext(name, folder, self.services, logging.getLogger(f"hive.ext.{name}"),
                                self.config, self.data_dir)

    def _check_discovery_choice(self) -> None:
        """``<discovery><extension><name>`` must name an installed discovery extension (one
        that is installed but refused to start or disabled has been logged already)."""
        cluster = self.config.cluster
        if not cluster.enabled or cluster.discovery_kind != "extension":
            return
        chosen = getattr(cluster.effective_discovery(), "name", None)
        if chosen is None:
            return
        discovering = self.extensions.discovering()
        record = next((r for r in self.extensions.manager.records if r.name == chosen), None)
        if record is not None and (not record.active or chosen in discovering):
            return
        known = ", ".join(sorted(n for n in discovering if not n.startswith("hive_core"))) \
            or "none"
        why = (f"extension {chosen} does not answer discovery" if record is not None
               else f"no extension named {chosen} is installed")
        raise ConfigError(f"{why} (discovery extensions: {known}; `hive extensions` lists "
                          "every extension)", source="config.xml",
                          path="hivemq/cluster/discovery/extension/name")

    # ------------------------------------------------------------------ running

    async def run(self, started: Callable[[], None] | None = None,
                  install_signal_handlers: bool = True) -> None:
        """Start everything, serve until :meth:`stop` (or SIGTERM/SIGINT), stop everything."""
        self._stopping = anyio.Event()
        if self._stop_requested:
            self._stopping.set()
        failure: Exception | None = None
        async with anyio.create_task_group() as tasks:
            # Signals first: a stop asked for while the store opens ends the start cleanly.
            if install_signal_handlers:
                await tasks.start(self._stop_on_signals)
            try:
                await self._serve(tasks, started)
            except Exception as exc:  # raised as itself, not inside the task group's group
                failure = exc
            finally:
                tasks.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _stop_on_signals(self, *, task_status: TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for _signum in signals:
                self.stop()

    async def _serve(self, tasks: TaskGroup, started: Callable[[], None] | None) -> None:
        assert self._stopping is not None
        begun = time.monotonic()
        lock = DataFolderLock(self.data_dir)
        lock.acquire()  # before anything reads or writes the folder
        try:
            await self._serve_locked(tasks, started, begun)
        finally:
            lock.release()

    async def _serve_locked(self, tasks: TaskGroup, started: Callable[[], None] | None,
                            begun: float) -> None:
        assert self._stopping is not None
        log.info("Starting Hive %s, data folder %s", __version__, self.data_dir)
        for record in self.extensions.manager.records:
            if not record.active and record.reason != DISABLED_BY_OPERATOR:  # INFO said so
                log.warning("Extension %s is not active: %s", record.name, record.reason)
        if self.config.cluster.enabled:  # before the store opens: what it holds now
            await anyio.to_thread.run_sync(keep_previous_data, self.data_dir)
        store = await self.extensions.session_store(self._context("persistence"))
        if store is None:  # every store plugin disabled: nothing may be kept
            log.warning("No session store: persistent sessions live in memory only")
            store = MemorySessionStore()
        snapshot = await store.open()
        replicating: ReplicatingStore | None = None
        if self.config.cluster.enabled and self.config.cluster.replication.replica_count > 1:
            # Every write of a session also goes to its backups (but held QoS 1 deliveries).
            store = replicating = ReplicatingStore(store, self.config.persistence.hold_seconds)
        broker = self.broker = Broker(settings_from(self.config), store, self.extensions)
        self.services.bind(broker)
        broker.start(snapshot)
        extensions_started = False
        cluster: Cluster | None = None
        overload: OverloadMonitor | None = None
        watching = anyio.CancelScope()
        if self.config.overload_protection.enabled:
            overload = broker.overload = OverloadMonitor(
                cast("Collection[OverloadedConnection]", broker.connections),  # Channels all
                broker.settings.max_queue_size, broker.records.slowest_commit)
            tasks.start_soon(self._watch_overload, overload, watching)
        try:
            await self.extensions.start(self._context)
            extensions_started = True
            self._check_discovery_choice()
            if self.config.rest_api.enabled:  # before the join, so health answers during it
                self.rest_api = RestApi(self, self.config.rest_api.auth, self.backups)
                await self.rest_api.start(self.config.rest_api.effective_listeners())
            # The control center's view; a node without one still answers its peers' questions.
            views = NodeViews(self.services.node_id, broker, lambda: self.cluster,
                              self.extensions)
            if self.config.control_center.enabled:
                self.control_center = ControlCenter(self.config.control_center, views, self,
                                                    self.backups)
                await self.control_center.start(tasks)
            if self.config.cluster.enabled:
                self._not_ready = "joining the cluster"
                settings = cluster_settings(self.config)
                settings.replicas_folder = self.data_dir / "replicas"
                cluster = self.cluster = Cluster(self.services.node_id, settings, broker,
                                                 self.extensions, store=replicating,
                                                 kept_store=store)
                cluster.restore(snapshot)  # what it sends on again after the join
                cluster.client_queries.details = views.local_client_details
                self.services.members_from(cluster.view)
                cluster.client_services = ClusterClients(
                    cluster.node_id, self.services.clients, self.services.disconnect,
                    lambda: cluster.members, cluster.owner_of)
                self.services.cluster_from(cluster.client_services)
                if overload is not None:  # peers hear of this node's pressure, and it of theirs
                    pressure = cluster.peer_pressure
                    overload.cluster = ClusterPressure(pressure.link_bytes, pressure.peer_level,
                                                       pressure.announce)
                await cluster.start(tasks)
            if not self._stopping.is_set():
                self.listeners = await open_mqtt_listeners(
                    self.config.listeners, broker,
                    self.config.restrictions.incoming_bandwidth_throttling)
                log.info("Started Hive in %d ms", (time.monotonic() - begun) * 1000)
                self._not_ready = None
                if started is not None:
                    started()
            await self._stopping.wait()
            log.info("Shutting down Hive")
        finally:
            self._not_ready = "stopping"
            watching.cancel()  # every client is read again: the node says goodbye to them
            with anyio.CancelScope(shield=True):
                close_listeners(self.listeners)
                if self.rest_api is not None:
                    self.rest_api.close()
                if self.control_center is not None:
                    self.control_center.close()
                await self.backups.close()
                # The clients go first (their wills, their sessions written and replicated),
                # then the node leaves the cluster: its backups have everything by then.
                if cluster is not None:
                    cluster.leaving()
                await broker.stop()
                if cluster is not None:
                    await cluster.stop()
                if extensions_started:
                    await self.extensions.stop(self._context)
                await store.close()
            log.info("Hive stopped")

    @staticmethod
    async def _watch_overload(overload: OverloadMonitor, scope: anyio.CancelScope) -> None:
        with scope:
            await overload.run()

    def stop(self) -> None:
        """Ask the node to stop (from the event loop's thread)."""
        self._stop_requested = True
        if self._stopping is not None:
            self._stopping.set()

    # ------------------------------------------------------------------ status (NodeStatus)

    @property
    def node_id(self) -> str:
        return self.services.node_id

    def cluster_members(self) -> list[ClusterMember] | None:
        return self.cluster.view() if self.cluster is not None else None

    def broker_stats(self) -> BrokerStats | None:
        return self.broker.stats() if self.broker is not None else None

    def cluster_stats(self) -> ClusterStats | None:
        return self.cluster.stats() if self.cluster is not None else None

    def extension_metrics(self) -> dict[str, float]:
        """The counters and gauges extensions registered, by name."""
        metrics = self.services.metrics
        values: dict[str, float] = {name: c.value for name, c in metrics.counters.items()}
        for name, (read, _description) in metrics.gauges.items():
            try:
                values[name] = float(read())
            except Exception:  # an extension's gauge must not break the REST API
                log.exception("the gauge %s of an extension failed", name)
        return values

    def readiness(self) -> str | None:
        return self._not_ready

    def member_loads(self) -> dict[str, dict[str, Any]]:
        return self.cluster.load_report() if self.cluster is not None else {}

    def extension_counter_names(self) -> set[str]:
        return set(self.services.metrics.counters)

    def extension_metric_descriptions(self) -> dict[str, str]:
        metrics = self.services.metrics
        described = {name: c.description for name, c in metrics.counters.items()}
        described.update((name, d) for name, (_read, d) in metrics.gauges.items())
        return described

    def extension_failures(self) -> dict[str, int]:
        return dict(self.extensions.failures)

    def extension_hook_times(self) -> list[HookTime]:
        return self.extensions.hook_times()
