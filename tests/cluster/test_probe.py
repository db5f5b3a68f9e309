"""The probe a node makes before it takes over a peer whose link closed: does its cluster port
still answer? A process being killed -9 closes its links before its listening socket, so a
probe in between connects, and is reset a moment later: that is no answer."""

from __future__ import annotations

import asyncio
import socket

from hive_core.cluster._transport import PROBE_SETTLE, port_answers
from hive_core.testing import free_port
from hive_ext_api import ClusterNodeAddress


def test_a_live_port_answers() -> None:
    async def scenario() -> bool:
        held: list[asyncio.StreamWriter] = []

        async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)  # silent, as a node is to a connection that sends no HELLO

        server = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await port_answers(ClusterNodeAddress("127.0.0.1", port))
        finally:
            for writer in held:
                writer.close()
            server.close()

    assert asyncio.run(scenario()) is True


def test_a_closed_port_does_not_answer() -> None:
    assert asyncio.run(port_answers(ClusterNodeAddress("127.0.0.1", free_port()))) is False


def test_a_listening_socket_closed_with_the_probe_in_its_backlog_does_not_answer() -> None:
    """The kill -9 race: the handshake completes in the kernel, the process never accepts,
    its listening socket closes and the connection is reset."""
    async def scenario() -> bool:
        dying = socket.socket()
        dying.bind(("127.0.0.1", 0))
        dying.listen(8)
        port = dying.getsockname()[1]
        asyncio.get_running_loop().call_later(PROBE_SETTLE / 5, dying.close)
        return await port_answers(ClusterNodeAddress("127.0.0.1", port))

    assert asyncio.run(scenario()) is False


def test_a_port_that_closes_the_connection_at_once_does_not_answer() -> None:
    async def scenario() -> bool:
        async def close(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(close, "127.0.0.1", 0)
        try:
            return await port_answers(
                ClusterNodeAddress("127.0.0.1", server.sockets[0].getsockname()[1]))
        finally:
            server.close()

    assert asyncio.run(scenario()) is False
