"""The node's metrics in Prometheus' text exposition format (``/api/v1/metrics/prometheus``).

Built with the official client library (``prometheus_client``): a collector reads the node's
live counters at each scrape, so nothing on the broker's hot path knows about Prometheus.
Names follow Prometheus' conventions: ``hive_`` prefix, base units, ``_total`` for counters,
labels for what varies (QoS, drop reason, frame kind, peer node, extension).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hive_core import __version__

if TYPE_CHECKING:
    from hive_core.admin._status import NodeStatus
    from hive_core.broker import BrokerStats
    from hive_core.cluster import ClusterStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

DROP_REASONS = ("queue-full", "expired", "too-large", "extension", "invalid-topic",
                "session-gone")


def _name(text: str) -> str:
    """An extension's metric name (``discovery-s3.errors``) as a Prometheus name part."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", text).strip("_").lower()


class NodeCollector(Collector):
    def __init__(self, node: NodeStatus) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        node = self.node
        info = GaugeMetricFamily("hive_node_info", "The node's id and Hive version (always 1).",
                                 labels=["node_id", "version"])
        info.add_metric([node.node_id, __version__], 1)
        yield info
        broker = node.broker_stats()
        if broker is not None:
            yield from _broker(broker)
        cluster = node.cluster_stats()
        if cluster is not None:
            yield from _cluster(cluster)
        yield from _extensions(node)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _broker(stats: BrokerStats) -> Iterator[Metric]:
    m = stats.metrics
    yield _gauge("hive_connections", "Client connections open now.", stats.connections_current)
    yield _counter("hive_connections_accepted", "Client connections accepted.",
                   m.connections_accepted)
    yield _gauge("hive_sessions", "Sessions held by this node (connected and persistent).",
                 stats.sessions)
    yield _gauge("hive_subscriptions", "Subscriptions of the sessions held by this node.",
                 stats.subscriptions)
    yield _gauge("hive_queued_messages", "Messages waiting in the sessions' queues.",
                 stats.queued_messages)
    yield _gauge("hive_retained_messages", "Retained messages.", stats.retained_messages)
    received = CounterMetricFamily("hive_messages_received",
                                   "PUBLISH messages routed by this node, by QoS.", labels=["qos"])
    sent = CounterMetricFamily("hive_messages_sent",
                               "PUBLISH messages sent to clients, by QoS.", labels=["qos"])
    for qos in range(3):
        received.add_metric([str(qos)], m.messages_in_by_qos[qos])
        sent.add_metric([str(qos)], m.messages_out_by_qos[qos])
    yield received
    yield sent
    dropped = CounterMetricFamily("hive_messages_dropped",
                                  "Messages dropped for a subscriber, by reason.",
                                  labels=["reason"])
    for reason in sorted({*DROP_REASONS, *m.dropped}):
        dropped.add_metric([reason], m.dropped.get(reason, 0))
    yield dropped
    yield _counter("hive_protocol_errors", "Connections closed for a protocol error.",
                   m.protocol_errors)
    yield _counter("hive_receive_maximum_throttled",
                   "Times a client sent beyond the receive maximum and reading paused.",
                   m.receive_maximum_throttled)
    yield _counter("hive_proxy_protocol_refused",
                   "Connections closed for a missing or bad PROXY protocol header.",
                   m.proxy_protocol_refused)


def _cluster(c: ClusterStats) -> Iterator[Metric]:
    yield _gauge("hive_cluster_members", "Cluster members this node sees, itself included.",
                 c.members)
    yield _gauge("hive_cluster_links", "Links to other members.", c.connections)
    yield _counter("hive_cluster_publishes_forwarded",
                   "Messages forwarded to other nodes.", c.publishes_forwarded)
    yield _counter("hive_cluster_publishes_received",
                   "Messages received from other nodes.", c.publishes_received)
    frames = CounterMetricFamily("hive_cluster_frames_received",
                                 "Node-to-node frames received, by kind.", labels=["kind"])
    for kind, count in sorted(c.frames_in.items()):
        frames.add_metric([kind], count)
    yield frames
    yield _counter("hive_cluster_frames_sent", "Node-to-node frames sent.", c.frames_out)
    sent = CounterMetricFamily("hive_cluster_peer_sent_bytes",
                               "Bytes sent to each peer node (since its link opened).",
                               labels=["peer"])
    received = CounterMetricFamily("hive_cluster_peer_received_bytes",
                                   "Bytes received from each peer node (since its link opened).",
                                   labels=["peer"])
    for peer, (out, into) in sorted(c.peer_traffic.items()):
        sent.add_metric([peer], out)
        received.add_metric([peer], into)
    yield sent
    yield received
    yield _gauge("hive_cluster_forwards_unacknowledged",
                 "Messages sent to other nodes and kept until they confirm them.",
                 c.forwards_unacknowledged)
    yield _counter("hive_cluster_forwards_replayed", "Forwards sent again after a reconnect.",
                   c.forwards_replayed)
    yield _counter("hive_cluster_forwards_duplicates",
                   "Forwards received again after a reconnect, and skipped.",
                   c.forwards_duplicates)
    yield _counter("hive_cluster_forwards_dropped",
                   "Forwards given up on (kept too long or too many).", c.forwards_dropped)
    yield _counter("hive_cluster_authentication_failures",
                   "Node links refused: the peer did not prove the shared secret.",
                   c.authentication_failures)
    yield _gauge("hive_cluster_replica_count", "Copies kept of each persistent session.",
                 c.replica_count)
    lag = GaugeMetricFamily("hive_cluster_replication_lag_ops",
                            "Replication operations a backup node has not acknowledged yet.",
                            labels=["backup"])
    for backup in c.backups:
        lag.add_metric([backup], c.replication_lag.get(backup, 0))
    yield lag
    yield _gauge("hive_cluster_replicas_held", "Nodes whose replica this node keeps.",
                 len(c.replicas_held))
    yield _counter("hive_cluster_takeovers", "Failed nodes whose sessions this node took over.",
                   c.takeovers)
    yield _counter("hive_cluster_sessions_taken_over", "Sessions taken over from failed nodes.",
                   c.sessions_taken_over)
    yield _counter("hive_cluster_messages_rescued",
                   "Messages kept for a failed node and delivered to its sessions here.",
                   c.messages_rescued)
    yield _counter("hive_cluster_merges",
                   "Copies of a session dropped here for another node's (a healed split).",
                   c.merges)


def _extensions(node: NodeStatus) -> Iterator[Metric]:
    failures = CounterMetricFamily(
        "hive_extension_hook_failures",
        "Hook calls of an extension that raised or passed the deadline.", labels=["extension"])
    for extension, count in sorted(node.extension_failures().items()):
        failures.add_metric([extension], count)
    yield failures
    counters = node.extension_counter_names()
    for name, value in sorted(node.extension_metrics().items()):
        metric = f"hive_extension_{_name(name)}"
        doc = f"The extension metric {name}."
        yield _counter(metric, doc, value) if name in counters else _gauge(metric, doc, value)


def exposition(node: NodeStatus) -> bytes:
    """One scrape: every metric of the node, in the text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node))
    return generate_latest(registry)
