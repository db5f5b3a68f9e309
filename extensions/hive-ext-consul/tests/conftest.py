"""Fixtures: one real Consul agent (dev mode) for the session; a service name of its own per
test, so tests never see each other's instances."""

from __future__ import annotations

import uuid

import pytest
from hive_ext_api.testing import extension_fixtures, service_fixtures

from consul_agent import ConsulAgent


@pytest.fixture(autouse=True)
def no_machine_consul_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Consul's tools' variables of the machine must not reach the tests' clients."""
    for name in ("CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_SSL",
                 "CONSUL_HTTP_SSL_VERIFY", "HIVE_CONSUL_DISCOVERY_CONFIG"):
        monkeypatch.delenv(name, raising=False)


only_this_extension, anyio_backend = extension_fixtures("consul-discovery")


# one agent for the session; a test that stopped it leaves it to be started again
agent_session, agent = service_fixtures("agent", ConsulAgent)


@pytest.fixture
def service() -> str:
    return f"hive-{uuid.uuid4().hex[:10]}"
