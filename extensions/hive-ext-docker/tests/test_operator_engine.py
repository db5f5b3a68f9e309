"""As an operator would: three `hive run` nodes, each the only process of a labelled container on
one Docker network, with nothing but Engine API discovery configured.

They form one cluster; a node killed with kill -9 is dropped (and its dead container is no
node any more); restarted, it rejoins; with the Engine API stopped the cluster stays and the
nodes count and log the failures; with it back, a new node joins.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from pathlib import Path

import pytest
from hive_ext_api import ClusterNodeAddress

from _testbed import BridgeNetwork, ContainerNode, Containers, Dockerd, wait_for
from hive_ext_docker import EngineSettings, EngineSource, Label

pytestmark = pytest.mark.operator

SOCKET_DIR = "/run/hive-docker"  # where the containers see the daemon's socket folder
FAILED = re.compile(r"docker-discovery: Docker Engine API .* failed \(unreachable: ")
BACK = re.compile(r"docker-discovery: Docker Engine API .* answers again \(after (\d+) failed")


def _views(nodes: list[ContainerNode]) -> list[list[str]]:
    return [sorted(member["id"] for member in node.members()) for node in nodes]


def _agree(nodes: list[ContainerNode], count: int) -> bool:
    views = _views(nodes)
    return all(len(view) == count for view in views) and all(v == views[0] for v in views)


def _own_id(node: ContainerNode) -> str:
    return next(str(m["id"]) for m in node.members() if m["this_node"])


def test_labelled_containers_form_a_cluster_and_ride_out_an_engine_outage(
        dockerd: Dockerd, containers: Containers, network: BridgeNetwork,
        tmp_path: Path, record_property: pytest.RecordProperty) -> None:
    cluster = f"ops-{uuid.uuid4().hex[:8]}"
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "docker-discovery.properties").write_text(
        "# the nodes: running containers with this label on this network\n"
        "mode=engine\n"
        f"docker-host=unix://{SOCKET_DIR}/docker.sock\n"
        f"label=hive.cluster={cluster}\n"
        f"network={network.name}\n"
        "cluster-port-label=hive.cluster-port\n"
        "api-timeout=2\n")

    def node(number: int) -> ContainerNode:
        return ContainerNode(
            containers, network, tmp_path / f"node{number}",
            labels={"hive.cluster": cluster, "hive.cluster-port": "7800"},
            environment={"HIVE_DOCKER_DISCOVERY_CONFIG": "/conf/docker-discovery.properties"},
            binds={str(dockerd.socket_dir): SOCKET_DIR, str(conf): "/conf"})

    nodes = [node(i) for i in range(3)]
    begun = time.monotonic()
    for each in nodes:
        each.start()
    for each in nodes:
        each.wait_started()
    wait_for(lambda: _agree(nodes, 3), 60, "three containers agree on three members")
    formed = time.monotonic() - begun
    record_property("engine_3_node_cluster_formed_s", round(formed, 2))
    print(f"\nEngine API mode: 3 containers started and agreed on 3 members in {formed:.1f} s "
          f"(dockerd {dockerd.version})")
    ids = [_own_id(each) for each in nodes]

    # kill -9: the others drop it, and its stopped container is no node any more
    victim, survivors = nodes[2], nodes[:2]
    victim_ip = victim.ip
    victim.kill9()
    wait_for(lambda: _agree(survivors, 2), 30, "the survivors drop the killed node")
    assert ids[2] not in _views(survivors)[0]
    listed = asyncio.run(EngineSource(EngineSettings(
        labels=(Label("hive.cluster", cluster),), network=network.name,
        docker_host=dockerd.url, cluster_port=7800)).find(None)).addresses
    assert ClusterNodeAddress(victim_ip, 7800) not in listed and len(listed) == 2

    # restarted, it rejoins with its own id
    victim.restart()
    victim.wait_started()
    wait_for(lambda: _agree(nodes, 3), 30, "the restarted node rejoins")
    assert _own_id(victim) == ids[2]

    # the Engine API goes away: the cluster stays, the failures are counted and logged
    dockerd.stop()
    try:
        for each in nodes:
            wait_for(lambda n=each: bool(FAILED.search(n.log)), 20,  # type: ignore[misc]
                     "the node logs that the Engine API is unreachable")
        time.sleep(3)  # a few more reloads against nothing
        assert _agree(nodes, 3), _views(nodes)
        for each in nodes:  # once a minute, not once a reload
            assert len(FAILED.findall(each.log)) == 1, each.log
    finally:
        dockerd.start()

    # back: every node says so with the number of failed queries, and a new node joins
    for each in nodes:
        wait_for(lambda n=each: bool(BACK.search(n.log)), 20,  # type: ignore[misc]
                 "the node logs that the Engine API answers again")
        failed = BACK.search(each.log)
        assert failed is not None and int(failed.group(1)) >= 3, each.log
    newcomer = node(3)
    joined = time.monotonic()
    newcomer.start()
    newcomer.wait_started()
    wait_for(lambda: _agree([*nodes, newcomer], 4), 30, "the new node joins all three")
    record_property("engine_4th_node_joined_s", round(time.monotonic() - joined, 2))
