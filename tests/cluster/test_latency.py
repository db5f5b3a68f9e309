"""Latency between nodes in Prometheus: a real 3-node cluster, a publisher on one node and
subscribers on another, and the subscribers' node frozen (SIGSTOP) for a moment while messages
are on their way, so the histograms must show that wait where it happened and nowhere else."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from cluster._nodes import get, start_cluster, wait_for, wait_for_members, wait_for_route
from cluster.test_prometheus import client, scrape
from hive_core.cluster._cluster import DELIVERY_SAMPLE

pytestmark = pytest.mark.timeout(120)

FREEZE = 0.8  # seconds: well below the heartbeat timeout (2 s), well above loopback times


def histogram(scraped: dict[str, Any], name: str, **labels: str) -> dict[str, float]:
    """{le: cumulative count} with "count" and "sum", for one label set."""
    wanted = tuple(sorted(labels.items()))
    out: dict[str, float] = {}
    for (sample, sample_labels), number in scraped["samples"].items():
        rest = tuple((k, v) for k, v in sample_labels if k != "le")
        if rest != wanted:
            continue
        if sample == f"{name}_bucket":
            out[dict(sample_labels)["le"]] = number
        elif sample == f"{name}_count":
            out["count"] = number
        elif sample == f"{name}_sum":
            out["sum"] = number
    return out


def test_delivery_and_acknowledgement_latency_show_a_frozen_node(hive_factory: Any) -> None:
    nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    ids = [get(n, "/api/v1/health")["node_id"] for n in nodes]
    received: list[float] = []
    subscriber = client(nodes[1].port, "lat-sub")
    subscriber.on_message = lambda _c, _u, m: received.append(time.time())
    subscriber.subscribe([("lat/#", 1)])
    keeper = client(nodes[0].port, "lat-keeper", clean=False)  # session writes to replicate
    keeper.subscribe("lat/#", qos=1)
    wait_for_route(nodes[0], nodes[1], "lat/#")
    publisher = client(nodes[0].port, "lat-pub")
    count = 400

    def publish() -> None:
        for n in range(count):
            publisher.publish("lat/x", str(n).encode(), qos=1)
            time.sleep(0.004)

    thread = threading.Thread(target=publish)
    try:
        thread.start()
        time.sleep(0.5)
        os.kill(nodes[1].pid, signal.SIGSTOP)  # messages routed now wait for it
        time.sleep(FREEZE)
        os.kill(nodes[1].pid, signal.SIGCONT)
        thread.join(30)
        wait_for(lambda: len(received) >= count, 30, "every message at the subscriber")
    finally:
        for c in (publisher, subscriber, keeper):
            c.disconnect()
            c.loop_stop()
    subscribing, publishing = scrape(nodes[1]), scrape(nodes[0])

    delivery = histogram(subscribing, "hive_cluster_message_delivery_seconds", origin=ids[0])
    acks = histogram(publishing, "hive_cluster_forward_ack_seconds", peer=ids[1])
    print(f"\ndelivery (s, cumulative): {delivery}\nforward acks: {acks}")
    assert subscribing["types"]["hive_cluster_message_delivery_seconds"] == "histogram"
    # every forwarded message, counted by sample (one timed in DELIVERY_SAMPLE stands for all)
    assert delivery["count"] == delivery["+Inf"]
    assert abs(delivery["count"] - count) < DELIVERY_SAMPLE
    assert delivery["0.01"] >= count / 2  # most cross loopback within milliseconds
    assert delivery["0.25"] < count  # those routed while the node was frozen waited
    assert delivery["2.5"] == count  # and no longer than the freeze and the catching up
    assert delivery["sum"] >= 0.25 * (count - delivery["0.25"])
    # nothing was forwarded to the node with no subscribers, nor from the subscribers' node
    assert not histogram(publishing, "hive_cluster_message_delivery_seconds", origin=ids[1])
    assert not histogram(subscribing, "hive_cluster_message_delivery_seconds", origin=ids[2])

    assert acks["count"] >= 3 and acks["+Inf"] == acks["count"]
    assert acks["0.25"] < acks["count"]  # the probe in flight during the freeze
    assert acks["0.05"] >= 1  # and quick ones besides

    backups = get(nodes[0], "/api/v1/metrics")["cluster"]["backups"]
    assert len(backups) == 1
    replication = histogram(publishing, "hive_cluster_replication_ack_seconds",
                            backup=backups[0])
    assert replication["count"] >= 1 and replication["+Inf"] == replication["count"]
    # the same numbers in the REST metrics document
    document = get(nodes[1], "/api/v1/metrics")["cluster"]["delivery_latency"][ids[0]]
    assert document["count"] >= count - DELIVERY_SAMPLE and len(document["buckets"]) == 17
