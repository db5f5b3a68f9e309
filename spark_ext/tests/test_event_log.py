"""The event log on its own: rotation, landing, retention, a full disk, and kill -9 recovery."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hive_ext_api import PublishMessage

from _procs import wait_for
from hive_ext_spark import EventLog, read_segment
from hive_ext_spark._files import write_json_atomically
from hive_ext_spark._segment import Event, parse_landed_name

KIB = 1024


def make_log(root: Path, **kwargs: float) -> EventLog:
    settings = {"segment_max_bytes": 64 * KIB, "segment_max_age_s": 30.0,
                "retention_max_bytes": 64 * 1024 * KIB, **kwargs}
    event_log = EventLog(root, "node-a", segment_max_bytes=int(settings["segment_max_bytes"]),
                         segment_max_age_s=settings["segment_max_age_s"],
                         retention_max_bytes=int(settings["retention_max_bytes"]))
    event_log.open()
    return event_log


@pytest.fixture
def event_log(tmp_path: Path) -> Iterator[EventLog]:
    event_log = make_log(tmp_path)
    yield event_log
    event_log.close()


def landed_events(folder: Path) -> list[Event]:
    events: list[Event] = []
    for path in sorted(folder.glob("*.events")):
        segment = read_segment(path.read_bytes())
        number, first, last = parse_landed_name(path.name)  # type: ignore[misc]
        assert segment.header.segment == number
        assert (segment.events[0].sequence, segment.events[-1].sequence) == (first, last)
        events.extend(segment.events)
    return events


def landed_through(event_log: EventLog, sequence: int) -> bool:
    """Whether the segment holding ``sequence`` has landed."""
    return any(parse_landed_name(p.name)[2] >= sequence  # type: ignore[index]
               for p in event_log.folder.glob("*.events"))


def publish(n: int, size: int = 100) -> PublishMessage:
    return PublishMessage(f"devices/d{n % 7}/value", str(n).encode().ljust(size, b"."), 1)


def test_segments_rotate_by_size_and_land_in_order(event_log: EventLog) -> None:
    for n in range(3000):
        event_log.append(f"client-{n % 3}", publish(n))
    event_log.close()
    names = sorted(p.name for p in event_log.folder.glob("*.events"))
    assert len(names) >= 4  # 3000 records of ~150 bytes in 64 KiB segments
    numbers = [parse_landed_name(n)[0] for n in names]  # type: ignore[index]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    events = landed_events(event_log.folder)
    assert [e.sequence for e in events] == list(range(1, 3001))
    assert [e.payload.rstrip(b".") for e in events] == [str(n).encode() for n in range(3000)]
    assert not list(event_log.folder.glob("*.open"))  # the spare is gone too
    for path in event_log.folder.glob("*.events"):  # landed files are cut to what they hold
        assert path.stat().st_size < 64 * KIB


class Received:
    """A PUBLISH as the node hands it to ``hive_publishes_received`` (``ReceivedPublish``)."""

    def __init__(self, client_id: str, publish: PublishMessage) -> None:
        self.publisher_id = client_id
        self.full = publish
        self.topic, self.payload = publish.topic, publish.payload
        self.qos, self.retain = publish.qos, publish.retain
        self.has_properties = publish != PublishMessage(publish.topic, publish.payload,
                                                        publish.qos, publish.retain)

    def to_publish_message(self) -> PublishMessage:
        return self.full


def test_a_batch_records_what_appending_one_by_one_records(tmp_path: Path) -> None:
    """Batches as the node hands them over: across segment switches, with a message bigger
    than a segment, with properties and retain; the same events and sequence as append."""
    messages = [(f"client-{n % 3}", publish(n)) for n in range(1500)]
    messages[10] = ("c", PublishMessage("big", b"x" * 100 * KIB, 0))
    messages[20] = ("c", PublishMessage("props", b"p", 1, True, [("k", "v"), ("k", "w")],
                                        "text/plain", "re/ply", b"\x00\x01", 1, 3600))
    messages[30] = ("c", PublishMessage("kept", b"r", 2, True))
    one_by_one, batched = make_log(tmp_path / "one"), make_log(tmp_path / "batched")
    for client_id, message in messages:
        one_by_one.append(client_id, message)
    for at in range(0, len(messages), 97):  # batches of many sizes end in many places
        batched.append_received([Received(c, m) for c, m in messages[at:at + 97]])
    one_by_one.close()
    batched.close()
    expected, got = landed_events(one_by_one.folder), landed_events(batched.folder)
    assert [e.sequence for e in got] == list(range(1, 1501))
    assert [replace(e, timestamp_us=0) for e in got] \
        == [replace(e, timestamp_us=0) for e in expected]
    assert got[20].user_properties == [("k", "v"), ("k", "w")] and got[30].retain
    assert len(list(batched.folder.glob("*.events"))) >= 4
    assert batched.recorded == 1500


def test_a_quiet_segment_lands_after_its_max_age(tmp_path: Path) -> None:
    event_log = make_log(tmp_path, segment_max_age_s=0.3)
    try:
        event_log.append("c", publish(1))
        began = time.monotonic()
        wait_for(lambda: any(event_log.folder.glob("*.events")), 3.0, "a landed segment")
        assert time.monotonic() - began >= 0.25
        assert [e.sequence for e in landed_events(event_log.folder)] == [1]
    finally:
        event_log.close()


def test_a_message_bigger_than_a_segment_gets_its_own(event_log: EventLog) -> None:
    event_log.append("c", publish(1))
    event_log.append("c", PublishMessage("big", b"x" * 300 * KIB, 0))
    event_log.append("c", publish(3))
    event_log.close()
    events = landed_events(event_log.folder)
    assert [(e.sequence, len(e.payload)) for e in events] == [(1, 100), (2, 300 * KIB),
                                                              (3, 100)]


def test_sequence_numbers_continue_after_a_clean_restart(tmp_path: Path) -> None:
    first = make_log(tmp_path)
    for n in range(10):
        first.append("c", publish(n))
    first.close()
    # Even with every landed segment gone (shipped, or dropped by retention).
    for path in first.folder.glob("*.events"):
        path.unlink()
    second = make_log(tmp_path)
    second.append("c", publish(10))
    second.close()
    assert [e.sequence for e in landed_events(second.folder)] == [11]


def test_retention_removes_the_oldest_and_counts_what_the_pipeline_lost(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    event_log = make_log(tmp_path, retention_max_bytes=192 * KIB)
    try:
        for n in range(2000):  # about 300 KiB
            event_log.append("c", publish(n))
        event_log.rotate()

        def settled() -> bool:  # the last segment landed, retention ran, counted and logged
            try:
                kept = sum(p.stat().st_size for p in event_log.folder.glob("*.events"))
                events = landed_events(event_log.folder)
            except FileNotFoundError:  # retention removed a file while we looked
                return False
            return (landed_through(event_log, 2000) and kept <= 192 * KIB
                    and event_log.counters.lost.value == events[0].sequence - 1
                    and "not yet taken by the Spark job or S3" in caplog.text)

        wait_for(settled, 5.0, "retention, and everything landed")
        assert event_log.counters.removed.value > 0
        lost = event_log.counters.lost.value  # nobody took them: every removed event is lost
        assert lost > 0

        # The job says it committed everything so far: what retention removes now is not lost.
        newest = max(parse_landed_name(p.name)[0]  # type: ignore[index]
                     for p in event_log.folder.glob("*.events"))
        write_json_atomically(event_log.folder / "consumed.json", {"segment": newest + 100})
        removed = event_log.counters.removed.value
        for n in range(2000):
            event_log.append("c", publish(n))
        event_log.rotate()
        wait_for(lambda: event_log.counters.removed.value > removed
                 and landed_through(event_log, 4000), 5.0, "retention, and everything landed")
        assert event_log.counters.lost.value == lost
    finally:
        event_log.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 512 KiB file system (tmpfs), so the disk really fills up."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_drops_and_counts_events_without_blocking_then_recovers(
        small_disk: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    event_log = make_log(small_disk, segment_max_age_s=0.2, retention_max_bytes=10 * 1024 * KIB)
    try:
        slowest = 0.0
        for n in range(6000):  # about 900 KiB: more than the disk holds
            began = time.perf_counter()
            event_log.append("c", publish(n))
            slowest = max(slowest, time.perf_counter() - began)
            if n % 500 == 0:
                time.sleep(0.3)  # let the writer land and try to make segments
        assert event_log.counters.dropped.value > 0
        assert event_log.counters.write_errors.value > 0
        assert slowest < 0.05  # append never waited for the disk
        wait_for(lambda: "the disk is full" in caplog.text, 5.0, "a disk-full warning")
        assert caplog.text.count("the disk is full") <= 3  # rate-limited, not per event

        recorded = landed_events(event_log.folder)
        assert [e.sequence for e in recorded] == list(range(1, len(recorded) + 1))
        # Space comes back (an operator, or the pipeline taking segments): recording resumes.
        for path in event_log.folder.glob("*.events"):
            path.unlink()

        def recorded_again() -> bool:
            dropped = event_log.counters.dropped.value
            event_log.append("c", publish(99999))
            return event_log.counters.dropped.value == dropped

        wait_for(recorded_again, 5.0, "an event recorded once there is space again")
    finally:
        event_log.close()
    assert landed_events(event_log.folder)[-1].payload.rstrip(b".") == b"99999"


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from hive_ext_api import PublishMessage
    from hive_ext_spark import EventLog

    log = EventLog(Path(sys.argv[1]), "node-a", segment_max_bytes=256 * 1024,
                   segment_max_age_s=0.2, retention_max_bytes=1 << 30)
    log.open()
    n = 0
    while True:
        log.append("c", PublishMessage("t/" + str(n), str(n).encode() * 20, 1))
        print(n, flush=True)  # "acknowledged": append returned
        n += 1
""")


def test_kill_9_loses_no_event_whose_append_returned(tmp_path: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    acknowledged = -1
    try:
        assert writer.stdout is not None
        for line in writer.stdout:
            acknowledged = int(line)
            if acknowledged >= 20000:  # several landed segments, one open, one spare
                break
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(writer.pid, signal.SIGKILL)
        writer.wait(10)
    folder = tmp_path / "node-a"
    assert list(folder.glob("*.open"))  # the kill left the active segment open

    recovered = make_log(tmp_path)
    recovered.append("c", PublishMessage("after", b"restart", 1))
    recovered.close()
    events = landed_events(folder)
    topics = [e.topic for e in events]
    assert topics[-1] == "after"
    written = [int(t[2:]) for t in topics[:-1]]
    assert written == list(range(len(written)))  # no gap, no repeat
    assert len(written) >= acknowledged + 1  # everything acknowledged (and maybe a bit more)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert not list(folder.glob("*.open"))
