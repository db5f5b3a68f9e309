"""Membership and routing between nodes: 3-5 real brokers in one event loop, no sockets.

Every node is a :class:`Cluster` with a real :class:`Broker` on a shared :class:`MemoryNetwork`;
clients are :class:`ClientConnection` objects fed MQTT bytes directly.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import pytest

from hive_core.broker import Broker, BrokerSettings, ClientConnection
from hive_core.cluster import Cluster, ClusterSettings, FrameKind, NodeTransport
from hive_core.cluster._membership import SIMULTANEOUS_DIALS
from hive_core.mqtt import (
    ConnAck,
    Connect,
    PacketDecoder,
    Publish,
    Subscribe,
    SubscriptionRequest,
    Unsubscribe,
    encode_packet,
)
from hive_core.persistence import MemorySessionStore, Snapshot
from hive_core.plugins import ExtensionManager, Extensions
from hive_ext_api import ClusterNodeAddress, hookimpl

from ._memory_network import MemoryNetwork

PORT = 7800
HEARTBEAT = 0.05
HEARTBEAT_TIMEOUT = 0.6


class SeedDiscovery:
    """A discovery plugin that proposes a fixed, editable list of addresses."""

    def __init__(self, seeds: Iterable[ClusterNodeAddress]) -> None:
        self.seeds = list(seeds)

    @hookimpl
    def hive_discovery_reload(self) -> list[ClusterNodeAddress]:
        return list(self.seeds)

    @hookimpl
    def hive_discovery_reload_interval(self) -> float:
        return 0.05


class Node:
    """A Cluster and a Broker on ``transport``; ``settings`` default to ``host``:``port`` (the
    name when no host) and this module's heartbeat."""

    def __init__(self, name: str, seeds: Iterable[ClusterNodeAddress],
                 transport: NodeTransport, host: str | None = None, port: int = PORT,
                 settings: ClusterSettings | None = None) -> None:
        self.name = name
        self.broker = Broker(BrokerSettings(), MemorySessionStore())
        self.discovery = SeedDiscovery(seeds)
        manager = ExtensionManager(builtins=(), discover_installed=False)
        manager.register("seeds", self.discovery)
        if settings is None:
            host = host or name
            settings = ClusterSettings(host, port, host, port, heartbeat_interval=HEARTBEAT,
                                       heartbeat_timeout=HEARTBEAT_TIMEOUT, connect_timeout=1.0)
        self.cluster = Cluster(name, settings, self.broker, Extensions(manager), transport)
        self.started = False

    async def start(self, seeds: Iterable[ClusterNodeAddress] | None = None) -> None:
        """Start the broker and the cluster, with ``seeds`` for discovery when given."""
        if seeds is not None:
            self.discovery.seeds = list(seeds)
        self.broker.start(Snapshot())
        await self.cluster.start()
        self.started = True

    async def stop(self) -> None:
        if self.started:
            self.started = False
            await self.cluster.stop()
            await self.broker.stop()

    @property
    def peers(self) -> set[str]:
        return set(self.cluster.members)

    def client(self, client_id: str, clean: bool = True, version: int = 4) -> Client:
        return Client(self.broker, client_id, clean, version)


def address(name: str) -> ClusterNodeAddress:
    return ClusterNodeAddress(name, PORT)


