"""The durable, rotated, append-only event log of one node (broker side).

The active segment is a preallocated file mapped into memory: :meth:`EventLog.append` copies a
record into the mapping under a lock, so once it returns the record is in the OS page cache and
survives a kill -9 of the broker (not a power loss: see the README). A writer thread does every
slow thing: it prepares the next (spare) segment, lands full or old segments (truncate, fsync,
rename to the final name, fsync the folder), removes the oldest landed segments beyond the
retention bound, and reports a full disk. ``append`` never waits for it: when no segment is
ready the event is dropped and counted.

Folder layout (``<folder>/<node id>/``):

    <segment>-<first seq>-<last seq>.events    landed segments (immutable)
    <random>.open                              the active segment and the spare
    state.json                                 next sequence and segment numbers
    consumed.json                              written by the Spark job: what it committed
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from hive_ext_api import MetricsRegistry, PublishMessage, ReceivedPublish

from hive_ext_spark._counters import LogCounters
from hive_ext_spark._files import (
    CONSUMED_FILE,
    STATE_FILE,
    fsync_folder,
    read_json,
    write_json_atomically,
)
from hive_ext_spark._ratelimit import RateLimitedLog
from hive_ext_spark._recovery import recover
from hive_ext_spark._segment import (
    FIXED,
    FRAME,
    HAS_PROPERTIES,
    RECORD_OVERHEAD,
    RETAIN,
    SEGMENT_NUMBER_OFFSET,
    encode_properties,
    landed_name,
)
from hive_ext_spark._segment_files import LandedSegment, OpenSegment

_pack_fixed = FIXED.pack_into
_pack_frame = FRAME.pack_into
_frame = FRAME.pack
_fixed = FIXED.pack
_pack_number = struct.Struct("<Q").pack_into
_crc32 = zlib.crc32
_FRAME_SIZE = FRAME.size

log = logging.getLogger("hive.ext.spark")


def _with_properties(publish: PublishMessage) -> tuple[bytes, int]:
    """A record's properties part and its flags, for a PUBLISH that has properties."""
    props = encode_properties(publish.user_properties, publish.content_type,
                              publish.response_topic, publish.correlation_data,
                              publish.payload_format_indicator, publish.message_expiry_interval)
    return props, HAS_PROPERTIES | RETAIN if publish.retain else HAS_PROPERTIES


