"""MQTT over WebSocket (subprotocol ``mqtt``): a wsproto adapter in front of a ClientConnection."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.extensions import Extension, PerMessageDeflate
from wsproto.utilities import RemoteProtocolError

from hive_core.broker import Broker, ClientConnection
from hive_core.net._throttle import ReadThrottle

log = logging.getLogger("hive.websocket")


class WebSocketProtocol(asyncio.Protocol):
    def __init__(self, broker: Broker, path: str, subprotocols: tuple[str, ...],
                 listener: str, incoming_rate: int = 0, allow_extensions: bool = False) -> None:
        self._broker = broker
        # <allow-extensions>: permessage-deflate, the one WebSocket extension clients offer
        self._extensions: list[Extension] = [PerMessageDeflate()] if allow_extensions else []
        # <incoming-bandwidth-throttling>: counted on the socket's bytes, frames included
        self._throttle = ReadThrottle(incoming_rate, self._process, self._paused_by_channel) \
            if incoming_rate else None
        self._path = path
        self._subprotocols = subprotocols
        self._listener = listener
        self._ws = WSConnection(ConnectionType.SERVER)
        self._transport: asyncio.Transport | None = None
        self._mqtt: ClientConnection | None = None
        self._upgrade_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport: no isinstance check here.
        self._transport = cast(asyncio.Transport, transport)
        if self._throttle is not None:
            self._throttle.transport = transport
        # The broker's no-CONNECT timeout starts at the upgrade; this one covers the upgrade.
        self._upgrade_deadline = asyncio.get_running_loop().call_later(
            self._broker.settings.connect_timeout, self._upgrade_timed_out)

    def _paused_by_channel(self) -> bool:
        channel = self._mqtt.channel if self._mqtt is not None else None
        return channel is not None and (channel.throttled or channel.held)

    def _upgrade_timed_out(self) -> None:
        if self._mqtt is None:
            log.info("no WebSocket upgrade within %.1f s: closing",
                     self._broker.settings.connect_timeout)
            self._close_transport()

    def data_received(self, data: bytes) -> None:
        if self._throttle is not None:
            self._throttle.received(data)
        else:
            self._process(data)

    def _process(self, data: bytes) -> None:
        try:
            self._ws.receive_data(data)
            events = list(self._ws.events())
        except RemoteProtocolError as exc:
            log.info("bad WebSocket input: %s", exc)
            self._send(exc.event_hint or RejectConnection(status_code=400))
            self._close_transport()
            return
        for event in events:
            if isinstance(event, Request):
                self._handshake(event)
            elif isinstance(event, BytesMessage):
                if self._mqtt is not None:
                    self._mqtt.data_received(bytes(event.data))
            elif isinstance(event, TextMessage):
                # MQTT over WebSocket is binary only [MQTT-6.0.0-1].
                self._send(CloseConnection(code=1003, reason="binary frames only"))
                self._close_transport()
            elif isinstance(event, Ping):
                self._send(event.response())
            elif isinstance(event, CloseConnection):
                if self._ws.state.name == "REMOTE_CLOSING":
                    self._send(event.response())
                self._close_transport()

    def _handshake(self, request: Request) -> None:
        offered = list(request.subprotocols)
        chosen = next((p for p in offered if p in self._subprotocols), None)
        path = request.target.split("?", 1)[0]
        if path != self._path or chosen is None:
            log.info("WebSocket upgrade refused: path %r, subprotocols %r", path, offered)
            self._send(RejectConnection(status_code=400 if chosen is None else 404))
            self._close_transport()
            return
        if self._upgrade_deadline is not None:
            self._upgrade_deadline.cancel()
        self._send(AcceptConnection(subprotocol=chosen, extensions=self._extensions))
        self._mqtt = ClientConnection(self._broker, self._listener)
        self._mqtt.connection_made(_FrameWriter(self))

    def _send(self, event: Any) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(self._ws.send(event))

    def _close_transport(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._throttle is not None:
            self._throttle.close()
        if self._upgrade_deadline is not None:
            self._upgrade_deadline.cancel()
        if self._mqtt is not None:
            self._mqtt.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._mqtt is not None:
            self._mqtt.pause_writing()

    def resume_writing(self) -> None:
        if self._mqtt is not None:
            self._mqtt.resume_writing()


class _FrameWriter:
    """The transport a ClientConnection sees: each write becomes one binary frame."""

    def __init__(self, protocol: WebSocketProtocol) -> None:
        self._protocol = protocol

    def write(self, data: bytes) -> None:
        self._protocol._send(BytesMessage(data=data))

    def close(self) -> None:
        protocol = self._protocol
        if protocol._ws.state.name == "OPEN":
            protocol._send(CloseConnection(code=1000))
        protocol._close_transport()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        """WebSocket's own half-close: a Close frame; the client's Close ends the connection."""
        protocol = self._protocol
        if protocol._ws.state.name == "OPEN":
            protocol._send(CloseConnection(code=1000))

    def is_closing(self) -> bool:
        transport = self._protocol._transport
        return transport is None or transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        transport = self._protocol._transport
        return default if transport is None else transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        transport = self._protocol._transport
        if transport is not None and not transport.is_closing():
            transport.pause_reading()

    def resume_reading(self) -> None:
        protocol = self._protocol
        transport = protocol._transport
        if protocol._throttle is not None and protocol._throttle.waiting:
            return  # the throttle resumes once its backlog is handed on
        if transport is not None and not transport.is_closing():
            transport.resume_reading()
