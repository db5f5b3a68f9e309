"""The node protocol's serialization: compact, versioned frames, not MQTT.

A frame is ``length (u32) | kind (u8) | body``; the body is one value in a small self-describing
binary form (None, bool, int, bytes, str, list, dict with str keys). Frames travel in batches:
a sender joins whatever is pending into one write.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any

PROTOCOL_VERSION = 4
"""Bumped when a frame changes; peers speak the lower of their two versions.

2: sessions are handed over in parts and confirmed (SESSION_TAKEN / SESSION_DECLINED), nodes
tell each other which sessions they hold (OWNED, SESSION_GONE), retained messages in parts.
3: replication (REPL_*), takeover of a failed node's sessions (TAKEN_OVER, RESCUED,
RESCUE_DONE), SYNCED at the end of a join; OWNED and CLIENT_CONNECTED say since when the
sender holds each session (the newest holder wins). A node of version 2 is a member (routing,
handover) but holds no replica and is never one's backup.
4: a PUBLISH carries the sending node's serial for the message (monotonic per node, across its
restarts), and SESSION_TAIL each queued message's origin node and serial: the node a session
is handed over to skips what reached it twice, directly and in the old node's tail (see
hive_core/broker/_handover.py). A node that drops its copies of sessions another node keeps
(after a split) first has every member route to the keeper (ROUTE_TO, ROUTED). A node of
version 3 gets PUBLISH frames without the serial, and no ROUTE_TO.
Within 4, a node whose HELLO says ``arrival_stamps`` gets PUBLISH frames that may carry the
origin's routing time (flag 0x08, after the serial; hive_core/cluster/_latency.py); the others
get them without it, so no version bump was needed. Likewise ``kept_publish``: such a node
takes KEPT_PUBLISH frames (messages kept on disk for it, published again after a restart or a
takeover, with their identity); the others get them as PUBLISH frames without an identity.
Between two nodes whose HELLOs say ``counts_tails``, SESSION_TAIL is a data frame (counted,
acknowledged, sent again, rescued) with a third field: how often it was sent on after its
session (hive_core/cluster/_custody.py, ``Custody.take_tail``)."""
MIN_PROTOCOL_VERSION = 2
MAX_FRAME = 64 * 1024 * 1024


class FrameKind(IntEnum):
    HELLO = 1  # node id, protocol version, address, Hive version, cluster members it knows
    WELCOME = 2  # the answer to HELLO: the same about the accepting node
    HEARTBEAT = 3  # protocol 4: [connections, sessions, messages in, messages out] (a load)
    BYE = 4  # a node leaves on purpose
    MEMBERS = 5  # the members a node knows (gossip, so a mesh forms from any entry point)
    FILTERS = 10  # the full set of topic filters with subscribers on a node
    FILTER_ADD = 11
    FILTER_REMOVE = 12
    PUBLISH = 20  # a message for the subscribers on the receiving node
    SHARED_PUBLISH = 21  # a message for one member of a shared group on the receiving node
    RETAIN = 22  # set (payload) or clear (empty payload) a retained message
    RETAINED = 23  # every retained message a node holds (on join)
    CLIENT_CONNECTED = 30  # a client id is now connected on the sender: close yours
    SESSION_FETCH = 31  # a client connects on the sender: hand its session over if you have it
    SESSION = 32  # the answer: one part of the session's state (or None), and whether more follow
    OWNED = 33  # client ids the sender holds sessions for (on join, in parts)
    SESSION_GONE = 34  # the sender no longer holds a session for a client id
    SESSION_TAKEN = 35  # the session sent is stored here: forget it, send what queued meanwhile
    SESSION_DECLINED = 36  # the session sent was not taken (too late): keep it
    SESSION_TAIL = 37  # what the old node queued for a session while it was handed over
    REPLAY = 38  # [sender incarnation, place of the next data frame]: frames sent again follow
    FORWARD_ACK = 39  # how many data frames (PUBLISH, SHARED_PUBLISH, ...) the sender has handled
    # Protocol 3:
    REPL_SNAPSHOT = 40  # [op number, first part, sessions, wills, more follow]: the sender's state
    REPL_OPS = 41  # [first op number, ops, forwarding marks]: the sender's writes, in order
    REPL_ACK = 42  # the last op of the receiver's the sender has made durable
    REPL_RELEASE = 43  # the sender picked other backups: drop its replica
    TAKEN_OVER = 44  # [failed node, its forwarding marks]: the sender holds its sessions now
    RESCUED = 45  # [failed node, frames]: data frames it had not handled, for the taker
    RESCUE_DONE = 46  # failed node: every frame the sender kept for it has been sent
    SYNCED = 47  # the frames a new link begins with are all sent
    MERGE_QUEUE = 48  # [client id, position mark, queue]: a dropped copy's queue for the keeper
    REPL_RESYNC = 49  # the sender holds no replica of the receiver's: send a snapshot again
    # Protocol 4:
    ROUTE_TO = 52  # [token, node, host, port, incarnation, filters]: the sender drops copies
    # of sessions that node keeps (back after a split): route its filters there from now on
    ROUTED = 53  # token: the ROUTE_TO is in effect here (after every message routed before it)
    # To a node whose HELLO says forward_on (a data frame, counted like PUBLISH):
    SESSION_PUBLISH = 54  # [client ids, origin, serial, message]: routed to the sender for
    # sessions that moved to the receiver (see _moved.py)
    # To a node whose HELLO says kept_publish (a data frame, counted like PUBLISH):
    KEPT_PUBLISH = 55  # [origin, serial, message]: a PUBLISH whose identity is another node's
    # (kept on disk by a node that restarted or was taken over; see _kept.py)
    # Extension services across the cluster (_client_services.py); older nodes skip them:
    CLIENTS_ASK = 60  # request id: which clients are connected to the receiver?
    CLIENTS = 61  # [request id, [[client id, protocol, username, listener, host, port], ...]]
    DISCONNECT_ASK = 62  # [request id, client id, reason code]: close it if connected there
    DISCONNECTED = 63  # [request id, whether it was connected there (and is closed now)]
    # The control center asks the node that holds a session (an older peer skips these, and the
    # question times out): [token, client ids] -> [token, JSON {client id: details or null}]
    CLIENT_QUERY = 64
    CLIENT_ANSWER = 65
    OVERLOAD = 66  # the sender's overload protection level, 0 to 10 (an older peer skips it)
    # Before anything else on a link of a cluster with a shared secret (see _auth.py):
    AUTH_CHALLENGE = 50  # a fresh nonce; sent by both ends as soon as the link is open
    AUTH_PROOF = 51  # the answer to the peer's challenge: proof of holding the shared secret


class WireError(Exception):
    """A frame that does not decode: the link is closed."""


_NONE, _FALSE, _TRUE, _INT, _NEG, _BYTES, _STR, _LIST, _DICT, _FLOAT = range(10)
_u32 = struct.Struct(">I")
_f64 = struct.Struct(">d")


def _varint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _pack(value: Any, out: bytearray) -> None:
    if value is None:
        out.append(_NONE)
    elif value is True:
        out.append(_TRUE)
    elif value is False:
        out.append(_FALSE)
    elif isinstance(value, int):
        if value >= 0:
            out.append(_INT)
            _varint(value, out)
        else:
            out.append(_NEG)
            _varint(-value, out)
    elif isinstance(value, float):
        out.append(_FLOAT)
        out += _f64.pack(value)
    elif isinstance(value, bytes | bytearray | memoryview):
        out.append(_BYTES)
        _varint(len(value), out)
        out += value
    elif isinstance(value, str):
        raw = value.encode()
        out.append(_STR)
        _varint(len(raw), out)
        out += raw
    elif isinstance(value, list | tuple):
        out.append(_LIST)
        _varint(len(value), out)
        for item in value:
            _pack(item, out)
    elif isinstance(value, dict):
        out.append(_DICT)
        _varint(len(value), out)
        for key, item in value.items():
            _pack(str(key), out)
            _pack(item, out)
    else:
        raise TypeError(f"cannot put {type(value).__name__} on the node wire")


def _unpack(data: memoryview, at: int) -> tuple[Any, int]:
    tag = data[at]
    at += 1
    if tag == _NONE:
        return None, at
    if tag == _TRUE:
        return True, at
    if tag == _FALSE:
        return False, at
    if tag == _FLOAT:
        return _f64.unpack_from(data, at)[0], at + 8
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if tag == _INT:
        return value, at
    if tag == _NEG:
        return -value, at
    if tag == _BYTES:
        end = at + value
        if end > len(data):
            raise WireError("bytes run past the frame")
        return bytes(data[at:end]), end
    if tag == _STR:
        end = at + value
        if end > len(data):
            raise WireError("string runs past the frame")
        return str(data[at:end], "utf-8"), end
    if tag == _LIST:
        items = []
        for _ in range(value):
            item, at = _unpack(data, at)
            items.append(item)
        return items, at
    if tag == _DICT:
        mapping = {}
        for _ in range(value):
            key, at = _unpack(data, at)
            mapping[key], at = _unpack(data, at)
        return mapping, at
    raise WireError(f"unknown value tag {tag}")


_publish_head = struct.Struct(">BBdHHI")  # qos, flags, expiry, topic, publisher, properties sizes
# frame size, kind, then the head: one pack per frame
_publish_start = struct.Struct(">IB" + _publish_head.format[1:])
_PUBLISH_FIXED = 1 + _publish_head.size
_PUBLISH = 20  # FrameKind.PUBLISH as a plain int: compared once per frame
_HAS_EXPIRY, _RETAIN, _HAS_SERIAL, _HAS_ROUTED_AT = 0x01, 0x02, 0x04, 0x08
_serial = struct.Struct(">Q")
_routed_at = struct.Struct(">d")


def encode_publish_frame(topic: str, payload: bytes, qos: int, retain: bool, properties: bytes,
                         expiry_at: float | None, publisher: str, serial: int = 0,
                         routed_at: float = 0.0) -> bytes:
    """A PUBLISH frame in a fixed layout: the hot path between nodes skips the generic codec.
    ``serial`` (protocol 4; 0: none) follows the head, then ``routed_at`` (0: none; the origin's
    wall clock when it routed the message; only to a peer whose HELLO says ``arrival_stamps``,
    as a node that does not know the flag would misread the frame), before the topic."""
    topic_raw = topic.encode()
    publisher_raw = publisher.encode()
    flags = (_HAS_EXPIRY if expiry_at is not None else 0) | (_RETAIN if retain else 0)
    size = (_PUBLISH_FIXED + len(topic_raw) + len(publisher_raw) + len(properties)
            + len(payload))
    if serial:
        flags |= _HAS_SERIAL
        size += 8
    if routed_at:
        flags |= _HAS_ROUTED_AT
        size += 8
    start = _publish_start.pack(size, _PUBLISH, qos, flags, expiry_at or 0.0, len(topic_raw),
                                len(publisher_raw), len(properties))
    if serial:
        start += _serial.pack(serial)
    if routed_at:
        start += _routed_at.pack(routed_at)
    if properties:
        return b"".join((start, topic_raw, publisher_raw, properties, payload))
    return b"".join((start, topic_raw, publisher_raw, payload))


PublishFields = tuple[str, bytes, int, bool, bytes, float | None, str, int, float]


def decode_publish_body(data: bytes, at: int = 0, end: int | None = None) -> PublishFields:
    """The fields of a PUBLISH frame body (after the kind byte): ``data[at:end]``."""
    if end is None:
        end = len(data)
    qos, flags, expiry, topic_size, publisher_size, props_size = _publish_head.unpack_from(
        data, at)
    at += _publish_head.size
    if flags & _HAS_SERIAL:
        serial = _serial.unpack_from(data, at)[0]
        at += 8
    else:
        serial = 0
    if flags & _HAS_ROUTED_AT:
        routed_at = _routed_at.unpack_from(data, at)[0]
        at += 8
    else:
        routed_at = 0.0
    topic = data[at:at + topic_size].decode()
    at += topic_size
    publisher = data[at:at + publisher_size].decode()
    at += publisher_size
    if props_size:
        properties = data[at:at + props_size]
        at += props_size
    else:
        properties = b""
    if at > end:
        raise WireError("PUBLISH frame fields run past the frame")
    return (topic, data[at:end], qos, bool(flags & _RETAIN), properties,
            expiry if flags & _HAS_EXPIRY else None, publisher, serial, routed_at)


_KINDS = {kind.value: kind for kind in FrameKind}


def encode_frame(kind: FrameKind, body: Any = None) -> bytes:
    out = bytearray(b"\x00\x00\x00\x00")
    out.append(kind)
    _pack(body, out)
    out[0:4] = _u32.pack(len(out) - 4)
    return bytes(out)


class FrameDecoder:
    """Bytes from a link in, whole frames out (sans-IO, like the MQTT codec)."""

    def __init__(self) -> None:
        self._rest = bytearray()  # the start of a frame that has not fully arrived
        self._need = 0  # how long _rest must grow before that frame is whole

    def feed(self, data: bytes) -> list[tuple[FrameKind, Any]]:
        rest = self._rest
        if rest:
            rest += data
            if len(rest) < self._need:
                return []
            buffer = bytes(rest)
            rest.clear()
        else:
            buffer = bytes(data)  # no copy when data is bytes already
        # One immutable buffer per read: fields are sliced straight out of it, no copy per frame.
        length = len(buffer)
        need = 4
        frames: list[tuple[FrameKind, Any]] = []
        append = frames.append
        publish = FrameKind.PUBLISH
        at = 0
        try:
            while length - at >= 4:
                size = _u32.unpack_from(buffer, at)[0]
                if size < 1 or size > MAX_FRAME:
                    raise WireError(f"frame of {size} bytes")
                end = at + 4 + size
                if end > length:
                    need = end - at
                    break
                if buffer[at + 4] == _PUBLISH:  # the hot path: no generic decoding
                    append((publish, decode_publish_body(buffer, at + 5, end)))
                    at = end
                    continue
                frame = memoryview(buffer)[at + 4:end]
                try:
                    kind = _KINDS[frame[0]]
                except KeyError:
                    kind = None  # a newer peer's frame: skipped, so versions can mix
                body, end = _unpack(frame, 1) if len(frame) > 1 else (None, 1)
                if end != len(frame):
                    raise WireError("trailing bytes in a frame")
                if kind is not None:
                    frames.append((kind, body))
                at += 4 + size
        except (IndexError, UnicodeDecodeError, struct.error) as exc:
            raise WireError(f"malformed frame: {exc}") from exc
        if at < length:
            rest += memoryview(buffer)[at:]
            self._need = need
        return frames
