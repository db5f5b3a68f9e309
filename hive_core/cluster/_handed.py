"""What a node hands on for a session it held, to the node that holds it now.

- SESSION_TAIL: what a session's old node queued for it while handing it over (sent after
  SESSION_TAKEN, ``Custody._on_taken``). A tail that reaches a node the session has left
  meanwhile (handed on, or a merge kept another node's copy) follows it on.
- MERGE_QUEUE: the queue of a copy dropped in a merge (``Custody._drop_copy``), for the keeper.
  One that reaches the keeper after the session left it (its client connected elsewhere
  during the merge) follows it on too, whole: what the dropped copy's client had and sent
  goes with it.

Between nodes that say so in their HELLO (``counts_tails``, ``identities``) both are data
frames, as a forwarded PUBLISH (``_forwarding.py``): kept by the sender until the receiver has
their messages durably, sent again after a reconnect, and rescued to whoever takes the receiver
over if it fails. Each session takes each message once, by its identity.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hive_core.broker import SessionHolder
from hive_core.cluster._parts import FrameHandler, Member, NodeContext
from hive_core.cluster._replication import inflight_of, message_fields
from hive_core.cluster._session_frames import in_parts
from hive_core.cluster._wire import FrameKind, encode_frame
from hive_ext_api import StoredMessage

log = logging.getLogger("hive.cluster")

TAIL_HOPS = 4
"""Nodes a session's tail is sent on through at most, after the session (two directories that
disagree for a moment must not send it back and forth)."""


class Handed:
    """Tails and merge queues, sent and taken in."""

    def __init__(self, node: NodeContext, adopted_marks: dict[str, int],
                 owner_of: Callable[[str], str | None]) -> None:
        self.node = node
        self.holder: SessionHolder = node.broker.custody
        self.adopted_marks = adopted_marks  # Custody's: a replica's last position, per client
        self._owner_of = owner_of  # the directory's holder of a session (another node)
        self.tails_sent_on = 0  # messages of tails that reached this node after their session
        self.merge_queues_sent_on = 0  # parts of merge queues that did

    def frame_handlers(self) -> dict[FrameKind, FrameHandler]:
        return {FrameKind.SESSION_TAIL: self._on_tail,
                FrameKind.MERGE_QUEUE: self._on_merge_queue}

    def send_tail(self, member: Member, client_id: str,
                  tail: list[tuple[StoredMessage, tuple[str, int] | None]]) -> None:
        """What was queued here for a session while ``member`` took it over."""
        identified = member.protocol >= 4
        entries = [[*message_fields(m), *(mid or ("", 0))] if identified
                   else message_fields(m) for m, mid in tail]
        self._send_tail(member.node_id, client_id, entries)

    def _send_tail(self, node_id: str, client_id: str, entries: list[list[Any]],
                   hops: int = 0) -> bool:
        """A session's tail to ``node_id``. To a node that counts tails, as data frames: kept
        here until that node has them durably (FORWARD_ACK), sent again after a reconnect,
        rescued to whoever takes that node over if it fails (also to such a node that is
        absent now). Once, else, to a linked node. False when it could not go."""
        node = self.node
        member = node.members.get(node_id)
        counted = node_id in node.membership.counts_tails
        if member is None and not (counted and node_id in node.membership.absent):
            return False
        for part in in_parts(entries, lambda f: len(f[1])):
            if not counted:
                assert member is not None
                member.link.send(FrameKind.SESSION_TAIL, [client_id, part])
                continue
            frame = encode_frame(FrameKind.SESSION_TAIL, [client_id, part, hops])
            if member is not None:
                member.link.send_encoded(frame)
            node.forwarding.sent(node_id, frame)
        return True

    def _on_tail(self, member: Member, body: Any) -> None:
        """SESSION_TAIL: what the session's old node queued for it while handing it over."""
        node = self.node
        if member.node_id in node.membership.counts_tails:  # a data frame
            if not node.forwarding.arrived(member.node_id):
                return  # sent again after a reconnect, handled before
            node.acknowledge_soon(member.node_id)
        self.take_tail(body)

    def take_tail(self, body: list[Any]) -> None:
        """A SESSION_TAIL's body (from a member, or rescued from a failed node's share).

        Queued for the session here. If the session is not here (handed on to another node
        already, or a merge kept another node's copy and dropped this one), the tail follows
        it to the node holding it now (the directory's, else where it went from here): the
        publishers of its messages were answered, and the old node has forgotten them."""
        client_id, entries = str(body[0]), body[1]
        hops = int(body[2]) if len(body) > 2 else 0
        if not self.holder.has_session(client_id) and hops < TAIL_HOPS:
            holder = self._owner_of(client_id) or self.node.moved.went_to(client_id)
            if holder is not None and holder != self.node.node_id \
                    and holder in self.node.membership.counts_tails \
                    and self._send_tail(holder, client_id, entries, hops + 1):
                self.tails_sent_on += len(entries)
                log.info("the session of %r is on node %s now: its tail of %d messages, "
                         "which reached this node after it left, sent on there", client_id,
                         holder, len(entries))
                return
        self.holder.append_handed_over(client_id, _tail_messages(entries))

    def _on_merge_queue(self, member: Member, body: Any) -> None:
        node = self.node
        if member.identities:  # a data frame: counted, skipped if handled, acknowledged
            if not node.forwarding.arrived(member.node_id):
                return
            node.acknowledge_soon(member.node_id)
        self.merge_queue(body, member.node_id)
        if len(body) > 3 and body[3] is not None:  # the last part: what the client had
            node.merge_wait.handed_over(member.node_id, [str(body[0])])

    def merge_queue(self, body: list[Any], sender: str | None = None) -> None:
        """A MERGE_QUEUE's body: from a member (``sender``), or rescued from a failed keeper's
        share. If the session left this node meanwhile, the body goes on to the node holding
        it now, as it is."""
        client_id = str(body[0])
        if not self.holder.has_session(client_id) and self._send_merge_queue_on(
                client_id, body, sender):
            return
        _merge_queue(self.node, self.adopted_marks, client_id, int(body[1]), body[2],
                     body[3] if len(body) > 3 else None,
                     [int(pid) for pid in body[4]] if len(body) > 4 and body[4] else None)
        if len(body) > 5 and body[5]:
            self.holder.merge_window(client_id, [inflight_of(f) for f in body[5]])


    def _send_merge_queue_on(self, client_id: str, body: list[Any], sender: str | None) -> bool:
        """To the node the session went to from here, else the directory's holder: a linked
        node that takes merge queues as data frames (kept here until it has them durably, and
        sent again after a reconnect; in memory only), never back to where it came from, and
        through at most TAIL_HOPS nodes (``body[6]``; a part before the last has None where
        the last has what the client had and sent)."""
        node = self.node
        hops = int(body[6]) if len(body) > 6 else 0
        if hops >= TAIL_HOPS:
            return False
        member = None
        for holder in (node.moved.went_to(client_id), self._owner_of(client_id)):
            member = node.members.get(holder) if holder not in (None, node.node_id, sender) \
                else None
            if member is not None and member.identities:
                break
        else:
            return False
        assert member is not None
        last = body[3:6] if len(body) > 3 and body[3] is not None else [None, None, None]
        frame = encode_frame(FrameKind.MERGE_QUEUE, [*body[:3], *last, hops + 1])
        member.link.send_encoded(frame)
        node.forwarding.sent(member.node_id, frame)
        self.merge_queues_sent_on += 1
        log.info("the session of %r is on node %s now: the queue of a copy dropped in a merge, "
                 "which reached this node after the session left, sent on there (%d messages)",
                 client_id, member.node_id, len(body[2]))
        return True


