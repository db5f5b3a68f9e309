"""Questions about clients to the node that holds their sessions (the control center's rows).

A node knows which member holds each client's session (the owner directory) but not the
session itself. The control center asks the owner over the node link: CLIENT_QUERY [token,
client ids] is answered by CLIENT_ANSWER [token, JSON of {client id: details or null}]. A peer
of an older Hive skips the unknown frame (see :class:`FrameDecoder`), and the question times
out: the control center then shows what it knew before, the owner only.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hive_core.cluster._wire import FrameKind

if TYPE_CHECKING:
    from hive_core.cluster._link import PeerLink

__all__ = ["ClientQueries"]

log = logging.getLogger("hive.cluster")

MAX_IDS = 200  # client ids in one question (the control center lists at most 100)

Details = Callable[[str], "dict[str, Any] | None"]


class ClientQueries:
    """This node's questions in flight, and its answers to the peers' questions."""

    def __init__(self) -> None:
        # What this node answers: the details of one of its sessions, or None. The node sets
        # it (the admin layer's view); until then every answer is "not here".
        self.details: Details = lambda client_id: None
        self._tokens = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}

    async def ask(self, link: PeerLink, client_ids: list[str],
                  timeout: float) -> dict[str, dict[str, Any] | None]:
        """The details of ``client_ids`` as the peer behind ``link`` holds them; an empty
        answer when it does not answer within ``timeout`` seconds."""
        token = next(self._tokens)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[token] = answer
        try:
            link.send(FrameKind.CLIENT_QUERY, [token, client_ids[:MAX_IDS]])
            return await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            return {}
        finally:
            self._waiting.pop(token, None)

    def on_frame(self, link: PeerLink, kind: FrameKind, body: Any) -> None:
        """A CLIENT_QUERY to answer, or a CLIENT_ANSWER to one of this node's questions."""
        try:
            token = int(body[0])
            if kind is FrameKind.CLIENT_QUERY:
                ids = [str(client_id) for client_id in body[1]][:MAX_IDS]
                found = {client_id: self.details(client_id) for client_id in ids}
                link.send(FrameKind.CLIENT_ANSWER, [token, json.dumps(found)])
                return
            waiting = self._waiting.get(token)
            if waiting is not None and not waiting.done():
                answer = json.loads(str(body[1]))
                waiting.set_result(answer if isinstance(answer, dict) else {})
        except (TypeError, ValueError, IndexError) as exc:
            log.warning("a malformed %s from node %s: %s", kind.name, link.peer_id, exc)
