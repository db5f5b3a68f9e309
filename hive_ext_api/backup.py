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
from hive_ext_api.mqtt_rules import (
    MAX_PAYLOAD,
    client_id_problem,
    is_reserved_topic,
    packet_id_problem,
    qos_problem,
    subscription_id_problem,
    topic_filter_problem,
    topic_name_problem,
)

FORMAT = 1
MAGIC = b"HIVEBKP1"
SUFFIX = ".backup"
KIND_CLIENT = 1
KIND_RETAINED = 2
KIND_END = 255
STORE_FILE = Path("persistence") / "sessions.db"
STORE_SCHEMAS = (2, 3, 4, 5, 6)  # the embedded store's schema versions this module reads (4 adds
# identities to queued and in-flight messages, 5 the identities of completed QoS 2 deliveries,
# 6 the packet ids of queued messages sent: a backup leaves all three out, an import is new)
_RECORD = struct.Struct(">BII")
_U32 = struct.Struct(">I")
_MAX_HEADER = 1 << 20


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


# -- what a record may hold ------------------------------------------------------------------

_INFLIGHT_STATES = {"out": ("publish", "pubrel"), "in": ("pubrec",)}
_MAX_EXPIRY = 0xFFFFFFFF


def record_problem(state: ClientState | RetainedState) -> str | None:
    """Why a record read from a file or a store breaks MQTT's rules (what a client could not
    have sent: a bad topic or filter, QoS, packet or subscription identifier, a ``$SYS``
    topic), or None when it holds to them."""
    if isinstance(state, RetainedState):
        return _version_problem(state.version) or _message_problem(state.message, "message")
    session = state.session
    problem = (_version_problem(state.version) or client_id_problem(session.client_id)
               or _session_problem(session))
    if problem:
        return problem
    for topic_filter, sub in session.subscriptions.items():
        problem = (topic_filter_problem(topic_filter) or qos_problem(sub.qos)
                   or subscription_id_problem(sub.subscription_id))
        if problem is None and not (type(sub.retain_handling) is int
                                    and 0 <= sub.retain_handling <= 2):
            problem = f"retain handling {sub.retain_handling!r} is not 0, 1 or 2"
        if problem is None and sub.no_local and topic_filter.startswith("$share/"):
            problem = "no local on a shared subscription (MQTT-3.8.3-4)"
        if problem:
            return f"subscription {str(topic_filter)[:100]!r}: {problem}"
    seqs: set[int] = set()
    for seq, message in state.queue:
        if type(seq) is not int or seq in seqs:
            return f"queued message sequence {seq!r} is not a new integer"
        seqs.add(seq)
        problem = _message_problem(message, f"queued message {seq}")
        if problem:
            return problem
    seen: set[tuple[str, int]] = set()
    for exchange in state.inflight:
        where = f"in-flight {exchange.direction!r} {exchange.packet_id!r}"
        problem = packet_id_problem(exchange.packet_id)
        if problem:
            return f"{where}: {problem}"
        if exchange.state not in _INFLIGHT_STATES.get(exchange.direction, ()):
            return f"{where}: state {exchange.state!r} is not one of that direction's"
        if (exchange.direction, exchange.packet_id) in seen:
            return f"{where}: the packet identifier is in flight twice"
        seen.add((exchange.direction, exchange.packet_id))
        if exchange.message is None and exchange.state == "publish":
            return f"{where}: no message"
        if exchange.message is not None:
            problem = _message_problem(exchange.message, where)
            if problem:
                return problem
    return None


def _version_problem(version: object) -> str | None:
    if type(version) is not int or version < 0:
        return f"version {version!r} is not a non-negative integer"
    return None


def _session_problem(session: StoredSession) -> str | None:
    if session.protocol_version not in (3, 4, 5):
        return f"protocol version {session.protocol_version!r} is not 3, 4 or 5"
    expiry = session.expiry_interval
    if type(expiry) is not int or not 0 <= expiry <= _MAX_EXPIRY:
        return f"session expiry {expiry!r} is outside 0..{_MAX_EXPIRY}"
    if not _time_or_none(session.disconnected_at):
        return f"disconnected_at {session.disconnected_at!r} is not a time"
    return None


def _message_problem(message: StoredMessage, where: str) -> str | None:
    problem = topic_name_problem(message.topic) or qos_problem(message.qos)
    if problem is None and is_reserved_topic(message.topic):
        problem = f"topic {message.topic!r} is under $SYS, which only the broker publishes"
    if problem is None and len(message.payload) > MAX_PAYLOAD:
        problem = f"payload of {len(message.payload)} bytes is over {MAX_PAYLOAD}"
    if problem is None and len(message.properties) > MAX_PAYLOAD:
        problem = f"properties of {len(message.properties)} bytes are over {MAX_PAYLOAD}"
    if problem is None and not _time_or_none(message.expiry_at):
        problem = f"expiry {message.expiry_at!r} is not a time"
    if problem is None and not isinstance(message.publisher_id, str):
        problem = f"publisher {message.publisher_id!r} is not a client id"
    return f"{where}: {problem}" if problem else None


