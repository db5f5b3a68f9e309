"""A session and messages as frame bodies: what crosses when a session moves between nodes.

A session's records travel in SESSION frames (the first part holds the record, the window and
the first messages of the queue; later parts more of the queue, about PART_BYTES each), and the
node that asked keeps them in a :class:`SessionFetch` until the answer is whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from hive_core.broker import Message, SessionRecords
from hive_core.cluster._link import PeerLink
from hive_core.cluster._replication import message_fields
from hive_core.cluster._wire import FrameKind
from hive_core.mqtt import decode_properties, encode_properties
from hive_ext_api import StoredInflight, StoredMessage, StoredSession, StoredSubscription

PART_BYTES = 1024 * 1024
"""Payload bytes per frame when a session's queue or the retained messages cross in parts."""


def in_parts(items: list[Any], size: Callable[[Any], int]) -> Iterator[list[Any]]:
    """``items`` in consecutive lists of about PART_BYTES each (at least one item each)."""
    part: list[Any] = []
    total = 0
    for item in items:
        part.append(item)
        total += size(item) + 64
        if total >= PART_BYTES:
            yield part
            part, total = [], 0
    if part:
        yield part


class SessionFetch:
    """One SESSION_FETCH to the node that holds the session: its answer, part by part."""

    def __init__(self, request: int, client_id: str, link: PeerLink) -> None:
        self.request = request
        self.client_id = client_id
        self.link = link
        self.records: SessionRecords | None = None
        self.failed: str | None = None
        self.elsewhere: str | None = None  # no session there, but that node said who has it
        self.done = anyio.Event()

    def part(self, body: list[Any] | None, more: bool) -> None:
        if body is not None:
            if self.records is None:
                self.records = session_from(body)
            else:
                self.records.queue += queue_from(body)
        if not more:
            self.done.set()

    def fail(self, why: str) -> None:
        self.failed = why
        self.done.set()


@dataclass(slots=True)
class Handover:
    """A session fetched from ``link``'s node (implements the broker's ``Handover``)."""

    records: SessionRecords
    fetch: SessionFetch
    arriving: set[str] = field(default_factory=set)  # client ids fetched, not yet confirmed

    def confirm(self) -> None:
        self.arriving.discard(self.fetch.client_id)
        self.fetch.link.send(FrameKind.SESSION_TAKEN, [self.fetch.request, self.fetch.client_id])

    def decline(self) -> None:
        self.arriving.discard(self.fetch.client_id)
        self.fetch.link.send(FrameKind.SESSION_DECLINED,
                             [self.fetch.request, self.fetch.client_id])


def session_parts(records: SessionRecords, seen: bool = False,
                  identified: bool = False) -> Iterator[list[Any]]:
    """A session as frame bodies: the record, the window and the first messages of the queue,
    then the rest of the queue in parts of about PART_BYTES (a queue may be any size).
    ``seen``, ``identified``: the asking node reads the identities taken, and messages with
    theirs."""
    record, inflight = records.session, records.inflight
    subscriptions = [[s.topic_filter, s.qos, s.no_local, s.retain_as_published,
                      s.retain_handling, s.subscription_id] for s in record.subscriptions.values()]
    parts = in_parts([[seq, message_fields(m, identified)] for seq, m in records.queue],
                     lambda item: len(item[1][1]))
    first = [
        [record.client_id, record.protocol_version, record.expiry_interval,
         record.disconnected_at, subscriptions],
        next(parts, []),
        [[i.packet_id, i.direction, i.state,
          message_fields(i.message, identified) if i.message else None] for i in inflight],
    ]
    if seen:  # a node that takes them (its HELLO said so): the identities the session took
        first.append([list(mid) for mid in records.seen or ()])
    yield first
    yield from ([part] for part in parts)


def session_from(body: list[Any]) -> SessionRecords:
    (client_id, version, expiry, disconnected_at, subscriptions), queue, inflight = body[:3]
    seen = [(str(o), int(n)) for o, n in body[3]] if len(body) > 3 else None
    record = StoredSession(client_id, version, expiry, disconnected_at, {
        s[0]: StoredSubscription(s[0], s[1], s[2], s[3], s[4], s[5]) for s in subscriptions})
    return SessionRecords(
        record,
        [(seq, StoredMessage(*fields)) for seq, fields in queue],
        [StoredInflight(client_id, pid, direction, state,
                        StoredMessage(*fields) if fields else None)
         for pid, direction, state, fields in inflight],
        seen)


def queue_from(body: list[Any]) -> list[tuple[int, StoredMessage]]:
    """A later part of a session: more of its queue."""
    return [(seq, StoredMessage(*fields)) for seq, fields in body[0]]


def message_body(message: Message) -> list[Any]:
    props = encode_properties(message.properties) if message.properties else b""
    return [message.topic, message.payload, message.qos, message.retain, props,
            message.expiry_at, message.publisher_id]


def message_from(body: list[Any]) -> Message:
    topic, payload, qos, retain, props, expiry_at, publisher = body[:7]
    return Message(topic, payload, qos, retain, decode_properties(props) if props else None,
                   publisher, expiry_at)

