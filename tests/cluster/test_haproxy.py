"""Hive behind HAProxy as users deploy it (issue 10): Debian's haproxy, in TCP mode, round robin
over three `hive run` nodes, with the README's configuration; the nodes' listeners require the
PROXY protocol header.

Clients connect from 127.0.0.2, HAProxy reaches the nodes from 127.0.0.1: a node's access log
naming 127.0.0.2 got the address from the header. A persistent subscriber whose node is
killed resumes its session on another node through HAProxy (replica-count 2, the default). The
reconnect figures (kill -9 of a node to
its clients' CONNACK through HAProxy from another node) are printed (run with -s to see them).
"""

from __future__ import annotations

import functools
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import closing_all, free_port
from e2e._session_helpers import PahoClient
from e2e.certs import PKI, make_pki
from paho.mqtt.enums import CallbackAPIVersion

from cluster import _haproxy
from cluster._haproxy import passthrough_config, readme_config
from cluster._nodes import metrics, start_cluster, wait_for, wait_for_members, wait_for_route

pytestmark = pytest.mark.timeout(90)

haproxy_factory = _haproxy.haproxy_factory  # the fixture, for this module's tests
CLIENT = "127.0.0.2"  # the clients' source address; HAProxy's own is 127.0.0.1
VARIANTS = ["send-proxy", "send-proxy-v2"]


def proxied_tcp(port: int) -> str:
    return (f"<tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address>"
            "<proxy-protocol>true</proxy-protocol><trusted-proxies><proxy>127.0.0.1</proxy>"
            "</trusted-proxies></tcp-listener>")


@pytest.fixture
def clients() -> Iterator[Callable[..., PahoClient]]:
    """Paho clients from 127.0.0.2; every one closed at teardown."""
    with closing_all(functools.partial(PahoClient, bind_address=CLIENT)) as make:
        yield make


def behind_haproxy(hive_factory: Any, haproxy_factory: Any, proxy: str) -> tuple[list[Any], Any]:
    """Three clustered nodes with proxy-protocol listeners, and the README's HAProxy."""
    nodes = start_cluster(hive_factory, 3, listeners=proxied_tcp)
    wait_for_members(nodes, 3)
    port = free_port()
    return nodes, haproxy_factory(readme_config(port, [n.port for n in nodes], proxy), port)


def connections(node: Any, client_id: str) -> list[str]:
    """The source addresses of ``client_id``'s connects in the node's access log."""
    return re.findall(rf"client '{re.escape(client_id)}' connected from (\S+):\d+ ", node.log)


def home_of(nodes: list[Any], client_id: str, skip: Any = None) -> int:
    """The index of the node ``client_id`` (last) connected to, waiting for its log line."""
    found: list[int] = []

    def logged() -> bool:
        found[:] = [i for i, n in enumerate(nodes) if n is not skip and connections(n, client_id)]
        return len(found) == 1

    wait_for(logged, 5.0, f"one node logs {client_id}'s connect")
    return found[0]


def reconnect(clients: Callable[..., PahoClient], port: int, client_id: str,
              within: float = 20.0, **kwargs: Any) -> PahoClient:
    """Connect through HAProxy until a node answers (a client's reconnect loop)."""
    deadline = time.monotonic() + within
    while True:
        client = clients(port, client_id, **kwargs)
        try:
            return client.connect(timeout=2.0)
        except (AssertionError, OSError):
            client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("proxy", VARIANTS)
def test_round_robin_spreads_clients_and_each_node_logs_their_own_address(
        hive_factory: Any, haproxy_factory: Any, clients: Any, proxy: str) -> None:
    nodes, haproxy = behind_haproxy(hive_factory, haproxy_factory, proxy)
    ids = [f"rr-{i}" for i in range(6)]
    for client_id in ids:
        clients(haproxy.port, client_id).connect()
    homes = Counter(home_of(nodes, client_id) for client_id in ids)
    assert homes == {0: 2, 1: 2, 2: 2}, homes  # round robin: two each
    for client_id in ids:
        assert [a for n in nodes for a in connections(n, client_id)] == [CLIENT]
    assert "connected from 127.0.0.1:" not in "".join(n.log for n in nodes)
    # the health checks are not refused: their header (v2 LOCAL, v1 PROXY) is valid
    time.sleep(2.5)  # two or more checks per node
    assert all(metrics(n)["broker"]["proxy_protocol_refused"] == 0 for n in nodes)

    # one broker: a subscriber and a publisher that HAProxy put on different nodes
    subscriber = clients(haproxy.port, "rr-sub").connect()
    subscriber.subscribe("lb/t", qos=1)
    publisher = clients(haproxy.port, "rr-pub").connect()
    sub_home, pub_home = home_of(nodes, "rr-sub"), home_of(nodes, "rr-pub")
    assert sub_home != pub_home
    wait_for_route(nodes[pub_home], nodes[sub_home], "lb/t")
    publisher.publish("lb/t", b"across the cluster", qos=1)
    assert subscriber.next_message().payload == b"across the cluster"


