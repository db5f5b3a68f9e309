"""Start after a stop or a kill -9: land what was left open, find where the numbers go on."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from hive_ext_spark._counters import LogCounters
from hive_ext_spark._files import STATE_FILE, fsync_folder, read_json
from hive_ext_spark._segment import (
    OPEN_SUFFIX,
    SegmentError,
    landed_name,
    parse_landed_name,
    read_segment,
)
from hive_ext_spark._segment_files import LandedSegment


@dataclass(slots=True)
class Recovered:
    landed: list[LandedSegment]  # in segment order
    next_sequence: int
    next_segment: int


def recover(folder: Path, counters: LogCounters, log: logging.Logger) -> Recovered:
    """Land the segments a killed run left open (complete records only), in number order.

    Spares and segments without a record are removed; a file that is not a segment is set
    aside as ``<name>.bad``. The next numbers are above everything landed and above what
    ``state.json`` says (landed segments may have been removed since).
    """
    state = read_json(folder / STATE_FILE)
    next_seq = state.get("next_sequence", 1)
    next_segment = state.get("next_segment", 1)
    next_seq = next_seq if isinstance(next_seq, int) else 1
    next_segment = next_segment if isinstance(next_segment, int) else 1
    for stale in folder.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    left_open: list[tuple[int, Path]] = []
    for path in folder.glob(f"*{OPEN_SUFFIX}"):
        try:
            segment = read_segment(path.read_bytes())
        except (OSError, SegmentError) as exc:
            counters.write_errors.inc()
            log.warning("spark-events: %s is not a readable segment (%s); set aside as %s.bad",
                        path, exc, path.name)
            path.rename(path.with_name(path.name + ".bad"))
            continue
        if segment.header.segment == 0 or not segment.events:
            path.unlink()  # a spare, or a segment that never got a record
            continue
        left_open.append((segment.header.segment, path))
    for number, path in sorted(left_open):
        segment = read_segment(path.read_bytes())
        first, last = segment.events[0].sequence, segment.events[-1].sequence
        with path.open("r+b") as out:
            out.truncate(segment.end)  # drops the preallocated zeros and a record cut short
            out.flush()
            os.fsync(out.fileno())
        path.rename(folder / landed_name(number, first, last))
        counters.recovered.inc(len(segment.events))
        log.info("spark-events: landed segment %d that the previous run left open "
                 "(%d complete events)", number, len(segment.events))
    if left_open:
        fsync_folder(folder)
    landed = []
    for path in folder.iterdir():
        parsed = parse_landed_name(path.name)
        if parsed is not None:
            number, first, last = parsed
            landed.append(LandedSegment(number, first, last, path, path.stat().st_size))
    landed.sort(key=lambda s: s.number)
    if landed:
        next_seq = max(next_seq, landed[-1].last_seq + 1)
        next_segment = max(next_segment, landed[-1].number + 1)
    return Recovered(landed, next_seq, next_segment)
