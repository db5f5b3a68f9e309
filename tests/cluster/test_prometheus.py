"""Prometheus scrapes and health probes of a real 3-node cluster under load.

Each node's REST listener exposes ``/api/v1/metrics/prometheus`` (and ``/metrics``) in the text
format, parsed here with the official client's parser; liveness and readiness answer apart,
and readiness is 503 until the node has joined and synced.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import free_port
from prometheus_client.parser import text_string_to_metric_families

from cluster._nodes import cluster_body, get, start_cluster, wait_for_members, wait_for_route

pytestmark = pytest.mark.timeout(120)


def scrape(node: Any, path: str = "/api/v1/metrics/prometheus") -> dict[str, Any]:
    """Every sample of one scrape: {(name, (label, value) pairs): value}, and the types."""
    url = f"http://127.0.0.1:{node.ports['rest']}{path}"
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples: dict[Any, float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return {"samples": samples, "types": types}


def value(scraped: dict[str, Any], name: str, **labels: str) -> float:
    return scraped["samples"][(name, tuple(sorted(labels.items())))]


def probe(node: Any, which: str) -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{node.ports['rest']}/api/v1/health/{which}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def client(port: int, client_id: str, clean: bool = True) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                    protocol=mqtt.MQTTv311, clean_session=clean)
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def test_a_scrape_of_a_cluster_under_load_shows_every_metric(hive_factory: Any) -> None:
    nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    received: list[int] = []
    subscriber = client(nodes[1].port, "prom-sub")
    subscriber.on_message = lambda _c, _u, m: received.append(m.qos)
    subscriber.subscribe([("load/#", 1)])
    offline = client(nodes[1].port, "prom-offline", clean=False)  # a queue on node 1
    offline.subscribe("load/#", qos=1)
    time.sleep(0.3)
    offline.disconnect()
    offline.loop_stop()
    wait_for_route(nodes[0], nodes[1], "load/#")
    publisher = client(nodes[0].port, "prom-pub")
    stop = threading.Event()

    def load() -> None:
        n = 0
        while not stop.is_set() and n < 3000:
            publisher.publish(f"load/{n % 7}", b"x" * 20, qos=n % 2)
            n += 1
            if n % 100 == 0:
                time.sleep(0.01)

    thread = threading.Thread(target=load)
    thread.start()
    try:
        time.sleep(1.0)
        during = [scrape(n) for n in nodes]  # while messages flow
        thread.join(30)
        deadline = time.monotonic() + 20
        while len(received) < 3000 and time.monotonic() < deadline:
            time.sleep(0.1)
        after = [scrape(n) for n in nodes]
        alias = scrape(nodes[0], "/metrics")
    finally:
        stop.set()
        thread.join(10)
        for c in (publisher, subscriber):
            c.disconnect()
            c.loop_stop()
    assert len(received) == 3000
    publishing, subscribing = after[0], after[1]
    # messages in, by QoS, on the publisher's node; out, by QoS, on the subscriber's
    assert value(publishing, "hive_messages_received_total", qos="0") == 1500
    assert value(publishing, "hive_messages_received_total", qos="1") == 1500
    assert value(subscribing, "hive_messages_sent_total", qos="0") == 1500
    assert value(subscribing, "hive_messages_sent_total", qos="1") == 1500
    # the offline session queues its 1,500 QoS 1 messages up to the default max-queue-size
    # (1,000) and drops the rest (QoS 0 is not queued for an offline client)
    assert value(subscribing, "hive_queued_messages") == 1000
    assert value(subscribing, "hive_messages_dropped_total", reason="queue-full") == 500
    assert value(subscribing, "hive_subscriptions") == 2
    assert value(subscribing, "hive_sessions") == 2
    assert value(subscribing, "hive_connections") == 1
    assert value(publishing, "hive_connections_accepted_total") >= 1
    for reason in ("queue-full", "expired", "too-large", "extension"):
        assert value(publishing, "hive_messages_dropped_total", reason=reason) == 0
    for reason in ("expired", "too-large", "extension"):
        assert value(subscribing, "hive_messages_dropped_total", reason=reason) == 0
    # the cluster: members, per-peer traffic, forwards
    ids = [get(n, "/api/v1/health")["node_id"] for n in nodes]
    for scraped, node_id in zip(after, ids, strict=True):
        assert value(scraped, "hive_cluster_members") == 3
        others = set(ids) - {node_id}
        for peer in others:
            assert value(scraped, "hive_cluster_peer_sent_bytes_total", peer=peer) > 0
            assert value(scraped, "hive_cluster_peer_received_bytes_total", peer=peer) > 0
        assert value(scraped, "hive_cluster_replica_count") == 2
        assert value(scraped, "hive_node_info", node_id=node_id,
                     version=scraped_version(scraped)) == 1
    assert value(publishing, "hive_cluster_publishes_forwarded_total") >= 3000
    assert value(subscribing, "hive_cluster_publishes_received_total") >= 3000
    assert value(publishing, "hive_cluster_forwards_unacknowledged") == 0
    # counters only grow from one scrape to the next
    name = ("hive_messages_received_total", (("qos", "1"),))
    assert 0 < during[0]["samples"][name] <= publishing["samples"][name]
    assert publishing["types"]["hive_messages_received"] == "counter"
    assert publishing["types"]["hive_connections"] == "gauge"
    assert value(alias, "hive_cluster_members") == 3


def scraped_version(scraped: dict[str, Any]) -> str:
    (labels,) = [dict(k[1]) for k in scraped["samples"] if k[0] == "hive_node_info"]
    return labels["version"]


def test_readiness_waits_for_the_join_and_liveness_does_not(hive_factory: Any) -> None:
    """A node whose static peer is frozen (SIGSTOP: its kernel accepts the connection, nobody
    answers the handshake) serves REST from the start: alive at once, 503 "joining the
    cluster" until its join gives up waiting, then ready."""
    ports = [free_port(), free_port()]
    rests = [free_port(), free_port()]
    frozen = hive_factory(body=cluster_body(ports[0], ports, rests[0]), cluster=ports[0],
                          rest=rests[0])
    joining = hive_factory(body=cluster_body(ports[1], ports, rests[1]), cluster=ports[1],
                           rest=rests[1], start=False)
    answers: list[tuple[str, int, bytes]] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            for which in ("liveness", "readiness"):
                try:
                    status, body = probe(joining, which)
                except OSError:
                    continue  # not listening yet
                answers.append((which, status, body))
            time.sleep(0.01)

    os.kill(frozen.pid, signal.SIGSTOP)
    poller = threading.Thread(target=poll)
    poller.start()
    try:
        joining.start()
        time.sleep(0.2)
    finally:
        done.set()
        poller.join(10)
        os.kill(frozen.pid, signal.SIGCONT)
    readiness = [(status, body) for which, status, body in answers if which == "readiness"]
    assert (503, True) in {(s, b"joining the cluster" in b) for s, b in readiness}, readiness
    assert readiness[-1][0] == 200
    assert {status for which, status, _ in answers if which == "liveness"} == {200}
    with urllib.request.urlopen(f"http://127.0.0.1:{joining.ports['rest']}/api/v1/health",
                                timeout=5) as response:
        assert response.status == 200


