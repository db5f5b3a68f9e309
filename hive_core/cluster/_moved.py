"""Sessions that moved away from this node while other nodes may still route to it for them.

A node routes a message by the topic filters it knows of each other node. When a session
moves away from this node (its client connected on another node, which fetched it), a node
that has not heard of that yet still routes here what the session subscribed to: a message in
flight at that moment, or, from a node cut off from the cluster meanwhile, everything it
acknowledged in that time, kept for this node and sent again after the heal. Nothing here
matches those messages any more, and without this part they would be lost.

So a session that moved away is remembered (its filters, the node it went to) until every
other node has confirmed that it routes those filters there: ROUTE_TO, answered by ROUTED once
in effect. Links are FIFO, so what a node routed here before its ROUTED arrives here before
it. A node not linked now is asked when it is linked again, after the frames it kept for this
node (its REPLAY comes first). A node that restarted knows only the nodes linked since: for
ABSENT_KEEP after its start, a node that links here for the first time after a move is asked
too (one cut off from its last run may have kept frames for it). After a merge, the keeper is
asked as well: what it kept for this node while they were apart comes back to it (only what
has an identity, which its copy takes once). Until a node has
answered, a data frame from it is matched against those filters too, and what matches goes
on to the session's node (SESSION_PUBLISH, a data frame: kept until acknowledged, sent again
after a reconnect, rescued if that node fails). The session takes each message once by its
identity, whichever way it came.

The tokens of these ROUTE_TOs are negative: a merge's barriers (Custody) count up from 1, and
both share the ROUTED frame.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from hive_core.broker import Message, PeerDelivery, SessionHolder
from hive_core.cluster._membership import ABSENT_KEEP
from hive_core.cluster._parts import FrameHandler, Member, NodeContext
from hive_core.cluster._routing import RoutingTable
from hive_core.cluster._session_frames import message_body, message_from
from hive_core.cluster._wire import FrameKind, encode_frame
from hive_core.plugins import WarningGate

log = logging.getLogger("hive.cluster")

MOVED_KEPT = 100_000
"""Moved sessions remembered at most; beyond it the oldest goes (and is counted)."""


@dataclass(slots=True)
class MovedSession:
    client_id: str
    node_id: str  # where it went
    filters: list[str]
    token: int
    waiting: set[str]  # the nodes that have not confirmed they route its filters there
    since: float  # monotonic time it moved
    # Until then, a node that links here for the first time since the move is asked too: this
    # node started lately, and does not know every node that kept frames for its last run.
    open_until: float = 0.0
    asked: set[str] = field(default_factory=set)  # every node it ever waited for
    # Whether the session's node may send back here what it kept for this node (a copy
    # dropped in a merge): only what has an identity goes back to it, and is taken once.
    holder_replays: bool = False

    def done(self, now: float) -> bool:
        return not self.waiting and now >= self.open_until


class Moved:
    """The sessions that left this node and the nodes that may still route to it for them."""

    def __init__(self, node: NodeContext) -> None:
        self.node = node
        # The broker's roles this part takes (broker/_ports.py), and no more.
        self.holder: SessionHolder = node.broker.custody
        self.delivery: PeerDelivery = node.broker
        self.sessions: dict[str, MovedSession] = {}  # by client id, oldest first
        self._by_token: dict[int, MovedSession] = {}
        self._table = RoutingTable()  # their filters, by client id (not node id)
        self._waited: Counter[str] = Counter()  # node id -> records waiting for it
        self._exported: dict[str, list[str]] = {}  # handed over, not confirmed: their filters
        # Sessions taken over from a node that has not been linked here since, by that node.
        self._taken_from: dict[str, set[str]] = {}
        self._token = 0
        self.started = time.monotonic()  # this run of the node (see MovedSession.open_until)
        self.forwarded = 0  # messages sent on to a moved session's node
        self.unplaced = 0  # a SESSION_PUBLISH for a session not held here, nor known moved
        self._warnings = WarningGate(log)

    def frame_handlers(self) -> dict[FrameKind, FrameHandler]:
        return {FrameKind.SESSION_PUBLISH: self._on_session_publish}

    # ------------------------------------------------------------------ sessions leaving

    def exported(self, client_id: str, filters: Collection[str]) -> None:
        """A session was sent to another node, which has not confirmed yet (one declined
        stays listed until its client connects here, or the list is long)."""
        exported = self._exported
        exported.pop(client_id, None)
        exported[client_id] = [f for f in filters if not f.startswith("$share/")]
        if len(exported) > MOVED_KEPT:
            del exported[next(iter(exported))]

    def drop_copy(self, client_id: str, node_id: str) -> None:
        """A merge keeps the copy of this session on ``node_id``: the one here ends. A node not
        linked here now (cut off, frozen) may have routed messages here for it and kept them
        for this node: they arrive after the heal and go on to ``node_id``, as for a session
        fetched from here."""
        filters = self.holder.filters_of(client_id)
        self.holder.taken_over_elsewhere(client_id)
        self.exported(client_id, filters)
        self.moved_away(client_id, node_id, kept_apart=True)

    def moved_away(self, client_id: str, node_id: str, kept_apart: bool = False) -> None:
        """The session exported to ``node_id`` is there now (SESSION_TAKEN); ``kept_apart``:
        a merge kept the copy ``node_id`` held apart from this one."""
        filters = self._exported.get(client_id)
        self.came_back(client_id)
        node = self.node
        if not filters or self.holder.has_session(client_id):
            return
        # Every node that may have kept frames for this node: members, absent nodes, and nodes
        # taken over (a node cut off is taken over, and replays what it kept when it is back).
        # After a merge, the keeper too: what it kept for this node while they were apart
        # comes back to it (a fetch's node sent everything before its fetch, links being
        # FIFO). Not a node this copy was taken over from and that has not been linked here
        # since: while apart it holds a copy of its own, and routes nothing here for it.
        waiting = {peer for peer, (protocol, _stamps) in node.membership.spoke.items()
                   if protocol >= 4 and peer != node.node_id
                   and (peer != node_id or kept_apart)
                   and client_id not in self._taken_from.get(peer, ())}
        now = time.monotonic()
        self._prune(now)
        # A node that started within ABSENT_KEEP knows only the nodes linked since: one that
        # kept frames for its last run may link after this move and replay them here.
        open_until = self.started + ABSENT_KEEP
        if not waiting and now >= open_until:
            return
        self._token -= 1
        moved = MovedSession(client_id, node_id, filters, self._token, waiting, now,
                             open_until, set(waiting), kept_apart)
        self.sessions[client_id] = self._by_token[moved.token] = moved
        self._waited.update(waiting)
        for topic_filter in filters:
            self._table.add(client_id, topic_filter)
        for peer in list(waiting):  # (_ask may count a peer as answered)
            member = node.members.get(peer)
            if member is not None:
                self._ask(member, moved)
        if len(self.sessions) > MOVED_KEPT:
            oldest = next(iter(self.sessions.values()))
            self._warnings.warn("kept", "more than %d sessions moved away from this node while "
                                "nodes had not confirmed their routes: forgetting the oldest",
                                MOVED_KEPT)
            self._forget(oldest)

    def _prune(self, now: float) -> None:
        """A node away for longer than ABSENT_KEEP has dropped what it kept for this node: the
        oldest records stop waiting for such nodes."""
        members = self.node.members
        for moved in list(self.sessions.values()):
            if now - moved.since < ABSENT_KEEP:
                break  # oldest first (its open window is over too: it began before the move)
            for peer in [p for p in moved.waiting if p not in members]:
                self.routed(peer, moved.token)
            if moved.client_id in self.sessions and moved.done(now):
                self._forget(moved)

    def came_back(self, client_id: str) -> None:
        """The session is held here again (or ended): nothing to send on for it."""
        self._exported.pop(client_id, None)
        moved = self.sessions.get(client_id)
        if moved is not None:
            self._forget(moved)

    def went_to(self, client_id: str) -> str | None:
        """The node the session went to from here, while this node remembers the move."""
        moved = self.sessions.get(client_id)
        return moved.node_id if moved is not None else None

    def _ask(self, member: Member, moved: MovedSession) -> None:
        """ROUTE_TO ``member``: route the session's filters to its node from now on."""
        node = self.node
        holder = node.members.get(moved.node_id)
        if holder is not None:
            address, incarnation = holder.address, holder.incarnation
        else:
            away = node.membership.absent_at.get(moved.node_id)
            if away is None:  # its node is gone: nothing to route there, nor to wait for
                self.routed(member.node_id, moved.token)
                return
            address, incarnation = away
        member.link.send(FrameKind.ROUTE_TO, [moved.token, moved.node_id, address.host,
                                              address.port, incarnation, moved.filters])

    def _forget(self, moved: MovedSession) -> None:
        self._waited.subtract(moved.waiting)
        del self.sessions[moved.client_id]
        del self._by_token[moved.token]
        self._table.drop(moved.client_id)

    # ------------------------------------------------------------------ the other nodes

    def taken_over(self, failed: str, client_ids: Collection[str]) -> None:
        """These sessions were taken over here from ``failed`` (from its replica)."""
        self._taken_from.setdefault(failed, set()).update(client_ids)

    def member_joined(self, member: Member) -> None:
        """Linked (again): asked for every session it has not confirmed, after its REPLAY."""
        self._taken_from.pop(member.node_id, None)  # the merge with it decides the copies
        now = time.monotonic()
        self._prune(now)
        peer_id = member.node_id
        for moved in list(self.sessions.values()):
            if peer_id not in moved.asked and now < moved.open_until and member.protocol >= 4 \
                    and (peer_id != moved.node_id or moved.holder_replays):
                moved.asked.add(peer_id)  # a node first linked since: it may replay here
                moved.waiting.add(peer_id)  # before its REPLAY: what it kept is matched
                self._waited[peer_id] += 1
            if peer_id in moved.waiting:
                self._ask(member, moved)

    def routed(self, peer_id: str, token: int) -> bool:
        """ROUTED with a token of this part's: ``peer_id`` routes that session's filters to
        its node now. False for another part's token."""
        moved = self._by_token.get(token)
        if moved is None:
            return token < 0
        if peer_id in moved.waiting:
            moved.waiting.discard(peer_id)
            self._waited[peer_id] -= 1
        if moved.done(time.monotonic()):
            self._forget(moved)
        return True

    def forgotten(self, peer_id: str) -> None:
        """``peer_id`` is forgotten for good: nothing it kept for this node comes any more."""
        for moved in list(self.sessions.values()):
            self.routed(peer_id, moved.token)

    # ------------------------------------------------------------------ messages

    def arrived(self, peer_id: str, message: Message) -> None:
        """A data frame's message from ``peer_id``, delivered to the sessions here: on to the
        moved sessions it matches whose route that node has not confirmed."""
        if self._waited[peer_id] <= 0:
            return  # that node routes every moved session's filters to its node already
        ids, _groups = self._table.match(message.topic)
        # Back to the session's own node only what it can take once (by its identity).
        back = message.qos > 0 and message.mid is not None
        self._send_on_by_holder([c for c in ids if peer_id in self.sessions[c].waiting
                                 and (back or peer_id != self.sessions[c].node_id)],
                                message)

    def _send_on_by_holder(self, client_ids: list[str], message: Message) -> None:
        """Moved sessions, each to the node holding it now (the directory's, else where it
        went from here)."""
        by_node: dict[str, list[str]] = {}
        for client_id in client_ids:
            owner = self.node.custody.owner_of(client_id) or self.sessions[client_id].node_id
            by_node.setdefault(owner, []).append(client_id)
        for node_id, ids in by_node.items():
            self._send_on(node_id, ids, message)

    def _send_on(self, node_id: str, client_ids: list[str], message: Message) -> None:
        node = self.node
        member = node.members.get(node_id)
        if member is not None and not member.forwards_on:
            self._warnings.warn("old", "node %s is of an older version: %d messages routed "
                                "here for sessions it holds now are not sent on", node_id,
                                len(client_ids))
            return
        if member is None and node_id not in node.membership.absent:
            self._warnings.warn("gone", "the sessions %s moved to node %s, which has left the "
                                "cluster: a message routed here for them is not sent on",
                                client_ids, node_id)
            return
        if not message.qos and node.forwarding.full(node_id):
            node.forwarding.not_sent(node_id)  # QoS 0 is not kept past the bound
            return
        origin, serial = message.mid or ("", 0)
        frame = encode_frame(FrameKind.SESSION_PUBLISH,
                             [client_ids, origin, serial, *message_body(message)])
        if member is not None:
            member.link.send_encoded(frame)
        node.forwarding.sent(node_id, frame)  # kept until acknowledged, sent again
        self.forwarded += 1

    def _on_session_publish(self, member: Member, body: Any) -> None:
        """SESSION_PUBLISH: a message routed to another node for sessions held here now."""
        node = self.node
        if not node.forwarding.arrived(member.node_id):
            return  # sent again after a reconnect, handled before
        self.deliver(body, member.node_id)
        node.acknowledge_soon(member.node_id)

    def deliver(self, body: list[Any], peer_id: str,
                among: Collection[str] | None = None) -> None:
        """A SESSION_PUBLISH's body (from ``peer_id``; or rescued: for ``among`` only)."""
        client_ids, origin, serial = [str(c) for c in body[0]], str(body[1]), int(body[2])
        message = message_from(body[3:])
        if serial:
            message.mid = (origin, serial)
        here = [c for c in client_ids
                if self.holder.has_session(c) and (among is None or c in among)]
        held = self.node.merge_wait.hold(message, here) if self.node.merge_wait.waiting else ()
        if len(held) < len(here):  # held: for a copy kept in a merge, after its hand-over
            self.delivery.publish_among(message, [c for c in here if c not in held],
                                        among=True)
        if among is not None:
            return
        moved_on = []
        for client_id in client_ids:
            if client_id in here:
                continue
            if client_id in self.sessions:  # it moved on from here too
                moved_on.append(client_id)
            else:
                self.unplaced += 1
                self._warnings.warn("unplaced", "node %s sent on a message for session %r, "
                                    "which is not held here (%d such messages)", peer_id,
                                    client_id, self.unplaced)
        self._send_on_by_holder(moved_on, message)
