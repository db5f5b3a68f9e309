"""The asyncio side of one client connection: a thin shell around its :class:`Channel`.

The event loop calls straight into the channel for every read (``data_received`` is the
channel's own ``receive_data``: no extra call per read); this shell only carries the transport,
its deadline (in the broker's :class:`Deadlines`) and the loop's flow-control callbacks.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from hive_core.broker._broker import Broker
from hive_core.broker._channel import Channel
from hive_core.broker._deadlines import Bucket, Deadlines

LINGER = 2.0
"""Seconds a closed connection keeps reading (and dropping) input so the client reads our last
packets: see :meth:`ClientConnection.close`."""


class Transport(Protocol):
    """What a connection needs from the network: asyncio's transport, or a WebSocket adapter."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool: ...

    def get_extra_info(self, name: str, default: Any = None) -> Any: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def can_write_eof(self) -> bool: ...

    def write_eof(self) -> None: ...


class ClientConnection(asyncio.Protocol):
    """An asyncio protocol for one MQTT client; the MQTT itself is in ``self.channel``."""

    __slots__ = ("_deadline", "_deadlines", "_linger", "channel", "data_received", "transport")

    def __init__(self, broker: Broker, listener: str = "tcp") -> None:
        self._deadlines = broker.deadlines
        self._deadline: Bucket | None = None  # where its deadline waits (broker/_deadlines.py)
        self._linger: asyncio.TimerHandle | None = None
        self.transport: Transport | None = None
        self.channel = Channel(broker, self, listener)
        # Set before the loop makes the transport: uvloop looks data_received up once, then.
        self.data_received = self.channel.receive_data  # type: ignore[method-assign]

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: BaseException | None = None) -> None:
        self._cancel_deadline()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self.channel.connection_lost()

    def pause_writing(self) -> None:
        self.channel.pause_writing()

    def resume_writing(self) -> None:
        self.channel.resume_writing()

    # -- the channel's io (ChannelIo)

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        """Close so that the client can read what was written last (a DISCONNECT's reason).

        Closing a socket whose input is not read makes the kernel reset the connection, and a
        client still sending then loses what it had not read yet. So the sending side is shut
        first, what arrives is read and dropped (the channel is closed), and the socket closes
        when the client closes its side, or after LINGER seconds.
        """
        self._cancel_deadline()
        transport = self.transport
        if transport is None or transport.is_closing() or self._linger is not None:
            return
        try:
            transport.resume_reading()  # throttled or not: the input must be drained now
            if transport.can_write_eof():
                transport.write_eof()
        except (OSError, RuntimeError):  # the connection broke meanwhile
            transport.close()
            return
        self._linger = asyncio.get_running_loop().call_later(LINGER, transport.close)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if self.transport is None:
            return default
        return self.transport.get_extra_info(name, default)

    def arm_deadline(self, seconds: float) -> None:
        self._cancel_deadline()
        if seconds > 0:
            self._deadline = self._deadlines.arm(self, seconds)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def deadline_passed(self) -> None:
        self._deadline = None
        self.channel.check_deadline(self.channel.broker.monotonic())

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            Deadlines.cancel(self, self._deadline)
            self._deadline = None
