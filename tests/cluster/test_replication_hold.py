"""QoS 1 deliveries held back from the backups (cluster/_replication_hold.py): a delivery
acknowledged within ``<delivery-hold>`` sends the backups nothing, one acknowledged later sends
its ops, and a commit made meanwhile waits for one or the other. Frames sent while a delivery
is held do not count the forwarded message behind it as handled, and every other op of the
session, a new backup, a lost one and a fence let the held ops go first."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from growth import LINEAR_AT_MOST, growth_async

from hive_core.broker import SessionRecords
from hive_core.broker._records import Records, session_from
from hive_core.cluster._replication import (
    DELETE_SESSION,
    DEQUEUE,
    ENQUEUE,
    SAVE_INFLIGHT,
    SEND_QUEUED,
    ReplicatingStore,
    Replicator,
)
from hive_core.cluster._replication_hold import DeliveryHold
from hive_core.persistence import (
    HOLD_PAUSE,
    FileSessionStore,
    MemorySessionStore,
    StoredMessage,
    StoredSession,
)
from hive_ext_api import StoredInflight

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
    store.identities = store.taken_ops = store.sent_ops = True  # backups of this release
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


def message(n: int, qos: int = 1) -> StoredMessage:
    """A message forwarded by peer "p", with its identity."""
    return StoredMessage("t", b"%d" % n, qos, False, None, None, "pub", "p", n)


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


def test_a_queued_qos2_delivery_does_not_overtake_the_held_qos1_ones_of_its_session() -> None:
    """Docs: 'any other op of the client ... ships what is held of it first, so a replica never
    applies a later write of a session before an earlier one'. A QoS 2 message queued behind
    a full window of held QoS 1 deliveries goes out first."""
    async def main() -> None:
        store, replicator, backups = replicated()
        sent = len(backups.frames)
        deliver(store, 10, 1)  # held (sent, waiting for its PUBACK)
        store.enqueue("sub", 11, message(11, qos=2))
        replicator.ship()
        ops = [op[:3] for f in backups.frames[sent:] for op in f[2]]
        assert ops[:1] == [[ENQUEUE, "sub", 10]], ops  # fails: [['q', 'sub', 11]] alone

    asyncio.run(main())


def test_a_qos1_delivery_inside_an_atomic_block_does_not_overtake_the_held_ones() -> None:
    """A QoS 2 PUBLISH from a persistent session is routed inside records.atomic()
    (Channel.route): its QoS 1 copies to other subscribers are written there."""
    async def main() -> None:
        store, replicator, backups = replicated()
        sent = len(backups.frames)
        deliver(store, 10, 1)  # held
        with store.atomic():
            deliver(store, 11, 2)  # routed from a QoS 2 publisher's block: not held, ships
        replicator.ship()
        ops = [op[:3] for f in backups.frames[sent:] for op in f[2]]
        assert ops[:1] == [[ENQUEUE, "sub", 10]], ops  # fails: E11, S11 without E10

    asyncio.run(main())


def test_the_hold_forgets_clients_whose_sessions_are_gone() -> None:
    """What DeliveryHold knew of clients acknowledging only shrank when a hold ran out: one
    entry per client id that ever got a QoS 1 delivery, for the life of the process (the
    file store drops them in delete_session)."""
    async def main() -> None:
        store, _replicator, _backups = replicated()
        for n in range(1000):
            client = f"c{n}"
            store.save_session(StoredSession(client, 5, 0))
            deliver(store, 100 + n, 1, client_id=client)
            store.dequeue(client, 100 + n)
            store.delete_session(client)
        assert store.hold is not None
        assert len(store.hold._acknowledging) < 1000, len(store.hold._acknowledging)

    asyncio.run(main())


def test_a_session_arriving_whole_is_not_held_for_a_client_not_connected_here() -> None:
    """Records.write_all (a session fetched before its CONNACK, adopted in a takeover) writes
    its window as rows marked sent: held, its client (not connected here yet) could not
    acknowledge them, the commit before the CONNACK would wait the whole hold, and the
    client would get nothing held for HOLD_PAUSE after."""
    async def main() -> None:
        store, replicator, backups = replicated()
        records = SessionRecords(StoredSession("moved", 5, 60), [(7, message(7))], [], [],
                                 {7: 3})
        session = session_from(records, time.time())
        assert 3 in session.inflight
        Records(store).write_all(session, keep_positions=True)
        assert store.hold is not None and not store.hold.held
        commit = asyncio.ensure_future(store.commit())
        await ticks()
        replicator.acknowledged("b", store.seq)
        await asyncio.wait_for(commit, HOLD / 2)
        assert [op[0] for op in backups.ops()][-2:] == [ENQUEUE, SEND_QUEUED]

    asyncio.run(main())


def test_expiring_many_clients_at_once_is_not_quadratic() -> None:
    """_expire calls release_client per late client, and release_client scans every held
    key: clients x held (a fan-out to many subscribers that all run late, e.g. after a
    pause of the node, stalls the loop)."""
    async def main() -> None:
        hold = DeliveryHold(3600.0, lambda held: None)
        n = 20000
        for i in range(n):
            hold.add(f"c{i}", i, message(i), 1, {})
        for entry in hold.held.values():
            entry.since -= 7200  # all ran out
        began = time.perf_counter()
        hold._expire()
        took = time.perf_counter() - began
        assert not hold.held and took < 0.5, took

    asyncio.run(main())


def test_each_puback_does_not_cost_one_step_per_waiting_commit() -> None:
    async def main() -> None:
        hold = DeliveryHold(10.0, lambda held: None)
        hold.add("slow", 0, message(0), 1, {})  # one slow subscriber holds every commit
        waiters = [asyncio.ensure_future(hold.resolved(hold.marks)) for _ in range(2000)]
        await asyncio.sleep(0)
        n = 20000
        for i in range(1, n + 1):
            hold.add("fast", i, message(i), 1, {})
        began = time.perf_counter()
        for i in range(1, n + 1):
            hold.cancel(("fast", i))
        took = time.perf_counter() - began
        for w in waiters:
            w.cancel()
        assert took < 0.2, took

    asyncio.run(main())


def test_a_frame_with_a_delivery_that_is_not_held_counts_its_forwarded_message() -> None:
    """Frame 8 from p is a SHARED_PUBLISH at QoS 2 for member x here (sent at once: its
    in-flight row goes at once, QoS 2 is never held). Another subscriber's QoS 1 delivery,
    held from before, keeps the marks at 7: the replica holds x's delivery of frame 8 and
    counts frame 8 as not handled. A takeover (Takeover._unhandled) gets frame 8 from p again
    and deliver_rescued hands the SHARED_PUBLISH to the group again (it has no identity,
    _deliver_to_group checks none): the group gets a QoS 2 message twice. Before the hold the
    frame carrying x's row carried 8."""
    async def main() -> None:
        store, replicator, backups = replicated()
        backups.handled = 7
        store.save_session(StoredSession("x", 5, 60))
        replicator.ship()
        deliver(store, 10, 1)  # "sub": a QoS 1 delivery, held
        backups.handled = 8  # frame 8 arrives: QoS 2, shared group member x
        with store.atomic():  # Records.sent for QoS 2
            unidentified = StoredMessage("s", b"m", 2, False, None, None, "pub")
            store.save_inflight(StoredInflight("x", 1, "out", "publish", unidentified))
        replicator.ship()
        _node, _first, ops, marks = backups.frames[-1]
        # the held delivery goes first, so that the frame can count frame 8
        assert [op[0] for op in ops] == [ENQUEUE, SEND_QUEUED, SAVE_INFLIGHT]
        assert marks == {"p": [1, 8]}, marks
        assert store.hold is not None and not store.hold.held

    asyncio.run(main())