# ---------------------------------------------------------------------------- hook time

TIMED_EXTENSION = '''
import asyncio
import time

from hive_ext_api import hookimpl


@hookimpl
def hive_intercept_publish_inbound(client, publish):
    end = time.perf_counter() + 0.00005  # at least 50 us a call
    while time.perf_counter() < end:
        pass


@hookimpl
def hive_intercept_publish_outbound(client, publish):
    return None


@hookimpl
async def hive_authorize_subscribe(client, topic_filter, qos):
    await asyncio.sleep(0.05)
    return True
'''


def rest_body(rest_port: int) -> str:
    return ("<rest-api><enabled>true</enabled><listeners><http>"
            f"<port>{rest_port}</port><bind-address>127.0.0.1</bind-address>"
            "</http></listeners></rest-api>")


def hook_histogram(scraped: dict[str, Any], hook: str) -> dict[str, Any]:
    """One hook's histogram: count, sum and the buckets by ``le``."""
    labels = (("extension", "timed"), ("hook", hook))
    samples = scraped["samples"]
    buckets = {dict(k[1])["le"]: v for k, v in samples.items()
               if k[0] == "hive_extension_hook_seconds_bucket"
               and tuple(p for p in k[1] if p[0] != "le") == labels}
    return {"count": samples[("hive_extension_hook_seconds_count", labels)],
            "sum": samples[("hive_extension_hook_seconds_sum", labels)], "buckets": buckets}


