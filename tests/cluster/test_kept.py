"""What a node keeps for a silent peer goes to disk (cluster/_kept.py): the wait of a local
publisher's PUBACK ends at the commit, not at the peer's acknowledgement; the rows go as the
peer acknowledges. Forwarding and KeptOnDisk on a memory store, in the test's event loop."""

from __future__ import annotations

import asyncio

import pytest

from hive_core.cluster import _kept
from hive_core.cluster._forwarding import Forwarding
from hive_core.cluster._kept import KEPT_PREFIX, KeptOnDisk, kept_rows, message_of
from hive_core.cluster._wire import FrameKind, encode_frame, encode_publish_frame
from hive_core.persistence import MemorySessionStore

pytestmark = [pytest.mark.timeout(10), pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def publish(n: int, qos: int = 1) -> bytes:
    return encode_publish_frame(f"t/{n}", b"%d" % n, qos, False, b"", None, "pub", 100 + n)


async def waited(forwarding: Forwarding, timeout: float) -> bool:
    """Whether a PUBACK's wait for everything sent so far ends within ``timeout``."""
    try:
        await asyncio.wait_for(forwarding.acknowledged({"p"}), timeout)
    except TimeoutError:
        return False
    return True


def on_disk() -> tuple[MemorySessionStore, Forwarding]:
    """A store, and forwarding that writes to it for a peer silent for 50 ms."""
    store = MemorySessionStore()
    forwarding = Forwarding()
    forwarding.keep_on(KeptOnDisk("me", store, after=0.05))
    return store, forwarding


def rows_of(store: MemorySessionStore) -> list[tuple[str, int, str, int]]:
    return [(client_id, seq, m.topic, m.serial)
            for client_id, seq, m in kept_rows(store.contents(now=0.0))]


async def test_a_silent_peer_gets_its_frames_written_and_the_wait_ends_at_the_commit() -> None:
    store, forwarding = on_disk()
    for n in range(3):
        forwarding.sent("p", publish(n))
    assert not await waited(forwarding, 0.03)  # a live peer would have answered by now
    assert await waited(forwarding, 0.5)  # silent: on disk, and the wait is over
    rows = rows_of(store)
    assert [(c, t, s) for c, _seq, t, s in rows] == [
        (KEPT_PREFIX + "p", "t/0", 100), (KEPT_PREFIX + "p", "t/1", 101),
        (KEPT_PREFIX + "p", "t/2", 102)]
    forwarding.sent("p", publish(3))  # written as it is sent, while the peer is silent
    assert await waited(forwarding, 0.01)
    assert len(rows_of(store)) == 4
    forwarding.acknowledged_by("p", 2)
    assert [t for _c, _s, t, _n in rows_of(store)] == ["t/2", "t/3"]
    forwarding.acknowledged_by("p", 4)  # everything: no longer on disk
    assert rows_of(store) == [] and forwarding.disk is not None
    assert "p" not in forwarding.disk.peers and forwarding.disk.rows == 0
    forwarding.sent("p", publish(4))  # a live peer again: nothing written
    assert rows_of(store) == []


async def test_a_long_backlog_is_written_a_slice_per_turn_and_frames_sent_meanwhile_join_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A silent node's backlog goes to disk SLICE frames per turn of the event loop, not in
    one callback that stalls the node; a frame sent meanwhile is written after the backlog,
    in its place, and the wait covers nothing that is not written yet."""
    monkeypatch.setattr(_kept, "SLICE", 4)
    store, forwarding = on_disk()
    for n in range(10):
        forwarding.sent("p", publish(n))
    forwarding.to_disk("p")
    disk = forwarding.disk
    assert disk is not None
    assert [t for _c, _s, t, _n in rows_of(store)] == ["t/0", "t/1", "t/2", "t/3"]
    assert disk.covers("p", 0, 4) and not disk.covers("p", 0, 5)
    forwarding.sent("p", publish(10))  # behind the backlog: not written before it
    assert len(rows_of(store)) == 4
    await asyncio.sleep(0)
    assert len(rows_of(store)) == 8 and not disk.covers("p", 0, 9)
    for _ in range(3):
        await asyncio.sleep(0)
    assert [t for _c, _s, t, _n in rows_of(store)] == [f"t/{n}" for n in range(11)]
    assert disk.covers("p", 0, 11)
    assert await waited(forwarding, 0.05)
    forwarding.sent("p", publish(11))  # the backlog is written: written as it is sent
    assert len(rows_of(store)) == 12


async def test_a_backlog_acknowledged_past_what_is_written_goes_on_after_the_acknowledged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two slices the peer acknowledges past what is written (but not the whole
    backlog), or the oldest frames are dropped at twice the bound: the next slice writes the
    frames after those, and none of them is left without a row while the wait counts it."""
    monkeypatch.setattr(_kept, "SLICE", 4)
    store, forwarding = on_disk()
    for n in range(12):
        forwarding.sent("p", publish(n))
    forwarding.to_disk("p")
    forwarding.acknowledged_by("p", 6)  # places 1 to 6; 1 to 4 were written
    for _ in range(3):
        await asyncio.sleep(0)
    assert [t for _c, _s, t, _n in rows_of(store)] == [f"t/{n}" for n in range(6, 12)]
    assert forwarding.disk is not None and forwarding.disk.covers("p", 6, 12)


async def test_a_backlog_acknowledged_while_it_is_written_is_not_written_further(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_kept, "SLICE", 4)
    store, forwarding = on_disk()
    for n in range(10):
        forwarding.sent("p", publish(n))
    forwarding.to_disk("p")
    forwarding.acknowledged_by("p", 10)  # the peer is back and handled it all
    for _ in range(4):
        await asyncio.sleep(0)
    assert rows_of(store) == [] and forwarding.disk is not None
    assert "p" not in forwarding.disk.peers and forwarding.disk.rows == 0


async def test_qos_0_frames_are_kept_in_memory_only_and_do_not_hold_the_wait() -> None:
    store, forwarding = on_disk()
    for n in range(4):
        forwarding.sent("p", publish(n, qos=n % 2))  # QoS 0, 1, 0, 1
    assert await waited(forwarding, 0.5)  # silent: the QoS 1 ones on disk end the wait
    assert [t for _c, _s, t, _n in rows_of(store)] == ["t/1", "t/3"]
    forwarding.sent("p", publish(4, qos=0))  # sent while it is silent: not written either
    forwarding.sent("p", publish(5))
    assert await waited(forwarding, 0.05)
    assert [t for _c, _s, t, _n in rows_of(store)] == ["t/1", "t/3", "t/5"]
    assert len(forwarding.outgoing["p"].frames) == 6  # every frame is kept for a replay
    forwarding.acknowledged_by("p", 6)
    assert rows_of(store) == []


async def test_a_frame_that_cannot_be_written_keeps_the_wait_for_the_peer() -> None:
    store, forwarding = on_disk()
    forwarding.sent("p", publish(0))
    forwarding.sent("p", encode_frame(FrameKind.SHARED_PUBLISH, ["g", "t/#", []]))
    assert not await waited(forwarding, 0.3)  # a shared-subscription frame: not on disk
    assert len(rows_of(store)) == 1
    forwarding.acknowledged_by("p", 2)
    assert await waited(forwarding, 0.01)
    assert rows_of(store) == []


async def test_rows_outlive_the_process_and_a_forgotten_peer_takes_its_rows_along() -> None:
    store, forwarding = on_disk()
    forwarding.sent("p", publish(7))
    assert await waited(forwarding, 0.5)
    restarted = KeptOnDisk("me", store)  # the next run of the node reads them back
    restarted.restore(store.contents(now=0.0))
    [(_client, _seq, stored)] = restarted.restored
    message = message_of(stored)
    assert (message.topic, message.payload, message.mid) == ("t/7", b"7", ("me", 107))
    forwarding.abandon("p")  # the peer is forgotten (or taken over): its rows go
    assert rows_of(store) == []


async def test_once_the_peer_has_caught_up_new_frames_are_not_written_and_it_is_waited_for_again() -> None:  # noqa: E501
    store, forwarding = on_disk()
    for n in range(3):
        forwarding.sent("p", publish(n))
    assert await waited(forwarding, 0.5)  # silent: written
    forwarding.sent("p", publish(3))  # written as it is sent
    forwarding.acknowledged_by("p", 3)  # what was kept when it fell silent: it is back
    assert [t for _c, _s, t, _n in rows_of(store)] == ["t/3"]
    forwarding.sent("p", publish(4))  # not written: a live peer is waited for
    assert [t for _c, _s, t, _n in rows_of(store)] == ["t/3"]
    assert not await waited(forwarding, 0.02)
    forwarding.acknowledged_by("p", 5)
    assert await waited(forwarding, 0.01)
    assert rows_of(store) == [] and forwarding.disk is not None
    assert forwarding.disk.peers == {}
