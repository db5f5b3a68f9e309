"""FileSessionStore: what goes in comes back after a restart, in as few transactions as possible."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from pathlib import Path

import anyio
import pytest
from growth import LINEAR_AT_MOST, growth_async

import hive_ext_api as api
from hive_core.persistence import (
    FileSessionStore,
    MemorySessionStore,
    _acknowledging,
    _file_store,
    _sqlite_schema,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]


def message(topic: str = "t", payload: bytes = b"p", **kwargs: object) -> api.StoredMessage:
    return api.StoredMessage(topic, payload, 1, **kwargs)  # type: ignore[arg-type]


def session(client_id: str = "c1", **kwargs: object) -> api.StoredSession:
    return api.StoredSession(client_id, 5, 3600, **kwargs)  # type: ignore[arg-type]


async def reopen(store: FileSessionStore) -> tuple[FileSessionStore, api.Snapshot]:
    await store.close()
    again = FileSessionStore(store.path.parent.parent, sync=False)
    return again, await again.open()


async def test_every_record_kind_round_trips(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    assert await store.open() == api.Snapshot()
    subscriptions = {
        "a/+": api.StoredSubscription("a/+", 1),
        "$share/g/b/#": api.StoredSubscription("$share/g/b/#", 2, True, True, 2, 7),
    }
    alice = session("alice", disconnected_at=1234.5, subscriptions=subscriptions)
    bob = api.StoredSession("bob", 4, 0xFFFFFFFF)
    full = api.StoredMessage("a/ü", b"\x00\xff" * 50, 2, True, b"\x01\x02", 4e9, "pub")
    publish = api.StoredInflight("alice", 1, "out", "publish", full)
    pubrel = api.StoredInflight("alice", 2, "out", "pubrel", None)
    pubrec = api.StoredInflight("alice", 2, "in", "pubrec")
    store.save_session(alice)
    store.save_session(bob)
    store.enqueue("alice", 2, message("q2"))
    store.enqueue("alice", 1, full)
    store.enqueue("bob", 1, message("q1", b""))
    for inflight in (publish, pubrel, pubrec):
        store.save_inflight(inflight)
    store.save_retained(api.StoredMessage("r/1", b"kept", 1, True))
    await store.commit()

    store, loaded = await reopen(store)
    assert loaded == api.Snapshot(
        sessions={"alice": alice, "bob": bob},
        queues={"alice": [(1, full), (2, message("q2"))], "bob": [(1, message("q1", b""))]},
        inflight={"alice": [publish, pubrel, pubrec]},
        retained={"r/1": api.StoredMessage("r/1", b"kept", 1, True)},
    )
    await store.close()


async def test_deletes_survive_a_restart(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()
    store.save_session(session("c1"))
    store.save_session(session("c2"))
    for seq in range(3):
        store.enqueue("c1", seq, message(f"q{seq}"))
        store.enqueue("c2", seq, message(f"q{seq}"))
    store.save_inflight(api.StoredInflight("c1", 1, "out", "publish", message()))
    store.save_inflight(api.StoredInflight("c1", 1, "in", "pubrec"))
    store.save_inflight(api.StoredInflight("c2", 1, "out", "publish", message()))
    store.save_retained(message("r/1"))
    store.save_retained(message("r/2"))
    await store.commit()

    store.dequeue("c1", 1)
    store.delete_inflight("c1", 1, "in")
    store.delete_retained("r/1")
    store.delete_session("c2")  # also its queue and in-flight exchanges
    store, loaded = await reopen(store)  # close() flushes without an explicit commit

    assert loaded.sessions == {"c1": session("c1")}
    assert loaded.queues == {"c1": [(0, message("q0")), (2, message("q2"))]}
    assert loaded.inflight == {"c1": [api.StoredInflight("c1", 1, "out", "publish", message())]}
    assert loaded.retained == {"r/2": message("r/2")}
    await store.close()


async def test_writes_after_delete_session_in_the_same_batch_survive(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()
    store.save_session(session("c1"))
    store.enqueue("c1", 1, message("old"))
    await store.commit()
    store.enqueue("c1", 2, message("old too"))
    store.delete_session("c1")
    store.save_session(session("c1", disconnected_at=9.0))
    store.enqueue("c1", 1, message("new"))
    store.save_inflight(api.StoredInflight("c1", 5, "in", "pubrec"))
    store, loaded = await reopen(store)
    assert loaded.sessions == {"c1": session("c1", disconnected_at=9.0)}
    assert loaded.queues == {"c1": [(1, message("new"))]}
    assert loaded.inflight == {"c1": [api.StoredInflight("c1", 5, "in", "pubrec")]}
    await store.close()


async def test_retained_overwrite_keeps_the_last(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()
    store.save_retained(message("r", b"1"))
    await store.commit()
    store.save_retained(message("r", b"2"))
    store.save_retained(message("r", b"3"))
    store.save_retained(message("gone", b"x"))
    store.delete_retained("gone")
    store, loaded = await reopen(store)
    assert loaded.retained == {"r": message("r", b"3")}
    await store.close()


async def test_expired_messages_are_dropped_on_load(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()
    past, future = time.time() - 60, time.time() + 3600
    store.enqueue("c1", 1, message("stale", expiry_at=past))
    store.enqueue("c1", 2, message("fresh", expiry_at=future))
    store.enqueue("c1", 3, message("forever"))
    store.save_retained(message("r/stale", expiry_at=past))
    store.save_retained(message("r/fresh", expiry_at=future))
    # Delivery already started: an expired in-flight message must still be re-sent.
    store.save_inflight(api.StoredInflight("c1", 1, "out", "publish", message(expiry_at=past)))
    store, loaded = await reopen(store)
    assert [seq for seq, _ in loaded.queues["c1"]] == [2, 3]
    assert list(loaded.retained) == ["r/fresh"]
    assert len(loaded.inflight["c1"]) == 1
    await store.close()
    with sqlite3.connect(store.path) as db:  # dropped from disk too, not just from the snapshot
        assert db.execute("SELECT count(*) FROM queued_message").fetchone() == (2,)


async def test_inflight_keeps_the_order_exchanges_started(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()
    for packet_id in (7, 3, 5):
        store.save_inflight(api.StoredInflight("c1", packet_id, "out", "publish", message()))
    await store.commit()
    # The same exchange keeps its place; a new one goes last.
    store.save_inflight(api.StoredInflight("c1", 7, "out", "pubrel"))
    store.delete_inflight("c1", 3, "out")
    store.save_inflight(api.StoredInflight("c1", 3, "out", "publish", message()))
    store.save_inflight(api.StoredInflight("c1", 1, "out", "publish", message()))
    store, loaded = await reopen(store)
    assert [(i.packet_id, i.state) for i in loaded.inflight["c1"]] == [
        (7, "pubrel"),
        (5, "publish"),
        (3, "publish"),
        (1, "publish"),
    ]
    await store.close()


async def test_group_commit_writes_a_thousand_enqueues_in_one_transaction(tmp_path: Path) -> None:
    # A long interval, so the background flush cannot split the batch on a slow machine.
    store = FileSessionStore(tmp_path, commit_interval=30)
    await store.open()
    started = time.perf_counter()
    for seq in range(1000):
        store.enqueue("c1", seq, message(payload=b"x" * 100))
    await store.commit()
    elapsed = time.perf_counter() - started
    assert store.stats.transactions == 1
    assert store.stats.rows == 1000
    assert elapsed < 2.0
    await store.commit()  # nothing pending: returns at once, no transaction
    assert store.stats.transactions == 1
    await store.close()


async def test_concurrent_commits_share_transactions(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()

    async def publish(seq: int) -> None:
        store.enqueue("c1", seq, message())
        await store.commit()

    async with anyio.create_task_group() as tg:
        for seq in range(50):
            tg.start_soon(publish, seq)
    assert 1 <= store.stats.transactions < 25
    store, loaded = await reopen(store)
    assert len(loaded.queues["c1"]) == 50
    await store.close()


async def test_enqueue_then_dequeue_in_one_batch_writes_nothing(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, commit_interval=30)
    await store.open()
    for seq in range(100):
        store.enqueue("c1", seq, message())
        store.dequeue("c1", seq)
    await store.commit()
    assert (store.stats.transactions, store.stats.rows) == (0, 0)
    for _ in range(10):
        store.save_session(session("c1"))
    await store.commit()
    assert (store.stats.transactions, store.stats.rows) == (1, 1)
    await store.close()


async def test_dequeue_of_a_rewritten_stored_seq_still_deletes_it(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, commit_interval=30)
    await store.open()
    store.enqueue("c1", 1, message("first"))
    await store.commit()
    store.enqueue("c1", 1, message("second"))  # same seq again: the row is on disk already
    store.dequeue("c1", 1)
    store, loaded = await reopen(store)
    assert loaded.queues == {}
    await store.close()


async def test_a_delivery_acknowledged_before_the_commit_writes_nothing(tmp_path: Path) -> None:
    """An exchange saved and deleted in one batch (the subscriber acknowledged it before the
    group commit) costs neither an insert nor a delete; one whose row may be on disk (loaded,
    or in an earlier batch) is still deleted, and so is one reopened on a packet id whose
    earlier exchange is still stored."""
    store = FileSessionStore(tmp_path, commit_interval=30)
    await store.open()
    for packet_id in range(1, 101):
        store.save_inflight(api.StoredInflight("c1", packet_id, "out", "publish", message()))
        store.delete_inflight("c1", packet_id, "out")
    await store.commit()
    assert (store.stats.transactions, store.stats.rows) == (0, 0)
    store.save_inflight(api.StoredInflight("c1", 1, "out", "publish", message("kept")))
    store.save_inflight(api.StoredInflight("c1", 2, "out", "publish", message("kept")))
    store.save_inflight(api.StoredInflight("c1", 3, "in", "pubrec"))
    await store.commit()
    store.save_inflight(api.StoredInflight("c1", 1, "out", "pubrel", None))  # on disk: an update
    store.delete_inflight("c1", 1, "out")
    store.delete_inflight("c1", 2, "out")  # its packet id used again at once
    store.save_inflight(api.StoredInflight("c1", 2, "out", "publish", message("again")))
    store, loaded = await reopen(store)
    assert loaded.inflight == {"c1": [
        api.StoredInflight("c1", 3, "in", "pubrec"),
        api.StoredInflight("c1", 2, "out", "publish", message("again"))]}
    store.save_inflight(api.StoredInflight("c1", 3, "in", "pubrec"))  # loaded: on disk
    store.delete_inflight("c1", 3, "in")
    store.delete_inflight("c1", 2, "out")
    store, loaded = await reopen(store)
    assert loaded.inflight == {}
    await store.close()


async def test_writes_without_commit_are_flushed_in_the_background(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, commit_interval=0.01)
    await store.open()
    store.enqueue("c1", 1, message())
    with anyio.fail_after(5):
        while store.stats.transactions == 0:
            await anyio.sleep(0.005)
    await store.close()


async def test_a_failed_commit_raises_is_logged_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_write = _sqlite_schema.write
    failures = [sqlite3.OperationalError("disk I/O error")]

    def flaky_write(db: sqlite3.Connection, batch: object, version: int) -> int:
        if failures:
            raise failures.pop()
        return real_write(db, batch, version)  # type: ignore[arg-type]

    monkeypatch.setattr(_sqlite_schema, "write", flaky_write)
    store = FileSessionStore(tmp_path, commit_interval=30)
    await store.open()
    store.enqueue("c1", 1, message("one"))
    with caplog.at_level(logging.ERROR), pytest.raises(api.PersistenceError) as failed:
        await store.commit()
    assert isinstance(failed.value.__cause__, sqlite3.OperationalError)
    assert "could not commit a batch" in caplog.text
    assert store.stats.failures == 1

    store.enqueue("c1", 2, message("two"))
    await store.commit()  # retries the failed batch together with the new write
    assert store.stats.transactions == 1
    store, loaded = await reopen(store)
    assert loaded.queues == {"c1": [(1, message("one")), (2, message("two"))]}
    await store.close()


async def test_close_reports_a_batch_it_could_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_write(db: sqlite3.Connection, batch: object, version: int) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    store = FileSessionStore(tmp_path)
    await store.open()
    monkeypatch.setattr(_sqlite_schema, "write", broken_write)
    store.enqueue("c1", 1, message())
    with pytest.raises(api.PersistenceError):
        await store.close()
    with pytest.raises(api.PersistenceError):
        store.enqueue("c1", 2, message())


async def test_a_cancelled_commit_leaves_the_store_working(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()
    store.enqueue("c1", 1, message())
    with anyio.move_on_after(0):
        await store.commit()
    store.enqueue("c1", 2, message())
    await store.commit()
    store, loaded = await reopen(store)
    assert [seq for seq, _ in loaded.queues["c1"]] == [1, 2]
    await store.close()


async def test_misuse_is_refused(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    with pytest.raises(api.PersistenceError):
        store.save_retained(message())  # not open yet
    await store.open()
    with pytest.raises(api.PersistenceError):
        await store.open()
    await store.close()
    await store.close()  # closing twice is harmless
    with pytest.raises(api.PersistenceError):
        await store.commit()


async def test_a_database_from_another_schema_version_is_refused(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()
    await store.close()
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(api.PersistenceError, match="schema version 99"):
        await FileSessionStore(tmp_path).open()


async def test_a_version_1_database_is_migrated_with_its_subscriptions(tmp_path: Path) -> None:
    """Version 1 kept a session's subscriptions in one JSON column, rewritten on each SUBSCRIBE."""
    store = FileSessionStore(tmp_path)
    await store.open()
    await store.close()
    with sqlite3.connect(store.path) as db:  # the version 1 layout, as Hive 1.0 wrote it
        db.execute("ALTER TABLE queued_message DROP COLUMN packet_id")  # added by version 6
        db.execute("DROP TABLE taken")  # added by version 5
        db.execute("DROP TABLE subscription")
        for table in ("session", "retained_message"):  # added by version 3
            db.execute(f"ALTER TABLE {table} DROP COLUMN version")
        for table in ("queued_message", "inflight"):  # added by version 4
            db.execute(f"ALTER TABLE {table} DROP COLUMN origin")
            db.execute(f"ALTER TABLE {table} DROP COLUMN serial")
        db.execute("ALTER TABLE session ADD COLUMN subscriptions TEXT NOT NULL DEFAULT ''")
        db.execute("UPDATE schema_version SET version = 1")
        db.execute(
            "INSERT INTO session VALUES ('c1', 5, 3600, NULL, ?)",
            ('[["a/+","a/+",1,false,false,0,null],["$share/g/b","$share/g/b",2,false,true,1,7]]',),
        )
    migrated = FileSessionStore(tmp_path, sync=False)
    snapshot = await migrated.open()
    assert snapshot.sessions["c1"].subscriptions == {
        "a/+": api.StoredSubscription("a/+", 1),
        "$share/g/b": api.StoredSubscription("$share/g/b", 2, False, True, 1, 7),
    }
    migrated.delete_subscription("c1", "a/+")
    reopened, again = await reopen(migrated)
    await reopened.close()
    assert list(again.sessions["c1"].subscriptions) == ["$share/g/b"]
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT max(version) FROM schema_version").fetchone() == (6,)
        assert db.execute("SELECT version FROM session").fetchone()[0] > 0  # stamped by the write


