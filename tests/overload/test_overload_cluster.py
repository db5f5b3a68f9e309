"""<overload-protection> across a 2-node cluster of real `hive run` processes.

40 publishers flood node A; the one subscriber is on node B, so everything crosses the node
link. B's subscriber falls behind, B announces its pressure (OVERLOAD frame), and A holds its
own heaviest publishers back instead of forwarding more: nothing acknowledged is lost, neither
node misses a heartbeat (half a second apart, two seconds to declare a node dead), the probes
on both nodes are answered and memory stays bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cluster._nodes import cluster_body, cluster_nodes, metrics, wait_for_members
from conftest import HiveProcess, free_port
from overload._load import flood_and_count

pytestmark = pytest.mark.timeout(150)

PUBLISHERS = 40
SECONDS = 12.0
QUEUE = 100_000  # see test_overload_node.QUEUE


def _extra(enabled: bool) -> str:
    return (f"<mqtt><queued-messages><max-queue-size>{QUEUE}</max-queue-size>"
            "</queued-messages></mqtt>"
            f"<overload-protection><enabled>{str(enabled).lower()}</enabled>"
            "</overload-protection>")


def flood_a_cluster(hive_factory: Any, tmp_path: Path, enabled: bool,
                    seconds: float = SECONDS, settle: float = 30.0,
                    ) -> tuple[dict[str, Any], list[HiveProcess]]:
    ports = [free_port() for _ in range(6)]
    cluster_ports, mqtt_ports, rest_ports = ports[:2], ports[2:4], ports[4:]
    a, b = (hive_factory(body=cluster_body(cluster, cluster_ports, rest, extra=_extra(enabled)),
                         port=mqtt, cluster=cluster, rest=rest)
            for cluster, mqtt, rest in zip(cluster_ports, mqtt_ports, rest_ports, strict=True))
    wait_for_members([a, b], 2, timeout=30)
    figures = flood_and_count([("127.0.0.1", a.port)], ("127.0.0.1", b.port),
                              [("127.0.0.1", a.port), ("127.0.0.1", b.port)],
                              [a.pid, b.pid], tmp_path, PUBLISHERS, seconds, settle)
    both = [metrics(node) for node in (a, b)]
    figures["dropped"] = [m["broker"]["messages_dropped"] for m in both]
    figures["forwards_dropped"] = both[0]["cluster"]["forwards_dropped"]
    figures["overload"] = [m.get("overload_protection") for m in both]
    figures["members"] = [len(cluster_nodes(node)) for node in (a, b)]
    print(figures)
    return figures, [a, b]


def test_a_node_under_pressure_slows_what_its_peer_forwards(hive_factory: Any,
                                                            tmp_path: Path) -> None:
    figures, (a, b) = flood_a_cluster(hive_factory, tmp_path, enabled=True)
    assert "Overload protection engaged: level" in b.log  # its subscriber fell behind
    assert "Overload protection engaged: level" in a.log
    # B's subscriber fell behind, and A heard it from B (the peers' source) and held its
    # publishers (B's link to A is never held: its heartbeats travel on it).
    a_pressure, b_pressure = (o["pressured"] for o in figures["overload"])
    assert b_pressure["queue-fill"] > 0 and a_pressure["peers"] > 0, figures
    assert figures["overload"][0]["holds"] > 0, figures
    assert figures["acked"] > 10_000, figures
    assert figures["lost"] == 0, figures
    assert figures["dropped"] == [0, 0] and figures["forwards_dropped"] == 0, figures
    for node in (a, b):
        assert "no heartbeat for" not in node.log and "left the cluster" not in node.log, \
            node.log
    assert figures["members"] == [2, 2], figures
    assert figures["connect_p50"] < 0.5 and figures["ping_p50"] < 0.5, figures
    assert figures["connect_max"] < 5 and figures["ping_max"] < 5, figures
    assert max(figures["rss_growth_mib"]) < 200, figures
