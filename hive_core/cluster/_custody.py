"""Session custody: which node holds each persistent session, and how a session moves.

Every node keeps a directory of the sessions the other nodes hold (``owners``: client id ->
(node, custody epoch)) and the epochs of its own (``owned_since``). A custody epoch only grows
(:meth:`Custody.epoch`): every claim (CLIENT_CONNECTED, OWNED, a takeover, a merge) carries
one, and of two claims the higher wins on every node whatever order they arrive in, so the
directories converge after any split.

A CONNECT for a session held elsewhere asks that node and no other (SESSION_FETCH); the holder
sends it in parts and keeps it until the asking node confirms (SESSION_TAKEN, then the tail of
what arrived meanwhile) or declines. When a split heals and two nodes hold a copy, one keeps
it (:meth:`Custody.on_owned`): the other first has every member route the keeper's filters to
the keeper (ROUTE_TO / ROUTED), then hands its queue on (MERGE_QUEUE) and drops its copy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import anyio

from hive_core.broker import NodeView, PeerDelivery, SessionHolder, SessionUnavailable
from hive_core.cluster._claims import ConnectedClaims
from hive_core.cluster._handed import Handed
from hive_core.cluster._link import PeerLink
from hive_core.cluster._parts import FrameHandler, Member, NodeContext
from hive_core.cluster._replication import inflight_fields, message_fields
from hive_core.cluster._session_frames import (
    Handover,
    SessionFetch,
    in_parts,
    session_parts,
)
from hive_core.cluster._wire import FrameKind, encode_frame
from hive_ext_api import ClusterNodeAddress

log = logging.getLogger("hive.cluster")

ENDED_SESSIONS = 1_000_000
"""Tombstones of ended sessions kept; beyond it the oldest half goes."""

Claim = tuple[bool, int, bool]
"""(client connected there, custody epoch, node id smaller): of two copies the larger keeps."""


def tombstone(ended: dict[str, int], client_id: str, version: int) -> int:
    """A session ended at ``version`` (the newest such version is kept, for the newest
    ``ENDED_SESSIONS`` client ids): which version that is now."""
    version = max(version, ended.get(client_id, 0))
    ended[client_id] = version
    if len(ended) > ENDED_SESSIONS:
        for old in sorted(ended, key=ended.__getitem__)[:len(ended) // 2]:
            del ended[old]
    return version


class Custody:
    """The session directory, this node's own sessions' epochs, and the moves between nodes."""

    def __init__(self, node: NodeContext) -> None:
        self.node = node
        self.holder: SessionHolder = node.broker.custody  # the broker's roles it takes
        self.delivery: PeerDelivery = node.broker
        self.view: NodeView = node.broker
        # Which node holds the session of a client id (other nodes only) with its custody epoch
        # (a CONNECT asks that node only; of two holders the higher epoch wins), learnt from
        # OWNED on join, CLIENT_CONNECTED and SESSION_GONE.
        self.owners: dict[str, tuple[str, int]] = {}
        self.owned_since: dict[str, int] = {}  # the epochs of this node's own sessions
        self.ended_sessions: dict[str, int] = {}  # client id -> when its session ended (ns)
        self.handing: dict[PeerLink, set[str]] = {}  # exported, held till the asker confirms
        self.fetches: dict[int, SessionFetch] = {}
        self.arriving: set[str] = set()  # fetched for a CONNECT: connected, in a merge
        self._fetch_seq = 0
        # ROUTE_TO sent, copies to drop once every member answered: token -> (keeper, the
        # sessions with the keeper's claim, the members not answered yet).
        self._barriers: dict[int, tuple[str, list[tuple[str, Claim]], set[str]]] = {}
        self._barrier_serial = 0
        # client id -> the last queue position its replica held when taken over here: a copy
        # of the session elsewhere (a split) had everything up to it too.
        self.adopted_marks: dict[str, int] = {}
        self.handed = Handed(node, self.adopted_marks, self.owner_of)  # tails, merge queues
        # Copies here that lost a merge (waiting for the members' ROUTED, or for the keeper to
        # be linked again): client id -> keeper. Not served: a CONNECT gets the keeper's copy.
        self.yielding: dict[str, str] = {}
        self.merges = 0  # copies of a session dropped here for another node's
        # What this node last told each member it holds (OWNED), (connected, epoch) by client
        # id: a member's claim is weighed against it, as the member weighs the same two.
        self._told: dict[str, dict[str, tuple[bool, int]]] = {}
        self.claims = ConnectedClaims()  # the newest claim made with the client connected

    def frame_handlers(self) -> dict[FrameKind, FrameHandler]:
        return {
            FrameKind.SESSION_FETCH: self._on_fetch,
            FrameKind.SESSION: self._on_session,
            FrameKind.SESSION_TAKEN: self._on_taken,
            FrameKind.SESSION_DECLINED: self._on_declined,
            FrameKind.CLIENT_CONNECTED: self._on_client_connected,
            FrameKind.OWNED: self._on_owned,
            FrameKind.SESSION_GONE: self._on_gone,
            FrameKind.ROUTE_TO: self._on_route_to,
            FrameKind.ROUTED: lambda member, body: self.routed(member.node_id, int(body)),
            **self.handed.frame_handlers(),
        }

    # ------------------------------------------------------------------ the directory

    def epoch(self, client_id: str, above: int = 0) -> int:
        """A new custody epoch for ``client_id``'s session: higher than any this node knows
        of (its own copy's, the directory's, ``above``). Epochs only grow, so every node keeps
        the same holder in its directory whatever order the claims arrive in; they start from
        the clock (nanoseconds) so that they also order after the claims of older nodes."""
        known = max(self.owned_since.get(client_id, 0),
                    self.owners.get(client_id, ("", 0))[1], above)
        return max(time.time_ns(), known + 1)

    def owner_of(self, client_id: str) -> str | None:
        """The other node holding the session of ``client_id``, as far as this node knows."""
        entry = self.owners.get(client_id)
        return entry[0] if entry is not None else None

    def hold(self, client_ids: list[str]) -> None:
        """These sessions are this node's now, each with a new epoch."""
        for client_id in client_ids:
            self.owned_since[client_id] = self.epoch(client_id)
            self.owners.pop(client_id, None)
            self.claims.forget(client_id)

    def member_joined(self, node_id: str) -> None:
        """``node_id`` is linked again: a merge with it decides anew which copies stay."""
        self._stop_yielding_to(node_id)

    def _stop_yielding_to(self, node_id: str) -> None:
        for client_id, keeper in list(self.yielding.items()):
            if keeper == node_id:
                del self.yielding[client_id]

    def forget_node(self, node_id: str, for_good: bool = False) -> None:
        """No session is held on ``node_id`` any more (taken over, or, ``for_good``, away
        for longer than ABSENT_KEEP: then the copies that yielded to it serve again)."""
        for client_id, (owner, _epoch) in list(self.owners.items()):
            if owner == node_id:
                del self.owners[client_id]
        self.claims.forget_node(node_id)
        if for_good:
            self._stop_yielding_to(node_id)

    def connected(self, client_id: str) -> bool:
        return client_id in self.arriving or self.holder.is_connected(client_id)

    def send_owned(self, member: Member, client_ids: list[str]) -> None:
        """OWNED: the sessions this node holds (with their epochs, for protocol 3), in parts."""
        since, connected = self.owned_since, self.connected
        body: list[Any] = client_ids if member.protocol < 3 else [
            [c, since.get(c, 0), connected(c)] for c in client_ids]
        if member.protocol >= 3:
            told = self._told.setdefault(member.node_id, {})
            for client_id, epoch, is_connected in body:
                told[client_id] = (bool(is_connected), int(epoch))
        for at in range(0, len(body), 10_000):
            member.link.send(FrameKind.OWNED, body[at:at + 10_000])

    def client_connected(self, client_id: str) -> None:
        self.yielding.pop(client_id, None)  # its copy here serves again
        since = self.owned_since[client_id] = self.epoch(client_id)
        self.node.moved.came_back(client_id)
        self.owners.pop(client_id, None)
        self.claims.forget(client_id)
        # At once, not at the turn's end: after the CONNACK, a client could beat it elsewhere.
        for member in self.node.members.values():
            if member.protocol < 3:
                member.link.send_now(FrameKind.CLIENT_CONNECTED, client_id)
                continue
            member.link.send_now(FrameKind.CLIENT_CONNECTED, [client_id, since])
            # What the member compares its own copy's claim with in a merge: this claim, also
            # if the client is gone here again by the time the member's OWNED arrives.
            self._told.setdefault(member.node_id, {})[client_id] = (True, since)

    def _on_client_connected(self, member: Member, body: Any) -> None:
        """CLIENT_CONNECTED: the client is on the member now, with this custody epoch; an older
        claim than the copy here (late, from before a split or a takeover) changes nothing."""
        node_id = member.node_id
        client_id, since = (str(body[0]), int(body[1])) if isinstance(body, list) \
            else (str(body), time.time_ns())
        self.node.merge_wait.handed_over(node_id, [client_id])  # it kept its copy after all
        if since < self.owned_since.get(client_id, 0):
            log.info("node %s says client %r connected there, before this node took its "
                     "session over: ignored", node_id, client_id)
            return
        if self.holder.has_session(client_id) and member.protocol >= 3:
            # A copy here, yet the client resumed a session there without fetching this one
            # (that node held its own copy: a freeze, a split): this copy's queue and window
            # go there, as in a merge, rather than ending with it.
            self._drop_copy(client_id, node_id, since)
            return
        current = self.owners.get(client_id)
        if current is None or since >= current[1]:
            self.owners[client_id] = (node_id, since)
        self.claims.claimed(client_id, node_id, since, True)
        self.owned_since.pop(client_id, None)
        self.holder.taken_over_elsewhere(client_id)

    def session_ended(self, client_id: str, deleted: bool = True) -> None:
        self.owned_since.pop(client_id, None)
        self.yielding.pop(client_id, None)
        for told in self._told.values():
            told.pop(client_id, None)
        members = self.node.members.values()
        if not deleted:
            if client_id in self.owners:
                # It lives on there (a merge kept that copy, or its client connected there):
                # a member that cannot hear it from that node asks here, and is told where.
                return
            for member in members:
                member.link.send(FrameKind.SESSION_GONE, client_id)
            return
        # A tombstone: a copy of the session older than this (on a node that was away) is
        # dropped when that node comes back, not resurrected.
        version = tombstone(self.ended_sessions, client_id, time.time_ns())
        for member in members:
            member.link.send(FrameKind.SESSION_GONE,
                             [client_id, version] if member.protocol >= 3 else client_id)

    def _on_gone(self, member: Member, body: Any) -> None:
        """SESSION_GONE: the member holds the session no more (ended, with a tombstone)."""
        client_id = str(body[0]) if isinstance(body, list) else str(body)
        owner = self.owners.get(client_id)
        if owner is not None and owner[0] == member.node_id:
            del self.owners[client_id]
            self.claims.forget(client_id)
        self.claims.forget(client_id, member.node_id)
        if not isinstance(body, list):
            return
        version = tombstone(self.ended_sessions, client_id, int(body[1]))
        holder, replicating = self.holder, self.node.takeover.replicator is not None
        if replicating and holder.has_session(client_id) and not holder.is_connected(client_id) \
                and self.owned_since.get(client_id, 0) < version:
            log.info("the session of %r ended on node %s after this node's copy was made: "
                     "dropping the copy", client_id, member.node_id)
            self.owned_since.pop(client_id, None)
            holder.taken_over_elsewhere(client_id)

    # ------------------------------------------------------------------ a session moving

    def _on_fetch(self, member: Member, body: Any) -> None:
        failed = str(body[2]) if len(body) > 2 and body[2] else None
        self.hand_over(member.link, int(body[0]), str(body[1]), failed)

    def hand_over(self, link: PeerLink, request: int, client_id: str,
                  failed: str | None = None) -> None:
        """Another node asks for a session: send it in parts, hold it until it confirms.

        ``failed``: the asking node found the session's node dead and asks this one as the
        node that takes it over; if this node has not found out yet, it answers once it has
        (or not at all, and the client is refused and tries again).
        """
        node, takeover = self.node, self.node.takeover
        if node.leaving_since is not None:
            return  # leaving: the asking node asks the node that takes over, after the BYE
        if failed is not None and failed in node.members and takeover.holds_replica(failed):
            async def when_taken() -> None:
                with anyio.move_on_after(node.settings.connect_timeout):
                    while failed in node.members:
                        await anyio.sleep(0.02)
                if failed not in node.members and not link.closed:
                    self.hand_over(link, request, client_id)
            node.beside.start(when_taken, f"handing {client_id!r} over once taken")
            return
        if takeover.taking or takeover.rescuing(client_id):
            # Among the sessions being taken over: it moves on once it is here whole (what
            # the other nodes kept for the failed node included), so that no message reaches
            # it both through the rescue and directly on its new node.
            async def later() -> None:
                await takeover.taken(*takeover.taking)
                with anyio.move_on_after(node.settings.connect_timeout):
                    while takeover.rescuing(client_id):
                        await anyio.sleep(0.01)
                if not link.closed:
                    self.hand_over(link, request, client_id)
            node.beside.start(later, f"handing {client_id!r} over after the rescue")
            return
        keeper = self.yielding.get(client_id)
        if keeper is None:  # what waits for a hand-over goes in first, and with the session
            node.merge_wait.release(client_id)
        records = self.holder.export_session(client_id) if keeper is None else None
        self.delivery.flush()  # the client's connection here closes now, with its reason
        asking = node.members.get(link.peer_id) if link.peer_id else None
        if records is None:
            answer: list[Any] = [request, client_id, None, False]
            elsewhere = keeper or self.owner_of(client_id)
            if asking is not None and asking.identities and elsewhere not in (None, link.peer_id):
                answer.append(elsewhere)  # not here, but there: not a fresh session
            link.send(FrameKind.SESSION, answer)
            return
        self.handing.setdefault(link, set()).add(client_id)
        node.moved.exported(client_id, records.session.subscriptions)
        parts = list(session_parts(records, seen=asking is not None and asking.session_seen,
                                   identified=asking is not None and asking.identities))
        for index, part in enumerate(parts):
            link.send(FrameKind.SESSION, [request, client_id, part, index < len(parts) - 1])

    async def fetch(self, client_id: str) -> Handover | None:
        """Before a client's CONNACK: the node that holds its session hands it over.

        Only that node is asked (the directory says which); None when no member holds one.
        Raises :class:`SessionUnavailable` when the owner does not answer within the connect
        timeout: its copy stays where it is, and the client may try again. Until then (and
        until a session fetched is confirmed), a copy here counts as connected in a merge.
        """
        self.node.takeover.check_resume(client_id, self.holder.has_session(client_id), self.owners)
        self.arriving.add(client_id)
        handover = None
        try:
            return (handover := await self._fetch(client_id))
        finally:
            if handover is None:
                self.arriving.discard(client_id)

    async def _fetch(self, client_id: str) -> Handover | None:
        node, takeover = self.node, self.node.takeover
        replicating = takeover.replicator is not None
        redirect: str | None = None  # the node the first one asked said holds it
        keeper = self.yielding.get(client_id)
        if keeper is not None:
            if keeper not in node.members:
                raise SessionUnavailable(f"the copy here lost a merge to node {keeper}, which "
                                         "is unreachable: its copy is newer")
            redirect = keeper  # linked again: its merge is under way, ask it
        # A copy whose client was connected, not merged yet with the directory's: it will stay.
        claimed = None if redirect else self.claims.contested(
            client_id, self.owner_of(client_id), node.members)
        for attempt in (0, 1, 2) if claimed else (1, 2):  # 0: ask the claimed node first
            entry = self.owners.get(client_id)
            owner = claimed if attempt == 0 else \
                redirect or (entry[0] if entry is not None else None)
            if owner is not None and owner not in node.members and replicating:
                # Its node failed or left: the node taking its sessions over has it (or will).
                taker = takeover.taker_of(owner)
                if taker == node.node_id:
                    await takeover.taken(owner)
                    if self.holder.has_session(client_id):
                        return None  # here now, taken over from the replica
                    current = self.owner_of(client_id)
                    if current is None:
                        return None  # ended meanwhile
                    if attempt == 1 and (current != owner or current in node.members):
                        continue  # its node is back, or another holds it now: ask there
                    # Not taken over (its node still answers, or no replica was complete
                    # here): a fresh session would hide the real one, which lives on.
                    raise SessionUnavailable(
                        f"the node holding the session ({owner}) is unreachable")
                owner = taker
            elif owner is None and takeover.taking:
                await takeover.taken(*takeover.taking)  # it may be among what is taken here
                return None
            member = node.members.get(owner) if owner is not None else None
            if member is None or member.link.closed:
                if owner is not None and replicating:
                    raise SessionUnavailable(
                        f"the node holding the session ({owner}) is unreachable")
                return None
            self._fetch_seq += 1
            request = self._fetch_seq
            fetch = self.fetches[request] = SessionFetch(request, client_id, member.link)
            failed = entry[0] if attempt and entry is not None and entry[0] != owner \
                and redirect is None else None
            try:
                member.link.send(FrameKind.SESSION_FETCH, [request, client_id, failed])
                with anyio.move_on_after(node.settings.connect_timeout):
                    await fetch.done.wait()
            finally:
                del self.fetches[request]
            if not fetch.done.is_set():
                log.warning("node %s did not hand over the session of %r within %.0f s: "
                            "the client is refused and may try again", owner, client_id,
                            node.settings.connect_timeout)
                raise SessionUnavailable(
                    f"the node holding the session ({owner}) did not answer")
            if attempt == 0 and (fetch.failed is not None or fetch.records is None):
                self.claims.forget(client_id, claimed)  # not there (any more): the directory's
                continue
            if fetch.failed is not None:
                if attempt == 1 and owner not in node.members and replicating:
                    continue  # it left meanwhile (a node stopping answers no more fetches)
                raise SessionUnavailable(f"the session could not be fetched: {fetch.failed}")
            if fetch.records is None:
                elsewhere = fetch.elsewhere
                if elsewhere is None or elsewhere == node.node_id:
                    self.owners.pop(client_id, None)
                    self.claims.forget(client_id)
                    return None
                # Not there, but on a node it knows of (a merge kept that copy): asked again
                # there if it is a member here, else refused rather than made anew.
                if attempt == 1 and elsewhere in node.members:
                    redirect = elsewhere
                    continue
                raise SessionUnavailable(
                    f"the node holding the session ({elsewhere}) is unreachable")
            return Handover(fetch.records, fetch, self.arriving)
        return None

    def _on_session(self, member: Member, body: Any) -> None:
        request, client_id, part, more = body[:4]
        fetch = self.fetches.get(request)
        if fetch is not None and fetch.link is member.link:
            if len(body) > 4 and body[4]:
                fetch.elsewhere = str(body[4])
            fetch.part(part, more)
        elif part is not None and len(part) >= 3:  # the first part of an answer too late
            member.link.send(FrameKind.SESSION_DECLINED, [request, client_id])

    def _on_taken(self, member: Member, body: Any) -> None:
        """SESSION_TAKEN: the asking node has the session; what arrived here since follows."""
        client_id = str(body[1])
        self.handing.get(member.link, set()).discard(client_id)
        if not self.holder.has_session(client_id):
            # A second confirmation (two fetches were answered): the move stays remembered (what
            # a node not routing there yet sends here goes on; seed 89). Released: an export of
            # a session that ended meanwhile is forgotten.
            self.holder.release_session(client_id, taken=True)
            return
        # The directory names the new node before the copy here ends, with this copy's epoch
        # (its own claim, which is newer, replaces it). The end then tells the members nothing:
        # one that asks here is sent there. A SESSION_GONE would make a member that never hears
        # the new node's CLIENT_CONNECTED (its link to it down just then) think the session is
        # held nowhere, and start a new one for its client (simulation seed 80, --overlap).
        before = self.owners.get(client_id)
        self.owners[client_id] = (member.node_id, max(self.owned_since.get(client_id, 0),
                                                      before[1] if before else 0))
        tail = self.holder.release_session(client_id, taken=True)
        if self.holder.has_session(client_id):  # it stays here after all
            if before is None:
                del self.owners[client_id]
            else:
                self.owners[client_id] = before
        self.node.moved.moved_away(client_id, member.node_id)
        if tail:
            self.handed.send_tail(member, client_id, tail)

    def _on_declined(self, member: Member, body: Any) -> None:
        client_id = str(body[1])
        self.handing.get(member.link, set()).discard(client_id)
        self.holder.release_session(client_id, taken=False)

    def link_lost(self, link: PeerLink) -> None:
        """Sessions handed over on ``link`` and not confirmed stay here; its fetches fail."""
        for client_id in self.handing.pop(link, ()):
            self.holder.release_session(client_id, taken=False)
        for fetch in self.fetches.values():
            if fetch.link is link:
                fetch.fail("the connection to the node holding it closed")

    # ------------------------------------------------------------------ two copies: a merge

    def _on_owned(self, member: Member, body: list[Any]) -> None:
        """OWNED from a member. Of two nodes holding a session (after a failure or a split),
        one keeps it: the one with the client connected, else the higher epoch (then the
        smaller node id). The other hands its queue on (MERGE_QUEUE) and drops its copy."""
        node_id, node = member.node_id, self.node
        local = set(self.holder.owned_sessions())
        dropped: list[tuple[str, Claim]] = []
        kept: list[str] = []
        winners: list[str] = []
        for item in body:
            if isinstance(item, list):
                client_id, since = str(item[0]), int(item[1])
                connected = bool(item[2]) if len(item) > 2 else False
            else:
                client_id, since, connected = str(item), 0, False
            if client_id in local:
                theirs = (connected, since, node_id < node.node_id)
                told = self._told.get(node_id, {}).get(client_id)
                own_since = self.owned_since.get(client_id, 0)
                # (A client resuming the copy here now outweighs what was told: the other node
                # drops its copy when this one says the client connected.)
                mine = (told[0], told[1], node.node_id < node_id) \
                    if told is not None and told[1] == own_since \
                    and client_id not in self.arriving else \
                    (self.connected(client_id), own_since, node.node_id < node_id)
                if theirs > mine:
                    dropped.append((client_id, theirs))
                    continue
                winners.append(client_id)  # it drops its copy, and hands it over here
                if since >= mine[1]:
                    # This copy stays (its client is here) although the other claim is newer:
                    # a custody epoch above it, told to every member, so that no directory
                    # keeps naming the node whose copy goes.
                    self.owned_since[client_id] = self.epoch(client_id, above=since)
                    kept.append(client_id)
                continue
            ended = self.ended_sessions.get(client_id, 0)
            # Ended after that copy was made. Only with replication: then a session that
            # lived on after the end has a newer copy on the node that took it over.
            if ended > since and not connected and node.takeover.replicator is not None:
                member.link.send(FrameKind.SESSION_GONE, [client_id, ended])
                self.claims.forget(client_id, node_id)
                continue
            current = self.owners.get(client_id)
            if current is None or since >= current[1]:
                self.owners[client_id] = (node_id, since)
            self.claims.claimed(client_id, node_id, since, connected)
        if winners and member.forwards_on:  # it says when the hand-over is whole
            node.merge_wait.expect(node_id, winners)
        if kept:
            for other in node.members.values():
                self.send_owned(other, kept)
        if dropped:
            self._route_to_keeper(node_id, dropped)

    def _route_to_keeper(self, keeper: str, dropped: list[tuple[str, Claim]]) -> None:
        """Before this node drops its copies (and their filters) for ``keeper``, the other
        members route what matches the keeper's filters to it (ROUTE_TO), even those not
        linked to it yet: a node back after a split re-links one peer after the other. The
        copies end once every member has answered (ROUTED): what a member routed here before
        is in this node's queue by then and goes to the keeper with it (MERGE_QUEUE); without
        that, a message in flight to this node, or published on a member that has no route to
        the keeper yet, would match nobody and be lost."""
        node = self.node
        member = node.members.get(keeper)
        if member is None:
            return
        self.yielding.update((c, keeper) for c, _claim in dropped)  # a CONNECT fetches there
        self._barrier_serial += 1
        token = self._barrier_serial
        body = [token, keeper, member.address.host, member.address.port, member.incarnation,
                sorted(node.table.filters_of(keeper))]
        waiting = set()
        for other in node.members.values():
            if other.node_id != keeper and other.protocol >= 4:
                other.link.send(FrameKind.ROUTE_TO, body)
                waiting.add(other.node_id)
        self._barriers[token] = (keeper, dropped, waiting)
        if waiting:
            asyncio.get_running_loop().call_later(
                node.settings.connect_timeout, self._drop_copies, token)
        else:
            self._drop_copies(token)

    def routed(self, peer_id: str, token: int) -> None:
        """ROUTED (or the member left): one answer fewer to wait for."""
        barrier = self._barriers.get(token)
        if barrier is None:
            self.node.moved.routed(peer_id, token)
        else:
            barrier[2].discard(peer_id)
            if not barrier[2]:
                self._drop_copies(token)

    def member_left(self, peer_id: str) -> None:
        """A member left: it answers no barrier, and what it was told is told again."""
        self._told.pop(peer_id, None)
        self.claims.forget_node(peer_id)  # said again in its OWNED if it comes back
        self.node.merge_wait.left(peer_id)  # no hand-over comes from it now
        for token in list(self._barriers):
            self.routed(peer_id, token)

    def _drop_copies(self, token: int) -> None:
        barrier = self._barriers.pop(token, None)
        if barrier is None:
            return
        keeper, dropped, waiting = barrier
        node = self.node
        if waiting:
            log.warning("nodes %s did not confirm routing to node %s in %.0f s: dropping the "
                        "copies it keeps anyway", ", ".join(sorted(waiting)), keeper,
                        node.settings.connect_timeout)
        local = set(self.holder.owned_sessions())
        for client_id, theirs in dropped:
            if self.yielding.get(client_id) == keeper:
                del self.yielding[client_id]  # what follows decides anew
            if client_id not in local:
                continue  # ended here meanwhile
            mine = (self.connected(client_id), self.owned_since.get(client_id, 0),
                    node.node_id < keeper)
            # nor if what the keeper was told last beats theirs: it drops on that (sim seed 665)
            told = self._told.get(keeper, {}).get(client_id)
            if theirs > mine and (told is None or (*told, mine[2]) <= theirs):
                self._drop_copy(client_id, keeper, theirs[1])

    def _on_route_to(self, member: Member, body: list[Any]) -> None:
        """ROUTE_TO: another member drops its copies for ``keeper``. Not linked to the keeper
        yet: its filters are routed to it from now on and what they match is kept for it (as
        for an absent member) until the link is up, then sent (REPLAY). ROUTED answers."""
        node = self.node
        token, keeper = int(body[0]), str(body[1])
        if keeper != node.node_id:
            # Linked to the keeper or not, its filters are routed to it from now on (a link that
            # closes before the keeper's FILTERS arrived leaves them in the table, kept for it).
            for topic_filter in body[5]:
                node.table.add(keeper, str(topic_filter))
            self.view.remote_routes_changed()
        if keeper != node.node_id and keeper not in node.members:
            address = ClusterNodeAddress(str(body[2]), int(body[3]))
            node.membership.expect(keeper, address, int(body[4]))
            log.info("node %s keeps sessions node %s held: routing its %d filters to it until "
                     "it is linked here", keeper, member.node_id, len(body[5]))
        # After all routed to the sender before now (held too): it drops its copies on this.
        node.held.after(lambda: member.link.send(FrameKind.ROUTED, token))

    def _drop_copy(self, client_id: str, keeper: str, since: int) -> None:
        """Another node keeps this session: hand it what was queued here, end the copy.

        To a keeper that says ``identities`` the queue goes as data frames (like PUBLISH):
        kept here until the keeper has them durably (FORWARD_ACK), sent again after a
        reconnect, and handed to whoever takes the keeper over if it fails first (RESCUED).
        Sent once otherwise: a keeper that fails before it wrote them loses them."""
        node = self.node
        member = node.members.get(keeper)
        if member is None:
            log.info("the session of %r is also on node %s, which is not linked here now: the "
                     "copy here stays until the two meet again, and serves no client till then",
                     client_id, keeper)
            self.yielding[client_id] = keeper
            return
        self.yielding.pop(client_id, None)
        mark = self.adopted_marks.pop(client_id, 0)
        # To a keeper that takes it, the window goes as a window (same packet ids); else
        # what was sent and not acknowledged goes with the queue, as new deliveries.
        queue = self.holder.queued_records(client_id, with_window=not member.identities)
        if member.protocol >= 3:
            identified = member.protocol >= 4
            entries = [[seq, message_fields(m), *(mid or ("", 0)), *(rescued or ("", 0, 0))]
                       if identified else [seq, message_fields(m)]
                       for seq, m, mid, rescued in queue]
            parts = list(in_parts(entries, lambda item: len(item[1][1]))) or [[]]
            # The last part says what this copy's client had: the keeper's queue may hold
            # those too (both copies were routed to), and must not send them again.
            taken = [list(mid) for mid in self.holder.taken_identities(client_id)] \
                if identified else []
            # And which QoS 2 PUBLISHes of its client were routed here and not released: the
            # client sends them again to the keeper, which must not route them twice.
            inbound = self.holder.inbound_qos2(client_id) if member.identities else []
            window = [inflight_fields(i, identified=True)
                      for i in self.holder.window_records(client_id)] if member.identities else []
            for index, part in enumerate(parts):
                body: list[Any] = [client_id, mark, part]
                if index == len(parts) - 1 and (taken or inbound or window or member.forwards_on):
                    body += [taken, inbound, window]
                if member.identities:
                    frame = encode_frame(FrameKind.MERGE_QUEUE, body)
                    member.link.send_encoded(frame)
                    node.forwarding.sent(keeper, frame)
                else:
                    member.link.send(FrameKind.MERGE_QUEUE, body)
        log.info("the session of %r is also on node %s, which keeps it: %d queued messages "
                 "handed to it, the copy here dropped", client_id, keeper, len(queue))
        self.owned_since.pop(client_id, None)
        self.owners[client_id] = (keeper, since)  # before the end: no SESSION_GONE for it
        node.moved.drop_copy(client_id, keeper)
        self.merges += 1

    def merge_queue(self, body: list[Any]) -> None:
        self.handed.merge_queue(body)

    def take_tail(self, body: list[Any]) -> None:
        self.handed.take_tail(body)
