"""A node ships landed segments to S3 (moto's server); an S3 outage never stops the node."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from _procs import HiveNode, free_port, wait_for
from hive_ext_spark import read_segment

pytestmark = pytest.mark.timeout(120)


def s3_properties(endpoint: str, **extra: str) -> str:
    lines = {"segment-max-age": "200ms", "s3-bucket-name": "events", "s3-prefix": "plant-a",
             "s3-endpoint": endpoint, "s3-path-style-access": "true",
             "s3-retry-interval": "500ms", **extra}
    return "".join(f"{k} = {v}\n" for k, v in lines.items())


def publish(node: HiveNode, topic: str, count: int) -> None:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"pub-{topic}")
    c.connect("127.0.0.1", node.port)
    c.loop_start()
    for n in range(count):
        info = c.publish(topic, str(n), qos=1)
    info.wait_for_publish(10)
    c.disconnect()
    c.loop_stop()


def shipped(s3: Any, node_id: str) -> dict[str, list[int]]:
    """Payloads per topic of every segment in s3://events/plant-a/<node id>/."""
    found: dict[str, list[int]] = {}
    listing = s3.list_objects_v2(Bucket="events", Prefix=f"plant-a/{node_id}/")
    for item in sorted(listing.get("Contents", ()), key=lambda i: i["Key"]):
        body = s3.get_object(Bucket="events", Key=item["Key"])["Body"].read()
        for event in read_segment(body).events:
            found.setdefault(event.topic, []).append(int(event.payload))
    return found


def test_segments_are_shipped_in_order_and_removed_locally(
        hive_run: Callable[..., HiveNode], s3: Any, s3_server: str) -> None:
    node = hive_run(s3_properties(s3_server))
    node.wait_for_log(r"shipped to s3://events/plant-a/")
    publish(node, "a", 200)
    wait_for(lambda: shipped(s3, node.node_id).get("a") == list(range(200)), 15,
             "200 events in S3")
    local = node.events_root / node.node_id
    wait_for(lambda: not list(local.glob("*.events")), 5, "local copies removed")
    node.stop()
    assert (local / "s3-shipped.json").exists()


def test_an_outage_is_logged_and_retried_while_the_node_serves(
        hive_run: Callable[..., HiveNode]) -> None:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="events")
    node = hive_run(s3_properties(endpoint, **{"s3-keep-local": "true"}))
    try:
        publish(node, "before", 10)
        wait_for(lambda: shipped(s3, node.node_id).get("before") == list(range(10)), 15,
                 "the first events in S3")
        server.stop()  # S3 goes away

        began = time.monotonic()
        publish(node, "during", 100)  # acknowledged as usual: the node does not wait for S3
        assert time.monotonic() - began < 5
        node.wait_for_log(r"cannot ship segment \d+ to s3://events/plant-a/.*retrying every "
                          r"0.5 s", timeout=30)
        assert node.log.count("cannot ship segment") <= 3  # rate-limited

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()  # back, empty: the bucket is made again
        s3.create_bucket(Bucket="events")
        wait_for(lambda: shipped(s3, node.node_id).get("during") == list(range(100)), 30,
                 "the events of the outage shipped after it")
        local = node.events_root / node.node_id
        assert list(local.glob("*.events"))  # s3-keep-local = true
    finally:
        node.stop()
        server.stop()
