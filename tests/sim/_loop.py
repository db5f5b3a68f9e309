"""An event loop on a simulated clock, where nodes can be frozen and killed.

The loop never waits: when nothing is ready it moves its clock to the next timer. Every callback
is scheduled in a context that names the node it belongs to (:data:`NODE`); a callback of a
frozen node is held until the node thaws (as a SIGSTOPped process runs nothing, and finds its
timers all due when it wakes), and a callback of a killed node never runs. ``time.time``,
``time.time_ns`` and ``time.monotonic`` read the simulated clock while a run is on, so the
broker's and the cluster's own clock reads agree with the loop.

Given the same seed and schedule, a run does the same things in the same order: there is no
thread and no socket, and every random choice comes from the run's seeded generator.
"""

from __future__ import annotations

import asyncio
import contextvars
import selectors
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

EPOCH = 1_800_000_000.0
"""The Unix time the simulated clock starts at."""


class Incarnation:
    """One run of a node's process: what its callbacks belong to."""

    __slots__ = ("dead", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.dead = False

    def __repr__(self) -> str:
        return f"<{self.name}{' (dead)' if self.dead else ''}>"


NODE: contextvars.ContextVar[Incarnation | None] = contextvars.ContextVar("sim_node", default=None)


class Idle(Exception):
    """Nothing is scheduled and nothing can happen: the run would wait forever."""


class _Selector(selectors.BaseSelector):
    """No file descriptor is ever ready: a select is a jump of the clock."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop
        self._keys: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = self._keys[fd] = selectors.SelectorKey(fileobj, fd, events, data)
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Idle("nothing scheduled")
        if timeout > 0:
            self._loop.now += timeout
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys

    def close(self) -> None:
        self._keys.clear()


class SimLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        self.frozen: dict[Incarnation, float] = {}  # node -> until when
        self._held: dict[Incarnation, list[tuple[Callable[..., Any], tuple[Any, ...],
                                                 contextvars.Context]]] = {}
        super().__init__(_Selector(self))
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self.now

    # -- scheduling through the node's state -----------------------------------------------

    def call_soon(self, callback: Callable[..., Any], *args: Any,  # type: ignore[override]
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        context = context if context is not None else contextvars.copy_context()
        node = context.get(NODE)
        if node is None:
            return super().call_soon(callback, *args, context=context)
        handle: list[asyncio.Handle] = []
        guarded = self._guard(node, callback, handle, context)
        handle.append(super().call_soon(guarded, *args, context=context))
        return handle[0]

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any,  # type: ignore[override]
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        context = context if context is not None else contextvars.copy_context()
        node = context.get(NODE)
        if node is None:
            return super().call_at(when, callback, *args, context=context)
        handle: list[asyncio.Handle] = []
        guarded = self._guard(node, callback, handle, context)
        timer = super().call_at(when, guarded, *args, context=context)
        handle.append(timer)
        return timer

    def _guard(self, node: Incarnation, callback: Callable[..., Any],
               handle: list[asyncio.Handle],
               context: contextvars.Context) -> Callable[..., Any]:
        def run(*args: Any) -> None:
            if node.dead or (handle and handle[0].cancelled()):
                return  # a held callback cancelled before the thaw, or a dead node's
            if node in self.frozen:
                self._held.setdefault(node, []).append((run, args, context))
                return
            callback(*args)
        return run

    def freeze(self, node: Incarnation, seconds: float) -> None:
        self.frozen[node] = self.now + seconds
        super().call_at(self.now + seconds, self._thaw, node)

    def _thaw(self, node: Incarnation) -> None:
        if self.frozen.get(node, 0.0) > self.now:
            return
        self.frozen.pop(node, None)
        for run, args, context in self._held.pop(node, []):
            super().call_soon(run, *args, context=context)

    def in_node(self, node: Incarnation) -> contextvars.Context:
        """A context whose callbacks belong to ``node``."""
        context = contextvars.Context()
        context.run(NODE.set, node)
        return context


@contextmanager
def simulated_time(loop: SimLoop) -> Iterator[None]:
    """``time.time``, ``time.time_ns`` and ``time.monotonic`` read ``loop``'s clock."""
    saved = time.time, time.time_ns, time.monotonic, time.monotonic_ns
    time.time = lambda: EPOCH + loop.now  # type: ignore[assignment]
    time.time_ns = lambda: int(EPOCH) * 10**9 + int(loop.now * 1e9)  # type: ignore[assignment]
    time.monotonic = lambda: loop.now  # type: ignore[assignment]
    time.monotonic_ns = lambda: int(loop.now * 1e9)  # type: ignore[assignment]
    try:
        yield
    finally:
        time.time, time.time_ns, time.monotonic, time.monotonic_ns = saved  # type: ignore[assignment]
