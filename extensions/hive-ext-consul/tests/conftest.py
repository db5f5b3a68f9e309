"""Fixtures: one real Consul agent (dev mode) for the session; a service name of its own per
test, so tests never see each other's instances."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hive_ext_api.testing import extension_fixtures

from consul_agent import ConsulAgent


@pytest.fixture(autouse=True)
def no_machine_consul_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Consul's tools' variables of the machine must not reach the tests' clients."""
    for name in ("CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_SSL",
                 "CONSUL_HTTP_SSL_VERIFY", "HIVE_CONSUL_DISCOVERY_CONFIG"):
        monkeypatch.delenv(name, raising=False)


only_this_extension, anyio_backend = extension_fixtures("consul-discovery")


@pytest.fixture(scope="session")
def agent_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsulAgent]:
    agent = ConsulAgent(tmp_path_factory.mktemp("consul")).start()
    yield agent
    agent.stop()


@pytest.fixture
def agent(agent_session: ConsulAgent) -> ConsulAgent:
    """The session's agent, running (a test that stopped it leaves it to be started again)."""
    if not agent_session.running:
        agent_session.start()
    return agent_session


@pytest.fixture
def service() -> str:
    return f"hive-{uuid.uuid4().hex[:10]}"