async def test_queued_and_in_flight_messages_keep_their_cluster_identity(tmp_path: Path) -> None:
    """Schema 4: a session restored from disk knows which messages it holds, by identity, so
    that a copy of one (a merge after a split, a rescue) is not taken a second time."""
    store = FileSessionStore(tmp_path, sync=False)
    await store.open()
    store.save_session(api.StoredSession("c1", 5, 3600))
    store.enqueue("c1", 1, api.StoredMessage("t", b"q", 2, origin="n2", serial=41))
    store.enqueue("c1", 2, api.StoredMessage("t", b"plain", 1))
    store.save_inflight(api.StoredInflight("c1", 7, "out", "publish",
                                           api.StoredMessage("t", b"f", 2, origin="n3", serial=9)))
    await store.commit()
    reopened, snapshot = await reopen(store)
    await reopened.close()
    queue = dict(snapshot.queues["c1"])
    assert (queue[1].origin, queue[1].serial) == ("n2", 41)
    assert (queue[2].origin, queue[2].serial) == ("", 0)
    flight = snapshot.inflight["c1"][0].message
    assert flight is not None and (flight.origin, flight.serial) == ("n3", 9)


async def test_the_identities_of_completed_qos2_deliveries_are_kept_newest_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Schema 5: what remember_taken kept comes back in order, goes with the session, and
    only the newest TAKEN_KEEP per client stay (pruned past the slack, not at every commit)."""
    monkeypatch.setattr(_file_store, "TAKEN_KEEP", 5)
    monkeypatch.setattr(_file_store, "TAKEN_SLACK", 2)
    store = FileSessionStore(tmp_path, sync=False)
    await store.open()
    for client_id in ("c1", "c2"):
        store.save_session(api.StoredSession(client_id, 5, 3600))
    for serial in range(1, 8):
        store.remember_taken("c1", "n2", serial)
        await store.commit()
    store.remember_taken("c2", "n3", 1)
    await store.commit()
    reopened, snapshot = await reopen(store)
    assert snapshot.taken["c1"] == [("n2", n) for n in range(1, 8)]  # 7: within the slack
    reopened.remember_taken("c1", "n2", 8)  # 8 > 5 + 2: the oldest go
    reopened.delete_session("c2")
    await reopened.commit()
    again, snapshot = await reopen(reopened)
    await again.close()
    assert snapshot.taken == {"c1": [("n2", n) for n in range(4, 9)]}


async def test_a_version_4_database_is_migrated_with_nothing_taken(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()
    await store.close()
    with sqlite3.connect(store.path) as db:  # the version 4 layout
        db.execute("ALTER TABLE queued_message DROP COLUMN packet_id")
        db.execute("DROP TABLE taken")
        db.execute("UPDATE schema_version SET version = 4")
        db.execute("INSERT INTO session VALUES ('c1', 5, 3600, NULL, 1)")
    migrated = FileSessionStore(tmp_path, sync=False)
    snapshot = await migrated.open()
    assert snapshot.taken == {} and "c1" in snapshot.sessions
    migrated.remember_taken("c1", "n1", 3)
    reopened, snapshot = await reopen(migrated)
    await reopened.close()
    assert snapshot.taken == {"c1": [("n1", 3)]}
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT max(version) FROM schema_version").fetchone() == (6,)


async def test_a_version_3_database_is_migrated_with_messages_without_identity(
        tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path)
    await store.open()
    await store.close()
    with sqlite3.connect(store.path) as db:  # the version 3 layout
        db.execute("ALTER TABLE queued_message DROP COLUMN packet_id")  # added by version 6
        db.execute("DROP TABLE taken")  # added by version 5
        for table in ("queued_message", "inflight"):
            db.execute(f"ALTER TABLE {table} DROP COLUMN origin")
            db.execute(f"ALTER TABLE {table} DROP COLUMN serial")
        db.execute("UPDATE schema_version SET version = 3")
        db.execute("INSERT INTO session VALUES ('c1', 5, 3600, NULL, 1)")
        db.execute("INSERT INTO queued_message VALUES ('c1', 1, 't', x'71', 1, 0, x'', NULL, '')")
    migrated = FileSessionStore(tmp_path, sync=False)
    snapshot = await migrated.open()
    await migrated.close()
    (seq, message), = snapshot.queues["c1"]
    assert (seq, message.payload, message.origin, message.serial) == (1, b"q", "", 0)
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT max(version) FROM schema_version").fetchone() == (6,)


async def test_the_database_lives_in_the_data_folder_in_wal_mode(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path / "data")
    await store.open()
    await store.close()
    assert store.path == tmp_path / "data" / "persistence" / "sessions.db"
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_writes_made_while_a_batch_fails_are_retried_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = _sqlite_schema.write
    entered, resume = threading.Event(), threading.Event()
    armed: list[bool] = []

    def failing_write(db: sqlite3.Connection, batch: object, version: int) -> int:
        if armed and armed.pop():
            entered.set()
            resume.wait(5)
            raise sqlite3.OperationalError("disk I/O error")
        return real_write(db, batch, version)  # type: ignore[arg-type]

    monkeypatch.setattr(_sqlite_schema, "write", failing_write)
    file, memory = FileSessionStore(tmp_path, commit_interval=30), MemorySessionStore()
    await file.open()

    def both(method: str, *args: object) -> None:
        getattr(file, method)(*args)
        getattr(memory, method)(*args)

    for packet_id in (1, 2, 3):
        both("save_inflight", api.StoredInflight("c1", packet_id, "out", "publish", message()))
    both("enqueue", "c1", 1, message("one"))
    both("save_retained", message("r", b"old"))
    await file.commit()

    # The failing batch: exchange 1 starts again (moves last), 3 ends, seq 1 goes, seq 2 comes.
    both("delete_inflight", "c1", 1, "out")
    both("save_inflight", api.StoredInflight("c1", 1, "out", "publish", message("again")))
    both("delete_inflight", "c1", 3, "out")
    both("dequeue", "c1", 1)
    both("enqueue", "c1", 2, message("two"))
    armed.append(True)
    async with anyio.create_task_group() as tg:

        async def failed_commit() -> None:
            with pytest.raises(api.PersistenceError):
                await file.commit()

        tg.start_soon(failed_commit)
        await anyio.to_thread.run_sync(entered.wait, 5)
        # Meanwhile: later writes to the same keys, and to new ones.
        both("save_inflight", api.StoredInflight("c1", 1, "out", "pubrel"))
        both("delete_inflight", "c1", 2, "out")
        both("save_inflight", api.StoredInflight("c1", 3, "out", "publish", message("later")))
        both("enqueue", "c1", 3, message("three"))
        both("dequeue", "c1", 2)
        both("send_queued", "c1", 1, 9)  # a mark on the row the failing batch deletes: none
        both("save_retained", message("r", b"new"))
        both("save_session", session("c1"))
        resume.set()
    await file.commit()
    file, loaded = await reopen(file)
    assert loaded == memory.contents()
    assert [i.packet_id for i in loaded.inflight["c1"]] == [1, 3]
    await file.close()


async def test_a_queued_message_sent_keeps_its_row_marked_with_its_packet_id(
        tmp_path: Path) -> None:
    """API 1.8: a QoS 1 delivery stays in its queue row, marked, until its PUBACK dequeues it;
    the mark comes back after a restart, and an expired message that was sent is kept."""
    store = FileSessionStore(tmp_path, sync=False)
    await store.open()
    store.save_session(session())
    store.enqueue("c1", 1, message("sent-later"))
    store.enqueue("c1", 2, message("expired-sent", expiry_at=1.0))
    store.enqueue("c1", 3, message("expired-queued", expiry_at=1.0))
    store.enqueue("c1", 4, message("sent-at-once"))
    store.send_queued("c1", 4, 7)  # in the batch of its insert: one row, marked
    await store.commit()
    rows = store.stats.rows
    store.send_queued("c1", 1, 5)
    store.send_queued("c1", 2, 6)
    await store.commit()
    assert store.stats.rows - rows == 2  # two updates; the messages are not written again
    store.enqueue("c1", 5, message("acknowledged-before-the-commit"))
    store.send_queued("c1", 5, 8)
    store.dequeue("c1", 5)
    rows = store.stats.rows
    await store.commit()
    assert store.stats.rows == rows  # enqueued, sent and acknowledged in one batch: nothing
    store, loaded = await reopen(store)
    assert [(seq, m.topic) for seq, m in loaded.queues["c1"]] == [
        (1, "sent-later"), (2, "expired-sent"), (4, "sent-at-once")]
    assert loaded.sent == {"c1": {1: 5, 2: 6, 4: 7}}
    store.dequeue("c1", 1)
    store.enqueue("c1", 4, message("queued-again"))  # a new write of the row drops its mark
    store, loaded = await reopen(store)
    await store.close()
    assert loaded.sent == {"c1": {2: 6}}
    assert [seq for seq, _m in loaded.queues["c1"]] == [2, 4]


# ------------------------------------------------------------ deliveries held for their PUBACK


def as_after_a_crash(store: FileSessionStore) -> api.Snapshot:
    """What a node killed now would load: the database as it is, read through a copy."""
    crashed = sqlite3.connect(":memory:")
    with contextlib.closing(crashed), contextlib.closing(sqlite3.connect(store.path)) as live:
        live.backup(crashed)
        return _sqlite_schema.load(crashed, time.time())


async def commit_in_background(store: FileSessionStore, tg: anyio.abc.TaskGroup) -> anyio.Event:
    done = anyio.Event()

    async def commit() -> None:
        await store.commit()
        done.set()

    tg.start_soon(commit)
    await anyio.sleep(0)  # the commit is counted before anything written after this
    return done


async def test_a_delivery_acknowledged_within_the_hold_is_never_written(tmp_path: Path) -> None:
    """A QoS 1 delivery sent at once stays out of the batches while its PUBACK may come: the
    PUBACK cancels its row, and a commit waiting for it returns then, not after the hold."""
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=30)
    await store.open()
    store.save_session(session())
    await store.commit()
    rows = store.stats.rows
    async with anyio.create_task_group() as tg:
        for seq in range(1, 101):
            store.enqueue("c1", seq, message(f"m{seq}"))
            store.send_queued("c1", seq, seq)
        done = await commit_in_background(store, tg)
        await anyio.sleep(0.2)
        assert not done.is_set()  # the publishers' acknowledgements wait for the deliveries
        for seq in range(1, 100):
            store.dequeue("c1", seq)
        await anyio.sleep(0.1)
        assert not done.is_set()  # one is left
        store.dequeue("c1", 100)
        with anyio.fail_after(5):
            await done.wait()
    assert (store.stats.rows, store.stats.spared) == (rows, 100)
    store, loaded = await reopen(store)
    await store.close()
    assert loaded.queues == {} and loaded.sent == {}


async def test_a_delivery_not_acknowledged_in_time_is_written_marked(tmp_path: Path) -> None:
    """Past the hold the row is written, marked with its packet id, and so is what was queued
    behind it for the same client; the commit waiting for them returns once they are on disk."""
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=0.2)
    await store.open()
    store.save_session(session())
    store.enqueue("c1", 1, message("sent"))
    store.send_queued("c1", 1, 9)
    store.enqueue("c1", 2, message("queued behind it"))  # held too: its client is acknowledging
    begun = time.monotonic()
    await store.commit()
    assert time.monotonic() - begun >= 0.2
    assert store.stats.spared == 0
    store, loaded = await reopen(store)
    await store.close()
    assert [(seq, m.topic) for seq, m in loaded.queues["c1"]] == [
        (1, "sent"), (2, "queued behind it")]
    assert loaded.sent == {"c1": {1: 9}}


async def test_what_is_queued_for_a_client_not_being_sent_to_is_not_held(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=30)
    await store.open()
    store.save_session(session("offline"))
    store.enqueue("offline", 1, message())
    with anyio.fail_after(5):  # not 30 s
        await store.commit()
    assert store.stats.rows == 2
    await store.close()


async def test_a_client_too_slow_for_the_hold_gets_its_rows_written_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a held delivery ran out of time, its client's next ones are written as they come
    (for HOLD_PAUSE): holding them would only delay their publishers' acknowledgements."""
    monkeypatch.setattr(_acknowledging, "HOLD_PAUSE", 30.0)
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=0.5)
    await store.open()
    store.enqueue("slow", 1, message())
    store.send_queued("slow", 1, 1)
    await store.commit()  # after the hold
    assert (store.stats.late, store.stats.paused) == (1, 1)
    rows = store.stats.rows
    store.enqueue("slow", 2, message())
    store.send_queued("slow", 2, 2)
    with anyio.fail_after(0.4):  # shorter than the hold: written, not held
        await store.commit()
    assert store.stats.rows == rows + 1
    store.enqueue("fast", 1, message())
    store.send_queued("fast", 1, 1)
    store.dequeue("fast", 1)
    assert store.stats.spared == 1  # another client is still held
    await store.close()


