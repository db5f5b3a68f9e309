"""Hive backup files, and reading the embedded store of a node's data folder.

A backup holds the persistent state of a cluster (or of one node) without duplicates: each
client's session (its subscriptions, queued messages and in-flight exchanges with it) once,
and each retained message once. The node writes one on request
(``POST /api/v1/management/backups``), the recovery tool writes one from the data folders of
several nodes, and a running node imports one (``POST /api/v1/management/backups/<id>``).

The file, ``<id>.hive-<version>.backup`` (``<id>`` is ``YYYYMMDD-HHMMSS``), format 1::

    magic      8 bytes   b"HIVEBKP1"
    header     u32 length (big endian), then that many bytes of UTF-8 JSON:
               {"format": 1, "created": <unix time>, "hive_version": "...", "source": "...",
                "sessions_only": false}
    records    each: kind (1 byte), u32 length, u32 CRC-32 of the body, body (UTF-8 JSON)
               kind 1, a client:
                 {"client_id", "version", "protocol_version", "expiry_interval",
                  "disconnected_at", "subscriptions": [[filter, qos, no_local,
                  retain_as_published, retain_handling, subscription_id], ...],
                  "queue": [[seq, MESSAGE], ...],
                  "inflight": [[packet_id, direction, state, MESSAGE | null], ...]}
               kind 2, a retained message: {"version", "message": MESSAGE}
               kind 255, the end: {"clients": N, "retained": N, "queued": N}
    MESSAGE    [topic, payload (base64), qos, retain, properties (base64, the encoded
               MQTT 5 property block), expiry_at (unix time or null), publisher_id]

``version`` is the time (ns since the epoch) the store last changed the record: when the
same session or retained message is found in several places (a node's own store and the
replicas other nodes keep of it), the highest version is the newest copy. A file without its
end record was cut short and is refused.

A node's data folder holds the embedded store in ``persistence/sessions.db``, the replicas it
keeps for other nodes in ``replicas/<node>/persistence/sessions.db`` and the copy of its data
from before its last start in a cluster in ``cluster-backup/``; :func:`data_folder_stores`
finds them and :func:`read_store` reads one (on a copy: the inputs are never written).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import struct
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from hive_ext_api._persistence import (
    Direction,
    StoredInflight,
    StoredMessage,
    StoredSession,
    StoredSubscription,
)

FORMAT = 1
MAGIC = b"HIVEBKP1"
SUFFIX = ".backup"
KIND_CLIENT = 1
KIND_RETAINED = 2
KIND_END = 255
STORE_FILE = Path("persistence") / "sessions.db"
STORE_SCHEMAS = (2, 3)  # the embedded store's schema versions this module reads
_RECORD = struct.Struct(">BII")
_U32 = struct.Struct(">I")


class BackupError(Exception):
    """A backup file or a data folder that cannot be read; the message names it and says why."""


@dataclass(slots=True)
class ClientState:
    """One client's persistent state, as a backup holds it."""

    session: StoredSession
    version: int = 0
    queue: list[tuple[int, StoredMessage]] = field(default_factory=list)  # (seq, message)
    inflight: list[StoredInflight] = field(default_factory=list)


@dataclass(slots=True)
class RetainedState:
    message: StoredMessage
    version: int = 0


@dataclass(slots=True)
class BackupHeader:
    created: float
    hive_version: str
    source: str
    sessions_only: bool = False
    format: int = FORMAT


@dataclass(slots=True)
class BackupCounts:
    clients: int = 0
    retained: int = 0
    queued: int = 0


