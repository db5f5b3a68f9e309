"""Rolling upgrades and whole-cluster restarts with persistent subscribers under a QoS 1 load.

A node that stops on purpose first has its backups confirm everything (the seed's
"Starting cluster replication process" ... "Finished cluster replication successfully in N
ms."), then says BYE; the next node on the ring takes its sessions over. Nodes of two node
protocol versions (an older one rehearsed with HIVE_NODE_PROTOCOL) join and serve together.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from cluster._nodes import metrics, node_id, wait_for_members

from faults._traffic import (
    Publisher,
    Subscriber,
    Tally,
    traffic_both_ways,
    wait_delivered,
    wait_until,
)
from faults.test_failover import three_nodes
from hive_core.cluster._wire import PROTOCOL_VERSION

pytestmark = pytest.mark.timeout(240)


def test_restarting_every_node_one_at_a_time_loses_nothing(hive_factory: Any) -> None:
    nodes = three_nodes(hive_factory)
    ports = [n.port for n in nodes]
    subscriber = Subscriber(ports, "rolling/#", 1)
    subscriber.start()
    time.sleep(0.5)
    publisher = Publisher([ports[1], ports[2], ports[0]], "rolling/stream", 1, count=2500,
                          rate=150)
    publisher.start()
    present = []
    try:
        for node in nodes:  # the upgrade: stop, (new version), start, next
            time.sleep(2)
            connects = subscriber.connects
            node.terminate()
            assert "Starting cluster replication process. This may take a while." in node.log
            assert re.search(r"Finished cluster replication successfully in \d+ ms\.",
                             node.log), node.log[-2000:]
            node.start()
            wait_for_members(nodes, 3)
            if subscriber.connects > connects:
                present.append(subscriber.sessions_present[-1])
        wait_delivered(publisher, subscriber, sent=90)
    finally:
        tally = Tally.of([publisher], subscriber)
        print(f"rolling restart of 3 nodes, QoS 1: {tally}; the subscriber reconnected "
              f"{len(present)} times, session present each time: {all(present)}")
        publisher.stop()
        subscriber.stop()
    assert present and all(present)
    assert tally.lost == 0, tally


def test_stopping_the_whole_cluster_and_starting_it_again_keeps_every_session(
        hive_factory: Any) -> None:
    """Stopped one at a time, started last stopped first: every persistent session is back
    with what was queued for it."""
    nodes = three_nodes(hive_factory)
    subscribers = [Subscriber([n.port], "whole/#", 1, client_id=f"whole-{i}")
                   for i, n in enumerate(nodes)]
    for subscriber in subscribers:
        subscriber.start()
    time.sleep(0.5)
    for subscriber in subscribers:
        subscriber.stop()  # offline now: what follows is queued for them
    publisher = Publisher([nodes[0].port], "whole/x", 1, count=30, rate=200)
    publisher.start()
    wait_until(publisher.all_acknowledged, 30, "the messages to be acknowledged")
    publisher.stop()
    for node in nodes:
        node.terminate()
    for node in reversed(nodes):
        node.start()
    wait_for_members(nodes, 3)
    held = sum(metrics(n).get("broker", {}).get("sessions", 0) for n in nodes)
    try:
        for i, node in enumerate(nodes):
            again = Subscriber([node.port], "whole/#", 1, client_id=f"whole-{i}")
            again.client.on_subscribe = None
            again.start()
            subscribers[i] = again
        for subscriber in subscribers:
            assert subscriber.sessions_present[-1]
            wait_until(lambda s=subscriber: set(s.snapshot()) >= publisher.acknowledged, 20,
                       "the queued messages")
    finally:
        for subscriber in subscribers:
            subscriber.stop()
    print(f"whole cluster restarted (last stopped first): {held} sessions held, all 3 "
          f"subscribers got their {len(publisher.acknowledged)} queued messages")


@pytest.mark.parametrize("older", [2, 3])
def test_nodes_of_two_protocol_versions_serve_together(hive_factory: Any, older: int) -> None:
    """An older node (rehearsed) and newer ones: one cluster, messages cross both ways. A
    node of protocol 2 holds no replica (the newer nodes replicate among themselves only); one
    of protocol 3 does, and gets PUBLISH frames without the message serial."""
    nodes = three_nodes(hive_factory, start=False)
    nodes[0].env["HIVE_NODE_PROTOCOL"] = str(older)
    for node in nodes:
        node.start()
    wait_for_members(nodes, 3)
    assert f"node protocol {older}" in nodes[1].log
    assert f"node protocol {PROTOCOL_VERSION}" in nodes[1].log
    traffic_both_ways(nodes, "mixed", publishers_on=(0, 2), count=100, rate=500)
    old, new = metrics(nodes[0]).get("cluster", {}), metrics(nodes[1]).get("cluster", {})
    if older == 2:
        assert old.get("backups") == [] and node_id(nodes[0]) not in (new.get("backups") or [])
    else:
        assert old.get("backups"), old  # protocol 3 replicates
    assert new.get("backups"), new  # the two newer nodes back each other up
