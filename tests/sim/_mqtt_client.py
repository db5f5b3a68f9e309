"""A persistent MQTT 5 client's side of the protocol, recording what the checker reads.

The simulation's clients (``_world.SimClient``) and the chaos run's clients on real sockets
(``chaos._clients.RealClient``) are this class on two kinds of connection: each says what time
it is, how to call something later, how its connection is dropped and how it connects again.

What it records (a :class:`Record`): the time each message was first published, which were
acknowledged (PUBACK, or PUBREC at QoS 2), when each subscription first existed, every PUBLISH
received (new, or the resend of a QoS 2 exchange still in progress: its packet id is among those
received and not yet released), and every reconnect answered "no session" after a session
existed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hive_core import mqtt


@dataclass
class Delivery:
    publisher: str
    seq: int
    qos: int
    new: bool  # a new message for the client, not a resend of an exchange in progress
    at: float
    node: str = ""  # the node that delivered it
    packet_id: int | None = None
    dup: bool = False


@dataclass
class Record:
    """What the checker reads."""

    published: dict[tuple[str, int], float] = field(default_factory=dict)  # first sent at
    qos_of: dict[str, int] = field(default_factory=dict)  # publisher -> QoS
    acked: set[tuple[str, int]] = field(default_factory=set)
    subscribed_at: dict[str, float] = field(default_factory=dict)  # subscriber -> first SUBACK
    deliveries: dict[str, list[Delivery]] = field(default_factory=dict)
    session_lost: list[tuple[str, str, float]] = field(default_factory=list)  # client, node, at
    refusals: int = 0
    errors: list[str] = field(default_factory=list)


class RecordingClient:
    """Subscriber (``role`` "sub": ``topic``/# at ``qos``) or publisher ("pub": to
    ``topic``/<client id>, payload "<client id>:<seq>")."""

    def __init__(self, client_id: str, role: str, qos: int, record: Record, topic: str,
                 keep_alive: int) -> None:
        self.client_id = client_id
        self.role = role
        self.qos = qos
        self.record = record
        self.topic = topic
        self.keep_alive = keep_alive
        self.transport: Any = None
        self.node: str | None = None
        self.connected = False
        self.connecting = False
        self.had_session = False
        self.decoder = mqtt.PacketDecoder(protocol_version=5, server=False)
        self.pids = itertools.cycle(range(1, 65536))
        self.outgoing: dict[int, tuple[int, str]] = {}  # pid -> (seq, "publish" | "pubrel")
        self.unsent: list[int] = []  # seqs published while down or refused: sent at connect
        self.awaiting_rel: set[int] = set()  # inbound QoS 2 ids, PUBREC sent
        self.seq = 0
        self.last_heard = 0.0
        self.retain = False  # a publisher: every message retained too

    # -- what a kind of connection says

    @property
    def now(self) -> float:
        raise NotImplementedError

    def later(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        raise NotImplementedError

    def drop(self) -> None:
        """Close the connection (a client that decided its node is gone, or moves)."""
        raise NotImplementedError

    def refused(self) -> None:
        """A CONNECT was refused, or the node stayed silent: hook for where to go next."""

    def accepted(self) -> None:
        """A CONNECT was accepted: hook."""

    def reconnect_later(self) -> None:
        """The connection is gone: connect again after a pause, unless the run is ending."""
        raise NotImplementedError

    # -- the connection coming and going

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.last_heard = self.now

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.connected = False
        self.connecting = False
        self.reconnect_later()

    # -- the protocol

    def send(self, packet: Any) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(mqtt.encode_packet(packet, 5))

    def on_packet(self, packet: Any) -> None:
        record = self.record
        if isinstance(packet, mqtt.ConnAck):
            self.connecting = False
            if packet.reason_code != 0:
                record.refusals += 1
                self.refused()
                self.drop()
                return
            self.connected = True
            self.accepted()
            if self.had_session and not packet.session_present:
                record.session_lost.append((self.client_id, self.node or "", self.now))
                self.awaiting_rel.clear()
            self.had_session = True
            if self.role == "sub" and (not packet.session_present
                                       or self.client_id not in record.subscribed_at):
                request = mqtt.SubscriptionRequest(f"{self.topic}/#", self.qos)
                self.send(mqtt.Subscribe(self._pid(), [request]))
            self._resend(packet.session_present)
            self.later(self.keep_alive, self._keep_alive, self.transport)
        elif isinstance(packet, mqtt.SubAck):
            record.subscribed_at.setdefault(self.client_id, self.now)
        elif isinstance(packet, mqtt.Publish):
            self._on_publish(packet)
        elif isinstance(packet, mqtt.PubAck):
            entry = self.outgoing.pop(packet.packet_id, None)
            if entry is not None and packet.reason_code < 0x80:
                record.acked.add((self.client_id, entry[0]))
            elif entry is not None:
                self.unsent.append(entry[0])
        elif isinstance(packet, mqtt.PubRec):
            entry = self.outgoing.get(packet.packet_id)
            if entry is not None and packet.reason_code < 0x80:
                record.acked.add((self.client_id, entry[0]))
                self.outgoing[packet.packet_id] = (entry[0], "pubrel")
                self.send(mqtt.PubRel(packet.packet_id))
            elif entry is not None:
                del self.outgoing[packet.packet_id]
                self.unsent.append(entry[0])
        elif isinstance(packet, mqtt.PubComp):
            self.outgoing.pop(packet.packet_id, None)
        elif isinstance(packet, mqtt.PubRel):
            if self.role == "sub" and self.qos < 2:
                # Never sent a QoS 2 PUBLISH: a client that answers nothing to such a PUBREL
                # (bench/failover.py's) would have the node keep the id in its window for good.
                record.errors.append(f"{self.client_id}: PUBREL for packet id "
                                     f"{packet.packet_id}, subscribed at QoS {self.qos}")
            self.awaiting_rel.discard(packet.packet_id)
            self.send(mqtt.PubComp(packet.packet_id))
        elif isinstance(packet, mqtt.Disconnect):
            self.drop()

    def _on_publish(self, packet: mqtt.Publish) -> None:
        if packet.retain:  # a retained message sent at SUBSCRIBE, not a delivery: acknowledged
            if packet.qos == 1:
                self.send(mqtt.PubAck(packet.packet_id))  # type: ignore[arg-type]
            elif packet.qos == 2:
                self.awaiting_rel.add(packet.packet_id)  # type: ignore[arg-type]
                self.send(mqtt.PubRec(packet.packet_id))  # type: ignore[arg-type]
            return
        publisher, _, seq = packet.payload.decode().partition(":")
        new = True
        if packet.qos == 2:
            new = packet.packet_id not in self.awaiting_rel
            self.awaiting_rel.add(packet.packet_id)  # type: ignore[arg-type]
            self.send(mqtt.PubRec(packet.packet_id))  # type: ignore[arg-type]
        elif packet.qos == 1:
            self.send(mqtt.PubAck(packet.packet_id))  # type: ignore[arg-type]
        self.record.deliveries.setdefault(self.client_id, []).append(
            Delivery(publisher, int(seq), packet.qos, new, self.now, self.node or "",
                     packet.packet_id, packet.dup))

    def _resend(self, session_present: bool) -> None:
        for pid, (seq, step) in sorted(self.outgoing.items()):
            if step == "pubrel" and session_present:
                self.send(mqtt.PubRel(pid))
            elif step == "publish":
                self._send_publish(seq, pid, dup=session_present)
            else:  # the broker forgot the exchange: the message is sent again as new
                del self.outgoing[pid]
                self.unsent.append(seq)
        unsent, self.unsent = self.unsent, []
        for seq in unsent:
            self._publish(seq)

    def _keep_alive(self, transport: Any) -> None:
        if transport is not self.transport or self.transport is None:
            return
        if self.now - self.last_heard > 1.5 * self.keep_alive:
            self.refused()
            self.drop()  # no answer to the last PINGREQ: the node is gone for this client
            return
        self.send(mqtt.PingReq())
        self.later(self.keep_alive, self._keep_alive, transport)

    # -- publishing

    def _pid(self) -> int:
        pid = next(self.pids)
        while pid in self.outgoing:
            pid = next(self.pids)
        return pid

    def publish_next(self) -> None:
        self.seq += 1
        self.record.published[(self.client_id, self.seq)] = self.now
        self._publish(self.seq)

    def _publish(self, seq: int) -> None:
        if not self.connected:
            self.unsent.append(seq)
            return
        pid = self._pid()
        self.outgoing[pid] = (seq, "publish")
        self._send_publish(seq, pid, dup=False)

    def _send_publish(self, seq: int, pid: int, dup: bool) -> None:
        self.send(mqtt.Publish(f"{self.topic}/{self.client_id}", f"{self.client_id}:{seq}".encode(),
                               self.qos, retain=self.retain, dup=dup, packet_id=pid))

    @property
    def pending(self) -> int:
        return len(self.outgoing) + len(self.unsent)
