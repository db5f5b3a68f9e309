"""QoS 1 deliveries held back from the backups (cluster/_replication_hold.py): a delivery
acknowledged within ``<delivery-hold>`` sends the backups nothing, one acknowledged later sends
its ops, and a commit made meanwhile waits for one or the other. Frames sent while a delivery
is held do not count the forwarded message behind it as handled, and every other op of the
session, a new backup, a lost one and a fence let the held ops go first."""

from __future__ import annotations

import asyncio
from typing import Any

from hive_core.cluster._replication import (
    DELETE_SESSION,
    DEQUEUE,
    ENQUEUE,
    SEND_QUEUED,
    ReplicatingStore,
    Replicator,
)
from hive_core.cluster._replication_hold import HOLD_PAUSE, DeliveryHold
from hive_core.persistence import MemorySessionStore, StoredMessage, StoredSession

HOLD = 0.05


class Backups:
    """What the replicator sends, and the forwarding marks it reads."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, int, list[Any], dict[str, list[int]]]] = []
        self.handled = 0  # frames handled from peer "p"
        self.snapshots: list[str] = []

    def send_ops(self, node_id: str, first: int, ops: list[Any],
                 watermarks: dict[str, list[int]]) -> None:
        self.frames.append((node_id, first, list(ops), watermarks))

    def ops(self) -> list[list[Any]]:
        return [op for frame in self.frames if frame[0] == "b" for op in frame[2]]

    def codes(self) -> list[str]:
        return [op[0] for op in self.ops()]


def replicated(hold: float = HOLD) -> tuple[ReplicatingStore, Replicator, Backups]:
    backups = Backups()
    store = ReplicatingStore(MemorySessionStore(), hold=hold)
    store.sent_ops = True
    replicator = Replicator(
        store, snapshot=lambda: ([], []), watermarks=lambda: {"p": [1, backups.handled]},
        send_snapshot=lambda node_id, *args: backups.snapshots.append(node_id),
        send_ops=backups.send_ops, send_release=lambda node_id: None)
    replicator.set_backups(["b"])
    replicator.acknowledged("b", store.seq)
    store.save_session(StoredSession("sub", 5, 60))
    replicator.ship()
    replicator.acknowledged("b", store.seq)
    return store, replicator, backups


def message(n: int) -> StoredMessage:
    return StoredMessage("t", b"%d" % n, 1, False, None, None, "pub")


def deliver(store: ReplicatingStore, seq: int, packet_id: int, client_id: str = "sub") -> None:
    """As ``Records.sent`` does for a QoS 1 delivery sent at once."""
    store.enqueue(client_id, seq, message(seq))
    assert store.send_queued(client_id, seq, packet_id) is True


async def ticks(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_delivery_acknowledged_within_the_hold_sends_the_backups_nothing() -> None:
    async def main() -> None:
        store, _replicator, backups = replicated()
        sent = len(backups.frames)
        deliver(store, 10, 1)
        commit = asyncio.ensure_future(store.commit())  # the publisher's PUBACK
        await ticks()
        assert not commit.done()  # neither acknowledged nor on the backup
        store.dequeue("sub", 10)  # its PUBACK
        await asyncio.wait_for(commit, 1)
        await asyncio.sleep(HOLD * 2)
        assert backups.frames[sent:] == []
        assert store.hold is not None and store.hold.stats.spared == 1
        assert not store.hold.held

    asyncio.run(main())


def test_a_delivery_not_acknowledged_within_the_hold_goes_with_its_mark_and_its_commit_waits(
) -> None:
    async def main() -> None:
        store, replicator, backups = replicated()
        sent = len(backups.frames)
        deliver(store, 10, 1)
        commit = asyncio.ensure_future(store.commit())
        await asyncio.sleep(HOLD * 2)
        ops = [op for frame in backups.frames[sent:] for op in frame[2]]
        assert [op[0] for op in ops] == [ENQUEUE, SEND_QUEUED]
        assert ops[1][1:] == ["sub", 10, 1]
        assert not commit.done()  # shipped, not acknowledged by the backup yet
        replicator.acknowledged("b", store.seq)
        await asyncio.wait_for(commit, 1)
        store.dequeue("sub", 10)  # a late PUBACK: an op like any other now
        replicator.ship()
        assert backups.codes()[-1] == DEQUEUE
        assert store.hold is not None and store.hold.stats.late == 1

    asyncio.run(main())


def test_a_session_slower_than_the_hold_gets_nothing_held_for_a_while() -> None:
    async def main() -> None:
        store, replicator, backups = replicated()
        deliver(store, 10, 1)
        await asyncio.sleep(HOLD * 2)  # ran out: paused
        deliver(store, 11, 2)
        replicator.ship()
        assert backups.codes()[-2:] == [ENQUEUE, SEND_QUEUED]
        assert store.hold is not None and not store.hold.held
        assert store.hold.stats.paused == 1 and HOLD_PAUSE > HOLD * 2

    asyncio.run(main())


def test_what_is_queued_for_an_acknowledging_client_is_held_behind_what_was_sent() -> None:
    async def main() -> None:
        store, replicator, backups = replicated()
        sent = len(backups.frames)
        deliver(store, 10, 1)
        store.enqueue("sub", 11, message(11))  # its window is full: queued
        replicator.ship()
        assert backups.frames[sent:] == []
        store.dequeue("sub", 10)
        assert store.send_queued("sub", 11, 2) is True  # sent from the queue
        store.dequeue("sub", 11)
        await asyncio.wait_for(store.commit(), 1)
        assert backups.frames[sent:] == []
        assert store.hold is not None and store.hold.stats.spared == 2

    asyncio.run(main())


def test_another_op_of_the_session_lets_its_held_deliveries_go_first() -> None:
    async def main() -> None:
        store, replicator, backups = replicated()
        deliver(store, 10, 1)
        deliver(store, 11, 2)
        deliver(store, 12, 1, client_id="other")
        store.delete_session("sub")
        replicator.ship()
        ops = backups.frames[-1][2]
        assert [op[:3] for op in ops[:4]] == [
            [ENQUEUE, "sub", 10], [SEND_QUEUED, "sub", 10], [ENQUEUE, "sub", 11],
            [SEND_QUEUED, "sub", 11]]
        assert ops[4:] == [[DELETE_SESSION, "sub"]]
        assert store.hold is not None and list(store.hold.held) == [("other", 12)]

    asyncio.run(main())


def test_frames_sent_while_a_delivery_is_held_do_not_count_its_forwarded_message() -> None:
    """A node taking over sends again what the replica's marks do not count as handled: the
    message of a held delivery must be among it, or it is lost with the node."""
    async def main() -> None:
        store, replicator, backups = replicated()
        backups.handled = 7
        store.save_session(StoredSession("x", 5, 60))
        replicator.ship()  # a frame with the marks of now: 7 handled
        assert backups.frames[-1][3] == {"p": [1, 7]}
        backups.handled = 8  # frame 8 from p arrives and is delivered, held
        deliver(store, 10, 1)
        backups.handled = 9  # frame 9: for a session whose op goes at once
        store.save_session(StoredSession("y", 5, 60))
        replicator.ship()
        assert backups.frames[-1][3] == {"p": [1, 7]}  # not 9: frame 8's delivery is held
        store.dequeue("sub", 10)
        store.save_session(StoredSession("z", 5, 60))
        replicator.ship()
        assert backups.frames[-1][3] == {"p": [1, 9]}

    asyncio.run(main())


def test_a_new_backup_and_a_lost_one_let_what_is_held_go() -> None:
    async def main() -> None:
        store, replicator, backups = replicated()
        deliver(store, 10, 1)
        replicator.set_backups(["b", "c"])  # c gets a snapshot, which has the delivery
        assert backups.codes()[-2:] == [ENQUEUE, SEND_QUEUED]  # so b gets its ops
        assert store.hold is not None and not store.hold.held
        replicator.acknowledged("b", store.seq)
        replicator.acknowledged("c", store.seq)
        deliver(store, 11, 2)
        replicator.lost("c", exposed=True)  # the other side may take over from c's replica
        assert store.hold.held == {} and replicator.fence_seq == store.seq
        deliver(store, 12, 3)  # fenced: nothing is held
        assert not store.hold.held

    asyncio.run(main())


def test_without_a_hold_every_op_goes_at_once() -> None:
    async def main() -> None:
        store, replicator, backups = replicated(hold=0)
        sent = len(backups.frames)
        deliver(store, 10, 1)
        store.dequeue("sub", 10)
        replicator.ship()
        assert [op[0] for frame in backups.frames[sent:] for op in frame[2]] == [
            ENQUEUE, SEND_QUEUED, DEQUEUE]

    asyncio.run(main())


def test_a_commit_ends_when_what_was_held_before_it_is_gone_whatever_waits_beside_it() -> None:
    """Commits take their marks when they begin and wait for the holds after other waits:
    a later mark may wait before an earlier one."""
    async def main() -> None:
        hold = DeliveryHold(10.0, lambda held: None)
        for seq in range(1, 6):
            hold.add("sub", seq, message(seq), seq, {})
        later = asyncio.ensure_future(hold.resolved(5))
        await ticks()
        earlier = asyncio.ensure_future(hold.resolved(3))
        await ticks()
        for seq in (1, 2, 3):
            hold.cancel(("sub", seq))
        await asyncio.wait_for(earlier, 1)
        assert not later.done()
        hold.release(("sub", 5))
        hold.cancel(("sub", 4))
        await asyncio.wait_for(later, 1)

    asyncio.run(main())
