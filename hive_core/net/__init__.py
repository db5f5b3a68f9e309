"""Listeners: TCP, TLS and WebSocket in front of the broker; TLS on node links."""

from hive_core.net._listeners import (
    BoundListener,
    bound_address,
    close_listeners,
    open_mqtt_listener,
    open_mqtt_listeners,
)
from hive_core.net._tls import TLSConfigError, client_context, cluster_contexts, server_context
from hive_core.net._tls_links import TlsAcceptor, dial_tls, handshake_failure
from hive_core.net._websocket import WebSocketProtocol

__all__ = ["BoundListener", "TLSConfigError", "TlsAcceptor", "WebSocketProtocol",
           "bound_address", "client_context", "close_listeners", "cluster_contexts", "dial_tls",
           "handshake_failure", "open_mqtt_listener", "open_mqtt_listeners", "server_context"]
