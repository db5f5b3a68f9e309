"""A copy kept in a merge waits for what the dropped copy's client had, before messages from there.

When a split heals, a node that held a copy of a session apart from this one says so first
(OWNED), then sends the data frames it kept for this node (REPLAY): messages published on its
side while apart, which its own copy delivered to its client then. If this node keeps its
copy, those frames reach it before the other copy's hand-over (MERGE_QUEUE) says which
messages its client had: sent at once, they would reach the client a second time.

So from the OWNED that makes this copy the keeper until that hand-over (its last part), a
message from that node for the sessions concerned is held here, and handed to them after the
hand-over, which leaves out what the client had (by identity). Other sessions get it at once.
If no hand-over comes (the node left, or kept its copy after all), the messages go out when it
leaves, when it says the session is elsewhere, or after the connect timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from hive_core.broker import Message

Deliver = Callable[[Message, "set[str]"], None]
"""Hand a message to the local sessions among the given client ids."""


class MergeWait:
    """Messages from a merging node held for the copies kept here, by node and client id."""

    def __init__(self, deliver: Deliver, timeout: float) -> None:
        self._deliver = deliver
        self._timeout = timeout
        self.waiting: dict[str, set[str]] = {}  # node id -> client ids whose hand-over is due
        # node id -> the messages from it, in order, each with the client ids it is held for
        self._held: dict[str, list[tuple[Message, frozenset[str]]]] = {}

    def expect(self, node_id: str, client_ids: Iterable[str]) -> None:
        """These copies are kept here: ``node_id`` drops its own and hands them over."""
        ids = set(client_ids)
        if not ids:
            return
        self.waiting.setdefault(node_id, set()).update(ids)
        asyncio.get_running_loop().call_later(self._timeout, self.handed_over, node_id, ids)

    def hold(self, node_id: str, message: Message) -> set[str]:
        """A message from ``node_id``: the client ids it waits for there (held for them)."""
        ids = self.waiting.get(node_id)
        if ids:
            self._held.setdefault(node_id, []).append((message, frozenset(ids)))
            return ids
        return set()

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
        held = self._held.pop(node_id, [])
        if waiting:
            self._held[node_id] = [(m, ids) for m, ids in held if ids & waiting]
        else:
            del self.waiting[node_id]
        for message, ids in held:
            if ids & done:
                self._deliver(message, set(ids & done))

    def left(self, node_id: str) -> None:
        self.handed_over(node_id, set(self.waiting.get(node_id, ())))
