"""Messages between nodes are acknowledged, kept until then, and sent again after a reconnect.

Every data frame (PUBLISH, SHARED_PUBLISH; to a peer that says so in its HELLO, MERGE_QUEUE
and SESSION_PUBLISH too) a node sends to a peer has a place in one sequence
per peer; the place is not on the wire: both ends count. The receiver acknowledges how many it
has handled (FORWARD_ACK, cumulative), once what they delivered is durable. The sender keeps
each frame until then; when a link to that peer is established again (after a partition, a
pause, a reconnect) it sends REPLAY with the place of the first frame it still holds, then those
frames. The receiver skips the ones it had handled already, so nothing is lost or handled twice
while both nodes keep running. A receiver that restarted (another incarnation) starts counting
from the REPLAY.

A local publisher's PUBACK waits until every peer its message went to has acknowledged it (or
has left the cluster): see :meth:`Forwarding.acknowledged`. What is kept for one peer is bounded
(``Forwarding.limit`` bytes): past it, nothing kept is dropped; a local publisher's QoS 1/2
message for that peer is refused instead of acknowledged, and a QoS 0 one is not sent (both
counted, and logged once a minute per peer), until the peer takes what it was sent. Past twice
the bound (messages that are not refused: for shared subscriptions, sessions that moved, an
extension's publishes), the oldest are dropped as a last guard of memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Container, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio.abc

from hive_core.cluster._kept import KeptOnDisk, OnDisk
from hive_core.cluster._latency import Latencies, Probe
from hive_core.cluster._wire import FrameKind
from hive_core.plugins import WarningGate

log = logging.getLogger("hive.cluster")

MAX_UNACKNOWLEDGED_BYTES = 64 * 1024 * 1024
"""Frames kept for one peer: past it, new messages for the peer are refused, none dropped."""


@dataclass(slots=True)
class Outgoing:
    """Data frames sent to one peer: ``frames`` are places ``acked + 1`` to ``sent``."""

    sent: int = 0
    acked: int = 0
    frames: deque[bytes] = field(default_factory=deque)
    size: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    probe: Probe | None = None  # the frame whose acknowledgement is being timed
    # With a disk to keep frames on: the check for a silent peer, due KEEP_ON_DISK_AFTER after
    # frame ``mark`` was sent (if that one is still not acknowledged then, the peer is silent)
    check: asyncio.TimerHandle | None = None
    mark: int = 0

    def signal(self) -> None:
        event, self.changed = self.changed, asyncio.Event()
        event.set()


@dataclass(slots=True)
class Incoming:
    """Data frames from one incarnation of a peer: how many were handled, how many to skip."""

    incarnation: int
    handled: int = 0
    skip: int = 0


class Forwarding:
    """The two counts for every peer, and the frames kept for it."""

    def __init__(self) -> None:
        self.outgoing: dict[str, Outgoing] = {}
        self.incoming: dict[str, Incoming] = {}
        # peer: (its incarnation, frames handled) when a REPLAY skipped frames it gave up on
        self.given_up: dict[str, tuple[int, int]] = {}
        self.limit = MAX_UNACKNOWLEDGED_BYTES  # bytes kept for one peer at most
        self.full_peers: set[str] = set()  # peers with ``limit`` bytes kept or more
        self.dropped = 0  # frames given up on (the peer forgotten), or QoS 0 ones not sent
        self.refused = 0  # local QoS 1/2 publishes refused: a peer they were for was full
        self.replayed = 0  # frames sent again after a reconnect
        self.duplicates = 0  # frames received again and skipped
        self.ack_times = Latencies()  # sent until acknowledged, by peer (one probe in flight)
        self._warnings = WarningGate(log)
        # Where frames for a silent peer are written (None: nowhere; publishers wait for it).
        self.disk: KeptOnDisk | None = None
        self._on_disk: dict[str, OnDisk] = {}  # disk.peers (the same dict), or empty

    def keep_on(self, disk: KeptOnDisk | None) -> None:
        self.disk = disk
        self._on_disk = disk.peers if disk is not None else {}

    # ------------------------------------------------------------------ sending

    def sent(self, peer: str, frame: bytes) -> None:
        out = self.outgoing.get(peer)
        if out is None:
            out = self.outgoing[peer] = Outgoing()
        out.sent += 1
        if out.probe is None:
            out.probe = Probe(out.sent, time.monotonic())
        out.frames.append(frame)
        out.size += len(frame)
        if self.disk is not None:
            state = self._on_disk.get(peer)
            if state is not None and state.writing:
                self.disk.write(peer, state, out.sent, frame)
            elif out.check is None:
                out.mark = out.sent
                out.check = asyncio.get_running_loop().call_later(
                    self.disk.after, self._check_silent, peer, out)
        if out.size >= self.limit:
            self.full_peers.add(peer)
            if out.size > 2 * self.limit:
                self._drop_oldest(peer, out)

    def to_disk(self, peer: str) -> None:
        """What is kept for ``peer``, and every frame for it until it has acknowledged them
        all, is written to disk from now on (messages kept on disk before are sent again)."""
        disk = self.disk
        if disk is not None:
            out = self.outgoing.get(peer)
            if out is None:
                out = self.outgoing[peer] = Outgoing()
            disk.begin(peer, out, quiet=True)

    def _check_silent(self, peer: str, out: Outgoing) -> None:
        """KEEP_ON_DISK_AFTER after frame ``out.mark`` was sent: still not acknowledged, the
        peer is silent and what is kept for it goes to disk (the waiting publishers then wait
        for the commit instead)."""
        out.check = None
        disk = self.disk
        if disk is None or self.outgoing.get(peer) is not out:
            return
        state = disk.peers.get(peer)
        if state is not None and state.writing:
            return
        if out.acked < out.mark and disk.allowed():
            disk.begin(peer, out)
        elif out.sent > out.acked:
            out.mark = out.sent
            out.check = asyncio.get_running_loop().call_later(disk.after, self._check_silent,
                                                              peer, out)

    def _drop_oldest(self, peer: str, out: Outgoing) -> None:
        """The last guard of memory: messages that cannot be refused at the bound (for shared
        subscriptions, sessions that moved, an extension's publishes) took the frames kept
        for ``peer`` to twice the bound: the oldest go, down to the bound (counted)."""
        dropped = 0
        while out.size > self.limit and out.frames:
            out.size -= len(out.frames.popleft())
            out.acked += 1
            dropped += 1
        self.dropped += dropped
        if out.size < self.limit:
            self.full_peers.discard(peer)
        log.error("node %s has not acknowledged twice %s of messages, past what could be "
                  "refused: dropped the %d oldest kept for it (%d dropped so far)", peer,
                  self.bound, dropped, self.dropped)
        out.signal()

    def full(self, peer: str) -> bool:
        """Whether ``peer`` has not acknowledged ``limit`` bytes: a new message for it is
        refused (QoS 1/2) or not sent (QoS 0) rather than kept past the bound."""
        return peer in self.full_peers

    def refuses(self, peers: frozenset[str]) -> bool:
        """A local publisher's QoS 1/2 message for ``peers``: True (counted) when one of them
        is full, so the message is refused instead of acknowledged."""
        if not self.full_peers:  # the usual case, for every QoS 1/2 message: one test
            return False
        for peer in peers:
            if self.full(peer):
                self.refused += 1
                self._warnings.warn(f"refused {peer}", "node %s has not acknowledged %s of "
                                    "messages: QoS 1/2 messages for its subscribers are "
                                    "refused until it does (%d refused so far)", peer,
                                    self.bound, self.refused)
                return True
        return False

    def not_sent(self, peer: str) -> None:
        """A QoS 0 message for ``peer`` was not sent: it is full."""
        self.dropped += 1
        self._warnings.warn(f"dropped {peer}", "node %s has not acknowledged %s of "
                            "messages: QoS 0 messages for its subscribers are dropped until it "
                            "does (%d dropped so far)", peer, self.bound, self.dropped)

    @property
    def bound(self) -> str:
        limit = self.limit
        return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"

    def acknowledged_by(self, peer: str, handled: int) -> None:
        """FORWARD_ACK: ``peer`` has handled every frame up to place ``handled``."""
        out = self.outgoing.get(peer)
        if out is None or handled <= out.acked:
            return
        handled = min(handled, out.sent)
        probe = out.probe
        if probe is not None and handled >= probe.place:
            self.ack_times.observe(peer, time.monotonic() - probe.began)
            out.probe = None
        frames = out.frames
        for _ in range(handled - out.acked):
            out.size -= len(frames.popleft())
        out.acked = handled
        if out.size < self.limit:
            self.full_peers.discard(peer)
        if peer in self._on_disk:
            assert self.disk is not None
            self.disk.acknowledged(peer, handled)
        out.signal()

    def replay(self, peer: str) -> tuple[int, list[bytes]]:
        """For a new link to ``peer``: the place of the first frame kept, and the frames."""
        out = self.outgoing.get(peer)
        if out is None:
            return 1, []
        out.probe = None  # the wait for a new link is no round trip
        self.replayed += len(out.frames)
        return out.acked + 1, list(out.frames)

    def left(self, peer: str) -> None:
        """``peer`` left the cluster: PUBACKs waiting for it go out (its frames are kept)."""
        out = self.outgoing.get(peer)
        if out is not None:
            out.signal()

    def abandon(self, peer: str) -> int:
        """``peer`` is forgotten (or its sessions were taken over): what was kept for it is
        dropped; how many. The count of places goes on: if the same process comes back, its
        count of what it handled must not make it skip new frames as old ones."""
        out = self.outgoing.get(peer)
        seen = self.incoming.pop(peer, None)
        if seen is not None and self.given_up.get(peer, (None, 0))[0] != seen.incarnation:
            # What this node handled of the peer's frames stays known: if the peer comes
            # back, a copy of its share rescued elsewhere meanwhile still tells which of those
            # frames this node never handled (see handled_before).
            self.given_up[peer] = (seen.incarnation, seen.handled)
        if out is None:
            return 0
        dropped = len(out.frames)
        out.probe = None
        out.frames.clear()
        out.size = 0
        self.full_peers.discard(peer)
        out.acked = out.sent
        if self.disk is not None:
            self.disk.drop(peer)
        out.signal()
        return dropped

    async def acknowledged(self, is_member: Container[str]) -> None:
        """Until every frame sent so far is acknowledged by its peer, or the peer left, or
        (a silent peer) the frames up to there are committed to disk for it."""
        targets = [(peer, out, out.sent) for peer, out in list(self.outgoing.items())
                   if out.sent > out.acked and peer in is_member]
        for peer, out, place in targets:
            while out.acked < place and peer in is_member:
                disk = self.disk
                if disk is not None and disk.covers(peer, out.acked, place):
                    if disk.durable(peer, place):
                        break
                    await disk.commit(peer)
                    continue
                await out.changed.wait()

    # ------------------------------------------------------------------ receiving

    def replaying(self, peer: str, incarnation: int, first: int) -> None:
        """REPLAY from ``peer``: the frames that follow start at place ``first``."""
        seen = self.incoming.get(peer)
        if seen is None or seen.incarnation != incarnation:
            self.incoming[peer] = Incoming(incarnation, first - 1)
            return
        if first - 1 > seen.handled:  # the sender gave up on some: they are not coming
            self.given_up[peer] = (incarnation, seen.handled)
            seen.handled = first - 1
            seen.skip = 0
        else:
            seen.skip = seen.handled - (first - 1)

    def arrived(self, peer: str) -> bool:
        """A data frame from ``peer``: True to handle it, False when it was handled before."""
        seen = self.incoming.get(peer)
        if seen is None:
            return True  # no REPLAY yet (cannot happen with protocol 2 peers)
        if seen.skip:
            seen.skip -= 1
            self.duplicates += 1
            return False
        seen.handled += 1
        return True

    def handled_before(self, peer: str, incarnation: int) -> int:
        """How many of the frames ``peer`` (that incarnation) sent this node in its first
        sequence were handled here, not counting the ones it gave up on (a takeover of this
        node sent them elsewhere: RESCUED)."""
        given_up = self.given_up.get(peer)
        if given_up is not None and given_up[0] == incarnation:
            return given_up[1]
        seen = self.incoming.get(peer)
        return seen.handled if seen is not None and seen.incarnation == incarnation else 0

    def handled(self, peer: str) -> int:
        seen = self.incoming.get(peer)
        return seen.handled if seen is not None else 0

    def handled_now(self, peer: str) -> tuple[int, int] | None:
        """(the peer's incarnation, frames handled from it), or None before its first frame."""
        seen = self.incoming.get(peer)
        return (seen.incarnation, seen.handled) if seen is not None else None


class HeldForwards:
    """The forwards of a QoS 2 message from a persistent session, held until the commit that
    makes its publisher's record of it durable here and on the backups.

    A node that sent such a message on at once could fail before its backup had the record:
    the copy of the session taken over from the replica knows nothing of the message, the
    client sends it again there (DUP), and it is routed anew under another identity while the
    nodes it went to first deliver it too: twice. Held, no other node has it before the
    record is on every copy; the record carries the message (``Records.received_qos2``), and
    a node taking the session over sends it on again with its identity (``Takeover``), since
    the forwards may not have left before the failure.
    """

    def __init__(self, commit: Callable[[], Awaitable[None]],
                 start: Callable[[Callable[[], Awaitable[None]], str], None]) -> None:
        self._commit = commit
        self._start = start
        self.holding = False  # in a block(): forward() and send_shared() hold their sends
        self._held: list[Callable[[], None]] = []
        self.count = 0  # sends held so far
        self.released = 0  # of those, sent (or dropped with the node's stop)
        self._running = False
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    @contextmanager
    def block(self) -> Iterator[Callable[[], bool]]:
        """Sends in this block are held; what it yields tells whether any was."""
        began = self.count
        self.holding = True
        try:
            yield lambda: self.count > began
        finally:
            self.holding = False

    def hold(self, send: Callable[[], None]) -> None:
        self._held.append(send)
        self.count += 1
        if not self._running:
            self._running = True
            self._start(self._release, "forwarding QoS 2 messages once their records are "
                                       "committed")

    def after(self, send: Callable[[], None]) -> None:
        """``send`` after the sends held so far (at once when none waits): a frame that must
        follow every message routed to its node before it (ROUTED)."""
        if self.released >= self.count:
            send()
        else:
            self.hold(send)

    async def _release(self) -> None:
        try:
            while self._held:
                upto = len(self._held)  # held before this commit began: it covers them
                try:
                    await self._commit()
                except Exception:  # its publisher's connection is refused (broker/_acks.py)
                    log.exception("could not commit QoS 2 messages before forwarding them; "
                                  "they are forwarded all the same")
                batch, self._held = self._held[:upto], self._held[upto:]
                for send in batch:
                    try:
                        send()
                    except Exception:  # the others go all the same, and the waits end
                        log.exception("could not forward a QoS 2 message held for its record")
                self.released += len(batch)
                self._settle()
        finally:  # (cancelled: the cluster stops, and what is held stays unsent)
            self._running = False

    async def sent(self) -> None:
        """Until the sends held so far went out."""
        target = self.count
        if self.released >= target:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        await future

    def _settle(self) -> None:
        waiting = []
        for target, future in self._waiters:
            if self.released >= target:
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((target, future))
        self._waiters = waiting


ACK_COMMITS = 16
"""Commits for FORWARD_ACKs under way at once (see ForwardAcks.run)."""


class ForwardAcks:
    """FORWARD_ACK to the peers whose frames were handled, once their deliveries are durable
    here (one commit and one small frame per peer for a whole read)."""

    def __init__(self, forwarding: Forwarding, commit: Callable[[], Awaitable[None]],
                 members: Mapping[str, Any]) -> None:
        self.forwarding = forwarding
        self.commit = commit  # the broker's: the store's group commit, and the backups'
        self.members = members  # node id -> Member (its link)
        self.handed_over = False  # leaving: forwarded messages are no longer acknowledged
        self._due: set[str] = set()  # peers whose data frames were handled, not acknowledged
        self._wanted = asyncio.Event()  # wakes run()

    def soon(self, peer_id: str) -> None:
        """A data frame from ``peer_id`` was handled: FORWARD_ACK once it is durable here."""
        self._due.add(peer_id)
        self._wanted.set()

    async def run(self, tasks: anyio.abc.TaskGroup) -> None:
        """Each read's commit begins at once, beside the ones under way: a commit may wait
        milliseconds for deliveries held for their PUBACK (``<delivery-hold>``), and a read
        waiting for the commit before it would wait twice. The acknowledgements go out in
        the order of the reads (a count never falls back). At most ACK_COMMITS at once: past
        that (a slow disk), the reads that come meanwhile share the next commit."""
        before: asyncio.Event | None = None
        running = asyncio.Semaphore(ACK_COMMITS)
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            while self._due:
                await asyncio.sleep(0)  # the rest of this read first
                await running.acquire()
                peers, self._due = self._due, set()
                handled = {peer: now for peer in peers
                           if (now := self.forwarding.handled_now(peer)) is not None}
                done = asyncio.Event()
                tasks.start_soon(self._acknowledge, handled, before, done, running)
                before = done

    async def _acknowledge(self, handled: dict[str, tuple[int, int]],
                           before: asyncio.Event | None, done: asyncio.Event,
                           running: asyncio.Semaphore) -> None:
        try:
            await self.commit()
            if before is not None:
                await before.wait()
            if not self.handed_over:
                for peer, (incarnation, count) in handled.items():
                    member = self.members.get(peer)
                    # Not to a later incarnation (the peer restarted while this commit ran):
                    # the count is of its predecessor's frames, and would acknowledge its own.
                    now = self.forwarding.handled_now(peer)
                    if member is not None and now is not None and now[0] == incarnation:
                        member.link.send(FrameKind.FORWARD_ACK, count)
        except Exception:
            log.exception("could not acknowledge messages from other nodes; they will be "
                          "sent again after a reconnect")
        finally:
            done.set()
            running.release()