class _Wire:
    """The client's end of a ClientConnection: what the broker writes, decoded."""

    def __init__(self, version: int = 4) -> None:
        self.decoder = PacketDecoder(protocol_version=version, server=False)
        self.packets: list[Any] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.packets += self.decoder.feed(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.closed = True  # the client reads the end and closes its side at once


class Client:
    """An MQTT 3.1.1 (or 5) client wired straight into one node's broker."""

    _ids = itertools.count(1)

    def __init__(self, broker: Broker, client_id: str, clean: bool = True,
                 version: int = 4) -> None:
        self.version = version
        self.wire = _Wire(version)
        self.connection = ClientConnection(broker)
        self.connection.connection_made(self.wire)
        self.send(Connect(client_id, version, clean_start=clean, keep_alive=0))

    def send(self, packet: Any) -> None:
        self.connection.data_received(encode_packet(packet, self.version))

    def subscribe(self, *filters: str, qos: int = 0) -> None:
        self.send(Subscribe(next(self._ids), [SubscriptionRequest(f, qos) for f in filters]))

    def unsubscribe(self, *filters: str) -> None:
        self.send(Unsubscribe(next(self._ids), list(filters)))

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        self.send(Publish(topic, payload, 0, retain))

    @property
    def received(self) -> list[Publish]:
        return [p for p in self.wire.packets if isinstance(p, Publish)]

    @property
    def payloads(self) -> list[bytes]:
        return [p.payload for p in self.received]


async def until(condition: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await asyncio.sleep(0.01)


async def settle() -> None:
    """Let frames in flight arrive (several loop turns; the memory network is immediate)."""
    for _ in range(20):
        await asyncio.sleep(0)


def full_mesh(nodes: list[Node]) -> Callable[[], bool]:
    names = {n.name for n in nodes}
    return lambda: all(n.peers == names - {n.name} for n in nodes)


Scenario = Callable[[MemoryNetwork, list[Node]], Awaitable[None]]


def run_cluster(scenario: Scenario, count: int = 3,
                seeds: Callable[[int], list[str]] | None = None) -> None:
    """Start ``count`` nodes n1..nN (each seeding every node unless told), run, stop them all."""
    async def main() -> None:
        network = MemoryNetwork()
        names = [f"n{i}" for i in range(1, count + 1)]
        nodes = [Node(name, [address(s) for s in (seeds(i) if seeds else names)],
                      network.transport(name, PORT)) for i, name in enumerate(names)]
        try:
            for node in nodes:
                await node.start()
            await until(full_mesh(nodes), what="a full mesh")
            await scenario(network, nodes)
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(main())


# ------------------------------------------------------------------------------ membership


ORDERS = [(0, 1, 2, 3, 4), (4, 3, 2, 1, 0), (2, 0, 4, 1, 3), (1, 3, 0, 4, 2)]


@pytest.mark.parametrize("order", ORDERS)
def test_full_mesh_from_a_chain_of_seeds_in_any_start_order(order: tuple[int, ...]) -> None:
    """Each node knows only its predecessor; MEMBERS gossip makes the full mesh."""

    async def main() -> None:
        network = MemoryNetwork()
        names = [f"n{i}" for i in range(1, 6)]
        nodes = [Node(name, [address(names[i - 1])] if i else [],
                      network.transport(name, PORT)) for i, name in enumerate(names)]
        try:
            for index in order:
                await nodes[index].start()
                await asyncio.sleep(0.02)
            await until(full_mesh(nodes), what="a full mesh")
            await asyncio.sleep(3 * HEARTBEAT_TIMEOUT)  # and it holds: heartbeats keep it up
            assert full_mesh(nodes)()
            assert network.links() == 10  # one link per pair: duplicate dials were closed
            for node in nodes:
                assert {m.node_id for m in node.cluster.view()} == set(names)
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(main())


def test_a_partitioned_node_times_out_and_rejoins_after_the_heal(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        network.partition({"n1", "n2"}, {"n3"})
        await until(lambda: n1.peers == {"n2"} and n2.peers == {"n1"} and not n3.peers,
                    timeout=10 * HEARTBEAT_TIMEOUT, what="the partition to be noticed")
        assert "no heartbeat for" in caplog.text
        await asyncio.sleep(2 * HEARTBEAT_TIMEOUT)  # dials across the cut fail meanwhile
        assert not n3.peers
        network.heal()
        await until(full_mesh(nodes), what="the mesh after the heal")

    with caplog.at_level(logging.WARNING, "hive.cluster"):
        run_cluster(scenario)


def test_every_merge_after_a_heal_finishes_also_on_a_link_swapped_for_another(
        caplog: pytest.LogCaptureFixture) -> None:
    """At a heal both sides dial; the second link replaces the first, sometimes in the middle
    of the merge. The merge goes on on the new link and is finished by its SYNCED: every
    start line has its finish line (a merge whose link was swapped once logged no end, and
    its progress lines stopped, as if it hung)."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        for _ in range(4):
            network.partition({"n1", "n2"}, {"n3"})
            await until(lambda: not n3.peers and n1.peers == {"n2"},
                        timeout=10 * HEARTBEAT_TIMEOUT, what="the partition to be noticed")
            network.heal()
            for one, other in ((n1, n3), (n3, n1), (n2, n3), (n3, n2)):  # crossing dials
                one.cluster.membership.dial(address(other.name))
            await until(full_mesh(nodes), what="the mesh after the heal")
            # Before the next split: one cut before a SYNCED arrived stops that merge.
            await until(lambda: not any(m.merging for n in nodes
                                        for m in n.cluster.membership.members.values()),
                        what="every merge to finish")
        # A member that left again within a round (a heartbeat missed on a loaded machine)
        # stopped its merge, and the log says so: each start has one end or the other.
        starts = caplog.text.count("Starting cluster merge process")
        finished = caplog.text.count("Finished cluster merge process successfully.")
        assert finished >= 3
        assert finished + caplog.text.count("stopped before it finished") == starts

    with caplog.at_level(logging.INFO, "hive.cluster"):
        run_cluster(scenario)


def test_a_merge_cut_off_before_its_end_says_so_and_runs_again_at_the_next_heal(
        caplog: pytest.LogCaptureFixture) -> None:
    """A split again before the peer's SYNCED arrived: the merge cannot finish, and the log
    says it stopped rather than leaving a start line without an end. The next heal merges."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2 = nodes
        handlers = n1.cluster._handlers  # n1 does not read n2's SYNCED for now
        synced = handlers[FrameKind.SYNCED]
        handlers[FrameKind.SYNCED] = lambda _member, _body: None
        stopped = "Cluster merge process with node n2 stopped before it finished"
        for round_ in range(3):
            if round_ == 2:
                handlers[FrameKind.SYNCED] = synced
            network.partition({"n1"}, {"n2"})
            await until(lambda: not n1.peers and not n2.peers, timeout=10 * HEARTBEAT_TIMEOUT,
                        what="the partition to be noticed")
            assert caplog.text.count(stopped) == round_  # the last round's merge, if any
            network.heal()
            n1.cluster.membership.dial(address("n2"))
            await until(full_mesh(nodes), what="the heal")
            await until(lambda: not n2.cluster.membership.members["n1"].merging,
                        what="n2's merge to finish")
            assert round_ == 2 or n1.cluster.membership.members["n2"].merging
        await until(lambda: not n1.cluster.membership.members["n2"].merging,
                    what="n1's merge to finish")
        assert caplog.text.count("Starting cluster merge process") == 6
        assert caplog.text.count("Finished cluster merge process successfully.") == 4
        assert caplog.text.count(stopped) == 2
        assert "stopped before it finished" not in caplog.text.replace(stopped, "")

    with caplog.at_level(logging.INFO, "hive.cluster"):
        run_cluster(scenario, count=2)


def test_a_second_link_is_kept_or_closed_as_the_answering_node_decided(
        caplog: pytest.LogCaptureFixture) -> None:
    """n1 dials n2, linked already on n2's link. n2 has known n1 for a while and keeps its
    link; to n1, which joined just now, the new link looks like a crossing dial that it, the
    smaller id, should keep. Each end deciding on its own would keep the link the other
    closed, and the member would leave and join again; n1 follows n2's WELCOME instead."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2 = nodes
        at_n1 = n1.cluster.membership.members["n2"]
        at_n2 = n2.cluster.membership.members["n1"]
        assert at_n2.link.outbound and not at_n1.link.outbound  # n2 dialled: it seeds n1
        at_n2.joined_at -= 10 * SIMULTANEOUS_DIALS
        at_n1.joined_at = time.monotonic()
        hellos = n2.cluster.metrics.frames_in["HELLO"]
        await n1.cluster.membership._connect(address("n2"))  # dial() skips a member's address
        await until(lambda: n2.cluster.metrics.frames_in["HELLO"] == hellos + 1
                    and network.links() == 1, what="the second link to be closed")
        await asyncio.sleep(3 * HEARTBEAT_TIMEOUT)
        assert n1.cluster.membership.members["n2"] is at_n1
        assert n2.cluster.membership.members["n1"] is at_n2
        assert "left the cluster" not in caplog.text

    with caplog.at_level(logging.INFO, "hive.cluster"):
        run_cluster(scenario, count=2, seeds=lambda i: ["n1"] if i else [])


def test_client_connected_is_written_before_the_connack(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that resumes its session on another node right after its CONNACK here must
    find the other node told already: CLIENT_CONNECTED is written at once, not after the
    output of the turn (the CONNACK among it), or a loaded machine lets the client reach the
    other node first, which then opens a fresh session."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1 = nodes[0]
        links = [n1.cluster.membership.members[peer].link for peer in ("n2", "n3")]
        sub = n1.client("sub")
        sub.subscribe("x")
        await settle()
        unsent: list[bool] = []
        write = _Wire.write

        def noting(wire: _Wire, data: bytes) -> None:
            unsent.append(any(link._pending for link in links))
            write(wire, data)

        monkeypatch.setattr(_Wire, "write", noting)
        n1.client("pub").publish("x", b"1")  # output of this turn: the flush is due first
        resuming = n1.client("meter", clean=False)
        await settle()
        assert any(isinstance(p, ConnAck) for p in resuming.wire.packets)
        assert unsent and not any(unsent)

    run_cluster(scenario)


def test_a_killed_node_leaves_at_once_and_a_restart_rejoins() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        network.kill("n3")
        await until(lambda: n1.peers == {"n2"} and n2.peers == {"n1"},
                    timeout=HEARTBEAT_TIMEOUT / 2, what="the links to close")
        await n3.stop()  # the dead process's objects: cleaned up, they tell nobody
        again = Node("n3", [address("n1")], network.transport("n3", PORT))
        nodes[2] = again
        await again.start()
        await until(full_mesh(nodes), what="the restarted node to rejoin")

    run_cluster(scenario)


def test_a_node_that_leaves_says_bye() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        await n3.stop()
        await until(lambda: n1.peers == {"n2"} and n2.peers == {"n1"}, what="the BYE")
        assert n1.cluster.metrics.frames_in["BYE"] == 1

    run_cluster(scenario)


# ------------------------------------------------------------------------------ routing


def test_filters_propagate_and_a_late_node_gets_them_on_join() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        sub = n2.client("sub")
        sub.subscribe("a/+", "$share/g/b/#")
        other = n2.client("other")
        other.subscribe("a/+")  # a second subscriber: no second FILTER_ADD
        await until(lambda: n1.cluster.table.filters_of("n2") == {"a/+", "$share/g/b/#"}
                    and n3.cluster.table.filters_of("n2") == {"a/+", "$share/g/b/#"})
        assert n1.cluster.metrics.frames_in["FILTER_ADD"] == 2
        sub.unsubscribe("a/+")
        await settle()
        assert n1.cluster.table.filters_of("n2") == {"a/+", "$share/g/b/#"}
        other.unsubscribe("a/+")
        await until(lambda: n1.cluster.table.filters_of("n2") == {"$share/g/b/#"})
        late = Node("n4", [address("n1")], network.transport("n4", PORT))
        nodes.append(late)
        await late.start()
        await until(full_mesh(nodes))
        await until(lambda: late.cluster.table.filters_of("n2") == {"$share/g/b/#"})

    run_cluster(scenario)


def test_a_publish_goes_only_to_the_nodes_that_want_it_once_each() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        subs = [n2.client("s1"), n2.client("s2")]
        subs[0].subscribe("t/#")
        subs[1].subscribe("t/+")  # both match: still one PUBLISH frame to n2
        local = n1.client("local")
        local.subscribe("t/1")
        await until(lambda: n1.cluster.table.filters_of("n2") == {"t/#", "t/+"})
        publisher = n1.client("pub")
        for i in range(10):
            publisher.publish("t/1", b"%d" % i)
        publisher.publish("elsewhere", b"nobody")
        expected = [b"%d" % i for i in range(10)]
        await until(lambda: all(s.payloads == expected for s in subs), what="deliveries")
        assert local.payloads == expected
        assert n1.cluster.metrics.publishes_forwarded == 10
        assert n2.cluster.metrics.publishes_received == 10
        assert n3.cluster.metrics.publishes_received == 0
        assert n3.cluster.metrics.frames_in["PUBLISH"] == 0
        # a message that came from another node is not forwarded again
        assert n2.cluster.metrics.publishes_forwarded == 0

    run_cluster(scenario)


def test_a_shared_group_gets_each_message_once_cluster_wide() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        members = [n1.client("m1"), n2.client("m2"), n2.client("m3"), n3.client("m4")]
        for member in members:
            member.subscribe("$share/workers/jobs/+")
        plain = n3.client("plain")
        plain.subscribe("jobs/#")
        await until(lambda: all(n.cluster.table.filters_of(p.name) >= {"$share/workers/jobs/+"}
                                for n in nodes for p in nodes if p is not n))
        for publisher_node in nodes:  # from a node with members and from one without
            publisher = publisher_node.client(f"pub-{publisher_node.name}")
            for i in range(30):
                publisher.publish(f"jobs/{i}", f"{publisher_node.name}-{i}".encode())
        sent = [f"{n.name}-{i}".encode() for n in nodes for i in range(30)]
        await until(lambda: sum(len(m.received) for m in members) >= len(sent)
                    and len(plain.received) == len(sent), what="the deliveries")
        await settle()
        got = [p for m in members for p in m.payloads]
        assert sorted(got) == sorted(sent)  # each once, none lost
        assert all(m.received for m in members)  # every member had a turn
        assert sorted(plain.payloads) == sorted(sent)

    run_cluster(scenario)


def test_retained_messages_replicate_and_a_late_node_gets_them() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, _n2, n3 = nodes
        publisher = n1.client("pub")
        publisher.publish("r/1", b"one", retain=True)
        publisher.publish("r/2", b"two", retain=True)
        await until(lambda: all(set(n.broker.retained) == {"r/1", "r/2"} for n in nodes))
        subscriber = n3.client("sub")
        subscriber.subscribe("r/#")
        await until(lambda: sorted(subscriber.payloads) == [b"one", b"two"])
        assert all(p.retain for p in subscriber.received)
        publisher.publish("r/2", b"", retain=True)  # clear it everywhere
        await until(lambda: all(set(n.broker.retained) == {"r/1"} for n in nodes))
        late = Node("n4", [address("n2")], network.transport("n4", PORT))
        nodes.append(late)
        await late.start()
        await until(lambda: set(late.broker.retained) == {"r/1"})
        assert late.broker.retained["r/1"].payload == b"one"

    run_cluster(scenario)


def test_a_client_connecting_on_another_node_takes_its_session_over() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        first = n1.client("device")
        await settle()
        assert not first.wire.closed
        second = n2.client("device")
        await until(lambda: first.wire.closed, what="the takeover")
        assert not second.wire.closed
        assert n1.broker.connected_count == 0
        assert n2.broker.connected_count == 1
        assert n3.broker.connected_count == 0

    run_cluster(scenario)


def test_tcp_transport_on_loopback() -> None:
    """The same cluster over real sockets: TcpTransport, port 0, two nodes."""
    from hive_core.cluster import TcpTransport

    async def main() -> None:
        seeds: list[ClusterNodeAddress] = []
        nodes = [Node(name, [], TcpTransport("127.0.0.1", 0), host="127.0.0.1", port=0)
                 for name in ("a", "b")]
        try:
            for node in nodes:
                node.discovery.seeds = seeds
                await node.start()
                seeds.append(node.cluster.address)
            assert seeds[0].port and seeds[0] != seeds[1]
            await until(full_mesh(nodes), what="a mesh over TCP")
            sub = nodes[1].client("sub")
            sub.subscribe("x")
            await until(lambda: nodes[0].cluster.table.filters_of("b") == {"x"})
            nodes[0].client("pub").publish("x", b"over tcp")
            await until(lambda: sub.payloads == [b"over tcp"])
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(main())


def test_extension_discovery_reloads_at_the_configured_interval() -> None:
    """`<discovery><extension><reload-interval>` paces reloads when no extension sets its own."""

    class CountingDiscovery:
        def __init__(self) -> None:
            self.reloads = 0

        @hookimpl
        def hive_discovery_reload(self) -> list[ClusterNodeAddress]:
            self.reloads += 1
            return []

    async def main() -> None:
        network = MemoryNetwork()
        discovery = CountingDiscovery()
        manager = ExtensionManager(builtins=(), discover_installed=False)
        manager.register("counting", discovery)
        broker = Broker(BrokerSettings(), MemorySessionStore())
        settings = ClusterSettings("n1", PORT, "n1", PORT, heartbeat_interval=HEARTBEAT,
                                   heartbeat_timeout=HEARTBEAT_TIMEOUT, connect_timeout=0.2,
                                   discovery_reload_interval=0.05)
        cluster = Cluster("n1", settings, broker, Extensions(manager),
                          network.transport("n1", PORT))
        broker.start(Snapshot())
        await cluster.start()
        try:
            await until(lambda: discovery.reloads >= 5, timeout=3.0, what="five reloads")
        finally:
            await cluster.stop()
            await broker.stop()

    asyncio.run(main())
