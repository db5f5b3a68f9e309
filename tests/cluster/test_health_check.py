"""The TCP health check: a peer whose health connection dies is removed at once, long before
the heartbeat timeout, over the TCP and the UDP transport alike."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

from cluster.test_membership import until
from cluster.test_udp import UdpNode, full_mesh
from hive_core.cluster import HealthCheck, HealthCheckSettings, TcpTransport

HEARTBEAT = (5.0, 30.0)  # seconds: no heartbeat decides anything within these tests


def make(kind: str, name: str, health: bool = True) -> UdpNode:
    transport = TcpTransport("127.0.0.1", 0) if kind == "tcp" else None
    return UdpNode(name, transport, heartbeat=HEARTBEAT, health=health)


async def two_nodes(kind: str, health: tuple[bool, bool] = (True, True)) -> list[UdpNode]:
    nodes = [make(kind, f"n{i + 1}", on) for i, on in enumerate(health)]
    await nodes[0].start([])
    await nodes[1].start([nodes[0].cluster.address])
    await until(full_mesh(nodes), what="a mesh")
    for node in nodes:
        node.discovery.seeds = []  # nobody dials again after a removal
    return nodes


def run(kind: str, scenario: object, health: tuple[bool, bool] = (True, True)) -> None:
    async def main() -> None:
        nodes = await two_nodes(kind, health)
        try:
            await scenario(nodes)  # type: ignore[operator]
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["tcp", "udp"])
def test_each_node_holds_a_health_connection_to_each_peer(kind: str) -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        assert n1.cluster.health is not None and n2.cluster.health is not None
        await until(lambda: all(w.transport is not None for n in nodes
                                for w in n.cluster.health._watches.values()),  # type: ignore[union-attr]
                    what="the health connections")
        assert set(n1.cluster.health._watches) == {"n2"}
        assert set(n2.cluster.health._watches) == {"n1"}
        await until(lambda: len(n1.cluster.health._accepted) == 1)  # type: ignore[union-attr]

    run(kind, scenario)


@pytest.mark.parametrize("kind", ["tcp", "udp"])
def test_a_peer_whose_health_connection_dies_is_removed_at_once(
        kind: str, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        assert n2.cluster.health is not None
        await until(lambda: n1.cluster.health._watches["n2"].transport is not None)  # type: ignore[union-attr]
        began = time.monotonic()
        if kind == "udp":
            n2.transport.kill()  # type: ignore[attr-defined]  # the process dies: no BYE, no FIN
        await n2.cluster.health.close()  # its kernel closes its TCP connections
        await until(lambda: not n1.peers, timeout=1.0, what="the removal")
        assert time.monotonic() - began < HEARTBEAT[1] / 30
        assert "Cluster node n2 left the cluster: TCP health check failed: connection closed" \
            in caplog.text

    with caplog.at_level(logging.WARNING, "hive.cluster"):
        run(kind, scenario)


@pytest.mark.parametrize("kind", ["tcp", "udp"])
def test_a_health_port_that_cannot_be_reached_is_warned_about_and_the_peer_stays(
        kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """The peer just said HELLO: it is alive; only its health port is out of reach (NAT).

    Removing it made it rejoin at the next discovery reload and leave again (issue 9)."""
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]

    async def main() -> None:
        n1 = make(kind, "n1")
        n2 = make(kind, "n2")
        assert n2.cluster.health is not None
        n2.cluster.health.settings = HealthCheckSettings("127.0.0.1", external_port=dead_port)
        try:
            await n1.start([])
            await n2.start([n1.cluster.address])
            await until(lambda: "TCP health check: cannot connect" in caplog.text,
                        timeout=2.0, what="the failed health connection")
            assert f"cluster node n2 at 127.0.0.1:{dead_port}" in caplog.text
            assert "<external-address>" in caplog.text  # says what to set
            await asyncio.sleep(0.3)
            assert set(n1.peers) == {"n2"}
            assert "left the cluster" not in caplog.text
        finally:
            await n2.stop()
            await n1.stop()

    with caplog.at_level(logging.WARNING, "hive.cluster"):
        asyncio.run(main())


def test_a_peer_without_the_health_check_is_not_watched() -> None:
    """An older node (or one with the check off) sends no health_port: it is simply not watched."""
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        assert n2.cluster.health is None
        assert "health_port" not in n2.cluster.membership.hello()
        await asyncio.sleep(0.1)
        assert n1.cluster.health is not None and not n1.cluster.health._watches
        assert full_mesh(nodes)()

    run("udp", scenario, health=(True, False))


def test_a_node_leaving_is_not_reported_twice(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(nodes: list[UdpNode]) -> None:
        n1, n2 = nodes
        await n2.stop()
        await until(lambda: not n1.peers, what="the leave")
        await asyncio.sleep(0.1)
        assert caplog.text.count("Cluster node n2 left the cluster") == 1

    with caplog.at_level(logging.WARNING, "hive.cluster"):
        run("udp", scenario)


def test_the_health_port_is_the_first_free_one_in_the_range() -> None:
    async def main() -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]

        def check(port_range: int) -> HealthCheck:
            return HealthCheck("n", HealthCheckSettings("127.0.0.1", port, port_range),
                               lambda *_: None, 1.0)

        first, second, full = check(5), check(5), check(0)
        try:
            await first.start()
            await second.start()
            assert first.port == port
            assert port < second.port <= port + 5
            with pytest.raises(OSError, match=f"<tcp-health-check> on 127.0.0.1:{port}: "
                               "address already in use"):
                await full.start()
        finally:
            for health in (first, second, full):
                await health.close()

    asyncio.run(main())


def test_the_advertised_port_and_host_can_be_external() -> None:
    async def main() -> None:
        health = HealthCheck("n", HealthCheckSettings("127.0.0.1", 0, 50, "10.1.2.3", 19999),
                             lambda *_: None, 1.0)
        try:
            await health.start()
            assert (health.host, health.port) == ("10.1.2.3", 19999)
        finally:
            await health.close()

    asyncio.run(main())
