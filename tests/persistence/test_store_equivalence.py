"""Any sequence of writes leaves FileSessionStore, reopened, holding what MemorySessionStore has."""

from __future__ import annotations

import contextlib
import copy
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from hive_core.persistence import (
    NEVER_EXPIRES,
    FileSessionStore,
    MemorySessionStore,
    PersistenceError,
    StoredInflight,
    StoredMessage,
    StoredSession,
    StoredSubscription,
    _sqlite_schema,
)

# Few keys, so that writes often meet earlier writes to the same key.
clients = st.sampled_from(["alice", "ça"])
seqs = st.integers(0, 3)
packet_ids = st.integers(1, 2)
directions = st.sampled_from(["out", "in"])
# A small alphabet: topics collide often, and a few characters SQLite or JSON might mangle.
topics = st.text(alphabet="ab/+#ü\x00\"'", max_size=4)
# Long past, far future, never: nothing expires between a write and the next load.
expiries = st.sampled_from([None, 1.0, 4e9])

messages = st.builds(
    StoredMessage,
    topic=topics,
    payload=st.binary(max_size=16),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    properties=st.binary(max_size=4),
    expiry_at=expiries,
    publisher_id=topics,
)
subscriptions = st.builds(
    StoredSubscription,
    topic_filter=topics,
    qos=st.integers(0, 2),
    no_local=st.booleans(),
    retain_as_published=st.booleans(),
    retain_handling=st.integers(0, 2),
    subscription_id=st.none() | st.integers(1, 268_435_455),
)
sessions = st.builds(
    StoredSession,
    client_id=clients,
    protocol_version=st.sampled_from([3, 4, 5]),
    expiry_interval=st.sampled_from([0, 60, NEVER_EXPIRES]),
    disconnected_at=st.none() | st.floats(0, 2e9),
    # keyed by filter, as the broker keeps them
    subscriptions=st.lists(subscriptions, max_size=3).map(
        lambda subs: {sub.topic_filter: sub for sub in subs}
    ),
)


@st.composite
def inflights(draw: Any) -> StoredInflight:
    direction = draw(directions)
    client_id, packet_id = draw(clients), draw(packet_ids)
    if direction == "in":
        return StoredInflight(client_id, packet_id, "in", "pubrec")
    if draw(st.booleans()):
        return StoredInflight(client_id, packet_id, "out", "publish", draw(messages))
    return StoredInflight(client_id, packet_id, "out", "pubrel")


writes = st.one_of(
    st.tuples(st.just("save_session"), sessions),
    st.tuples(st.just("delete_session"), clients),
    st.tuples(st.just("save_subscription"), clients, subscriptions),
    st.tuples(st.just("delete_subscription"), clients, topics),
    st.tuples(st.just("enqueue"), clients, seqs, messages),
    st.tuples(st.just("dequeue"), clients, seqs),
    st.tuples(st.just("send_queued"), clients, seqs, packet_ids),
    st.tuples(st.just("save_inflight"), inflights()),
    st.tuples(st.just("delete_inflight"), clients, packet_ids, directions),
    st.tuples(st.just("save_retained"), messages),
    st.tuples(st.just("delete_retained"), topics),
)


class FailNextWrite:
    """Stands in for the writer's transaction; fails it on demand, like a full disk would.

    While the failing transaction runs, the test may go on writing (``writing`` is set): those
    writes land in the next batch, which the failed one must then absorb.
    """

    def __init__(self) -> None:
        self.armed = False
        self.writing = threading.Event()
        self.resume = threading.Event()
        self.real = _sqlite_schema.write

    def __call__(self, db: sqlite3.Connection, batch: Any, version: int) -> int:
        if not self.armed:
            return self.real(db, batch, version)
        self.armed = False
        self.writing.set()
        self.resume.wait(10)
        raise sqlite3.OperationalError("database or disk is full")


class StoresAgree(RuleBasedStateMachine):
    fail_next_write: FailNextWrite  # set by the test

    def __init__(self) -> None:
        super().__init__()
        # On tmpfs where there is one: reopening syncs, and durability is not what this tests.
        ram = "/dev/shm" if Path("/dev/shm").is_dir() else None
        self.data_dir = Path(tempfile.mkdtemp(prefix="hive-store-", dir=ram))
        self._portal_cm = start_blocking_portal("asyncio")
        self.portal = self._portal_cm.__enter__()
        self.memory = MemorySessionStore()
        self.file = self._open()

    def _open(self) -> FileSessionStore:
        # No background flush: only commit, reopen and a failure decide what a batch holds,
        # and when a delivery sent at once is written (held for 2 ms: a commit waits for it).
        store = FileSessionStore(self.data_dir, commit_interval=3600, sync=False,
                                 delivery_hold=0.002)
        self.loaded = self.portal.call(store.open)
        return store

    def both(self, method: str, *args: Any) -> None:
        getattr(self.memory, method)(*args)
        getattr(self.file, method)(*args)

    @rule(batch=st.lists(writes, min_size=1, max_size=8))
    def write(self, batch: list[tuple[Any, ...]]) -> None:
        for method, *args in batch:
            self.both(method, *args)

    @rule()
    def commit(self) -> None:
        """What a commit returned for is on disk: a crash right after it (the database as it
        is now) loses nothing, held deliveries included."""
        self.portal.call(self.file.commit)
        crashed = sqlite3.connect(":memory:")
        with contextlib.closing(sqlite3.connect(self.file.path)) as live:
            live.backup(crashed)
        with contextlib.closing(crashed):
            now = time.time()  # a copy: contents(), like a load, forgets what expired
            assert _sqlite_schema.load(crashed, now) == copy.deepcopy(self.memory).contents(now)

    @rule(meanwhile=st.lists(writes, max_size=6))
    def failed_commit(self, meanwhile: list[tuple[Any, ...]]) -> None:
        failing = self.fail_next_write
        failing.writing.clear()
        failing.resume.clear()
        failing.armed = True
        commit = self.portal.start_task_soon(self.file.commit)
        while not failing.writing.wait(0.001):
            if commit.done():  # nothing was pending: no transaction to fail
                break
        else:
            for method, *args in meanwhile:
                self.both(method, *args)
        failing.armed = False
        failing.resume.set()
        with contextlib.suppress(PersistenceError):  # its writes stay pending for the next batch
            commit.result(timeout=10)

    @rule()
    def reopen(self) -> None:
        self.portal.call(self.file.close)
        self.file = self._open()
        assert self.loaded == self.memory.contents()

    def teardown(self) -> None:
        try:
            self.reopen()
            self.portal.call(self.file.close)
        finally:
            self._portal_cm.__exit__(None, None, None)
            shutil.rmtree(self.data_dir, ignore_errors=True)


@pytest.mark.timeout(60)
def test_file_store_agrees_with_memory_store(monkeypatch: pytest.MonkeyPatch) -> None:
    fail_next_write = FailNextWrite()
    monkeypatch.setattr(_sqlite_schema, "write", fail_next_write)
    monkeypatch.setattr(StoresAgree, "fail_next_write", fail_next_write, raising=False)
    run_state_machine_as_test(
        StoresAgree,
        settings=settings(max_examples=40, stateful_step_count=30, deadline=None),
    )
