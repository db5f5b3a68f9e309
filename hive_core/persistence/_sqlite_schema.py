"""The SQLite layout of the embedded store, and the mapping between its rows and the records."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from hive_ext_api import (
    Direction,
    PersistenceError,
    Snapshot,
    StoredInflight,
    StoredMessage,
    StoredSession,
    StoredSubscription,
)

from ._batch import PendingBatch

SCHEMA_VERSION = 6

_MESSAGE_COLUMNS = "topic, payload, qos, retain, properties, expiry_at, publisher_id"
_QUEUED_COLUMNS = f"{_MESSAGE_COLUMNS}, origin, serial"  # with the message's cluster identity

# Identities of messages a session's client had (API 1.6, remember_taken), oldest first (rowid
# order); the store keeps the newest few thousand per client (see prune_taken).
_TAKEN = ("CREATE TABLE taken (client_id TEXT NOT NULL, origin TEXT NOT NULL,"
          " serial INTEGER NOT NULL)",
          "CREATE INDEX taken_by_client ON taken (client_id)")

# Known trade-off: a message queued for N offline sessions is stored N times, once per queue row.
# One row per (client, seq) keeps a dequeue a single-row delete, with no reference counting.
_CREATE = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE session (
        client_id TEXT PRIMARY KEY, protocol_version INTEGER NOT NULL,
        expiry_interval INTEGER NOT NULL, disconnected_at REAL,
        version INTEGER NOT NULL DEFAULT 0)""",
    # One row per subscription: a SUBSCRIBE writes one row, whatever the session holds.
    """CREATE TABLE subscription (
        client_id TEXT NOT NULL, topic_filter TEXT NOT NULL, qos INTEGER NOT NULL,
        no_local INTEGER NOT NULL, retain_as_published INTEGER NOT NULL,
        retain_handling INTEGER NOT NULL, subscription_id INTEGER,
        PRIMARY KEY (client_id, topic_filter))""",
    """CREATE TABLE queued_message (
        client_id TEXT NOT NULL, seq INTEGER NOT NULL,
        topic TEXT NOT NULL, payload BLOB NOT NULL, qos INTEGER NOT NULL, retain INTEGER NOT NULL,
        properties BLOB NOT NULL, expiry_at REAL, publisher_id TEXT NOT NULL,
        origin TEXT NOT NULL DEFAULT '', serial INTEGER NOT NULL DEFAULT 0,
        packet_id INTEGER,
        PRIMARY KEY (client_id, seq))""",
    # A rowid table on purpose: rowid order is the order the exchanges started, which is the
    # order MQTT requires for re-sending PUBLISH and PUBREL packets after a reconnect.
    """CREATE TABLE inflight (
        client_id TEXT NOT NULL, packet_id INTEGER NOT NULL, direction TEXT NOT NULL,
        state TEXT NOT NULL, topic TEXT, payload BLOB, qos INTEGER, retain INTEGER,
        properties BLOB, expiry_at REAL, publisher_id TEXT,
        origin TEXT NOT NULL DEFAULT '', serial INTEGER NOT NULL DEFAULT 0,
        UNIQUE (client_id, packet_id, direction))""",
    """CREATE TABLE retained_message (
        topic TEXT PRIMARY KEY, payload BLOB NOT NULL, qos INTEGER NOT NULL,
        retain INTEGER NOT NULL, properties BLOB NOT NULL, expiry_at REAL,
        publisher_id TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 0)""",
)


def connect(path: str, *, sync: bool) -> sqlite3.Connection:
    """Open (creating if needed) the database, in WAL mode and with the schema in place."""
    db = sqlite3.connect(path, isolation_level=None)  # autocommit: transactions are explicit
    try:
        db.execute("PRAGMA journal_mode=WAL")
        # FULL syncs the WAL at every commit (survives power loss); NORMAL survives a killed
        # process but may lose the last commits on power loss.
        db.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")
        db.execute("PRAGMA busy_timeout=5000")
        _ensure_schema(db)
    except BaseException:
        db.close()
        raise
    return db


