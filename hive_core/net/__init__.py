"""Listeners: TCP, TLS and WebSocket in front of the broker; TLS on node links."""

from hive_core.net._tls import TLSConfigError, client_context, cluster_contexts, server_context
from hive_core.net._tls_links import TlsAcceptor, dial_tls, handshake_failure
from hive_core.net._websocket import WebSocketProtocol

__all__ = ["TLSConfigError", "TlsAcceptor", "WebSocketProtocol", "client_context",
           "cluster_contexts", "dial_tls", "handshake_failure", "server_context"]
