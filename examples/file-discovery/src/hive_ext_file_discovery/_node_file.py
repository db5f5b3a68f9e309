"""The shared nodes file: one node per line, read and rewritten under an fcntl lock.

    # host:port                          written by hand: never expires
    10.0.0.5:7800
    # host:port version node-id time     written by a node: expires unless refreshed
    10.0.0.6:7800 1 node-Ab12 1718000000000

Like HiveMQ's S3 discovery files, a node's record carries a format version, the node id, its
address and the time it was written (ms since the epoch); a record older than the expiration is
a dead node's and ages out. Writers take ``<file>.lock`` exclusively and replace the file in one
rename, so a reader never sees half a file.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

FORMAT_VERSION = "1"

HEADER = ("# Hive file discovery: one node per line.\n"
          "# 'host:port' lines are static; 'host:port version node-id time-ms' lines are written "
          "by nodes and expire.\n")


class MalformedLine(ValueError):
    """A line of the nodes file that is neither a static address nor a node record."""


@dataclass(frozen=True, slots=True)
class NodeRecord:
    host: str
    port: int
    node_id: str | None = None  # None: a static line, written by hand
    written_ms: int = 0

    @property
    def static(self) -> bool:
        return self.node_id is None

    def expired(self, now_ms: int, expiration_s: float) -> bool:
        """A node's record older than ``expiration_s`` (0: never expires); static lines never."""
        if self.static or expiration_s <= 0:
            return False
        return now_ms - self.written_ms > expiration_s * 1000

    def line(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.static:
            return f"{host}:{self.port}"
        return f"{host}:{self.port} {FORMAT_VERSION} {self.node_id} {self.written_ms}"


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` or ``[ipv6]:port`` -> ``(host, port)``."""
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise MalformedLine(f"{text!r} is not host:port")
    return host, int(port_text)


def parse_line(line: str) -> NodeRecord | None:
    """The record of one line; None for blank lines and comments; MalformedLine otherwise."""
    fields = line.split("#", 1)[0].split()
    if not fields:
        return None
    host, port = parse_address(fields[0])
    if len(fields) == 1:
        return NodeRecord(host, port)
    if len(fields) != 4:
        raise MalformedLine(f"{line.strip()!r}: expected host:port [version node-id time-ms]")
    version, node_id, written = fields[1:]
    if version != FORMAT_VERSION:
        raise MalformedLine(f"{line.strip()!r}: format version {version}, "
                            f"this extension reads {FORMAT_VERSION}")
    if not written.isdigit():
        raise MalformedLine(f"{line.strip()!r}: time {written!r} is not milliseconds")
    return NodeRecord(host, port, node_id, int(written))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class NodeFile:
    """The nodes file at ``path``; ``on_malformed`` hears about each line it had to skip."""

    def __init__(self, path: Path,
                 on_malformed: Callable[[int, MalformedLine], None] | None = None) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self.on_malformed = on_malformed

    @contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read_unlocked(self) -> list[NodeRecord]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            try:
                record = parse_line(line)
            except MalformedLine as exc:
                if self.on_malformed is not None:
                    self.on_malformed(number, exc)
                continue
            if record is not None:
                records.append(record)
        return records

    def read(self) -> list[NodeRecord]:
        """Every well-formed record, expired ones included, in file order."""
        with self._locked(exclusive=False):
            return self._read_unlocked()

    def update(self, change: Callable[[list[NodeRecord]], list[NodeRecord]]) -> list[NodeRecord]:
        """Rewrite the file as ``change(records)`` says, under the exclusive lock; the result."""
        with self._locked(exclusive=True):
            records = change(self._read_unlocked())
            fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    file.write(HEADER)
                    file.writelines(record.line() + "\n" for record in records)
                    file.flush()
                    os.fsync(file.fileno())
                os.chmod(temporary, 0o644)
                os.replace(temporary, self.path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
            return records
