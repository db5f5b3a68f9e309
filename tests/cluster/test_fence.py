"""The fence after a pause (cluster/_fence.py), socket-free: members' heartbeat echoes and
merges lift it, the heartbeat timeout ends it, and a client's input waits for it in order."""

from __future__ import annotations

import asyncio
from typing import Any

from hive_core.cluster._fence import Fence
from hive_core.cluster._parts import Member
from hive_ext_api import ClusterNodeAddress

TIMEOUT = 3.0


def member(node_id: str, beats_sent: int = 0) -> Member:
    return Member(node_id, ClusterNodeAddress(node_id, 7800), "0", 4, link=None,  # type: ignore[arg-type]
                  beats_sent=beats_sent)


class Moves:
    def __init__(self) -> None:
        self.seen: list[bool] = []

    def __call__(self, up: bool) -> None:
        self.seen.append(up)


def test_each_member_must_echo_a_heartbeat_sent_after_the_wake_or_come_back_merged() -> None:
    async def main() -> None:
        moves = Moves()
        fence = Fence(TIMEOUT, moves)
        a, b = member("a", beats_sent=7), member("b", beats_sent=3)
        members = {"a": a, "b": b}
        fence.raise_at(100.0, 5.0, members)
        assert fence.up and moves.seen == [True]
        waiter = asyncio.ensure_future(fence.lifted())
        a.beats_echoed = 7  # read before the wake: says nothing of what it did since
        fence.check(100.1, members)
        assert fence.up
        a.beats_echoed = 8  # it read the first heartbeat sent after the wake
        fence.check(100.2, members)
        assert fence.up and set(fence.waiting) == {"b"}
        # b's link was closed as stale; b is back on a new link, merging: not yet.
        members["b"] = again = member("b")
        fence.check(100.3, members)
        assert fence.up
        again.synced = True  # its SYNCED: the merge told this node what b holds
        fence.check(100.4, members)
        assert not fence.up and moves.seen == [True, False]
        await asyncio.wait_for(waiter, 1)

    asyncio.run(main())


def test_the_heartbeat_timeout_lifts_a_fence_a_member_never_answered() -> None:
    async def main() -> None:
        moves = Moves()
        fence = Fence(TIMEOUT, moves)
        members = {"a": member("a")}
        fence.raise_at(100.0, 5.0, members)
        fence.check(100.0 + TIMEOUT, members)
        assert fence.up
        fence.check(100.1 + TIMEOUT, members)
        assert not fence.up and moves.seen == [True, False]

    asyncio.run(main())


def test_a_node_alone_is_not_fenced_and_a_second_pause_does_not_move_the_first() -> None:
    async def main() -> None:
        moves = Moves()
        fence = Fence(TIMEOUT, moves)
        fence.raise_at(100.0, 5.0, {})
        assert not fence.up and moves.seen == [True, False]
        members: dict[str, Any] = {"a": member("a")}
        fence.raise_at(200.0, 5.0, members)
        fence.raise_at(202.0, 5.0, members)  # found again by a client's read: the same fence
        assert fence.raised_at == 200.0
        fence.check(200.0 + TIMEOUT + 0.1, members)
        assert not fence.up

    asyncio.run(main())
