"""Whether work grows in step with its size, not with its square: for the tests of code that
once went quadratic. They compare the same work at two sizes on the same machine in the same
moment, so a slow or busy machine does not fail them (an absolute bound did)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

SIZES = 4
"""The larger run is this many times the smaller one: linear work takes about 4 times as long,
quadratic about 16 times."""

LINEAR_AT_MOST = 10.0
"""The ratio below which growth counts as linear: measured 5.2 to 5.8 here for linear work
(memory grows too), 16 to 20 for quadratic."""


def growth(timed: Callable[[int], float], n: int, best_of: int = 3) -> float:
    """How many times longer ``SIZES * n`` steps take than ``n``, the best of ``best_of`` runs
    of each (load slows a run down, never speeds one up). ``timed(n)`` runs the work on a
    fresh state and returns the seconds of the part measured."""
    small = min(timed(n) for _ in range(best_of))
    large = min(timed(SIZES * n) for _ in range(best_of))
    return large / max(small, 1e-6)


async def growth_async(timed: Callable[[int], Awaitable[float]], n: int,
                       best_of: int = 3) -> float:
    """:func:`growth` for work that awaits."""
    small = min([await timed(n) for _ in range(best_of)])
    large = min([await timed(SIZES * n) for _ in range(best_of)])
    return large / max(small, 1e-6)
