"""The UDP transport: the sans-IO link by property, then real Clusters on 127.0.0.1 over UDP.

Every node is a :class:`Cluster` with a real :class:`Broker` and its own :class:`UdpTransport`
in one event loop; nodes find each other through a seed-list discovery plugin filled in once
their ports are known (multicast discovery is not there yet).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.test_membership import Client, Node, until
from hive_core.broker import Broker, BrokerSettings
from hive_core.cluster import (
    Cluster,
    ClusterSettings,
    HealthCheckSettings,
    NodeTransport,
    TcpTransport,
    UdpTiming,
    UdpTransport,
)
from hive_core.cluster._udp import (
    MAX_DATAGRAM,
    MAX_FRAGMENT,
    Reassembler,
    ReliableLink,
    State,
    fragment,
    parse_header,
)
from hive_core.config import parse_config
from hive_core.node import cluster_settings
from hive_core.persistence import MemorySessionStore
from hive_core.plugins import ExtensionManager, Extensions
from hive_ext_api import ClusterNodeAddress

DEFAULT_TIMING = UdpTiming()
FAST = UdpTiming(rto_initial=0.05, rto_min=0.05, rto_max=0.1, max_retransmits=6)
"""Quick to give up on a dead peer (under a second)."""


# ------------------------------------------------------------------------------ fragments


@given(st.binary(max_size=20_000), st.integers(1, 3000))
def test_fragments_are_small_and_reassemble_to_the_message(message: bytes, size: int) -> None:
    pieces = fragment(message, size)
    assert all(len(piece) <= size for piece, _ in pieces)
    assert [more for _, more in pieces] == [True] * (len(pieces) - 1) + [False]
    assert all(piece for piece, _ in pieces) or len(pieces) == 1  # no empty piece but b""
    reassembler = Reassembler()
    out = [reassembler.feed(piece, more) for piece, more in pieces]
    assert out[:-1] == [None] * (len(pieces) - 1)
    assert out[-1] == message


@given(st.lists(st.binary(max_size=4000), max_size=12))
def test_a_stream_of_messages_reassembles_one_by_one(messages: list[bytes]) -> None:
    reassembler = Reassembler()
    out = [m for message in messages for piece, more in fragment(message, 700)
           if (m := reassembler.feed(piece, more)) is not None]
    assert out == messages


def test_a_message_over_the_limit_breaks_the_reassembly() -> None:
    from hive_core.cluster._udp import ReassemblyError

    reassembler = Reassembler(limit=1000)
    pieces = fragment(bytes(1001), 300)
    with pytest.raises(ReassemblyError):
        for piece, more in pieces:
            reassembler.feed(piece, more)


# ------------------------------------------------------------------------------ the link


class LossyChannel:
    """Two sans-IO links and a simulated network that loses, duplicates and reorders."""

    def __init__(self, seed: int, loss: float, duplicate: float, timing: UdpTiming) -> None:
        self.random = random.Random(seed)
        self.loss = loss
        self.duplicate = duplicate
        self.now = 0.0
        self.dialler = ReliableLink.dialling(1, self.now, timing)
        self.acceptor: ReliableLink | None = None
        self.timing = timing
        self.in_flight: list[tuple[float, int, int, bytes]] = []  # (arrival, order, to, datagram)
        self.order = 0
        self.delivered: list[list[bytes]] = [[], []]
        self.largest = 0

    def links(self) -> list[ReliableLink]:
        return [self.dialler] + ([self.acceptor] if self.acceptor else [])

    def put(self, to: int, datagram: bytes) -> None:
        self.largest = max(self.largest, len(datagram))
        for _ in range(2 if self.random.random() < self.duplicate else 1):
            if self.random.random() < self.loss:
                continue
            self.order += 1
            delay = self.random.uniform(0.001, 0.01)  # different delays: reordering
            heapq.heappush(self.in_flight, (self.now + delay, self.order, to, datagram))

    def step(self) -> bool:
        for index, link in enumerate(self.links()):
            for datagram in link.poll(self.now):
                self.put(1 - index, datagram)
        times = [t for link in self.links() if (t := link.deadline()) is not None]
        if self.in_flight:
            times.append(self.in_flight[0][0])
        if not times:
            return False
        self.now = max(self.now, min(times))
        while self.in_flight and self.in_flight[0][0] <= self.now:
            _, _, to, datagram = heapq.heappop(self.in_flight)
            kind, _destination, source = parse_header(datagram)  # type: ignore[misc]
            if to == 1 and self.acceptor is None:
                self.acceptor = ReliableLink.accepting(2, source, self.now, self.timing)
            target = self.dialler if to == 0 else self.acceptor
            assert target is not None
            self.delivered[to] += target.receive(kind, source, datagram[10:], self.now)
        return True


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=6000), min_size=1, max_size=30),
       st.integers(0, 2**32), st.sampled_from([0.0, 0.1, 0.3]), st.sampled_from([0.0, 0.1]))
def test_a_link_delivers_everything_once_in_order_over_a_bad_network(
        messages: list[bytes], seed: int, loss: float, duplicate: float) -> None:
    channel = LossyChannel(seed, loss, duplicate, UdpTiming(send_window=16, max_retransmits=30))
    for message in messages:
        channel.dialler.send(message)
        channel.step()
    while channel.acceptor is None or channel.acceptor.state is not State.OPEN:
        assert channel.step()
    channel.acceptor.send(b"reply")
    for _ in range(200_000):
        if channel.delivered == [[b"reply"], messages] and all(
                link.drained for link in channel.links()):
            break
        assert channel.step(), "nothing left to do, not everything delivered"
    assert channel.delivered[1] == messages
    assert channel.delivered[0] == [b"reply"]
    assert channel.largest <= MAX_DATAGRAM
    assert not any(link.failure for link in channel.links())


def test_a_link_fails_after_its_retransmissions_run_out() -> None:
    channel = LossyChannel(1, 0.0, 0.0, FAST)
    channel.dialler.send(b"hello")
    while channel.acceptor is None or not channel.delivered[1]:
        channel.step()
    channel.loss = 1.0  # the acceptor is gone
    channel.dialler.send(b"anyone?")
    start = channel.now
    for _ in range(100):
        if not channel.step():
            break
    assert channel.dialler.closed
    assert channel.dialler.failure == "6 retransmissions without an ack"
    assert channel.now - start < 1.0  # bounded backoff: 10 ms .. 100 ms per try


# ------------------------------------------------------------------------------ nodes


class UdpNode(Node):
    """A Cluster and a Broker on 127.0.0.1 over UDP (or TCP), seeds filled in by the test.

    The heartbeat timeout leaves room for a 1 MB frame on a loaded machine: a link hears a frame
    (and so a sign of life) only once all its datagrams are in.
    """

    def __init__(self, name: str, transport: NodeTransport | None = None,
                 heartbeat: tuple[float, float] = (0.05, 3.0), health: bool = False,
                 timing: UdpTiming = DEFAULT_TIMING) -> None:
        self.transport = transport or UdpTransport("127.0.0.1", 0, timing)
        settings = ClusterSettings(
            "127.0.0.1", 0, "127.0.0.1", 0, heartbeat_interval=heartbeat[0],
            heartbeat_timeout=heartbeat[1], connect_timeout=1.0,
            health_check=HealthCheckSettings("127.0.0.1") if health else None)
        super().__init__(name, [], self.transport, settings=settings)


def full_mesh(nodes: list[UdpNode]) -> Callable[[], bool]:
    names = {n.name for n in nodes}
    return lambda: all(n.peers == names - {n.name} for n in nodes)


Scenario = Callable[[list[UdpNode]], Awaitable[None]]


def run_nodes(scenario: Scenario, count: int = 2,
              make: Callable[[str], UdpNode] = UdpNode) -> None:
    """Start ``count`` nodes, each seeded with those started before it; run; stop them all."""
    async def main() -> None:
        nodes = [make(f"n{i}") for i in range(1, count + 1)]
        seeds: list[ClusterNodeAddress] = []
        try:
            for node in nodes:
                await node.start(seeds)
                seeds = [*seeds, node.cluster.address]
            await until(full_mesh(nodes), what="a full mesh")
            await scenario(nodes)
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(main())


async def routed(subscriber_node: UdpNode, publisher_node: UdpNode, topic: str) -> Client:
    subscriber = subscriber_node.client(f"sub-{subscriber_node.name}")
    subscriber.subscribe(topic)
    await until(lambda: publisher_node.cluster.table.filters_of(subscriber_node.name) == {topic},
                what="the subscription to reach the publisher's node")
    return subscriber


def test_three_nodes_join_over_udp_and_route_a_publish() -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2, n3 = nodes
        assert isinstance(n1.cluster.transport, UdpTransport)
        sub = await routed(n3, n1, "x/+")
        n1.client("pub").publish("x/1", b"over udp")
        await until(lambda: sub.payloads == [b"over udp"], what="the delivery")
        assert n2.cluster.metrics.publishes_received == 0
        assert {m.node_id for m in n2.cluster.view()} == {"n1", "n2", "n3"}

    run_nodes(scenario, count=3)


def test_a_1_mb_frame_is_fragmented_and_reassembled() -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        sizes: list[int] = []
        socket = n1.transport._socket  # type: ignore[attr-defined]
        send = socket.sendto
        socket.sendto = lambda data, peer: (sizes.append(len(data)), send(data, peer))
        sub = await routed(n2, n1, "big")
        payload = random.Random(7).randbytes(1024 * 1024)
        n1.client("pub").publish("big", payload)
        await until(lambda: len(sub.received) == 1, timeout=10, what="the 1 MB message")
        assert sub.payloads == [payload]
        assert max(sizes) <= MAX_DATAGRAM
        assert len(sizes) > len(payload) // MAX_FRAGMENT

    run_nodes(scenario)


def test_2000_frames_arrive_in_order() -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        sub = await routed(n2, n1, "seq")
        publisher = n1.client("pub")
        expected = [b"%d" % i for i in range(2000)]
        for i, payload in enumerate(expected):
            publisher.publish("seq", payload)
            if i % 100 == 0:
                await asyncio.sleep(0)  # several batches, not one write
        await until(lambda: len(sub.received) >= 2000, timeout=10, what="2000 messages")
        assert sub.payloads == expected

    run_nodes(scenario)


@pytest.mark.parametrize("seed", [1, 2])
def test_with_a_fifth_of_the_datagrams_lost_everything_arrives_in_order(seed: int) -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        sub = await routed(n2, n1, "lossy")
        for node in nodes:
            node.transport.drop_outgoing(0.2, seed)  # type: ignore[attr-defined]
        publisher = n1.client("pub")
        expected = [b"%d" % i for i in range(2000)]
        expected.insert(1000, bytes(200_000))  # a fragmented one in the middle
        for i, payload in enumerate(expected):
            publisher.publish("lossy", payload)
            if i % 100 == 0:
                await asyncio.sleep(0)
        await until(lambda: len(sub.received) >= len(expected), timeout=20,
                    what="every message despite the loss")
        assert sub.payloads == expected
        retransmissions = sum(end.link.retransmissions
                              for end in n1.transport._ends.values())  # type: ignore[attr-defined]
        assert retransmissions > 0
        assert full_mesh(nodes)()

    def lossy(name: str) -> UdpNode:  # heartbeat timeout long: the links must survive the loss
        return UdpNode(name, heartbeat=(0.05, 30.0),
                       timing=UdpTiming(rto_min=0.05, rto_max=0.2, max_retransmits=12))

    run_nodes(scenario, make=lossy)


def test_a_dead_peer_is_detected_by_its_unacked_heartbeats(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        n2.transport.kill()  # type: ignore[attr-defined]
        await until(lambda: not n1.peers, timeout=3, what="the dead peer to be noticed")
        assert "its connection closed" in caplog.text  # the link failed, not the heartbeat

    def patient(name: str) -> UdpNode:  # the heartbeat timeout never fires in this test
        return UdpNode(name, heartbeat=(0.05, 30.0), timing=FAST)

    with caplog.at_level(logging.WARNING, "hive.cluster"):
        run_nodes(scenario, make=patient)


def test_a_restarted_peer_is_a_new_link_and_rejoins() -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        port = n2.cluster.address.port
        old = n1.cluster.members["n2"].link
        n2.transport.kill()  # type: ignore[attr-defined]
        await n2.stop()
        again = UdpNode("n2", UdpTransport("127.0.0.1", port, FAST), heartbeat=(0.05, 30.0))
        nodes[1] = again
        await again.start([n1.cluster.address])
        await until(full_mesh(nodes), what="the restarted node to rejoin")
        assert n1.cluster.members["n2"].link is not old and old.closed
        sub = await routed(again, n1, "back")
        n1.client("pub").publish("back", b"hello again")
        await until(lambda: sub.payloads == [b"hello again"])

    run_nodes(scenario, make=lambda name: UdpNode(name, heartbeat=(0.05, 30.0), timing=FAST))


def test_a_node_that_leaves_says_bye_over_udp() -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        await n2.stop()
        await until(lambda: not n1.peers, what="the BYE")
        assert n1.cluster.metrics.frames_in["BYE"] == 1
        assert not n1.transport._ends  # type: ignore[attr-defined]

    run_nodes(scenario)


def test_a_dial_to_nobody_is_unreachable_within_the_timeout() -> None:
    from hive_core.cluster import NodeUnreachable
    from hive_core.cluster._link import PeerLink

    async def main() -> None:
        transport = UdpTransport("127.0.0.1", 0, FAST)
        nobody = UdpTransport("127.0.0.1", 0, FAST)  # a socket that does not accept links
        await transport.listen(lambda: PeerLink(lambda *a: None, lambda _: None, False))
        await nobody._open()
        assert nobody.sockname is not None
        try:
            with pytest.raises(NodeUnreachable, match="reset"):  # RST: nobody listens there
                await transport.dial(ClusterNodeAddress(*nobody.sockname),
                                     lambda: PeerLink(lambda *a: None, lambda _: None, True), 1.0)
            await nobody.close()
            with pytest.raises(NodeUnreachable):  # silence: timed out, or setup gave up
                await transport.dial(ClusterNodeAddress(*nobody.sockname),
                                     lambda: PeerLink(lambda *a: None, lambda _: None, True), 0.3)
        finally:
            await transport.close()

    asyncio.run(main())


# ------------------------------------------------------------------------------ config


UDP_CONFIG = """<hivemq><cluster><enabled>true</enabled>
  <transport><udp><bind-address>127.0.0.1</bind-address><bind-port>0</bind-port></udp></transport>
  <discovery><multicast/></discovery>{failure}
