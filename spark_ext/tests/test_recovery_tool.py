"""The recovery tool on real data folders: a 3-node `hive run` cluster with replica-count 2
(so every session is in two folders and every retained message in three), persistent sessions
with queued QoS 1 messages on every node, retained messages; the nodes killed, the tool run
over the three folders in the shared local Spark session, and once through ``spark-submit`` on
a real standalone Spark cluster. The backup must hold each session, subscription, queued and
retained message exactly once, as they were published."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from hive_ext_api.backup import BackupReader, ClientState, RetainedState

import hive_ext_spark.recovery as tool
from _procs import HiveNode, cluster_body, free_port
from conftest import Standalone
from test_standalone import spark_submit

pytestmark = pytest.mark.timeout(240)

NODES = 3
PER_CLIENT = 12  # queued QoS 1 messages per persistent subscriber
FILE = "<persistence><mode>file</mode></persistence>"
TOOL = str(Path(sys.executable).with_name("hive-recovery-tool"))


@dataclass
class Published:
    folders: list[Path]
    subscriptions: dict[str, set[str]]  # client id -> topic filters
    queued: dict[str, list[str]]        # client id -> payloads, in order
    retained: dict[str, str]            # topic -> payload


def client(node: HiveNode, name: str, clean: bool = False) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv311,
                    clean_session=clean)
    c.connect("127.0.0.1", node.port, keepalive=10)
    c.loop_start()
    return c


def bye(c: mqtt.Client) -> None:
    c.disconnect()
    c.loop_stop()


def make_cluster_data(tmp: Path, killed: bool) -> Published:
    """Three nodes' data folders, after the nodes were killed (``killed``) or stopped one
    after the other, and what was published into them."""
    ports = [free_port() for _ in range(NODES)]
    nodes = [HiveNode(tmp / f"node{i}", "", cluster_body(port, ports).replace(
        "</cluster>", "<replication><replica-count>2</replica-count></replication></cluster>"))
        for i, port in enumerate(ports)]
    published = Published([n.data_dir for n in nodes], {}, {}, {})
    began = time.monotonic()
    try:
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_for_log(rf"Cluster size = {NODES}", timeout=30)
        formed = time.monotonic() - began
        for i, node in enumerate(nodes):  # a persistent subscriber per node, then offline
            name = f"sub-{i}"
            sub = client(node, name)
            filters = [f"q/{i}/#", f"$share/group/s/{i}"]
            result = sub.subscribe([(f, 1) for f in filters])
            assert result[0] == mqtt.MQTT_ERR_SUCCESS
            time.sleep(0.3)
            bye(sub)
            published.subscriptions[name] = set(filters)
            published.queued[name] = []
        time.sleep(1.0)  # the subscriptions reach the other nodes
        for i in range(NODES):  # each queue filled from another node
            pub = client(nodes[(i + 1) % NODES], f"pub-{i}", clean=True)
            infos = []
            for n in range(PER_CLIENT):
                payload = f"{i}-{n}"
                infos.append(pub.publish(f"q/{i}/m", payload, qos=1))
                published.queued[f"sub-{i}"].append(payload)
            retained = f"retained-{i}"
            infos.append(pub.publish(f"r/{i}", retained, qos=1, retain=True))
            published.retained[f"r/{i}"] = retained
            for info in infos:
                info.wait_for_publish(10)
            bye(pub)
        time.sleep(1.0)
    finally:
        # Killed (the disaster): each session is in its node's store and in the replica on the
        # next node; all at once, so no survivor re-replicates in between. Stopped one after
        # the other: a node stopping hands its sessions to the others (new versions) and keeps
        # none; the stale replicas stay behind.
        for node in nodes:
            if killed and node.proc is not None and node.proc.poll() is None:
                os.kill(node.proc.pid, 9)
        for node in nodes:
            node.kill() if killed else node.stop()
    print(f"\ncluster formed in {formed:.1f} s; data written in "
          f"{time.monotonic() - began - formed:.1f} s")
    return published


@pytest.fixture(scope="module")
def cluster_data(tmp_path_factory: pytest.TempPathFactory) -> Published:
    return make_cluster_data(tmp_path_factory.mktemp("recovery-killed"), killed=True)


def contents(path: Path) -> tuple[Any, dict[str, ClientState], dict[str, RetainedState]]:
    reader = BackupReader(path)
    clients: dict[str, ClientState] = {}
    retained: dict[str, RetainedState] = {}
    for record in reader.records():
        if isinstance(record, ClientState):
            assert record.session.client_id not in clients, "a client twice"
            clients[record.session.client_id] = record
        else:
            assert record.message.topic not in retained, "a retained message twice"
            retained[record.message.topic] = record
    return reader, clients, retained


def check_full(path: Path, data: Published) -> None:
    reader, clients, retained = contents(path)
    assert not reader.header.sessions_only
    assert set(clients) == set(data.subscriptions)
    for name, state in clients.items():
        assert set(state.session.subscriptions) == data.subscriptions[name]
        assert [m.payload.decode() for _seq, m in state.queue] == data.queued[name], name
    assert {t: r.message.payload.decode() for t, r in retained.items()} == data.retained
    assert all(r.message.retain for r in retained.values())
    assert reader.counts.queued == NODES * PER_CLIENT


def run_tool(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = tool.main([*args, "-t", "2", "--json"])
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1]) if code == 0 else {}
    return code, summary, err


def test_three_folders_into_one_backup_without_duplicates(
        cluster_data: Published, tmp_path: Path, spark: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    inputs = [str(f) for f in cluster_data.folders]
    # -i repeated and several paths after one -i
    code, summary, err = run_tool(capsys, "-i", inputs[0], "-i", *inputs[1:],
                                  "-e", str(tmp_path / "out"))
    assert code == 0, err
    path = Path(summary["path"])
    assert path.parent == tmp_path / "out"
    assert path.name.endswith(f".hive-{tool.hive_version()}.backup")
    check_full(path, cluster_data)
    assert (summary["clients"], summary["retained"], summary["queued"]) == (
        NODES, NODES, NODES * PER_CLIENT)
    # replication: every session is in its node's store and in one replica; every node holds
    # every retained message
    assert summary["stores_read"] >= 2 * NODES
    assert summary["records_read"] >= 2 * NODES + NODES * NODES
    assert summary["duplicates_dropped"] == summary["records_read"] - 2 * NODES, summary
    print(f"\nthe tool over {NODES} folders: {summary}")


def test_a_cluster_stopped_one_node_after_the_other(
        tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Graceful stops move sessions around (each hand-over a newer version), and leave the
    older copies in replicas: the newest copy of each session is exported, once."""
    data = make_cluster_data(tmp_path / "cluster", killed=False)
    code, summary, err = run_tool(capsys, "-i", *map(str, data.folders),
                                  "-e", str(tmp_path / "out"))
    assert code == 0, err
    check_full(Path(summary["path"]), data)
    assert summary["duplicates_dropped"] == summary["records_read"] - 2 * NODES, summary
    print(f"\nthe tool over {NODES} folders of a stopped cluster: {summary}")


