"""A subscriber's node freezes (SIGSTOP) for longer than its publishers may wait: what is kept
for it goes to disk on the publisher's node, the publisher is acknowledged while the node is
still frozen, and no acknowledged message is lost when the publisher's node is then killed
(kill -9): restarted, it sends them again; taken over, its taker does.

The heartbeat timeout is a minute here, so the frozen node stays a member throughout: the
acknowledgements do not wait for the cluster to give up on it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
from cluster._nodes import cluster_body, metrics, remote_filters, wait_for_members
from conftest import free_port

from faults._traffic import Publisher, Subscriber, Tally, wait_until

pytestmark = pytest.mark.timeout(180)

QUEUE = "<mqtt><queued-messages><max-queue-size>100000</max-queue-size></queued-messages></mqtt>"
HEARTBEAT = (500, 60_000)  # ms: a frozen node stays a member for the whole test


def nodes_named(hive_factory: Any, names: list[str], replica_count: int) -> list[Any]:
    """Started nodes with these node names (the ring follows their order), their sessions on
    disk, a heartbeat timeout of a minute."""
    ports = [free_port() for _ in names]
    nodes = []
    for port, name in zip(ports, names, strict=True):
        rest = free_port()
        body = cluster_body(port, ports, rest, HEARTBEAT, extra=QUEUE).replace(
            "<persistence><mode>in-memory</mode></persistence>", "").replace(
            "<cluster><enabled>true</enabled>",
            f"<cluster><enabled>true</enabled><node-name>{name}</node-name>").replace(
            "</cluster>", f"<replication><replica-count>{replica_count}</replica-count>"
                          "</replication></cluster>")
        nodes.append(hive_factory(body=body, cluster=port, rest=rest))
    wait_for_members(nodes, len(nodes))
    return nodes


def freeze_through(publisher_node: Any, frozen: Any, frozen_name: str, count: int,
                   fault: Callable[[], None]) -> Tally:
    """A persistent QoS 1 subscriber on ``frozen``, which is then frozen; ``count`` QoS 1
    messages published on ``publisher_node`` must all be acknowledged meanwhile; ``fault``
    runs, then the node thaws and every acknowledged message must arrive."""
    subscriber = Subscriber([frozen.port], "kept/#", 1)
    subscriber.start()
    publisher = Publisher([publisher_node.port], "kept/stream", 1, count=count, rate=50)
    wait_until(lambda: "kept/#" in remote_filters(publisher_node).get(frozen_name, []), 10,
               "the publisher's node to route to the subscriber's")
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        publisher.start()
        wait_until(publisher.all_acknowledged, 30,
                   "every message to be acknowledged while the subscriber's node is frozen")
        cluster = metrics(publisher_node)["cluster"]
        assert cluster["forwards_on_disk"] == count, cluster
        assert cluster["forwards_written_to_disk"] >= count, cluster
        fault()
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    try:
        wait_until(lambda: publisher.acknowledged <= set(subscriber.snapshot()), 60,
                   "every acknowledged message to arrive")
    finally:
        tally = Tally.of([publisher], subscriber)
        print(tally)
        publisher.stop()
        subscriber.stop()
    return tally


def test_a_publisher_is_acknowledged_while_the_subscribers_node_is_frozen_and_a_restart_of_its_node_loses_none(  # noqa: E501
        hive_factory: Any) -> None:
    near, far = nodes_named(hive_factory, ["near", "far"], replica_count=1)

    def restart() -> None:
        near.kill()  # kill -9, with the 40 messages kept for the frozen node only on its disk
        near.start()
        wait_until(lambda: "restored 40 messages kept for other nodes" in near.log, 10,
                   "the restarted node to find the messages it kept")

    tally = freeze_through(near, far, "far", 40, restart)
    assert tally.acknowledged == 40 and tally.lost == 0, tally
    wait_until(lambda: metrics(near)["cluster"]["forwards_on_disk"] == 0, 20,
               "the rows to go once the node has acknowledged them")


def test_the_taker_of_a_killed_node_delivers_what_it_kept_on_disk_for_a_frozen_node(
        hive_factory: Any) -> None:
    # The ring is a -> b -> c: b holds a's replica and takes its sessions over.
    a, b, c = nodes_named(hive_factory, ["a", "b", "c"], replica_count=2)

    def kill() -> None:
        a.kill()  # not restarted: b takes its sessions, and the messages it kept, over
        wait_until(lambda: "published again 40 messages kept on disk" in b.log, 30,
                   "the taker to send on what the killed node kept")

    tally = freeze_through(a, c, "c", 40, kill)
    assert tally.acknowledged == 40 and tally.lost == 0, tally