async def test_a_session_deleted_with_held_deliveries_leaves_nothing(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=30)
    await store.open()
    store.save_session(session())
    await store.commit()
    store.enqueue("c1", 1, message())
    store.send_queued("c1", 1, 1)
    store.delete_session("c1")
    with anyio.fail_after(5):  # the held delivery went with the session: nothing to wait for
        await store.commit()
    store, loaded = await reopen(store)
    await store.close()
    assert (loaded.sessions, loaded.queues, loaded.sent) == ({}, {}, {})


async def test_close_writes_the_held_deliveries(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=30)
    await store.open()
    store.save_session(session())
    store.enqueue("c1", 1, message("in flight"))
    store.send_queued("c1", 1, 4)
    with anyio.fail_after(5):
        await store.close()
    store, loaded = await reopen(store)
    await store.close()
    assert [m.topic for _seq, m in loaded.queues["c1"]] == ["in flight"]
    assert loaded.sent == {"c1": {1: 4}}


async def test_a_commit_waiting_only_for_a_held_delivery_returns_after_the_hold(
        tmp_path: Path) -> None:
    """The writer, asleep until the pending batch's (long) commit interval, still writes a held
    delivery once its hold is over."""
    store = FileSessionStore(tmp_path, sync=False, commit_interval=3600, delivery_hold=0.05)
    await store.open()
    store.enqueue("c1", 1, message())
    await anyio.sleep(0.1)  # the writer goes back to sleep, until the commit interval is over
    store.send_queued("c1", 1, 1)  # out of the pending batch, which is empty now
    with anyio.fail_after(5):
        await store.commit()
    await store.close()