def _ensure_schema(db: sqlite3.Connection) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        exists = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if not exists:
            for statement in (*_CREATE, *_TAKEN):
                db.execute(statement)
            db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        else:
            row = db.execute("SELECT max(version) FROM schema_version").fetchone()
            version = row[0] if row is not None else None
            if version not in _MIGRATIONS and version != SCHEMA_VERSION:
                raise PersistenceError(
                    f"sessions database has schema version {version}, "
                    f"this Hive reads versions 1 to {SCHEMA_VERSION}"
                )
            while version != SCHEMA_VERSION:
                _MIGRATIONS[version](db)
                version += 1
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _subscriptions_to_rows(db: sqlite3.Connection) -> None:
    """Version 1 kept a session's subscriptions as one JSON column: now one row each."""
    db.execute(_CREATE[2])
    for client_id, text in db.execute("SELECT client_id, subscriptions FROM session").fetchall():
        db.executemany(
            "INSERT INTO subscription VALUES (?, ?, ?, ?, ?, ?, ?)",
            (_subscription_row(client_id, sub)
             for sub in _decode_subscriptions(text).values()))
    db.execute("ALTER TABLE session DROP COLUMN subscriptions")


def _versions(db: sqlite3.Connection) -> None:
    """Version 3 stamps sessions and retained messages with the time they last changed (ns),
    so that the recovery tool can tell the newest of several copies."""
    for table in ("session", "retained_message"):
        db.execute(f"ALTER TABLE {table} ADD COLUMN version INTEGER NOT NULL DEFAULT 0")


def _identities(db: sqlite3.Connection) -> None:
    """Version 4 keeps each queued and in-flight message's cluster identity (origin node,
    serial), so that a session restored from disk takes no copy of a message twice."""
    for table in ("queued_message", "inflight"):
        db.execute(f"ALTER TABLE {table} ADD COLUMN origin TEXT NOT NULL DEFAULT ''")
        db.execute(f"ALTER TABLE {table} ADD COLUMN serial INTEGER NOT NULL DEFAULT 0")


def _taken(db: sqlite3.Connection) -> None:
    """Version 5 keeps the identities of the QoS 2 messages a session's client completed, so
    that a session restored from disk after a split takes no copy of one as new."""
    for statement in _TAKEN:
        db.execute(statement)


def _sent_marks(db: sqlite3.Connection) -> None:
    """Version 6 marks a queued QoS 1 message sent to its client with its packet id: the row
    stays until the PUBACK instead of moving to an in-flight row (the message written twice)."""
    db.execute("ALTER TABLE queued_message ADD COLUMN packet_id INTEGER")


_MIGRATIONS = {1: _subscriptions_to_rows, 2: _versions, 3: _identities, 4: _taken,
               5: _sent_marks}
"""From a schema version to the next one, run inside the opening transaction."""


