"""The extension inside a node (in-process, hive-broker's ``hive_node_factory``) with a real
Consul agent."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import hive_ext_consul
from consul_agent import ConsulAgent, free_port
from hive_ext_consul import CONFIG_ENV


def cluster_xml(cluster_port: int, discovery: str = "<extension><reload-interval>1"
                                                    "</reload-interval></extension>") -> str:
    return ("<cluster><enabled>true</enabled><transport><tcp>"
            f"<bind-address>127.0.0.1</bind-address><bind-port>{cluster_port}</bind-port>"
            f"</tcp></transport><discovery>{discovery}</discovery></cluster>"
            "<persistence><mode>in-memory</mode></persistence>")


def configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = tmp_path / "consuldiscovery.properties"
    path.write_text(text)
    monkeypatch.setenv(CONFIG_ENV, str(path))


def instances(agent: ConsulAgent, service: str) -> dict[str, Any]:
    return {entry["Service"]["ID"]: entry["Service"]
            for entry in agent.client().health.service(service, passing=True)[1]}


def test_installed_it_is_active_registers_the_node_and_counts(
        hive_node_factory: Any, agent: ConsulAgent, service: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, wait_until: Callable[..., float]) -> None:
    configure(tmp_path, monkeypatch, agent.properties(service))
    port = free_port()
    node = hive_node_factory(config_xml=cluster_xml(port), load_installed=True)
    record = node.extension("consul-discovery")
    assert (record.active, record.version, record.source) == (True, "1.0.0", "hive_ext_consul")

    node_id = node.services.node_id
    registered = instances(agent, service)
    assert list(registered) == [f"{service}-{node_id}"]
    assert (registered[f"{service}-{node_id}"]["Address"],
            registered[f"{service}-{node_id}"]["Port"]) == ("127.0.0.1", port)
    counters = node.services.metrics.counters
    wait_until(lambda: counters["consul-discovery.queries"].value >= 2, 5, "two reloads")
    assert counters["consul-discovery.errors"].value == 0

    node.stop()  # a clean stop deregisters
    assert instances(agent, service) == {}


def test_an_outage_is_counted_in_the_node_metrics_and_the_node_runs_on(
        hive_node_factory: Any, service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        wait_until: Callable[..., float]) -> None:
    down = ConsulAgent(tmp_path / "never-started")
    configure(tmp_path, monkeypatch, down.properties(service))
    node = hive_node_factory(extensions=[hive_ext_consul.create_plugin()],
                             config_xml=cluster_xml(free_port()))
    counters = node.services.metrics.counters
    wait_until(lambda: counters["consul-discovery.errors"].value >= 3, 10, "three failed calls")
    with socket.create_connection((node.host, node.port), timeout=5):
        pass  # still serving MQTT


def test_a_bad_configuration_refuses_the_extension_not_the_node(
        hive_node_factory: Any, agent: ConsulAgent, service: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    configure(tmp_path, monkeypatch, agent.properties(service, consul_ttl="5",
                                                      consul_update_interval="5"))
    node = hive_node_factory(config_xml=cluster_xml(free_port()), load_installed=True)
    record = node.extension("consul-discovery")
    assert not record.active
    assert "consul-update-interval (5 s) must be above 0 and shorter than consul-ttl (5 s)" \
        in record.reason
    with socket.create_connection((node.host, node.port), timeout=5):
        pass


def test_idle_when_the_node_uses_another_discovery(
        hive_node_factory: Any, agent: ConsulAgent, service: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    configure(tmp_path, monkeypatch, agent.properties(service))
    with caplog.at_level("INFO"):
        node = hive_node_factory(config_xml=cluster_xml(free_port(), "<static/>"),
                                 load_installed=True)
    assert node.extension("consul-discovery").active
    assert "consul-discovery: idle" in caplog.text
    time.sleep(0.5)
    assert instances(agent, service) == {}


def test_installed_under_the_extensions_entry_point() -> None:
    from importlib.metadata import entry_points

    (entry_point,) = entry_points(group="hive.extensions", name="consul-discovery")
    assert entry_point.load() is hive_ext_consul
    assert hive_ext_consul.HIVE_API == ">=1.7,<2"


def test_with_no_settings_of_its_own_it_stays_idle_with_one_info_line(
        hive_node_factory: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Several discovery packages installed together: one nobody set up stays out quietly
    (no WARNING every minute about an agent that is not there)."""
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    with caplog.at_level("INFO"):
        node = hive_node_factory(config_xml=cluster_xml(free_port()), load_installed=True)
        time.sleep(1.5)  # a reload or two
    assert node.extension("consul-discovery").active
    lines = [r for r in caplog.records if r.getMessage().startswith("consul-discovery:")]
    idle = [r for r in lines if "consul-discovery: idle: no settings of its own" in r.getMessage()]
    assert len(idle) == 1 and idle[0].levelname == "INFO", [r.getMessage() for r in lines]
    assert all(r.levelno < logging.WARNING for r in lines), [r.getMessage() for r in lines]
    assert "consul-discovery.queries" not in node.services.metrics.counters


def test_named_in_the_node_configuration_it_runs_on_its_defaults(
        hive_node_factory: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    with caplog.at_level("INFO"):
        node = hive_node_factory(config_xml=cluster_xml(free_port(), (
            "<extension><reload-interval>1</reload-interval><name>consul-discovery</name>"
            "</extension>")), load_installed=True)
    assert node.extension("consul-discovery").active
    assert "every setting has its default" in caplog.text
    assert "consul-discovery.queries" in node.services.metrics.counters
