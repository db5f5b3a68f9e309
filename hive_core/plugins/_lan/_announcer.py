"""One node's side of LAN discovery: announce itself on a channel, listen, keep a roster.

The node announces every interval; its first datagram is a PROBE that the others answer at
once, so a starting node knows the cluster before its first join attempt. A node not heard for
:data:`EXPIRY_INTERVALS` intervals ages out; one that says LEAVE is dropped at once. Problems
(the interface is not there, a send fails, a garbled datagram) are logged as rate-limited
warnings, counted, and retried at the next interval: they never stop the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hive_core.plugins._lan._announcement import (
    Announcement,
    AnnouncementKind,
    MalformedAnnouncement,
    decode,
    encode,
)
from hive_core.plugins._lan._channel import Channel
from hive_core.plugins._lan._roster import Roster
from hive_core.plugins._lan._warnings import WarningGate
from hive_ext_api import ClusterNodeAddress

__all__ = ["EXPIRY_INTERVALS", "JOIN_WAIT", "Announcer", "AnnouncerSettings"]

EXPIRY_INTERVALS = 5
"""Announcements a node may miss before it ages out."""
JOIN_WAIT = 1.0
"""Seconds at most a starting node listens for answers to its PROBE before its first join."""


@dataclass(frozen=True, slots=True)
class AnnouncerSettings:
    kind: str  # "multicast" or "broadcast": for the log
    cluster_name: str
    interval: float  # seconds between two announcements
    open_channel: Callable[[], Channel]  # raises OSError (or ValueError) when it cannot


class _Listener(asyncio.DatagramProtocol):
    def __init__(self, owner: Announcer) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.owner.received(data, addr)

    def error_received(self, exc: Exception) -> None:
        self.owner.gate.warn("send", "%s discovery: sending on %s failed: %s",
                             self.owner.settings.kind, self.owner.description, exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.lost(self)


class Announcer:
    def __init__(self, settings: AnnouncerSettings, log: logging.Logger,
                 count_error: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.log = log
        self.clock = clock
        self.gate = WarningGate(log, counter=count_error, clock=clock)
        self.roster = Roster(EXPIRY_INTERVALS * settings.interval)
        self.description = "(not open)"
        self._own: Announcement | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._listener: _Listener | None = None
        self._task: asyncio.Task[None] | None = None
        self._destinations: list[tuple[str, int]] = []
        self._answered_at = -float("inf")
        self._foreign_clusters: set[str] = set()

    @property
    def running(self) -> bool:
        return self._task is not None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, node_id: str, address: ClusterNodeAddress) -> None:
        """Open the channel, probe, listen for the answers a moment, then announce on."""
        self._own = Announcement(AnnouncementKind.ANNOUNCE, self.settings.cluster_name,
                                 node_id, address.host, address.port)
        if await self._open():
            await asyncio.sleep(min(self.settings.interval, JOIN_WAIT))
        self._task = asyncio.create_task(self._announce_forever(),
                                         name=f"{self.settings.kind}-discovery")

    async def stop(self) -> None:
        """Say LEAVE (when the channel is open) and close it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._transport is not None:
            self._send(AnnouncementKind.LEAVE)
            self._transport.close()  # sends what is queued first
            self._transport = None
        self._own = None

    async def _announce_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.interval)
            try:
                await self._tick()
            except Exception as exc:  # a bug here must not end discovery for good
                self.gate.warn("unexpected", "%s discovery: %r; going on",
                               self.settings.kind, exc)

    async def _tick(self) -> None:
        if self._transport is None:
            await self._open()
        else:
            self._send(AnnouncementKind.ANNOUNCE)
        for node in self.roster.expire(self.clock()):
            self.log.info("%s discovery: cluster node %s (%s:%d) was not heard for %.1f s",
                          self.settings.kind, node.node_id, node.address.host,
                          node.address.port, self.roster.expiry)

    async def _open(self) -> bool:
        """Open the channel and PROBE; False (warned, counted) when it cannot be opened."""
        try:
            channel = self.settings.open_channel()
        except (OSError, ValueError) as exc:
            self.gate.warn("open", "%s discovery cannot start listening: %s; trying again "
                           "every %.1f s", self.settings.kind, exc, self.settings.interval)
            return False
        loop = asyncio.get_running_loop()
        listener = _Listener(self)
        transport, _ = await loop.create_datagram_endpoint(lambda: listener, sock=channel.sock)
        self._transport, self._listener = transport, listener
        self._destinations = channel.destinations
        self.description = channel.description
        self.log.info("%s discovery on %s, announcing every %.1f s as cluster %r",
                      self.settings.kind.capitalize(), channel.description,
                      self.settings.interval, self.settings.cluster_name)
        self._send(AnnouncementKind.PROBE)
        return True

    def lost(self, listener: _Listener) -> None:
        if listener is self._listener and self._transport is not None:
            self._transport = None  # reopened at the next interval
            self.gate.warn("lost", "%s discovery: the socket on %s closed; reopening",
                           self.settings.kind, self.description)

    # ------------------------------------------------------------------ the datagrams

    def _send(self, kind: AnnouncementKind) -> None:
        if self._transport is None or self._own is None:
            return
        datagram = encode(Announcement(kind, self._own.cluster_name, self._own.node_id,
                                       self._own.host, self._own.port))
        for destination in self._destinations:
            self._transport.sendto(datagram, destination)

    def received(self, data: bytes, sender: tuple[str | Any, int]) -> None:
        try:
            announcement = decode(data)
        except MalformedAnnouncement as exc:
            self.gate.warn("malformed", "%s discovery: ignored a malformed announcement from "
                           "%s:%s: %s", self.settings.kind, sender[0], sender[1], exc)
            return
        own = self._own
        if announcement is None or own is None:
            return  # not ours: other software may use the group or port too
        if announcement.cluster_name != own.cluster_name:
            if announcement.cluster_name not in self._foreign_clusters:
                self._foreign_clusters.add(announcement.cluster_name)
                self.log.info("%s discovery: ignoring nodes of cluster %r (this is %r)",
                              self.settings.kind, announcement.cluster_name, own.cluster_name)
            return
        if announcement.node_id == own.node_id:
            if announcement.address != ClusterNodeAddress(own.host, own.port):
                self.gate.warn("duplicate", "%s discovery: another node (%s:%d) has this "
                               "node's id %s; was its data folder copied?", self.settings.kind,
                               announcement.host, announcement.port, own.node_id)
            return
        if announcement.kind is AnnouncementKind.LEAVE:
            if self.roster.left(announcement.node_id) is not None:
                self.log.info("%s discovery: cluster node %s (%s:%d) is leaving",
                              self.settings.kind, announcement.node_id, announcement.host,
                              announcement.port)
            return
        now = self.clock()
        new = self.roster.heard(announcement, now)
        if new:
            self.log.info("%s discovery: found cluster node %s at %s:%d", self.settings.kind,
                          announcement.node_id, announcement.host, announcement.port)
        # Answer a starting node at once; a node probing again only a few times an interval.
        if announcement.kind is AnnouncementKind.PROBE and (
                new or now - self._answered_at >= self.settings.interval / 4):
            self._answered_at = now
            self._send(AnnouncementKind.ANNOUNCE)

    def addresses(self) -> list[ClusterNodeAddress]:
        """The other nodes heard lately: what a discovery reload answers."""
        return self.roster.addresses(self.clock())
