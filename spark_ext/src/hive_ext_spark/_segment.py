"""The event log's segment format: one file per segment, a header, then framed records.

Everything here is plain bytes and ``struct``, so the broker, the Spark job and the tests share it.

    header  := magic "HIVEEVT1" | u16 version | u16 header length | u64 segment number
               | i64 created (µs since the epoch) | u16 node id length | node id (UTF-8)
    record  := u32 body length | u32 CRC-32 of the body | body
    body    := u64 sequence | i64 timestamp (µs since the epoch) | u8 QoS | u8 flags
               | u16 topic length | u16 client id length | u32 payload length
               | topic (UTF-8) | client id (UTF-8) | payload | properties (JSON, the rest)

All integers are little-endian. ``flags`` bit 0 is retain, bit 1 "properties follow". A body
length of 0 ends the records: a segment is preallocated with zeros and filled from the front.
A record whose length runs past the file or whose CRC does not match ends the records too (a
writer killed in the middle of it); what comes before it is complete.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MAGIC = b"HIVEEVT1"
VERSION = 1
HEADER = struct.Struct("<8sHHQqH")
SEGMENT_NUMBER_OFFSET = 12  # where the header keeps the segment number (patched at activation)
FRAME = struct.Struct("<II")
FIXED = struct.Struct("<QqBBHHI")
RECORD_OVERHEAD = FRAME.size + FIXED.size
RETAIN = 0x01
HAS_PROPERTIES = 0x02

# Landed segments are named by number and sequence range, so a reader plans without opening them.
LANDED_SUFFIX = ".events"
OPEN_SUFFIX = ".open"


class SegmentError(Exception):
    """A file that is not a segment of this format (wrong magic, version, or a cut header)."""


def encode_header(segment: int, node_id: str, created_us: int) -> bytes:
    node = node_id.encode()
    return HEADER.pack(MAGIC, VERSION, HEADER.size + len(node), segment, created_us,
                       len(node)) + node


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    segment: int
    node_id: str
    created_us: int
    length: int


def decode_header(data: bytes | memoryview) -> SegmentHeader:
    if len(data) < HEADER.size:
        raise SegmentError(f"too short for a segment header ({len(data)} bytes)")
    magic, version, length, segment, created, node_len = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise SegmentError(f"not an event segment (magic {bytes(magic)!r})")
    if version != VERSION:
        raise SegmentError(f"segment format version {version}, this reader knows {VERSION}")
    if length != HEADER.size + node_len or len(data) < length:
        raise SegmentError("the segment header is cut short")
    node_id = bytes(data[HEADER.size:length]).decode()
    return SegmentHeader(segment, node_id, created, length)


def landed_name(segment: int, first_seq: int, last_seq: int) -> str:
    return f"{segment:012d}-{first_seq:016d}-{last_seq:016d}{LANDED_SUFFIX}"


def parse_landed_name(name: str) -> tuple[int, int, int] | None:
    """(segment, first sequence, last sequence) of a landed segment's file name, else None."""
    if not name.endswith(LANDED_SUFFIX):
        return None
    parts = name[: -len(LANDED_SUFFIX)].split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


@dataclass(slots=True)
class Event:
    """One PUBLISH as the log recorded it."""

    sequence: int
    timestamp_us: int
    topic: str
    payload: bytes
    qos: int
    retain: bool
    client_id: str
    user_properties: list[tuple[str, str]] = field(default_factory=list)
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None


def encode_properties(user_properties: list[tuple[str, str]], content_type: str | None,
                      response_topic: str | None, correlation_data: bytes | None,
                      payload_format_indicator: int | None,
                      message_expiry_interval: int | None) -> bytes:
    """The MQTT 5 properties of a record as compact JSON (only those present)."""
    props: dict[str, Any] = {}
    if user_properties:
        props["user"] = [[str(k), str(v)] for k, v in user_properties]
    if content_type is not None:
        props["content_type"] = content_type
    if response_topic is not None:
        props["response_topic"] = response_topic
    if correlation_data is not None:
        props["correlation_data"] = base64.b64encode(bytes(correlation_data)).decode()
    if payload_format_indicator is not None:
        props["payload_format_indicator"] = int(payload_format_indicator)
    if message_expiry_interval is not None:
        props["message_expiry_interval"] = int(message_expiry_interval)
    return json.dumps(props, separators=(",", ":")).encode()


def encode_record(event: Event) -> bytes:
    """One framed record (the broker writes the same bytes in place, see ``_event_log``)."""
    topic = event.topic.encode()
    client = event.client_id.encode()
    has_props = (event.user_properties or event.content_type is not None
                 or event.response_topic is not None or event.correlation_data is not None
                 or event.payload_format_indicator is not None
                 or event.message_expiry_interval is not None)
    props = encode_properties(event.user_properties, event.content_type, event.response_topic,
                              event.correlation_data, event.payload_format_indicator,
                              event.message_expiry_interval) if has_props else b""
    flags = (RETAIN if event.retain else 0) | (HAS_PROPERTIES if has_props else 0)
    body = FIXED.pack(event.sequence, event.timestamp_us, event.qos, flags, len(topic),
                      len(client), len(event.payload)) + topic + client + event.payload + props
    return FRAME.pack(len(body), zlib.crc32(body)) + body


def _decode_body(body: memoryview) -> Event:
    seq, ts, qos, flags, topic_len, client_len, payload_len = FIXED.unpack_from(body, 0)
    at = FIXED.size
    topic = bytes(body[at:at + topic_len]).decode()
    at += topic_len
    client = bytes(body[at:at + client_len]).decode()
    at += client_len
    payload = bytes(body[at:at + payload_len])
    at += payload_len
    event = Event(seq, ts, topic, payload, qos, bool(flags & RETAIN), client)
    if flags & HAS_PROPERTIES:
        props = json.loads(bytes(body[at:]))
        event.user_properties = [(k, v) for k, v in props.get("user", ())]
        event.content_type = props.get("content_type")
        event.response_topic = props.get("response_topic")
        cd = props.get("correlation_data")
        event.correlation_data = base64.b64decode(cd) if cd is not None else None
        event.payload_format_indicator = props.get("payload_format_indicator")
        event.message_expiry_interval = props.get("message_expiry_interval")
    return event


def scan(data: bytes | memoryview, start: int) -> Iterator[tuple[int, Event]]:
    """The complete records from ``start`` on, each with the offset just past it.

    Stops at the first zero length, cut record or CRC mismatch: the end of what was written.
    """
    view = memoryview(data)
    end = len(view)
    at = start
    while at + FRAME.size <= end:
        length, crc = FRAME.unpack_from(view, at)
        body_end = at + FRAME.size + length
        if length < FIXED.size or body_end > end:
            return
        body = view[at + FRAME.size:body_end]
        if zlib.crc32(body) != crc:
            return
        yield body_end, _decode_body(body)
        at = body_end


@dataclass(slots=True)
class Segment:
    header: SegmentHeader
    events: list[Event]
    end: int  # the offset just past the last complete record


def read_segment(data: bytes | memoryview) -> Segment:
    """A whole segment: header and every complete record."""
    header = decode_header(data)
    events: list[Event] = []
    end = header.length
    for end, event in scan(data, header.length):  # noqa: B007 (end is what is kept)
        events.append(event)
    return Segment(header, events, end)
