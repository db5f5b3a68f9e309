"""Opening the MQTT listeners of ``<listeners>``: TCP, TLS, WebSocket and secure WebSocket.

Each accepted connection gets an asyncio protocol whose reads go straight into a
:class:`~hive_core.broker.Channel` (see ``docs/architecture.md`` for why the hot path keeps
asyncio protocols under the node's anyio task group).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hive_core.broker import Broker, ClientConnection
from hive_core.net._bind import listen_error
from hive_core.net._proxy_protocol import ProxyHeaderReader
from hive_core.net._throttle import ThrottledConnection
from hive_core.net._tls import server_context
from hive_core.net._websocket import WebSocketProtocol

log = logging.getLogger("hive")

BACKLOG = 4096


@dataclass
class BoundListener:
    """A listener that is open: its kind and name from the config, where it listens."""

    kind: str
    name: str
    host: str
    port: int
    server: asyncio.AbstractServer = field(repr=False)


def bound_address(server: asyncio.AbstractServer) -> tuple[str, int]:
    """Where a server listens, IPv6 hosts in brackets as URLs and logs want them."""
    sock = server.sockets[0]  # type: ignore[attr-defined]
    host, port = sock.getsockname()[:2]
    if sock.family == socket.AF_INET6:
        host = f"[{host}]"
    return host, port


async def open_mqtt_listener(listener: Any, broker: Broker, incoming_rate: int = 0,
                             ) -> BoundListener:
    """Open one ``<...-listener>`` of the config for ``broker``'s clients.

    ``incoming_rate`` (bytes per second, 0: unlimited) paces what each client may send
    (``<restrictions><incoming-bandwidth-throttling>``). A bind that fails raises
    :class:`~hive_core.net.ListenError` naming the listener's element and address.
    """
    loop = asyncio.get_running_loop()
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
        allow_extensions = bool(listener.allow_extensions)

        def factory() -> asyncio.Protocol:
            return WebSocketProtocol(broker, path, subprotocols, name, incoming_rate,
                                     allow_extensions)
    elif incoming_rate:
        def factory() -> asyncio.Protocol:
            return ThrottledConnection(broker, name, incoming_rate)
    else:
        def factory() -> asyncio.Protocol:
            return ClientConnection(broker, name)
    handshake_timeout = (listener.tls.handshake_timeout / 1000) if context else None
    proxied = bool(listener.proxy_protocol)
    if proxied:  # the header first, then the protocol above (its TLS layer made by the reader)
        inner, inner_tls = factory, context
        trusted = listener.trusted_proxy_networks()

        def factory() -> asyncio.Protocol:
            return ProxyHeaderReader(broker, name, inner, inner_tls, handshake_timeout or 10.0,
                                     trusted)
        context = None
        if not trusted:
            log.warning("listener %s takes a PROXY protocol header from any address: a client "
                        "that reaches it can claim any address; list the load balancers in "
                        "<trusted-proxies>", name)
    try:
        server = await loop.create_server(
            factory, listener.bind_address, listener.port, ssl=context, backlog=BACKLOG,
            reuse_address=True, ssl_handshake_timeout=handshake_timeout if context else None)
    except OSError as exc:
        element = f"<{type(listener).__xml_tag__}>" + (f" {listener.name}" if listener.name else "")
        raise listen_error(element, listener.bind_address, listener.port, exc) from exc
    host, port = bound_address(server)
    log.info("Started %s listener %s on address %s and on port %d%s", kind, name, host, port,
             ", PROXY protocol header required" if proxied else "")
    return BoundListener(kind, name, host, port, server)


async def open_mqtt_listeners(listeners: Iterable[Any], broker: Broker, incoming_rate: int = 0,
                              ) -> list[BoundListener]:
    """Open every listener in order; on a failure the ones already open are closed again."""
    opened: list[BoundListener] = []
    try:
        for listener in listeners:
            opened.append(await open_mqtt_listener(listener, broker, incoming_rate))
    except BaseException:
        close_listeners(opened)
        raise
    return opened


def close_listeners(listeners: Iterable[BoundListener]) -> None:
    for bound in listeners:
        bound.server.close()
