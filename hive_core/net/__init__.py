"""Listeners: TCP, TLS and WebSocket in front of the broker."""

from hive_core.net._tls import TLSConfigError, server_context
from hive_core.net._websocket import WebSocketProtocol

__all__ = ["TLSConfigError", "WebSocketProtocol", "server_context"]
