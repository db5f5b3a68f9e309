"""Fixtures for extension authors, active wherever hive-broker is installed (entry point pytest11).

    def test_my_extension(hive_node_factory):
        node = hive_node_factory(extensions=[my_extension])
        client.connect(node.host, node.port)

``hive_node`` is the same with the extensions of the ``hive_extensions`` fixture, which a test
module overrides to register its own. ``mqtt_client(node)`` is a real MQTT client (paho-mqtt)
whose calls wait for the node's answers:

    def test_refused(hive_node, mqtt_client):
        assert mqtt_client(hive_node).connect("mallory", "x").is_failure
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hive_core.testing._inprocess import RunningNode, start_node
from hive_core.testing._mqtt_client import MQTTV5, MqttTestClient

NodeFactory = Callable[..., RunningNode]


@pytest.fixture
def hive_extensions() -> list[Any]:
    """The extensions ``hive_node`` registers: override it in your test module or conftest."""
    return []


@pytest.fixture
def hive_node_factory(tmp_path: Path) -> Iterator[NodeFactory]:
    """Start nodes: ``factory(extensions=[...], config_xml="<mqtt>...</mqtt>")``.

    Each node runs in-process on a free loopback port with its own data folder; all are stopped
    at the end of the test.
    """
    nodes: list[RunningNode] = []

    def factory(extensions: list[Any] | tuple[Any, ...] = (), config_xml: str = "",
                load_installed: bool = False) -> RunningNode:
        data_dir = tmp_path / f"hive-node-{len(nodes)}"
        node = start_node(data_dir, extensions, config_xml, load_installed)
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        node.stop()


@pytest.fixture
def hive_node(hive_node_factory: NodeFactory, hive_extensions: list[Any]) -> RunningNode:
    """One running node with ``hive_extensions`` registered."""
    return hive_node_factory(extensions=hive_extensions)


@pytest.fixture
def mqtt_client() -> Iterator[Callable[..., MqttTestClient]]:
    """Make clients: ``mqtt_client(node, client_id="", protocol=5)``; closed after the test.

    ``protocol`` is 5 (MQTT 5) or 4 (MQTT 3.1.1). Needs paho-mqtt (``pip install paho-mqtt``).
    """
    clients: list[MqttTestClient] = []

    def make(node: Any, client_id: str = "", protocol: int = MQTTV5,
             timeout: float = 10.0) -> MqttTestClient:
        client = MqttTestClient(node, client_id, protocol, timeout)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
