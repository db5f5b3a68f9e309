"""Which clients acknowledge their deliveries in time for a delivery hold.

Two holds keep a QoS 1 delivery's rows back for a moment, in case its PUBACK comes first and
nothing need be written: the file store's (``<delivery-hold>``, ``_file_store.py``) and the
replication's (``hive_core/cluster/_replication_hold.py``). Both hold only for a client that is
being sent to, and both pause a client whose held delivery ran out of time: nothing is held for
it for ``HOLD_PAUSE``, so a subscriber slower than the hold costs its publishers' acknowledgements
one hold, not one per message.
"""

from __future__ import annotations

HOLD_PAUSE = 1.0
"""Seconds a client whose held delivery ran out of time gets nothing held."""


class Acknowledging:
    """Per client, when a delivery was last sent to it or acknowledged by it, and until when
    it is paused. Times are ``time.monotonic()``, passed in (the callers have read it)."""

    __slots__ = ("_paused", "_sending")

    def __init__(self) -> None:
        self._sending: dict[str, float] = {}
        self._paused: dict[str, float] = {}

    def __len__(self) -> int:
        """Clients known here (sent to, or paused)."""
        return len(self._sending.keys() | self._paused.keys())

    def last_sent(self, client_id: str) -> float | None:
        """When a delivery last went to ``client_id`` (or it acknowledged one); None when it is
        paused or was never sent to."""
        return self._sending.get(client_id)

    def sent(self, client_id: str, now: float) -> bool:
        """A delivery is being sent to ``client_id``: False while it is paused."""
        paused = self._paused.get(client_id)
        if paused is not None:
            if now < paused:
                return False
            del self._paused[client_id]
        self._sending[client_id] = now
        return True

    def acknowledged(self, client_id: str, now: float) -> None:
        """A held delivery of ``client_id`` was acknowledged: it is acknowledging, unless it
        is paused."""
        if client_id not in self._paused:
            self._sending[client_id] = now

    def late(self, client_id: str, now: float) -> bool:
        """A held delivery of ``client_id`` ran out of time: paused for ``HOLD_PAUSE`` (True),
        unless it was not counted as acknowledging (paused already)."""
        if self._sending.pop(client_id, None) is None:
            return False
        self._paused[client_id] = now + HOLD_PAUSE
        return True

    def forget(self, client_id: str) -> None:
        """Its session is gone."""
        self._sending.pop(client_id, None)
        self._paused.pop(client_id, None)
