"""Extension services across the cluster: the clients connected on every node, and
disconnecting a client wherever it is connected (HiveMQ's services work "clustered and single").

A question goes to each member as a frame and its answer comes back on the same link:
CLIENTS_ASK / CLIENTS (every client connected on the receiver), DISCONNECT_ASK / DISCONNECTED
(close that client's connection if it is connected there). A node of an earlier build skips
frame kinds it does not know, so its answer never comes: each question waits ``ANSWER_TIMEOUT``
at most, and what a node did not answer is logged (its clients are missing from the list).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from hive_core.cluster._wire import FrameKind
from hive_ext_api import ClientInfo

__all__ = ["ANSWER_TIMEOUT", "SERVICE_FRAMES", "ClusterClients"]

log = logging.getLogger("hive.cluster")

ANSWER_TIMEOUT = 3.0
"""Seconds to wait for the members' answers (an extension hook gets 5)."""

SERVICE_FRAMES = frozenset({FrameKind.CLIENTS_ASK, FrameKind.CLIENTS, FrameKind.DISCONNECT_ASK,
                            FrameKind.DISCONNECTED})


class _Link(Protocol):
    def send(self, kind: FrameKind, body: Any = None) -> None: ...


class _Member(Protocol):
    node_id: str

    @property
    def link(self) -> _Link: ...


class ClusterClients:
    """This node's side of the questions: it answers its peers and asks them."""

    def __init__(self, node_id: str, local_clients: Callable[[], list[ClientInfo]],
                 local_disconnect: Callable[[str, int], bool],
                 members: Callable[[], Mapping[str, _Member]],
                 owner_of: Callable[[str], str | None]) -> None:
        self.node_id = node_id
        self._local_clients = local_clients
        self._local_disconnect = local_disconnect
        self._members = members  # the cluster's members now, by node id
        self._owner_of = owner_of  # the node holding a client's session, as far as known
        self._requests = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}

    # ------------------------------------------------------------------ answering

    def on_frame(self, member: _Member, kind: FrameKind, body: Any) -> None:
        if kind is FrameKind.CLIENTS_ASK:
            member.link.send(FrameKind.CLIENTS, [body, [_row(c) for c in self._local_clients()]])
        elif kind is FrameKind.DISCONNECT_ASK:
            request, client_id, reason = body
            done = self._local_disconnect(str(client_id), int(reason))
            member.link.send(FrameKind.DISCONNECTED, [request, done])
        else:  # CLIENTS, DISCONNECTED: an answer
            future = self._waiting.pop(int(body[0]), None)
            if future is not None and not future.done():
                future.set_result(body[1])

    # ------------------------------------------------------------------ asking

    async def _ask(self, member: _Member, kind: FrameKind, *body: Any) -> Any:
        """The member's answer, or raise TimeoutError after ANSWER_TIMEOUT."""
        request = next(self._requests)
        future = asyncio.get_running_loop().create_future()
        self._waiting[request] = future
        try:
            member.link.send(kind, [request, *body] if body else request)
            return await asyncio.wait_for(future, ANSWER_TIMEOUT)
        finally:
            self._waiting.pop(request, None)

    async def clients(self) -> list[ClientInfo]:
        """Every client connected in the cluster, each with the node it is connected to."""
        found = [dataclasses.replace(c, node=self.node_id) for c in self._local_clients()]
        peers = list(self._members().values())
        answers = await asyncio.gather(*(self._ask(m, FrameKind.CLIENTS_ASK) for m in peers),
                                       return_exceptions=True)
        silent = []
        for member, answer in zip(peers, answers, strict=True):
            if isinstance(answer, BaseException):
                silent.append(member.node_id)
                continue
            found += [_client(row, member.node_id) for row in answer]
        if silent:
            log.warning("extension services: no list of clients from node(s) %s within %g s "
                        "(an earlier build, or busy): their clients are not listed",
                        ", ".join(sorted(silent)), ANSWER_TIMEOUT)
        found.sort(key=lambda c: (c.client_id, c.node))
        return found

    async def disconnect(self, client_id: str, reason_code: int) -> str | None:
        """Close the connection of ``client_id`` wherever it is: the node it was connected
        to, or None when no node had it connected. The node holding its session (as far as
        this node knows) is asked first, then every other member."""
        if self._local_disconnect(client_id, reason_code):
            return self.node_id
        owner = self._owner_of(client_id)
        order = sorted(self._members().values(), key=lambda m: (m.node_id != owner, m.node_id))
        for member in order:
            try:
                if await self._ask(member, FrameKind.DISCONNECT_ASK, client_id, reason_code):
                    return member.node_id
            except TimeoutError:
                log.warning("extension services: node %s did not answer whether it disconnected "
                            "%r within %g s", member.node_id, client_id, ANSWER_TIMEOUT)
        return None


def _row(client: ClientInfo) -> list[Any]:
    address = client.remote_address
    return [client.client_id, client.protocol_version, client.username, client.listener,
            address[0] if address else None, address[1] if address else None]


def _client(row: list[Any], node: str) -> ClientInfo:
    client_id, protocol, username, listener, host, port = row[:6]
    return ClientInfo(str(client_id), int(protocol), username, str(listener),
                      (str(host), int(port)) if host is not None else None, node=node)
