"""An in-process network for the cluster's tests: many nodes in one event loop, each with a
:class:`MemoryTransport` (the cluster's ``NodeTransport``), which the test can cut apart, heal and
kill. Not shipped in ``hive_core``: only tests run nodes this way."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from hive_core.cluster._transport import LinkFactory, LinkT, NodeUnreachable
from hive_ext_api import ClusterNodeAddress


class MemoryNetwork:
    """An in-process network many nodes share, one :class:`MemoryTransport` per node (host).

    Bytes cross through the event loop (``call_soon``), in order, as whole writes. A partition
    silences every link across it; a link that crossed a partition does not survive the heal
    (both ends see it close, as after a TCP reset). A killed host vanishes at once: its peers'
    ends of its links close, its own objects hear nothing more, and nobody can dial it.
    """

    def __init__(self) -> None:
        self._listeners: dict[ClusterNodeAddress, tuple[MemoryTransport, Callable[[], Any]]] = {}
        self._links: set[_MemoryLink] = set()
        self._groups: dict[str, int] = {}  # host -> partition group; absent hosts: group 0
        self._dead: set[str] = set()
        self._ports = itertools.count(7800)

    def transport(self, host: str, port: int = 0) -> MemoryTransport:
        """The transport of a node on ``host``; port 0 picks a free one at ``listen``."""
        self._dead.discard(host)  # a node started again on a killed host
        return MemoryTransport(self, host, port)

    def reachable(self, a: str, b: str) -> bool:
        if a in self._dead or b in self._dead:
            return False
        return self._groups.get(a, 0) == self._groups.get(b, 0)

    def partition(self, *sides: Iterable[str]) -> None:
        """Cut the network into ``sides`` (hosts not named stay with the first side)."""
        self._groups = {host: index for index, side in enumerate(sides) for host in side}

    def heal(self) -> None:
        """One network again; every link that was cut breaks (both ends close)."""
        self._groups = {}
        for link in [link for link in self._links if link.cut]:
            link.break_both()

    def kill(self, host: str) -> None:
        """The process on ``host`` dies: peers see its links close, it sees nothing."""
        self._dead.add(host)
        for address in [a for a in self._listeners if a.host == host]:
            del self._listeners[address]
        for link in [link for link in self._links if host in link.hosts]:
            link.die(host)

    def links(self, host: str | None = None) -> int:
        """How many links are open (to or from ``host``)."""
        return sum(1 for link in self._links if host is None or host in link.hosts)

    # -------------------------------------------------------------- for MemoryTransport

    def _bind(self, transport: MemoryTransport, accept: Callable[[], Any]) -> ClusterNodeAddress:
        port = transport.port
        if not port:
            port = next(p for p in self._ports
                        if ClusterNodeAddress(transport.host, p) not in self._listeners)
        address = ClusterNodeAddress(transport.host, port)
        if address in self._listeners:
            raise OSError(f"address {address.host}:{address.port} already in use")
        self._listeners[address] = (transport, accept)
        return address

    def _unbind(self, transport: MemoryTransport) -> None:
        for address in [a for a, (t, _) in self._listeners.items() if t is transport]:
            del self._listeners[address]

    def _connect(self, source: MemoryTransport, address: ClusterNodeAddress,
                 connect: Callable[[], LinkT]) -> LinkT:
        listener = self._listeners.get(address)
        if listener is None or not self.reachable(source.host, address.host):
            raise NodeUnreachable(f"{address.host}:{address.port}: connection refused")
        loop = asyncio.get_running_loop()
        client = connect()
        server = listener[1]()
        link = _MemoryLink(self, loop, (source.host, address.host))
        dialled, accepted = link.ends
        dialled.attach(client, (address.host, address.port))
        accepted.attach(server, (source.host, 0))
        self._links.add(link)
        # The accepting end is set up first, so what the dialling end writes at once (its
        # authentication challenge) finds it ready, as the kernel's accept queue would.
        loop.call_soon(server.connection_made, accepted)
        client.connection_made(dialled)
        return client

    def _forget(self, link: _MemoryLink) -> None:
        self._links.discard(link)


class MemoryTransport:
    """One node's view of a :class:`MemoryNetwork`."""

    def __init__(self, network: MemoryNetwork, host: str, port: int = 0) -> None:
        self.network = network
        self.host = host
        self.port = port

    async def listen(self, accept: Callable[[], asyncio.Protocol]) -> ClusterNodeAddress:
        address = self.network._bind(self, accept)
        self.port = address.port
        return address

    async def dial(self, address: ClusterNodeAddress, connect: LinkFactory[LinkT],
                   timeout: float) -> LinkT:
        await asyncio.sleep(0)  # a dial is never instantaneous: let the caller's loop run
        if self.host in self.network._dead:
            raise NodeUnreachable(f"{self.host} is down")
        return self.network._connect(self, address, connect)

    async def close(self) -> None:
        self.network._unbind(self)

    async def answers(self, address: ClusterNodeAddress) -> bool | None:
        if address.host in self.network._dead:
            return False  # its process is gone: the port refuses
        if not self.network.reachable(self.host, address.host):
            return None
        return address in self.network._listeners


class _MemoryEnd(asyncio.Transport):
    """One end of an in-memory link, what the protocol object writes to."""

    def __init__(self, link: _MemoryLink, side: int) -> None:
        super().__init__()
        self._link = link
        self._side = side
        self.protocol: asyncio.Protocol | None = None
        self.peername: tuple[str, int] | None = None
        self.closed = False

    def attach(self, protocol: asyncio.Protocol, peername: tuple[str, int]) -> None:
        self.protocol = protocol
        self.peername = peername

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peername if name == "peername" else default

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed or self._link.cut:
            return  # a write across a partition is lost
        other = self._link.ends[1 - self._side]
        self._link.loop.call_soon(other.receive, bytes(data))

    def close(self) -> None:
        if self.closed:
            return
        self._lost()
        if not self._link.cut:
            other = self._link.ends[1 - self._side]
            self._link.loop.call_soon(other._lost)  # after the data already on its way
        self._link.ended()

    def abort(self) -> None:
        self.close()

    def receive(self, data: bytes) -> None:
        if not self.closed and self.protocol is not None:
            self.protocol.data_received(data)

    def _lost(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.protocol is not None:
            self._link.loop.call_soon(self.protocol.connection_lost, None)


class _MemoryLink:
    def __init__(self, network: MemoryNetwork, loop: asyncio.AbstractEventLoop,
                 hosts: tuple[str, str]) -> None:
        self.network = network
        self.loop = loop
        self.hosts = hosts
        self.ends = (_MemoryEnd(self, 0), _MemoryEnd(self, 1))

    @property
    def cut(self) -> bool:
        return not self.network.reachable(*self.hosts)

    def ended(self) -> None:
        if not self.cut:  # across a partition the far end learns at the heal (break_both)
            self.network._forget(self)

    def break_both(self) -> None:
        for end in self.ends:
            end._lost()
        self.network._forget(self)

    def die(self, host: str) -> None:
        for end, end_host in zip(self.ends, self.hosts, strict=True):
            if end_host == host:
                end.closed = True  # the dead process hears nothing
            else:
                end._lost()
        self.network._forget(self)
