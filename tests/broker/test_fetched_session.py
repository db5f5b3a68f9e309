"""A session fetched from another node for a CONNECT (broker/_custody.py): confirmed once
stored here; declined when a merge gave it up while it was being stored, so that the node that
handed it over keeps it and the client, refused (0x88), resumes it there. Confirmed instead,
that node would forget it too and the client's next CONNECT would find no session anywhere
(simulation seeds 228 and 249 with --overlap: 146 and 127 messages lost)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hive_core.broker import Broker, BrokerSettings, SessionRecords, SessionUnavailable
from hive_core.persistence import MemorySessionStore, Snapshot, StoredSession


class Fetched:
    def __init__(self, client_id: str) -> None:
        self.records = SessionRecords(StoredSession(client_id, 5, 3600))
        self.answer = ""

    def confirm(self) -> None:
        self.answer = "confirmed"

    def decline(self) -> None:
        self.answer = "declined"


class OneFetch:
    """The broker's cluster port, as far as a CONNECT's fetch goes."""

    has_peers = True

    def __init__(self, fetched: Fetched) -> None:
        self.fetched = fetched

    async def fetch_session(self, client_id: str) -> Fetched:
        return self.fetched

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # what the broker tells the cluster meanwhile


@pytest.mark.parametrize("given_up", [False, True])
def test_a_fetched_session_is_confirmed_once_stored_and_declined_if_a_merge_gave_it_up(
        given_up: bool) -> None:
    async def main() -> None:
        broker = Broker(BrokerSettings(), MemorySessionStore())
        broker.start(Snapshot())
        fetched = Fetched("c")
        broker.cluster = OneFetch(fetched)  # type: ignore[assignment]
        commit = broker.records.commit

        async def commit_meanwhile() -> None:
            session = broker.sessions.get("c")
            if given_up and session is not None:  # a merge drops this copy while it is written
                broker.end_session(session, deleted=False)
            await commit()

        broker.records.commit = commit_meanwhile  # type: ignore[method-assign]
        if given_up:
            with pytest.raises(SessionUnavailable):
                await broker.custody.fetch_session_elsewhere("c")
            assert fetched.answer == "declined"
        else:
            await broker.custody.fetch_session_elsewhere("c")
            assert fetched.answer == "confirmed" and "c" in broker.sessions
        await broker.stop()

    asyncio.run(main())
