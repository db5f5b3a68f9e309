"""Overload protection across the cluster: a node under pressure slows what peers send it.

A node whose own level (``hive_core/broker/_overload.py``) rises announces it to every member
in an OVERLOAD frame (kind 66; older nodes skip a kind they do not know), when it changes and
every second while it is above 0. A node that forwards messages to an announcing peer takes
that level as pressure of its own: its heaviest senders lose credit, and what it forwards slows
at the source. Nothing is dropped, and no node stops reading a link: heartbeats and the other
control frames keep flowing both ways (a link not read would look like a dead node).

The node's own side of the links counts too: bytes written to a peer and not yet taken by its
socket, and forwarded messages the peer has not acknowledged yet (kept for a replay).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any, Protocol

from hive_core.cluster._forwarding import Forwarding
from hive_core.cluster._link import PeerLink
from hive_core.cluster._wire import FrameKind

__all__ = ["PeerPressure"]

HEARD_FOR = 3.0
"""Seconds a peer's announced level holds without being repeated (it repeats every second)."""
FORWARDED_WITHIN = 2.0
"""A peer counts as one this node forwards to when it sent it a message this recently."""


class _Member(Protocol):
    @property
    def link(self) -> PeerLink: ...


class PeerPressure:
    """The levels peers announced, this node's announcements, and its links' backlog."""

    def __init__(self, members: Mapping[str, _Member], forwarding: Forwarding) -> None:
        self._members = members
        self._forwarding = forwarding
        self.levels: dict[str, tuple[int, float]] = {}  # peer: (level, monotonic time heard)
        self._sent: dict[str, tuple[int, float]] = {}  # peer: (frames sent, when it last grew)

    def heard(self, peer: str, body: Any) -> None:
        """An OVERLOAD frame from ``peer``."""
        level = int(body) if isinstance(body, int) else 0
        if level > 0:
            self.levels[peer] = (min(level, 10), time.monotonic())
        else:
            self.levels.pop(peer, None)

    def announce(self, level: int) -> None:
        """Tell every member this node's own level."""
        for member in list(self._members.values()):
            member.link.send(FrameKind.OVERLOAD, level)

    def peer_level(self) -> int:
        """The highest level announced by a member this node has forwarded to lately (or
        still waits on for acknowledgements)."""
        now = time.monotonic()
        outgoing = self._forwarding.outgoing
        for peer, out in outgoing.items():
            before = self._sent.get(peer)
            if before is None or before[0] != out.sent:
                self._sent[peer] = (out.sent, now)  # sampled every tick: first seen is recent
        highest = 0
        for peer, (level, heard) in list(self.levels.items()):
            if now - heard > HEARD_FOR or peer not in self._members:
                del self.levels[peer]
                continue
            kept = outgoing.get(peer)
            if kept is None:
                continue
            if kept.sent > kept.acked or now - self._sent[peer][1] <= FORWARDED_WITHIN:
                highest = max(highest, level)
        return highest

    def link_bytes(self) -> int:
        """Bytes waiting for the members: not taken by their sockets yet, or forwarded and
        not acknowledged (what is kept for a node that left is not counted)."""
        outgoing = self._forwarding.outgoing
        waiting = 0
        for peer, member in self._members.items():
            kept = outgoing.get(peer)  # a node that left is no pressure: what it will get waits
            if kept is not None:
                waiting += kept.size
            transport = member.link.transport
            if transport is not None and not member.link.closed:
                with contextlib.suppress(NotImplementedError):  # UDP keeps its own window
                    waiting += transport.get_write_buffer_size()
        return waiting