def test_sessions_only(cluster_data: Published, tmp_path: Path, spark: Any,
                       capsys: pytest.CaptureFixture[str]) -> None:
    code, summary, err = run_tool(capsys, "-i", *map(str, cluster_data.folders),
                                  "-e", str(tmp_path), "-so")
    assert code == 0, err
    reader, clients, retained = contents(Path(summary["path"]))
    assert reader.header.sessions_only
    assert retained == {}
    assert set(clients) == set(cluster_data.subscriptions)
    for name, state in clients.items():
        assert set(state.session.subscriptions) == {
            f for f in cluster_data.subscriptions[name] if not f.startswith("$share/")}
        assert state.queue == [] and state.inflight == []
    assert (summary["retained"], summary["queued"]) == (0, 0)


def test_a_corrupt_and_a_foreign_folder(cluster_data: Published, tmp_path: Path, spark: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    corrupt = tmp_path / "corrupt"
    (corrupt / "persistence").mkdir(parents=True)
    (corrupt / "persistence" / "sessions.db").write_bytes(b"this is not SQLite" * 100)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("hello")
    good = [str(f) for f in cluster_data.folders]
    out = tmp_path / "out"

    code, _, err = run_tool(capsys, "-i", *good, str(corrupt), "-e", str(out))
    assert code == 1
    assert f"{corrupt}: " in err and "not a readable Hive store" in err and "--skip-bad" in err
    assert not list(out.glob("*")), "a failed run leaves no file"
    code, _, err = run_tool(capsys, "-i", str(foreign), *good, "-e", str(out))
    assert code == 1
    assert f"{foreign}: not a Hive data folder" in err

    code, summary, err = run_tool(capsys, "-i", *good, str(corrupt), str(foreign),
                                  "-e", str(out), "--skip-bad")
    assert code == 0, err
    assert "warning: skipped" in err and str(corrupt) in err and str(foreign) in err
    assert {s["folder"] for s in summary["skipped"]} == {str(corrupt), str(foreign)}
    check_full(Path(summary["path"]), cluster_data)
    assert [p.name for p in out.iterdir()] == [Path(summary["path"]).name]
    # nothing readable at all is a failure, also with --skip-bad
    code, _, err = run_tool(capsys, "-i", str(corrupt), "-e", str(tmp_path / "none"),
                            "--skip-bad")
    assert code == 1 and "no store could be read" in err
    assert not list((tmp_path / "none").glob("*"))


def subscribe_on_a_run(node: HiveNode, client_id: str, topic_filter: str) -> None:
    """Start ``node``, subscribe the persistent session ``client_id`` to ``topic_filter``, and
    stop the node."""
    node.start()
    try:
        device = client(node, client_id)
        device.subscribe(topic_filter, 1)
        time.sleep(0.3)
        bye(device)
    finally:
        node.stop()


def test_the_newest_copy_of_a_session_wins(tmp_path: Path, spark: Any,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A folder copied, then the node changes the session: the later write wins, whatever the
    order of the inputs."""
    node = HiveNode(tmp_path / "node", "", FILE)
    subscribe_on_a_run(node, "device", "a/#")
    old = tmp_path / "old"
    shutil.copytree(node.data_dir, old)
    subscribe_on_a_run(node, "device", "b/#")
    for order in ([old, node.data_dir], [node.data_dir, old]):
        code, summary, err = run_tool(capsys, "-i", *map(str, order),
                                      "-e", str(tmp_path / "out"), "-so")
        assert code == 0, err
        _, clients, _ = contents(Path(summary["path"]))
        assert set(clients["device"].session.subscriptions) == {"a/#", "b/#"}
        assert summary["duplicates_dropped"] == 1
        Path(summary["path"]).unlink()


def test_options_are_validated() -> None:
    """The console script refuses an unknown -io key and a bad -t before Spark starts."""
    bad = subprocess.run([TOOL, "-i", "x", "-e", "y", "-io", "colour=blue"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2
    assert "unknown option 'colour'" in bad.stderr and "spark.*" in bad.stderr
    assert subprocess.run([TOOL, "-i", "x", "-e", "y", "-t", "0"], capture_output=True,
                          text=True, timeout=30).returncode == 2
    args = tool.arguments(["-i", "a", "b", "-i", "c", "-e", "o", "-io=master=local[1]",
                           "-io", "spark.executor.memory=2g", "-so"])
    assert args.inputs == ["a", "b", "c"] and args.sessions_only
    assert args.tool_options == {"master": "local[1]"}
    assert args.spark_conf == {"spark.executor.memory": "2g"}


def test_the_tool_by_spark_submit_on_a_standalone_cluster(
        cluster_data: Published, tmp_path: Path, standalone: Standalone) -> None:
    shared = tmp_path / "shared"
    inputs = []
    for folder in cluster_data.folders:
        copy = shared / folder.parent.name
        shutil.copytree(folder, copy)
        inputs.append(str(copy))
    out = tmp_path / "submit.out"
    took = spark_submit(standalone, tmp_path, tool.__file__, [
        "-i", *inputs, "-e", str(shared / "export"), "-t", "2", "--json"], timeout=180,
        output=out)
    summary = json.loads(out.read_text().strip().splitlines()[-1])
    assert Path(summary["path"]).parent == shared / "export"
    check_full(Path(summary["path"]), cluster_data)
    print(f"\nspark-submit of the recovery tool to the standalone cluster took {took:.1f} s "
          f"(the transform {summary['seconds']} s)")


def rest_body(port: int) -> str:
    return ("<rest-api><enabled>true</enabled><listeners><http>"
            f"<port>{port}</port><bind-address>127.0.0.1</bind-address>"
            "</http></listeners></rest-api>")


def test_the_backup_restores_into_a_fresh_cluster(
        cluster_data: Published, tmp_path: Path, spark: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's last step: the tool's backup of the killed cluster, placed under one node's
    ``backup/<id>/`` of a new 3-node cluster and imported with ``hive backups import``; every
    persistent subscriber reconnects (to another node than the importing one) with its session
    present and gets its queued messages in order, and the retained messages are back."""
    code, summary, err = run_tool(capsys, "-i", *map(str, cluster_data.folders),
                                  "-e", str(tmp_path / "export"))
    assert code == 0, err
    backup = Path(summary["path"])
    backup_id = backup.name.split(".", 1)[0]
    ports = [free_port() for _ in range(NODES)]
    rests = [free_port() for _ in range(NODES)]
    nodes = [HiveNode(tmp_path / f"fresh{i}", "", cluster_body(port, ports).replace(
        "</cluster>", "<replication><replica-count>2</replica-count></replication></cluster>")
        + rest_body(rests[i])) for i, port in enumerate(ports)]
    try:
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_for_log(rf"Cluster size = {NODES}", timeout=30)
        placed = nodes[0].folder / "backup" / backup_id
        placed.mkdir(parents=True)
        shutil.copy(backup, placed / backup.name)
        began = time.monotonic()
        imported = subprocess.run(
            [str(Path(sys.executable).with_name("hive")), "backups", "import", backup_id,
             "--rest", f"http://127.0.0.1:{rests[0]}", "--json", "--timeout", "60"],
            capture_output=True, text=True, timeout=90)
        took = time.monotonic() - began
        assert imported.returncode == 0, imported.stdout + imported.stderr
        state = json.loads(imported.stdout)
        assert state["state"] == "RESTORE_COMPLETED", state
        counts = state["restore"]
        assert (counts["sessions_imported"], counts["queued_imported"],
                counts["retained_imported"]) == (NODES, NODES * PER_CLIENT, NODES), counts
        for i in range(NODES):
            name = f"sub-{i}"
            got: list[str] = []
            present: list[bool] = []
            sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name,
                              protocol=mqtt.MQTTv311, clean_session=False)
            sub.on_connect = lambda _c, _u, flags, _rc, _p, present=present: present.append(
                flags.session_present)
            sub.on_message = lambda _c, _u, m, got=got: got.append(m.payload.decode())
            sub.connect("127.0.0.1", nodes[1 + i % (NODES - 1)].port, keepalive=10)
            sub.loop_start()
            try:
                deadline = time.monotonic() + 20
                while len(got) < PER_CLIENT and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(0.3)  # nothing more may come
            finally:
                bye(sub)
            assert present == [True], name
            assert got == cluster_data.queued[name], name
        watcher_got: dict[str, str] = {}
        watcher = client(nodes[2], "watcher", clean=True)
        watcher.on_message = lambda _c, _u, m: watcher_got.__setitem__(m.topic,
                                                                       m.payload.decode())
        watcher.subscribe("r/#", 1)
        deadline = time.monotonic() + 10
        while len(watcher_got) < NODES and time.monotonic() < deadline:
            time.sleep(0.05)
        bye(watcher)
        assert watcher_got == cluster_data.retained
    finally:
        for node in nodes:
            node.stop()
    print(f"\nimported into a fresh {NODES}-node cluster in {took:.1f} s (hive backups import)")
