"""Messages kept for a node that does not acknowledge them, written to disk so that no
publisher waits for that node.

A local publisher's PUBACK waits until every node its message went to has acknowledged it
(``_forwarding.py``). When a node has not acknowledged a message for
:data:`KEEP_ON_DISK_AFTER` seconds (it is frozen, cut off, or far behind), what is kept for it
is written to this node's store, and from then on each message for it as it is sent, until it
has handled what was kept for it at that moment (it is live again: later messages are not
written, and the rows go as it acknowledges them). Once a commit has the rows (this node's disk
and, through the replicating store, its backups: ``replica-count`` nodes; if the silent node is
one of the backups, the commit waits for it as every write does), the PUBACKs waiting for that
node go out. Rows are written only while every backup reads them (a backup of an earlier
release would keep them as a session of its own).

The rows are queue rows of the client id ``KEPT_PREFIX + node id``, without a session record
(MQTT strings cannot hold U+0000, so no client has such an id; the broker restores sessions
from session records only). What the store holds of them outlives this process: at the next
start, and on the node that takes this node's sessions over from its replica, the messages go
out again with their identity (a session that had one takes no copy, ``_handover.takes``): to
the node they were for if it is a member (or away but still routed to), otherwise to where
their topics route now and, if it joins within :data:`ABSENT_KEEP` or is taken over meanwhile,
to it or its taker; what goes to another node is written for it again in the same batch as the
old rows go. A message whose identity is another node's travels as KEPT_PUBLISH.

Only messages for a node's plain subscribers (PUBLISH, KEPT_PUBLISH frames) can be written. A
PUBACK waits for everything sent before it, so while a shared-subscription, moved-session or
merge frame for the silent node is unacknowledged, the publishers whose messages went to that
node after it wait for the node as before.

QoS 0 messages are not written: no publisher waits for them, and QoS 0 promises nothing past
this node's memory. They stay kept in memory for the silent node like any frame, and a QoS 1
or 2 message after them is covered by its own row. (A QoS 0 flood to a node that fell behind
would otherwise be written, and replicated, a hundred thousand rows at a time, on the event
loop, and stall this node and its backups: ``bench/run.py``'s ``cluster`` scenario did.) For
the same reason the QoS 1/2 backlog is written :data:`SLICE` frames per turn of the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol

from hive_core.broker import Message, SessionRecords
from hive_core.cluster._wire import (
    FrameDecoder,
    FrameKind,
    decode_publish_body,
    encode_frame,
    encode_publish_frame,
)
from hive_core.mqtt import decode_properties, encode_properties
from hive_ext_api import SessionStore, Snapshot, StoredMessage, StoredSession

log = logging.getLogger("hive.cluster")

KEEP_ON_DISK_AFTER = 1.0
"""Seconds a node may leave a message unacknowledged before what is kept for it goes to disk
(and its publishers stop waiting for it): acknowledgements take milliseconds on a live link."""

ABSENT_KEEP = 300.0
"""Seconds messages kept for a node that is not a member wait for it (as long as a node that
left stays routed to, ``_membership.py``)."""

KEPT_PREFIX = "\x00kept\x00"
"""The start of the client ids whose queue rows are messages kept for another node."""

_PUBLISH, _KEPT_PUBLISH = int(FrameKind.PUBLISH), int(FrameKind.KEPT_PUBLISH)

Row = tuple[str, int, StoredMessage]  # (client id of the row, its seq, the message)


def kept_id(peer: str) -> str:
    return KEPT_PREFIX + peer


def peer_of(client_id: str) -> str:
    return client_id[len(KEPT_PREFIX):]


def kept_rows(snapshot: Snapshot) -> list[Row]:
    """The rows a store's snapshot holds for other nodes, oldest first."""
    rows = [(client_id, seq, message) for client_id, queue in snapshot.queues.items()
            if client_id.startswith(KEPT_PREFIX) for seq, message in queue]
    rows.sort(key=lambda row: row[1])
    return rows


