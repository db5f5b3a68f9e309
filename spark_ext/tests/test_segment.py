"""The segment format: records round-trip, and a cut or damaged tail ends the records cleanly."""

from __future__ import annotations

import pytest

from hive_ext_spark._segment import (
    Event,
    SegmentError,
    encode_header,
    encode_record,
    landed_name,
    parse_landed_name,
    read_segment,
)

EVENTS = [
    Event(1, 1_700_000_000_000_000, "plant/hall-1/temp", b"21.5", 1, False, "sensor-1"),
    Event(2, 1_700_000_000_000_001, "a", b"", 0, True, "", [("k", "v"), ("k", "w")]),
    Event(3, 1_700_000_000_000_002, "ünï/cödé", bytes(range(256)) * 40, 2, False, "c-ü",
          [("unit", "°C")], "text/plain", "reply/here", b"\x00\x01corr", 1, 3600),
]


def segment_bytes(events: list[Event], node_id: str = "node-a", number: int = 7) -> bytes:
    return encode_header(number, node_id, 123) + b"".join(encode_record(e) for e in events)


def test_every_field_round_trips() -> None:
    segment = read_segment(segment_bytes(EVENTS))
    assert (segment.header.segment, segment.header.node_id, segment.header.created_us) == \
        (7, "node-a", 123)
    assert segment.events == EVENTS


def test_zeros_after_the_records_end_them() -> None:
    data = segment_bytes(EVENTS) + bytes(4096)
    segment = read_segment(data)
    assert segment.events == EVENTS
    assert segment.end == len(segment_bytes(EVENTS))


def test_every_cut_keeps_exactly_the_complete_records() -> None:
    header = encode_header(1, "n", 0)
    records = [encode_record(e) for e in EVENTS]
    whole = header + b"".join(records)
    boundaries = [len(header)]
    for record in records:
        boundaries.append(boundaries[-1] + len(record))
    for cut in range(len(header), len(whole) + 1):
        complete = sum(1 for b in boundaries[1:] if b <= cut)
        # a killed writer leaves the preallocated zeros after what it wrote
        segment = read_segment(whole[:cut] + bytes(len(whole) - cut))
        assert segment.events == EVENTS[:complete], cut
        assert segment.end == boundaries[complete]


def test_a_damaged_record_ends_the_records() -> None:
    data = bytearray(segment_bytes(EVENTS))
    second = len(encode_header(7, "node-a", 123)) + len(encode_record(EVENTS[0]))
    data[second + 30] ^= 0xFF  # inside the second record's body: its CRC no longer matches
    assert read_segment(bytes(data)).events == EVENTS[:1]


@pytest.mark.parametrize("data, message", [
    (b"", "too short"),
    (b"NOTASEGM" + bytes(40), "not an event segment"),
    (encode_header(1, "node", 0)[:-2], "cut short"),
])
def test_what_is_not_a_segment_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(SegmentError, match=message):
        read_segment(data)


def test_landed_names_carry_number_and_sequence_range() -> None:
    name = landed_name(12, 1001, 2000)
    assert name == "000000000012-0000000000001001-0000000000002000.events"
    assert parse_landed_name(name) == (12, 1001, 2000)
    for other in ("state.json", "x.open", "1-2.events", "a-b-c.events"):
        assert parse_landed_name(other) is None