async def test_what_is_held_for_a_paused_client_is_written_with_its_late_delivery(
        tmp_path: Path) -> None:
    """When a client's held delivery runs out of time, what is held behind it for the same
    client is written in the same batch: the disk never has a later message of a queue without
    an earlier one, and the next ones are written as they come."""
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=0.3)
    await store.open()
    store.enqueue("c1", 1, message("one"))
    store.send_queued("c1", 1, 1)
    await anyio.sleep(0.1)
    store.enqueue("c1", 2, message("two"))  # held behind it, for another 0.3 s
    with anyio.fail_after(5):
        await store.commit()  # returns once "one" ran out of time, with "two" written too
    assert (store.stats.late, store.stats.paused) == (1, 1)
    rows = store.stats.rows
    assert rows == 2
    store.enqueue("c1", 3, message("three"))  # paused: written as it comes
    await store.commit()
    assert store.stats.rows == rows + 1
    store, loaded = await reopen(store)
    await store.close()
    assert [m.topic for _seq, m in loaded.queues["c1"]] == ["one", "two", "three"]
    assert loaded.sent == {"c1": {1: 1}}


async def test_the_disk_time_leaves_out_the_wait_for_held_deliveries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Overload protection's measure of the disk (``slowest_write``) is the time a batch takes
    to write, including one still being written; a commit waiting for a held delivery is not
    the disk being slow."""
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=0.5)
    await store.open()
    store.enqueue("c1", 1, message())
    store.send_queued("c1", 1, 1)
    begun = time.monotonic()
    await store.commit()
    assert time.monotonic() - begun >= 0.5
    assert store.slowest_write() < 0.4
    real_write = _sqlite_schema.write

    def slow_write(db: sqlite3.Connection, batch: object, version: int) -> int:
        time.sleep(0.6)
        return real_write(db, batch, version)  # type: ignore[arg-type]

    monkeypatch.setattr(_sqlite_schema, "write", slow_write)
    store.save_session(session())
    async with anyio.create_task_group() as tg:
        tg.start_soon(store.commit)
        await anyio.sleep(0.4)
        assert store.slowest_write() >= 0.3  # still writing: counted so far
    assert store.slowest_write() >= 0.6
    assert store.slowest_write() == 0.0  # asked again: nothing written since
    await store.close()


async def test_a_held_delivery_moved_to_an_in_flight_row_is_waited_for_until_the_row_is_written(
        tmp_path: Path) -> None:
    """A queued QoS 2 delivery held for its client leaves the queue for an in-flight row when it
    is sent (dequeue and save_inflight in one atomic write): a commit that waited for it must
    wait for that row, not take the dequeue for an acknowledgement."""
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=30)
    await store.open()
    store.enqueue("c1", 1, message("qos 1"))
    store.send_queued("c1", 1, 1)  # held; the client is being sent to
    store.enqueue("c1", 2, api.StoredMessage("qos 2", b"p", 2))  # held behind it
    async with anyio.create_task_group() as tg:
        done = await commit_in_background(store, tg)
        await anyio.sleep(0.1)  # the writer has nothing else to write meanwhile
        with store.atomic():
            store.dequeue("c1", 2)
            store.save_inflight(api.StoredInflight(
                "c1", 7, "out", "publish", api.StoredMessage("qos 2", b"p", 2)))
        store.dequeue("c1", 1)  # its PUBACK
        with anyio.fail_after(5):
            await done.wait()
        loaded = as_after_a_crash(store)
    assert [i.packet_id for i in loaded.inflight.get("c1", [])] == [7]
    assert loaded.queues == {}
    await store.close()


async def test_a_delivery_written_in_an_atomic_block_is_never_held(tmp_path: Path) -> None:
    """A QoS 2 PUBLISH is routed and remembered in one transaction: its deliveries are written
    with its in-flight row, held neither when enqueued nor when sent, so that a crash keeps both
    or neither (a resend then is answered without routing, and would lose the message)."""
    store = FileSessionStore(tmp_path, sync=False, delivery_hold=30)
    await store.open()
    store.enqueue("c1", 1, message())
    store.send_queued("c1", 1, 1)  # held: the client is being sent to
    store.dequeue("c1", 1)
    with store.atomic():
        store.enqueue("c1", 2, message("routed"))
        store.save_inflight(api.StoredInflight("pub", 3, "in", "pubrec"))
    store.send_queued("c1", 2, 2)  # sent at once: still not held
    with store.atomic():
        store.enqueue("c1", 3, message("routed too"))
        store.save_inflight(api.StoredInflight("pub", 4, "in", "pubrec"))
    with anyio.fail_after(5):  # not the 30 s hold
        await store.commit()
    loaded = as_after_a_crash(store)
    assert [m.topic for _seq, m in loaded.queues["c1"]] == ["routed", "routed too"]
    assert loaded.sent == {"c1": {2: 2}}
    assert [i.packet_id for i in loaded.inflight["pub"]] == [3, 4]
    await store.close()


async def test_deleting_many_sessions_with_held_deliveries_is_not_quadratic(
        tmp_path: Path) -> None:
    """Each deleted session takes its held deliveries out of the hold: found by its client,
    not by a walk over everything held (20,000 clean starts at once, each a walk over 20,000
    held rows, stalled the node for seconds)."""
    runs = iter(range(100))

    async def timed(n: int) -> float:
        store = FileSessionStore(tmp_path / str(next(runs)), sync=False, delivery_hold=3600)
        await store.open()
        for i in range(n):
            store.enqueue(f"c{i}", 1, message())
            store.send_queued(f"c{i}", 1, 1)
        assert len(store._held) > n // 2  # (the writer may take a few before they are sent)
        began = time.perf_counter()
        for i in range(n):
            store.delete_session(f"c{i}")
        took = time.perf_counter() - began
        assert not store._held
        await store.close()
        return took

    ratio = await growth_async(timed, 5000)
    assert ratio < LINEAR_AT_MOST, ratio


async def test_acknowledging_a_burst_in_order_with_a_commit_waiting_is_not_quadratic(
        tmp_path: Path) -> None:
    """Each PUBACK with a commit waiting looks at the first held delivery: a plain dict walks
    over the slots of the ones popped from its front until it is resized (n**2/2 visits)."""
    runs = iter(range(100))

    async def timed(n: int) -> float:
        store = FileSessionStore(tmp_path / str(next(runs)), sync=False, delivery_hold=3600)
        await store.open()
        async with anyio.create_task_group() as tg:
            for i in range(n):
                store.enqueue(f"c{i}", 1, message())
                store.send_queued(f"c{i}", 1, 1)
            done = await commit_in_background(store, tg)
            began = time.perf_counter()
            for i in range(n):  # each subscriber's PUBACK, in the order of the fan-out
                store.dequeue(f"c{i}", 1)
            took = time.perf_counter() - began
            with anyio.fail_after(5):
                await done.wait()
        await store.close()
        return took

    ratio = await growth_async(timed, 10000)
    assert ratio < LINEAR_AT_MOST, ratio
