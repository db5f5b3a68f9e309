"""The node protocol's frames: every value round-trips, broken input raises WireError only."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hive_core.cluster import FrameDecoder, FrameKind, encode_frame
from hive_core.cluster._wire import MAX_FRAME, WireError, encode_publish_frame

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.binary(max_size=64), st.text(max_size=32),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=6),
                            st.dictionaries(st.text(max_size=8), inner, max_size=6)),
    max_leaves=30,
)
# PUBLISH has a fixed layout of its own (the hot path): tested below.
kinds = st.sampled_from([k for k in FrameKind if k is not FrameKind.PUBLISH])


def fed_in_chunks(stream: bytes, data: st.DataObject) -> list[tuple[FrameKind, Any]]:
    """What one decoder makes of ``stream`` fed in pieces cut where hypothesis draws."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    decoder = FrameDecoder()
    out: list[tuple[FrameKind, Any]] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        out += decoder.feed(stream[start:cut])
        start = cut
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(kinds, values), min_size=1, max_size=6), st.data())
def test_round_trip_in_any_chunking(frames: list[tuple[FrameKind, Any]], data: st.DataObject,
                                    ) -> None:
    stream = b"".join(encode_frame(kind, body) for kind, body in frames)
    assert fed_in_chunks(stream, data) == frames


def test_tuples_and_bytes_like_travel_as_lists_and_bytes() -> None:
    frame = encode_frame(FrameKind.FILTERS, ("t", bytearray(b"x"), memoryview(b"y")))
    assert FrameDecoder().feed(frame) == [(FrameKind.FILTERS, ["t", b"x", b"y"])]


def test_unencodable_value_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        encode_frame(FrameKind.FILTERS, {1, 2})


@settings(max_examples=200, deadline=None)
@given(kinds, values)
def test_every_strict_prefix_waits_for_more(kind: FrameKind, body: Any) -> None:
    frame = encode_frame(kind, body)
    for end in range(len(frame)):
        assert FrameDecoder().feed(frame[:end]) == []


@settings(max_examples=200, deadline=None)
@given(kinds, values, st.data())
def test_truncated_body_raises_wire_error(kind: FrameKind, body: Any, data: st.DataObject,
                                          ) -> None:
    """A length prefix that cuts the body short: the value runs past the frame.

    (A frame of the kind byte alone is valid: its body is None.)
    """
    frame = encode_frame(kind, body)
    size = len(frame) - 4
    if size < 3:
        return  # a body of one tag byte cannot be cut
    shorter = data.draw(st.integers(2, size - 1))
    broken = struct.pack(">I", shorter) + frame[4:4 + shorter]
    with pytest.raises(WireError):
        FrameDecoder().feed(broken)


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=200))
@example(b"\x00\x00\x00\x00")  # a frame of size 0
@example(struct.pack(">I", MAX_FRAME + 1))
@example(b"\x00\x00\x00\x02\x14\x63")  # unknown value tag
@example(b"\x00\x00\x00\x03\x14\x00\x00")  # trailing bytes
@example(b"\x00\x00\x00\x04\x14\x06\x01\xff")  # invalid UTF-8
@example(b"\x00\x00\x00\x03\x14\x03\x80")  # a varint that runs off the frame
def test_garbage_raises_only_wire_error(data: bytes) -> None:
    decoder = FrameDecoder()
    try:
        frames = decoder.feed(data)
    except WireError:
        return
    for kind, _body in frames:
        assert isinstance(kind, FrameKind)


@pytest.mark.parametrize("data", [
    b"\x00\x00\x00\x00",
    struct.pack(">I", MAX_FRAME + 1),
    b"\x00\x00\x00\x02\x14\x63",
    b"\x00\x00\x00\x03\x14\x00\x00",
    b"\x00\x00\x00\x04\x14\x06\x01\xff",
    b"\x00\x00\x00\x03\x14\x03\x80",
])
def test_known_malformed_frames(data: bytes) -> None:
    with pytest.raises(WireError):
        FrameDecoder().feed(data)


def test_unknown_frame_kind_is_skipped() -> None:
    """A newer peer's frame kind is skipped, so versions can mix."""
    unknown = b"\x00\x00\x00\x02\xfe\x00"
    known = encode_frame(FrameKind.HEARTBEAT)
    assert FrameDecoder().feed(unknown + known) == [(FrameKind.HEARTBEAT, None)]


publish_fields = st.tuples(
    st.text(min_size=1, max_size=40), st.binary(max_size=200), st.integers(0, 2), st.booleans(),
    st.binary(max_size=40), st.one_of(st.none(), st.floats(allow_nan=False, width=64)),
    st.text(max_size=20), st.one_of(st.just(0), st.integers(1, 2**64 - 1)),
    st.one_of(st.just(0.0), st.floats(allow_nan=False, width=64).filter(bool)))


@settings(max_examples=300, deadline=None)
@given(st.lists(publish_fields, min_size=1, max_size=5), st.data())
def test_publish_frames_round_trip_in_any_chunking(fields: list[tuple[Any, ...]],
                                                   data: st.DataObject) -> None:
    stream = b"".join(encode_publish_frame(*f) for f in fields)
    assert fed_in_chunks(stream, data) == [(FrameKind.PUBLISH, f) for f in fields]


def test_a_publish_frame_whose_fields_overrun_it_is_refused() -> None:
    frame = bytearray(encode_publish_frame("topic", b"payload", 1, False, b"", None, "p"))
    frame[4 + 1 + 11:4 + 1 + 13] = (5000).to_bytes(2, "big")  # topic size past the end
    with pytest.raises(WireError):
        FrameDecoder().feed(bytes(frame))
