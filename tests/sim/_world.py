"""One simulated run: real brokers and clusters, simulated network, disks, clock and clients.

Each node is a real :class:`~hive_core.broker.Broker` over a :class:`ReplicatingStore` on a
simulated disk, and a real :class:`~hive_core.cluster.Cluster` on the simulated network with
replica-count 2. Each client is an MQTT 5 client with a persistent session written here (its
side of the QoS flows, keep alive, reconnects). A seeded nemesis kills and restarts nodes,
freezes them, cuts one node off from the others (its clients stay connected) and moves
subscribers to other nodes. Afterwards everything heals and settles, and the checker counts.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hive_core.broker import Broker, BrokerSettings, ClientConnection
from hive_core.cluster import Cluster, ClusterSettings, ReplicatingStore
from hive_core.mqtt import (
    Connect,
    PacketDecoder,
    PropertyId,
)
from hive_core.persistence import MemorySessionStore
from hive_core.plugins import ExtensionManager, Extensions
from hive_ext_api import ClusterNodeAddress, hookimpl

from ._disk import SimShelf, SimStore
from ._loop import Incarnation, SimLoop
from ._mqtt_client import Record, RecordingClient
from ._net import SimNetwork

PORT = 7800
FAULTS = ("kill", "freeze", "isolate", "move")
"""The default faults. ``cut`` (the link between two nodes only, both serving) is there on
request: it is not in the default, so that a seed's schedule stays what it was."""


@dataclass
class Options:
    nodes: int = 3
    replica_count: int = 2
    traffic: float = 20.0  # seconds of publishing
    settle: float = 30.0  # seconds after everything healed
    rate: float = 4.0  # messages per second per publisher
    faults: tuple[str, ...] = FAULTS
    heartbeat: tuple[float, float] = (1.0, 3.0)  # interval, timeout
    keep_alive: int = 4
    retain: bool = False  # publishers retain every message: retained messages are checked too
    # Subscribers move on a clock of their own, also while a node is killed, frozen or cut
    # off (as in tests/chaos); else a move comes only between two node faults.
    overlap: bool = False
    # <delivery-hold> of the nodes' replicating stores (seconds; 0: none held), as a node runs
    hold: float = 0.05


class _Seeds:
    def __init__(self, addresses: list[ClusterNodeAddress]) -> None:
        self.addresses = addresses

    @hookimpl
    def hive_discovery_reload(self) -> list[ClusterNodeAddress]:
        return list(self.addresses)

    @hookimpl
    def hive_discovery_reload_interval(self) -> float:
        return 1.0


class SimNode:
    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.disk = MemorySessionStore()  # what survives a kill
        self.shelf = SimShelf(world.rng)
        self.incarnation = Incarnation(name)
        self.incarnation.dead = True
        self.context = contextvars.Context()
        self.broker: Broker | None = None
        self.cluster: Cluster | None = None
        self.store: SimStore | None = None
        self.up = False

    @property
    def alive(self) -> bool:
        return not self.incarnation.dead

    def start(self) -> None:
        world = self.world
        self.incarnation = Incarnation(self.name)
        self.context = world.loop.in_node(self.incarnation)
        world.net.revive(self.name)
        self.shelf = SimShelf(world.rng) if not self.shelf.stores else _reopened(self.shelf)
        world.loop.create_task(self._start(), context=self.context)

    async def _start(self) -> None:
        world = self.world
        store = self.store = SimStore(world.rng, self.disk)
        snapshot = await store.open()
        replicating = ReplicatingStore(store, hold=world.options.hold)
        broker = self.broker = Broker(BrokerSettings(), replicating)
        broker.start(snapshot)
        manager = ExtensionManager(builtins=(), discover_installed=False)
        manager.register("seeds", _Seeds([ClusterNodeAddress(n, PORT) for n in world.names]))
        interval, timeout = world.options.heartbeat
        settings = ClusterSettings(self.name, PORT, self.name, PORT, heartbeat_interval=interval,
                                   heartbeat_timeout=timeout, connect_timeout=2.0,
                                   replica_count=world.options.replica_count)
        cluster = self.cluster = Cluster(
            self.name, settings, broker, Extensions(manager),
            world.net.transport(self.name, self.context), store=replicating,
            replica_shelf=self.shelf)
        # What it sends on again after the join, as node.py has it: messages kept on disk for
        # silent nodes, and QoS 2 messages whose forwards were not confirmed before a kill.
        cluster.restore(snapshot)
        await cluster.start()
        self.up = True

    def kill(self) -> None:
        self.incarnation.dead = True
        self.up = False
        self.world.loop.frozen.pop(self.incarnation, None)
        self.world.net.kill(self.name)
        if self.store is not None:
            self.store.crash()
        self.shelf.crash()


