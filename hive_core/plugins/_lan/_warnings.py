"""Warnings that repeat (a down interface fails every announcement) logged once per period."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["WarningGate"]


class WarningGate:
    """Logs a warning of one kind at most once per ``period`` seconds, counting the rest.

    Every call counts in ``counter`` (the node's metric), logged or not; the next warning of
    that kind that is logged says how many were held back since the last one.
    """

    def __init__(self, log: logging.Logger, period: float = 60.0,
                 counter: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 level: int = logging.WARNING) -> None:
        self.log = log
        self.level = level
        self.period = period
        self.counter = counter
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, kind: str, message: str, *args: object) -> bool:
        """Count one problem of ``kind``; log it unless one was logged within the period.

        Returns whether it was logged.
        """
        if self.counter is not None:
            self.counter()
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.period:
            self._held[kind] = self._held.get(kind, 0) + 1
            return False
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        if held:
            message += " (%d more like it since the last warning)"
            args = (*args, held)
        self.log.log(self.level, message, *args)
        return True

    def clear(self, kind: str) -> None:
        """The problem of ``kind`` is over: its next occurrence is warned about at once."""
        self._last.pop(kind, None)
        self._held.pop(kind, None)
