"""The seeds' "still ongoing" lines (synchronisation table): a join, a replication or a merge
that lasts logs its line at every interval between its start and finish lines. Real nodes; the
interval lowered with HIVE_SYNC_PROGRESS_INTERVAL; a peer frozen with SIGSTOP (or a large
retained set) makes the synchronisation last."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import HiveProcess, free_port, render_config, run_to_exit
from e2e.rawclient import RawClient

from cluster._nodes import cluster_body, metrics, wait_for, wait_for_members

pytestmark = pytest.mark.timeout(120)

INTERVAL = 0.25
JOIN_START = "Starting cluster join process. This may take a while. Please do not shut down Hive."
JOIN_ONGOING = "Cluster join process is still ongoing. Please do not shut down Hive."
JOIN_END = "Finished cluster join process successfully."
REPLICATION_START = ("Starting cluster replication process. This may take a while. Please do "
                     "not shut down Hive.")
REPLICATION_ONGOING = "Replication is still in progress. Please do not shut down Hive."
REPLICATION_END = re.compile(r"Finished cluster replication successfully in (\d+) ms\.")
MERGE_START = "Starting cluster merge process. This may take a while. Please do not shut down Hive."
MERGE_ONGOING = "Cluster merge process is still ongoing. Please do not shut down Hive."
MERGE_END = "Finished cluster merge process successfully."


def two_nodes(hive_factory: Callable[..., HiveProcess],
              heartbeat: tuple[int, int] = (1000, 30000),
              interval: float = INTERVAL) -> list[HiveProcess]:
    ports = [free_port(), free_port()]
    nodes = []
    for port in ports:
        rest = free_port()
        node = hive_factory(body=cluster_body(port, ports, rest, heartbeat), cluster=port,
                            rest=rest, start=False)
        node.env["HIVE_SYNC_PROGRESS_INTERVAL"] = str(interval)
        nodes.append(node)
    for node in nodes:
        node.start()
    wait_for_members(nodes, 2, timeout=20)
    return nodes


@contextmanager
def frozen(node: HiveProcess) -> Iterator[None]:
    os.kill(node.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(node.pid, signal.SIGCONT)


def lines_between(log: str, start: str, end: str | re.Pattern[str]) -> list[str]:
    """The lines after the last ``start`` and before the ``end`` that follows it."""
    tail = log[log.rindex(start):]
    found = re.search(end, tail) if isinstance(end, re.Pattern) else None
    cut = found.start() if found else tail.index(end)  # type: ignore[arg-type]
    return tail[:cut].splitlines()[1:]


def test_a_replication_waiting_for_a_frozen_backup_says_it_is_still_in_progress(
        hive_factory: Callable[..., HiveProcess]) -> None:
    leaving, backup = two_nodes(hive_factory)
    leaving.wait_for_log(r"Replica on \S+ complete", timeout=15)  # the backup is its backup
    # Persistent sessions on the leaving node: what they leave behind goes to the backup.
    clients = [RawClient(leaving.port) for _ in range(3)]
    for number, client in enumerate(clients):
        client.connect(5, client_id=f"keeper-{number}", clean_start=False,
                       SESSION_EXPIRY_INTERVAL=3600)
        client.subscribe(f"kept/{number}", 1)
    try:
        with frozen(backup):
            os.kill(leaving.pid, signal.SIGTERM)
            wait_for(lambda: leaving.log.count(REPLICATION_ONGOING) >= 3, 10,
                     "three progress lines while the backup is frozen")
    finally:
        for client in clients:
            client.close()
    assert leaving.proc is not None and leaving.proc.wait(15) == 0
    finished = REPLICATION_END.search(leaving.log)
    assert finished, leaving.log[-3000:]
    between = lines_between(leaving.log, REPLICATION_START, REPLICATION_END)
    ongoing = [line for line in between if REPLICATION_ONGOING in line]
    assert len(ongoing) >= 3 and all(re.search(r"\bINFO +- ", line) for line in ongoing), between
    # about one per interval: the replication took N ms
    assert len(ongoing) <= int(finished.group(1)) / 1000 / INTERVAL + 1


def test_a_join_waiting_for_a_frozen_member_says_it_is_still_ongoing(
        hive_factory: Callable[..., HiveProcess]) -> None:
    joining, member = two_nodes(hive_factory)
    joining.stop()
    with frozen(member):
        joining.start(timeout=30)  # the join gives the frozen member its connect timeout
    between = lines_between(joining.log, JOIN_START, JOIN_END)
    assert sum(JOIN_ONGOING in line for line in between) >= 2, between
    wait_for_members([joining, member], 2, timeout=30)  # and it joins once the member thaws


def test_a_merge_with_a_large_retained_set_says_it_is_still_ongoing(
        hive_factory: Callable[..., HiveProcess]) -> None:
    """Frozen past the heartbeat timeout, the other node is dropped; thawed, it is back and
    the two merge: it sends everything it holds (here 40 000 retained messages) before SYNCED."""
    one, other = two_nodes(hive_factory, heartbeat=(300, 1500), interval=0.1)
    publish_retained(one.port, 40_000)
    wait_for(lambda: retained_count(other) >= 40_000, 60, "the retained set on both nodes")
    mark = len(one.log)
    with frozen(other):
        wait_for(lambda: "Cluster size = 1" in one.log[mark:], 20, "the frozen node dropped")
    one.wait_for_log(re.escape(MERGE_END), timeout=60)
    between = lines_between(one.log, MERGE_START, MERGE_END)
    ongoing = sum(MERGE_ONGOING in line for line in between)
    print(f"\nmerge of {len(between)} log lines with {ongoing} progress lines: "
          f"{between[0][:23]} .. {between[-1][:23]}")
    assert ongoing >= 1, between
    time.sleep(0.5)  # and none after the finish line
    assert not re.search(re.escape(MERGE_ONGOING), one.log[one.log.rindex(MERGE_END):])


def publish_retained(port: int, count: int) -> None:
    """``count`` retained messages on distinct topics, from one paho client (QoS 0, batched)."""
    script = (
        "import sys, paho.mqtt.client as m\n"
        "from paho.mqtt.enums import CallbackAPIVersion as V\n"
        "c = m.Client(V.VERSION2, client_id='retainer'); c.connect('127.0.0.1', int(sys.argv[1]))\n"
        "c.loop_start()\n"
        "infos = [c.publish(f'r/{i // 1000}/{i}', b'x' * 200, 0, retain=True) "
        "for i in range(int(sys.argv[2]))]\n"
        "c.publish('r/done', b'1', 1).wait_for_publish(60); c.disconnect(); c.loop_stop()\n")
    subprocess.run([sys.executable, "-c", script, str(port), str(count)], check=True,
                   timeout=90)


def retained_count(node: HiveProcess) -> int:
    return int(metrics(node)["broker"]["retained_messages"])


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("HIVE_SYNC_PROGRESS_INTERVAL", "soon", "HIVE_SYNC_PROGRESS_INTERVAL='soon': expected "
                                            "seconds, more than 0"),
    ("HIVE_NODE_PROTOCOL", "x", "HIVE_NODE_PROTOCOL='x': expected a number")])
def test_a_bad_variable_is_refused_at_start_without_a_traceback(
        tmp_path: Path, variable: str, value: str, message: str) -> None:
    config = tmp_path / "config.xml"
    cluster = free_port()
    config.write_text(render_config(free_port(), cluster_body(cluster, [cluster], free_port())))
    done = run_to_exit(config, env={variable: value})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"hive: environment: {message}")
    assert "Traceback" not in done.stderr
