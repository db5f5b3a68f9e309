"""A connection to one peer: frames in, batched frames out, once the peer proved it belongs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from hive_core.cluster._auth import (
    AuthenticationFailed,
    Handshake,
    PeerAuthentication,
    RecordOpener,
    RecordSealer,
)
from hive_core.cluster._wire import FrameDecoder, FrameKind, WireError, encode_frame

log = logging.getLogger("hive.cluster")

FrameHandler = Callable[["PeerLink", FrameKind, Any], None]

FLUSH_FRAMES = 256
"""A batch this long goes out at once instead of at the end of the loop iteration: a long read
on one node (a few thousand PUBLISHes) reaches the next node in slices it can start on, so the
two nodes work side by side instead of taking turns."""


READ_TURN = 256 * 1024
"""Bytes a link reads in one turn of the event loop before it pauses until the next (about one
read of uvloop's); see ``PeerLink._take_turn``."""


class PeerLink(asyncio.Protocol):
    """One TCP (or TLS, or UDP) connection between two nodes; either side may have opened it.

    With a shared secret (``authentication`` holding a key) the peer proves it holds it before
    anything else: until then the frames the cluster sends are held, not written, and any frame
    the peer sends but the handshake's closes the link; after it every write is a signed record
    (see :mod:`hive_core.cluster._auth`). A peer that has not proven itself within the
    authentication's timeout is refused.
    """

    def __init__(self, on_frame: FrameHandler, on_lost: Callable[[PeerLink], None],
                 outbound: bool, authentication: PeerAuthentication | None = None) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self.outbound = outbound
        self.transport: asyncio.Transport | None = None
        self.peer_id: str | None = None  # known once HELLO / WELCOME arrived
        self.closed = False
        self._decoder = FrameDecoder()
        self._pending: list[bytes] = []
        self._flush_scheduled = False
        # Called before each write of frames: the broker hands what its clients sent to the
        # recorders first (Broker.record_received), as before its own writes.
        self.before_write: Callable[[], None] | None = None
        self.frames_in = 0
        self.last_read = time.monotonic()  # any frame counts as a sign of life
        # Data that waited longer than this (the peer's heartbeats were not read: this process
        # did not run) is stale: the peer has given this node up and sent or will send the
        # same frames elsewhere (a takeover). Set by the cluster to the heartbeat timeout.
        self.stale_after: float | None = None
        self.went_stale = False  # closed for that: what this node knows of the peer is old
        self.frames_out = 0
        self.bytes_in = 0  # on the wire, since the link opened
        self.bytes_out = 0
        self._authentication = authentication
        self._handshake: Handshake | None = None  # while the peer has not proven itself
        self._held: list[bytes] = []  # frames the cluster sent meanwhile
        self._deadline: asyncio.TimerHandle | None = None
        self._sealer: RecordSealer | None = None
        self._opener: RecordOpener | None = None
        self._first_read = True
        self._turns = True  # reads are counted per turn of the event loop (_take_turn)
        self._turn_bytes = 0  # read in this turn so far
        self._turn_paused = False

    @property
    def peer_address(self) -> tuple[str, int] | None:
        if self.transport is None:
            return None
        peer = self.transport.get_extra_info("peername")
        return (peer[0], peer[1]) if peer else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        authentication = self._authentication
        handshake = authentication.handshake(self.outbound) if authentication else None
        if authentication is None or handshake is None:
            return  # no shared secret: frames flow at once
        self._handshake = handshake
        transport.write(handshake.challenge())  # type: ignore[attr-defined]
        self._deadline = asyncio.get_running_loop().call_later(authentication.timeout,
                                                               self._timed_out)

    def data_received(self, data: bytes) -> None:
        if self._turns:
            self._take_turn(len(data))
        now = time.monotonic()
        if self.stale_after is not None and now - self.last_read > self.stale_after \
                and self.peer_id is not None:
            # Which side stalled, a link cannot tell: this node did not run, the peer did not
            # send, or the network held the data back (a partition); the heartbeat says which
            # when it is this node.
            log.warning("nothing was read on the link to %s for %.1f s (this node or %s did "
                        "not run, or the network held it back): what waited on it is stale; "
                        "closing it", self.peer_id, now - self.last_read, self.peer_id)
            self.went_stale = True
            self.close()  # what is still due comes again on a new link (REPLAY) or elsewhere
            return
        self.last_read = now
        self.bytes_in += len(data)
        if self._handshake is not None:
            data = self._authenticate(data)
            if not data:
                return
        if self._opener is not None:
            try:
                data = self._opener.open(data)
            except AuthenticationFailed as exc:
                self._refuse(str(exc))
                return
        try:
            frames = self._decoder.feed(data)
        except WireError as exc:
            log.warning("closing the link to %s: %s", self.peer_id or self.peer_address, exc)
            self.close()
            return
        if self._first_read and frames:
            self._first_read = False
            if frames[0][0] is FrameKind.AUTH_CHALLENGE and self._authentication is not None:
                self._refuse("it asks for a cluster shared secret and this node has none")
                return
        for kind, body in frames:
            if self.closed:
                return
            self.frames_in += 1
            try:
                self._on_frame(self, kind, body)
            except Exception:  # a bad frame costs the link, never the node
                log.exception("bad %s frame from %s", kind.name, self.peer_id)
                self.close()
                return

    def _take_turn(self, size: int) -> None:
        """The event loop reads a busy socket again and again in one turn (libuv: up to 32
        reads of 256 KiB) before its timers and other sockets: a peer far ahead would have
        this node decode and route megabytes of frames in one go, its heartbeats and clients
        waiting a second or more. Past READ_TURN bytes, the link stops reading until the next
        turn."""
        if not self._turn_bytes:
            asyncio.get_running_loop().call_soon(self._next_turn)
        self._turn_bytes += size
        transport = self.transport
        if self._turn_bytes > READ_TURN and not self._turn_paused and transport is not None:
            try:
                transport.pause_reading()
            except NotImplementedError:  # a UDP link's end: its datagrams come one by one
                self._turns = False
            else:
                self._turn_paused = True

    def _next_turn(self) -> None:
        self._turn_bytes = 0
        if self._turn_paused:
            self._turn_paused = False
            transport = self.transport
            if transport is not None and not transport.is_closing():
                transport.resume_reading()

    def _authenticate(self, data: bytes) -> bytes:
        """Feed the handshake; once the peer is proven, let the held frames go. What remains
        of ``data`` past the handshake is returned."""
        handshake = self._handshake
        assert handshake is not None and self.transport is not None
        try:
            reply, rest = handshake.feed(data)
        except AuthenticationFailed as exc:
            self._refuse(str(exc))
            return b""
        if reply:
            self.transport.write(reply)
        if rest is None:
            return b""
        self._handshake = None
        self._first_read = False
        self._sealer, self._opener = handshake.sealer, handshake.opener
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        held, self._held = self._held, []
        for frame in held:
            self.send_encoded(frame)
        return rest

    def _timed_out(self) -> None:
        self._deadline = None
        if self._handshake is not None and not self.closed:
            assert self._authentication is not None
            self._refuse(f"it did not authenticate within {self._authentication.timeout:g} s")

    def _refuse(self, why: str) -> None:
        if self._authentication is not None:
            self._authentication.refused(self.peer_address, self.outbound, why)
        self._held.clear()
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._handshake is not None and not self.closed:
            self._refuse("it closed the link before authenticating (it may have refused this "
                         "node's proof)")
        self.closed = True
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._on_lost(self)

    def send(self, kind: FrameKind, body: Any = None) -> None:
        """Queue a frame; everything queued in one loop iteration goes out in one write."""
        self.send_encoded(encode_frame(kind, body))

    def send_now(self, kind: FrameKind, body: Any = None) -> None:
        """Queue a frame and write everything queued, now: for a frame that must be on its way
        before this node answers a client (CLIENT_CONNECTED before the CONNACK)."""
        self.send(kind, body)
        self._flush()

    def send_encoded(self, frame: bytes) -> None:
        """Queue a frame that is already encoded (one PUBLISH sent to several nodes)."""
        if self.closed or self.transport is None:
            return
        if self._handshake is not None:  # nothing reaches a peer before it is proven
            self._held.append(frame)
            return
        pending = self._pending
        pending.append(frame)
        self.frames_out += 1
        if len(pending) >= FLUSH_FRAMES:
            self._pending = []
            self._write(b"".join(pending))
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, []
        if pending and not self.closed and self.transport is not None:
            self._write(b"".join(pending))

    def _write(self, data: bytes) -> None:
        assert self.transport is not None
        if self.before_write is not None:
            self.before_write()
        data = data if self._sealer is None else self._sealer.seal(data)
        self.bytes_out += len(data)
        self.transport.write(data)

    def close(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self.transport is not None and not self.closed:
            self._flush()
            self.transport.close()
        self.closed = True
