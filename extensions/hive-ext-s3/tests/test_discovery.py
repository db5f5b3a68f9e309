"""The discovery hooks against a real S3 API server (moto): records, expiry, failures."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from hive_ext_api import ClusterNodeAddress, parse_properties
from hive_ext_api.testing import A, DiscoveryHooksContract

from hive_ext_s3 import KEYS, NodeRecord, S3Discovery, settings_from
from hive_ext_s3._bucket import NodeBucket, s3_client
from hive_ext_s3._record import now_ms
from s3_server import S3Server

# one event loop for a whole test (the record refresher lives in it), and a test's deadline
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PREFIX = "test/nodes/"


def discovery(endpoint_server: S3Server, bucket: str, metrics: Any = None,
              **overrides: str | None) -> S3Discovery:
    """Started by hand, without a node; ``metrics``: hive-broker's ``hive_metrics``, or none."""
    overrides.setdefault("file_prefix", PREFIX)
    source = "s3discovery.properties"
    settings = settings_from(parse_properties(endpoint_server.properties(bucket, **overrides),
                                              source, KEYS), source)
    plugin = S3Discovery()
    plugin.log = logging.getLogger(f"test.s3-discovery.{id(plugin)}")
    plugin.start(settings, NodeBucket(s3_client(settings), bucket, settings.file_prefix),
                 metrics)
    return plugin


def put(s3: S3Server, bucket: str, key: str, body: bytes) -> None:
    client: Any = s3.client()
    client.put_object(Bucket=bucket, Key=key, Body=body)


class TestHooks(DiscoveryHooksContract):
    """What every discovery extension's hooks do, against a real S3 API."""

    MALFORMED_COUNTER, NOT_A_NODE = "s3-discovery.records.malformed", "not a node record"

    @pytest.fixture
    def start_discovery(self, s3: S3Server, bucket: str) -> Callable[..., S3Discovery]:
        return lambda metrics=None: discovery(s3, bucket, metrics)

    @pytest.fixture
    def foreign_entries(self, s3: S3Server, bucket: str) -> dict[str, str]:
        put(s3, bucket, f"{PREFIX}notes.txt", b"hello")
        put(s3, bucket, f"{PREFIX}node-future", json.dumps(
            {"version": 2, "node_id": "node-future"}).encode())
        return {f"{PREFIX}notes.txt": f"skipping {PREFIX}notes.txt: not a node record (not JSON",
                f"{PREFIX}node-future": f"skipping {PREFIX}node-future: not a node record "
                                        "(format version 2"}

    @pytest.fixture
    def entry_names(self, s3: S3Server, bucket: str) -> Callable[[], set[str]]:
        return lambda: set(s3.keys(bucket, PREFIX))


async def test_init_writes_a_versioned_record_and_destroy_deletes_it(s3: S3Server,
                                                                     bucket: str) -> None:
    node = discovery(s3, bucket)
    before = now_ms()
    await node.hive_discovery_init(A, "node-a")
    document = s3.records(bucket, PREFIX)[f"{PREFIX}node-a"]
    assert document["version"] == 1
    assert (document["node_id"], document["host"], document["port"]) == (
        "node-a", "127.0.0.1", 17801)
    assert before <= document["created_ms"] == document["updated_ms"] <= now_ms()
    assert await node.hive_discovery_reload() == [A]
    await node.hive_discovery_destroy()
    assert s3.records(bucket, PREFIX) == {}
    await node.hive_extension_stop()


async def test_the_own_record_is_rewritten_every_update_interval(s3: S3Server, bucket: str) -> None:
    node = discovery(s3, bucket, file_expiration="3", update_interval="0.3")
    await node.hive_discovery_init(A, "node-a")
    first = s3.records(bucket, PREFIX)[f"{PREFIX}node-a"]
    await asyncio.sleep(1.0)
    later = s3.records(bucket, PREFIX)[f"{PREFIX}node-a"]
    assert later["created_ms"] == first["created_ms"]
    assert later["updated_ms"] >= first["updated_ms"] + 600  # two rewrites at least
    await node.hive_discovery_destroy()
    await asyncio.sleep(0.5)  # the refresher stopped: nothing writes the record again
    assert s3.records(bucket, PREFIX) == {}
    await node.hive_extension_stop()