def new_backup_id(now: float | None = None) -> str:
    """``YYYYMMDD-HHMMSS`` in UTC: the id of a backup, and its folder's name."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))


def backup_file_name(backup_id: str, hive_version: str) -> str:
    return f"{backup_id}.hive-{hive_version}{SUFFIX}"


# -- records as JSON -------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _message_fields(m: StoredMessage) -> list[Any]:
    return [m.topic, _b64(m.payload), m.qos, m.retain, _b64(m.properties), m.expiry_at,
            m.publisher_id]


def _message(fields: list[Any]) -> StoredMessage:
    topic, payload, qos, retain, properties, expiry_at, publisher_id = fields
    return StoredMessage(topic, base64.b64decode(payload), qos, bool(retain),
                         base64.b64decode(properties), expiry_at, publisher_id)


def encode_client(state: ClientState, *, sessions_only: bool = False) -> bytes:
    """The body of a client record (``sessions_only``: without queue and in-flight exchanges,
    and without shared subscriptions, as the recovery tool's ``-so`` asks)."""
    s = state.session
    subscriptions = [[sub.topic_filter, sub.qos, sub.no_local, sub.retain_as_published,
                      sub.retain_handling, sub.subscription_id]
                     for sub in s.subscriptions.values()
                     if not (sessions_only and sub.topic_filter.startswith("$share/"))]
    body = {"client_id": s.client_id, "version": state.version,
            "protocol_version": s.protocol_version, "expiry_interval": s.expiry_interval,
            "disconnected_at": s.disconnected_at, "subscriptions": subscriptions,
            "queue": [] if sessions_only else [[seq, _message_fields(m)] for seq, m in state.queue],
            "inflight": [] if sessions_only else [
                [i.packet_id, i.direction, i.state,
                 None if i.message is None else _message_fields(i.message)]
                for i in state.inflight]}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_client(body: bytes) -> ClientState:
    d = json.loads(body)
    client_id = d["client_id"]
    session = StoredSession(client_id, d["protocol_version"], d["expiry_interval"],
                            d["disconnected_at"])
    for topic_filter, qos, no_local, rap, handling, sub_id in d["subscriptions"]:
        session.subscriptions[topic_filter] = StoredSubscription(
            topic_filter, qos, bool(no_local), bool(rap), handling, sub_id)
    return ClientState(
        session, d["version"], [(seq, _message(m)) for seq, m in d["queue"]],
        [StoredInflight(client_id, packet_id, cast(Direction, direction), state,
                        None if m is None else _message(m))
         for packet_id, direction, state, m in d["inflight"]])


def encode_retained(state: RetainedState) -> bytes:
    return json.dumps({"version": state.version, "message": _message_fields(state.message)},
                      separators=(",", ":")).encode()


def decode_retained(body: bytes) -> RetainedState:
    d = json.loads(body)
    return RetainedState(_message(d["message"]), d["version"])


# -- the file --------------------------------------------------------------------------------


class BackupWriter:
    """Writes a backup file: to a temporary name, synced and renamed when closed without error.

    ::

        with BackupWriter(path, source="node-1") as out:
            out.add_client(state)
            out.add_retained(retained)
    """

    def __init__(self, path: Path, *, source: str, hive_version: str = "",
                 sessions_only: bool = False) -> None:
        self.path = Path(path)
        self.counts = BackupCounts()
        self.sessions_only = sessions_only
        self._tmp = self.path.with_name(f".{self.path.name}.tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out: IO[bytes] = self._tmp.open("wb")
        header = json.dumps({"format": FORMAT, "created": time.time(),
                             "hive_version": hive_version, "source": source,
                             "sessions_only": sessions_only}).encode()
        self._out.write(MAGIC + _U32.pack(len(header)) + header)

    def add_raw(self, kind: int, body: bytes) -> None:
        """A record already encoded (``encode_client``/``encode_retained``)."""
        self._out.write(_RECORD.pack(kind, len(body), zlib.crc32(body)) + body)
        if kind == KIND_CLIENT:
            self.counts.clients += 1
        elif kind == KIND_RETAINED:
            self.counts.retained += 1

    def add_client(self, state: ClientState) -> None:
        self.add_raw(KIND_CLIENT, encode_client(state, sessions_only=self.sessions_only))
        if not self.sessions_only:
            self.counts.queued += len(state.queue)

    def add_retained(self, state: RetainedState) -> None:
        if not self.sessions_only:
            self.add_raw(KIND_RETAINED, encode_retained(state))

    def count_queued(self, n: int) -> None:
        """For records added raw: how many queued messages they held."""
        self.counts.queued += n

    def close(self) -> Path:
        end = json.dumps({"clients": self.counts.clients, "retained": self.counts.retained,
                          "queued": self.counts.queued}).encode()
        self.add_raw(KIND_END, end)
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        os.replace(self._tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return self.path

    def abort(self) -> None:
        self._out.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> BackupWriter:
        return self

    def __exit__(self, kind: object, error: object, tb: object) -> None:
        if error is None:
            self.close()
        else:
            self.abort()


class BackupReader:
    """Reads a backup file: ``header``, then ``records()`` (clients and retained messages in
    file order); ``counts`` is complete once ``records()`` is exhausted.

    :raises BackupError: not a backup, a newer format, a damaged record, or cut short.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.counts = BackupCounts()
        try:
            self._in: IO[bytes] = self.path.open("rb")
        except OSError as exc:
            raise BackupError(f"{self.path}: cannot open the backup: {exc}") from exc
        magic = self._in.read(len(MAGIC))
        if magic != MAGIC:
            self._in.close()
            raise BackupError(f"{self.path}: not a Hive backup file (it does not start with "
                              f"{MAGIC.decode()})")
        try:
            (length,) = _U32.unpack(self._read(4))
            header = json.loads(self._read(length))
            self.header = BackupHeader(header["created"], header["hive_version"],
                                       header["source"], bool(header["sessions_only"]),
                                       header["format"])
        except (BackupError, ValueError, KeyError, struct.error) as exc:
            self._in.close()
            raise BackupError(f"{self.path}: the backup's header is damaged ({exc})") from exc
        if self.header.format > FORMAT:
            self._in.close()
            raise BackupError(f"{self.path}: backup format {self.header.format} is newer than "
                              f"this Hive reads ({FORMAT}); import it with a newer Hive")

    def _read(self, n: int) -> bytes:
        data = self._in.read(n)
        if len(data) != n:
            raise BackupError(f"{self.path}: the backup is cut short (incomplete copy?)")
        return data

    def records(self) -> Iterator[ClientState | RetainedState]:
        try:
            while True:
                head = self._in.read(_RECORD.size)
                if len(head) != _RECORD.size:
                    raise BackupError(f"{self.path}: the backup is cut short (no end record)")
                kind, length, crc = _RECORD.unpack(head)
                body = self._read(length)
                if zlib.crc32(body) != crc:
                    raise BackupError(f"{self.path}: a damaged record at byte "
                                      f"{self._in.tell() - length} (CRC mismatch)")
                if kind == KIND_END:
                    end = json.loads(body)
                    if (end["clients"], end["retained"]) != (self.counts.clients,
                                                             self.counts.retained):
                        raise BackupError(f"{self.path}: the end record counts {end} records, "
                                          f"the file holds {self.counts}")
                    return
                if kind == KIND_CLIENT:
                    state = decode_client(body)
                    self.counts.clients += 1
                    self.counts.queued += len(state.queue)
                    yield state
                elif kind == KIND_RETAINED:
                    self.counts.retained += 1
                    yield decode_retained(body)
                else:
                    raise BackupError(f"{self.path}: unknown record kind {kind}")
        finally:
            self._in.close()

    def close(self) -> None:
        self._in.close()


# -- data folders ----------------------------------------------------------------------------


def data_folder_stores(folder: Path) -> list[Path]:
    """The embedded stores in a node's data folder: its own, the replicas it keeps, and the
    copy of its previous data (``cluster-backup/``), in that order.

    :raises BackupError: the folder does not exist or holds no store (not a Hive data folder).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise BackupError(f"{folder}: no such folder")
    found = [folder / STORE_FILE] if (folder / STORE_FILE).is_file() else []
    replicas = folder / "replicas"
    if replicas.is_dir():
        found.extend(sorted(p for p in replicas.glob(f"*/{STORE_FILE}") if p.is_file()))
    previous = folder / "cluster-backup"
    if previous.is_dir():
        found.extend(data_folder_stores(previous) if (previous / STORE_FILE).is_file() else [])
    if not found:
        raise BackupError(f"{folder}: not a Hive data folder (no {STORE_FILE}, no replicas/)")
    return found


def read_store(path: Path) -> Iterator[ClientState | RetainedState]:
    """Every client and retained message an embedded store (``sessions.db``) holds, with
    their versions (0 for a store written before versions existed).

    The database and its write-ahead log are read from a private copy, so a store left by a
    killed node is read with everything it had committed, and the input is never changed.

    :raises BackupError: not a readable store, or a schema this module does not know.
    """
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="hive-read-store-") as tmp:
        copy = Path(tmp) / "sessions.db"
        try:
            shutil.copyfile(path, copy)
            for suffix in ("-wal",):
                side = path.with_name(path.name + suffix)
                if side.exists():
                    shutil.copyfile(side, copy.with_name(copy.name + suffix))
            db = sqlite3.connect(copy)
        except OSError as exc:
            raise BackupError(f"{path}: cannot read the store: {exc}") from exc
        try:
            yield from _read_db(db, path)
        except sqlite3.DatabaseError as exc:
            raise BackupError(f"{path}: not a readable Hive store ({exc})") from exc
        finally:
            db.close()


def _read_db(db: sqlite3.Connection, path: Path) -> Iterator[ClientState | RetainedState]:
    row = db.execute("SELECT max(version) FROM schema_version").fetchone()
    schema = row[0] if row else None
    if schema not in STORE_SCHEMAS:
        raise BackupError(f"{path}: store schema version {schema}; this Hive reads "
                          f"{', '.join(map(str, STORE_SCHEMAS))}")
    version = "version" if schema >= 3 else "0"
    columns = "topic, payload, qos, retain, properties, expiry_at, publisher_id"
    states: dict[str, ClientState] = {}
    for client_id, protocol, expiry, gone, ver in db.execute(
            f"SELECT client_id, protocol_version, expiry_interval, disconnected_at, {version} "
            "FROM session"):
        states[client_id] = ClientState(StoredSession(client_id, protocol, expiry, gone), ver)
    for client_id, topic_filter, qos, no_local, rap, handling, sub_id in db.execute(
            "SELECT * FROM subscription ORDER BY rowid"):
        state = states.get(client_id)
        if state is not None:
            state.session.subscriptions[topic_filter] = StoredSubscription(
                topic_filter, qos, bool(no_local), bool(rap), handling, sub_id)
    for client_id, seq, *fields in db.execute(
            f"SELECT client_id, seq, {columns} FROM queued_message ORDER BY client_id, seq"):
        state = states.get(client_id)
        if state is not None:
            state.queue.append((seq, _row_message(fields)))
    for client_id, packet_id, direction, exchange, *fields in db.execute(
            f"SELECT client_id, packet_id, direction, state, {columns} FROM inflight "
            "ORDER BY rowid"):
        state = states.get(client_id)
        if state is not None:
            state.inflight.append(StoredInflight(
                client_id, packet_id, cast(Direction, direction), exchange,
                None if fields[0] is None else _row_message(fields)))
    yield from states.values()
    for *fields, ver in db.execute(f"SELECT {columns}, {version} FROM retained_message"):
        yield RetainedState(_row_message(fields), ver)


def _row_message(fields: list[Any]) -> StoredMessage:
    topic, payload, qos, retain, properties, expiry_at, publisher_id = fields
    return StoredMessage(topic, bytes(payload), qos, bool(retain), bytes(properties), expiry_at,
                         publisher_id)
