"""The node record: its format, its expiry, and what is not one."""

from __future__ import annotations

import json

import pytest

from hive_ext_s3 import FORMAT_VERSION, MalformedRecord, NodeRecord, parse_record


def test_a_record_round_trips_and_carries_its_format_version() -> None:
    record = NodeRecord("3f2a9c1b7d4e", "10.0.0.5", 7800, 1_718_000_000_000, 1_718_000_180_000)
    document = json.loads(record.encode())
    assert document == {"version": FORMAT_VERSION, "node_id": "3f2a9c1b7d4e",
                        "host": "10.0.0.5", "port": 7800, "created_ms": 1_718_000_000_000,
                        "updated_ms": 1_718_000_180_000}
    assert parse_record(record.encode()) == record


def test_refreshing_keeps_the_creation_time() -> None:
    record = NodeRecord.new("n1", "::1", 7800, at_ms=1000)
    assert record.refreshed(at_ms=5000) == NodeRecord("n1", "::1", 7800, 1000, 5000)


def test_expiry_counts_from_the_last_update() -> None:
    record = NodeRecord("n1", "h", 1, created_ms=0, updated_ms=10_000)
    assert not record.expired(now=14_000, expiration_s=4)
    assert record.expired(now=14_001, expiration_s=4)
    assert not record.expired(now=10**15, expiration_s=0)  # 0: records never expire


@pytest.mark.parametrize(("body", "why"), [
    (b"hello", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"version": 2, "node_id": "n", "host": "h", "port": 1, "created_ms": 1, '
     b'"updated_ms": 1}', "format version 2"),
    (b'{"node_id": "n"}', "format version None"),
    (b'{"version": 1, "node_id": "n", "host": "h", "port": "7800", "created_ms": 1, '
     b'"updated_ms": 1}', "port is '7800'"),
    (b'{"version": 1, "node_id": "n", "host": "h", "port": 70000, "created_ms": 1, '
     b'"updated_ms": 1}', "port 70000"),
    (b'{"version": 1, "node_id": "", "host": "h", "port": 1, "created_ms": 1, '
     b'"updated_ms": 1}', "must not be empty"),
    (b'{"version": 1, "node_id": "n", "host": "h", "port": 1, "created_ms": 1, '
     b'"updated_ms": true}', "updated_ms is True"),
    (b"{" + b" " * 5000 + b"}", "at most"),
])
def test_what_is_not_a_record_is_refused_with_the_reason(body: bytes, why: str) -> None:
    with pytest.raises(MalformedRecord, match=why):
        parse_record(body)
