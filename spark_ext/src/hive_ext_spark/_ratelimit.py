"""A logger that says the same thing at most once per interval (a full disk says it often)."""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    """``warning(key, ...)`` logs at most once per ``interval_s`` per key, with a count of the
    messages held back since the last one."""

    def __init__(self, log: logging.Logger, interval_s: float = 10.0) -> None:
        self.log = log
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return
        held = self._held.pop(key, 0)
        self._last[key] = now
        if held:
            message += " (%d more like this in the last %.0f s)"
            args = (*args, held, self.interval_s)
        self.log.warning(message, *args)
