"""LAN discovery without sockets: the datagram format, the roster's ageing, the warnings."""

from __future__ import annotations

import logging
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hive_core.plugins._lan import (
    FORMAT_VERSION,
    Announcement,
    AnnouncementKind,
    MalformedAnnouncement,
    Roster,
    decode,
    encode,
)
from hive_core.plugins._lan._warnings import WarningGate
from hive_ext_api import ClusterNodeAddress

texts = st.text(min_size=1, max_size=60).filter(lambda t: 0 < len(t.encode()) <= 255)
announcements = st.builds(Announcement, st.sampled_from(AnnouncementKind), texts, texts, texts,
                          st.integers(1, 65535))


def node(node_id: str = "n1", host: str = "10.0.0.1", port: int = 8000,
         kind: AnnouncementKind = AnnouncementKind.ANNOUNCE) -> Announcement:
    return Announcement(kind, "hive", node_id, host, port)


# ------------------------------------------------------------------------------ the format


@settings(max_examples=300, deadline=None)
@given(announcements)
def test_every_announcement_round_trips(announcement: Announcement) -> None:
    assert decode(encode(announcement)) == announcement


def test_the_layout_is_the_documented_one() -> None:
    datagram = encode(node("ab", "h", 7800))
    assert datagram == b"HIVD" + bytes([1, 1]) + struct.pack(">H", 7800) + \
        b"\x04hive" + b"\x02ab" + b"\x01h"
    assert FORMAT_VERSION == 1


@pytest.mark.parametrize("datagram", [b"", b"HIV", b"hello world", b"\x48\x01\x00\x00\x00\x01",
                                      b"MQTT" + bytes(20)])
def test_what_is_not_an_announcement_is_none(datagram: bytes) -> None:
    assert decode(datagram) is None


VALID = encode(node())
MALFORMED = {
    "shorter than the header": VALID[:7],
    "version 0": VALID[:4] + b"\x00" + VALID[5:],
    "unknown kind in version 1": VALID[:5] + b"\x09" + VALID[6:],
    "port 0": VALID[:6] + b"\x00\x00" + VALID[8:],
    "ends before the cluster name": VALID[:8],
    "cluster name cut short": VALID[:10],
    "empty node id": VALID[:13] + b"\x00" + VALID[16:],
    "ends before the host": VALID[:16],
    "host not UTF-8": VALID[:-9] + b"\x08\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8",
    "bytes after the last field in version 1": VALID + b"x",
}


@pytest.mark.parametrize("datagram", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_broken_announcement_is_refused(datagram: bytes) -> None:
    with pytest.raises(MalformedAnnouncement):
        decode(datagram)


@settings(max_examples=300, deadline=None)
@given(announcements, st.data())
def test_every_strict_prefix_is_refused_never_misread(announcement: Announcement,
                                                      data: st.DataObject) -> None:
    datagram = encode(announcement)
    cut = data.draw(st.integers(len(b"HIVD"), len(datagram) - 1))
    with pytest.raises(MalformedAnnouncement):
        decode(datagram[:cut])


def test_a_later_version_is_read_as_far_as_this_one_knows() -> None:
    later = VALID[:4] + b"\x02" + VALID[5:] + b"\x05extra fields"
    announcement = decode(later)
    assert announcement is not None
    assert (announcement.node_id, announcement.address, announcement.version) == (
        "n1", ClusterNodeAddress("10.0.0.1", 8000), 2)
    assert decode(VALID[:4] + b"\x02\x09" + VALID[6:]) is None  # a kind added later: skipped


@pytest.mark.parametrize("bad", [node(node_id=""), node(host="h" * 256), node(port=0),
                                 node(port=70000)])
def test_encode_refuses_what_cannot_be_sent(bad: Announcement) -> None:
    with pytest.raises(ValueError):
        encode(bad)


# ------------------------------------------------------------------------------ the roster


def test_a_node_is_listed_until_it_ages_out() -> None:
    roster = Roster(expiry=10)
    assert roster.heard(node("b", port=2), now=0) is True
    assert roster.heard(node("a", port=1), now=1) is True
    assert roster.heard(node("b", port=2), now=5) is False  # heard again: not news
    assert roster.addresses(now=10) == [ClusterNodeAddress("10.0.0.1", 1),
                                        ClusterNodeAddress("10.0.0.1", 2)]
    assert roster.addresses(now=11.5) == [ClusterNodeAddress("10.0.0.1", 2)]  # a: 10.5 s
    assert [n.node_id for n in roster.expire(now=11.5)] == ["a"]
    assert len(roster) == 1
    assert roster.expire(now=15) == [] and len(roster) == 1  # b: exactly the expiry
    assert [n.node_id for n in roster.expire(now=15.01)] == ["b"]
    assert roster.addresses(now=15.01) == []


def test_a_restarted_node_moves_instead_of_doubling() -> None:
    roster = Roster(expiry=10)
    roster.heard(node("a", port=1), now=0)
    assert roster.heard(node("a", port=9), now=1) is True  # same id, new address: news
    assert roster.addresses(now=1) == [ClusterNodeAddress("10.0.0.1", 9)]


def test_a_node_heard_after_ageing_out_is_news_again() -> None:
    roster = Roster(expiry=2)
    roster.heard(node("a"), now=0)
    assert roster.heard(node("a"), now=3) is True


def test_a_leaving_node_is_dropped_at_once() -> None:
    roster = Roster(expiry=10)
    roster.heard(node("a"), now=0)
    left = roster.left("a")
    assert left is not None and left.node_id == "a"
    assert roster.left("a") is None
    assert roster.addresses(now=0) == []


def test_the_expiry_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Roster(expiry=0)


# ------------------------------------------------------------------------------ warnings


def test_repeated_warnings_are_logged_once_per_period_and_all_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    counted = []
    gate = WarningGate(logging.getLogger("test.gate"), period=60, clock=lambda: now[0],
                       counter=lambda: counted.append(1))
    with caplog.at_level(logging.WARNING, "test.gate"):
        assert gate.warn("send", "send failed: %s", "x") is True
        for _ in range(5):
            now[0] += 1
            assert gate.warn("send", "send failed: %s", "x") is False
        assert gate.warn("open", "cannot open") is True  # another kind: its own period
        now[0] = 61
        assert gate.warn("send", "send failed: %s", "y") is True
    assert len(counted) == 8
    assert [r.getMessage() for r in caplog.records] == [
        "send failed: x", "cannot open",
        "send failed: y (5 more like it since the last warning)"]
