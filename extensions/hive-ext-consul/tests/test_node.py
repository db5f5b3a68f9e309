"""The extension inside a node (in-process, hive-broker's ``hive_node_factory``) with a real
Consul agent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hive_ext_api.testing import DiscoveryContract, cluster_xml

import hive_ext_consul
from consul_agent import ConsulAgent, free_port
from hive_ext_consul import CONFIG_ENV


def instances(agent: ConsulAgent, service: str) -> dict[str, Any]:
    return {entry["Service"]["ID"]: entry["Service"]
            for entry in agent.client().health.service(service, passing=True)[1]}


class TestContract(DiscoveryContract):
    """What every discovery extension on a shared service does inside a node."""

    NAME, MODULE, CONFIG_ENV, HIVE_API = ("consul-discovery", hive_ext_consul, CONFIG_ENV,
                                          ">=1.7,<2")

    @pytest.fixture
    def working_settings(self, agent: ConsulAgent, service: str) -> str:
        return agent.properties(service)

    @pytest.fixture
    def down_settings(self, service: str, tmp_path: Path) -> str:
        return ConsulAgent(tmp_path / "never-started").properties(service)

    @pytest.fixture
    def wrong_settings(self, agent: ConsulAgent, service: str) -> tuple[str, str]:
        return (agent.properties(service, consul_ttl="5", consul_update_interval="5"),
                "consul-update-interval (5 s) must be above 0 and shorter than consul-ttl (5 s)")

    @pytest.fixture
    def entries(self, agent: ConsulAgent,
                service: str) -> Callable[[], dict[str, tuple[str, int]]]:
        return lambda: {name: (entry["Address"], entry["Port"])
                        for name, entry in instances(agent, service).items()}

    @pytest.fixture
    def entry_name(self, service: str) -> Callable[[str], str]:
        return lambda node_id: f"{service}-{node_id}"


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