def _time_or_none(value: object) -> bool:
    return value is None or (type(value) in (int, float) and 0 <= value < 1e11)  # type: ignore[operator]


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

    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or str(self.path)  # what messages call the file
        self.counts = BackupCounts()
        try:
            self._in: IO[bytes] = self.path.open("rb")
        except OSError as exc:
            raise BackupError(f"{self.name}: cannot open the backup: {exc.strerror}") from exc
        magic = self._in.read(len(MAGIC))
        if magic != MAGIC:
            self._in.close()
            raise BackupError(f"{self.name}: not a Hive backup file (it does not start with "
                              f"{MAGIC.decode()})")
        try:
            (length,) = _U32.unpack(self._read(4))
            if length > _MAX_HEADER:
                raise BackupError(f"{self.name}: a header of {length} bytes")
            header = json.loads(self._read(length))
            self.header = BackupHeader(float(header["created"]), str(header["hive_version"]),
                                       str(header["source"]), bool(header["sessions_only"]),
                                       int(header["format"]))
        except (BackupError, ValueError, KeyError, TypeError, RecursionError,
                struct.error) as exc:
            self._in.close()
            raise BackupError(f"{self.name}: the backup's header is damaged "
                              f"({type(exc).__name__})") from exc
        if self.header.format > FORMAT:
            self._in.close()
            raise BackupError(f"{self.name}: backup format {self.header.format} is newer than "
                              f"this Hive reads ({FORMAT}); import it with a newer Hive")

    def _read(self, n: int) -> bytes:
        data = self._in.read(n)
        if len(data) != n:
            raise BackupError(f"{self.name}: the backup is cut short (incomplete copy?)")
        return data

    def records(self) -> Iterator[ClientState | RetainedState]:
        """Every record, decoded and held to MQTT's rules (:func:`record_problem`).

        :raises BackupError: naming the record (its number, from 1, and its client) that is
            damaged, not a record, or breaks a rule.
        """
        number = 0
        try:
            while True:
                head = self._in.read(_RECORD.size)
                if len(head) != _RECORD.size:
                    raise BackupError(f"{self.name}: the backup is cut short (no end record)")
                kind, length, crc = _RECORD.unpack(head)
                number += 1
                at = self._in.tell() - _RECORD.size
                body = self._read(length)
                if zlib.crc32(body) != crc:
                    raise BackupError(f"{self.name}: record {number} (at byte {at}) is damaged "
                                      "(CRC mismatch)")
                if kind == KIND_END:
                    try:
                        end = json.loads(body)
                        counted = (end["clients"], end["retained"])
                    except (ValueError, KeyError, TypeError, RecursionError) as exc:
                        raise BackupError(f"{self.name}: the end record is damaged") from exc
                    if counted != (self.counts.clients, self.counts.retained):
                        raise BackupError(f"{self.name}: the end record counts {end} records, "
                                          f"the file holds {self.counts}")
                    return
                if kind not in (KIND_CLIENT, KIND_RETAINED):
                    raise BackupError(f"{self.name}: record {number} (at byte {at}) has an "
                                      f"unknown kind {kind}")
                state = self._decode(kind, body, number, at)
                if kind == KIND_CLIENT:
                    assert isinstance(state, ClientState)
                    self.counts.clients += 1
                    self.counts.queued += len(state.queue)
                else:
                    self.counts.retained += 1
                yield state
        finally:
            self._in.close()

    def _decode(self, kind: int, body: bytes, number: int, at: int) -> ClientState | RetainedState:
        what = "client" if kind == KIND_CLIENT else "retained message"
        try:
            state: ClientState | RetainedState = (
                decode_client(body) if kind == KIND_CLIENT else decode_retained(body))
        except RecursionError as exc:
            raise BackupError(f"{self.name}: record {number} (at byte {at}) is not a {what} "
                              "record (JSON nested too deep)") from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BackupError(f"{self.name}: record {number} (at byte {at}) is not a {what} "
                              f"record ({type(exc).__name__}: {str(exc)[:200]})") from exc
        problem = record_problem(state)
        if problem is not None:
            named = (f"client {state.session.client_id!r}"[:140]
                     if isinstance(state, ClientState) else what)
            raise BackupError(f"{self.name}: record {number} (at byte {at}, {named}): {problem}")
        return state

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
            for state in _read_db(db, path):
                problem = record_problem(state)
                if problem is not None:
                    named = (f"client {state.session.client_id!r}"[:140]
                             if isinstance(state, ClientState) else "a retained message")
                    raise BackupError(f"{path}: {named}: {problem}")
                yield state
        except sqlite3.DatabaseError as exc:
            raise BackupError(f"{path}: not a readable Hive store ({exc})") from exc
        except (ValueError, TypeError) as exc:
            raise BackupError(f"{path}: not a Hive store ({type(exc).__name__}: "
                              f"{str(exc)[:200]})") from exc
        finally:
            db.close()


_STORE_TABLES = ("schema_version", "session", "subscription", "queued_message", "inflight",
                 "retained_message")


def _check_tables(db: sqlite3.Connection, path: Path) -> None:
    """Only plain tables: a view or a generated column can make a few kilobytes of file
    yield millions of rows or gigabytes of blobs to whoever reads it."""
    kinds = {name: kind for name, kind in db.execute("SELECT name, type FROM sqlite_master")
             if name in _STORE_TABLES}
    for name in _STORE_TABLES:
        if kinds.get(name) != "table":
            raise BackupError(f"{path}: {name} is {kinds.get(name) or 'missing'}, not a table: "
                              "not a Hive store")
        generated = [row[1] for row in db.execute(f"PRAGMA table_xinfo({name})")
                     if row[6] != 0]
        if generated:
            raise BackupError(f"{path}: {name} has hidden or generated columns "
                              f"({', '.join(map(str, generated))}): not a Hive store")


def _read_db(db: sqlite3.Connection, path: Path) -> Iterator[ClientState | RetainedState]:
    _check_tables(db, path)
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
