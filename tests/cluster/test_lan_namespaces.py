"""Multicast and broadcast discovery between "hosts": network namespaces on a bridge (root).

Each node runs in a namespace of its own (tests/netns.py), with nothing but the transport's
bind address and the discovery configured (heartbeat and announce intervals shortened so the
test is quick). Inside a fresh namespace every port is free, so the nodes use fixed ports there.
The times the cluster took to form are printed (``pytest -s``) for the README.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import HiveProcess, render_config
from netns import Host, Testbed, testbed

from cluster._nodes import wait_for

__all__ = ["testbed"]  # the fixture, imported for pytest

REST_PORT = 8080
MQTT_PORT = 1883
HEARTBEAT = "<failure-detection><heartbeat><interval>300</interval><timeout>1500</timeout>" \
            "</heartbeat></failure-detection>"
ANNOUNCE_MS = 250
# Nodes bound to a LAN address must authenticate each other (issue 8): the links carry it.
SECRET = "<authentication><shared-secret>a-secret-for-tests-only</shared-secret></authentication>"


def lan_body(mechanism: str, bind_address: str | None, rest_port: int = REST_PORT,
             cluster_extra: str = HEARTBEAT, bind_port: int | None = None,
             broadcast_address: str | None = None) -> str:
    bind = f"<bind-address>{bind_address}</bind-address>" if bind_address else ""
    bind += f"<bind-port>{bind_port}</bind-port>" if bind_port else ""
    if mechanism == "multicast":
        cluster = (f"<transport><udp>{bind}</udp></transport><discovery><multicast>"
                   f"<announce-interval>{ANNOUNCE_MS}</announce-interval></multicast></discovery>")
    else:
        address = (f"<broadcast-address>{broadcast_address}</broadcast-address>"
                   if broadcast_address else "")
        cluster = (f"<transport><tcp>{bind}</tcp></transport><discovery><broadcast>{address}"
                   f"<announce-interval>{ANNOUNCE_MS}</announce-interval></broadcast></discovery>")
    secret = SECRET if bind_address else ""  # without one, the cluster stays on loopback
    return (f"<cluster><enabled>true</enabled>{cluster}{cluster_extra}{secret}</cluster>"
            f"<rest-api><enabled>true</enabled><listeners><http><port>{rest_port}</port>"
            "<bind-address>127.0.0.1</bind-address></http></listeners></rest-api>"
            "<persistence><mode>in-memory</mode></persistence>")


class NamespaceNodes:
    """`hive run` processes inside namespaces; each stopped by PID at teardown."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.nodes: list[HiveProcess] = []
        self.hosts: dict[int, Host] = {}
        self.rest: dict[int, int] = {}

    def add(self, host: Host, body: str, mqtt_port: int = MQTT_PORT,
            rest_port: int = REST_PORT) -> HiveProcess:
        folder = self.folder / f"node{len(self.nodes) + 1}-{host.name.rsplit('-', 1)[1]}"
        folder.mkdir()
        node = HiveProcess(folder, render_config(mqtt_port, body), mqtt_port, {})
        node.launcher = tuple(host.command([]))
        self.nodes.append(node)
        self.hosts[id(node)] = host
        self.rest[id(node)] = rest_port
        return node

    def members(self, node: HiveProcess) -> set[str]:
        """The member ids ``node`` reports (GET /api/v1/cluster/nodes, from its namespace)."""
        answer = self.hosts[id(node)].http_json(self.rest[id(node)], "/api/v1/cluster/nodes")
        return {item["id"] for item in answer["items"]}

    def wait_members(self, nodes: list[HiveProcess], expected: Callable[[], set[str]],
                     timeout: float, what: str) -> float:
        def agree() -> bool:
            try:
                return all(self.members(n) == expected() for n in nodes)
            except OSError:
                return False  # a REST listener not up yet
        return wait_for(agree, timeout, what)

    def stop_all(self) -> None:
        for node in self.nodes:
            node.stop()


def node_id(node: HiveProcess) -> str:
    return (node.data_dir / "node-id").read_text().strip()


@pytest.fixture
def namespace_nodes(tmp_path: Path, testbed: Testbed) -> Iterator[NamespaceNodes]:
    nodes = NamespaceNodes(tmp_path)
    try:
        yield nodes
    finally:
        nodes.stop_all()  # before the testbed fixture deletes the namespaces


@pytest.mark.parametrize(("mechanism", "subnet_broadcast"), [
    ("multicast", False), ("broadcast", False), ("broadcast", True)],
    ids=["multicast", "broadcast-255.255.255.255", "broadcast-subnet"])
