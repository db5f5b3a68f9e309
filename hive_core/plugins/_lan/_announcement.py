"""The discovery datagram: who a node is and where its cluster transport listens. Sans-IO.

Layout of format version 1 (network byte order)::

    magic "HIVD" (4) | version (1) | kind (1) | port (2) | cluster name | node id | host

where each of the three strings is one length byte and that many UTF-8 bytes. Later versions
only append fields: a reader takes the fields it knows and ignores the bytes after them, so
nodes of neighbouring releases still find each other.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from hive_ext_api import ClusterNodeAddress

__all__ = ["FORMAT_VERSION", "MAGIC", "Announcement", "AnnouncementKind", "MalformedAnnouncement",
           "decode", "encode"]

MAGIC = b"HIVD"
FORMAT_VERSION = 1
_head = struct.Struct(">4sBBH")  # magic, version, kind, port
MAX_TEXT = 255  # bytes of one string: its length fits in one byte


class AnnouncementKind(enum.IntEnum):
    ANNOUNCE = 1  # I am here (sent every announce interval)
    PROBE = 2  # I am here and just started: everyone answer with an ANNOUNCE now
    LEAVE = 3  # I am leaving: stop proposing me


class MalformedAnnouncement(ValueError):
    """A datagram that says it is a Hive announcement but cannot be read as one."""


@dataclass(frozen=True, slots=True)
class Announcement:
    kind: AnnouncementKind
    cluster_name: str
    node_id: str
    host: str
    port: int
    version: int = FORMAT_VERSION  # the sender's format version (a reader may know less)

    @property
    def address(self) -> ClusterNodeAddress:
        return ClusterNodeAddress(self.host, self.port)


def _text(value: str, what: str) -> bytes:
    raw = value.encode()
    if not raw or len(raw) > MAX_TEXT:
        raise ValueError(f"the {what} must be 1 to {MAX_TEXT} UTF-8 bytes, got {len(raw)}")
    return bytes((len(raw),)) + raw


def encode(announcement: Announcement) -> bytes:
    """The datagram for ``announcement``, always in this release's format version."""
    if not 1 <= announcement.port <= 65535:
        raise ValueError(f"port {announcement.port} is not a port from 1 to 65535")
    return b"".join((
        _head.pack(MAGIC, FORMAT_VERSION, announcement.kind, announcement.port),
        _text(announcement.cluster_name, "cluster name"),
        _text(announcement.node_id, "node id"),
        _text(announcement.host, "host"),
    ))


def _read_text(datagram: bytes, offset: int, what: str) -> tuple[str, int]:
    if offset >= len(datagram):
        raise MalformedAnnouncement(f"it ends before the {what}")
    size = datagram[offset]
    end = offset + 1 + size
    if size == 0 or end > len(datagram):
        raise MalformedAnnouncement(f"its {what} is cut short or empty")
    try:
        return datagram[offset + 1:end].decode(), end
    except UnicodeDecodeError:
        raise MalformedAnnouncement(f"its {what} is not UTF-8") from None


def decode(datagram: bytes) -> Announcement | None:
    """The announcement in ``datagram``; None when it is not a Hive announcement at all.

    Raises :class:`MalformedAnnouncement` for a datagram with the magic that cannot be read.
    A kind this release does not know is malformed in version 1 and ignored (None) in later
    versions, which may add kinds.
    """
    if len(datagram) < len(MAGIC) or not datagram.startswith(MAGIC):
        return None
    if len(datagram) < _head.size:
        raise MalformedAnnouncement(f"{len(datagram)} bytes is shorter than the header")
    _magic, version, kind, port = _head.unpack_from(datagram)
    if version < 1:
        raise MalformedAnnouncement(f"format version {version} does not exist")
    if kind not in AnnouncementKind.__members__.values():
        if version == FORMAT_VERSION:
            raise MalformedAnnouncement(f"kind {kind} is not an announcement kind")
        return None
    if port == 0:
        raise MalformedAnnouncement("it gives port 0")
    cluster_name, offset = _read_text(datagram, _head.size, "cluster name")
    node_id, offset = _read_text(datagram, offset, "node id")
    host, offset = _read_text(datagram, offset, "host")
    if offset != len(datagram) and version == FORMAT_VERSION:
        raise MalformedAnnouncement(f"{len(datagram) - offset} bytes follow the last field")
    return Announcement(AnnouncementKind(kind), cluster_name, node_id, host, port, version)
