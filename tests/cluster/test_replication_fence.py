"""The replicator's fence (cluster/_replication.py): a node that loses the backup of its
sessions while it sees the smaller side of a split does not end the commits under way until
that backup is known down or the larger side is back. The larger side may take the sessions
over from that backup's replica, which lacks their ops: a QoS 2 PUBLISH or PUBREL let out then
is unknown to the copy the client resumes there (chaos seed 26: QoS 2 twice). What is written
afterwards, on this side alone, is committed at once: both sides of a split serve."""

from __future__ import annotations

import asyncio

from hive_core.cluster._replication import ReplicatingStore, Replicator
from hive_core.persistence import MemorySessionStore, StoredSession


def replicated_store() -> tuple[ReplicatingStore, Replicator]:
    store = ReplicatingStore(MemorySessionStore())
    replicator = Replicator(store, snapshot=lambda: ([], []), watermarks=dict,
                            send_snapshot=lambda *args: None, send_ops=lambda *args: None,
                            send_release=lambda node_id: None)
    replicator.set_backups(["b"])
    replicator.acknowledged("b", store.seq)  # its snapshot is in
    return store, replicator


async def pending_commit(store: ReplicatingStore, client_id: str) -> asyncio.Task[None]:
    store.save_session(StoredSession(client_id, 5, 60))
    commit = asyncio.ensure_future(store.commit())
    await asyncio.sleep(0.01)
    return commit


def test_a_backup_lost_on_the_larger_side_lets_the_commits_end() -> None:
    async def main() -> None:
        store, replicator = replicated_store()
        commit = await pending_commit(store, "a")
        assert not commit.done()  # the backup has not acknowledged it
        replicator.lost("b")  # nobody takes this node over from its replica
        await asyncio.wait_for(commit, 1)

    asyncio.run(main())


def test_a_backup_lost_on_the_smaller_side_holds_the_commits_under_way_until_it_is_known_down(
) -> None:
    async def main() -> None:
        store, replicator = replicated_store()
        before = await pending_commit(store, "a")
        replicator.lost("b", exposed=True)
        assert replicator.fenced_by == {"b"}
        after = await pending_commit(store, "b")  # written on this side alone: no backup
        await asyncio.wait_for(after, 1)
        await asyncio.sleep(0.05)
        assert not before.done()  # the replica the other side takes over lacks it
        replicator.unfence("b")  # its port refused: its replica takes nothing over
        await asyncio.wait_for(before, 1)

    asyncio.run(main())


def test_the_fence_lifts_when_the_larger_side_is_back() -> None:
    """Then nobody takes this node over any more: what waited goes on, and the backups of
    now start from a snapshot (Takeover.ring_changed lifts the fence before it sets them)."""
    async def main() -> None:
        store, replicator = replicated_store()
        commit = await pending_commit(store, "a")
        replicator.lost("b", exposed=True)
        await asyncio.sleep(0.05)
        assert not commit.done()
        replicator.unfence()
        await asyncio.wait_for(commit, 1)
        replicator.set_backups(["b"])
        again = await pending_commit(store, "b")
        assert not again.done()  # the new backup has not acknowledged its snapshot yet
        replicator.acknowledged("b", store.seq)
        await asyncio.wait_for(again, 1)

    asyncio.run(main())
