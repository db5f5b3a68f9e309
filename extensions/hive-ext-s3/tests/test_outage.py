"""Failures of the service: every one counted, logged once as an outage begins, then once a
minute while it lasts, and once when it ends (a fake clock stands in for the minutes)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from hive_ext_s3._outage import Outage


@dataclass
class Count:
    value: int = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_counted_every_time_and_logged_rarely(
        caplog: pytest.LogCaptureFixture) -> None:
    clock, errors = Clock(), Count()
    outage = Outage(logging.getLogger("test.outage"), errors, "svc", 60.0, clock)
    with caplog.at_level(logging.INFO, logger="test.outage"):
        for _ in range(30):  # one failure a second for 30 s
            outage.failed("read the node records", "connection refused")
            clock.now += 1
        assert errors.value == 30 and outage.ongoing
        assert [r.getMessage() for r in caplog.records] == [
            "svc: cannot read the node records: connection refused; retrying (while this "
            "lasts, one summary every 60 s)"]

        for _ in range(40):  # past the minute: one summary
            outage.failed("read the node records", "timed out")
            clock.now += 1
        assert len(caplog.records) == 2
        assert caplog.records[1].getMessage() == (
            "svc: still failing for 60 s (61 failed calls, 60 since the last report); last: "
            "cannot read the node records: timed out")

        outage.answered()
        outage.answered()  # no outage, nothing to say
        assert caplog.records[-1].getMessage() == \
            "svc: answering again after 70.0 s and 70 failed calls"
        assert len(caplog.records) == 3 and not outage.ongoing
        assert (outage.failures, outage.total, errors.value) == (0, 70, 70)

        outage.failed("update this node's record", "access denied\n  on\tthree lines")
        assert caplog.records[-1].getMessage().startswith(
            "svc: cannot update this node's record: access denied on three lines; retrying")


def test_a_quoted_error_page_is_cut_short(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage(logging.getLogger("test.outage"), None, "svc")  # no node: no counter
    with caplog.at_level(logging.WARNING, logger="test.outage"):
        outage.failed("read", "<html>\n" + "a" * 5000)
    (record,) = caplog.records
    assert "<html> aaa" in record.getMessage() and len(record.getMessage()) < 400
