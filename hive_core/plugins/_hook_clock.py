"""Time spent in extension hooks: one clock per hook and extension, read at scrape time.

A clock is plain ints, updated on the hook's own path; ``/metrics`` turns it into the histogram
``hive_extension_hook_seconds``. The hooks that run for every message (inbound and outbound
publish interceptors, publish authorizers, when they are plain functions) are timed on one call
in :data:`SAMPLE_EVERY` and counted on every call: timing each call (two clock reads and a
bucket) cost about 180 ns, where Hive spends about 3 us on a message at QoS 0 with a no-op
interceptor. Every other hook is timed on each call.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

BUCKETS_SECONDS = (0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001,
                   0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   0.5, 1.0, 2.5, 5.0)
"""Upper bounds: a plain in-process hook takes microseconds, one that asks another service
milliseconds to seconds, and 5 s is the default deadline."""

_BOUNDS_NS = tuple(round(bound * 1e9) for bound in BUCKETS_SECONDS)

SAMPLE_EVERY = 64
"""The per-message hooks are timed on calls 1, 65, 129, ...: the count and the countdown cost
about 25 ns a message with a no-op interceptor (timing one call in 16 cost about 60 ns)."""

PER_MESSAGE_HOOKS = frozenset({"hive_intercept_publish_inbound",
                               "hive_intercept_publish_outbound", "hive_authorize_publish"})


class HookClock:
    """Calls of one extension's implementation of one hook, and the time of those timed.

    A countdown picks the calls to time (cheaper per call than a counter and a mask test);
    the count of calls follows from it.
    """

    __slots__ = ("awaits", "buckets", "countdown", "every", "extension", "hook", "rounds",
                 "timed", "total_ns")

    def __init__(self, hook: str, extension: str) -> None:
        self.hook = hook
        self.extension = extension
        self.every = 1  # time one call in this many
        self.countdown = 1  # calls until the next timed one (this one, when it reaches 0)
        self.rounds = 0  # times the countdown ran out
        self.timed = 0
        self.total_ns = 0
        self.buckets = [0] * (len(_BOUNDS_NS) + 1)  # not cumulative; the last one is +Inf
        self.awaits = False  # an async implementation: timed where its answer is awaited

    def setup(self, awaits: bool) -> None:
        calls = self.calls
        self.awaits = awaits
        self.every = SAMPLE_EVERY if self.hook in PER_MESSAGE_HOOKS and not awaits else 1
        self.rounds, self.countdown = calls, 1  # the same count, from here on every=1 terms
        if self.every > 1 and calls:
            self.rounds, left = divmod(calls, self.every)
            self.countdown = 1
            if left:
                self.rounds += 1
                self.countdown = self.every - left + 1

    @property
    def calls(self) -> int:
        return self.rounds * self.every - self.countdown + 1

    def record(self, elapsed_ns: int) -> None:
        self.timed += 1
        self.total_ns += elapsed_ns
        self.buckets[bisect_left(_BOUNDS_NS, elapsed_ns)] += 1

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, counted, and timed when this call's turn has come."""
        if self.awaits:  # timed while awaited (Extensions._awaited)
            self.rounds += 1
            return function(*args)
        self.countdown -= 1
        if self.countdown:
            return function(*args)
        return self.timed_call(function, *args)

    def timed_call(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, timed: for a caller whose countdown just ran out."""
        self.countdown = self.every
        self.rounds += 1
        start = perf_counter_ns()
        try:
            return function(*args)
        finally:
            self.record(perf_counter_ns() - start)

    def reading(self) -> HookTime:
        return HookTime(self.hook, self.extension, self.calls, self.timed, self.total_ns,
                        tuple(self.buckets))


@dataclass(frozen=True, slots=True)
class HookTime:
    """A clock read at one moment; sampled clocks are scaled up to every call."""

    hook: str
    extension: str
    calls: int
    timed: int
    total_ns: int
    buckets: tuple[int, ...]

    def seconds(self) -> float:
        """Estimated time of all calls (exact when every call was timed)."""
        if not self.timed:
            return 0.0
        return self.total_ns * self.calls / self.timed / 1e9

    def cumulative(self) -> list[tuple[float, int]]:
        """The histogram's buckets (bound, calls at most that long); +Inf is every call."""
        scale = self.calls / self.timed if self.timed else 0.0
        found, running = [], 0
        for bound, count in zip(BUCKETS_SECONDS, self.buckets, strict=False):
            running += count
            found.append((bound, min(round(running * scale), self.calls)))
        found.append((float("inf"), self.calls))
        return found
