"""Retained messages across the cluster: every node holds every retained message, and each
set or clear carries a version, so that the newest wins wherever the frames meet.

A version is a hybrid logical clock: wall-clock nanoseconds, moved on by every version seen.
Clears are kept as tombstones (their versions), so that a node that missed one cannot bring the
message back at a join; past ``RETAINED_VERSIONS`` the oldest clears go.
"""

from __future__ import annotations

import time
from typing import Any

from hive_core.broker import Message, RetainedSync
from hive_core.cluster._parts import FrameHandler, Member
from hive_core.cluster._session_frames import message_body, message_from
from hive_core.cluster._wire import FrameKind

RETAINED_VERSIONS = 1_000_000
"""Versions of retained topics kept (live ones and clears); beyond it the oldest clears go."""


class RetainedVersions:
    """The version of each retained topic's last set or clear, as this node knows it."""

    def __init__(self, broker: RetainedSync) -> None:
        self.broker = broker
        self.versions: dict[str, int] = {}
        self._clock = 0

    def frame_handlers(self) -> dict[FrameKind, FrameHandler]:
        return {FrameKind.RETAIN: lambda _member, body: self.apply(body, join=False),
                FrameKind.RETAINED: self._on_retained}

    def changed(self, message: Message) -> list[Any]:
        """A local publisher set or cleared ``message.topic``'s retained message: the body of
        the RETAIN frame that tells the other nodes, with its new version."""
        return [*message_body(message), self._new_version(message.topic)]

    def for_peer(self, protocol: int) -> list[list[Any]]:
        """At a join, for a member speaking ``protocol``: every retained message with its
        version, and (protocol 3 and later) the clears it may have missed."""
        versions = self.versions
        messages = self.broker.retained_messages()
        retained = [[*message_body(m), versions.get(m.topic, 0)] for m in messages]
        if protocol >= 3:
            live = {m.topic for m in messages}
            retained += [[topic, b"", 0, True, b"", None, "", version]
                         for topic, version in versions.items() if topic not in live]
        return retained

    def _new_version(self, topic: str, seen: int = 0) -> int:
        """A new version for ``topic``'s retained message: later than any this node has made
        or seen."""
        self._clock = max(self._clock + 1, time.time_ns(), seen)
        self.versions[topic] = self._clock
        if len(self.versions) > RETAINED_VERSIONS:
            self._trim()
        return self._clock

    def _trim(self) -> None:
        live = {m.topic for m in self.broker.retained_messages()}
        clears = sorted((v, t) for t, v in self.versions.items() if t not in live)
        for _version, topic in clears[:len(clears) // 2]:  # the oldest clears go first
            del self.versions[topic]

    def _on_retained(self, _member: Member, body: Any) -> None:
        for item in body:  # at a join: every retained message of the member, and its clears
            self.apply(item, join=True)

    def apply(self, body: list[Any], join: bool) -> None:
        """A retained message (or clear) from a peer: the newer version wins. A message
        without a version (an older peer, or one restored from disk) never replaces one that
        has a version, and at a join only fills a gap."""
        message = message_from(body)
        version = int(body[7]) if len(body) > 7 and body[7] else 0
        topic = message.topic
        known = self.versions.get(topic, 0)
        if version:
            if version <= known:
                return
            self._clock = max(self._clock, version)
            self.versions[topic] = version
            self.broker.apply_retained(message)
        elif not known:
            self.broker.apply_retained(message, only_if_absent=join)