</cluster></hivemq>"""


def test_a_udp_config_runs_on_the_udp_transport_with_its_heartbeat_defaults() -> None:
    settings = cluster_settings(parse_config(UDP_CONFIG.format(failure="")))
    assert settings.transport_kind == "udp"
    assert (settings.heartbeat_interval, settings.heartbeat_timeout) == (8.0, 40.0)
    assert settings.health_check == HealthCheckSettings("127.0.0.1", 0, 50, None, 0)
    cluster = Cluster("n", settings, Broker(BrokerSettings(), MemorySessionStore()),
                      Extensions(ExtensionManager(builtins=(), discover_installed=False)))
    assert isinstance(cluster.transport, UdpTransport)


def test_the_health_check_can_be_switched_off_and_placed() -> None:
    off = "<failure-detection><tcp-health-check><enabled>false</enabled>" \
          "</tcp-health-check></failure-detection>"
    assert cluster_settings(parse_config(UDP_CONFIG.format(failure=off))).health_check is None
    placed = ("<failure-detection><tcp-health-check><bind-address>127.0.0.2</bind-address>"
              "<bind-port>9100</bind-port><external-address>10.0.0.9</external-address>"
              "<external-port>19100</external-port><port-range>5</port-range>"
              "</tcp-health-check></failure-detection>")
    settings = cluster_settings(parse_config(UDP_CONFIG.format(failure=placed)))
    assert settings.health_check == HealthCheckSettings("127.0.0.2", 9100, 5, "10.0.0.9", 19100)


def test_a_tcp_config_stays_on_tcp() -> None:
    tcp = UDP_CONFIG.replace("<udp>", "<tcp>").replace("</udp>", "</tcp>").replace(
        "<discovery><multicast/></discovery>", "")
    settings = cluster_settings(parse_config(tcp.format(failure="")))
    assert settings.transport_kind == "tcp"
    assert (settings.heartbeat_interval, settings.heartbeat_timeout) == (3.0, 9.0)
    cluster = Cluster("n", settings, Broker(BrokerSettings(), MemorySessionStore()),
                      Extensions(ExtensionManager(builtins=(), discover_installed=False)))
    assert isinstance(cluster.transport, TcpTransport)