def test_after_an_unidentified_op_nothing_is_held_until_its_frame_is_shipped() -> None:
    """One read from p: frame 8 is a SHARED_PUBLISH at QoS 2 for x (no identity; its row
    goes at once), frame 9 a QoS 1 delivery to "sub" (held). _unmarked released what was
    held *before* x's row, but the hold made *after* it, in the same turn, sets the floor of
    the frame that carries x's row: it carries 7, a takeover sends frame 8 again and the
    group gets the QoS 2 message twice (what 4515a02 meant to prevent)."""
    async def main() -> None:
        store, replicator, backups = replicated()
        backups.handled = 7
        store.save_session(StoredSession("x", 5, 60))
        replicator.ship()
        backups.handled = 8
        with store.atomic():  # Records.sent for QoS 2
            unidentified = StoredMessage("s", b"m", 2, False, None, None, "pub")
            store.save_inflight(StoredInflight("x", 1, "out", "publish", unidentified))
        backups.handled = 9
        deliver(store, 10, 1)  # same read, next frame: not held, or it would set the floor
        replicator.ship()
        _node, _first, ops, marks = backups.frames[-1]
        assert [op[0] for op in ops] == [SAVE_INFLIGHT, ENQUEUE, SEND_QUEUED]
        assert marks == {"p": [1, 9]}, marks
        deliver(store, 11, 2)  # the frame went: held again
        assert store.hold is not None and list(store.hold.held) == [("sub", 11)]

    asyncio.run(main())


