"""The chaos run's MQTT 5 clients: raw sockets on Hive's own codec, recording every packet.

The protocol side is the simulation's :class:`~sim._world.SimClient` on a real TCP connection,
so both fill the same :class:`~sim._world.Record` and one checker counts both. A client of our
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
import itertools
import random
import time
from collections.abc import Callable
from typing import Any

from sim._world import Delivery, Record

from hive_core.mqtt import (
    ConnAck,
    Connect,
    Disconnect,
    PacketDecoder,
    PingReq,
    PropertyId,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    encode_packet,
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


class RealClient(asyncio.Protocol):
    def __init__(self, client_id: str, role: str, qos: int, home: str, record: Record,
                 clock: Clock, rng: random.Random,
                 ports: Callable[[], dict[str, int]]) -> None:
        self.client_id = client_id
        self.role = role  # "pub" or "sub"
        self.qos = qos
        self.home = home
        self.record = record
        self.clock = clock
        self.rng = rng
        self.ports = ports  # name -> MQTT port of each node whose process runs now
        self.transport: asyncio.Transport | None = None
        self.node: str | None = None
        self.connected = False
        self.connecting = False
        self.had_session = False
        self.stopped = False
        self.decoder = PacketDecoder(protocol_version=5, server=False)
        self.pids = itertools.cycle(range(1, 65536))
        self.outgoing: dict[int, tuple[int, str]] = {}  # pid -> (seq, "publish" | "pubrel")
        self.unsent: list[int] = []  # seqs published while down or refused: sent at connect
        self.awaiting_rel: set[int] = set()  # inbound QoS 2 ids, PUBREC sent
        self.seq = 0
        self.last_heard = 0.0
        self.connects = 0
        self.avoid: str | None = None  # the node of the last failed attempt
        self._task: asyncio.Task[None] | None = None

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
            self._retry()
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
            self._retry()
            return
        self.send(Connect(self.client_id, 5, clean_start=False, keep_alive=KEEP_ALIVE,
                          properties={PropertyId.SESSION_EXPIRY_INTERVAL: 3600}))
        transport = self.transport
        await asyncio.sleep(CONNECT_TIMEOUT)
        if transport is self.transport and self.connecting:  # no CONNACK: a frozen node
            self.avoid = name
            self.drop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.last_heard = self.clock.now

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.connected = False
        self.connecting = False
        self._retry()

    def _retry(self) -> None:
        if not self.stopped:
            asyncio.get_running_loop().call_later(self.rng.uniform(0.3, 1.5), self.connect)

    def drop(self) -> None:
        """Close the connection (a client that decided its node is gone, or moves)."""
        if self.transport is not None:
            self.transport.abort()

    def stop(self) -> None:
        self.stopped = True
        if self.transport is not None and self.connected:
            self.send(Disconnect())
        self.drop()

    def send(self, packet: Any) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_packet(packet, 5))

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

    # -- the protocol (as SimClient's)

    def on_packet(self, packet: Any) -> None:
        record = self.record
        if isinstance(packet, ConnAck):
            self.connecting = False
            if packet.reason_code != 0:
                record.refusals += 1
                self.avoid = self.node
                self.drop()
                return
            self.connected = True
            self.avoid = None
            self.connects += 1
            if self.had_session and not packet.session_present:
                record.session_lost.append((self.client_id, self.node or "", self.clock.now))
                self.awaiting_rel.clear()
            self.had_session = True
            if self.role == "sub" and (not packet.session_present
                                       or self.client_id not in record.subscribed_at):
                self.send(Subscribe(self._pid(), [SubscriptionRequest(f"{TOPIC}/#",
                                                                      self.qos)]))
            self._resend(packet.session_present)
            asyncio.get_running_loop().call_later(KEEP_ALIVE, self._keep_alive, self.transport)
        elif isinstance(packet, SubAck):
            record.subscribed_at.setdefault(self.client_id, self.clock.now)
        elif isinstance(packet, Publish):
            self._on_publish(packet)
        elif isinstance(packet, PubAck):
            entry = self.outgoing.pop(packet.packet_id, None)
            if entry is not None and packet.reason_code < 0x80:
                record.acked.add((self.client_id, entry[0]))
            elif entry is not None:
                self.unsent.append(entry[0])
        elif isinstance(packet, PubRec):
            entry = self.outgoing.get(packet.packet_id)
            if entry is not None and packet.reason_code < 0x80:
                record.acked.add((self.client_id, entry[0]))
                self.outgoing[packet.packet_id] = (entry[0], "pubrel")
                self.send(PubRel(packet.packet_id))
            elif entry is not None:
                del self.outgoing[packet.packet_id]
                self.unsent.append(entry[0])
        elif isinstance(packet, PubComp):
            self.outgoing.pop(packet.packet_id, None)
        elif isinstance(packet, PubRel):
            self.awaiting_rel.discard(packet.packet_id)
            self.send(PubComp(packet.packet_id))
        elif isinstance(packet, Disconnect):
            self.drop()

    def _on_publish(self, packet: Publish) -> None:
        publisher, _, seq = packet.payload.decode().partition(":")
        new = True
        if packet.qos == 2:
            new = packet.packet_id not in self.awaiting_rel
            self.awaiting_rel.add(packet.packet_id)  # type: ignore[arg-type]
            self.send(PubRec(packet.packet_id))  # type: ignore[arg-type]
        elif packet.qos == 1:
            self.send(PubAck(packet.packet_id))  # type: ignore[arg-type]
        self.record.deliveries.setdefault(self.client_id, []).append(
            Delivery(publisher, int(seq), packet.qos, new, self.clock.now, self.node or "",
                     packet.packet_id, packet.dup))

    def _resend(self, session_present: bool) -> None:
        for pid, (seq, step) in sorted(self.outgoing.items()):
            if step == "pubrel" and session_present:
                self.send(PubRel(pid))
            elif step == "publish":
                self._send_publish(seq, pid, dup=session_present)
            else:  # the broker forgot the exchange: the message is sent again as new
                del self.outgoing[pid]
                self.unsent.append(seq)
        unsent, self.unsent = self.unsent, []
        for seq in unsent:
            self._publish(seq)

    def _keep_alive(self, transport: asyncio.Transport | None) -> None:
        if transport is not self.transport or self.transport is None:
            return
        if self.clock.now - self.last_heard > 1.5 * KEEP_ALIVE:
            self.avoid = self.node
            self.drop()  # no answer to the last PINGREQ: the node is gone for this client
            return
        self.send(PingReq())
        asyncio.get_running_loop().call_later(KEEP_ALIVE, self._keep_alive, transport)

    # -- publishing

    def _pid(self) -> int:
        pid = next(self.pids)
        while pid in self.outgoing:
            pid = next(self.pids)
        return pid

    def publish_next(self) -> None:
        self.seq += 1
        self.record.published[(self.client_id, self.seq)] = self.clock.now
        self._publish(self.seq)

    def _publish(self, seq: int) -> None:
        if not self.connected:
            self.unsent.append(seq)
            return
        pid = self._pid()
        self.outgoing[pid] = (seq, "publish")
        self._send_publish(seq, pid, dup=False)

    def _send_publish(self, seq: int, pid: int, dup: bool) -> None:
        self.send(Publish(f"{TOPIC}/{self.client_id}", f"{self.client_id}:{seq}".encode(),
                          self.qos, dup=dup, packet_id=pid))

    @property
    def pending(self) -> int:
        return len(self.outgoing) + len(self.unsent)
