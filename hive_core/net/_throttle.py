"""``<restrictions><incoming-bandwidth-throttling>``: each client's reads paced to a byte rate.

A token bucket per connection: every read spends its size, the bucket refills at the configured
rate and holds at most one second's worth. When a read overdraws it, the connection stops
reading from its socket (``pause_reading``) until the debt is paid off; the client's kernel
buffers fill and TCP slows the client down. What already arrived is handled at once: the limit
is on the average, not on each packet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from hive_core.broker import Broker, ClientConnection

__all__ = ["ReadThrottle", "ThrottledConnection"]


class ReadThrottle:
    """Paces one transport's reads to ``rate`` bytes per second."""

    __slots__ = ("_allowance", "_last", "_resume", "rate", "transport")

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.transport: Any = None  # an asyncio transport, set at connection_made
        self._allowance = float(rate)  # one second's worth may come at once
        self._last = time.monotonic()
        self._resume: asyncio.TimerHandle | None = None

    def spent(self, size: int) -> None:
        """``size`` bytes were read: pause reading when that overdraws the bucket."""
        now = time.monotonic()
        allowance = min(self.rate, self._allowance + (now - self._last) * self.rate) - size
        self._allowance, self._last = allowance, now
        if allowance < 0 and self._resume is None and self.transport is not None \
                and not self.transport.is_closing():
            self.transport.pause_reading()
            self._resume = asyncio.get_running_loop().call_later(
                -allowance / self.rate, self._resume_reading)

    def _resume_reading(self) -> None:
        self._resume = None
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def close(self) -> None:
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        self.transport = None


class ThrottledConnection(ClientConnection):
    """A :class:`ClientConnection` whose reads are paced by a :class:`ReadThrottle`."""

    __slots__ = ("throttle",)

    def __init__(self, broker: Broker, listener: str, rate: int) -> None:
        super().__init__(broker, listener)
        self.throttle = ReadThrottle(rate)
        self.data_received = _paced(  # type: ignore[method-assign,assignment]
            self.channel.receive_data, self.throttle)

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.throttle.transport = transport

    def connection_lost(self, exc: BaseException | None = None) -> None:
        self.throttle.close()
        super().connection_lost(exc)


def _paced(receive: Callable[[bytes], None], throttle: ReadThrottle) -> Callable[[bytes], None]:
    def data_received(data: bytes) -> None:
        receive(data)
        throttle.spent(len(data))

    return data_received
