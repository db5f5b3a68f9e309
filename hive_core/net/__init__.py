"""Listeners: TCP, TLS and WebSocket in front of the broker (PROXY protocol header on request);
TLS on node links."""

from hive_core.net._addresses import (
    AdvertisedAddress,
    advertised_address,
    default_route_address,
)
from hive_core.net._bind import ListenError, listen_error
from hive_core.net._listeners import (
    BoundListener,
    bound_address,
    close_listeners,
    open_mqtt_listener,
    open_mqtt_listeners,
)
from hive_core.net._proxy_header import ProxyHeader, ProxyHeaderError, ProxyHeaderParser
from hive_core.net._tls import TLSConfigError, client_context, cluster_contexts, server_context
from hive_core.net._tls_links import TlsAcceptor, dial_tls, handshake_failure
from hive_core.net._websocket import WebSocketProtocol

__all__ = [
    "AdvertisedAddress",
    "BoundListener",
    "ListenError",
    "ProxyHeader",
    "ProxyHeaderError",
    "ProxyHeaderParser",
    "TLSConfigError",
    "TlsAcceptor",
    "WebSocketProtocol",
    "advertised_address",
    "bound_address",
    "client_context",
    "close_listeners",
    "cluster_contexts",
    "default_route_address",
    "dial_tls",
    "handshake_failure",
    "listen_error",
    "open_mqtt_listener",
    "open_mqtt_listeners",
    "server_context",
]
