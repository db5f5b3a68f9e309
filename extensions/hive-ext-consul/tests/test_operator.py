"""As an operator runs it: three real `hive run` nodes, only Consul discovery, a real agent.

Each node finds its settings where the README says (``data/extensions/consul-discovery/
consuldiscovery.properties``); ``GET /api/v1/cluster/nodes`` on every node is the judge, and
``GET /api/v1/metrics`` shows what was counted. The nodes are hive-broker's ``hive_processes``.
"""

from __future__ import annotations

from typing import Any

import pytest

from consul_agent import ConsulAgent

pytestmark = [pytest.mark.operator, pytest.mark.timeout(240)]

PROPERTIES = "consul-discovery/consuldiscovery.properties"


def healthy(agent: ConsulAgent, service: str) -> set[str]:
    return {entry["Service"]["ID"]
            for entry in agent.client().health.service(service, passing=True)[1]}


def check_status(agent: ConsulAgent, service: str, node_id: str) -> str | None:
    check = agent.client().agent.checks().get(f"service:{service}-{node_id}")
    return None if check is None else str(check["Status"])


@pytest.fixture
def extension_files(agent: ConsulAgent, service: str) -> dict[str, str]:
    """Checks that go critical 3 s after their last pass, passed every second."""
    return {PROPERTIES: agent.properties(service, consul_ttl="3", consul_update_interval="1")}


def test_three_nodes_form_a_cluster_the_dead_go_critical_and_the_restarted_rejoin(
        hive_processes: Any, extension_files: dict[str, str], agent: ConsulAgent, service: str,
        record_property: pytest.RecordProperty) -> None:
    a, b, c = trio = [hive_processes.add(extension_files=extension_files) for _ in range(3)]
    formed, after_serving = hive_processes.form(trio)
    record_property("consul_3_node_cluster_formed_s", round(formed, 2))
    print(f"\nConsul discovery: 3 nodes launched together agreed on 3 members after "
          f"{formed:.2f} s ({after_serving:.2f} s after the last one served)")
    ids = {node.node_id for node in trio}
    assert a.members() == ids
    assert healthy(agent, service) == {f"{service}-{node_id}" for node_id in ids}

    # kill -9: the others drop it (heartbeat), and its TTL check goes critical
    dead = f"{service}-{c.node_id}"
    c.kill()
    hive_processes.agree([a, b], 2, timeout=10)
    critical = hive_processes.wait_until(
        lambda: check_status(agent, service, c.node_id) == "critical", 10,
        "the dead node's check goes critical")
    print(f"Consul discovery: a killed node's check went critical {critical:.2f} s after the "
          "kill")
    assert dead not in healthy(agent, service)

    # restarted, same data folder and node id: it rejoins, passing again
    rejoined = hive_processes.join(c, trio)
    print(f"Consul discovery: the restarted node rejoined in {rejoined:.2f} s")
    assert dead in healthy(agent, service)

    # a clean stop deregisters at once
    assert c.terminate() == 0
    assert check_status(agent, service, c.node_id) is None
    assert dead not in healthy(agent, service)
    c.wait_for_log(r"consul-discovery: deregistered this node")
    hive_processes.agree([a, b], 2, timeout=10)


def test_a_consul_outage_keeps_the_cluster_counts_the_errors_and_new_nodes_join_after_it(
        hive_processes: Any, extension_files: dict[str, str], agent: ConsulAgent,
        service: str) -> None:
    trio = [hive_processes.add(extension_files=extension_files) for _ in range(3)]
    hive_processes.form(trio)
    assert all(node.extension_metric("consul-discovery.errors") == 0 for node in trio)

    # three more reloads fail on every node while the agent is away; it comes back on the same
    # ports, but a dev agent comes back with an empty catalog
    hive_processes.ride_out_an_outage(
        trio, agent.stop, agent.start, "consul-discovery",
        failed=r"consul-discovery: cannot [\w' ]+: cannot reach Consul", min_failed=4)
    registered = {f"{service}-{node.node_id}" for node in trio}
    hive_processes.wait_until(lambda: healthy(agent, service) == registered, 10,
                              "every node registered again")
    for node in trio:  # at its next pass or its next reload, whichever came first
        node.wait_for_log(r"consul-discovery: .*: registered again", timeout=5)

    newcomer = hive_processes.add(extension_files=extension_files)
    joined = hive_processes.join(newcomer, [*trio, newcomer])
    print(f"\nConsul discovery: after the outage a new node joined in {joined:.2f} s")
