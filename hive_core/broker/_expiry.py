"""Time-driven ends of a session: its expiry after the client left, and a delayed will.

:class:`SessionClock` owns the timers (one per session for each); the broker says what happens
when one fires. A will is published at most once: when its delay runs out, or at once when the
session ends before that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hive_core.broker._session import Session
from hive_core.mqtt import PropertyId


class SessionClock:
    def __init__(self, expired: Callable[[Session], None],
                 will_due: Callable[[Session], None]) -> None:
        self._expired = expired
        self._will_due = will_due
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._wills: dict[str, asyncio.TimerHandle] = {}

    def expire_after(self, session: Session, delay: float) -> None:
        """Start the countdown of a session whose client is gone."""
        self._cancel(self._expiry, session.client_id)
        self._expiry[session.client_id] = asyncio.get_running_loop().call_later(
            max(0.0, delay), self._fire_expiry, session)

    def _fire_expiry(self, session: Session) -> None:
        self._expiry.pop(session.client_id, None)
        self._expired(session)

    def will_delay(self, session: Session) -> float:
        """Seconds until the session's will goes out (never after the session expires)."""
        will = session.will
        assert will is not None
        delay = will.properties.get(PropertyId.WILL_DELAY_INTERVAL, 0) if will.properties else 0
        return min(delay, session.expiry_interval)

    def will_after(self, session: Session, delay: float) -> None:
        self._cancel(self._wills, session.client_id)
        self._wills[session.client_id] = asyncio.get_running_loop().call_later(
            delay, self._fire_will, session)

    def _fire_will(self, session: Session) -> None:
        self._wills.pop(session.client_id, None)
        self._will_due(session)

    def will_pending(self, client_id: str) -> bool:
        return client_id in self._wills

    def cancel_will(self, client_id: str) -> bool:
        """The client came back (here or elsewhere): its will is not published. True if one was
        pending."""
        return self._cancel(self._wills, client_id)

    def cancel_expiry(self, client_id: str) -> None:
        self._cancel(self._expiry, client_id)

    def stop(self) -> None:
        for handles in (self._expiry, self._wills):
            for handle in handles.values():
                handle.cancel()
            handles.clear()

    @staticmethod
    def _cancel(handles: dict[str, asyncio.TimerHandle], client_id: str) -> bool:
        handle = handles.pop(client_id, None)
        if handle is None:
            return False
        handle.cancel()
        return True
