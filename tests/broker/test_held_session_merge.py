"""A merge that reaches a session while it is being handed over (broker/_custody.py): the
export has gone, and only what is queued here since goes after it (the tail). The dropped
copy's window then goes with the tail as new deliveries, each once by its identity; before,
it went into the window of the copy here, which the handover then forgot (simulation seed 578
with --overlap: 32 messages lost)."""

from __future__ import annotations

import asyncio

from hive_core.broker import Broker, BrokerSettings, SessionRecords
from hive_core.persistence import (
    MemorySessionStore,
    Snapshot,
    StoredInflight,
    StoredMessage,
    StoredSession,
)


def test_a_dropped_copys_window_merged_into_a_session_being_handed_over_goes_with_its_tail(
        ) -> None:
    async def main() -> None:
        broker = Broker(BrokerSettings(), MemorySessionStore())
        broker.start(Snapshot())
        custody = broker.custody
        custody.import_session(SessionRecords(StoredSession("c", 5, 3600)))
        assert custody.export_session("c") is not None  # held until the other node answers

        def sent(pid: int, payload: bytes, serial: int) -> StoredInflight:
            message = StoredMessage("t", payload, 2, origin="n1", serial=serial)
            return StoredInflight("c", pid, "out", "publish", message)

        had = StoredInflight("c", 9, "out", "pubrel",
                             StoredMessage("", b"", 2, origin="n1", serial=3))
        custody.merge_window("c", [sent(7, b"one", 1), sent(8, b"two", 2), had])
        custody.merge_window("c", [sent(7, b"one", 1)])  # the same message again: once
        tail = custody.release_session("c", taken=True)
        assert [(m.payload, mid) for m, mid in tail] == [(b"one", ("n1", 1)),
                                                         (b"two", ("n1", 2))]
        assert "c" not in broker.sessions
        await broker.stop()

    asyncio.run(main())
