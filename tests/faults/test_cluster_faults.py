"""Two real nodes, a publisher on one and a persistent subscriber on the other; the
subscriber's node is paused (SIGSTOP) or killed (kill -9) in the middle of a QoS 1 stream.

What crosses between the nodes is acknowledged only once it is durable on the receiving node,
kept by the sending node until then, and sent again when the nodes find each other again:
nothing the publisher saw acknowledged may be lost.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from cluster._nodes import cluster_body, metrics, wait_for_members, wait_for_route
from conftest import free_port

from faults._traffic import Publisher, Subscriber, Tally, wait_delivered

pytestmark = pytest.mark.timeout(180)


def two_nodes(hive_factory: Any) -> list[Any]:
    """Two nodes with their sessions on disk (file persistence), listing each other."""
    ports = [free_port(), free_port()]
    nodes = []
    for port in ports:
        rest = free_port()
        # A paused node gets what it missed at once when it is back: more than the default
        # queue of 1,000 for a subscriber (that limit would drop them, counted, by design).
        queue = ("<mqtt><queued-messages><max-queue-size>100000</max-queue-size>"
                 "</queued-messages></mqtt>")
        body = cluster_body(port, ports, rest, extra=queue).replace(
            "<persistence><mode>in-memory</mode></persistence>", "")
        nodes.append(hive_factory(body=body, cluster=port, rest=rest))
    wait_for_members(nodes, 2)
    return nodes


def run_stream(nodes: list[Any], fault: Any, what: str) -> Tally:
    near, far = nodes
    subscriber = Subscriber([far.port], "cross/#", 1)
    subscriber.start()
    wait_for_route(near, far, "cross/#")
    publisher = Publisher([near.port], "cross/stream", 1, count=2000, rate=200)
    publisher.start()
    try:
        fault(far)
        wait_delivered(publisher, subscriber)
    finally:
        tally = Tally.of([publisher], subscriber)
        near_cluster = metrics(near).get("cluster", {})
        far_broker = metrics(far).get("broker", {})
        print(f"{what}: {tally}; publisher's node: replayed "
              f"{near_cluster.get('forwards_replayed')}, dropped "
              f"{near_cluster.get('forwards_dropped')}; subscriber's node: skipped "
              f"{metrics(far).get('cluster', {}).get('forwards_duplicates')}, dropped "
              f"{far_broker.get('dropped')}")
        publisher.stop()
        subscriber.stop()
    return tally


def test_a_paused_node_loses_no_acknowledged_message(hive_factory: Any) -> None:
    def pause(far: Any) -> None:
        time.sleep(2)
        os.kill(far.pid, signal.SIGSTOP)
        try:
            time.sleep(6)  # three times the heartbeat timeout: the other node drops it
        finally:
            os.kill(far.pid, signal.SIGCONT)

    tally = run_stream(two_nodes(hive_factory), pause, "SIGSTOP 6 s")
    assert tally.lost == 0, tally


def test_killing_the_subscribers_node_loses_no_acknowledged_message(hive_factory: Any) -> None:
    def kill_three_times(far: Any) -> None:
        for _ in range(3):
            time.sleep(1.5)
            far.kill()
            far.start()

    tally = run_stream(two_nodes(hive_factory), kill_three_times, "3 x kill -9")
    assert tally.lost == 0, tally
