"""``<restrictions><incoming-bandwidth-throttling>``: each client's input paced to a byte rate.

A token bucket per connection, refilled at the configured rate and holding at most one second's
worth. Bytes are handed on only as far as the bucket allows; the rest of a read waits in a
backlog, and while there is one the connection stops reading from its socket
(``pause_reading``): the client's kernel buffers fill and TCP slows the client down. The backlog
is handed on in slices of a tenth of a second's worth as the bucket refills.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from hive_core.broker import Broker, ClientConnection

__all__ = ["ReadThrottle", "ThrottledConnection"]

SLICES_PER_SECOND = 10


class ReadThrottle:
    """Hands what a transport reads to ``receive`` at no more than ``rate`` bytes per second."""

    __slots__ = ("_allowance", "_backlog", "_drain", "_last", "_slice", "paused_elsewhere",
                 "rate", "receive", "transport")

    def __init__(self, rate: int, receive: Callable[[bytes], None],
                 paused_elsewhere: Callable[[], bool] = lambda: False) -> None:
        self.rate = rate
        self.receive = receive
        # Reading may also be paused by the channel (receive maximum, overload protection):
        # then the backlog drained does not resume it.
        self.paused_elsewhere = paused_elsewhere
        self.transport: Any = None  # an asyncio transport, set at connection_made
        self._allowance = float(rate)  # one second's worth may come at once
        self._last = time.monotonic()
        self._slice = max(1, rate // SLICES_PER_SECOND)
        self._backlog = bytearray()
        self._drain: asyncio.TimerHandle | None = None

    def _refill(self) -> None:
        now = time.monotonic()
        self._allowance = min(float(self.rate),
                              self._allowance + (now - self._last) * self.rate)
        self._last = now

    def received(self, data: bytes) -> None:
        """Bytes read from the client: passed on now as far as the rate allows, later the rest."""
        if self._backlog:  # a read that was already under way when reading paused
            self._backlog += data
            return
        self._refill()
        if len(data) <= self._allowance:
            self._allowance -= len(data)
            self.receive(data)
            return
        now = max(0, int(self._allowance))
        self._allowance -= now
        self._backlog += memoryview(data)[now:]
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.pause_reading()
        self._schedule()
        if now:
            self.receive(data[:now])

    def _schedule(self) -> None:
        wanted = min(self._slice, len(self._backlog))
        delay = max(0.0, (wanted - self._allowance) / self.rate)
        self._drain = asyncio.get_running_loop().call_later(delay, self._hand_on)

    def _hand_on(self) -> None:
        self._drain = None
        self._refill()
        size = min(len(self._backlog), max(0, int(self._allowance)))
        chunk = bytes(self._backlog[:size])
        del self._backlog[:size]
        self._allowance -= size
        if self._backlog:
            self._schedule()
        elif self.transport is not None and not self.transport.is_closing() \
                and not self.paused_elsewhere():
            self.transport.resume_reading()
        if chunk:
            self.receive(chunk)

    @property
    def waiting(self) -> bool:
        """Bytes wait to be handed on: reading stays paused until they are."""
        return bool(self._backlog)

    def close(self) -> None:
        """The connection is gone: what waits is dropped."""
        if self._drain is not None:
            self._drain.cancel()
            self._drain = None
        self._backlog.clear()
        self.transport = None


class ThrottledConnection(ClientConnection):
    """A :class:`ClientConnection` whose input goes through a :class:`ReadThrottle`."""

    __slots__ = ("throttle",)

    def __init__(self, broker: Broker, listener: str, rate: int) -> None:
        super().__init__(broker, listener)
        channel = self.channel
        self.throttle = ReadThrottle(rate, channel.receive_data,
                                     lambda: channel.throttled or channel.held)
        self.data_received = self.throttle.received  # type: ignore[method-assign]

    def resume_reading(self) -> None:
        if not self.throttle.waiting:  # else the throttle resumes once its backlog is out
            super().resume_reading()

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.throttle.transport = transport

    def connection_lost(self, exc: BaseException | None = None) -> None:
        self.throttle.close()
        super().connection_lost(exc)
