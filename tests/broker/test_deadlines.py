"""The connections' deadlines share one loop timer (broker/_deadlines.py): each passes once, in
time order, at most one TICK late; a cancelled or re-armed one does not pass at its old time."""

from __future__ import annotations

import asyncio

from hive_core.broker._deadlines import TICK, Deadlines


class Owner:
    def __init__(self, name: str, passed: list[tuple[str, float]],
                 then: float | None = None, deadlines: Deadlines | None = None) -> None:
        self.name = name
        self.passed = passed
        self.then = then  # arm again for this long when it passes (once)
        self.deadlines = deadlines

    def deadline_passed(self) -> None:
        self.passed.append((self.name, asyncio.get_running_loop().time()))
        if self.then is not None and self.deadlines is not None:
            self.deadlines.arm(self, self.then)
            self.then = None


def test_deadlines_pass_in_order_once_each_and_at_most_a_tick_late() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        passed: list[tuple[str, float]] = []
        start = loop.time()
        late = Owner("late", passed)
        early = Owner("early", passed)
        cancelled = Owner("cancelled", passed)
        again = Owner("again", passed, then=0.8, deadlines=deadlines)
        deadlines.arm(late, 0.6)
        deadlines.arm(early, 0.1)
        bucket = deadlines.arm(cancelled, 0.2)
        deadlines.arm(again, 0.15)
        Deadlines.cancel(cancelled, bucket)
        assert len(deadlines) == 3
        await asyncio.sleep(0.15 + TICK + 0.8 + 2 * TICK)
        names = [name for name, _ in passed]
        assert names == ["early", "again", "late", "again"]
        due = {"early": 0.1, "late": 0.6}
        for name, at in passed:
            if name in due:
                assert due[name] - 0.02 <= at - start <= due[name] + TICK + 0.1, (name, at - start)
        first, second = [at for name, at in passed if name == "again"]
        assert second - first >= 0.8 - 0.02
        assert len(deadlines) == 0
        deadlines.close()

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_failing_owner_does_not_stop_the_others() -> None:
    class Failing:
        def deadline_passed(self) -> None:
            raise RuntimeError("boom")

    async def scenario() -> None:
        deadlines = Deadlines()
        passed: list[tuple[str, float]] = []
        deadlines.arm(Failing(), 0.05)
        deadlines.arm(Owner("fine", passed), 0.05)
        await asyncio.sleep(0.05 + 2 * TICK)
        assert [name for name, _ in passed] == ["fine"]
        deadlines.close()

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_closed_nothing_passes() -> None:
    async def scenario() -> None:
        deadlines = Deadlines()
        passed: list[tuple[str, float]] = []
        deadlines.arm(Owner("never", passed), 0.05)
        deadlines.close()
        await asyncio.sleep(0.05 + 2 * TICK)
        assert passed == []

    asyncio.run(asyncio.wait_for(scenario(), 10))
