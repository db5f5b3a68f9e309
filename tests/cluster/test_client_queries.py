"""The control center's questions to the node that holds a session (CLIENT_QUERY/ANSWER)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hive_core.cluster._client_queries import ClientQueries
from hive_core.cluster._wire import FrameDecoder, FrameKind, encode_frame


class Wire:
    """One end of a link: frames go through the real encoder and decoder to ``peer``."""

    def __init__(self, peer_id: str) -> None:
        self.peer_id = peer_id
        self.peer: tuple[Wire, ClientQueries] | None = None
        self.decoder = FrameDecoder()

    def send(self, kind: FrameKind, body: Any = None) -> None:
        if self.peer is None:
            return  # an older peer: the frame is skipped, nothing answers
        wire, queries = self.peer
        for got_kind, got_body in wire.decoder.feed(encode_frame(kind, body)):
            asyncio.get_running_loop().call_soon(queries.on_frame, wire, got_kind, got_body)


def test_the_owner_answers_with_its_sessions_and_none_for_others() -> None:
    async def scenario() -> None:
        asking, owning = ClientQueries(), ClientQueries()
        owning.details = lambda client_id: (
            {"client_id": client_id, "connected": True, "subscription_list": [
                {"topic_filter": "a/#", "qos": 1}]} if client_id == "here" else None)
        to_owner, to_asker = Wire("owner"), Wire("asker")
        to_owner.peer, to_asker.peer = (to_asker, owning), (to_owner, asking)
        answer = await asking.ask(to_owner, ["here", "gone"], timeout=2)
        assert answer == {"here": {"client_id": "here", "connected": True, "subscription_list": [
            {"topic_filter": "a/#", "qos": 1}]}, "gone": None}

    asyncio.run(scenario())


def test_a_peer_that_does_not_answer_gives_an_empty_answer_in_time() -> None:
    async def scenario() -> None:
        asking = ClientQueries()
        begun = time.monotonic()
        assert await asking.ask(Wire("old-peer"), ["x"], timeout=0.3) == {}
        assert time.monotonic() - begun < 1.5
        assert not asking._waiting

    asyncio.run(scenario())


def test_an_older_node_skips_the_unknown_frames() -> None:
    frame = encode_frame(FrameKind.CLIENT_QUERY, [1, ["x"]])
    old = bytearray(frame)
    old[4] = 250  # a kind this decoder does not know: what an older node sees
    assert FrameDecoder().feed(bytes(old)) == []
