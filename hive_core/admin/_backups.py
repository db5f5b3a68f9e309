"""Backups of a running node, and the live import of a backup file into it.

``POST /api/v1/management/backups`` writes this node's persistent state (its sessions, their
subscriptions, queues and in-flight exchanges, and the retained messages) into
``<backup folder>/<id>/<id>.hive-<version>.backup`` (the format of
:mod:`hive_ext_api.backup`). The embedded store is copied with SQLite's backup API from a read
connection, in a thread: a consistent snapshot that never blocks the event loop.

``POST /api/v1/management/backups/<id>`` imports the ``.backup`` file found in
``<backup folder>/<id>/`` into the running node, beside its live state. The file is checked
whole first (a damaged file imports nothing), then applied in slices of 50 records, between
which the node serves its clients. What exists wins over the backup's copy:

* a session the cluster holds (on this node, connected or not, or owned by another node as
  the cluster's owners directory says) is kept and the backup's copy skipped;
* a session absent everywhere becomes this node's own, with its subscriptions, queue (at the
  positions it had) and in-flight exchanges; the other nodes learn it, and route to it;
* an expired session, and an expired queued message, are skipped;
* a retained message whose topic has one is kept; an absent one is set as a local
  publisher's would be, so that it reaches every node (no subscriber receives it).

One backup or import runs at a time; their states follow HiveMQ's names.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import tempfile
import time
from collections.abc import Coroutine, Iterator
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hive_core import __version__
from hive_core.admin._http import Action, Reply, Request
from hive_core.broker import BrokerSettings, SessionRecords, properties_problem, stored_retained
from hive_ext_api.backup import (
    SUFFIX,
    BackupCounts,
    BackupError,
    BackupReader,
    BackupWriter,
    ClientState,
    RetainedState,
    backup_file_name,
    new_backup_id,
    read_store,
)

if TYPE_CHECKING:
    from hive_core.broker import Broker
    from hive_core.cluster import Cluster

log = logging.getLogger("hive.backup")

BATCH = 500
"""Records read from the file in one go (in a thread), and committed together."""
SLICE = 50
"""Records applied on the event loop in one turn: clients wait at most that long."""
_VALID_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class BackupState(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    RESTORE_IN_PROGRESS = "RESTORE_IN_PROGRESS"
    RESTORE_COMPLETED = "RESTORE_COMPLETED"
    RESTORE_FAILED = "RESTORE_FAILED"


_BUSY = (BackupState.RUNNING, BackupState.RESTORE_IN_PROGRESS)


class BackupNode(Protocol):
    """What backups need of the node (read when a backup or an import runs)."""

    @property
    def node_id(self) -> str: ...

    @property
    def broker(self) -> Broker | None: ...

    @property
    def cluster(self) -> Cluster | None: ...


@dataclass
class ImportCounts:
    """What an import did so far, record by record."""

    sessions_imported: int = 0
    sessions_existing: int = 0  # in the cluster already: kept, the backup's copy skipped
    sessions_expired: int = 0
    queued_imported: int = 0
    queued_expired: int = 0
    retained_imported: int = 0
    retained_existing: int = 0
    retained_expired: int = 0
    records_read: int = 0
    records_total: int = 0


@dataclass
class Backup:
    """One backup folder, as this node knows it."""

    id: str
    state: BackupState
    created: float
    file: Path | None = None
    bytes: int | None = None
    counts: BackupCounts | None = None
    reason: str | None = None
    restore: ImportCounts | None = None
    seconds: float | None = None  # how long the last backup or import took

    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "id": self.id, "state": self.state.value,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created)),
            "file": self.file.name if self.file is not None else None, "bytes": self.bytes,
            "counts": asdict(self.counts) if self.counts is not None else None}
        if self.reason is not None:
            document["reason"] = self.reason
        if self.restore is not None:
            document["restore"] = asdict(self.restore)
        if self.seconds is not None:
            document["seconds"] = round(self.seconds, 3)
        return document


class Backups:
    """The node's backups: made, listed, imported (see the module docstring)."""

    def __init__(self, node: BackupNode, folder: Path, store_file: Path | None) -> None:
        self.node = node
        self.folder = folder
        self.store_file = store_file  # the embedded store; None: sessions live in memory
        self.known: dict[str, Backup] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- REST ----------------------------------------------------------------------------------

    def actions(self, prefix: str) -> dict[str, dict[str, Action]]:
        return {f"{prefix}/management/backups": {"GET": self._get_all, "POST": self._post_create},
                f"{prefix}/management/backups/{{id}}": {"GET": self._get_one,
                                                       "POST": self._post_import}}

    def _get_all(self, request: Request) -> Reply:
        return Reply(200, {"items": [b.document() for b in self.all()]})

    def _get_one(self, request: Request) -> Reply:
        backup_id = request.params["id"]
        backup = self.find(backup_id) if _VALID_ID.fullmatch(backup_id) else None
        if backup is None:
            return _not_found(backup_id)
        return Reply(200, {"backup": backup.document()})

    def _post_create(self, request: Request) -> Reply:
        busy = self._busy()
        if busy is not None:
            return busy
        if self.node.broker is None:
            return Reply(503, {"title": "Service unavailable", "detail": "the node is starting"})
        backup = self.create()
        return Reply(202, {"backup": backup.document()})

    def _post_import(self, request: Request) -> Reply:
        backup_id = request.params["id"]
        if not _VALID_ID.fullmatch(backup_id) or not (self.folder / backup_id).is_dir():
            return _not_found(backup_id)
        busy = self._busy()
        if busy is not None:
            return busy
        if self.node.broker is None:
            return Reply(503, {"title": "Service unavailable", "detail": "the node is starting"})
        backup = self.restore(backup_id)
        return Reply(202, {"backup": backup.document()})

    def _settings(self) -> BrokerSettings:
        broker = self.node.broker
        return broker.settings if broker is not None else BrokerSettings()

    def _busy(self) -> Reply | None:
        running = next((b for b in self.known.values() if b.state in _BUSY), None)
        if running is None:
            return None
        return Reply(409, {"title": "Conflict", "detail": f"backup {running.id} is "
                           f"{running.state.value}; one backup or import runs at a time"})

    # -- listing -------------------------------------------------------------------------------

    def all(self) -> list[Backup]:
        """What this node made or imported since it started, and the other backup folders."""
        found = dict(self.known)
        if self.folder.is_dir():
            for folder in self.folder.iterdir():
                if folder.name not in found and folder.is_dir() \
                        and _VALID_ID.fullmatch(folder.name):
                    backup = self._on_disk(folder.name)
                    if backup is not None:
                        found[backup.id] = backup
        return sorted(found.values(), key=lambda b: (b.created, b.id))

    def find(self, backup_id: str) -> Backup | None:
        """The backup of that id; None for an id that is not one (``..``: never a path)."""
        if not _VALID_ID.fullmatch(backup_id):
            return None
        return self.known.get(backup_id) or self._on_disk(backup_id)

    def _on_disk(self, backup_id: str) -> Backup | None:
        """A backup folder this node did not make in this run (an earlier run, the recovery
        tool): COMPLETED when it holds a readable backup file."""
        file = self._file_in(backup_id)
        if file is None:
            return None
        try:
            reader = BackupReader(file, file.name)
        except BackupError as exc:
            return Backup(backup_id, BackupState.FAILED, file.stat().st_mtime, file,
                          file.stat().st_size, reason=str(exc))
        reader.close()
        return Backup(backup_id, BackupState.COMPLETED, reader.header.created, file,
                      file.stat().st_size)

    def _file_in(self, backup_id: str) -> Path | None:
        """The backup file in ``<folder>/<id>/``: the one named after the id, else the last."""
        folder = self.folder / backup_id
        files = sorted(p for p in folder.glob(f"*{SUFFIX}") if p.is_file()) \
            if folder.is_dir() else []
        named = [p for p in files if p.name.startswith(f"{backup_id}.")]
        chosen = named or files
        return chosen[-1] if chosen else None

    # -- creating ------------------------------------------------------------------------------

    def _new_id(self) -> str:
        backup_id = new_backup_id()
        taken = set(self.known) | ({p.name for p in self.folder.iterdir()}
                                   if self.folder.is_dir() else set())
        if backup_id in taken:  # two in one second
            backup_id = next(f"{backup_id}-{n}" for n in range(2, 10_000)
                             if f"{backup_id}-{n}" not in taken)
        return backup_id

    async def upload(self, file: Path) -> Backup:
        """A backup file sent from elsewhere (the control center's upload, streamed to
        ``file`` in this folder): checked whole (every record's CRC and content, the end
        record) and moved to ``<folder>/<new id>/``, ready to be imported. Raises
        :class:`BackupError` naming what is wrong; nothing is kept then."""
        backup_id = self._new_id()
        folder = self.folder / backup_id
        folder.mkdir(parents=True)
        partial = folder / f".{backup_id}.upload"
        size = file.stat().st_size
        try:
            file.replace(partial)
            await asyncio.to_thread(_check, partial, self._settings(), "the upload")
            reader = BackupReader(partial, "the upload")
            version = reader.header.hive_version or __version__
            reader.close()
            partial.rename(folder / backup_file_name(backup_id, version))
        except BaseException:
            partial.unlink(missing_ok=True)
            folder.rmdir()
            raise
        backup = self._on_disk(backup_id)
        assert backup is not None
        log.info("Backup %s uploaded (%d bytes)", backup_id, size)
        return backup

    def create(self) -> Backup:
        backup_id = self._new_id()
        backup = Backup(backup_id, BackupState.RUNNING, time.time())
        self.known[backup_id] = backup
        self._start(self._create(backup))
        return backup

    async def _create(self, backup: Backup) -> None:
        began = time.monotonic()
        path = self.folder / backup.id / backup_file_name(backup.id, __version__)
        log.info("Creating backup %s", backup.id)
        try:
            broker = self.node.broker
            assert broker is not None
            await broker.commit()  # what the clients were told is stored, in the snapshot
            if self.store_file is not None and self.store_file.is_file():
                counts = await asyncio.to_thread(self._write_from_store, path)
            else:  # no embedded store: the live state, copied on the loop, written in a thread
                states = _live_states(broker)
                counts = await asyncio.to_thread(self._write, path, iter(states))
        except Exception as exc:
            backup.state, backup.reason = BackupState.FAILED, str(exc) or type(exc).__name__
            log.error("Backup %s failed: %s", backup.id, backup.reason)
            return
        backup.state, backup.file, backup.counts = BackupState.COMPLETED, path, counts
        backup.bytes = path.stat().st_size
        backup.seconds = time.monotonic() - began
        log.info("Backup %s completed in %d ms: %d sessions, %d queued messages, %d retained "
                 "messages, %d bytes in %s", backup.id, backup.seconds * 1000, counts.clients,
                 counts.queued, counts.retained, backup.bytes, path)

    def _write_from_store(self, path: Path) -> BackupCounts:
        """(In a thread.) Snapshot the store with SQLite's backup API, then write it out."""
        assert self.store_file is not None
        with tempfile.TemporaryDirectory(prefix="hive-backup-") as tmp:
            snapshot = Path(tmp) / "sessions.db"
            source = sqlite3.connect(f"{self.store_file.resolve().as_uri()}?mode=ro", uri=True)
            try:
                target = sqlite3.connect(snapshot)
                try:
                    source.backup(target)  # one step: one read transaction, one moment
                finally:
                    target.close()
            finally:
                source.close()
            return self._write(path, read_store(snapshot))

    def _write(self, path: Path, states: Iterator[ClientState | RetainedState]) -> BackupCounts:
        with BackupWriter(path, source=self.node.node_id, hive_version=__version__) as out:
            for state in states:
                if isinstance(state, ClientState):
                    out.add_client(state)
                else:
                    out.add_retained(state)
        return out.counts

    # -- importing -----------------------------------------------------------------------------

    def restore(self, backup_id: str) -> Backup:
        backup = self.find(backup_id) or Backup(backup_id, BackupState.FAILED, time.time())
        backup.state, backup.reason = BackupState.RESTORE_IN_PROGRESS, None
        backup.restore, backup.seconds = ImportCounts(), None
        self.known[backup_id] = backup
        self._start(self._restore(backup))
        return backup

    async def _restore(self, backup: Backup) -> None:
        began = time.monotonic()
        counts = backup.restore
        assert counts is not None
        file = self._file_in(backup.id)
        try:
            if file is None:
                raise BackupError(f"no backup file (*{SUFFIX}) in backup folder {backup.id}")
            backup.file, backup.bytes = file, file.stat().st_size
            log.info("Importing backup %s from %s", backup.id, file)  # the log may say where
            # A damaged file, or one record against the rules: nothing gets in.
            backup.counts = await asyncio.to_thread(_check, file, self._settings(), file.name)
            counts.records_total = backup.counts.clients + backup.counts.retained
            reader = BackupReader(file, file.name)
            records = reader.records()
            try:
                while batch := await asyncio.to_thread(_take, records, BATCH):
                    for at in range(0, len(batch), SLICE):
                        self._apply(batch[at:at + SLICE], counts)
                        await asyncio.sleep(0)  # the clients' turn
                    broker = self.node.broker
                    assert broker is not None
                    await broker.commit()
            finally:
                reader.close()
        except (BackupError, OSError) as exc:
            backup.state, backup.reason = BackupState.RESTORE_FAILED, str(exc)
            log.error("Import of backup %s failed: %s", backup.id, exc)
            return
        except Exception as exc:
            backup.state = BackupState.RESTORE_FAILED
            backup.reason = f"{type(exc).__name__}: {exc}"
            log.exception("Import of backup %s failed", backup.id)
            return
        backup.state = BackupState.RESTORE_COMPLETED
        backup.seconds = time.monotonic() - began
        log.info("Import of backup %s completed in %d ms: %d sessions imported (%d queued "
                 "messages), %d kept as the cluster had them, %d expired (and %d expired queued "
                 "messages); %d retained messages imported, %d kept, %d expired",
                 backup.id, backup.seconds * 1000, counts.sessions_imported,
                 counts.queued_imported, counts.sessions_existing, counts.sessions_expired,
                 counts.queued_expired, counts.retained_imported, counts.retained_existing,
                 counts.retained_expired)

    def _apply(self, batch: list[ClientState | RetainedState], counts: ImportCounts) -> None:
        """One batch, on the event loop, by the conflict rules of the module docstring."""
        broker, cluster = self.node.broker, self.node.cluster
        assert broker is not None
        now = time.time()
        sessions: list[SessionRecords] = []
        for state in batch:
            counts.records_read += 1
            if isinstance(state, RetainedState):
                expiry = state.message.expiry_at
                if expiry is not None and expiry <= now:
                    counts.retained_expired += 1
                elif broker.import_retained(state.message):
                    counts.retained_imported += 1
                else:
                    counts.retained_existing += 1
                continue
            session = state.session
            client_id = session.client_id
            if broker.custody.has_session(client_id) or (
                    cluster is not None and cluster.owner_of(client_id) is not None):
                counts.sessions_existing += 1
            elif _expired(session.expiry_interval, session.disconnected_at, now):
                counts.sessions_expired += 1
            else:
                queue = [(seq, m) for seq, m in state.queue
                         if m.expiry_at is None or m.expiry_at > now]
                counts.queued_expired += len(state.queue) - len(queue)
                sessions.append(SessionRecords(session, queue, state.inflight))
        if not sessions:
            return
        adopted = set(cluster.adopt_imported(sessions) if cluster is not None
                      else broker.custody.adopt_sessions(sessions))
        for records in sessions:
            if records.session.client_id in adopted:
                counts.sessions_imported += 1
                counts.queued_imported += len(records.queue)
            else:  # its client connected between the check and the adoption
                counts.sessions_existing += 1

    # -- tasks ---------------------------------------------------------------------------------

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop what runs (the node is stopping): an import stops between two batches."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)


