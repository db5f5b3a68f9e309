"""The upgrade window (README, "Rolling upgrades and restarts") with real builds of earlier
Hive, not a rehearsal: the previous release's wheel, built from git and installed on its own,
joins a cluster of this one, serves beside it, and is then upgraded in place; a build of node
protocol 1, more than one release behind, is refused with what to do.

Hive has no release tags yet: PREVIOUS_RELEASE is the newest build of the node protocol before
the current one (3). Move it forward at every release that changes the node protocol.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from cluster._nodes import metrics, node_id, wait_for_members
from cluster.test_extension_services import ADMIN_EXTENSION

from faults._traffic import traffic_both_ways, wait_until
from faults.test_failover import three_nodes
from hive_core.cluster import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "af375d091f7481c7016ad6ac1d245dcf07286fba"  # node protocol 3 (2 to 3)
PROTOCOL_1_BUILD = "bbd077e31a79655e7d7b8d64c262cef4ee7f5cde"  # before node protocol 2
# Node protocol 4 before PUBLISH frames could carry the origin's routing time (issue 23): a
# peer that does not offer arrival stamps must get frames it reads.
UNSTAMPED_BUILD = "0a5805aa5b1198b70ab8cba844b73402ba8d5b1c"


def installed_build(commit: str, folder: Path) -> Path:
    """``commit``'s hive-broker as a wheel (pip wheel of `git archive`), installed into a folder
    of its own: a node run with it on PYTHONPATH is that build, on this environment's
    dependencies."""
    source, wheels, site = folder / "source", folder / "wheels", folder / "site"
    source.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit],
                             capture_output=True, timeout=60)
    if archive.returncode != 0:
        pytest.fail(f"git cannot give build {commit} (a shallow clone? fetch the history): "
                    f"{archive.stderr.decode(errors='replace')}")
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True,
                   timeout=60)
    pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(source))
    pip("install", "--quiet", "--no-deps", "--target", str(site),
        *map(str, wheels.glob("hive_broker-*.whl")))
    return site


def pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr


def protocol_of(site: Path) -> int:
    done = subprocess.run([sys.executable, "-c", "from hive_core.cluster import _wire; "
                           "print(_wire.PROTOCOL_VERSION)"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(site)}, cwd=site, timeout=60,
                          check=True)
    return int(done.stdout)


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed_build(PREVIOUS_RELEASE, tmp_path_factory.mktemp("previous-release"))


def run_build(node: Any, site: Path | None) -> None:
    """The node's next start runs ``site``'s build (None: this tree's)."""
    if site is None:
        node.env.pop("PYTHONPATH", None)
    else:
        node.env["PYTHONPATH"] = str(site)


def test_the_previous_releases_wheel_joins_serves_and_is_upgraded_in_place(
        hive_factory: Any, previous_release: Path) -> None:
    assert protocol_of(previous_release) == PROTOCOL_VERSION - 1 >= MIN_PROTOCOL_VERSION
    nodes = three_nodes(hive_factory, start=False)
    run_build(nodes[0], previous_release)
    for node in nodes:
        node.start()
    wait_for_members(nodes, 3, timeout=30)
    old = node_id(nodes[0])
    joined = rf"Cluster node {old} \(.*\) joined the cluster; node protocol {{}}"
    assert re.search(joined.format(PROTOCOL_VERSION - 1), nodes[1].log), nodes[1].log[-3000:]

    traffic_both_ways(nodes, "window", publishers_on=(0, 2))
    assert metrics(nodes[0]).get("cluster", {}).get("backups"), "protocol 3 replicates"

    # The upgrade itself: the old node stops (its backups confirm first), starts on this build
    # with the same data folder and id, and rejoins speaking the current protocol.
    nodes[0].terminate()
    assert "Finished cluster replication successfully" in nodes[0].log
    run_build(nodes[0], None)
    nodes[0].start()
    wait_for_members(nodes, 3, timeout=30)
    assert node_id(nodes[0]) == old
    nodes[1].wait_for_log(joined.format(PROTOCOL_VERSION), timeout=15)
    for node in nodes:
        assert "Traceback" not in node.log


def test_a_build_without_arrival_stamps_reads_every_publish_frame_of_this_one(
        hive_factory: Any, tmp_path: Path) -> None:
    """This release stamps PUBLISH frames with the origin's routing time for peers that offer
    it; the protocol 4 build before it does not, and must get frames it reads."""
    unstamped = installed_build(UNSTAMPED_BUILD, tmp_path / "unstamped")
    assert protocol_of(unstamped) == 4
    nodes = three_nodes(hive_factory, start=False)
    run_build(nodes[0], unstamped)
    (nodes[1].folder / "admin.py").write_text(ADMIN_EXTENSION)
    nodes[1].args = ["--extension", "./admin.py"]
    for node in nodes:
        node.start()
    wait_for_members(nodes, 3, timeout=30)
    traffic_both_ways(nodes, "stamps", publishers_on=(2, 0))
    # Extension services across the cluster: the old build skips the question (an unknown
    # frame kind); the answer comes after the wait, without its clients, and says so.
    admin = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="admin")
    answers: list[bytes] = []
    admin.on_message = lambda _c, _u, message: answers.append(message.payload)
    admin.connect("127.0.0.1", nodes[1].port)
    admin.loop_start()
    try:
        admin.subscribe("admin/answer", 1)
        time.sleep(0.3)
        admin.publish("admin/cluster-clients", b"", 1)
        wait_until(lambda: bool(answers), 15, "the list of clients")
    finally:
        admin.disconnect()
        admin.loop_stop()
    listed = {(row[0], row[1]) for row in json.loads(answers[0])}
    assert ("admin", node_id(nodes[1])) in listed
    assert not [row for row in listed if row[1] == node_id(nodes[0])]
    nodes[1].wait_for_log(rf"no list of clients from node\(s\) {node_id(nodes[0])} within 3 s")
    latency = metrics(nodes[1])["cluster"]["delivery_latency"]
    assert latency[node_id(nodes[2])]["count"] >= 200  # stamped between current nodes
    assert node_id(nodes[0]) not in latency  # the old build stamps nothing
    for node in nodes:
        assert "Traceback" not in node.log and "bad PUBLISH" not in node.log


def test_a_build_of_node_protocol_1_is_refused_with_what_to_do(
        hive_factory: Any, tmp_path: Path) -> None:
    protocol_1 = installed_build(PROTOCOL_1_BUILD, tmp_path / "protocol-1")
    assert protocol_of(protocol_1) == 1
    nodes = three_nodes(hive_factory, start=False)[:2]
    run_build(nodes[0], protocol_1)
    for node in nodes:
        node.start()
    current = nodes[1]
    refused = current.wait_for_log(
        r"ERROR - node (\S+) \(Hive [\d.]+\) speaks node protocol 1 and this node "
        rf"{MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}: not joining\. That node is more than "
        r"one release behind, and a rolling upgrade mixes neighbouring releases only\. "
        r"Upgrade it: stop it, install this node's release there and start it again",
        timeout=20)
    assert refused.group(1) == node_id(nodes[0])
    assert 'README.md, "Rolling upgrades and restarts"' in current.log
    time.sleep(6)  # static discovery dials again every 5 s: said once all the same
    assert current.log.count("speaks node protocol 1") == 1
    assert "Cluster size = 2" not in current.log


