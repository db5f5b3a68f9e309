"""As an operator would: three `hive run` nodes on loopback addresses with nothing but DNS
discovery configured, and dnsmasq serving ``tasks.<service>`` A records as a swarm's DNS would.

They form one cluster; a node killed with kill -9 (its record withdrawn, as the swarm does for a
dead task) is dropped; restarted, it rejoins; with the resolver stopped the cluster stays and the
nodes count and log the failures; with it back, a new node joins.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest

from _testbed import (
    Dnsmasq,
    HostNode,
    loopback_prefix,
    nodes_stopped,
    port_free_on_all,
    wait_for,
)

pytestmark = pytest.mark.operator

FAILED = re.compile(r"docker-discovery: DNS tasks\.\S+ A .* failed \(timeout: ")
BACK = re.compile(r"docker-discovery: DNS tasks\.\S+ A .* answers again \(after (\d+) failed")


def _views(nodes: list[HostNode]) -> list[list[str]]:
    return [sorted(str(member["id"]) for member in node.members()) for node in nodes]


def _agree(nodes: list[HostNode], count: int) -> bool:
    views = _views(nodes)
    return all(len(view) == count for view in views) and all(v == views[0] for v in views)


def _own_id(node: HostNode) -> str:
    return next(str(m["id"]) for m in node.members() if m["this_node"])


def test_tasks_records_form_a_cluster_and_ride_out_a_resolver_outage(
        dnsmasq: Dnsmasq, tmp_path: Path, record_property: pytest.RecordProperty) -> None:
    prefix = loopback_prefix()
    hosts = [f"{prefix}.{10 + i}" for i in range(4)]
    cluster_port = port_free_on_all(hosts)
    name = f"tasks.hive-{uuid.uuid4().hex[:6]}"
    environment = {  # as a container would get them; cluster-port: each node's own
        "HIVE_DOCKER_DISCOVERY_MODE": "dns",
        "HIVE_DOCKER_DISCOVERY_DNS_NAME": name,
        "HIVE_DOCKER_DISCOVERY_RESOLVER_ADDRESS": "127.0.0.1",
        "HIVE_DOCKER_DISCOVERY_RESOLVER_PORT": str(dnsmasq.port),
        "HIVE_DOCKER_DISCOVERY_RESOLUTION_TIMEOUT": "1",
    }
    everyone = [HostNode(tmp_path / f"node{i}", hosts[i], cluster_port, environment)
                for i in range(4)]
    nodes, newcomer = everyone[:3], everyone[3]
    with nodes_stopped(everyone):
        dnsmasq.set_records(name, hosts[:3])  # the three tasks of the service
        begun = time.monotonic()
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_started()
        wait_for(lambda: _agree(nodes, 3), 30, "three nodes agree on three members")
        formed = time.monotonic() - begun
        record_property("dns_3_node_cluster_formed_s", round(formed, 2))
        print(f"\nDNS mode: 3 nodes started and agreed on 3 members in {formed:.1f} s "
              f"({dnsmasq.version})")
        ids = [_own_id(node) for node in nodes]

        # kill -9: its task's record goes, the others drop it
        victim, survivors = nodes[2], nodes[:2]
        victim.kill()
        dnsmasq.set_records(name, hosts[:2])
        wait_for(lambda: _agree(survivors, 2), 30, "the survivors drop the killed node")
        assert ids[2] not in _views(survivors)[0]

        # restarted (its record back), it rejoins with its own id
        dnsmasq.set_records(name, hosts[:3])
        victim.start()
        victim.wait_started()
        wait_for(lambda: _agree(nodes, 3), 30, "the restarted node rejoins")
        assert _own_id(victim) == ids[2]

        # the resolver goes away: the cluster stays, the failures are counted and logged
        dnsmasq.stop()
        try:
            for node in nodes:
                wait_for(lambda n=node: bool(FAILED.search(n.log)), 20,  # type: ignore[misc]
                         "the node logs that the resolver does not answer")
            time.sleep(3)  # a few more reloads against nothing
            assert _agree(nodes, 3), _views(nodes)
            for node in nodes:  # once a minute, not once a reload
                assert len(FAILED.findall(node.log)) == 1, node.log
        finally:
            dnsmasq.start()  # on the same port

        # back: every node says so with the number of failed queries, and a new node joins
        for node in nodes:
            wait_for(lambda n=node: bool(BACK.search(n.log)), 20,  # type: ignore[misc]
                     "the node logs that the resolver answers again")
            failed = BACK.search(node.log)
            assert failed is not None and int(failed.group(1)) >= 2, node.log
        dnsmasq.set_records(name, hosts)
        joined = time.monotonic()
        newcomer.start()
        newcomer.wait_started()
        wait_for(lambda: _agree(everyone, 4), 30, "the new node joins all three")
        record_property("dns_4th_node_joined_s", round(time.monotonic() - joined, 2))
