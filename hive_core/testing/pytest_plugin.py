"""Fixtures for extension authors, active wherever hive-broker is installed (entry point pytest11).

    def test_my_extension(hive_node_factory):
        node = hive_node_factory(extensions=[my_extension])
        client.connect(node.host, node.port)

``hive_node`` is the same with the extensions of the ``hive_extensions`` fixture, which a test
module overrides to register its own. ``mqtt_client(node)`` is a real MQTT client (paho-mqtt)
whose calls wait for the node's answers:

    def test_refused(hive_node, mqtt_client):
        assert mqtt_client(hive_node).connect("mallory", "x").is_failure

``hive_processes`` starts real `hive run` processes with a cluster (extension discovery by
default) and a REST API, as an operator would; ``wait_until`` polls a condition; ``hive_metrics``
is a metrics registry for an extension started without a node; ``hive_only_installed("name")``
keeps the other installed extensions out of the nodes a test starts; ``hive_impostor_url`` and
``hive_silent_port`` stand in for a service that answers garbage, or never answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from hive_core.testing._impostors import impostor_http_server, silent_port
from hive_core.testing._inprocess import RunningNode, start_node
from hive_core.testing._metrics import RecordingMetrics
from hive_core.testing._mqtt_client import MQTTV5, MqttTestClient
from hive_core.testing._processes import HiveProcesses, wait_until
from hive_ext_api import ENTRY_POINT_GROUP

DISABLED_ENV = "HIVE_DISABLED_EXTENSIONS"  # the extension manager's (hive_core.plugins)

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


@pytest.fixture
def hive_processes(tmp_path: Path) -> Iterator[HiveProcesses]:
    """`hive run` nodes: ``hive_processes.add(extension_files={...}, env={...})``, then
    ``start()``, ``kill()`` (-9), ``terminate()``, ``members()``, ``extension_metric(name)``;
    ``hive_processes.agree(nodes, 3)`` waits until they list the same members, ``form(nodes)``
    launches them together and waits for that, ``join(node, nodes)`` starts one more, and
    ``ride_out_an_outage(...)`` takes a discovery service away and back. Every node is stopped
    by its PID at the end of the test."""
    nodes = HiveProcesses(tmp_path / "hive-processes")
    try:
        yield nodes
    finally:
        nodes.stop_all()


@pytest.fixture(name="wait_until")
def wait_until_fixture() -> Callable[..., float]:
    """``wait_until(check, timeout, what)``: poll until ``check()`` is true; the seconds it took."""
    return wait_until


@pytest.fixture
def hive_metrics() -> RecordingMetrics:
    """A registry to hand an extension started by hand: ``hive_metrics["name"]`` reads one."""
    return RecordingMetrics()


@pytest.fixture
def hive_only_installed(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``hive_only_installed("my-ext", ...)``: of the extensions installed in this environment,
    nodes started by this test (in-process or `hive run`) load only those named.

    Other packages installed beside yours (a test matrix installs several) are kept out through
    ``HIVE_DISABLED_EXTENSIONS``, which `hive run` processes inherit.
    """
    def only(*names: str) -> None:
        installed = {entry_point.name for entry_point in entry_points(group=ENTRY_POINT_GROUP)}
        monkeypatch.setenv(DISABLED_ENV, ",".join(sorted(installed - set(names))))

    return only


@pytest.fixture
def hive_impostor_url() -> Iterator[str]:
    """The URL of an HTTP server on 127.0.0.1 that answers every request 200 with an HTML page:
    point an extension's service endpoint at it to test an answer that is not the service's."""
    with impostor_http_server() as url:
        yield url


@pytest.fixture
def hive_silent_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 whose connections are accepted and never answered: a hung
    service, to test that an extension gives up within the node's deadline for a hook."""
    with silent_port() as port:
        yield port