def _reopened(shelf: SimShelf) -> SimShelf:
    """The same replicas, as a restarted process finds them on disk."""
    again = SimShelf(shelf.rng)
    again.stores, again.marks = shelf.stores, shelf.marks
    return again


# ------------------------------------------------------------------------------ clients


class SimClient(RecordingClient, asyncio.Protocol):
    """A client of the simulation: its connection is a link of the simulated network."""

    def __init__(self, world: World, client_id: str, role: str, qos: int, home: str) -> None:
        super().__init__(client_id, role, qos, world.record, "t", world.options.keep_alive)
        self.world = world
        self.home = home  # the node it connects to while that node lives
        self.context = contextvars.Context()

    @property
    def now(self) -> float:
        return self.world.loop.now

    def later(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        self.world.loop.call_later(delay, callback, *args, context=self.context)

    # -- connecting

    def connect(self) -> None:
        world = self.world
        if self.connected or self.connecting:
            return
        live = [n for n in world.nodes if n.up]
        if not live:
            self.reconnect_later()
            return
        target = world.node(self.home)
        node = target if target.up else world.rng.choice(live)
        assert node.broker is not None
        self.connecting = True
        self.decoder = PacketDecoder(protocol_version=5, server=False)
        server = node.context.run(ClientConnection, node.broker)
        link = world.net.open((f"client-{self.client_id}", self.context, self),
                              (node.name, node.context, server), partitionable=False)
        self.node = node.name
        world.loop.call_soon(server.connection_made, link.ends[1], context=node.context)
        self.connection_made(link.ends[0])
        self.send(Connect(self.client_id, 5, clean_start=False, keep_alive=world.options.keep_alive,
                          properties={PropertyId.SESSION_EXPIRY_INTERVAL: 3600}))

    def reconnect_later(self) -> None:
        if not self.world.stopping:
            self.later(self.world.rng.uniform(0.3, 1.5), self.connect)

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.last_heard = self.now
        for packet in self.decoder.feed(data):
            self.on_packet(packet)


# ------------------------------------------------------------------------------ the world


class World:
    def __init__(self, seed: int, options: Options) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.loop = SimLoop()
        self.net = SimNetwork(self.loop, self.rng)
        self.names = [f"n{i}" for i in range(1, options.nodes + 1)]
        self.nodes = [SimNode(self, name) for name in self.names]
        self.clients: list[SimClient] = []
        self.record = Record()
        self.schedule: list[str] = []  # what the nemesis did, when
        self.stopping = False

    def node(self, name: str) -> SimNode:
        return self.nodes[self.names.index(name)]

    def note(self, what: str) -> None:
        self.schedule.append(f"{self.loop.now:8.3f} {what}")

    async def until(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = self.loop.now + timeout
        while not condition():
            if self.loop.now > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def meshed(self) -> bool:
        names = set(self.names)
        return all(n.up and n.cluster is not None
                   and set(n.cluster.members) == names - {n.name} for n in self.nodes)

    async def run(self) -> None:
        options, rng = self.options, self.rng
        for node in self.nodes:
            node.start()
        if not await self.until(self.meshed, 30):
            raise AssertionError("the nodes never formed a full mesh")
        for index, name in enumerate(self.names):
            for role, qos in (("sub", 1), ("sub", 2), ("pub", 1), ("pub", 2)):
                client = SimClient(self, f"{role}{qos}-{index + 1}", role, qos, name)
                self.record.qos_of[client.client_id] = qos
                self.clients.append(client)
                client.connect()
        subscribers = [c for c in self.clients if c.role == "sub"]
        await self.until(lambda: all(c.client_id in self.record.subscribed_at
                                     for c in subscribers), 30)
        publishers = [c for c in self.clients if c.role == "pub"]
        for publisher in publishers:
            publisher.retain = options.retain
        nemesis = self.loop.create_task(self._nemesis())
        end = self.loop.now + options.traffic
        while self.loop.now < end:
            for publisher in publishers:
                if publisher.pending < 20:
                    publisher.publish_next()
            await asyncio.sleep(rng.expovariate(options.rate))
        nemesis.cancel()
        await self._heal_all()
        # Publishers finish what they have in flight; subscribers get what is theirs.
        await self.until(lambda: all(p.pending == 0 for p in publishers), options.settle)
        await asyncio.sleep(options.settle)
        self.stopping = True

    def _move_one(self) -> None:
        rng = self.rng
        client = rng.choice([c for c in self.clients if c.role == "sub"])
        client.home = rng.choice([n for n in self.names if n != client.home])
        self.note(f"move {client.client_id} to {client.home}")
        client.drop()

    async def _mover(self) -> None:
        """Moves while the node faults go on (``Options.overlap``)."""
        try:
            while True:
                await asyncio.sleep(self.rng.uniform(0.5, 2.0))
                self._move_one()
        except asyncio.CancelledError:
            pass

    async def _nemesis(self) -> None:
        rng, options = self.rng, self.options
        node_faults = [f for f in options.faults if f != "move"]
        overlap = options.overlap and "move" in options.faults and node_faults
        mover = self.loop.create_task(self._mover()) if overlap else None
        try:
            while True:
                await asyncio.sleep(rng.uniform(1.0, 3.0))
                fault = rng.choice(node_faults if overlap else options.faults)
                if fault == "move":
                    self._move_one()
                    continue
                if not node_faults:
                    continue
                await self._heal_all()
                victim = rng.choice(self.nodes)
                if fault == "kill":
                    self.note(f"kill {victim.name}")
                    victim.kill()
                    await asyncio.sleep(rng.uniform(0.5, 4.0))
                    self.note(f"restart {victim.name}")
                    victim.start()
                elif fault == "freeze":
                    seconds = rng.uniform(1.0, 6.0)
                    self.note(f"freeze {victim.name} for {seconds:.1f} s")
                    self.loop.freeze(victim.incarnation, seconds)
                    await asyncio.sleep(seconds)
                elif fault == "cut":
                    seconds = rng.uniform(1.0, 8.0)
                    other = rng.choice([n for n in self.nodes if n is not victim])
                    self.note(f"cut {victim.name} - {other.name} for {seconds:.1f} s")
                    self.net.cut(victim.name, other.name)
                    if rng.random() < 0.5:  # and one end dies while its link is cut
                        before = rng.uniform(0.0, seconds)
                        await asyncio.sleep(before)
                        self.note(f"kill {victim.name}")
                        victim.kill()
                        seconds -= before
                    await asyncio.sleep(seconds)
                    self.note("heal")
                    self.net.heal()
                elif fault == "isolate":
                    seconds = rng.uniform(1.0, 8.0)
                    self.note(f"isolate {victim.name} for {seconds:.1f} s")
                    self.net.isolate(victim.name)
                    await asyncio.sleep(seconds)
                    self.note("heal")
                    self.net.heal()
        except asyncio.CancelledError:
            if mover is not None:
                mover.cancel()

    async def _heal_all(self) -> None:
        if self.net.groups or self.net.cuts:
            self.note("heal")
            self.net.heal()
        for node in self.nodes:
            if not node.alive:
                self.note(f"restart {node.name}")
                node.start()
        await self.until(self.meshed, 20)


def run_world(seed: int, options: Options | None = None, verbose: bool = False) -> World:
    """One whole run; the world as it ended (the checker reads ``record``)."""
    from ._loop import simulated_time

    world = World(seed, options or Options())
    loop = world.loop
    errors = world.record.errors

    def on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = context.get("message", "")
        exception = context.get("exception")
        errors.append(f"{message}: {exception!r}")

    loop.set_exception_handler(on_error)
    # A replay shows the nodes' log lines (with the simulated time); a batch keeps quiet.
    logging.getLogger("hive").setLevel(logging.INFO if verbose else logging.CRITICAL)
    try:
        with simulated_time(loop):
            loop.run_until_complete(world.run())
    finally:
        for node in world.nodes:
            node.incarnation.dead = True
        loop.close()
    return world
