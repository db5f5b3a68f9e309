"""A simulated network: per-link FIFO with seeded latency, partitions, killed hosts.

Links behave as TCP does under the faults the simulation makes: bytes arrive in order after a
small random delay; across a partition (iptables DROP) nothing arrives, neither data nor a close,
until the heal, when what was held arrives in order (retransmission); a dial across a partition
connects at the first SYN retransmission after the heal, or times out; a dial to a host whose
process died is refused at once, and the links of a process that died close at their other end
(the kernel resets them). A frozen process is the loop's business: what arrives for it waits in
its held callbacks.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Callable
from typing import Any, TypeVar

from hive_core.cluster import NodeUnreachable
from hive_ext_api import ClusterNodeAddress

from ._loop import SimLoop

LinkT = TypeVar("LinkT", bound=asyncio.Protocol)
CLOSE = None  # in a pipe: the end closed after the data before it
SYN_RETRANSMIT = 1.0  # seconds until a dropped SYN is sent again the first time (Linux)


class SimNetwork:
    def __init__(self, loop: SimLoop, rng: random.Random) -> None:
        self.loop = loop
        self.rng = rng
        self.listeners: dict[ClusterNodeAddress, tuple[Callable[[], asyncio.Protocol],
                                                         contextvars.Context]] = {}
        self.groups: dict[str, int] = {}  # host -> side of the partition (absent: 0)
        self.cuts: set[frozenset[str]] = set()  # pairs of hosts whose link alone is cut
        self.dead: set[str] = set()
        self.links: dict[SimLink, None] = {}  # in the order made: a heal releases in it

    def latency(self) -> float:
        return self.rng.uniform(0.0002, 0.003)

    def reachable(self, a: str, b: str) -> bool:
        return (self.groups.get(a, 0) == self.groups.get(b, 0)
                and frozenset((a, b)) not in self.cuts)

    def isolate(self, host: str) -> None:
        self.groups = {host: 1}

    def cut(self, a: str, b: str) -> None:
        """Only the link between ``a`` and ``b``: each still reaches every other node."""
        self.cuts.add(frozenset((a, b)))

    def heal(self) -> None:
        self.groups = {}
        self.cuts = set()
        for link in list(self.links):
            link.release()

    def kill(self, host: str) -> None:
        self.dead.add(host)
        for address in [a for a in self.listeners if a.host == host]:
            del self.listeners[address]
        for link in list(self.links):
            link.host_died(host)

    def revive(self, host: str) -> None:
        self.dead.discard(host)

    def transport(self, host: str, context: contextvars.Context) -> SimTransport:
        return SimTransport(self, host, context)

    def open(self, a: tuple[str, contextvars.Context, asyncio.Protocol],
             b: tuple[str, contextvars.Context, asyncio.Protocol],
             partitionable: bool = True) -> SimLink:
        """A link between ``a`` and ``b`` (host, context its callbacks run in, protocol);
        ``partitionable``: a partition cuts it (node links; not a client's)."""
        link = SimLink(self, a, b, partitionable)
        self.links[link] = None
        return link


class SimEnd(asyncio.Transport):
    def __init__(self, link: SimLink, side: int, host: str, context: contextvars.Context,
                 protocol: asyncio.Protocol, peername: tuple[str, int]) -> None:
        super().__init__()
        self.link = link
        self.side = side
        self.host = host
        self.context = context
        self.protocol = protocol
        self.peername = peername
        self.closed = False
        self.last_at = 0.0  # when the last thing sent from this end arrives
        self.held: list[bytes | None] = []  # sent across a partition, not arrived yet

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peername if name == "peername" else default

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.closed:
            self.link.send(self.side, bytes(data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.link.send(self.side, CLOSE)
        self.link.network.loop.call_soon(self.protocol.connection_lost, None,
                                         context=self.context)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def arrive(self, item: bytes | None) -> None:
        if self.closed:
            return
        if item is CLOSE:
            self.closed = True
            self.protocol.connection_lost(None)
        else:
            self.protocol.data_received(item)


class SimLink:
    def __init__(self, network: SimNetwork, a: tuple[str, contextvars.Context, asyncio.Protocol],
                 b: tuple[str, contextvars.Context, asyncio.Protocol],
                 partitionable: bool = True) -> None:
        self.network = network
        self.partitionable = partitionable
        self.ends = (SimEnd(self, 0, a[0], a[1], a[2], (b[0], 0)),
                     SimEnd(self, 1, b[0], b[1], b[2], (a[0], 0)))

    @property
    def cut(self) -> bool:
        return self.partitionable and not self.network.reachable(self.ends[0].host,
                                                                 self.ends[1].host)

    def send(self, side: int, item: bytes | None) -> None:
        sender = self.ends[side]
        if self.cut or sender.held:
            sender.held.append(item)
            return
        self._schedule(side, item)

    def _schedule(self, side: int, item: bytes | None) -> None:
        sender, receiver = self.ends[side], self.ends[1 - side]
        loop = self.network.loop
        # Strictly later than what this end sent before: timers due at the same moment
        # need not run in the order they were made, and a link keeps its order.
        at = max(sender.last_at + 1e-6, loop.now + self.network.latency())
        sender.last_at = at
        loop.call_at(at, receiver.arrive, item, context=receiver.context)
        if item is CLOSE:
            self.network.links.pop(self, None)

    def release(self) -> None:
        """The partition healed: what was held goes, in order."""
        for side, end in enumerate(self.ends):
            held, end.held = end.held, []
            for item in held:
                self._schedule(side, item)

    def host_died(self, host: str) -> None:
        for side, end in enumerate(self.ends):
            if end.host == host and not end.closed:
                end.closed = True  # the dead process hears nothing more
                end.held = [item for item in end.held if item is not CLOSE]
                self.send(side, CLOSE)  # the kernel resets the connection


class SimTransport:
    """One node's :class:`~hive_core.cluster.NodeTransport` on a :class:`SimNetwork`."""

    def __init__(self, network: SimNetwork, host: str, context: contextvars.Context) -> None:
        self.network = network
        self.host = host
        self.context = context
        self.port = 7800

    async def listen(self, accept: Callable[[], asyncio.Protocol]) -> ClusterNodeAddress:
        address = ClusterNodeAddress(self.host, self.port)
        self.network.listeners[address] = (accept, self.context)
        return address

    async def dial(self, address: ClusterNodeAddress, connect: Callable[[], LinkT],
                   timeout: float) -> LinkT:
        network = self.network
        await asyncio.sleep(network.latency())
        # A SYN dropped by a partition is sent again 1 s, 3 s, 7 s ... after the first (TCP's
        # initial retransmission timeout, doubled each time): a dial that is still waiting
        # when the partition heals connects at its next retransmission.
        waited, backoff = 0.0, SYN_RETRANSMIT
        while not network.reachable(self.host, address.host):
            if waited + backoff >= timeout:
                await asyncio.sleep(timeout - waited)
                raise NodeUnreachable(f"{address.host}:{address.port}: timed out")
            await asyncio.sleep(backoff)
            waited += backoff
            backoff *= 2
        listener = network.listeners.get(address)
        if listener is None:
            raise NodeUnreachable(f"{address.host}:{address.port}: connection refused")
        accept, their_context = listener
        client = connect()
        server = their_context.run(accept)
        link = network.open((self.host, self.context, client),
                            (address.host, their_context, server))
        network.loop.call_soon(server.connection_made, link.ends[1], context=their_context)
        client.connection_made(link.ends[0])
        return client

    async def close(self) -> None:
        for address in [a for a in self.network.listeners if a.host == self.host]:
            del self.network.listeners[address]

    async def answers(self, address: ClusterNodeAddress) -> bool | None:
        await asyncio.sleep(self.network.latency())
        if not self.network.reachable(self.host, address.host):
            await asyncio.sleep(1.0)  # the SYN is dropped: no answer within the probe's second
            return None
        return address in self.network.listeners
