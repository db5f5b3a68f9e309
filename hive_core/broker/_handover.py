"""A session handed over from another node, and the messages that reach it twice.

While a session moves (SESSION_FETCH ... SESSION_TAKEN), both nodes hold it for a moment. The
old node keeps queueing what is routed to it and sends that queue along afterwards (the tail);
the other nodes start routing to the new node as soon as they learn its subscriptions. A
message sent in between reaches the new node twice: directly, and in the tail. For QoS 2 that
would break exactly-once.

Every message a node sends to other nodes carries an identity: the origin node and its serial
there (node protocol 4), kept with the message wherever it is queued. The new node notes the
identities of what reaches the session directly while it waits for the tail, and of what the
tail brings; a message already seen one way is skipped the other way. The window closes a while
after the tail: by then nothing routed to this node before the old node let go is still on its
way. Messages without an identity (from a node of protocol 3) are never skipped.

A split that heals is the same case with another tail: the copy of a session that is dropped
hands its queue to the one kept (MERGE_QUEUE), while the other nodes may route to both for a
moment. The keeper opens a window for its sessions when the merge starts, or when a node that
restarted claims a copy it kept on disk (OWNED).

A window can open a moment after a message it should know of arrived directly: the claim comes
on one link, the message on another. So the broker keeps what reached each session directly
from other nodes in the last 1 to 2 seconds, and a new window starts from that.
"""

from __future__ import annotations

MessageId = tuple[str, int]
"""(origin node id, the origin's serial): a message's identity across the cluster."""

WINDOW_AFTER_TAIL = 10.0
"""Seconds a window stays open after the tail arrived (messages routed earlier still land)."""
WINDOW_WITHOUT_TAIL = 60.0
"""Seconds a window waits for a tail at most (the old node may have failed)."""
RECENT_DIRECT_SECONDS = 1.0
"""Direct arrivals are kept in two generations of this many seconds each, for new windows."""
RECENT_DIRECT_MAX = 200_000
"""A generation that holds more arrivals than this is swapped early (memory stays bounded)."""


class HandOverWindow:
    """The identities one handed-over session got directly, and those its tail brought."""

    __slots__ = ("direct_ids", "skipped", "tail_ids")

    def __init__(self) -> None:
        # Made on first use: a merge opens a window for every session of a node at once.
        self.direct_ids: set[MessageId] | None = None
        self.tail_ids: set[MessageId] | None = None
        self.skipped = 0

    def direct(self, mid: MessageId | None) -> bool:
        """A message routed here directly: False when the tail brought it already."""
        if mid is None:
            return True
        if self.tail_ids is not None and mid in self.tail_ids:
            self.skipped += 1
            return False
        if self.direct_ids is None:
            self.direct_ids = set()
        self.direct_ids.add(mid)
        return True

    def from_tail(self, mid: MessageId | None) -> bool:
        """A message of the old node's tail: False when it arrived here directly."""
        if mid is None:
            return True
        if self.direct_ids is not None and mid in self.direct_ids:
            self.skipped += 1
            return False
        if self.tail_ids is None:
            self.tail_ids = set()
        self.tail_ids.add(mid)
        return True
