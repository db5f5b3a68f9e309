"""HiveMQ's "still ongoing" lines: a synchronisation that lasts says so at every interval.

Join, merge and replication log their start and their end (the seeds' synchronisation table);
in between, while one lasts, its line below comes every ``interval`` seconds, so an operator
watching a long one knows the node is at it and must not be stopped. The seeds give the lines,
not the interval: 10 s here, ``HIVE_SYNC_PROGRESS_INTERVAL`` (seconds) to change it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable

__all__ = ["DEFAULT_INTERVAL", "INTERVAL_ENV", "JOIN", "MERGE", "REPLICATION",
           "progress_interval", "still_ongoing", "while_true"]

log = logging.getLogger("hive.cluster")

JOIN = "Cluster join process is still ongoing. Please do not shut down Hive."
MERGE = "Cluster merge process is still ongoing. Please do not shut down Hive."
REPLICATION = "Replication is still in progress. Please do not shut down Hive."
DEFAULT_INTERVAL = 10.0
INTERVAL_ENV = "HIVE_SYNC_PROGRESS_INTERVAL"


def progress_interval(environ: dict[str, str] | None = None) -> float:
    """The interval: ``HIVE_SYNC_PROGRESS_INTERVAL`` seconds when set, else 10.

    Raises ValueError naming the variable for a value that is not a positive number."""
    value = (os.environ if environ is None else environ).get(INTERVAL_ENV, "").strip()
    if not value:
        return DEFAULT_INTERVAL
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise ValueError(f"{INTERVAL_ENV}={value!r}: expected seconds, more than 0")
    return seconds


@contextlib.asynccontextmanager
async def still_ongoing(line: str, interval: float) -> AsyncIterator[None]:
    """Log ``line`` every ``interval`` seconds until the block ends."""
    done = False
    while_true(lambda: not done, line, interval)
    try:
        yield
    finally:
        done = True


def while_true(ongoing: Callable[[], bool], line: str, interval: float) -> None:
    """Log ``line`` every ``interval`` seconds for as long as ``ongoing()`` says so.

    A timer on the running loop, not a task: it is started from a link's frame callback, where
    anyio cannot start a task, and it ends itself at the first tick that finds it over."""
    loop = asyncio.get_running_loop()

    def tick() -> None:
        if ongoing():
            log.info("%s", line)
            loop.call_later(interval, tick)

    loop.call_later(interval, tick)
