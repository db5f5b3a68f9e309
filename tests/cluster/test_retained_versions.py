"""Retained messages carry versions across the cluster: the newest set or clear wins, also for
a node that was away when it happened (its copy on disk is older and must not come back)."""

from __future__ import annotations

from typing import Any

from conftest import free_port
from e2e._session_helpers import mosquitto_pub, retained_on

from cluster._nodes import cluster_body, metrics, wait_for, wait_for_members


def two_nodes_on_disk(hive_factory: Any) -> list[Any]:
    ports = [free_port(), free_port()]
    nodes = []
    for port in ports:
        rest = free_port()
        body = cluster_body(port, ports, rest).replace(
            "<persistence><mode>in-memory</mode></persistence>", "")
        nodes.append(hive_factory(body=body, cluster=port, rest=rest))
    wait_for_members(nodes, 2)
    return nodes


def test_a_clear_made_while_a_node_was_away_is_not_undone_when_it_returns(
        hive_factory: Any) -> None:
    a, b = two_nodes_on_disk(hive_factory)
    mosquitto_pub(a.port, "site/door", "open", retain=True)
    mosquitto_pub(a.port, "site/light", "off", retain=True)
    wait_for(lambda: metrics(b)["broker"]["retained_messages"] == 2, 5, "b holds both")
    b.terminate()  # b keeps both on its disk
    mosquitto_pub(a.port, "site/door", "", retain=True)  # cleared while b is away
    mosquitto_pub(a.port, "site/light", "on", retain=True)  # and changed
    b.start()
    wait_for_members([a, b], 2)
    expected = {"site/light": b"on"}
    for node in (a, b):
        wait_for(lambda n=node: metrics(n)["broker"]["retained_messages"] == 1, 5,
                 f"{node.folder.name} holds one retained message")
        assert retained_on(node.port, "site/#", quiet=1.0) == expected, node.folder.name
