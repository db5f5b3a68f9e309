"""Extension services across the cluster, on 3 real `hive run` nodes: an extension (loaded on
every node with --extension) answers questions an MQTT client publishes to it, by calling
``cluster_clients()``, ``clients()``, ``cluster_disconnect()`` and ``disconnect()``, and
publishes the answers; real clients are connected to each node."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import HiveProcess

from cluster._nodes import (
    HEARTBEAT,
    cluster_body,
    distinct_free_ports,
    node_id,
    wait_for,
    wait_for_members,
)

pytestmark = pytest.mark.timeout(90)

ADMIN_EXTENSION = '''
import json

from hive_ext_api import hookimpl

CONTEXT = None


@hookimpl
def hive_extension_start(context):
    global CONTEXT
    CONTEXT = context


def answer(value):
    CONTEXT.services.publish("admin/answer", json.dumps(value).encode(), 1)


def rows(clients):
    return [[c.client_id, c.node, c.protocol_version, c.username, c.listener,
             c.remote_address is not None] for c in clients]


@hookimpl
async def hive_intercept_publish_inbound(client, publish):
    services = CONTEXT.services
    asked = publish.payload.decode()
    if publish.topic == "admin/cluster-clients":
        answer(rows(await services.cluster_clients()))
    elif publish.topic == "admin/local-clients":
        answer(rows(services.clients()))
    elif publish.topic == "admin/cluster-disconnect":
        answer(await services.cluster_disconnect(asked))
    elif publish.topic == "admin/local-disconnect":
        answer(services.disconnect(asked))
    return None
'''


class Client:
    """A paho client on its own loop thread; what it receives lands in a queue."""

    def __init__(self, port: int, client_id: str, protocol: int = mqtt.MQTTv5,
                 username: str | None = None) -> None:
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.reasons: queue.Queue[int] = queue.Queue()
        self.paho = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                protocol=protocol)  # type: ignore[arg-type]
        if username:
            self.paho.username_pw_set(username, "secret")
        self.paho.on_message = lambda _c, _u, message: self.messages.put(message)
        self.paho.on_disconnect = lambda _c, _u, _f, reason, _p=None: self.reasons.put(
            reason.value)
        connected: queue.Queue[Any] = queue.Queue()
        self.paho.on_connect = lambda _c, _u, _f, reason, _p=None: connected.put(reason)
        self.paho.connect("127.0.0.1", port, keepalive=30)
        self.paho.loop_start()
        assert not connected.get(timeout=10).is_failure

    def close(self) -> None:
        self.paho.disconnect()
        self.paho.loop_stop()


@pytest.fixture
def three_nodes(hive_factory: Callable[..., HiveProcess]) -> list[HiveProcess]:
    ports = distinct_free_ports(6)
    cluster, rest = ports[:3], ports[3:]
    nodes = []
    for own, rest_port in zip(cluster, rest, strict=True):
        node = hive_factory(body=cluster_body(own, cluster, rest_port, HEARTBEAT), start=False,
                            cluster=own, rest=rest_port)
        (node.folder / "admin.py").write_text(ADMIN_EXTENSION)
        node.args = ["--extension", "./admin.py"]
        nodes.append(node)
    for node in nodes:
        node.start()
    wait_for_members(nodes, 3)
    return nodes


def test_clients_and_disconnect_across_three_nodes(three_nodes: list[HiveProcess]) -> None:
    ids = [node_id(n) for n in three_nodes]
    made: list[Client] = []
    try:
        admin = Client(three_nodes[0].port, "admin")
        made.append(admin)
        admin.paho.subscribe("admin/answer", 1)
        made += [Client(three_nodes[0].port, "alice", username="alice"),
                 Client(three_nodes[1].port, "bob", protocol=mqtt.MQTTv311),
                 Client(three_nodes[2].port, "carol")]
        carol = made[-1]
        time.sleep(0.3)

        def ask(topic: str, payload: str = "") -> Any:
            admin.paho.publish(topic, payload.encode(), 1)
            message = admin.messages.get(timeout=10)
            assert message.topic == "admin/answer"
            return json.loads(message.payload)

        everyone = ask("admin/cluster-clients")
        assert [(row[0], row[1], row[2], row[3]) for row in everyone] == [
            ("admin", ids[0], 5, None), ("alice", ids[0], 5, "alice"), ("bob", ids[1], 4, None),
            ("carol", ids[2], 5, None)]
        assert all(row[4].startswith("tcp-listener") and row[5] for row in everyone)
        # the local variant: this node's only
        assert sorted(row[:2] for row in ask("admin/local-clients")) == [
            ["admin", ids[0]], ["alice", ids[0]]]

        # carol is on node 3: the local variant says no, the cluster-wide one closes it there
        assert ask("admin/local-disconnect", "carol") is False
        assert ask("admin/cluster-disconnect", "carol") == ids[2]
        assert carol.reasons.get(timeout=10) == 0x98  # ADMINISTRATIVE_ACTION, from node 3
        assert ask("admin/cluster-disconnect", "nobody") is None
        wait_for(lambda: "carol" not in [r[0] for r in ask("admin/cluster-clients")], 10,
                 "carol gone from the list")
        assert "client 'carol' disconnected" in three_nodes[2].log
        for node in three_nodes:
            assert "Traceback" not in node.log
            assert "no list of clients" not in node.log
    finally:
        for client in made:
            client.close()