def test_three_hosts_form_a_cluster_lose_a_killed_node_and_take_it_back(
        testbed: Testbed, namespace_nodes: NamespaceNodes, mechanism: str,
        subnet_broadcast: bool) -> None:
    lan, elsewhere = testbed.segment(), testbed.segment()
    hosts = [testbed.host(lan) for _ in range(3)]
    outsider_host = testbed.host(elsewhere)  # same setup, but not on the bridge
    nodes = [namespace_nodes.add(h, lan_body(
        mechanism, h.address, broadcast_address=lan.broadcast if subnet_broadcast else None))
        for h in hosts]
    outsider = namespace_nodes.add(outsider_host, lan_body(
        mechanism, outsider_host.address,
        broadcast_address=elsewhere.broadcast if subnet_broadcast else None))
    outsider.start()

    begun = time.monotonic()
    with ThreadPoolExecutor(3) as starting:  # all at once, as an operator's script would
        list(starting.map(HiveProcess.start, nodes))
    all_started = time.monotonic()
    ids = {node_id(n) for n in nodes}
    namespace_nodes.wait_members(nodes, lambda: ids, 15, "3 nodes form one cluster")
    formed = time.monotonic()
    assert all(f"{mechanism.capitalize()} discovery on interface eth0" in n.log for n in nodes)

    nodes[2].kill()
    survivors = nodes[:2]
    left = namespace_nodes.wait_members(survivors, lambda: ids - {node_id(nodes[2])}, 10,
                                        "the killed node leaves")
    restarted_at = time.monotonic()
    nodes[2].start()
    namespace_nodes.wait_members(nodes, lambda: ids, 15, "the restarted node rejoins")
    rejoined = time.monotonic() - restarted_at

    assert namespace_nodes.members(outsider) == {node_id(outsider)}
    assert node_id(outsider) not in "".join(n.log for n in nodes)
    name = mechanism + (f" to {lan.broadcast}" if subnet_broadcast else "")
    print(f"\n{name}: 3 nodes started together served after {all_started - begun:.2f} s; "
          f"the cluster of 3 formed {formed - begun:.2f} s after the start "
          f"({formed - all_started:.2f} s after the last served); kill -9 noticed in "
          f"{left:.2f} s; the restarted node rejoined {rejoined:.2f} s after its start began")


def _listener(host: Host, mechanism: str) -> list[socket.socket]:
    """Sockets in ``host`` that get what discovery sends on its first interface's LAN."""
    if mechanism == "multicast":
        sock = host.udp_socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("228.8.8.8", 45588))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                        socket.inet_aton("228.8.8.8") + socket.inet_aton(host.address))
        socks = [sock]
    else:
        socks = []
        for port in range(8555, 8561):
            sock = host.udp_socket()
            sock.bind(("0.0.0.0", port))
            socks.append(sock)
    for sock in socks:
        sock.setblocking(False)
    return socks


def _heard(socks: list[socket.socket]) -> list[tuple[bytes, Any]]:
    got = []
    for sock in socks:
        while True:
            try:
                got.append(sock.recvfrom(2048))
            except BlockingIOError:
                break
    return got


@pytest.mark.parametrize("mechanism", ["multicast", "broadcast"])
def test_announcements_leave_only_through_the_configured_interface(
        testbed: Testbed, namespace_nodes: NamespaceNodes, mechanism: str) -> None:
    lan_a, lan_b = testbed.segment(), testbed.segment()
    pinned = testbed.host(lan_a, lan_b)  # eth0 on A, eth1 on B; its routes point to B
    testbed.route(pinned, "add", "default", "dev", "eth1")
    testbed.route(pinned, "add", "224.0.0.0/4", "dev", "eth1")
    unpinned = testbed.host(lan_a)  # no bind address: loopback, though its routes lead to A
    testbed.route(unpinned, "add", "default", "dev", "eth0")
    testbed.route(unpinned, "add", "224.0.0.0/4", "dev", "eth0")
    on_a, on_b = testbed.host(lan_a), testbed.host(lan_b)
    listening_a, listening_b = _listener(on_a, mechanism), _listener(on_b, mechanism)
    try:
        pinned_node = namespace_nodes.add(pinned, lan_body(mechanism, pinned.address)).start()
        unpinned_node = namespace_nodes.add(unpinned, lan_body(mechanism, None)).start()
        time.sleep(6 * ANNOUNCE_MS / 1000)
        heard_a, heard_b = _heard(listening_a), _heard(listening_b)
    finally:
        for sock in listening_a + listening_b:
            sock.close()
    assert heard_a, "nothing arrived on the configured interface's LAN"
    assert {sender[0] for _data, sender in heard_a} == {pinned.address}
    assert all(node_id(pinned_node).encode() in data for data, _sender in heard_a)
    assert heard_b == [], "an announcement followed the route to the other LAN"
    assert f"{mechanism.capitalize()} discovery stays on loopback" in unpinned_node.log
    assert "on interface lo (127.0.0.1)" in unpinned_node.log


def test_a_bare_cluster_element_forms_a_cluster_on_one_host_and_keeps_it_there(
        testbed: Testbed, namespace_nodes: NamespaceNodes) -> None:
    """<enabled>true</enabled> and a port per node: UDP, multicast on loopback, defaults."""
    lan = testbed.segment()
    host, neighbour = testbed.host(lan), testbed.host(lan)
    bodies = [lan_body("multicast", None, rest_port=8081 + i, cluster_extra="",
                       bind_port=8001 + i) for i in range(3)]
    bare = [b.replace(f"<discovery><multicast><announce-interval>{ANNOUNCE_MS}"
                      "</announce-interval></multicast></discovery>", "") for b in bodies]
    nodes = [namespace_nodes.add(host, body, mqtt_port=1884 + i, rest_port=8081 + i)
             for i, body in enumerate(bare)]
    lonely = namespace_nodes.add(neighbour, bare[0], mqtt_port=1884, rest_port=8081)
    lonely.start()
    begun = time.monotonic()
    for node in nodes:
        node.start()
    ids = {node_id(n) for n in nodes}
    namespace_nodes.wait_members(nodes, lambda: ids, 20, "3 bare nodes on one host cluster")
    formed = time.monotonic() - begun
    assert "group 228.8.8.8 port 45588, TTL 1, announcing every 2.0 s" in nodes[0].log
    assert namespace_nodes.members(lonely) == {node_id(lonely)}
    print(f"\nbare <cluster>: 3 nodes on one host formed a cluster {formed:.2f} s after the "
          "first start (default 2 s announce interval)")
