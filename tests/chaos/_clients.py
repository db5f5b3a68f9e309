"""The chaos run's MQTT 5 clients: raw sockets on Hive's own codec, recording every packet.

The protocol side is the simulation's :class:`~sim._mqtt_client.RecordingClient` on a real TCP
connection, so both fill the same :class:`~sim._mqtt_client.Record` and one checker counts both.
A client of our
own rather than paho's, because the checker needs what paho does not tell: whether a QoS 2
PUBLISH is new or the resend of an exchange in progress (its packet id is among those received
and not yet released), and the CONNACK's `session present` of every connect.

Each client has a home node; it connects there while that node's process runs, else to another
running one. A connection that gives no CONNACK within ``CONNECT_TIMEOUT`` (a frozen node), or
stays silent past 1.5 keep-alives, is dropped and the client connects again, to another node
than the one that failed it (as a client behind a load balancer would).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from sim._mqtt_client import Record, RecordingClient

from hive_core.mqtt import (
    Connect,
    Disconnect,
    PacketDecoder,
    PropertyId,
)

KEEP_ALIVE = 4
CONNECT_TIMEOUT = 3.0
IN_FLIGHT = 20  # a publisher's messages not yet acknowledged, at most
TOPIC = "chaos"


class Clock:
    """Seconds since the run began (what the record and the schedule say)."""

    def __init__(self) -> None:
        self.begun = time.monotonic()

    @property
    def now(self) -> float:
        return time.monotonic() - self.begun


class RealClient(RecordingClient, asyncio.Protocol):
    """A client of the chaos run: its connection is a TCP socket to a node's MQTT port."""

    def __init__(self, client_id: str, role: str, qos: int, home: str, record: Record,
                 clock: Clock, rng: random.Random,
                 ports: Callable[[], dict[str, int]]) -> None:
        super().__init__(client_id, role, qos, record, TOPIC, KEEP_ALIVE)
        self.home = home
        self.clock = clock
        self.rng = rng
        self.ports = ports  # name -> MQTT port of each node whose process runs now
        self.stopped = False
        self.connects = 0
        self.avoid: str | None = None  # the node of the last failed attempt
        self._task: asyncio.Task[None] | None = None

    @property
    def now(self) -> float:
        return self.clock.now

    def later(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        asyncio.get_running_loop().call_later(delay, callback, *args)

    def refused(self) -> None:
        self.avoid = self.node  # the next attempt goes to another node

    def accepted(self) -> None:
        self.avoid = None
        self.connects += 1

    # -- connecting

    def connect(self) -> None:
        if self.stopped or self.connected or self.connecting:
            return
        self.connecting = True
        self._task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        ports = self.ports()
        if not ports:
            self.connecting = False
            self.reconnect_later()
            return
        if self.avoid in ports and len(ports) > 1:
            del ports[self.avoid]
        name = self.home if self.home in ports else self.rng.choice(sorted(ports))
        self.node = name
        self.decoder = PacketDecoder(protocol_version=5, server=False)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.create_connection(lambda: self, "127.0.0.1",
                                                          ports[name]), CONNECT_TIMEOUT)
        except (TimeoutError, OSError):
            self.connecting = False
            self.avoid = name
            self.reconnect_later()
            return
        self.send(Connect(self.client_id, 5, clean_start=False, keep_alive=KEEP_ALIVE,
                          properties={PropertyId.SESSION_EXPIRY_INTERVAL: 3600}))
        transport = self.transport
        await asyncio.sleep(CONNECT_TIMEOUT)
        if transport is self.transport and self.connecting:  # no CONNACK: a frozen node
            self.avoid = name
            self.drop()

    def reconnect_later(self) -> None:
        if not self.stopped:
            asyncio.get_running_loop().call_later(self.rng.uniform(0.3, 1.5), self.connect)

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def stop(self) -> None:
        self.stopped = True
        if self.transport is not None and self.connected:
            self.send(Disconnect())
        self.drop()

    def data_received(self, data: bytes) -> None:
        self.last_heard = self.clock.now
        try:
            packets = list(self.decoder.feed(data))
        except Exception as exc:  # a malformed packet from a node: recorded, connection gone
            self.record.errors.append(f"{self.client_id}: {exc!r}")
            self.drop()
            return
        for packet in packets:
            self.on_packet(packet)