NEVER_EXPIRES = 0xFFFFFFFF


def _expired(expiry_interval: int, disconnected_at: float | None, now: float) -> bool:
    """A session whose expiry passed (one of a client connected when it was saved counts
    from now); expiry 0 ends with the connection, so such a session is never restored."""
    if expiry_interval == NEVER_EXPIRES:
        return False
    if expiry_interval <= 0:
        return True
    return disconnected_at is not None and disconnected_at + expiry_interval <= now


def _check(file: Path, settings: BrokerSettings, name: str) -> BackupCounts:
    """(In a thread.) Read the whole file: every record's CRC and MQTT's rules (the reader's),
    the end record; and what this node's codec and limits say of each record."""
    reader = BackupReader(file, name)
    for number, record in enumerate(reader.records(), 1):
        problem = _node_problem(record, settings)
        if problem is not None:
            reader.close()
            raise BackupError(f"{name}: record {number}: {problem}")
    return reader.counts


def _node_problem(record: ClientState | RetainedState, settings: BrokerSettings) -> str | None:
    """What this node would refuse of a record: a topic, filter or payload past its limits, a
    client id too long, properties its codec cannot read."""
    if isinstance(record, RetainedState):
        messages = [record.message]
    else:
        session = record.session
        if len(session.client_id) > settings.max_client_id_length:
            return f"client id longer than {settings.max_client_id_length} characters"
        for topic_filter in session.subscriptions:
            too_big = settings.topic_too_big(topic_filter)
            if too_big:
                return f"subscription {topic_filter[:100]!r}: {too_big}"
        messages = [m for _seq, m in record.queue]
        messages += [i.message for i in record.inflight if i.message is not None]
    for message in messages:
        too_big = settings.topic_too_big(message.topic)
        if too_big is None and len(message.payload) > settings.max_packet_size:
            too_big = f"a payload over max-packet-size ({settings.max_packet_size} bytes)"
        if too_big:
            return f"message on {message.topic[:100]!r}: {too_big}"
        problem = properties_problem(message)
        if problem is not None:
            return f"message on {message.topic[:100]!r}: {problem}"
    return None


def _take(records: Iterator[ClientState | RetainedState],
          n: int) -> list[ClientState | RetainedState]:
    batch = []
    for record in records:
        batch.append(record)
        if len(batch) >= n:
            break
    return batch


def _live_states(broker: Broker) -> list[ClientState | RetainedState]:
    """The node's persistent state from memory (a node without an embedded store)."""
    version = time.time_ns()
    states: list[ClientState | RetainedState] = [
        ClientState(r.session, version, r.queue, r.inflight)
        for r in broker.custody.replica_records()]
    states += [RetainedState(stored_retained(m), version) for m in broker.retained_messages()]
    return states


def _not_found(backup_id: str) -> Reply:
    return Reply(404, {"title": "Not found", "detail": f"no backup {backup_id!r}"})


__all__ = ["BackupNode", "BackupState", "Backups", "ImportCounts"]