def load(db: sqlite3.Connection, now: float) -> Snapshot:
    """Read everything, after deleting queued and retained messages that expired before ``now``.

    In-flight messages are kept even when expired: their delivery has started and must finish.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        # (a queued message marked sent is in flight: its delivery must finish)
        db.execute("DELETE FROM queued_message WHERE expiry_at < ? AND packet_id IS NULL", (now,))
        db.execute("DELETE FROM retained_message WHERE expiry_at < ?", (now,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    snapshot = Snapshot()
    for client_id, version, expiry, disconnected_at in db.execute(
        "SELECT client_id, protocol_version, expiry_interval, disconnected_at FROM session"
    ):
        snapshot.sessions[client_id] = StoredSession(client_id, version, expiry, disconnected_at)
    for client_id, topic_filter, qos, no_local, rap, handling, sub_id in db.execute(
        "SELECT * FROM subscription ORDER BY rowid"
    ):
        session = snapshot.sessions.get(client_id)
        if session is not None:
            session.subscriptions[topic_filter] = StoredSubscription(
                topic_filter, qos, bool(no_local), bool(rap), handling, sub_id)
    for client_id, seq, packet_id, *message in db.execute(
        f"SELECT client_id, seq, packet_id, {_QUEUED_COLUMNS} FROM queued_message"
        " ORDER BY client_id, seq"
    ):
        snapshot.queues.setdefault(client_id, []).append((seq, _message(message)))
        if packet_id is not None:
            snapshot.sent.setdefault(client_id, {})[seq] = packet_id
    for client_id, packet_id, direction, state, *message in db.execute(
        f"SELECT client_id, packet_id, direction, state, {_QUEUED_COLUMNS}"
        " FROM inflight ORDER BY rowid"
    ):
        snapshot.inflight.setdefault(client_id, []).append(
            StoredInflight(
                client_id,
                packet_id,
                cast(Direction, direction),
                state,
                None if message[0] is None else _message(message),
            )
        )
    for message in db.execute(f"SELECT {_MESSAGE_COLUMNS} FROM retained_message"):
        stored = _message(message)
        snapshot.retained[stored.topic] = stored
    for client_id, origin, serial in db.execute(
            "SELECT client_id, origin, serial FROM taken ORDER BY rowid"):
        snapshot.taken.setdefault(client_id, []).append((origin, serial))
    return snapshot


def write(db: sqlite3.Connection, batch: PendingBatch, version: int) -> int:
    """Write one batch in one transaction; return the number of rows written or deleted.

    ``version`` (ns since the epoch, above every earlier one) stamps the retained messages
    written and the session of every client the batch touches, whatever part of it changed.
    """
    rows = 0

    def run(sql: str, params: Iterable[tuple[Any, ...]]) -> None:
        nonlocal rows
        rows += db.executemany(sql, params).rowcount

    db.execute("BEGIN IMMEDIATE")
    try:
        purged = [(client_id,) for client_id in batch.purged]
        run("DELETE FROM queued_message WHERE client_id = ?", purged)
        run("DELETE FROM inflight WHERE client_id = ?", purged)
        run("DELETE FROM taken WHERE client_id = ?", purged)
        run(
            "DELETE FROM session WHERE client_id = ?",
            ((c,) for c, s in batch.sessions.items() if s is None),
        )
        # a whole session replaces every subscription it had
        run("DELETE FROM subscription WHERE client_id = ?", ((c,) for c in batch.sessions))
        run(
            "INSERT OR REPLACE INTO session VALUES (?, ?, ?, ?, ?)",
            ((*_session_row(s), version) for s in batch.sessions.values() if s is not None),
        )
        run(
            "INSERT OR REPLACE INTO subscription VALUES (?, ?, ?, ?, ?, ?, ?)",
            (_subscription_row(s.client_id, sub) for s in batch.sessions.values()
             if s is not None for sub in s.subscriptions.values()),
        )
        run(
            "DELETE FROM subscription WHERE client_id = ? AND topic_filter = ?",
            ((c, f) for c, subs in batch.subscriptions.items()
             for f, sub in subs.items() if sub is None),
        )
        run(  # a subscription outlives no session: none is written for a session not stored
            "INSERT OR REPLACE INTO subscription SELECT ?, ?, ?, ?, ?, ?, ?"
            " WHERE EXISTS (SELECT 1 FROM session WHERE client_id = ?)",
            ((*_subscription_row(c, sub), c) for c, subs in batch.subscriptions.items()
             for sub in subs.values() if sub is not None),
        )
        _write_queues(run, batch)
        run(
            "DELETE FROM inflight WHERE client_id = ? AND packet_id = ? AND direction = ?",
            (
                (c, packet_id, direction)
                for c, exchanges in batch.inflight.items()
                for (packet_id, direction), w in exchanges.items()
                if w.inflight is None or w.replace
            ),
        )
        run(
            "INSERT INTO inflight VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (client_id, packet_id, direction) DO UPDATE SET"
            " state = excluded.state, topic = excluded.topic, payload = excluded.payload,"
            " qos = excluded.qos, retain = excluded.retain, properties = excluded.properties,"
            " expiry_at = excluded.expiry_at, publisher_id = excluded.publisher_id,"
            " origin = excluded.origin, serial = excluded.serial",
            (
                _inflight_row(w.inflight)
                for exchanges in batch.inflight.values()
                for w in exchanges.values()
                if w.inflight is not None
            ),
        )
        run(
            "DELETE FROM retained_message WHERE topic = ?",
            ((t,) for t, m in batch.retained.items() if m is None),
        )
        run(
            "INSERT OR REPLACE INTO retained_message VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ((*_message_row(m), version) for m in batch.retained.values() if m is not None),
        )
        run("INSERT INTO taken VALUES (?, ?, ?)",
            ((c, origin, serial) for c, identities in batch.taken.items()
             for origin, serial in identities))
        touched = (batch.subscriptions.keys() | batch.queues.keys() | batch.inflight.keys()
                   | batch.purged) - batch.sessions.keys()
        db.executemany("UPDATE session SET version = ? WHERE client_id = ?",
                       ((version, c) for c in touched))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return rows


def _write_queues(run: Callable[[str, Iterable[tuple[Any, ...]]], None],
                  batch: PendingBatch) -> None:
    """Queued messages: deleted, written (with the packet id of one sent at once), marked sent."""
    run(
        "DELETE FROM queued_message WHERE client_id = ? AND seq = ?",
        ((c, seq) for c, seq, w in _queue_writes(batch)
         if w.message is None and w.packet_id is None),
    )
    run(
        "INSERT OR REPLACE INTO queued_message VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ((c, seq, *_queued_row(w.message), w.packet_id)
         for c, seq, w in _queue_writes(batch) if w.message is not None),
    )
    run(
        "UPDATE queued_message SET packet_id = ? WHERE client_id = ? AND seq = ?",
        ((w.packet_id, c, seq) for c, seq, w in _queue_writes(batch)
         if w.message is None and w.packet_id is not None),
    )


def prune_taken(db: sqlite3.Connection, client_id: str, keep: int) -> None:
    """Only the newest ``keep`` identities of ``client_id`` stay."""
    db.execute("DELETE FROM taken WHERE client_id = ? AND rowid < (SELECT rowid FROM taken"
               " WHERE client_id = ? ORDER BY rowid DESC LIMIT 1 OFFSET ?)",
               (client_id, client_id, keep - 1))


def _queue_writes(batch: PendingBatch) -> Iterator[tuple[str, int, Any]]:
    for client_id, writes in batch.queues.items():
        for seq, write in writes.items():
            yield client_id, seq, write


def _message_row(m: StoredMessage) -> tuple[Any, ...]:
    return (m.topic, m.payload, m.qos, int(m.retain), m.properties, m.expiry_at, m.publisher_id)


def _queued_row(m: StoredMessage) -> tuple[Any, ...]:
    return (*_message_row(m), m.origin, m.serial)


def _message(row: Any) -> StoredMessage:
    topic, payload, qos, retain, properties, expiry_at, publisher_id, *identity = row
    return StoredMessage(topic, payload, qos, bool(retain), properties, expiry_at, publisher_id,
                         *identity)


def _inflight_row(i: StoredInflight) -> tuple[Any, ...]:
    message = (None,) * 7 + ("", 0) if i.message is None else _queued_row(i.message)
    return (i.client_id, i.packet_id, i.direction, i.state, *message)


def _session_row(s: StoredSession) -> tuple[Any, ...]:
    return (s.client_id, s.protocol_version, s.expiry_interval, s.disconnected_at)


def _subscription_row(client_id: str, sub: StoredSubscription) -> tuple[Any, ...]:
    return (client_id, sub.topic_filter, sub.qos, int(sub.no_local),
            int(sub.retain_as_published), sub.retain_handling, sub.subscription_id)


def _decode_subscriptions(text: str) -> dict[str, StoredSubscription]:
    """The JSON column of schema version 1."""
    return {key: StoredSubscription(*fields) for key, *fields in json.loads(text)}
