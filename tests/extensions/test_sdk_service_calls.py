"""hive_ext_api's OutageLog and ServiceCalls (API 1.2): every failure counted, logged once as an
outage begins, then once a minute while it lasts (a fake clock stands in for the minutes), and
once when it ends; blocking calls bounded in time, never on the event loop's thread."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from dataclasses import dataclass

import pytest

from hive_ext_api import CallFailed, OutageLog, ServiceCalls


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
    outage = OutageLog(logging.getLogger("test.outage"), "svc", errors, 60.0, clock)
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
    outage = OutageLog(logging.getLogger("test.outage"), "svc")  # no node: no counter
    with caplog.at_level(logging.WARNING, logger="test.outage"):
        outage.failed("read", "<html>\n" + "a" * 5000)
    (record,) = caplog.records
    assert "<html> aaa" in record.getMessage() and len(record.getMessage()) < 400


class Unavailable(Exception):
    """What a client wrapper raises when the service said no, in the service's own terms."""


def test_calls_run_off_the_loop_in_order_and_failures_are_told_apart(
        caplog: pytest.LogCaptureFixture) -> None:
    errors = Count()
    calls = ServiceCalls(OutageLog(logging.getLogger("test.calls"), "svc", errors),
                         expected=(Unavailable,), budget_s=2.0)
    ran: list[tuple[str, str]] = []

    def call(name: str, raises: Exception | None = None) -> str:
        ran.append((name, threading.current_thread().name))
        if raises is not None:
            raise raises
        return name

    async def scenario() -> None:
        loop_thread = threading.current_thread().name
        assert await calls.run("first", lambda: call("a")) == "a"
        with pytest.raises(CallFailed):
            await calls.run("read the catalog", lambda: call("b", Unavailable("access denied")))
        with pytest.raises(CallFailed):
            await calls.run("read the catalog", lambda: call("c", KeyError("Name")))
        assert await calls.run("again", lambda: call("d")) == "d"
        assert [name for name, _ in ran] == ["a", "b", "c", "d"]
        assert all(thread != loop_thread and thread.startswith("svc") for _, thread in ran)

    with caplog.at_level(logging.DEBUG, logger="test.calls"):
        asyncio.run(scenario())
    calls.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0] == ("svc: cannot read the catalog: access denied; retrying (while this "
                           "lasts, one summary every 60 s)")
    assert re.fullmatch(r"svc: answering again after \d+\.\d s and 2 failed calls", warnings[1])
    assert errors.value == 2
    # the surprise is not the node's problem: its traceback goes to DEBUG only
    surprise = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(surprise) == 1 and surprise[0].exc_info is not None
    assert "KeyError" in caplog.text


def test_a_hung_call_fails_after_the_budget_and_the_loop_never_waited_longer() -> None:
    errors = Count()
    calls = ServiceCalls(OutageLog(logging.getLogger("test.calls"), "svc", errors),
                         budget_s=0.3)
    release = threading.Event()
    later_ran = threading.Event()

    async def scenario() -> float:
        begun = time.monotonic()
        hung = asyncio.ensure_future(calls.run("hang", lambda: release.wait(10)))
        queued = asyncio.ensure_future(calls.run("behind it", later_ran.set))
        ticks = 0
        while not hung.done():  # the loop keeps running meanwhile
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks > 10
        for task in (hung, queued):
            with pytest.raises(CallFailed):
                await task
        return time.monotonic() - begun

    took = asyncio.run(scenario())
    release.set()
    calls.close()
    assert took < 1.5
    assert errors.value == 2
    assert not later_ran.wait(0.3)  # a call given up on while queued never runs