async def test_expired_records_are_deleted_counted_and_logged(
        s3: S3Server, bucket: str, caplog: pytest.LogCaptureFixture,
        hive_metrics: Any) -> None:
    node = discovery(s3, bucket, hive_metrics, file_expiration="60", update_interval="30")
    dead = NodeRecord("node-dead", "127.0.0.1", 17809, now_ms() - 90_000,
                      now_ms() - 61_000)
    alive = NodeRecord("node-alive", "127.0.0.1", 17808, now_ms() - 90_000,
                       now_ms() - 30_000)
    put(s3, bucket, f"{PREFIX}node-dead", dead.encode())
    put(s3, bucket, f"{PREFIX}node-alive", alive.encode())
    await node.hive_discovery_init(A, "node-a")
    with caplog.at_level(logging.INFO):
        assert sorted(await node.hive_discovery_reload() or [], key=str) == [
            A, ClusterNodeAddress("127.0.0.1", 17808)]
    assert sorted(s3.records(bucket, PREFIX)) == [f"{PREFIX}node-a", f"{PREFIX}node-alive"]
    assert hive_metrics["s3-discovery.records.expired"] == 1
    assert hive_metrics["s3-discovery.queries"] == 1
    assert hive_metrics["s3-discovery.resolved-addresses"] == 2
    assert re.search(r"node node-dead \(127.0.0.1:17809\) has not updated its record for "
                     r"6\d s: expired, deleted", caplog.text)
    await node.hive_extension_stop()


async def test_a_missing_own_record_is_written_again_at_the_next_reload(
        s3: S3Server, bucket: str) -> None:
    node = discovery(s3, bucket)
    await node.hive_discovery_init(A, "node-a")
    client: Any = s3.client()
    client.delete_object(Bucket=bucket, Key=f"{PREFIX}node-a")
    assert await node.hive_discovery_reload() == [A]
    assert list(s3.records(bucket, PREFIX)) == [f"{PREFIX}node-a"]
    await node.hive_extension_stop()


async def test_a_missing_bucket_is_named_and_counted(
        s3: S3Server, caplog: pytest.LogCaptureFixture, hive_metrics: Any) -> None:
    node = discovery(s3, "no-such-bucket", hive_metrics)
    with caplog.at_level(logging.WARNING):
        await node.hive_discovery_init(A, "node-a")
        assert await node.hive_discovery_reload() is None
    assert hive_metrics["s3-discovery.errors"] == 2
    assert "cannot register this node in the bucket: bucket 'no-such-bucket' does not " \
           "exist" in caplog.text
    await node.hive_extension_stop()


async def test_an_unreachable_endpoint_is_no_news_counted_logged_once_and_retried(
        s3: S3Server, bucket: str, caplog: pytest.LogCaptureFixture,
        hive_metrics: Any) -> None:
    down = S3Server.never_started()

    node = discovery(down, bucket, hive_metrics)
    with caplog.at_level(logging.INFO):
        await node.hive_discovery_init(A, "node-a")
        for _ in range(3):
            assert await node.hive_discovery_reload() is None
        assert hive_metrics["s3-discovery.errors"] == 4
        assert caplog.text.count("s3-discovery: cannot") == 1  # one warning per outage
        assert "cannot register this node in the bucket: cannot reach S3" in caplog.text
        assert "Traceback" not in caplog.text
        down.start()  # the same buckets: moto keeps them in this process
        try:
            assert await node.hive_discovery_reload() == [A]
        finally:
            down.stop()
    assert "answering again after" in caplog.text and "4 failed calls" in caplog.text
    assert list(s3.records(bucket, PREFIX)) == [f"{PREFIX}node-a"]
    await node.hive_extension_stop()


async def test_an_endpoint_answering_garbage_is_no_news_and_counted(
        hive_impostor_url: str, caplog: pytest.LogCaptureFixture, hive_metrics: Any) -> None:
    impostor = S3Server()  # never started: its endpoint is the impostor's
    impostor.port = int(hive_impostor_url.rsplit(":", 1)[1])

    node = discovery(impostor, "hive-cluster", hive_metrics)
    await node.hive_discovery_init(A, "node-a")
    with caplog.at_level(logging.WARNING):
        assert await node.hive_discovery_reload() is None
    assert hive_metrics["s3-discovery.errors"] == 1  # the PUT "succeeded" (a 200)
    assert "cannot read the node records" in caplog.text
    await node.hive_extension_stop()


async def test_an_endpoint_that_never_answers_is_given_up_within_the_hook_deadline(
        bucket: str, caplog: pytest.LogCaptureFixture, hive_metrics: Any,
        hive_silent_port: int) -> None:
    endpoint = S3Server()  # never started: its endpoint is the silent port
    endpoint.port = hive_silent_port

    node = discovery(endpoint, bucket, hive_metrics)
    node.own = NodeRecord.new("node-a", A.host, A.port)
    begun = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert await node.hive_discovery_reload() is None
    assert time.monotonic() - begun < 4.6  # the node waits 5 s for a hook at most
    assert hive_metrics["s3-discovery.errors"] == 1
    assert "cannot read the node records" in caplog.text
    await node.hive_extension_stop()
