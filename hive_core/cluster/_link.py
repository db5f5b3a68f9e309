"""A connection to one peer: frames in, batched frames out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from hive_core.cluster._wire import FrameDecoder, FrameKind, WireError, encode_frame

log = logging.getLogger("hive.cluster")

FrameHandler = Callable[["PeerLink", FrameKind, Any], None]

FLUSH_FRAMES = 256
"""A batch this long goes out at once instead of at the end of the loop iteration: a long read
on one node (a few thousand PUBLISHes) reaches the next node in slices it can start on, so the
two nodes work side by side instead of taking turns."""


class PeerLink(asyncio.Protocol):
    """One TCP (or TLS) connection between two nodes; either side may have opened it."""

    def __init__(self, on_frame: FrameHandler, on_lost: Callable[[PeerLink], None],
                 outbound: bool) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self.outbound = outbound
        self.transport: asyncio.Transport | None = None
        self.peer_id: str | None = None  # known once HELLO / WELCOME arrived
        self.closed = False
        self._decoder = FrameDecoder()
        self._pending: list[bytes] = []
        self._flush_scheduled = False
        self.frames_in = 0
        self.last_read = time.monotonic()  # any frame counts as a sign of life
        self.frames_out = 0

    @property
    def peer_address(self) -> tuple[str, int] | None:
        if self.transport is None:
            return None
        peer = self.transport.get_extra_info("peername")
        return (peer[0], peer[1]) if peer else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        try:
            frames = self._decoder.feed(data)
        except WireError as exc:
            log.warning("closing the link to %s: %s", self.peer_id or self.peer_address, exc)
            self.close()
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

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_lost(self)

    def send(self, kind: FrameKind, body: Any = None) -> None:
        """Queue a frame; everything queued in one loop iteration goes out in one write."""
        self.send_encoded(encode_frame(kind, body))

    def send_encoded(self, frame: bytes) -> None:
        """Queue a frame that is already encoded (one PUBLISH sent to several nodes)."""
        if self.closed or self.transport is None:
            return
        pending = self._pending
        pending.append(frame)
        self.frames_out += 1
        if len(pending) >= FLUSH_FRAMES:
            self._pending = []
            self.transport.write(b"".join(pending))
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, []
        if pending and not self.closed and self.transport is not None:
            self.transport.write(b"".join(pending))

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._flush()
            self.transport.close()
        self.closed = True
