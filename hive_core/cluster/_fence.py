"""The fence: client input waits while this node may be out of date on who owns what.

A node that did not run for more than half the heartbeat timeout (SIGSTOP, a VM pause, an
event loop stuck that long) may have been given up by the others meanwhile: its sessions
taken over, its clients moved and their unacknowledged PUBLISHes sent again elsewhere. What
its clients' connections still hold in their buffers was written before the client gave the
node up; routed now, under this node's identities, it would reach every subscriber a second
time. So from the moment the node finds out, every client's input waits (the channel defers
it, in order) until each member it had then has either

- answered a heartbeat this node sent after it woke (the heartbeat carries how many of the
  other side's it has read: what the member did before reading it, a takeover, a session
  moved, has reached this node first, on the same ordered link), or
- come back on a new link and finished the merge (SYNCED), when the link was closed as stale,

or until the heartbeat timeout has passed since (a member that answers nothing by then is
taken for gone by the usual rules). Socket-free: time comes in as arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import anyio

from hive_core.cluster._parts import Member

log = logging.getLogger("hive.cluster")


class Fence:
    """Raised at a pause, lifted once every member of that moment confirmed (see above)."""

    __slots__ = ("_lifted", "_moved", "raised_at", "timeout", "waiting")

    def __init__(self, timeout: float, moved: Callable[[bool], None]) -> None:
        self.timeout = timeout
        self._moved = moved  # told True when the fence goes up, False when it is lifted
        self.raised_at: float | None = None
        # member -> the first heartbeat sent after the wake (by number) it must have read
        self.waiting: dict[str, tuple[Member, int]] = {}
        self._lifted: anyio.Event | None = None

    @property
    def up(self) -> bool:
        return self.raised_at is not None

    def raise_at(self, now: float, paused: float, members: Mapping[str, Member]) -> None:
        """This node did not run for ``paused`` seconds, found at ``now``."""
        if self.raised_at is not None:
            return
        self.raised_at = now
        self.waiting = {peer_id: (m, m.beats_sent + 1) for peer_id, m in members.items()}
        self._lifted = anyio.Event()
        self._moved(True)
        if self.waiting:
            log.warning("this node did not run for %.1f s: its clients' input waits until "
                        "%d members have confirmed what they did meanwhile", paused,
                        len(self.waiting))
        self.check(now, members)

    async def lifted(self) -> None:
        if self._lifted is not None:
            await self._lifted.wait()

    def check(self, now: float, members: Mapping[str, Member]) -> None:
        """After a heartbeat or a SYNCED arrived, and at every heartbeat tick."""
        if self.raised_at is None:
            return
        for peer_id, (member, need) in list(self.waiting.items()):
            current = members.get(peer_id)
            if member.beats_echoed >= need or (current is not None and current is not member
                                                and current.synced):
                del self.waiting[peer_id]
        late = now - self.raised_at > self.timeout
        if self.waiting and not late:
            return
        if self.waiting:
            log.warning("members %s did not confirm within %.1f s: this node's clients are "
                        "served again", sorted(self.waiting), self.timeout)
        elif late is False and self.raised_at != now:
            log.info("every member confirmed what it did while this node did not run: its "
                     "clients are served again")
        self.raised_at = None
        self.waiting = {}
        self._moved(False)
        lifted, self._lifted = self._lifted, None
        if lifted is not None:
            lifted.set()
