"""A copy kept in a merge waits for what the dropped copy's client had, before messages from there.

When a split heals, a node that held a copy of a session apart from this one says so first
(OWNED), then sends the data frames it kept for this node (REPLAY): messages published on its
side while apart, which its own copy delivered to its client then. If this node keeps its
copy, those frames reach it before the other copy's hand-over (MERGE_QUEUE) says which
messages its client had: sent at once, they would reach the client a second time.

So from the OWNED that makes this copy the keeper until that hand-over (its last part), a
message from another node for the sessions concerned is held here (from any node: a third
node may pass on what the dropped copy's node replayed to it, see _moved.py), and handed to
them after the hand-over, which leaves out what the client had (by identity). Other
sessions get it at once.
If no hand-over comes (the node left, or kept its copy after all), the messages go out when it
leaves, when it says the session is elsewhere, or after the connect timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable

from hive_core.broker import Message

Deliver = Callable[[Message, "set[str]"], None]
"""Hand a message to the local sessions among the given client ids."""


class MergeWait:
    """Messages from other nodes held for the copies kept here until their hand-overs."""

    def __init__(self, deliver: Deliver, timeout: float) -> None:
        self._deliver = deliver
        self._timeout = timeout
        self.waiting: dict[str, set[str]] = {}  # node id -> client ids whose hand-over is due
        self._held: list[tuple[Message, frozenset[str]]] = []  # each with whom it waits for

    def expect(self, node_id: str, client_ids: Iterable[str]) -> None:
        """These copies are kept here: ``node_id`` drops its own and hands them over."""
        ids = set(client_ids)
        if not ids:
            return
        self.waiting.setdefault(node_id, set()).update(ids)
        asyncio.get_running_loop().call_later(self._timeout, self.handed_over, node_id, ids)

    def hold(self, message: Message, among: Collection[str] | None = None) -> set[str]:
        """A message from another node (for ``among`` only, else for whoever it matches):
        the client ids it is held for, whichever node it came from (the dropped copy's node
        may have passed it on to a third node)."""
        ids = set().union(*self.waiting.values())
        if among is not None:
            ids &= set(among)
        if ids:
            self._held.append((message, frozenset(ids)))
        return ids

    def handed_over(self, node_id: str, client_ids: Iterable[str]) -> None:
        """The hand-over of these copies from ``node_id`` is in (or will not come): the
        messages held for them go to them now."""
        waiting = self.waiting.get(node_id)
        if not waiting:
            return
        done = waiting & set(client_ids)
        if not done:
            return
        waiting -= done
        if not waiting:
            del self.waiting[node_id]
        done -= set().union(*self.waiting.values())  # still waiting for another node's
        if not done:
            return
        held, self._held = self._held, []
        for message, ids in held:
            if ids & done:
                self._deliver(message, set(ids & done))
            if ids - done:
                self._held.append((message, ids - done))

    def release(self, client_id: str) -> None:
        """The session leaves this node (fetched by another node): what is held for it goes
        in now, whichever hand-overs are due, and leaves with it (a hand-over that comes
        later follows the session, and takes out there what its client had)."""
        for node_id in [n for n, ids in self.waiting.items() if client_id in ids]:
            self.handed_over(node_id, [client_id])

    def left(self, node_id: str) -> None:
        self.handed_over(node_id, set(self.waiting.get(node_id, ())))