@pytest.mark.parametrize("proxy", VARIANTS)
def test_after_kill_9_of_a_node_its_clients_reconnect_through_haproxy_to_another(
        hive_factory: Any, haproxy_factory: Any, clients: Any, proxy: str) -> None:
    nodes, haproxy = behind_haproxy(hive_factory, haproxy_factory, proxy)
    ids = [f"k-{i}" for i in range(6)]
    connected = {client_id: clients(haproxy.port, client_id).connect() for client_id in ids}
    homes = {client_id: home_of(nodes, client_id) for client_id in ids}
    victim = homes[ids[0]]
    orphans = [c for c in ids if homes[c] == victim]
    assert len(orphans) == 2

    killed_at = time.monotonic()
    nodes[victim].kill()
    for client_id in orphans:
        connected[client_id].wait_disconnected(5.0)
    lost_after = time.monotonic() - killed_at
    figures = []
    for client_id in orphans:  # each reconnects, as a client library would
        begun = time.monotonic()
        reconnect(clients, haproxy.port, client_id)
        figures.append((time.monotonic() - begun, time.monotonic() - killed_at))
        home = home_of(nodes, client_id, skip=nodes[victim])
        assert home != victim
        assert connections(nodes[home], client_id) == [CLIENT]
    # the clients of the other nodes kept their connection
    for client_id in ids:
        if client_id not in orphans:
            assert not connected[client_id].disconnected.is_set(), client_id
    # new clients at once (the health check may not have noticed yet): none is refused, thanks
    # to retries and redispatch, and none lands on the dead node
    new = [f"n-{i}" for i in range(6)]
    for client_id in new:
        clients(haproxy.port, client_id).connect()
    assert all(home_of(nodes, c, skip=nodes[victim]) != victim for c in new)
    print(f"\n{proxy}: connections lost {lost_after * 1000:.0f} ms after kill -9; reconnect "
          "through HAProxy (CONNACK from another node): "
          + ", ".join(f"{r * 1000:.0f} ms after the loss ({t * 1000:.0f} ms after the kill)"
                      for r, t in figures))
    assert all(total < 5.0 for _, total in figures), figures


@pytest.mark.parametrize("proxy", VARIANTS)
def test_a_persistent_subscriber_through_haproxy_survives_the_kill_of_its_node(
        hive_factory: Any, haproxy_factory: Any, clients: Any, proxy: str) -> None:
    nodes, haproxy = behind_haproxy(hive_factory, haproxy_factory, proxy)
    subscriber = clients(haproxy.port, "keeper", clean=False, expiry=600).connect()
    assert subscriber.subscribe("ha/t", qos=1) == [1]
    home = home_of(nodes, "keeper")
    others = [n for i, n in enumerate(nodes) if i != home]
    for node in others:
        wait_for_route(node, nodes[home], "ha/t")

    killed_at = time.monotonic()
    nodes[home].kill()
    subscriber.wait_disconnected(5.0)
    # published while the subscriber is away: kept for its session
    clients(haproxy.port, "pub-1").connect().publish("ha/t", b"while away", qos=1)
    begun = time.monotonic()
    back = reconnect(clients, haproxy.port, "keeper", clean=False, expiry=600)
    resumed = time.monotonic()
    assert home_of(nodes, "keeper", skip=nodes[home]) != home
    assert back.session_present, "the session did not survive the kill of its node"
    assert back.next_message().payload == b"while away"
    print(f"\n{proxy}: persistent subscriber: CONNACK with its session present "
          f"{(resumed - begun) * 1000:.0f} ms after its reconnect began, "
          f"{(resumed - killed_at) * 1000:.0f} ms after kill -9 of its node")
    clients(haproxy.port, "pub-2").connect().publish("ha/t", b"after", qos=1)
    assert back.next_message().payload == b"after"


# ------------------------------------------------------------- every listener kind behind it


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _kinds(ports: dict[str, int], keystore: Path) -> str:
    tls = f"<tls><keystore><path>{keystore}</path></keystore></tls>"
    common = "<bind-address>127.0.0.1</bind-address><proxy-protocol>true</proxy-protocol>"
    return (f"<tcp-listener><port>{ports['tcp']}</port>{common}</tcp-listener>"
            f"<tls-tcp-listener><port>{ports['tls-tcp']}</port>{common}{tls}</tls-tcp-listener>"
            f"<websocket-listener><port>{ports['websocket']}</port>{common}"
            "</websocket-listener>"
            f"<tls-websocket-listener><port>{ports['tls-websocket']}</port>{common}{tls}"
            "</tls-websocket-listener>")


@pytest.mark.parametrize("proxy", VARIANTS)
def test_every_listener_kind_takes_the_header_from_haproxy(
        hive_factory: Any, haproxy_factory: Any, pki: PKI, proxy: str) -> None:
    kinds = ("tcp", "tls-tcp", "websocket", "tls-websocket")
    node_ports = {kind: free_port() for kind in kinds}
    front = {kind: free_port() for kind in kinds}
    node = hive_factory(listeners=_kinds(node_ports, pki.server_pem), port=node_ports["tcp"])
    haproxy_factory(passthrough_config([(front[k], node_ports[k]) for k in kinds], proxy),
                    front["tcp"])
    made = []
    try:
        for kind in kinds:
            client_id = f"{kind}-{uuid.uuid4().hex[:6]}"
            paho = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                               transport="websockets" if "websocket" in kind else "tcp")
            made.append(paho)
            if kind.startswith("tls"):
                paho.tls_set(ca_certs=str(pki.ca_pem))
            acks: list[Any] = []
            paho.on_connect = lambda c, u, f, rc, p=None, acks=acks: acks.append(rc)
            paho.connect("127.0.0.1", front[kind], 30, bind_address=CLIENT)
            paho.loop_start()
            wait_for(lambda acks=acks: bool(acks), 5.0, f"CONNACK on {kind}")
            assert not acks[0].is_failure
            node.wait_for_log(rf"client '{client_id}' connected from {re.escape(CLIENT)}:\d+ "
                              rf"on {kind}-listener-{node_ports[kind]} ")
    finally:
        for paho in made:
            paho.disconnect()
            paho.loop_stop()
