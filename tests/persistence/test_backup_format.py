"""The backup file format and the data-folder reader of ``hive_ext_api.backup``, against the
stores the embedded store really writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hive_core.persistence import FileSessionStore
from hive_ext_api import StoredInflight, StoredMessage, StoredSession, StoredSubscription, backup

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]


def message(topic: str = "a/b", payload: bytes = b"\x00\xffpayload") -> StoredMessage:
    return StoredMessage(topic, payload, 1, False, b"\x26\x00\x01k\x00\x01v", None, "pub")


async def write_store(data: Path) -> FileSessionStore:
    store = FileSessionStore(data, sync=False)
    await store.open()
    session = StoredSession("c1", 5, 3600, 1700000000.0)
    session.subscriptions["a/#"] = StoredSubscription("a/#", 1, subscription_id=7)
    session.subscriptions["$share/g/x"] = StoredSubscription("$share/g/x", 2)
    store.save_session(session)
    store.enqueue("c1", 4, message())
    store.enqueue("c1", 5, message("a/c"))
    store.save_inflight(StoredInflight("c1", 9, "out", "publish", message("a/d")))
    store.save_inflight(StoredInflight("c1", 3, "in", "pubrec"))
    store.save_retained(message("r/1", b"retained"))
    await store.commit()
    return store


async def test_a_store_reads_back_whole_with_versions(tmp_path: Path) -> None:
    store = await write_store(tmp_path)
    records = list(backup.read_store(store.path))  # while the node runs: the WAL is read too
    clients = [r for r in records if isinstance(r, backup.ClientState)]
    retained = [r for r in records if isinstance(r, backup.RetainedState)]
    assert [c.session.client_id for c in clients] == ["c1"]
    client = clients[0]
    assert client.version > 0 and retained[0].version > 0
    assert list(client.session.subscriptions) == ["a/#", "$share/g/x"]
    assert client.queue == [(4, message()), (5, message("a/c"))]
    assert [(i.packet_id, i.direction, i.state) for i in client.inflight] == [
        (9, "out", "publish"), (3, "in", "pubrec")]
    assert retained[0].message == message("r/1", b"retained")

    before = client.version
    store.dequeue("c1", 4)  # any change to a client's state is a newer version of it
    await store.commit()
    await store.close()
    (after,) = [r for r in backup.read_store(store.path) if isinstance(r, backup.ClientState)]
    assert after.version > before and [seq for seq, _ in after.queue] == [5]


async def test_a_backup_file_round_trips_and_sessions_only_leaves_messages_out(
        tmp_path: Path) -> None:
    store = await write_store(tmp_path / "data")
    await store.close()
    records = list(backup.read_store(store.path))
    path = tmp_path / "out" / backup.backup_file_name(backup.new_backup_id(), "1.0")
    with backup.BackupWriter(path, source="test", hive_version="1.0") as out:
        for r in records:
            out.add_client(r) if isinstance(r, backup.ClientState) else out.add_retained(r)
    reader = backup.BackupReader(path)
    assert reader.header.source == "test" and not reader.header.sessions_only
    assert list(reader.records()) == records
    assert (reader.counts.clients, reader.counts.retained, reader.counts.queued) == (1, 1, 2)

    only = tmp_path / "out" / "so.backup"
    with backup.BackupWriter(only, source="test", sessions_only=True) as out:
        for r in records:
            out.add_client(r) if isinstance(r, backup.ClientState) else out.add_retained(r)
    (client,) = backup.BackupReader(only).records()
    assert isinstance(client, backup.ClientState)
    assert list(client.session.subscriptions) == ["a/#"]  # no shared subscriptions
    assert client.queue == [] and client.inflight == []


def test_a_damaged_or_cut_backup_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "b.backup"
    with backup.BackupWriter(path, source="t") as out:
        out.add_retained(backup.RetainedState(message(), 5))
    data = path.read_bytes()
    path.write_bytes(data[:-20])
    with pytest.raises(backup.BackupError, match=r"b\.backup: the backup is cut short"):
        list(backup.BackupReader(path).records())
    flipped = bytearray(data)
    flipped[-40] ^= 0xFF
    path.write_bytes(bytes(flipped))
    with pytest.raises(backup.BackupError, match="CRC mismatch"):
        list(backup.BackupReader(path).records())
    path.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(backup.BackupError, match="not a Hive backup file"):
        backup.BackupReader(path)
    assert not list(tmp_path.glob(".*.tmp"))


async def test_a_data_folder_lists_its_own_store_replicas_and_previous_copy(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = await write_store(data)
    await store.close()
    for place in ("replicas/node-b", "cluster-backup"):
        (data / place / "persistence").mkdir(parents=True)
        shutil.copyfile(store.path, data / place / "persistence" / "sessions.db")
    assert backup.data_folder_stores(data) == [
        data / "persistence/sessions.db", data / "replicas/node-b/persistence/sessions.db",
        data / "cluster-backup/persistence/sessions.db"]
    (tmp_path / "other").mkdir()
    with pytest.raises(backup.BackupError, match="other: not a Hive data folder"):
        backup.data_folder_stores(tmp_path / "other")
    bad = tmp_path / "bad" / "persistence"
    bad.mkdir(parents=True)
    (bad / "sessions.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(backup.BackupError, match="not a readable Hive store"):
        list(backup.read_store(bad / "sessions.db"))


_FAN_OUT_VIEW = """CREATE VIEW session AS WITH RECURSIVE n(i) AS (
    SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000)
    SELECT 'c' || i AS client_id, 5 AS protocol_version, 3600 AS expiry_interval,
           NULL AS disconnected_at, 1 AS version FROM n"""


@pytest.mark.parametrize(("crafting", "refusal"), [
    pytest.param(f"DROP TABLE session; {_FAN_OUT_VIEW}", "session is view, not a table",
                 id="fan-out"),
    pytest.param("DROP TABLE retained_message; CREATE TABLE retained_message (topic TEXT,"
                 " payload BLOB GENERATED ALWAYS AS (zeroblob(100000000)) VIRTUAL, qos INT,"
                 " retain INT, properties BLOB, expiry_at REAL, publisher_id TEXT,"
                 " version INT)", "retained_message has hidden or generated columns",
                 id="generated"),
    pytest.param("UPDATE subscription SET subscription_id = -1 WHERE topic_filter = 'a/#'",
                 r"client 'c1': subscription 'a/#': subscription identifier -1 is outside "
                 r"1..268435455", id="planted"),
])
async def test_a_crafted_store_cannot_make_its_reader_allocate_or_plant_records(
        tmp_path: Path, crafting: str, refusal: str) -> None:
    """Issue 20 (3): a 24 KB store with a view gave the recovery tool 1,000,000 records (and
    hundreds of MB); a subscription identifier -1 in a store was read as it was."""
    import sqlite3

    store = await write_store(tmp_path)
    await store.close()
    db = sqlite3.connect(store.path)
    db.executescript(crafting)
    db.close()
    with pytest.raises(backup.BackupError, match=refusal):
        list(backup.read_store(store.path))


def test_backup_records_are_held_to_mqtts_rules(tmp_path: Path) -> None:
    """Issue 20 (3, 8): a bad record is refused naming its number; a record that is not one
    (JSON nested 200,000 deep, a list as a topic filter) is a BackupError, not a crash."""
    path = tmp_path / "b.backup"
    with backup.BackupWriter(path, source="t") as out:
        out.add_retained(backup.RetainedState(message(), 5))
        out.add_raw(2, b"[" * 200_000 + b"]" * 200_000)
    with pytest.raises(backup.BackupError,
                       match=r"record 2 \(at byte \d+\) is not a retained message "
                             r"record \(JSON nested too deep\)"):
        list(backup.BackupReader(path, "upload").records())
    body = backup.encode_client(backup.ClientState(StoredSession("c", 5, 60, None), 1))
    with backup.BackupWriter(path, source="t") as out:
        out.add_raw(1, body.replace(b'"subscriptions":[]',
                                    b'"subscriptions":[[["a"],1,0,0,0,null]]'))
    with pytest.raises(backup.BackupError,
                       match=r"upload: record 1 \(at byte \d+\) is not a client "
                             r"record \(TypeError"):
        list(backup.BackupReader(path, "upload").records())
    with backup.BackupWriter(path, source="t") as out:
        out.add_retained(backup.RetainedState(message("$SYS/broker/clients"), 5))
    with pytest.raises(backup.BackupError, match=r"record 1 .*under \$SYS"):
        list(backup.BackupReader(path).records())
