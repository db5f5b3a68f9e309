"""Nodes behind NAT (seed 004's example: an external address and port), and the advertised address.

Two real nodes each sit behind a port forwarder that stands in for NAT: the other node can reach
it only through its external (public) address and port, which are loopback aliases
(127.0.0.11, 127.0.0.12) and forwarded ports. Membership must form once and stay formed.
"""

from __future__ import annotations

import time

import pytest
from conftest import free_port

from cluster._nat import PortForward
from cluster._nodes import cluster_nodes, metrics, node_id, wait_for_members

pytestmark = pytest.mark.timeout(90)

HEARTBEAT = "<heartbeat><interval>500</interval><timeout>2000</timeout></heartbeat>"
STATIC_RELOAD = 5.0  # seconds between two static discovery reloads (static_discovery.py)


def _nat_body(bind_port: int, public: tuple[str, int], listed: list[tuple[str, int]],
              rest_port: int, health: str = "") -> str:
    nodes = "".join(f"<node><host>{h}</host><port>{p}</port></node>" for h, p in listed)
    return (
        "<cluster><enabled>true</enabled>"
        "<transport><tcp><bind-address>127.0.0.1</bind-address>"
        f"<bind-port>{bind_port}</bind-port>"
        f"<external-address>{public[0]}</external-address>"
        f"<external-port>{public[1]}</external-port></tcp></transport>"
        f"<discovery><static>{nodes}</static></discovery>"
        f"<failure-detection>{HEARTBEAT}{health}</failure-detection></cluster>"
        "<rest-api><enabled>true</enabled><listeners><http>"
        f"<port>{rest_port}</port><bind-address>127.0.0.1</bind-address>"
        "</http></listeners></rest-api><persistence><mode>in-memory</mode></persistence>"
    )


@pytest.fixture
def nat():  # type: ignore[no-untyped-def]
    forwards: list[PortForward] = []

    def forward(public_host: str, private_port: int) -> PortForward:
        forwarding = PortForward((public_host, 0), ("127.0.0.1", private_port))
        forwards.append(forwarding)
        return forwarding

    yield forward
    for forwarding in forwards:
        forwarding.close()


def _start_pair(hive_factory, nat, listed: str, health: str = ""):  # type: ignore[no-untyped-def]
    bind_ports = [free_port(), free_port()]
    forwards = [nat(f"127.0.0.{11 + i}", port) for i, port in enumerate(bind_ports)]
    publics = [f.public for f in forwards]
    privates = [("127.0.0.1", p) for p in bind_ports]
    nodes = []
    for i, bind_port in enumerate(bind_ports):
        addresses = {"public": publics, "private": privates, "both": publics + privates}[listed]
        rest = free_port()
        nodes.append(hive_factory(body=_nat_body(bind_port, publics[i], addresses, rest, health),
                                  rest=rest))
    return nodes, publics


def _membership_holds(nodes, seconds: float) -> None:  # type: ignore[no-untyped-def]
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for node in nodes:
            assert len(cluster_nodes(node)) == 2, node.log
        time.sleep(0.2)
    for node in nodes:
        assert "left the cluster" not in node.log, node.log
        assert node.log.count("joined the cluster") == 1, node.log


def test_nodes_behind_nat_form_a_cluster_that_stays_formed(hive_factory, nat):
    """The static list names the external addresses, as behind NAT: joined once, never left."""
    nodes, publics = _start_pair(hive_factory, nat, "public")
    wait_for_members(nodes, 2, timeout=15)
    _membership_holds(nodes, 2.5 * STATIC_RELOAD)
    a, b = nodes
    seen_by_a = {m["id"]: (m["address"], m["port"]) for m in cluster_nodes(a)}
    assert seen_by_a[node_id(b)] == publics[1]  # the peer as it advertises itself
    assert seen_by_a[node_id(a)] == publics[0]


