"""As an operator would, in a real (single-node) swarm: a service of three `hive run` tasks on an
overlay network, with DNS discovery of ``tasks.<service>`` through Docker's embedded resolver
(127.0.0.11) and nothing else configured.

They form one cluster; kill -9 of one task's hive: swarm replaces the task, the others drop the
dead node and the replacement (a new node) joins; scaled to four, the fourth joins.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker.types
import pytest

from _testbed import (
    DISABLED_ENV,
    HIVE,
    STARTED,
    Dockerd,
    Swarm,
    cluster_config,
    python_mounts,
    root_filesystem_tar,
    wait_for,
)

pytestmark = pytest.mark.operator

MEMBERS = ("import json, urllib.request; print(json.dumps([m['id'] for m in json.load("
           "urllib.request.urlopen('http://127.0.0.1:8888/api/v1/cluster/nodes', timeout=3))"
           "['items']]))")


@pytest.fixture(scope="module")
def swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Swarm]:
    daemon = Dockerd(tmp_path_factory.mktemp("swarm-dockerd"), live_restore=False)
    try:
        daemon.start()
        made = Swarm(daemon)
        with contextlib.closing(made.client):
            yield made
    finally:
        daemon.cleanup()


def _views(swarm: Swarm, service: str) -> list[list[str]]:
    views = []
    for task in swarm.tasks(service):
        with contextlib.suppress(AssertionError, docker.errors.APIError, ValueError):
            views.append(sorted(json.loads(swarm.run_python(task["Id"], MEMBERS))))
    return views


def _agree(swarm: Swarm, service: str, count: int) -> bool:
    views = _views(swarm, service)
    return len(views) == count and all(v == views[0] and len(v) == count for v in views)


def _task_ips(swarm: Swarm, service: str, network: str) -> set[str]:
    return {task["NetworkSettings"]["Networks"][network]["IPAddress"]
            for task in swarm.tasks(service)}


def test_a_swarm_service_forms_a_cluster_through_tasks_dns(
        swarm: Swarm, tmp_path: Path, record_property: pytest.RecordProperty) -> None:
    swarm.client.import_image_from_data(root_filesystem_tar(), repository="hive-swarm-root",
                                        tag="1")
    network = swarm.overlay()
    service = f"hive-{uuid.uuid4().hex[:6]}"
    folder = tmp_path / "hive"
    folder.mkdir()
    (folder / "config.xml").write_text(cluster_config("0.0.0.0", 7800, "127.0.0.1", 8888,
                                                      "0.0.0.0", 1883))
    mounts = [docker.types.Mount(m, m, type="bind", read_only=True) for m in python_mounts()]
    mounts.append(docker.types.Mount("/hive", str(folder), type="bind"))
    spec = docker.types.ContainerSpec(
        "hive-swarm-root:1",
        command=["/bin/sh", "-c", f"exec {HIVE} run --config /hive/config.xml --data-dir /data "
                                  ">>/hive/task-$SLOT.log 2>&1"],
        env=["HIVE_DOCKER_DISCOVERY_MODE=dns", f"HIVE_DOCKER_DISCOVERY_DNS_NAME=tasks.{service}",
             "HIVE_DOCKER_DISCOVERY_RESOLVER_ADDRESS=127.0.0.11", "SLOT={{.Task.Slot}}",
             f"{DISABLED_ENV}={os.environ.get(DISABLED_ENV, '')}"],
        mounts=mounts)
    template = docker.types.TaskTemplate(
        spec, restart_policy=docker.types.RestartPolicy(condition="any", delay=1_000_000_000),
        networks=[docker.types.NetworkAttachmentConfig(network)])
    begun = time.monotonic()
    created = swarm.client.create_service(template, name=service,
                                          mode=docker.types.ServiceMode("replicated", 3))
    wait_for(lambda: sum(bool(STARTED.search(log.read_text(errors="replace")))
                         for log in folder.glob("task-*.log")) == 3, 90, "three tasks serve",
             every=0.1)
    serving = time.monotonic()
    wait_for(lambda: _agree(swarm, service, 3), 90, "three tasks agree on three members",
             every=0.5)
    formed = time.monotonic() - begun
    record_property("swarm_3_node_cluster_formed_s", round(formed, 2))
    print(f"\nSwarm tasks.<service> DNS: a 3-task service formed one cluster {formed:.2f} s "
          f"after it was created ({time.monotonic() - serving:.2f} s after its last task "
          "served, the members asked by docker exec every 0.5 s)")
    before = _views(swarm, service)[0]

    # kill -9 of one task's hive: swarm replaces the task, its DNS record goes with it
    victim = swarm.tasks(service)[0]
    victim_ip = victim["NetworkSettings"]["Networks"][network]["IPAddress"]
    os.kill(int(swarm.client.inspect_container(victim["Id"])["State"]["Pid"]), signal.SIGKILL)
    wait_for(lambda: victim_ip not in _task_ips(swarm, service, network)
             or len(_task_ips(swarm, service, network)) < 3, 30, "the dead task is gone")
    wait_for(lambda: _agree(swarm, service, 3) and _views(swarm, service)[0] != before, 90,
             "the replacement task joins, the dead node is dropped", every=0.5)
    after = _views(swarm, service)[0]
    assert len(set(after) - set(before)) == 1  # one new node, the others stayed
    resolved = json.loads(swarm.run_python(swarm.tasks(service)[0]["Id"], (
        "import json, dns.resolver; r = dns.resolver.Resolver(configure=False); "
        "r.nameservers = ['127.0.0.11']; "
        f"print(json.dumps(sorted(a.address for a in r.resolve('tasks.{service}', 'A'))))")))
    assert sorted(_task_ips(swarm, service, network)) == resolved  # what the nodes ask
    assert len(resolved) == 3  # the dead task's record went with it

    # scaled to four: the new task joins
    current = swarm.client.inspect_service(created["ID"])
    swarm.client.update_service(created["ID"], current["Version"]["Index"], template,
                                name=service, mode=docker.types.ServiceMode("replicated", 4),
                                networks=None)
    wait_for(lambda: _agree(swarm, service, 4), 90, "the fourth task joins", every=0.5)

