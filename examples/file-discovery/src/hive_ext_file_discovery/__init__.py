"""Hive example extension: cluster discovery through a file that every node can reach.

A node appends its record at ``hive_discovery_init``, refreshes it as it reloads, and removes it
at ``hive_discovery_destroy``; ``hive_discovery_reload`` answers the addresses of every static
line and every record that has not expired. Settings, from the environment:

- ``HIVE_FILE_DISCOVERY_FILE``: the shared file (default ``cluster-nodes.txt`` in the
  extension's data folder, which only this node sees: set it for a real cluster)
- ``HIVE_FILE_DISCOVERY_EXPIRATION``: seconds after which a node's record is dead (default 360,
  0 for never); a running node rewrites its record every half of that
- ``HIVE_FILE_DISCOVERY_RELOAD_INTERVAL``: seconds between reloads (default: the node's)

Errors are classified (``io``: the file cannot be read or written; ``malformed``: a line was
skipped), logged and counted; none of them stops the node.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from hive_ext_api import ClusterNodeAddress, Counter, ExtensionContext, ExtensionRefused, hookimpl

from hive_ext_file_discovery._node_file import (
    FORMAT_VERSION,
    MalformedLine,
    NodeFile,
    NodeRecord,
    now_ms,
    parse_line,
)

__version__ = "1.0.0"

HIVE_API = ">=1.0,<2"

FILE_ENV = "HIVE_FILE_DISCOVERY_FILE"
EXPIRATION_ENV = "HIVE_FILE_DISCOVERY_EXPIRATION"
RELOAD_INTERVAL_ENV = "HIVE_FILE_DISCOVERY_RELOAD_INTERVAL"
DEFAULT_FILE_NAME = "cluster-nodes.txt"
DEFAULT_EXPIRATION_S = 360.0

__all__ = ["FORMAT_VERSION", "HIVE_API", "FileDiscovery", "NodeFile", "NodeRecord", "parse_line"]


@dataclass
class FileDiscovery:
    """One node's view of the shared file: what it registered, and its error counts."""

    node_file: NodeFile
    expiration_s: float = DEFAULT_EXPIRATION_S
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("hive.file-discovery"))
    own: NodeRecord | None = None
    errors: dict[str, int] = field(default_factory=lambda: {"io": 0, "malformed": 0})
    error_counter: Counter | None = None  # the node's metric, when the node provides one

    def __post_init__(self) -> None:
        self.node_file.on_malformed = self._malformed

    def _count(self, kind: str) -> None:
        self.errors[kind] += 1
        if self.error_counter is not None:
            self.error_counter.inc()

    def _malformed(self, number: int, exc: MalformedLine) -> None:
        self._count("malformed")
        self.log.warning("file-discovery: %s line %d skipped: %s", self.node_file.path, number, exc)

    def _io_error(self, doing: str, exc: OSError) -> None:
        self._count("io")
        self.log.warning("file-discovery: cannot %s %s: %s", doing, self.node_file.path, exc)

    def _is_own(self, record: NodeRecord) -> bool:
        own = self.own
        return own is not None and not record.static and (
            record.node_id == own.node_id or (record.host, record.port) == (own.host, own.port))

    def _register(self, records: list[NodeRecord]) -> list[NodeRecord]:
        now = now_ms()
        assert self.own is not None
        self.own = NodeRecord(self.own.host, self.own.port, self.own.node_id, now)
        kept = [r for r in records if not self._is_own(r) and not r.expired(now, self.expiration_s)]
        return [*kept, self.own]

    def init(self, own_address: ClusterNodeAddress, node_id: str) -> None:
        """Register: drop this node's old records and dead ones, append a fresh record."""
        self.own = NodeRecord(own_address.host, own_address.port, node_id, now_ms())
        try:
            self.node_file.update(self._register)
        except OSError as exc:
            self._io_error("register in", exc)  # the next reload tries again

    def reload(self) -> list[ClusterNodeAddress] | None:
        """The live addresses; refreshes this node's record when it is half way to expiring."""
        try:
            records = self.node_file.read()
            if self.own is not None and self._needs_refresh(records):
                records = self.node_file.update(self._register)
        except OSError as exc:
            self._io_error("reload from", exc)
            return None  # no news: the node keeps what the last reload said
        now = now_ms()
        addresses: dict[ClusterNodeAddress, None] = {}
        for record in records:
            if not record.expired(now, self.expiration_s):
                addresses[ClusterNodeAddress(record.host, record.port)] = None
        return list(addresses)

    def _needs_refresh(self, records: list[NodeRecord]) -> bool:
        mine = [r for r in records if not r.static and r.node_id == self.own_node_id]
        if not mine:
            return True  # removed by hand, or aged out while this node was paused
        if self.expiration_s <= 0:
            return False
        return now_ms() - max(r.written_ms for r in mine) > self.expiration_s * 500

    @property
    def own_node_id(self) -> str | None:
        return self.own.node_id if self.own is not None else None

    def destroy(self) -> None:
        """Deregister: remove this node's records."""
        if self.own is None:
            return
        try:
            self.node_file.update(lambda records: [r for r in records if not self._is_own(r)])
        except OSError as exc:
            self._io_error("deregister from", exc)
        self.own = None


def _seconds(env: str, default: float | None) -> float | None:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ExtensionRefused(f"{env}={text!r} is not a number of seconds") from None
    if value < 0:
        raise ExtensionRefused(f"{env}={text!r} must not be negative")
    return value


_discovery: FileDiscovery | None = None
_reload_interval: float | None = None


@hookimpl
def hive_extension_start(context: ExtensionContext) -> None:
    global _discovery, _reload_interval
    configured = os.environ.get(FILE_ENV)
    path = Path(configured) if configured else context.data_dir / DEFAULT_FILE_NAME
    expiration = _seconds(EXPIRATION_ENV, DEFAULT_EXPIRATION_S)
    assert expiration is not None
    _reload_interval = _seconds(RELOAD_INTERVAL_ENV, None)
    _discovery = FileDiscovery(NodeFile(path), expiration, context.log)
    if context.services is not None:  # None when a unit test starts the extension by hand
        _discovery.error_counter = context.services.metrics.counter(
            "file-discovery.errors", "nodes file reads or writes that failed, and lines skipped")
    context.log.info("file-discovery: nodes file %s, records expire after %s s", path, expiration)


@hookimpl
def hive_extension_stop() -> None:
    global _discovery
    _discovery = None


@hookimpl
def hive_discovery_init(own_address: ClusterNodeAddress, cluster_id: str) -> None:
    if _discovery is not None:
        _discovery.init(own_address, cluster_id)


@hookimpl
def hive_discovery_reload() -> list[ClusterNodeAddress] | None:
    return _discovery.reload() if _discovery is not None else None


@hookimpl
def hive_discovery_reload_interval() -> float | None:
    return _reload_interval


@hookimpl
def hive_discovery_destroy(own_address: ClusterNodeAddress) -> None:
    if _discovery is not None:  # removes what init wrote (by node id, or by own_address)
        _discovery.destroy()
