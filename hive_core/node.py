"""A Hive node: the broker, its store and its listeners, run until told to stop."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hive_core import __version__
from hive_core.admin import RestApi
from hive_core.broker import Broker, BrokerSettings, ClientConnection
from hive_core.broker._services import NodeServices
from hive_core.cluster import Cluster, ClusterSettings, HealthCheckSettings
from hive_core.config import HiveConfig
from hive_core.net import WebSocketProtocol, cluster_contexts, server_context
from hive_core.persistence import MemorySessionStore
from hive_core.plugins import ExtensionManager, Extensions
from hive_ext_api import ExtensionContext

log = logging.getLogger("hive")


def node_id(data_dir: Path) -> str:
    """This node's persistent id, made once and kept in its data folder."""
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
    bind_host = transport.bind_address or "0.0.0.0"
    external_host = transport.external_address or (
        bind_host if bind_host not in ("0.0.0.0", "::") else socket.gethostbyname(
            socket.gethostname()))
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
    )


def health_check_settings(config: HiveConfig, bind_host: str) -> HealthCheckSettings | None:
    """<tcp-health-check> resolved: None when disabled; binds where the transport does."""
    check = config.cluster.failure_detection.tcp_health_check
    if not check.enabled:
        return None
    return HealthCheckSettings(check.bind_address or bind_host, check.bind_port,
                               check.port_range, check.external_address, check.external_port)


class ClusterConfigError(Exception):
    """A cluster configuration this node cannot run; the message says what to change."""


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
        connect_timeout=limits.no_connect_idle_timeout / 1000,
    )


@dataclass
class BoundListener:
    kind: str
    name: str
    host: str
    port: int
    server: asyncio.AbstractServer = field(repr=False)


class HiveNode:
    def __init__(self, config: HiveConfig, data_dir: Path, extra_extensions: Iterable[Any] = (),
                 load_installed: bool = True) -> None:
        self.config = config
        self.data_dir = data_dir
        self.listeners: list[BoundListener] = []
        self.broker: Broker | None = None
        self.cluster: Cluster | None = None
        self.rest_api: RestApi | None = None
        manager = ExtensionManager(config.extensions.disabled,
                                   discover_installed=load_installed)
        taken: Counter[str] = Counter()
        for plugin in extra_extensions:
            # Modules by their name, objects by their class; a second of one class gets "-2".
            name = getattr(plugin, "__name__", None) or type(plugin).__name__
            taken[name] += 1
            manager.register(name if taken[name] == 1 else f"{name}-{taken[name]}", plugin)
        self.extensions = Extensions(manager)
        self.services = NodeServices(node_id=node_id(data_dir), version=__version__)
        self._stopping = asyncio.Event()

    def _context(self, name: str) -> ExtensionContext:
        folder = self.data_dir / "extensions" / name
        return ExtensionContext(name, folder, self.services, logging.getLogger(f"hive.ext.{name}"),
                                self.config, self.data_dir)

    async def run(self, started: Callable[[], None] | None = None,
                  install_signal_handlers: bool = True) -> None:
        begun = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log.info("Starting Hive %s, data folder %s", __version__, self.data_dir)
        loop = asyncio.get_running_loop()
        # Signals first: a stop asked for while the store opens ends the start cleanly.
        if install_signal_handlers:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.stop)
        for record in self.extensions.manager.records:
            if not record.active:
                log.warning("Extension %s is not active: %s", record.name, record.reason)
        store = await self.extensions.session_store(self._context("persistence"))
        if store is None:  # every store plugin disabled: nothing may be kept
            log.warning("No session store: persistent sessions live in memory only")
            store = MemorySessionStore()
        snapshot = await store.open()
        broker = self.broker = Broker(settings_from(self.config), store, self.extensions)
        self.services.bind(broker)
        broker.start(snapshot)
        extensions_started = False
        cluster: Cluster | None = None
        try:
            await self.extensions.start(self._context)
            extensions_started = True
            if self.config.rest_api.enabled:  # before the join, so health answers during it
                self.rest_api = RestApi(self)
                await self.rest_api.start(self.config.rest_api.effective_listeners())
            if self.config.cluster.enabled:
                cluster = self.cluster = Cluster(self.services.node_id, cluster_settings(
                    self.config), broker, self.extensions)
                await cluster.start()
            for listener in self.config.listeners:
                if self._stopping.is_set():
                    break
                await self._bind(listener)
            else:
                log.info("Started Hive in %d ms", (time.monotonic() - begun) * 1000)
                if started is not None:
                    started()
            await self._stopping.wait()
            log.info("Shutting down Hive")
        finally:
            for bound in self.listeners:
                bound.server.close()
            if self.rest_api is not None:
                self.rest_api.close()
            if cluster is not None:
                await cluster.stop()
            await broker.stop()
            if extensions_started:
                await self.extensions.stop(self._context)
            await store.close()
            if install_signal_handlers:
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(signum)
            log.info("Hive stopped")

    def stop(self) -> None:
        self._stopping.set()

    async def _bind(self, listener: Any) -> None:
        loop = asyncio.get_running_loop()
        broker = self.broker
        assert broker is not None
        kind = listener.kind
        name = listener.display_name
        context = None
        if kind.startswith("tls"):
            tls = listener.tls
            context = server_context(
                tls.keystore.path, tls.keystore.password, tls.keystore.private_key_password,
                tls.truststore.path if tls.truststore else None,
                tls.truststore.password if tls.truststore else None,
                tls.client_authentication_mode, tls.protocols, tls.cipher_suites)
        if kind.endswith("websocket"):
            path, subprotocols = listener.path, tuple(listener.subprotocols)

            def factory() -> asyncio.Protocol:
                return WebSocketProtocol(broker, path, subprotocols, name)
        else:
            def factory() -> asyncio.Protocol:
                return ClientConnection(broker, name)  # type: ignore[return-value]
        server = await loop.create_server(
            factory, listener.bind_address, listener.port, ssl=context, backlog=4096,
            reuse_address=True,
            ssl_handshake_timeout=(listener.tls.handshake_timeout / 1000) if context else None)
        sock = server.sockets[0]
        host, port = sock.getsockname()[:2]
        if sock.family == socket.AF_INET6:
            host = f"[{host}]"
        self.listeners.append(BoundListener(kind, name, host, port, server))
        log.info("Started %s listener %s on address %s and on port %d", kind, name, host, port)
