"""The network side of a channel in memory, for the channel's tests: what the channel writes
(decoded as a client reads it), whether it closed, its deadline, whether it is read."""

from __future__ import annotations

from typing import Any

from hive_core.mqtt import PacketDecoder


class Io:
    def __init__(self, version: int) -> None:
        self.decoder = PacketDecoder(protocol_version=version, server=False)
        self.packets: list[Any] = []
        self.closed = False
        self.deadline = 0.0
        self.reading = True

    def write(self, data: bytes) -> None:
        self.packets += self.decoder.feed(data)

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def arm_deadline(self, seconds: float) -> None:
        self.deadline = seconds

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
