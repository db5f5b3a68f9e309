"""As an operator would: three `hive run` nodes, each the only process of a labelled container on
one Docker network, with nothing but Engine API discovery configured.

They form one cluster; a node killed with kill -9 is dropped (and its dead container is no
node any more); restarted, it rejoins; with the Engine API stopped the cluster stays and the
nodes count (REST metrics) and log the failures; with it back, a new node joins.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from pathlib import Path

import pytest
from hive_ext_api import ClusterNodeAddress

from _testbed import (
    BridgeNetwork,
    ContainerNode,
    Containers,
    Dockerd,
    agree,
    ride_out_an_outage,
    views,
    wait_for,
)
from hive_ext_docker import EngineSettings, EngineSource, Label

pytestmark = pytest.mark.operator

SOCKET_DIR = "/run/hive-docker"  # where the containers see the daemon's socket folder
FAILED = re.compile(r"docker-discovery: cannot query Docker Engine API .*: "
                    r"(unreachable|timeout|refused): ")


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
    serving = time.monotonic()
    wait_for(lambda: agree(nodes, 3), 60, "three containers agree on three members")
    formed = time.monotonic() - begun
    record_property("engine_3_node_cluster_formed_s", round(formed, 2))
    print(f"\nEngine API mode: 3 containers started and agreed on 3 members in {formed:.2f} s "
          f"({time.monotonic() - serving:.2f} s after the last one served; dockerd "
          f"{dockerd.version})")
    ids = [each.node_id for each in nodes]

    # kill -9: the others drop it, and its stopped container is no node any more
    victim, survivors = nodes[2], nodes[:2]
    victim_ip = victim.ip
    victim.kill9()
    wait_for(lambda: agree(survivors, 2), 30, "the survivors drop the killed node")
    assert ids[2] not in views(survivors)[0]
    listed = asyncio.run(EngineSource(EngineSettings(
        labels=(Label("hive.cluster", cluster),), network=network.name,
        docker_host=dockerd.url, cluster_port=7800)).find(None)).addresses
    assert ClusterNodeAddress(victim_ip, 7800) not in listed and len(listed) == 2

    # restarted, it rejoins with its own id
    victim.restart()
    victim.wait_started()
    wait_for(lambda: agree(nodes, 3), 30, "the restarted node rejoins")
    assert victim.node_id == ids[2]

    # the Engine API goes away (live restore keeps the containers), then comes back
    ride_out_an_outage(nodes, dockerd.stop, dockerd.start, FAILED,
                       "docker-discovery.errors.unreachable", min_failed=3)

    # a new node joins
    newcomer = node(3)
    joined = time.monotonic()
    newcomer.start()
    newcomer.wait_started()
    wait_for(lambda: agree([*nodes, newcomer], 4), 30, "the new node joins all three")
    record_property("engine_4th_node_joined_s", round(time.monotonic() - joined, 2))
