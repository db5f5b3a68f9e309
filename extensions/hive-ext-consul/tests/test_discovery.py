"""The discovery hooks against a real Consul agent: registration, the TTL check, failures."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hive_ext_api import parse_properties
from hive_ext_api.testing import A, B, DiscoveryHooksContract

from consul_agent import ConsulAgent
from hive_ext_consul import KEYS, ConsulDiscovery, settings_from
from hive_ext_consul._agent import ServiceInstance, consul_client

# one event loop for a whole test (the TTL refresher lives in it), and a test's deadline
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]



def discovery(properties: str, metrics: Any = None) -> ConsulDiscovery:
    """Started by hand, without a node; ``metrics``: hive-broker's ``hive_metrics``, or none."""
    source = "consuldiscovery.properties"
    settings = settings_from(parse_properties(properties, source, KEYS), source)
    plugin = ConsulDiscovery()
    plugin.log = logging.getLogger(f"test.consul-discovery.{id(plugin)}")
    plugin.start(settings, ServiceInstance(consul_client(settings), settings),
                 metrics)
    return plugin


def passing(agent: ConsulAgent, service: str) -> dict[str, Any]:
    """The service's instances whose checks pass, by id."""
    _, entries = agent.client().health.service(service, passing=True)
    return {entry["Service"]["ID"]: entry for entry in entries}


def check_status(agent: ConsulAgent, service: str, node_id: str) -> str | None:
    check = agent.client().agent.checks().get(f"service:{service}-{node_id}")
    return None if check is None else str(check["Status"])


class TestHooks(DiscoveryHooksContract):
    """What every discovery extension's hooks do, against a real Consul agent."""

    MALFORMED_COUNTER, NOT_A_NODE = "consul-discovery.instances.malformed", "not a Hive node"

    @pytest.fixture
    def start_discovery(self, agent: ConsulAgent, service: str) -> Callable[..., ConsulDiscovery]:
        return lambda metrics=None: discovery(agent.properties(service), metrics)

    @pytest.fixture
    def foreign_entries(self, agent: ConsulAgent, service: str) -> Iterator[dict[str, str]]:
        agent.client().agent.service.register(service, service_id="web-1", address="10.1.1.1",
                                              port=80)
        yield {"web-1": f"skipping instance web-1 of service {service}: not a Hive node "
                        "(hive-record-version is None"}
        agent.client().agent.service.deregister("web-1")

    @pytest.fixture
    def entry_names(self, agent: ConsulAgent, service: str) -> Callable[[], set[str]]:
        return lambda: set(passing(agent, service))


async def test_init_registers_a_passing_instance_and_destroy_deregisters_it(
        agent: ConsulAgent, service: str) -> None:
    node = discovery(agent.properties(service))
    await node.hive_discovery_init(A, "node-a")
    instances = passing(agent, service)
    assert list(instances) == [f"{service}-node-a"]
    registered = instances[f"{service}-node-a"]["Service"]
    assert (registered["Address"], registered["Port"], registered["Tags"]) == (
        "127.0.0.1", 17801, ["hive"])
    assert registered["Meta"] == {"hive-node-id": "node-a", "hive-record-version": "1"}
    check = agent.client().agent.checks()[f"service:{service}-node-a"]
    assert (check["Type"], check["Status"]) == ("ttl", "passing")
    assert await node.hive_discovery_reload() == [A]

    await node.hive_discovery_destroy()
    assert passing(agent, service) == {}
    assert check_status(agent, service, "node-a") is None
    await node.hive_extension_stop()


async def test_the_check_is_kept_passing_and_a_silent_node_goes_critical(
        agent: ConsulAgent, service: str, hive_metrics: Any) -> None:
    properties = agent.properties(service, consul_ttl="1.5", consul_update_interval="0.4")
    a, b = discovery(properties, hive_metrics), discovery(properties)
    await a.hive_discovery_init(A, "node-a")
    await b.hive_discovery_init(B, "node-b")
    await asyncio.sleep(2.5)  # longer than the TTL: only the passes keep them healthy
    assert sorted(passing(agent, service)) == [f"{service}-node-a", f"{service}-node-b"]

    await b.hive_extension_stop()  # b dies: no more passes, no deregistration
    await asyncio.sleep(2.0)
    assert check_status(agent, service, "node-b") == "critical"
    assert await a.hive_discovery_reload() == [A]
    restarted = discovery(properties)  # the agent keeps the old, critical check ...
    await restarted.hive_discovery_init(B, "node-b")
    assert check_status(agent, service, "node-b") == "passing"  # ... passed at once
    await restarted.hive_discovery_destroy()
    await restarted.hive_extension_stop()
    assert hive_metrics["consul-discovery.resolved-addresses"] == 1
    assert hive_metrics["consul-discovery.errors"] == 0
    await a.hive_discovery_destroy()
    await a.hive_extension_stop()


