"""The discovery hooks against a real S3 API server (moto): records, expiry, failures."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hive_ext_api import ClusterNodeAddress

from hive_ext_s3 import NodeRecord, S3Discovery, parse_properties, settings_from
from hive_ext_s3._bucket import NodeBucket, s3_client
from hive_ext_s3._record import now_ms
from s3_server import S3Server

PREFIX = "test/nodes/"
A = ClusterNodeAddress("127.0.0.1", 17801)
B = ClusterNodeAddress("127.0.0.1", 17802)


@dataclass
class Count:
    value: int = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


@dataclass
class Metrics:
    """The node's metrics registry, as far as the extension uses it."""

    counters: dict[str, Count] = field(default_factory=dict)
    gauges: dict[str, Callable[[], float]] = field(default_factory=dict)

    def counter(self, name: str, description: str = "") -> Count:
        return self.counters.setdefault(name, Count())

    def gauge(self, name: str, read: Callable[[], float], description: str = "") -> None:
        self.gauges[name] = read

    def __getitem__(self, name: str) -> int:
        return self.counters[name].value


def discovery(endpoint_server: S3Server, bucket: str, metrics: Metrics | None = None,
              **overrides: str | None) -> S3Discovery:
    overrides.setdefault("file_prefix", PREFIX)
    source = "s3discovery.properties"
    settings = settings_from(parse_properties(endpoint_server.properties(bucket, **overrides),
                                              source), source)
    plugin = S3Discovery()
    plugin.log = logging.getLogger(f"test.s3-discovery.{id(plugin)}")
    plugin.start(settings, NodeBucket(s3_client(settings), bucket, settings.file_prefix),
                 metrics if metrics is not None else Metrics())
    return plugin


def run(scenario: Coroutine[Any, Any, None]) -> None:
    """One event loop for a whole scenario: the record refresher lives in it."""
    asyncio.run(asyncio.wait_for(scenario, 60))


def objects(s3: S3Server, bucket: str) -> dict[str, dict[str, Any]]:
    client: Any = s3.client()
    listing = client.list_objects_v2(Bucket=bucket, Prefix=PREFIX).get("Contents", [])
    return {item["Key"]: json.loads(client.get_object(Bucket=bucket, Key=item["Key"])["Body"]
                                    .read()) for item in listing}


def put(s3: S3Server, bucket: str, key: str, body: bytes) -> None:
    client: Any = s3.client()
    client.put_object(Bucket=bucket, Key=key, Body=body)


def test_init_writes_a_versioned_record_and_destroy_deletes_it(s3: S3Server,
                                                               bucket: str) -> None:
    async def scenario() -> None:
        node = discovery(s3, bucket)
        before = now_ms()
        await node.hive_discovery_init(A, "node-a")
        document = objects(s3, bucket)[f"{PREFIX}node-a"]
        assert document["version"] == 1
        assert (document["node_id"], document["host"], document["port"]) == (
            "node-a", "127.0.0.1", 17801)
        assert before <= document["created_ms"] == document["updated_ms"] <= now_ms()
        assert await node.hive_discovery_reload() == [A]
        await node.hive_discovery_destroy()
        assert objects(s3, bucket) == {}
        await node.hive_extension_stop()

    run(scenario())


def test_reload_answers_every_live_node(s3: S3Server, bucket: str) -> None:
    async def scenario() -> None:
        a, b = discovery(s3, bucket), discovery(s3, bucket)
        await a.hive_discovery_init(A, "node-a")
        await b.hive_discovery_init(B, "node-b")
        assert sorted(await a.hive_discovery_reload() or [], key=str) == [A, B]
        assert sorted(await b.hive_discovery_reload() or [], key=str) == [A, B]
        await b.hive_discovery_destroy()
        assert await a.hive_discovery_reload() == [A]
        for node in (a, b):
            await node.hive_extension_stop()

    run(scenario())


def test_the_own_record_is_rewritten_every_update_interval(s3: S3Server, bucket: str) -> None:
    async def scenario() -> None:
        node = discovery(s3, bucket, file_expiration="3", update_interval="0.3")
        await node.hive_discovery_init(A, "node-a")
        first = objects(s3, bucket)[f"{PREFIX}node-a"]
        await asyncio.sleep(1.0)
        later = objects(s3, bucket)[f"{PREFIX}node-a"]
        assert later["created_ms"] == first["created_ms"]
        assert later["updated_ms"] >= first["updated_ms"] + 600  # two rewrites at least
        await node.hive_discovery_destroy()
        await asyncio.sleep(0.5)  # the refresher stopped: nothing writes the record again
        assert objects(s3, bucket) == {}
        await node.hive_extension_stop()

    run(scenario())


