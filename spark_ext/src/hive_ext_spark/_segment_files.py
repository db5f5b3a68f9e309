"""A segment's file while it is written (memory-mapped, preallocated) and once it has landed."""

from __future__ import annotations

import mmap
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from hive_ext_spark._segment import OPEN_SUFFIX, encode_header


class OpenSegment:
    """A preallocated, memory-mapped segment file that records are copied into."""

    __slots__ = ("capacity", "deadline", "fd", "first_seq", "header_len", "last_seq", "mm",
                 "number", "path", "pos", "view")

    def __init__(self, path: Path, fd: int, mm: mmap.mmap, header_len: int) -> None:
        self.path = path
        self.fd = fd
        self.mm = mm
        self.view = memoryview(mm)
        self.capacity = len(mm)
        self.header_len = header_len
        self.pos = header_len
        self.number = 0
        self.first_seq = -1
        self.last_seq = -1
        self.deadline = float("inf")

    @classmethod
    def create(cls, folder: Path, node_id: str, capacity: int) -> OpenSegment:
        path = folder / f"{uuid.uuid4().hex}{OPEN_SUFFIX}"
        header = encode_header(0, node_id, time.time_ns() // 1000)
        capacity = max(capacity, len(header))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            # Reserve the blocks now: a full disk shows here, never as SIGBUS in append.
            os.posix_fallocate(fd, 0, capacity)
            mm = mmap.mmap(fd, capacity)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        mm[: len(header)] = header
        return cls(path, fd, mm, len(header))

    @property
    def events(self) -> int:
        return 0 if self.first_seq < 0 else self.last_seq - self.first_seq + 1

    def discard(self) -> None:
        self.view.release()
        self.mm.close()
        os.close(self.fd)
        self.path.unlink(missing_ok=True)


@dataclass(slots=True)
class LandedSegment:
    number: int
    first_seq: int
    last_seq: int
    path: Path
    size: int

    @property
    def events(self) -> int:
        return self.last_seq - self.first_seq + 1
