"""As an operator runs it: three real `hive run` nodes, only Consul discovery, a real agent.

Each node finds its settings where the README says (``data/extensions/consul-discovery/
consuldiscovery.properties``); the story is hive_ext_api's operator contract, on the service's
healthy instances.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hive_ext_api.testing import OperatorContract

from consul_agent import ConsulAgent

pytestmark = [pytest.mark.operator, pytest.mark.timeout(240)]

PROPERTIES = "consul-discovery/consuldiscovery.properties"


def check_status(agent: ConsulAgent, service: str, node_id: str) -> str | None:
    check = agent.client().agent.checks().get(f"service:{service}-{node_id}")
    return None if check is None else str(check["Status"])


class TestOperator(OperatorContract):
    """A node's entry is a healthy instance; a dead node's TTL check goes critical."""

    NAME, SERVICE, GONE = "consul-discovery", "Consul", "check went critical"
    DEREGISTERED = r"consul-discovery: deregistered this node"
    OUTAGE_FAILED = r"consul-discovery: cannot [\w' ]+: cannot reach Consul"

    @pytest.fixture
    def extension_files(self, agent: ConsulAgent, service: str) -> dict[str, str]:
        """Checks that go critical 3 s after their last pass, passed every second."""
        return {PROPERTIES: agent.properties(service, consul_ttl="3",
                                             consul_update_interval="1")}

    @pytest.fixture
    def live_entries(self, agent: ConsulAgent, service: str) -> Callable[[], set[str]]:
        return lambda: {entry["Service"]["ID"]
                        for entry in agent.client().health.service(service, passing=True)[1]}

    @pytest.fixture
    def entry_name(self, service: str) -> Callable[[str], str]:
        return lambda node_id: f"{service}-{node_id}"

    @pytest.fixture
    def outage(self, agent: ConsulAgent) -> tuple[Callable[[], object], Callable[[], object]]:
        """Back on the same ports, but a dev agent comes back with an empty catalog."""
        return agent.stop, agent.start

    @pytest.fixture
    def after_a_kill(self, agent: ConsulAgent, service: str) -> Callable[..., None]:
        def its_check_is_critical(dead: Any, survivors: list[Any]) -> None:
            assert check_status(agent, service, dead.node_id) == "critical"
        return its_check_is_critical

    @pytest.fixture
    def after_a_clean_stop(self, agent: ConsulAgent, service: str) -> Callable[..., None]:
        def its_check_is_gone(stopped: Any) -> None:
            assert check_status(agent, service, stopped.node_id) is None
        return its_check_is_gone

    @pytest.fixture
    def after_the_outage(self) -> Callable[..., None]:
        def each_registered_again(nodes: list[Any]) -> None:
            for node in nodes:  # at its next pass or its next reload, whichever came first
                node.wait_for_log(r"consul-discovery: .*: registered again", timeout=5)
        return each_registered_again