def stored_of(frame: bytes, node_id: str) -> StoredMessage | None:
    """The message of a kept data frame as a store row, or None when the frame is not for a
    node's plain subscribers (those are not written)."""
    kind = frame[4]
    if kind == _PUBLISH:
        topic, payload, qos, retain, props, expiry_at, publisher, serial, _at = \
            decode_publish_body(frame, 5)
        return StoredMessage(topic, bytes(payload), qos, retain, bytes(props), expiry_at,
                             publisher, node_id if serial else "", serial)
    if kind == _KEPT_PUBLISH:
        origin, serial, body = FrameDecoder().feed(frame)[0][1]
        topic, payload, qos, retain, props, expiry_at, publisher = body[:7]
        return StoredMessage(topic, payload, qos, retain, props, expiry_at, publisher, origin,
                             serial)
    return None


def message_of(stored: StoredMessage) -> Message:
    props = decode_properties(stored.properties) if stored.properties else None
    message = Message(stored.topic, stored.payload, stored.qos, stored.retain, props,
                      stored.publisher_id, stored.expiry_at)
    if stored.serial:
        message.mid = (stored.origin, stored.serial)
    return message


def kept_frame(message: Message, node_id: str, takes_kept: bool, protocol: int) -> bytes:
    """The data frame that takes a kept message to a node again: KEPT_PUBLISH with its
    identity; to an older node a PUBLISH, with the serial only if this node is its origin."""
    origin, serial = message.mid or ("", 0)
    props = encode_properties(message.properties) if message.properties else b""
    if takes_kept and serial:
        return encode_frame(FrameKind.KEPT_PUBLISH, [origin, serial, [
            message.topic, message.payload, message.qos, message.retain, props,
            message.expiry_at, message.publisher_id]])
    own = serial if origin == node_id and protocol >= 4 else 0
    return encode_publish_frame(message.topic, message.payload, message.qos, message.retain,
                                props, message.expiry_at, message.publisher_id, own)


def legacy_frame(frame: bytes) -> bytes:
    """``frame`` for a node of an earlier release: a KEPT_PUBLISH as a PUBLISH without its
    identity (that node cannot read KEPT_PUBLISH); other frames as they are."""
    if frame[4] != _KEPT_PUBLISH:
        return frame
    stored = stored_of(frame, "")
    assert stored is not None
    return encode_publish_frame(stored.topic, stored.payload, stored.qos, stored.retain,
                                stored.properties, stored.expiry_at, stored.publisher_id)


SLICE = 2048
"""Frames of a silent node's backlog written per turn of the event loop: a backlog of hundreds
of thousands, written at once, would stall the loop for seconds (clients, heartbeats)."""


class Backlog(Protocol):
    """The frames kept for a node (``Outgoing`` in ``_forwarding.py``): places ``acked + 1``
    to ``sent``; ``signal`` wakes the publishers waiting for them."""

    acked: int
    sent: int
    frames: deque[bytes]

    def signal(self) -> None: ...


@dataclass(slots=True)
class OnDisk:
    """What is written of the frames kept for one node (places count as in ``Outgoing``)."""

    rows: deque[tuple[int, int, StoredMessage]] = field(default_factory=deque)  # (place, seq, m)
    unwritten: deque[int] = field(default_factory=deque)  # places of frames not written
    written_upto: int = 0  # every frame up to this place is written (or in ``unwritten``)
    durable: int = 0  # the rows of places up to this one are committed
    writing: bool = True  # frames are written as they are sent (False: only rows left)
    began: int = 0  # the place of the last frame sent when the writing began


