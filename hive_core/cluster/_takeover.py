"""Replication on the ring, and the takeover of a failed node's sessions from its replica.

A node's backups are the members that follow it on the ring (:class:`Replicator`, see
``_replication.py``); the replicas of other nodes are held here (:class:`Replicas`). When a
member fails, the first surviving member after it on the ring takes its sessions over
(:meth:`Takeover.take_over`): it tells every member (TAKEN_OVER), adopts the sessions, and each
member sends it what it had kept for the failed node and the replica does not account for
(RESCUED, then RESCUE_DONE); those messages go to the adopted sessions only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import anyio

from hive_core.broker import (
    Message,
    NodeView,
    PeerDelivery,
    ReplicaSource,
    SessionRecords,
    SessionUnavailable,
)
from hive_core.cluster._kept import Row, kept_frame, legacy_frame, message_of, peer_of
from hive_core.cluster._parts import FrameHandler, Member, NodeContext
from hive_core.cluster._replication import (
    ReplicaFolder,
    Replicas,
    ReplicaShelf,
    ReplicatingStore,
    Replicator,
    Watermarks,
    in_record_parts,
    successors,
)
from hive_core.cluster._session_frames import PART_BYTES, in_parts, message_from
from hive_core.cluster._wire import FrameDecoder, FrameKind
from hive_core.mqtt import decode_properties
from hive_ext_api import ClusterNodeAddress, StoredInflight, StoredMessage

log = logging.getLogger("hive.cluster")


class Takeover:
    """This node's backups and the replicas it holds; failed nodes' sessions taken over."""

    def __init__(self, node: NodeContext, store: ReplicatingStore | None,
                 replica_shelf: ReplicaShelf | None) -> None:
        self.node = node
        # The broker's roles this part takes (broker/_ports.py), and no more.
        self.sessions: ReplicaSource = node.broker.custody
        self.delivery: PeerDelivery = node.broker
        self.view: NodeView = node.broker
        settings = node.settings
        replicating = (store is not None and settings.replica_count > 1
                       and settings.protocol >= 3
                       and (settings.replicas_folder is not None or replica_shelf is not None))
        self.replicator = Replicator(
            store, self._replica_snapshot, self._watermarks, self._send_snapshot,
            self._send_ops, self._send_release) if replicating and store is not None else None
        shelf = replica_shelf if replica_shelf is not None else (
            ReplicaFolder(settings.replicas_folder)
            if settings.replicas_folder is not None else None)
        self.replicas = Replicas(shelf, self._acknowledge_replica, self._replica_missing) \
            if replicating and shelf is not None else None
        self._resync_asked: set[str] = set()
        self.taking: dict[str, anyio.Event] = {}  # failed nodes whose sessions are being taken
        self.adopted_from: dict[str, set[str]] = {}  # failed node -> client ids taken from it
        self.excluding: dict[str, set[str]] = {}  # peer -> failed nodes it has not rescued yet
        self._departures: list[tuple[float, str]] = []  # (monotonic time, node) of failures
        self.takeovers = 0
        self.sessions_taken_over = 0
        self.messages_rescued = 0

    def frame_handlers(self) -> dict[FrameKind, FrameHandler]:
        return {
            FrameKind.REPL_OPS: self._on_ops,
            FrameKind.REPL_ACK: self._on_ack,
            FrameKind.REPL_RESYNC: self._on_resync,
            FrameKind.REPL_SNAPSHOT: self._on_snapshot,
            FrameKind.REPL_RELEASE: self._on_release,
            FrameKind.TAKEN_OVER: lambda member, body: self._rescue_for(
                member, str(body[0]), body[1]),
            FrameKind.RESCUED: lambda member, body: self.deliver_rescued(
                str(body[0]), body[1], member.node_id, member.incarnation,
                int(body[2]) if len(body) > 2 else 0),
            FrameKind.RESCUE_DONE: lambda member, body: self.excluding.get(
                member.node_id, set()).discard(str(body)),
        }

    def holds_replica(self, node_id: str) -> bool:
        return self.replicas is not None and self.replicas.holds(node_id)

    # ------------------------------------------------------------------ the ring

    def ring_changed(self, renewed: str | None = None) -> None:
        """Members came or went: this node's backups are the next ones on the ring."""
        replicator = self.replicator
        if replicator is None or self.node.stopping:
            return
        if renewed is not None:
            replicator.lost(renewed)  # a restarted backup starts again from a snapshot
        if replicator.fenced_by and not self.node.membership.on_smaller_side():
            log.info("this node sees %d of the %d nodes it knew again: its persistent "
                     "sessions go on", *self.node.membership.seen_of_known())
            replicator.unfence()
        members = self.node.members
        ring = [m.node_id for m in members.values() if m.protocol >= 3]
        backups = successors(self.node.node_id, ring, self.node.settings.replica_count - 1)
        replicator.store.identities = all(members[b].identities for b in backups)
        replicator.store.taken_ops = all(members[b].taken_ops for b in backups)
        replicator.store.sent_ops = all(members[b].sent_ops for b in backups)
        replicator.set_backups(backups)

    def link_swapped(self, peer_id: str) -> None:
        """A member is on a new link: ops sent on the old one may be lost. A backup that has
        not acknowledged everything starts again from a snapshot."""
        replicator = self.replicator
        backup = replicator.backups.get(peer_id) if replicator is not None else None
        lagging = replicator is not None and backup is not None \
            and backup.acked < replicator.store.seq
        self.ring_changed(renewed=peer_id if lagging else None)

    def taker_of(self, failed: str) -> str | None:
        """The first member after ``failed`` on the ring: it takes its sessions over."""
        ring = [m.node_id for m in self.node.members.values() if m.protocol >= 3]
        ring.append(self.node.node_id)
        after = successors(failed, ring, len(ring))
        return after[0] if after else None

    def member_left(self, member: Member, why: str) -> None:
        """``member`` left the cluster: the ring again, and its sessions taken over here if
        this node follows it (and sees the larger side of a split, or it is surely dead)."""
        node, peer_id = self.node, member.node_id
        self.excluding.pop(peer_id, None)  # it will not rescue anything now
        if self.replicator is None:
            return
        was_backup = peer_id in self.replicator.backups
        exposed = was_backup and why != "it shut down" and self.node.membership.on_smaller_side()
        self.replicator.lost(peer_id, exposed=exposed)
        if exposed:
            seen, known = node.membership.seen_of_known()
            log.warning("node %s, which holds the replica of this node's persistent sessions, "
                        "left while this node sees %d of the %d nodes it knew: the larger side "
                        "may take them over from that replica, so what it lacks is not "
                        "acknowledged or delivered here, and their clients are not taken back "
                        "here, until this node sees the larger side again or node %s is known "
                        "to be down", peer_id, seen, known, peer_id)
            node.beside.start(lambda: self._down_or_out_of_reach(peer_id, member.address),
                              f"probing lost backup {peer_id}")
        self.ring_changed()
        if why != "it shut down" and not node.stopping:
            self._check_disaster(peer_id)
        if not node.stopping and self.taker_of(peer_id) == node.node_id \
                and self.holds_replica(peer_id) and peer_id not in self.taking:
            self.taking[peer_id] = anyio.Event()
            probe = member.address if why == "its connection closed" else None
            node.beside.start(lambda: self.take_over(peer_id, probe, member.address),
                              f"taking over {peer_id}")

    def check_resume(self, client_id: str, held_here: bool, owners: Mapping[str, Any]) -> None:
        """Before a CONNECT that resumes a session (``owners``: the directory of sessions).
        Refused (the client may try again) while this node is fenced and holds a copy, which
        the larger side may have taken over (the client may resume it there); and when no node
        is known to hold one while a node linked since this one started has not said which
        sessions it holds (its link closed first): a fresh session would hide its."""
        if self.replicator is None:
            return
        if self.replicator.fenced_by and held_here:
            raise SessionUnavailable("this node is cut off from the larger side of the "
                                     "cluster, which may have taken the session over")
        unheard = self.node.membership.unheard
        if unheard and not held_here and client_id not in owners:
            raise SessionUnavailable(f"node {min(unheard)} has not said yet which sessions "
                                     "it holds")

    async def _down_or_out_of_reach(self, backup: str, address: ClusterNodeAddress) -> None:
        """A backup lost while exposed: if its port refuses, its process is gone and nobody
        takes this node over from its replica; the sessions here need not wait for it."""
        if await self.node.transport.answers(address) is False:
            replicator = self.replicator
            if replicator is not None and backup in replicator.fenced_by:
                log.info("node %s, a lost backup of this node, is down: its replica takes "
                         "nothing over, and the persistent sessions here go on", backup)
                replicator.unfence(backup)

    def _check_disaster(self, node_id: str) -> None:
        settings = self.node.settings
        now = time.monotonic()
        window = settings.disaster_window
        self._departures = [(t, n) for t, n in self._departures if now - t < window]
        self._departures = [(t, n) for t, n in self._departures if n != node_id]
        self._departures.append((now, node_id))
        gone = len(self._departures)
        if gone >= settings.replica_count:
            log.warning(
                "Cluster disaster detected at %s: %d nodes left the cluster within %.0f s "
                "(%s), and replica-count is %d: not every replica is reachable, some "
                "persistent data may be unavailable until those nodes return",
                time.strftime("%Y-%m-%d %H:%M:%S %Z"), gone, window,
                ", ".join(n for _t, n in self._departures), settings.replica_count)

    # ------------------------------------------------------------------ replication frames

    def _watermarks(self) -> Watermarks:
        return {peer: [seen.incarnation, seen.handled]
                for peer, seen in self.node.forwarding.incoming.items()}

    def _replica_snapshot(self) -> tuple[list[SessionRecords], list[list[Any]]]:
        node = self.node
        records = self.sessions.replica_records()
        if node.kept is not None:  # messages kept on disk for silent nodes go along
            records += node.kept.replica_records()
        return records, self.sessions.replica_wills()

    def _send_snapshot(self, node_id: str, seq: int, records: list[SessionRecords],
                       wills: list[list[Any]]) -> None:
        member = self.node.members.get(node_id)
        if member is None:
            return
        parts = list(in_record_parts(records, PART_BYTES, member.identities, member.taken_ops,
                                     member.taken_ops and member.sent_ops))
        for index, part in enumerate(parts):
            member.link.send(FrameKind.REPL_SNAPSHOT,
                             [seq, index == 0, part, wills if index == 0 else [],
                              index < len(parts) - 1])

    def _send_ops(self, node_id: str, first: int, ops: list[Any],
                  watermarks: Watermarks) -> None:
        member = self.node.members.get(node_id)
        if member is not None:
            member.link.send(FrameKind.REPL_OPS, [first, ops, watermarks])

    def _send_release(self, node_id: str) -> None:
        member = self.node.members.get(node_id)
        if member is not None:
            member.link.send(FrameKind.REPL_RELEASE)

    def _replica_missing(self, origin: str) -> None:
        member = self.node.members.get(origin)
        if member is not None and origin not in self._resync_asked:
            self._resync_asked.add(origin)  # once, until its snapshot comes
            member.link.send(FrameKind.REPL_RESYNC)

    def _acknowledge_replica(self, origin: str, seq: int) -> None:
        member = self.node.members.get(origin)
        if member is not None:
            member.link.send(FrameKind.REPL_ACK, seq)

    def _on_ops(self, member: Member, body: Any) -> None:
        if self.replicas is not None:
            self.replicas.ops(member.node_id, int(body[0]), body[1], body[2])

    def _on_ack(self, member: Member, body: Any) -> None:
        if self.replicator is not None:
            self.replicator.acknowledged(member.node_id, int(body))

    def _on_resync(self, member: Member, body: Any) -> None:
        if self.replicator is not None and member.node_id in self.replicator.backups:
            log.info("node %s holds no replica of this node's sessions any more: sending "
                     "them again", member.node_id)
            self.ring_changed(renewed=member.node_id)

    def _on_snapshot(self, member: Member, body: Any) -> None:
        self._resync_asked.discard(member.node_id)
        if self.replicas is not None:
            self.replicas.snapshot_part(member.node_id, int(body[0]), bool(body[1]),
                                        body[2], body[3], bool(body[4]))

    def _on_release(self, member: Member, body: Any) -> None:
        if self.replicas is not None:
            self.replicas.release(member.node_id)

    # ------------------------------------------------------------------ a takeover

    async def taken(self, *failed: str) -> None:
        """Until the takeovers of ``failed`` under way here are over."""
        for node_id in failed:
            event = self.taking.get(node_id)
            if event is not None:
                with anyio.move_on_after(self.node.settings.connect_timeout):
                    await event.wait()

    async def take_over(self, failed: str, probe: ClusterNodeAddress | None = None,
                        address: ClusterNodeAddress | None = None) -> None:
        """``failed`` left and this node follows it on the ring: its sessions become ours.

        ``probe``: the link closed without a heartbeat timeout; the node is taken over only if
        its port no longer answers (after a pause of this node, the peers close its links).
        The larger side of a split takes a node over: a node that sees no more than half of
        the nodes it knew (itself included) takes it over only if its port at ``address``
        refuses (it is surely dead), not when it is merely out of reach. Counted here, once
        every departure of the same moment (one heartbeat tick) is known.
        """
        node = self.node
        began = time.monotonic()
        event = self.taking[failed]
        seen, known = node.membership.seen_of_known()
        majority = 2 * seen > known
        try:
            assert self.replicas is not None
            asked = probe if probe is not None else (address if not majority else None)
            verdict = await node.transport.answers(asked) if asked is not None else False
            if verdict:
                log.warning("node %s closed its link to this node but still answers: its "
                            "sessions stay with it", failed)
                return
            if verdict is None and not majority:
                log.warning("node %s does not answer, and this node sees %d of the %d nodes it "
                            "knew: its sessions are not taken over here (the larger side takes "
                            "them, or the node keeps them)", failed, seen, known)
                return
            taken = await self.replicas.take(failed)
            if taken is None:
                return
            if failed in node.members:  # it came back meanwhile: it keeps its sessions
                log.info("node %s is back: its sessions stay with it", failed)
                return
            # From here on, one step: the peers hear of it before any frame the adoption sends.
            for member in node.members.values():
                if member.protocol >= 3:
                    member.link.send(FrameKind.TAKEN_OVER, [failed, taken.watermarks])
                    self.excluding.setdefault(member.node_id, set()).add(failed)
            adopted = self.sessions.adopt_sessions(taken.records)
            marks = {r.session.client_id: max((seq for seq, _m in r.queue), default=0)
                     for r in taken.records}
            custody = node.custody
            custody.hold(adopted)
            for client_id in adopted:
                custody.adopted_marks[client_id] = marks.get(client_id, 0)
            self.adopted_from.setdefault(failed, set()).update(adopted)
            node.moved.taken_over(failed, adopted)
            first, rescued = self._unhandled(failed, taken.watermarks)
            self._drop_node(failed)
            self.deliver_rescued(failed, rescued, node.node_id, node.incarnation, first)
            self._publish_kept_by(failed, taken.kept,
                                  [i for r in taken.records for i in r.inflight])
            wills = self.sessions.adopt_wills(taken.wills)
            for member in node.members.values():
                member.link.send(FrameKind.FILTERS, node.local_filters())
                custody.send_owned(member, adopted)
            self.takeovers += 1
            self.sessions_taken_over += len(adopted)
            log.warning("Took over the %d persistent sessions of failed node %s from its replica "
                        "in %d ms (%d messages it had not handled delivered to them, %d of its "
                        "clients' wills published, %d pending)", len(adopted), failed,
                        (time.monotonic() - began) * 1000, len(rescued), wills,
                        len(taken.wills) - wills)
            await self.delivery.commit()
        except Exception:
            log.exception("could not take over the sessions of node %s", failed)
        finally:
            del self.taking[failed]
            event.set()

    def _publish_kept_by(self, failed: str, rows: list[Row],
                         inflight: list[StoredInflight]) -> None:
        """A takeover of ``failed``: what it kept on disk for silent nodes goes where it must
        now, its clients' QoS 2 messages not confirmed forwarded go again, and what this node
        kept on disk for ``failed`` while it was away goes to the sessions taken over from
        it."""
        node = self.node
        if node.kept is None:
            self.publish_unconfirmed(inflight)
            return
        with node.kept.atomic():
            self.publish_kept(rows)
            self.publish_unconfirmed(inflight)
            adopted = self.adopted_from.get(failed, set())
            for stored in node.kept.take_waiting(failed):
                self.delivery.publish_among(message_of(stored), adopted, among=True)

    def publish_kept(self, rows: list[Row]) -> None:
        """Messages an earlier run of this node, or a node whose sessions were taken over here,
        kept on disk for other nodes (``_kept.py``), with their identity (a session that had
        one takes no copy): to the node they were for, when it is a member (or away but still
        routed to); otherwise to where their topics route now, and to that node too if it joins
        within ABSENT_KEEP. What goes to another node is written for it here again."""
        node = self.node
        by_peer: dict[str, list[StoredMessage]] = {}
        for client_id, _seq, stored in rows:
            by_peer.setdefault(peer_of(client_id), []).append(stored)
        members, absent = node.members, node.membership.absent
        for peer, messages in by_peer.items():
            if peer in members or peer in absent:
                self.send_kept(peer, messages)
                continue
            if peer == node.node_id:  # kept for this node by the one it took over
                for stored in messages:
                    self.delivery.publish_from_peer(message_of(stored))
                continue
            for stored in messages:
                self._to_routes_of_now(stored)
            if node.kept is not None:
                node.kept.wait_for(peer, messages)
        if rows:
            log.info("published again %d messages kept on disk for other nodes", len(rows))

    def publish_unconfirmed(self, inflight: Iterable[StoredInflight]) -> int:
        """QoS 2 messages that clients of a failed node (or of this node before a restart)
        published, whose forwards to other nodes may not have left: their records carry them
        (``HeldForwards``). Sent again with their identities to where their topics route now;
        a session that had one takes no copy. Returns how many."""
        count = 0
        for record in inflight:
            stored = record.message
            if record.direction == "in" and stored is not None and stored.serial:
                self._to_routes_of_now(stored)
                self.delivery.share_again(message_of(stored))
                count += 1
        if count:
            log.info("sent again %d QoS 2 messages whose forwards to other nodes were not "
                     "confirmed", count)
        return count

    def _to_routes_of_now(self, stored: StoredMessage) -> None:
        """A message with its identity: to this node's subscribers, and to the nodes its
        topic routes to now, kept on disk for them until they acknowledge it."""
        node = self.node
        message = message_of(stored)
        self.delivery.publish_from_peer(message)
        members, absent = node.members, node.membership.absent
        for node_id in node.table.match(message.topic)[0]:
            if node_id in members or node_id in absent:
                self.send_kept(node_id, [stored])

    def send_kept(self, peer: str, messages: list[StoredMessage]) -> None:
        """Messages kept on disk for ``peer`` before: to it, and on disk for it until it
        acknowledges them."""
        node = self.node
        membership, forwarding = node.membership, node.forwarding
        member = node.members.get(peer)
        protocol = member.protocol if member is not None else membership.spoke.get(
            peer, (0, False))[0]
        takes = peer in membership.takes_kept
        forwarding.to_disk(peer)
        for stored in messages:
            frame = kept_frame(message_of(stored), node.node_id, takes, protocol)
            if member is not None:
                member.link.send_encoded(frame)
            forwarding.sent(peer, frame)

    def rescuing(self, client_id: str) -> bool:
        """Whether ``client_id`` was taken over from a node whose share some peer has not
        finished sending."""
        return any(client_id in self.adopted_from.get(failed, ())
                   for failed_nodes in self.excluding.values() for failed in failed_nodes)

    def adopted_of(self, peer_id: str) -> set[str]:
        """The sessions taken over from the nodes whose share ``peer_id`` is still sending."""
        ids: set[str] = set()
        for failed in self.excluding.get(peer_id, ()):
            ids |= self.adopted_from.get(failed, set())
        return ids

    def _unhandled(self, failed: str, watermarks: Watermarks) -> tuple[int, list[bytes]]:
        """The data frames kept for ``failed`` that its replica does not account for, and the
        place of the first."""
        node = self.node
        out = node.forwarding.outgoing.get(failed)
        if out is None:
            return 0, []
        mark = watermarks.get(node.node_id)
        handled = mark[1] if mark is not None and mark[0] == node.incarnation else 0
        skip = max(0, handled - out.acked)
        return out.acked + skip + 1, list(out.frames)[skip:]

    def _drop_node(self, node_id: str) -> None:
        """A failed node whose sessions were taken over: nothing is routed or kept for it."""
        node = self.node
        node.membership.absent.pop(node_id, None)
        node.table.drop(node_id)
        node.forwarding.abandon(node_id)
        node.custody.forget_node(node_id)
        self.view.remote_routes_changed()

    def _rescue_for(self, taker: Member, failed: str, watermarks: Watermarks) -> None:
        """TAKEN_OVER: send the taker what was kept for ``failed``, route its share there."""
        node = self.node
        if failed in node.members:
            # The taker found it dead before this node did: its sessions are the taker's now,
            # so what this node sends it from here on must go there (it dials again anyway).
            node.membership.remove(failed, f"node {taker.node_id} took its sessions over")
        if failed not in node.members:
            place, rescued = self._unhandled(failed, watermarks)
            if taker.node_id not in node.membership.takes_kept:  # a node of an earlier release
                rescued = [legacy_frame(frame) for frame in rescued]
            for part in in_parts(rescued, len):
                taker.link.send(FrameKind.RESCUED, [failed, part, place])
                place += len(part)
            for topic_filter in node.table.filters_of(failed):
                node.table.add(taker.node_id, topic_filter)  # until the taker's FILTERS
            self._drop_node(failed)
            kept = node.kept
            if kept is not None and failed in kept.waiting:  # kept on disk for it meanwhile
                with kept.atomic():
                    self.send_kept(taker.node_id, kept.take_waiting(failed))
        taker.link.send(FrameKind.RESCUE_DONE, failed)

    def deliver_rescued(self, failed: str, frames: list[bytes], origin: str,
                        incarnation: int, place: int) -> None:
        """Frames a failed node had not handled (the first at ``place`` in what ``origin``
        sent it): for the sessions taken over from it only."""
        delivery = self.delivery
        adopted = self.adopted_from.get(failed, set())
        decoder = FrameDecoder()
        for at, frame in enumerate(frames, place):
            for kind, body in decoder.feed(frame):
                self.messages_rescued += 1
                if kind is FrameKind.PUBLISH:
                    topic, payload, qos, retain, props, expiry_at, publisher, serial, _ = body
                    message = Message(topic, payload, qos, retain,
                                      decode_properties(props) if props else None, publisher,
                                      expiry_at)
                    if serial:
                        message.mid = (origin, serial)
                    if place:
                        message.rescued = (failed, incarnation, at)
                    delivery.publish_among(message, adopted, among=True)
                elif kind is FrameKind.SHARED_PUBLISH:
                    delivery.deliver_shared(body[0], body[1], message_from(body[2]))
                elif kind is FrameKind.MERGE_QUEUE:  # a queue handed to the failed keeper
                    self.node.custody.merge_queue(body)
                elif kind is FrameKind.SESSION_PUBLISH:  # for sessions that moved there
                    self.node.moved.deliver(body, origin, among=adopted)
                elif kind is FrameKind.SESSION_TAIL:  # a session's tail, handed to it there
                    self.node.custody.take_tail(body)
                elif kind is FrameKind.KEPT_PUBLISH:  # kept on disk, with its own identity
                    message = message_from(body[2])
                    if body[1]:
                        message.mid = (str(body[0]), int(body[1]))
                    delivery.publish_among(message, adopted, among=True)
        delivery.flush()
