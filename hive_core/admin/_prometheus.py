"""The node's metrics in Prometheus' text exposition format (``/api/v1/metrics/prometheus``).

Built with the official client library (``prometheus_client``): a collector reads the node's
live counters at each scrape, so nothing on the broker's hot path knows about Prometheus.
Names follow Prometheus' conventions: ``hive_`` prefix, base units, ``_total`` for counters,
labels for what varies (QoS, drop reason, frame kind, peer node, extension).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from hive_core import __version__
from hive_core.broker import DROP_REASONS

if TYPE_CHECKING:
    from hive_core.admin._status import NodeStatus
    from hive_core.broker import BrokerStats
    from hive_core.cluster import ClusterStats, LatencySnapshot

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # the text format generate_latest writes



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


Scalar = tuple[str, str, str, Callable[[Any], float]]  # type, name, help, value of the stats


def _family(kind: str, name: str, doc: str, labels: list[str] | None = None,
            value: float | None = None) -> GaugeMetricFamily | CounterMetricFamily:
    family = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
    return family(name, doc, value=value, labels=labels)


def _labelled(kind: str, name: str, doc: str, label: str,
              values: Iterable[tuple[str, float]]) -> Metric:
    family = _family(kind, name, doc, [label])
    for key, value in values:
        family.add_metric([key], value)
    return family


def _scalars(table: tuple[Scalar, ...], stats: Any) -> Iterator[Metric]:
    for kind, name, doc, read in table:
        yield _family(kind, name, doc, value=read(stats))


_BROKER: tuple[Scalar, ...] = (
    ("gauge", "hive_connections", "Client connections open now.",
     lambda s: s.connections_current),
    ("counter", "hive_connections_accepted", "Client connections accepted.",
     lambda s: s.metrics.connections_accepted),
    ("gauge", "hive_sessions", "Sessions held by this node (connected and persistent).",
     lambda s: s.sessions),
    ("gauge", "hive_subscriptions", "Subscriptions of the sessions held by this node.",
     lambda s: s.subscriptions),
    ("gauge", "hive_queued_messages", "Messages waiting in the sessions' queues.",
     lambda s: s.queued_messages),
    ("gauge", "hive_retained_messages", "Retained messages.", lambda s: s.retained_messages),
    ("counter", "hive_protocol_errors", "Connections closed for a protocol error.",
     lambda s: s.metrics.protocol_errors),
    ("counter", "hive_receive_maximum_throttled",
     "Times a client sent beyond the receive maximum and reading paused.",
     lambda s: s.metrics.receive_maximum_throttled),
    ("counter", "hive_proxy_protocol_refused",
     "Connections closed for a missing or bad PROXY protocol header.",
     lambda s: s.metrics.proxy_protocol_refused),
    ("counter", "hive_handover_duplicates_skipped",
     "Messages that reached a session moving to this node twice (directly and in the old "
     "node's tail), delivered once.", lambda s: s.metrics.handover_duplicates_skipped),
)

_OVERLOAD: tuple[Scalar, ...] = (
    ("gauge", "hive_overload_protection_level",
     "The node's overload protection level, 0 (no pressure) to 10.", lambda o: o.level),
    ("gauge", "hive_overload_protection_active",
     "1 while overload protection is engaged (it shares credit among the clients).",
     lambda o: int(o.engaged)),
    ("gauge", "hive_overload_protection_clients_held",
     "Clients not read from now: they sent more than their share.",
     lambda o: o.clients_held),
    ("gauge", "hive_overload_protection_credit_per_tick_bytes",
     "Bytes each client may send per tenth of a second while engaged (0: not engaged).",
     lambda o: o.share),
    ("counter", "hive_overload_protection_engaged",
     "Times overload protection engaged.", lambda o: o.engagements),
    ("counter", "hive_overload_protection_client_holds",
     "Times a client was held (reading paused) for sending more than its share.",
     lambda o: o.holds),
    ("gauge", "hive_overload_protection_loop_lag_seconds",
     "How late the event loop ran the last overload protection sample.",
     lambda o: o.loop_lag),
)

_CLUSTER: tuple[Scalar, ...] = (
    ("gauge", "hive_cluster_members", "Cluster members this node sees, itself included.",
     lambda c: c.members),
    ("gauge", "hive_cluster_links", "Links to other members.", lambda c: c.connections),
    ("counter", "hive_cluster_publishes_forwarded", "Messages forwarded to other nodes.",
     lambda c: c.publishes_forwarded),
    ("counter", "hive_cluster_publishes_received", "Messages received from other nodes.",
     lambda c: c.publishes_received),
    ("counter", "hive_cluster_frames_sent", "Node-to-node frames sent.", lambda c: c.frames_out),
    ("gauge", "hive_cluster_forwards_unacknowledged",
     "Messages sent to other nodes and kept until they confirm them.",
     lambda c: c.forwards_unacknowledged),
    ("counter", "hive_cluster_forwards_replayed", "Forwards sent again after a reconnect.",
     lambda c: c.forwards_replayed),
    ("counter", "hive_cluster_forwards_duplicates",
     "Forwards received again after a reconnect, and skipped.",
     lambda c: c.forwards_duplicates),
    ("counter", "hive_cluster_forwards_dropped",
     "Forwards given up on (the node forgotten), or QoS 0 ones not sent to a node that had not "
     "acknowledged the most this node keeps.", lambda c: c.forwards_dropped),
    ("counter", "hive_cluster_forwards_refused",
     "Local QoS 1/2 publishes refused: a node they were for had not acknowledged the most this "
     "node keeps for it.", lambda c: c.forwards_refused),
    ("gauge", "hive_cluster_forwards_on_disk",
     "Messages kept on disk for nodes that have not acknowledged them for a second.",
     lambda c: c.forwards_on_disk),
    ("counter", "hive_cluster_forwards_written_to_disk",
     "Messages written to disk for nodes that had not acknowledged for a second.",
     lambda c: c.forwards_written_to_disk),
    ("counter", "hive_cluster_authentication_failures",
     "Node links refused: the peer did not prove the shared secret.",
     lambda c: c.authentication_failures),
    ("gauge", "hive_cluster_replica_count", "Copies kept of each persistent session.",
     lambda c: c.replica_count),
    ("gauge", "hive_cluster_replicas_held", "Nodes whose replica this node keeps.",
     lambda c: len(c.replicas_held)),
    ("counter", "hive_cluster_takeovers", "Failed nodes whose sessions this node took over.",
     lambda c: c.takeovers),
    ("counter", "hive_cluster_sessions_taken_over", "Sessions taken over from failed nodes.",
     lambda c: c.sessions_taken_over),
    ("counter", "hive_cluster_messages_rescued",
     "Messages kept for a failed node and delivered to its sessions here.",
     lambda c: c.messages_rescued),
    ("counter", "hive_cluster_replication_deliveries_spared",
     "QoS 1 deliveries acknowledged while their ops were held back from the backups "
     "(<delivery-hold>): nothing of them was replicated.",
     lambda c: c.replication_spared),
    ("counter", "hive_cluster_replication_deliveries_late",
     "Held QoS 1 deliveries whose hold ran out: their ops went to the backups (with those "
     "held behind them for the same session, not counted here).",
     lambda c: c.replication_late),
    ("counter", "hive_cluster_merges",
     "Copies of a session dropped here for another node's (a healed split).",
     lambda c: c.merges),
)


def _broker(stats: BrokerStats) -> Iterator[Metric]:
    m = stats.metrics
    yield from _scalars(_BROKER, stats)
    yield _labelled("counter", "hive_messages_received",
                    "PUBLISH messages routed by this node, by QoS.", "qos",
                    ((str(qos), n) for qos, n in enumerate(m.messages_in_by_qos)))
    yield _labelled("counter", "hive_messages_sent", "PUBLISH messages sent to clients, by QoS.",
                    "qos", ((str(qos), n) for qos, n in enumerate(m.messages_out_by_qos)))
    yield _labelled("counter", "hive_messages_dropped",
                    "Messages dropped for a subscriber, by reason.", "reason",
                    ((r, m.dropped.get(r, 0)) for r in sorted({*DROP_REASONS, *m.dropped})))
    if stats.overload is not None:
        yield from _scalars(_OVERLOAD, stats.overload)
        yield _labelled("gauge", "hive_overload_protection_source_level",
                        "The pressure of each source, 0 to 10, at the last sample (the level "
                        "is the highest).", "source", sorted(stats.overload.sources.items()))
        yield _labelled("counter", "hive_overload_protection_pressure_samples",
                        "Samples (ten a second) in which a source's pressure was above 0.",
                        "source", sorted(stats.overload.pressured.items()))


def _cluster(c: ClusterStats) -> Iterator[Metric]:
    yield from _scalars(_CLUSTER, c)
    yield _labelled("counter", "hive_cluster_frames_received",
                    "Node-to-node frames received, by kind.", "kind", sorted(c.frames_in.items()))
    traffic = sorted(c.peer_traffic.items())
    yield _labelled("counter", "hive_cluster_peer_sent_bytes",
                    "Bytes sent to each peer node (since its link opened).", "peer",
                    ((peer, out) for peer, (out, _in) in traffic))
    yield _labelled("counter", "hive_cluster_peer_received_bytes",
                    "Bytes received from each peer node (since its link opened).", "peer",
                    ((peer, into) for peer, (_out, into) in traffic))
    yield _labelled("gauge", "hive_cluster_replication_lag_ops",
                    "Replication operations a backup node has not acknowledged yet.", "backup",
                    ((b, c.replication_lag.get(b, 0)) for b in c.backups))
    yield _latency("hive_cluster_message_delivery_seconds",
                   "Time from a PUBLISH routed on the node of its publisher (origin) to its "
                   "delivery to subscribers' connections on this node; wall clocks, so across "
                   "hosts as good as their agreement (NTP).", "origin", c.delivery_latency)
    yield _latency("hive_cluster_forward_ack_seconds",
                   "Round trip of a message forwarded to a peer node until its FORWARD_ACK "
                   "(delivered and durable there); one message in flight per peer is timed.",
                   "peer", c.forward_ack_latency)
    yield _latency("hive_cluster_replication_ack_seconds",
                   "Round trip of replication operations shipped to a backup node until its "
                   "REPL_ACK (durable there); one shipment in flight per backup is timed.",
                   "backup", c.replication_ack_latency)


def _latency(name: str, documentation: str, label: str,
             by_node: dict[str, LatencySnapshot]) -> Metric:
    family = HistogramMetricFamily(name, documentation, labels=[label])
    for node, latency in by_node.items():
        family.add_metric([node], [(floatToGoString(bound), count)
                                   for bound, count in latency.cumulative()], latency.sum)
    return family


def _extensions(node: NodeStatus) -> Iterator[Metric]:
    yield _labelled("counter", "hive_extension_hook_failures",
                    "Hook calls of an extension that raised or passed the deadline.",
                    "extension", sorted(node.extension_failures().items()))
    yield _hook_seconds(node)
    counters = node.extension_counter_names()
    descriptions = node.extension_metric_descriptions()
    for name, value in sorted(node.extension_metrics().items()):
        described = descriptions.get(name, "").strip().rstrip(".")
        yield _family("counter" if name in counters else "gauge",
                      f"hive_extension_{_name(name)}",
                      f"{described[:1].upper()}{described[1:]} (extension metric {name})."
                      if described else f"The extension metric {name}.", value=value)


def _hook_seconds(node: NodeStatus) -> Metric:
    """A histogram, not a summary: buckets add up across nodes and extensions (a summary's
    quantiles do not), and a slow authenticator shows in the tail, not in the mean."""
    family = HistogramMetricFamily(
        "hive_extension_hook_seconds",
        "Time in extension hook calls, by hook and extension. Publish interceptors and "
        "authorizers are timed on one call in 64: their sum and buckets are scaled to every "
        "call; _count is exact.", labels=["hook", "extension"])
    for times in node.extension_hook_times():
        family.add_metric([times.hook, times.extension],
                          [(floatToGoString(bound), count) for bound, count in times.cumulative()],
                          times.seconds())
    return family


def exposition(node: NodeStatus) -> bytes:
    """One scrape: every metric of the node, in the text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node))
    return generate_latest(registry)