class EventLog:
    """One node's event log in ``root/<node id>/``; :meth:`append` is the broker's hot path."""

    def __init__(self, root: Path, node_id: str, *, segment_max_bytes: int,
                 segment_max_age_s: float, retention_max_bytes: int,
                 metrics: MetricsRegistry | None = None,
                 logger: logging.Logger | None = None) -> None:
        self.folder = root / node_id
        self.node_id = node_id
        self.segment_max_bytes = segment_max_bytes
        self.segment_max_age_s = segment_max_age_s
        self.retention_max_bytes = retention_max_bytes
        self.log = logger or log
        self.warn = RateLimitedLog(self.log)
        self.counters = LogCounters(metrics)
        self._lock = threading.Lock()
        self._active: OpenSegment | None = None
        self._spare: OpenSegment | None = None
        self._to_land: deque[OpenSegment] = deque()
        self._next_seq = 1
        self._next_segment = 1
        self._landed: deque[LandedSegment] = deque()
        self._landed_lock = threading.Lock()  # the writer and the S3 shipper share _landed
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._dropped_since_report = 0
        self._last_error = ""
        self._retry_create_at = 0.0  # append may make a segment itself, not before this
        self.shipped_through = 0  # set by the S3 shipper: segments up to here are in S3
        self.on_landed: Callable[[], None] | None = None  # the shipper's wake-up
        self.recorded = 0  # events appended since start

    # ------------------------------------------------------------------ start and stop

    def open(self) -> None:
        """Recover what a previous run left, then start the writer thread."""
        self.folder.mkdir(parents=True, exist_ok=True)
        recovered = recover(self.folder, self.counters, self.log)
        self._landed = deque(recovered.landed)
        self._next_seq = recovered.next_sequence
        self._next_segment = recovered.next_segment
        self._save_state()
        self._prepare_spare()
        self._activate_spare_if_idle()
        self._thread = threading.Thread(target=self._run, name="hive-spark-events", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Land the active segment and stop the writer thread (the node is stopping)."""
        with self._lock:
            if self._active is not None:
                self._to_land.append(self._active)
                self._active = None
            spare, self._spare = self._spare, None
            self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30)
        else:
            self._land_pending()
        if spare is not None:
            spare.discard()

    # ------------------------------------------------------------------ the hot path

    def append(self, client_id: str, publish: PublishMessage) -> None:
        """Record one PUBLISH; once this returns, the record is in the OS page cache."""
        topic = publish.topic.encode()
        client = client_id.encode()
        payload = publish.payload
        if (publish.user_properties or publish.content_type is not None
                or publish.response_topic is not None or publish.correlation_data is not None
                or publish.payload_format_indicator is not None
                or publish.message_expiry_interval is not None):
            props, flags = _with_properties(publish)
        else:
            props = b""
            flags = RETAIN if publish.retain else 0
        topic_len = len(topic)
        client_len = len(client)
        payload_len = len(payload)
        size = RECORD_OVERHEAD + topic_len + client_len + payload_len + len(props)
        with self._lock:
            seg = self._active
            if seg is None or seg.pos + size > seg.capacity:
                seg = self._switch(size)
                if seg is None:
                    self.counters.dropped.inc()
                    self._dropped_since_report += 1
                    return
            seq = self._next_seq
            self._next_seq = seq + 1
            pos = seg.pos
            mm = seg.mm
            _pack_fixed(mm, pos + _FRAME_SIZE, seq, time.time_ns() // 1000, publish.qos, flags,
                        topic_len, client_len, payload_len)
            at = pos + RECORD_OVERHEAD
            end = at + topic_len
            mm[at:end] = topic
            at, end = end, end + client_len
            mm[at:end] = client
            at, end = end, end + payload_len
            mm[at:end] = payload
            if props:
                at, end = end, end + len(props)
                mm[at:end] = props
            _pack_frame(mm, pos, size - _FRAME_SIZE, _crc32(seg.view[pos + _FRAME_SIZE:end]))
            seg.pos = end
            if seg.first_seq < 0:
                seg.first_seq = seq
                seg.deadline = time.monotonic() + self.segment_max_age_s
            seg.last_seq = seq
            self.recorded += 1
            self.counters.recorded.inc()

    def append_received(self, publishes: Iterable[ReceivedPublish]) -> None:
        """Record a batch of PUBLISHes in order, as :meth:`append` would one by one, under one
        lock and one clock reading, each segment's share copied into it at once."""
        bodies = []
        clients: dict[str, bytes] = {}
        for publish in publishes:
            if publish.has_properties:
                props, flags = _with_properties(publish.to_publish_message())
            else:
                props = b""
                flags = RETAIN if publish.retain else 0
            topic = publish.topic.encode()
            client_id = publish.publisher_id
            client = clients.get(client_id)
            if client is None:
                client = clients[client_id] = client_id.encode()
            payload = publish.payload
            bodies.append((publish.qos, flags, len(topic), len(client), len(payload),
                           topic + client + payload + props))
        if bodies:
            self._write_bodies(bodies)

    def _write_bodies(self, bodies: list[tuple[int, int, int, int, int, bytes]]) -> None:
        with self._lock:
            stamp = time.time_ns() // 1000
            seq = self._next_seq
            seg = self._active
            chunk: list[bytes] = []
            start = pos = seg.pos if seg is not None else 0
            first = seq
            for index, (qos, flags, topic_len, client_len, payload_len, rest) in \
                    enumerate(bodies):
                size = RECORD_OVERHEAD + len(rest)
                if seg is None or pos + size > seg.capacity:
                    if seg is not None and chunk:
                        self._fill(seg, start, pos, chunk, first, seq)
                    chunk = []
                    seg = self._switch(size)
                    if seg is None:  # no segment to write into: the rest is dropped, counted
                        self._next_seq = seq
                        self.counters.dropped.inc(len(bodies) - index)
                        self._dropped_since_report += len(bodies) - index
                        return
                    start = pos = seg.pos
                    first = seq
                body = _fixed(seq, stamp, qos, flags, topic_len, client_len, payload_len) + rest
                chunk.append(_frame(size - _FRAME_SIZE, _crc32(body)))
                chunk.append(body)
                pos += size
                seq += 1
            if seg is not None and chunk:
                self._fill(seg, start, pos, chunk, first, seq)
            self._next_seq = seq

    def _fill(self, seg: OpenSegment, start: int, end: int, chunk: list[bytes], first: int,
              after: int) -> None:
        """Under the lock: the records ``first`` .. ``after - 1`` into ``seg`` at ``start``."""
        seg.mm[start:end] = b"".join(chunk)
        seg.pos = end
        if seg.first_seq < 0:
            seg.first_seq = first
            seg.deadline = time.monotonic() + self.segment_max_age_s
        seg.last_seq = after - 1
        self.recorded += after - first
        self.counters.recorded.inc(after - first)

    def _switch(self, size: int) -> OpenSegment | None:
        """Under the lock: hand the active segment to the writer, activate one that fits."""
        old = self._active
        if old is not None:
            self._to_land.append(old)
            self._active = None
        if self._stopping:
            return None
        seg: OpenSegment | None
        if size > self.segment_max_bytes - 256:
            # rare: a message bigger than a segment gets a segment of its own, made here
            seg = self._create_now(size + 256)
        else:
            seg, self._spare = self._spare, None
            if seg is None:
                # The writer has not made the spare yet (a burst): make one here, which costs a
                # file creation; after a failure, only once a second (a full disk fails fast).
                seg = self._create_now(self.segment_max_bytes)
        self._wake.set()
        if seg is not None:
            self._activate(seg)
        return seg

    def _create_now(self, capacity: int) -> OpenSegment | None:
        now = time.monotonic()
        if now < self._retry_create_at:
            return None
        try:
            return OpenSegment.create(self.folder, self.node_id, capacity)
        except OSError as exc:
            self._retry_create_at = now + 1.0
            self._last_error = f"cannot create a segment in {self.folder}: {exc}"
            return None

    def _activate(self, seg: OpenSegment) -> None:
        seg.number = self._next_segment
        self._next_segment += 1
        _pack_number(seg.mm, SEGMENT_NUMBER_OFFSET, seg.number)
        self._active = seg

    # ------------------------------------------------------------------ the writer thread

    def _run(self) -> None:
        tick = min(0.1, self.segment_max_age_s / 4)
        while True:
            self._wake.wait(tick)
            self._wake.clear()
            stopping = self._stopping
            try:
                if not stopping:
                    self._prepare_spare()
                    self._activate_spare_if_idle()
                    self._rotate_by_age()
                self._land_pending()
                self._apply_retention()
                self._report_drops()
            except Exception:  # the thread must outlive any surprise; the next tick retries
                self.counters.write_errors.inc()
                self.log.exception("spark-events: the writer thread failed; retrying")
                time.sleep(tick)
            if stopping:
                return

    def _prepare_spare(self) -> None:
        if self._spare is not None:
            return
        try:
            seg = OpenSegment.create(self.folder, self.node_id, self.segment_max_bytes)
        except OSError as exc:
            self.counters.write_errors.inc()
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            self._last_error = ("the disk is full" if full else "cannot create a segment") + \
                f" in {self.folder}: {exc}"
            self.warn.warning("spark-events: " + ("disk full" if full else "create"),
                              "spark-events: %s; events are dropped until a segment can be "
                              "made", self._last_error)
            return
        with self._lock:
            stopping = self._stopping
            if not stopping:
                self._spare = seg
        if stopping:
            seg.discard()

    def _activate_spare_if_idle(self) -> None:
        with self._lock:
            if self._active is None and self._spare is not None and not self._stopping:
                seg, self._spare = self._spare, None
                self._activate(seg)
        if self._spare is None:
            self._prepare_spare()

    def _rotate_by_age(self) -> None:
        with self._lock:
            seg = self._active
            if (seg is None or seg.first_seq < 0 or time.monotonic() < seg.deadline
                    or self._spare is None):
                return
            self._to_land.append(seg)
            spare, self._spare = self._spare, None
            self._activate(spare)
        self._prepare_spare()

    def _land_pending(self) -> None:
        while True:
            with self._lock:
                if not self._to_land:
                    return
                seg = self._to_land[0]
            try:
                self._land(seg)
            except OSError as exc:
                self.counters.write_errors.inc()
                self.warn.warning("spark-events: land", "spark-events: cannot land segment %d "
                                  "(%s): %s; retrying", seg.number, seg.path, exc)
                return
            with self._lock:
                self._to_land.popleft()

    def _land(self, seg: OpenSegment) -> None:
        if seg.first_seq < 0:
            seg.discard()
            return
        used = seg.pos
        if not seg.mm.closed:
            seg.view.release()
            seg.mm.close()
        os.ftruncate(seg.fd, used)
        os.fsync(seg.fd)
        final = self.folder / landed_name(seg.number, seg.first_seq, seg.last_seq)
        if not final.exists():  # a retry after the folder's fsync failed: renamed already
            os.rename(seg.path, final)
        fsync_folder(self.folder)
        os.close(seg.fd)
        self._save_state()
        with self._landed_lock:
            self._landed.append(LandedSegment(seg.number, seg.first_seq, seg.last_seq, final,
                                              used))
        self.counters.landed.inc()
        if self.on_landed is not None:
            self.on_landed()

    def _save_state(self) -> None:
        with self._lock:
            state = {"next_sequence": self._next_seq, "next_segment": self._next_segment}
        write_json_atomically(self.folder / STATE_FILE, state)

    def _report_drops(self) -> None:
        dropped, self._dropped_since_report = self._dropped_since_report, 0
        if dropped:
            self.warn.warning("spark-events: dropped", "spark-events: %d events dropped: %s",
                              dropped, self._last_error or "no segment was ready")

    # ------------------------------------------------------------------ retention

    def consumed_through(self) -> int:
        """The highest segment number the pipeline has taken (S3, or the Spark job's marker)."""
        marker = read_json(self.folder / CONSUMED_FILE).get("segment", 0)
        job = marker if isinstance(marker, int) else 0
        return max(job, self.shipped_through)

    def landed(self) -> list[LandedSegment]:
        with self._landed_lock:
            return list(self._landed)

    def forget(self, segment: LandedSegment) -> None:
        """The shipper removed a segment's local file (shipped, and kept only in S3)."""
        with self._landed_lock:
            if segment in self._landed:
                self._landed.remove(segment)

    def backlog_bytes(self) -> int:
        consumed = self.consumed_through()
        with self._landed_lock:
            return sum(s.size for s in self._landed if s.number > consumed)

    def _apply_retention(self) -> None:
        with self._landed_lock:
            total = sum(s.size for s in self._landed)
            if total <= self.retention_max_bytes:
                return
            removed: list[LandedSegment] = []
            while self._landed and total > self.retention_max_bytes:
                oldest = self._landed.popleft()
                total -= oldest.size
                removed.append(oldest)
        consumed = self.consumed_through()
        for segment in removed:
            segment.path.unlink(missing_ok=True)
            self.counters.removed.inc()
            if segment.number > consumed:
                self.counters.lost.inc(segment.events)
                self.warn.warning(
                    "spark-events: lost", "spark-events: retention-max-bytes (%d) reached with "
                    "segment %d not yet taken by the Spark job or S3: its %d events are removed "
                    "(is the pipeline stopped?)", self.retention_max_bytes, segment.number,
                    segment.events)

    # ------------------------------------------------------------------ for tests and tools

    @property
    def next_sequence(self) -> int:
        return self._next_seq

    def rotate(self) -> None:
        """Land the active segment now (the writer thread does it within a tick)."""
        with self._lock:
            seg = self._active
            if seg is None or seg.first_seq < 0:
                return
            seg.deadline = 0.0
        self._wake.set()
