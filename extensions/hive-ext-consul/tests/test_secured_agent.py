"""Agents as production runs them: ACLs (default deny) and HTTPS that verifies its clients."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hive_ext_api import ClusterNodeAddress

from consul_agent import AgentTls, ConsulAgent
from test_discovery import discovery, passing

A = ClusterNodeAddress("127.0.0.1", 17801)
MASTER_TOKEN = "5b0c3f0e-hive-test-master"


@pytest.fixture(scope="module")
def acl_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsulAgent]:
    agent = ConsulAgent(tmp_path_factory.mktemp("consul-acl"),
                        acl_master_token=MASTER_TOKEN).start()
    yield agent
    agent.stop()


@pytest.mark.anyio
async def test_the_acl_token_is_sent_and_a_refusal_is_named(
        acl_agent: ConsulAgent, service: str, caplog: pytest.LogCaptureFixture,
        hive_metrics: Any) -> None:
    refused = discovery(acl_agent.properties(service, consul_acl_token="not-a-token"),
                        hive_metrics)
    with caplog.at_level(logging.WARNING):
        await refused.hive_discovery_init(A, "node-a")
        assert await refused.hive_discovery_reload() is None
    assert hive_metrics["consul-discovery.errors"] == 2
    assert "cannot register this node: permission denied" in caplog.text
    assert "check consul-acl-token" in caplog.text
    await refused.hive_extension_stop()

    allowed = discovery(acl_agent.properties(service, consul_acl_token=MASTER_TOKEN))
    await allowed.hive_discovery_init(A, "node-a")
    assert await allowed.hive_discovery_reload() == [A]
    await allowed.hive_discovery_destroy()
    await allowed.hive_extension_stop()


def _hive_certs(*args: str) -> None:
    hive = Path(sys.executable).with_name("hive")  # this environment's, as an operator runs it
    subprocess.run([str(hive), "certs", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, the agent's certificate (127.0.0.1) and a client's, made by `hive certs`."""
    root = tmp_path_factory.mktemp("pki")
    _hive_certs("ca", "--out", str(root / "ca"))
    _hive_certs("node", "--ca", str(root / "ca"), "--name", "agent", "--ip", "127.0.0.1",
                "--out", str(root / "agent"))
    _hive_certs("node", "--ca", str(root / "ca"), "--name", "client", "--out",
                str(root / "client"))
    _hive_certs("ca", "--out", str(root / "other-ca"), "--name", "Somebody else")
    return root


@pytest.fixture(scope="module")
def tls_agent(tmp_path_factory: pytest.TempPathFactory,
              certificates: Path) -> Iterator[ConsulAgent]:
    tls = AgentTls(certificates / "ca" / "ca.pem", certificates / "agent" / "agent-cert.pem",
                   certificates / "agent" / "agent-key.pem")
    agent = ConsulAgent(tmp_path_factory.mktemp("consul-tls"), tls=tls).start()
    yield agent
    agent.stop()


@pytest.mark.anyio
async def test_https_with_a_client_certificate(tls_agent: ConsulAgent, certificates: Path,
                                               service: str) -> None:
    properties = tls_agent.properties(
        service, consul_url=tls_agent.https_url,
        consul_tls_ca_file=str(certificates / "ca" / "ca.pem"),
        consul_tls_cert_file=str(certificates / "client" / "client-cert.pem"),
        consul_tls_key_file=str(certificates / "client" / "client-key.pem"))
    node = discovery(properties)
    await node.hive_discovery_init(A, "node-a")
    assert list(passing(tls_agent, service)) == [f"{service}-node-a"]
    assert await node.hive_discovery_reload() == [A]
    await node.hive_discovery_destroy()
    await node.hive_extension_stop()


@pytest.mark.parametrize(("settings", "reason"), [
    ({}, "TLS with"),  # no client certificate: the agent verifies clients
    ({"consul_tls_ca_file": "other-ca/ca.pem", "consul_tls_cert_file": "client/client-cert.pem",
      "consul_tls_key_file": "client/client-key.pem"}, "certificate verify failed"),
])
def test_https_without_what_the_agent_or_the_node_trusts_is_counted(
        tls_agent: ConsulAgent, certificates: Path, service: str, settings: dict[str, str],
        reason: str, caplog: pytest.LogCaptureFixture,
        hive_metrics: Any) -> None:
    files = {key: str(certificates / value) for key, value in settings.items()}
    files.setdefault("consul_tls_ca_file", str(certificates / "ca" / "ca.pem"))
    properties = tls_agent.properties(service, consul_url=tls_agent.https_url, **files)

    async def scenario() -> None:
        node = discovery(properties, hive_metrics)
        with caplog.at_level(logging.WARNING):
            assert await node.hive_discovery_reload() is None
        assert hive_metrics["consul-discovery.errors"] == 1
        assert reason in caplog.text
        await node.hive_extension_stop()

    asyncio.run(asyncio.wait_for(scenario(), 30))


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:Unverified HTTPS request")  # urllib3 says what was asked
async def test_https_without_verifying_the_agent(tls_agent: ConsulAgent, certificates: Path,
                                                service: str) -> None:
    properties = tls_agent.properties(
        service, consul_url=tls_agent.https_url, consul_tls_verify="false",
        consul_tls_cert_file=str(certificates / "client" / "client-cert.pem"),
        consul_tls_key_file=str(certificates / "client" / "client-key.pem"))
    node = discovery(properties)  # the agent's CA is unknown to this node: not checked
    await node.hive_discovery_init(A, "node-a")
    assert await node.hive_discovery_reload() == [A]
    await node.hive_discovery_destroy()
    await node.hive_extension_stop()