def test_a_node_listed_under_two_addresses_is_one_member_that_stays(hive_factory, nat):
    """External and LAN addresses both listed: a node reached under its second address is
    remembered as the member it is, so discovery stops dialling it. The first time a node dials
    the other's second address the two may agree on that new link (one swap, at most one brief
    leave and rejoin); after that, nothing changes."""
    nodes, _ = _start_pair(hive_factory, nat, "both")
    wait_for_members(nodes, 2, timeout=15)
    # every address gets dialled once; a busy machine may need a reload or two more
    handshakes = [_handshakes(node) for node in nodes]
    for _ in range(4):
        time.sleep(STATIC_RELOAD + 1.0)
        before, handshakes = handshakes, [_handshakes(node) for node in nodes]
        if handshakes == before:
            break
    settled = [node.log.count("left the cluster") for node in nodes]
    assert all(count <= 1 for count in settled), [n.log for n in nodes]
    until = time.monotonic() + 2 * STATIC_RELOAD
    while time.monotonic() < until:
        for node in nodes:
            assert len(cluster_nodes(node)) == 2, node.log
        time.sleep(0.2)
    assert [node.log.count("left the cluster") for node in nodes] == settled
    assert [_handshakes(node) for node in nodes] == handshakes  # nobody dials anybody again


def _handshakes(node) -> int:  # type: ignore[no-untyped-def]
    frames = metrics(node)["cluster"]["frames_in"]
    return int(frames.get("HELLO", 0)) + int(frames.get("WELCOME", 0))


def test_health_check_behind_nat_uses_its_own_external_address(hive_factory, nat):
    """<tcp-health-check> with its external address and port, forwarded like the transport."""
    health_ports = [free_port(), free_port()]
    forwards = [nat(f"127.0.0.{21 + i}", port) for i, port in enumerate(health_ports)]
    bind_ports = [free_port(), free_port()]
    cluster_forwards = [nat(f"127.0.0.{11 + i}", port) for i, port in enumerate(bind_ports)]
    publics = [f.public for f in cluster_forwards]
    nodes = []
    for i in range(2):
        health = ("<tcp-health-check><bind-address>127.0.0.1</bind-address>"
                  f"<bind-port>{health_ports[i]}</bind-port><port-range>0</port-range>"
                  f"<external-address>{forwards[i].public[0]}</external-address>"
                  f"<external-port>{forwards[i].public[1]}</external-port></tcp-health-check>")
        rest = free_port()
        nodes.append(hive_factory(body=_nat_body(bind_ports[i], publics[i], publics, rest,
                                                 health), rest=rest))
    wait_for_members(nodes, 2, timeout=15)
    _membership_holds(nodes, 1.5 * STATIC_RELOAD)
    # each node holds its health connection to the other through the other's forwarder
    assert [f.accepted for f in forwards] == [1, 1]


def test_host_discovery_address_is_what_the_node_advertises(hive_factory, nat):
    """Seed 000's <host-discovery-address>: the address other nodes reach this node on."""
    port_a, port_b = free_port(), free_port()
    forward = nat("127.0.0.13", port_b)  # only through it is B reachable at 127.0.0.13
    listed = (f"<node><host>127.0.0.1</host><port>{port_a}</port></node>"
              f"<node><host>{forward.public[0]}</host><port>{forward.public[1]}</port></node>")
    bodies = []
    for port, extra in ((port_a, ""),
                        (port_b, f"<host-discovery-address>{forward.public[0]}"
                                 "</host-discovery-address>")):
        rest = free_port()
        bodies.append((rest,
                       "<cluster><enabled>true</enabled>"
                       "<transport><tcp><bind-address>127.0.0.1</bind-address>"
                       f"<bind-port>{port}</bind-port>"
                       f"<external-port>{forward.public[1] if extra else 0}</external-port>"
                       f"</tcp></transport>{extra}"
                       f"<discovery><static>{listed}</static></discovery>"
                       f"<failure-detection>{HEARTBEAT}</failure-detection></cluster>"
                       "<rest-api><enabled>true</enabled><listeners><http>"
                       f"<port>{rest}</port><bind-address>127.0.0.1</bind-address>"
                       "</http></listeners></rest-api>"))
    a, b = (hive_factory(body=body, rest=rest) for rest, body in bodies)
    wait_for_members([a, b], 2, timeout=15)
    for node in (a, b):
        seen = {m["id"]: (m["address"], m["port"]) for m in cluster_nodes(node)}
        assert seen[node_id(b)] == forward.public  # not its bind address 127.0.0.1