def test_the_first_qos1_delivery_of_an_unidentified_message_is_held_anyway() -> None:
    """Its frame must carry the marks of now: it is not held (holding it would lower them),
    nor is anything else until that frame is shipped."""
    async def main() -> None:
        store, _replicator, _backups = replicated()
        deliver(store, 9, 1, client_id="other")  # held
        m = StoredMessage("s", b"m", 1, False, None, None, "pub")  # shared group, QoS 1
        store.enqueue("sub", 10, m)
        store.send_queued("sub", 10, 1)
        assert store.hold is not None
        assert ("sub", 10) not in store.hold.held

    asyncio.run(main())


def test_write_all_leaves_the_file_store_holding_what_is_queued_next_for_the_client() -> None:
    """Records.write_all runs in one atomic() block, so its rows are not held; but the file
    store's send_queued still calls _holds_for, which marks the client (not connected here)
    as acknowledging: a message queued for it within the hold (append_handed_over, any
    publish before the CONNACK) is held, the commit before the CONNACK waits the whole
    hold, and the client is then paused for HOLD_PAUSE."""
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = FileSessionStore(Path(tmp), sync=False, delivery_hold=HOLD)
            await store.open()
            try:
                records = SessionRecords(StoredSession("moved", 5, 60), [(7, message(7))],
                                         [], [], {7: 3})
                for _seq, m in records.queue:
                    m.properties = b""
                session = session_from(records, time.time())
                Records(store).write_all(session, keep_positions=True)
                await store.commit()
                m8 = message(8)
                m8.properties = b""
                store.enqueue("moved", 8, m8)  # queued for it, before its CONNACK
                began = time.monotonic()
                await store.commit()
                took = time.monotonic() - began
                assert took < HOLD / 2, took
            finally:
                await store.close()

    asyncio.run(main())


def test_releasing_or_acknowledging_a_burst_in_order_is_not_quadratic() -> None:
    """release()/cancel() compute next(iter(self.held)) on every call; a plain dict keeps the
    slots of popped entries until it is resized, and iteration walks over them: popping n
    entries from the front costs n**2/2 slot visits (release_all, _expire of many clients,
    a fan-out acknowledged in order). collections.OrderedDict finds its first in O(1)."""
    async def timed(n: int) -> float:
        hold = DeliveryHold(3600.0, lambda held: None)
        for i in range(n):
            hold.add(f"c{i}", i, message(i), 1, {})
        began = time.perf_counter()
        for i in range(n):  # each subscriber's PUBACK, in the order of the fan-out
            hold.cancel((f"c{i}", i))
        return time.perf_counter() - began

    ratio = asyncio.run(growth_async(timed, 10000))
    assert ratio < LINEAR_AT_MOST, ratio