async def test_an_instance_the_agent_forgot_is_registered_again(agent: ConsulAgent,
                                                                service: str) -> None:
    node = discovery(agent.properties(service, consul_ttl="5",
                                      consul_update_interval="0.3"))
    await node.hive_discovery_init(A, "node-a")
    agent.client().agent.service.deregister(f"{service}-node-a")
    await asyncio.sleep(0.8)  # the next pass finds no check, and registers again
    assert list(passing(agent, service)) == [f"{service}-node-a"]

    agent.client().agent.service.deregister(f"{service}-node-a")
    assert await node.hive_discovery_reload() == [A]  # the reload does the same
    assert list(passing(agent, service)) == [f"{service}-node-a"]
    await node.hive_discovery_destroy()
    await node.hive_extension_stop()


async def test_an_unreachable_agent_is_no_news_counted_logged_once_and_retried(
        tmp_path: Path, service: str, caplog: pytest.LogCaptureFixture,
        hive_metrics: Any) -> None:
    later = ConsulAgent(tmp_path / "later")  # its ports are chosen; nothing listens yet

    node = discovery(later.properties(service, consul_update_interval="5"), hive_metrics)
    with caplog.at_level(logging.INFO):
        await node.hive_discovery_init(A, "node-a")
        for _ in range(3):
            assert await node.hive_discovery_reload() is None
        assert hive_metrics["consul-discovery.errors"] == 4
        assert caplog.text.count("consul-discovery: cannot") == 1  # one per outage
        assert f"cannot register this node: cannot reach Consul at {later.url}" \
            in caplog.text
        assert "Traceback" not in caplog.text
        later.start()
        try:
            assert await node.hive_discovery_reload() == [A]  # registered on the way
            assert list(passing(later, service)) == [f"{service}-node-a"]
        finally:
            await node.hive_extension_stop()
            later.stop()
    assert "answering again after" in caplog.text and "4 failed calls" in caplog.text


async def test_an_answer_that_is_not_consuls_is_no_news_and_counted(
        hive_impostor_url: str, caplog: pytest.LogCaptureFixture, hive_metrics: Any) -> None:
    node = discovery(f"consul-url:{hive_impostor_url}\n", hive_metrics)
    await node.hive_discovery_init(A, "node-a")  # a 200 to the PUT: taken as accepted
    with caplog.at_level(logging.WARNING):
        assert await node.hive_discovery_reload() is None
    assert hive_metrics["consul-discovery.errors"] == 1
    assert f"cannot read the healthy instances: the answer of {hive_impostor_url} is not " \
           "Consul's" in caplog.text
    await node.hive_extension_stop()


async def test_an_agent_that_never_answers_is_given_up_within_the_hook_deadline(
        service: str, hive_metrics: Any, hive_silent_port: int) -> None:
    url = f"http://127.0.0.1:{hive_silent_port}"

    node = discovery(f"consul-url:{url}\nconsul-service-name:{service}\n", hive_metrics)
    begun = time.monotonic()
    assert await node.hive_discovery_reload() is None
    assert time.monotonic() - begun < 4.6  # the node waits 5 s for a hook at most
    assert hive_metrics["consul-discovery.errors"] == 1
    await node.hive_extension_stop()


async def test_the_datacenter_is_the_one_read(agent: ConsulAgent, service: str,
                                              caplog: pytest.LogCaptureFixture,
                                              hive_metrics: Any) -> None:
    home = discovery(agent.properties(service, consul_datacenter="dc1"))
    await home.hive_discovery_init(A, "node-a")
    assert await home.hive_discovery_reload() == [A]
    elsewhere = discovery(agent.properties(service, consul_datacenter="nowhere"), hive_metrics)
    with caplog.at_level(logging.WARNING):
        assert await elsewhere.hive_discovery_reload() is None
    assert hive_metrics["consul-discovery.errors"] == 1
    assert "No path to datacenter" in caplog.text
    await home.hive_discovery_destroy()
    for node in (home, elsewhere):
        await node.hive_extension_stop()
