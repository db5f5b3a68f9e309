"""The TCP health check: one plain TCP connection held open to every peer.

A node that dies takes its connections with it (its kernel closes them), so a peer notices at
once instead of after the heartbeat timeout; a node that leaves closes them on purpose. This
matters most over UDP, where the node links have no connection to lose. Nothing is said on a
health connection beyond one greeting line: that it stays open is the whole message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

from hive_core.net import listen_error

log = logging.getLogger("hive.cluster")

__all__ = ["HealthCheck", "HealthCheckSettings"]

GREETING = b"hive-health %s\n"


@dataclass(frozen=True, slots=True)
class HealthCheckSettings:
    """<failure-detection><tcp-health-check>, resolved."""

    bind_host: str
    bind_port: int = 0  # 0: an ephemeral port
    port_range: int = 50  # also try bind_port+1 .. bind_port+port_range when it is taken
    external_host: str | None = None  # what peers dial, behind NAT (None: the node's address)
    external_port: int = 0  # 0: the port bound


FailureHandler = Callable[[str, int, str], None]
"""(peer id, its incarnation, why): the peer's health connection closed.

A connection that cannot be opened at all is warned about, not reported: the peer is alive (it
just said HELLO) and only its health port is out of reach."""


class HealthCheck:
    def __init__(self, node_id: str, settings: HealthCheckSettings, on_failed: FailureHandler,
                 connect_timeout: float) -> None:
        self.node_id = node_id
        self.settings = settings
        self.on_failed = on_failed
        self.connect_timeout = connect_timeout
        self.port = 0  # advertised in HELLO, once started
        self._server: asyncio.AbstractServer | None = None
        self._accepted: set[asyncio.BaseTransport] = set()
        self._watches: dict[str, _Watch] = {}

    @property
    def host(self) -> str | None:
        """The host peers dial, when it is not the node's own address."""
        return self.settings.external_host

    async def start(self) -> None:
        """Listen on the first free port of bind-port .. bind-port + port-range."""
        loop = asyncio.get_running_loop()
        first = self.settings.bind_port
        last = first + self.settings.port_range if first else first
        error: OSError | None = None
        for port in range(first, last + 1):
            try:
                self._server = await loop.create_server(
                    lambda: _Accepted(self._accepted), self.settings.bind_host, port)
            except OSError as exc:
                error = exc
                continue
            bound = self._server.sockets[0].getsockname()[1]
            self.port = self.settings.external_port or int(bound)
            log.info("TCP health check listening on %s:%d", self.settings.bind_host, bound)
            return
        assert error is not None
        ports = f"{first}-{last}" if last != first else str(first)
        raise listen_error("<tcp-health-check>", self.settings.bind_host, ports, error)

    def watch(self, peer_id: str, incarnation: int, host: str, port: int) -> None:
        """Hold a connection to ``peer_id``'s health port; its loss is reported once."""
        self.forget(peer_id)
        watch = self._watches[peer_id] = _Watch(self, peer_id, incarnation)
        watch.task = asyncio.create_task(watch.open(host, port))

    def forget(self, peer_id: str) -> None:
        """Stop watching ``peer_id`` (it left): its connection closes, nobody is told."""
        watch = self._watches.pop(peer_id, None)
        if watch is not None:
            watch.stop()

    async def close(self) -> None:
        for peer_id in list(self._watches):
            self.forget(peer_id)
        if self._server is not None:
            self._server.close()
            self._server = None
        for transport in list(self._accepted):  # so the peers notice at once
            transport.close()
        self._accepted.clear()

    def _unreachable(self, watch: _Watch, host: str, port: int, why: str) -> None:
        if self._watches.get(watch.peer_id) is watch:
            del self._watches[watch.peer_id]
            log.warning("TCP health check: cannot connect to cluster node %s at %s:%d (%s); "
                        "its failures are noticed by heartbeat only. Behind NAT, give "
                        "<tcp-health-check> an <external-address> and <external-port> that "
                        "reach its health port", watch.peer_id, host, port, why)

    def _failed(self, watch: _Watch, why: str) -> None:
        if self._watches.get(watch.peer_id) is watch:
            del self._watches[watch.peer_id]
            self.on_failed(watch.peer_id, watch.incarnation, why)


class _Accepted(asyncio.Protocol):
    """A peer's connection to this node: held open, read and ignored."""

    def __init__(self, accepted: set[asyncio.BaseTransport]) -> None:
        self._accepted = accepted
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._accepted.add(transport)

    def data_received(self, data: bytes) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._accepted.discard(self._transport)


class _Watch(asyncio.Protocol):
    """This node's connection to one peer's health port."""

    def __init__(self, owner: HealthCheck, peer_id: str, incarnation: int) -> None:
        self.owner = owner
        self.peer_id = peer_id
        self.incarnation = incarnation
        self.task: asyncio.Task[None] | None = None
        self.transport: asyncio.BaseTransport | None = None
        self.stopped = False

    async def open(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.owner.connect_timeout):
                transport, _ = await loop.create_connection(lambda: self, host, port)
        except (OSError, TimeoutError) as exc:
            # The peer just spoke on its node link: it is alive, its health port is not
            # reachable from here (NAT, a firewall). Removing it would make it flap.
            self.owner._unreachable(self, host, port, str(exc) or "timed out")
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:  # a peer whose host vanished is noticed too, if slowly
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if self.stopped:
            transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        transport.write(GREETING % self.owner.node_id.encode())  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.stopped:
            self.owner._failed(self, f"connection closed ({exc})" if exc else "connection closed")

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self.transport is not None:
            self.transport.close()