def _tail_messages(entries: list[list[Any]]
                   ) -> list[tuple[StoredMessage, tuple[str, int] | None]]:
    """A SESSION_TAIL's messages, with their identities (from a node of protocol 4)."""
    return [(StoredMessage(*fields[:7]),
             (str(fields[7]), int(fields[8])) if len(fields) > 8 and fields[8] else None)
            for fields in entries]


def _merge_queue(node: NodeContext, marks: dict[str, int], client_id: str, mark: int,
                 entries: list[list[Any]], taken: list[list[Any]] | None = None,
                 inbound: list[int] | None = None) -> None:
    """MERGE_QUEUE: the queue of a dropped copy, added here but for what this copy took
    already (by identity; for messages without one, positions up to the marks were in
    both copies: a replica's, delivered or queued here already). With the last part:
    ``taken``, the identities that copy's client had, not sent again from here;
    ``inbound``, its client's QoS 2 PUBLISHes routed there and not released."""
    mark = max(mark, marks.get(client_id, 0))
    new: list[tuple[StoredMessage, tuple[str, int] | None]] = []
    handled = 0
    for entry in entries:
        seq, fields = entry[0], entry[1]
        origin, serial = (str(entry[2]), int(entry[3])) if len(entry) > 3 else ("", 0)
        # Positions count on the node that queued the message, so a mark says something
        # only of a message without identity (from a node of protocol 3); one with an
        # identity is taken once by it, whichever copy held it (-1: from the window).
        if not serial and 0 <= seq <= mark:
            continue
        if len(entry) > 6 and entry[4] == node.node_id and origin and \
                int(entry[6]) <= node.forwarding.handled_before(origin, int(entry[5])):
            # Rescued from this node by a takeover while it was frozen, yet handled here
            # before (its replica had not recorded it): delivered already.
            handled += 1
            continue
        new.append((StoredMessage(*fields), (origin, serial) if serial else None))
    if handled:
        log.info("the copy of %r held elsewhere had %d messages this node had handled "
                 "already: not added again", client_id, handled)
    if new or taken or inbound:
        node.broker.custody.merge_queue(
            client_id, new, [(str(o), int(n)) for o, n in taken or ()], inbound)