class KeptOnDisk:
    """The nodes whose kept messages are on disk here, and the rows of earlier runs."""

    def __init__(self, node_id: str, store: SessionStore,
                 after: float = KEEP_ON_DISK_AFTER) -> None:
        self.node_id = node_id
        self.store = store
        self.after = after
        self.peers: dict[str, OnDisk] = {}  # read by Forwarding for every frame sent
        self.restored: list[Row] = []  # this node's rows from before its restart
        self.waiting: dict[str, list[Row]] = {}  # for nodes not members now, until they join
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._seq = time.time_ns() // 1000  # row positions keep growing across restarts
        self.written = 0  # rows written so far
        self.rows = 0  # rows on disk now
        self.atomic: Callable[[], AbstractContextManager[None]] = getattr(
            store, "atomic", nullcontext)
        # Whether rows may be written now: every backup reads them (set by the cluster; a
        # backup of an earlier release would keep them as a session of its own).
        self.allowed: Callable[[], bool] = lambda: True

    # -- a silent node -------------------------------------------------------------------------

    def begin(self, peer: str, backlog: Backlog, quiet: bool = False) -> None:
        """``peer`` has left a frame unacknowledged too long (or is sent messages kept on disk
        before, ``quiet``): the frames kept for it (``backlog``) go to disk, those not written
        yet, and every frame for it from now on, until it has acknowledged what was kept for
        it now. The backlog is written :data:`SLICE` frames per turn of the event loop (each
        slice signals the waiting publishers); frames sent meanwhile join it."""
        state = self.peers.get(peer)
        if state is None:
            state = self.peers[peer] = OnDisk(written_upto=backlog.acked)
        elif state.writing:
            return
        state.writing = True
        state.began = backlog.sent
        if not quiet:
            log.warning("node %s has not acknowledged messages for %.1f s: what is kept for "
                        "it is written to disk (%d messages), and publishers no longer wait "
                        "for it", peer, self.after,
                        backlog.sent - max(state.written_upto, backlog.acked))
        self._write_slice(peer, state, backlog)

    def _write_slice(self, peer: str, state: OnDisk, backlog: Backlog) -> None:
        if self.peers.get(peer) is not state or not state.writing:
            return  # dropped, or acknowledged meanwhile
        acked = backlog.acked
        # The frames after it are not written yet; those up to ``acked`` need no row any more
        # (acknowledged, or dropped at twice the bound), and write() goes on after them.
        start = state.written_upto = max(state.written_upto, acked)
        end = min(backlog.sent, start + SLICE)
        for place, frame in enumerate(islice(backlog.frames, start - acked, end - acked),
                                      start + 1):
            self.write(peer, state, place, frame)
        state.written_upto = end
        if end < backlog.sent:
            asyncio.get_running_loop().call_soon(self._write_slice, peer, state, backlog)
        backlog.signal()  # waiting publishers: what they wait for may be on disk now

    def write(self, peer: str, state: OnDisk, place: int, frame: bytes) -> None:
        if place != state.written_upto + 1:
            return  # sent while the backlog is written: it joins the backlog
        state.written_upto = place
        if frame[4] == _PUBLISH and frame[5] == 0:
            return  # QoS 0: nobody waits for it, and it promises nothing past memory
        stored = stored_of(frame, self.node_id)
        if stored is None:
            state.unwritten.append(place)
            return
        if not stored.qos:
            return
        self._seq += 1
        self.store.enqueue(kept_id(peer), self._seq, stored)
        state.rows.append((place, self._seq, stored))
        self.written += 1
        self.rows += 1

    def covers(self, peer: str, acked: int, place: int) -> bool:
        """Whether every frame for ``peer`` after ``acked`` up to ``place`` is written."""
        state = self.peers.get(peer)
        return (state is not None and state.written_upto >= place
                and not (state.unwritten and state.unwritten[0] <= place))

    def durable(self, peer: str, place: int) -> bool:
        state = self.peers.get(peer)
        return state is not None and state.durable >= place

    async def commit(self, peer: str) -> None:
        """Until the rows written for ``peer`` so far are committed (PersistenceError when the
        store fails: the publishers waiting are not acknowledged)."""
        state = self.peers.get(peer)
        if state is None:
            return
        upto = state.written_upto
        await self.store.commit()
        if state.durable < upto:
            state.durable = upto

    def acknowledged(self, peer: str, handled: int) -> None:
        """``peer`` has handled the frames up to ``handled``: their rows go. Once it has
        handled what was kept for it when the writing began, it is not silent any more: new
        frames are not written (publishers wait for it again), and the state goes with the
        last row."""
        state = self.peers.get(peer)
        if state is None:
            return
        rows, client_id = state.rows, kept_id(peer)
        while rows and rows[0][0] <= handled:
            self.store.dequeue(client_id, rows.popleft()[1])
            self.rows -= 1
        unwritten = state.unwritten
        while unwritten and unwritten[0] <= handled:
            unwritten.popleft()
        if state.writing and handled >= state.began:
            state.writing = False
            log.info("node %s has acknowledged the messages kept on disk for it: new messages "
                     "for it are no longer written", peer)
        if not state.writing and not rows:
            del self.peers[peer]

    def drop(self, peer: str) -> None:
        """``peer`` is forgotten, or its sessions were taken over (what was kept for it went
        to the taker): its rows go."""
        state = self.peers.pop(peer, None)
        if state is not None:
            client_id = kept_id(peer)
            for _place, seq, _stored in state.rows:
                self.store.dequeue(client_id, seq)
            self.rows -= len(state.rows)

    # -- rows that outlived the process that wrote them -----------------------------------------

    def restore(self, snapshot: Snapshot) -> None:
        """This node's rows from before its restart: published again after the join."""
        self.restored = kept_rows(snapshot)
        self.rows += len(self.restored)
        self._seq = max([self._seq, *(seq for _client_id, seq, _stored in self.restored)])
        if self.restored:
            log.info("restored %d messages kept for other nodes before the restart; they are "
                     "delivered again once this node has joined", len(self.restored))

    def take_restored(self) -> list[Row]:
        """The restored rows, to publish again now: their rows go in the caller's batch
        (the one that keeps them anew for the nodes they go to now)."""
        rows, self.restored = self.restored, []
        self._delete(rows)
        return rows

    def wait_for(self, peer: str, messages: list[StoredMessage]) -> None:
        """Messages kept for ``peer``, which is not a member now (a restart, or a takeover of
        the node that kept them, came in between): kept on disk here until it joins, for at
        most ``ABSENT_KEEP`` seconds (they also went where their topics route now)."""
        rows = self.waiting.setdefault(peer, [])
        for stored in messages:
            self._seq += 1
            self.store.enqueue(kept_id(peer), self._seq, stored)
            rows.append((kept_id(peer), self._seq, stored))
        self.rows += len(messages)
        if peer not in self._expiry:
            self._expiry[peer] = asyncio.get_running_loop().call_later(
                ABSENT_KEEP, self._expire, peer)

    def take_waiting(self, peer: str) -> list[StoredMessage]:
        """``peer`` joined: the messages kept for it while it was away, to send it now."""
        timer = self._expiry.pop(peer, None)
        if timer is not None:
            timer.cancel()
        rows = self.waiting.pop(peer, [])
        self._delete(rows)
        return [stored for _client_id, _seq, stored in rows]

    def _expire(self, peer: str) -> None:
        self._expiry.pop(peer, None)
        rows = self.waiting.pop(peer, [])
        self._delete(rows)
        if rows:
            log.warning("node %s did not join within %d s: the %d messages kept on disk for "
                        "it are dropped (they went where their topics routed then)", peer,
                        ABSENT_KEEP, len(rows))

    def _delete(self, rows: list[Row]) -> None:
        for client_id, seq, _stored in rows:
            self.store.dequeue(client_id, seq)
        self.rows -= len(rows)

    def forget(self) -> None:
        """The node left the cluster and its backups hold its rows (the taker publishes them
        again): a copy kept here would come back at the next start."""
        for peer in list(self.peers):
            self.drop(peer)
        for peer in list(self.waiting):
            self.take_waiting(peer)
        self.take_restored()

    def replica_records(self) -> list[SessionRecords]:
        """The rows, for a new backup's snapshot (as queues of sessions that are not stored)."""
        queues: dict[str, list[tuple[int, StoredMessage]]] = {}
        for peer, state in self.peers.items():
            queues[kept_id(peer)] = [(seq, stored) for _place, seq, stored in state.rows]
        for client_id, seq, stored in [*self.restored, *(
                row for rows in self.waiting.values() for row in rows)]:
            queues.setdefault(client_id, []).append((seq, stored))
        return [SessionRecords(StoredSession(client_id, 5, 0), queue)
                for client_id, queue in queues.items() if queue]


def is_kept(client_id: str) -> bool:
    return client_id.startswith(KEPT_PREFIX)