def test_expired_records_are_deleted_counted_and_logged(
        s3: S3Server, bucket: str, caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()

    async def scenario() -> None:
        node = discovery(s3, bucket, metrics, file_expiration="60", update_interval="30")
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
        assert sorted(objects(s3, bucket)) == [f"{PREFIX}node-a", f"{PREFIX}node-alive"]
        assert metrics["s3-discovery.records.expired"] == 1
        assert metrics["s3-discovery.queries"] == 1
        assert metrics.gauges["s3-discovery.resolved-addresses"]() == 2
        assert re.search(r"node node-dead \(127.0.0.1:17809\) has not updated its record for "
                         r"6\d s: expired, deleted", caplog.text)
        await node.hive_extension_stop()

    run(scenario())


def test_a_missing_own_record_is_written_again_at_the_next_reload(s3: S3Server,
                                                                  bucket: str) -> None:
    async def scenario() -> None:
        node = discovery(s3, bucket)
        await node.hive_discovery_init(A, "node-a")
        client: Any = s3.client()
        client.delete_object(Bucket=bucket, Key=f"{PREFIX}node-a")
        assert await node.hive_discovery_reload() == [A]
        assert list(objects(s3, bucket)) == [f"{PREFIX}node-a"]
        await node.hive_extension_stop()

    run(scenario())


def test_objects_that_are_not_records_are_skipped_counted_and_logged_once(
        s3: S3Server, bucket: str, caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()

    async def scenario() -> None:
        node = discovery(s3, bucket, metrics)
        put(s3, bucket, f"{PREFIX}notes.txt", b"hello")
        put(s3, bucket, f"{PREFIX}node-future", json.dumps(
            {"version": 2, "node_id": "node-future"}).encode())
        await node.hive_discovery_init(A, "node-a")
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                assert await node.hive_discovery_reload() == [A]
        assert metrics["s3-discovery.records.malformed"] == 2
        assert caplog.text.count("not a node record") == 2
        assert f"skipping {PREFIX}node-future: not a node record (format version 2" \
            in caplog.text
        assert f"{PREFIX}notes.txt" in objects_keys(s3, bucket)  # never deleted
        await node.hive_extension_stop()

    run(scenario())


def objects_keys(s3: S3Server, bucket: str) -> list[str]:
    client: Any = s3.client()
    return [item["Key"] for item in
            client.list_objects_v2(Bucket=bucket, Prefix=PREFIX).get("Contents", [])]


def test_a_missing_bucket_is_named_and_counted(s3: S3Server,
                                               caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()

    async def scenario() -> None:
        node = discovery(s3, "no-such-bucket", metrics)
        with caplog.at_level(logging.WARNING):
            await node.hive_discovery_init(A, "node-a")
            assert await node.hive_discovery_reload() is None
        assert metrics["s3-discovery.errors"] == 2
        assert "cannot register this node in the bucket: bucket 'no-such-bucket' does not " \
               "exist" in caplog.text
        await node.hive_extension_stop()

    run(scenario())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_endpoint_is_no_news_counted_logged_once_and_retried(
        s3: S3Server, bucket: str, caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    down = S3Server()
    down.port = _free_port()  # nothing listens there yet

    async def scenario() -> None:
        node = discovery(down, bucket, metrics)
        with caplog.at_level(logging.INFO):
            await node.hive_discovery_init(A, "node-a")
            for _ in range(3):
                assert await node.hive_discovery_reload() is None
            assert metrics["s3-discovery.errors"] == 4
            assert caplog.text.count("s3-discovery: cannot") == 1  # one warning per outage
            assert "cannot register this node in the bucket: cannot reach S3" in caplog.text
            assert "Traceback" not in caplog.text
            down.start()  # the same buckets: moto keeps them in this process
            try:
                assert await node.hive_discovery_reload() == [A]
            finally:
                down.stop()
        assert "answering again after" in caplog.text and "4 failed calls" in caplog.text
        assert list(objects(s3, bucket)) == [f"{PREFIX}node-a"]
        await node.hive_extension_stop()

    run(scenario())


class _Garbage(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        body = b"<html><body>It works!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def garbage_server() -> Iterator[S3Server]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = S3Server()
    endpoint.port = server.server_address[1]
    yield endpoint
    server.shutdown()
    server.server_close()


def test_an_endpoint_answering_garbage_is_no_news_and_counted(
        garbage_server: S3Server, caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()

    async def scenario() -> None:
        node = discovery(garbage_server, "hive-cluster", metrics)
        await node.hive_discovery_init(A, "node-a")
        with caplog.at_level(logging.WARNING):
            assert await node.hive_discovery_reload() is None
        assert metrics["s3-discovery.errors"] == 1  # the PUT "succeeded" (a 200)
        assert "cannot read the node records" in caplog.text
        await node.hive_extension_stop()

    run(scenario())


def test_an_endpoint_that_never_answers_is_given_up_within_the_hook_deadline(
        bucket: str, caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections are accepted by the kernel, never answered
    endpoint = S3Server()
    endpoint.port = silent.getsockname()[1]

    async def scenario() -> None:
        node = discovery(endpoint, bucket, metrics)
        node.own = NodeRecord.new("node-a", A.host, A.port)
        begun = time.monotonic()
        with caplog.at_level(logging.WARNING):
            assert await node.hive_discovery_reload() is None
        assert time.monotonic() - begun < 4.6  # the node waits 5 s for a hook at most
        assert metrics["s3-discovery.errors"] == 1
        assert "cannot read the node records" in caplog.text
        await node.hive_extension_stop()

    try:
        run(scenario())
    finally:
        silent.close()