def test_time_in_extension_hooks_is_a_histogram_by_hook(hive_factory: Any) -> None:
    """A real node with an extension timing three hooks: the per-message interceptors count
    every call (their time is sampled and scaled), the async authorizer is timed while awaited,
    and hooks nobody implements are not shown."""
    rest = free_port()
    node = hive_factory(body=rest_body(rest), rest=rest, start=False)
    (node.folder / "timed.py").write_text(TIMED_EXTENSION)
    node.args = ["--extension", "./timed.py"]
    node.start()
    before = scrape(node)
    assert before["types"]["hive_extension_hook_seconds"] == "histogram"
    assert not [k for k in before["samples"] if k[0].startswith("hive_extension_hook_seconds")
                and ("extension", "timed") in k[1]]
    received: list[bytes] = []
    subscriber = client(node.port, "hook-sub")
    subscriber.on_message = lambda _c, _u, m: received.append(m.payload)
    subscriber.subscribe("hooks/#", qos=1)
    publisher = client(node.port, "hook-pub")
    count = 500
    try:
        time.sleep(0.3)
        for n in range(count):
            publisher.publish("hooks/t", str(n).encode(), qos=n % 2)
        deadline = time.monotonic() + 20
        while len(received) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        after = scrape(node)
    finally:
        for c in (publisher, subscriber):
            c.disconnect()
            c.loop_stop()
    assert len(received) == count
    inbound = hook_histogram(after, "hive_intercept_publish_inbound")
    assert inbound["count"] == count
    assert inbound["sum"] >= count * 0.00005  # every timed call took 50 us or more
    assert inbound["buckets"]["+Inf"] == count
    assert inbound["buckets"]["2.5e-05"] == 0  # none faster than 25 us
    outbound = hook_histogram(after, "hive_intercept_publish_outbound")
    assert outbound["count"] == count
    assert outbound["sum"] > 0
    authorize = hook_histogram(after, "hive_authorize_subscribe")
    assert authorize["count"] == 1
    # The await is timed, not only the coroutine's creation (asyncio may wake a sleep up to its
    # clock's resolution early, hence the margin below the 50 ms slept).
    assert 0.04 <= authorize["sum"] < 5
    assert authorize["buckets"]["0.01"] == 0 and authorize["buckets"]["+Inf"] == 1
    for histogram in (inbound, outbound, authorize):
        values = list(histogram["buckets"].values())  # in the exposition's order: by le
        assert values == sorted(values)
    hooks = {dict(k[1])["hook"] for k in after["samples"]
             if k[0] == "hive_extension_hook_seconds_count" and ("extension", "timed") in k[1]}
    assert hooks == {"hive_intercept_publish_inbound", "hive_intercept_publish_outbound",
                     "hive_authorize_subscribe"}


COUNTING_EXTENSION = '''
from hive_ext_api import hookimpl


@hookimpl
def hive_extension_start(context):
    metrics = context.services.metrics
    metrics.counter("counting.widgets", "widgets made since the node started").inc(3)
    metrics.counter("counting.plain").inc()
    metrics.gauge("counting.queue-bytes", lambda: 42.0, "bytes waiting in the queue")
'''


def test_extension_metrics_carry_their_own_help_text(hive_factory: Any) -> None:
    """Each extension metric's HELP is what the extension said it is; a counter is a counter
    (``_total``), a gauge a gauge."""
    rest = free_port()
    node = hive_factory(body=rest_body(rest), rest=rest, start=False)
    (node.folder / "counting.py").write_text(COUNTING_EXTENSION)
    node.args = ["--extension", "./counting.py"]
    node.start()
    url = f"http://127.0.0.1:{node.ports['rest']}/api/v1/metrics/prometheus"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    widgets = families["hive_extension_counting_widgets"]
    assert (widgets.type, widgets.documentation) == (
        "counter", "Widgets made since the node started (extension metric counting.widgets).")
    assert [(s.name, s.value) for s in widgets.samples] == [
        ("hive_extension_counting_widgets_total", 3.0)]
    assert families["hive_extension_counting_plain"].documentation == \
        "The extension metric counting.plain."
    queue = families["hive_extension_counting_queue_bytes"]
    assert (queue.type, queue.documentation) == (
        "gauge", "Bytes waiting in the queue (extension metric counting.queue-bytes).")
    assert [(s.name, s.value) for s in queue.samples] == [
        ("hive_extension_counting_queue_bytes", 42.0)]


def test_qos1_deliveries_acknowledged_within_the_hold_are_not_replicated(
        hive_factory: Any) -> None:
    """Two nodes, replica-count 2: a persistent subscriber that keeps up gets every QoS 1
    message, each publisher's PUBACK came, and the subscriber's node sent its backup nothing
    of most deliveries (``<delivery-hold>``, cluster/_replication_hold.py)."""
    nodes = start_cluster(hive_factory, 2)
    wait_for_members(nodes, 2)
    received: list[bytes] = []
    subscriber = client(nodes[1].port, "hold-sub", clean=False)
    subscriber.on_message = lambda _c, _u, m: received.append(m.payload)
    subscriber.subscribe("held/#", qos=1)
    wait_for_route(nodes[0], nodes[1], "held/#")
    publisher = client(nodes[0].port, "hold-pub")
    acknowledged: list[int] = []
    publisher.on_publish = lambda _c, _u, mid, _rc, _p: acknowledged.append(mid)
    count = 2000
    try:
        for n in range(count):
            publisher.publish("held/x", b"%d" % n, qos=1)
        deadline = time.monotonic() + 60
        while (len(received) < count or len(acknowledged) < count) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        scraped = scrape(nodes[1])
    finally:
        for c in (publisher, subscriber):
            c.disconnect()
            c.loop_stop()
    assert sorted(set(received), key=int) == [b"%d" % n for n in range(count)]
    assert len(acknowledged) == count
    spared = value(scraped, "hive_cluster_replication_deliveries_spared_total")
    late = value(scraped, "hive_cluster_replication_deliveries_late_total")
    assert spared > 0
    assert spared + late <= count
