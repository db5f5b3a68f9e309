"""The bandwidth throttle (<incoming-bandwidth-throttling>) and the channel's own pauses (receive
maximum, overload protection) share one socket: neither resumes reading the other paused."""

from __future__ import annotations

import asyncio
from typing import Any

from hive_core.net._throttle import ReadThrottle


class Transport:
    def __init__(self) -> None:
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return False


def test_a_drained_backlog_does_not_resume_what_the_channel_holds() -> None:
    async def scenario() -> None:
        received: list[bytes] = []
        held = {"channel": False}
        throttle = ReadThrottle(1000, received.append, lambda: held["channel"])
        transport: Any = Transport()
        throttle.transport = transport
        throttle.received(b"x" * 1500)  # one second's worth passes, the rest waits
        assert not transport.reading and throttle.waiting
        held["channel"] = True  # overload protection holds the client meanwhile
        await asyncio.sleep(0.7)  # the backlog is handed on in slices
        assert not throttle.waiting and sum(map(len, received)) == 1500
        assert not transport.reading  # still held: the channel resumes it when it lets go
        throttle.close()

    asyncio.run(scenario())
