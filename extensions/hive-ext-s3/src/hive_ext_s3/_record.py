"""A node's record in the bucket: one small JSON object per node, rewritten while it lives.

    {"version": 1, "node_id": "3f2a9c1b7d4e", "host": "10.0.0.5", "port": 7800,
     "created_ms": 1718000000000, "updated_ms": 1718000180000}

The idea is HiveMQ's S3 node file (a format version, the node's id, its cluster address and a
time): a record whose last update is older than the expiration belongs to a dead node. The
times are the writing node's clock (ms since the epoch), so the nodes' clocks must agree to well
within ``file-expiration - update-interval``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

FORMAT_VERSION = 1
MAX_RECORD_BYTES = 4096  # a record is about 150 bytes; anything far bigger is not one


class MalformedRecord(ValueError):
    """An object under the prefix that is not a node record this extension can read."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class NodeRecord:
    node_id: str
    host: str
    port: int
    created_ms: int
    updated_ms: int

    @classmethod
    def new(cls, node_id: str, host: str, port: int, at_ms: int | None = None) -> NodeRecord:
        stamp = now_ms() if at_ms is None else at_ms
        return cls(node_id, host, port, stamp, stamp)

    def refreshed(self, at_ms: int | None = None) -> NodeRecord:
        """The same record, updated now."""
        return replace(self, updated_ms=now_ms() if at_ms is None else at_ms)

    def expired(self, now: int, expiration_s: float) -> bool:
        """Not updated for longer than ``expiration_s`` (0: records never expire)."""
        return expiration_s > 0 and now - self.updated_ms > expiration_s * 1000

    def encode(self) -> bytes:
        return json.dumps({"version": FORMAT_VERSION, "node_id": self.node_id,
                           "host": self.host, "port": self.port,
                           "created_ms": self.created_ms, "updated_ms": self.updated_ms},
                          separators=(",", ":")).encode()


def _field(document: dict[str, Any], name: str, kind: type) -> Any:
    value = document.get(name)
    # bool is an int to Python, never to this format
    if not isinstance(value, kind) or isinstance(value, bool):
        raise MalformedRecord(f"{name} is {value!r}, not a {kind.__name__}")
    return value


def parse_record(body: bytes) -> NodeRecord:
    """The record in ``body``; :class:`MalformedRecord` says why it is not one."""
    if len(body) > MAX_RECORD_BYTES:
        raise MalformedRecord(f"{len(body)} bytes, a node record has at most {MAX_RECORD_BYTES}")
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedRecord(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise MalformedRecord("not a JSON object")
    version = document.get("version")
    if version != FORMAT_VERSION:
        raise MalformedRecord(f"format version {version!r}, this extension reads "
                              f"{FORMAT_VERSION}")
    node_id = _field(document, "node_id", str)
    host = _field(document, "host", str)
    port = _field(document, "port", int)
    created, updated = _field(document, "created_ms", int), _field(document, "updated_ms", int)
    if not node_id or not host:
        raise MalformedRecord("node_id and host must not be empty")
    if not 0 < port < 65536:
        raise MalformedRecord(f"port {port} is not a TCP port")
    return NodeRecord(node_id, host, port, created, updated)
