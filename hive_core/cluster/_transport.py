"""How node links are opened: TCP (and TLS) between processes.

The cluster only asks a transport to listen, to dial and to close; what a link carries is the
business of the protocol object (:class:`~hive_core.cluster._link.PeerLink`) the cluster hands
over, exactly as with ``loop.create_server`` / ``loop.create_connection``. Tests run many nodes
in one event loop on an in-memory network that implements :class:`NodeTransport` too
(``tests/cluster/_memory_network.py``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Protocol, TypeVar

import anyio

from hive_core.net import TlsAcceptor, dial_tls, listen_error
from hive_ext_api import ClusterNodeAddress

__all__ = ["LinkFactory", "NodeTransport", "NodeUnreachable", "TcpTransport"]

LinkT = TypeVar("LinkT", bound=asyncio.Protocol)
TLS_HANDSHAKE_TIMEOUT = 10.0  # seconds an accepted node link has to finish its TLS handshake
LinkFactory = Callable[[], LinkT]


class NodeUnreachable(Exception):
    """A dial that did not give a link: refused, timed out, no route, TLS handshake failed."""


class NodeTransport(Protocol):
    """What the cluster needs from the network between nodes."""

    async def listen(self, accept: Callable[[], asyncio.Protocol]) -> ClusterNodeAddress:
        """Accept links, one protocol object from ``accept`` each; return the bound address."""
        ...

    async def dial(self, address: ClusterNodeAddress, connect: LinkFactory[LinkT],
                   timeout: float) -> LinkT:
        """Open a link to ``address`` within ``timeout`` seconds, or raise NodeUnreachable.

        The protocol object from ``connect`` is returned with ``connection_made`` called.
        """
        ...

    async def close(self) -> None:
        """Stop accepting links (the links already open are the cluster's to close)."""
        ...

    async def answers(self, address: ClusterNodeAddress) -> bool | None:
        """Whether the node at ``address`` still takes links: True for a live node (that
        closed its link because it thought this one dead), False when its port refuses (the
        process is gone), None when nothing answers in time (out of reach: a split)."""
        ...


# ---------------------------------------------------------------------------------- TCP

PROBE_SETTLE = 0.25
"""Seconds a probe of a node whose link closed keeps its connection: one that is reset or
closed within it was taken by a process on its way out (see port_answers)."""


async def port_answers(address: ClusterNodeAddress) -> bool | None:
    """Whether a node's cluster port still takes connections: True (a live node that closed
    the link, because it thought this one dead, does), False (refused: a crashed process's
    port), None (no answer within a second: out of reach)."""
    try:
        with anyio.fail_after(1.0):
            reader, writer = await asyncio.open_connection(address.host, address.port)
    except TimeoutError:
        return None
    except OSError:
        return False
    # A process being killed closes its sockets one by one: its links may be closed while
    # its listening socket still completes handshakes, and the connection is reset a moment
    # later. A live node keeps a silent connection open for longer than this wait.
    try:
        with anyio.move_on_after(PROBE_SETTLE):
            if await reader.read(1) == b"":
                return False
    except OSError:
        return False
    finally:
        writer.close()
    return True


class TcpTransport:
    """Node links over TCP, with TLS when the cluster settings carry SSL contexts."""

    def __init__(self, bind_host: str, bind_port: int, server_ssl: ssl.SSLContext | None = None,
                 client_ssl: ssl.SSLContext | None = None) -> None:
        self.bind_host = bind_host
        self.bind_port = bind_port
        self.server_ssl = server_ssl
        self.client_ssl = client_ssl
        self._server: asyncio.AbstractServer | None = None
        self._acceptor: TlsAcceptor | None = None

    async def listen(self, accept: Callable[[], asyncio.Protocol]) -> ClusterNodeAddress:
        loop = asyncio.get_running_loop()
        if self.server_ssl is not None:  # TLS by hand, so that a failed handshake is logged
            accept = self._acceptor = TlsAcceptor(accept, self.server_ssl, TLS_HANDSHAKE_TIMEOUT)
        try:
            self._server = await loop.create_server(accept, self.bind_host, self.bind_port,
                                                    reuse_address=True)
        except OSError as exc:
            raise listen_error("<transport><tcp>", self.bind_host, self.bind_port, exc) from exc
        bound = self._server.sockets[0].getsockname()
        return ClusterNodeAddress(str(bound[0]), int(bound[1]))

    async def dial(self, address: ClusterNodeAddress, connect: LinkFactory[LinkT],
                   timeout: float) -> LinkT:
        loop = asyncio.get_running_loop()
        tls = self.client_ssl
        try:
            async with asyncio.timeout(timeout):
                if tls is None:
                    _, link = await loop.create_connection(connect, address.host, address.port)
                else:  # logs a failed handshake, as the accepting side does
                    _, link = await dial_tls(connect, address.host, address.port, tls, timeout)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise NodeUnreachable(f"{address.host}:{address.port}: {exc or 'timed out'}") \
                from exc
        return link

    async def close(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
        if self._server is not None:
            self._server.close()
            self._server = None

    async def answers(self, address: ClusterNodeAddress) -> bool | None:
        return await port_answers(address)
