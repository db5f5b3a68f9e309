"""Node links over UDP unicast: a reliable, ordered link per peer on top of datagrams.

Two layers. :class:`ReliableLink` is sans-IO: datagrams and the time in, datagrams and whole
messages out (connection setup, sequence numbers, cumulative and selective acks, retransmission
with an RTO from measured round trips, a send window, fragmentation and reassembly, duplicate
suppression, failure after too many retransmissions). :class:`UdpTransport` owns the socket,
routes datagrams to links by connection id and gives each :class:`PeerLink` a transport-like
end, so the cluster sees a UDP link exactly as a TCP one: it opens, carries bytes, closes.

Each end of a link picks a random 32-bit connection id; a peer that restarts picks new ones,
so its old links are answered with RST and close, as a TCP connection would be reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import secrets
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hive_core.cluster._transport import LinkFactory, LinkT, NodeUnreachable
from hive_core.cluster._wire import MAX_FRAME
from hive_core.net import listen_error
from hive_ext_api import ClusterNodeAddress

__all__ = ["MAX_DATAGRAM", "MAX_FRAGMENT", "Reassembler", "ReliableLink", "UdpTiming",
           "UdpTransport", "fragment"]

log = logging.getLogger("hive.cluster")

MAX_DATAGRAM = 1400
"""UDP payload bytes, headers included: below any usual path MTU, loopback or not."""

_MAGIC = 0x48  # "H": a stray datagram is dropped, not misread


class Kind(enum.IntEnum):
    SYN = 1  # dialler -> acceptor: my connection id
    SYN_ACK = 2  # acceptor -> dialler: yours, and mine
    DATA = 3  # seq, more-fragments flag, a piece of a message
    ACK = 4  # next expected seq, then up to MAX_SACK ranges received beyond it
    FIN = 5  # the sender closed the link
    RST = 6  # no such link here (restarted, closed, never existed)


_header = struct.Struct(">BBII")  # magic, kind, destination id, source id
_data = struct.Struct(">QB")  # seq, more
_ack = struct.Struct(">QB")  # cumulative (next expected seq), sack range count
_range = struct.Struct(">QQ")  # [start, end)
MAX_FRAGMENT = MAX_DATAGRAM - _header.size - _data.size
MAX_SACK = 32
MAX_MESSAGE = MAX_FRAME + 4
"""The largest message reassembled: one frame and its length (a bigger write is split)."""


def header(kind: Kind, destination: int, source: int) -> bytes:
    return _header.pack(_MAGIC, kind, destination, source)


def parse_header(datagram: bytes) -> tuple[Kind, int, int] | None:
    """(kind, destination id, source id), or None for something not ours."""
    if len(datagram) < _header.size:
        return None
    magic, kind, destination, source = _header.unpack_from(datagram)
    if magic != _MAGIC or not Kind.SYN <= kind <= Kind.RST:
        return None
    return Kind(kind), destination, source


# ---------------------------------------------------------------------------------- fragments


def fragment(message: bytes, size: int = MAX_FRAGMENT) -> list[tuple[bytes, bool]]:
    """A message as pieces of at most ``size`` bytes, each with "more pieces follow"."""
    if len(message) <= size:
        return [(message, False)]
    view = memoryview(message)
    last = (len(message) - 1) // size
    return [(bytes(view[i * size:(i + 1) * size]), i < last) for i in range(last + 1)]


class ReassemblyError(Exception):
    """A message bigger than the reassembly limit: the link is broken."""


class Reassembler:
    """Pieces in order in, whole messages out."""

    def __init__(self, limit: int = MAX_MESSAGE) -> None:
        self.limit = limit
        self._pieces: list[bytes] = []
        self._size = 0

    def feed(self, piece: bytes, more: bool) -> bytes | None:
        self._size += len(piece)
        if self._size > self.limit:
            raise ReassemblyError(f"a message of more than {self.limit} bytes")
        if not more and not self._pieces:
            self._size = 0
            return piece
        self._pieces.append(piece)
        if more:
            return None
        message = b"".join(self._pieces)
        self._pieces, self._size = [], 0
        return message


# ---------------------------------------------------------------------------------- one link


@dataclass(frozen=True, slots=True)
class UdpTiming:
    """Retransmission and window settings of every link of one transport."""

    rto_initial: float = 0.5  # seconds, before any round trip was measured
    rto_min: float = 0.2  # as Linux's TCP: a busy peer's late ack is no loss
    rto_max: float = 3.0  # the bound of the exponential backoff
    max_retransmits: int = 8  # of one datagram without an ack: then the link fails
    send_window: int = 128  # datagrams in flight; the receiver buffers up to 32 times that
    linger: float = 1.0  # seconds a closing transport waits for unacked data


class State(enum.Enum):
    SYN_SENT = "syn-sent"
    SYN_RECEIVED = "syn-received"
    OPEN = "open"
    CLOSING = "closing"  # closed by this side; data still unacked goes out first
    CLOSED = "closed"


class _Segment:
    __slots__ = ("due", "fast", "more", "piece", "resent", "retransmits", "sent_at", "seq")

    def __init__(self, seq: int, piece: bytes, more: bool) -> None:
        self.seq = seq
        self.piece = piece
        self.more = more
        self.sent_at = 0.0
        self.due = 0.0
        self.retransmits = 0  # after a timeout: they back off, and too many fail the link
        self.fast = False  # resent once on a selective ack showing it missing
        self.resent = False  # so its ack measures no round trip (Karn)


class ReliableLink:
    """One end of a link, sans-IO: ``receive`` and ``send`` change it, ``poll`` says what to put
    on the wire now, ``deadline`` when to poll again. ``failure`` says why it closed, if it failed.
    """

    def __init__(self, local_id: int, remote_id: int, state: State, now: float,
                 timing: UdpTiming = UdpTiming()) -> None:
        self.local_id = local_id
        self.remote_id = remote_id
        self.state = state
        self.timing = timing
        self.failure: str | None = None
        # sending
        self._next_seq = 0
        self._queue: deque[_Segment] = deque()  # not sent yet: beyond the window
        self._unacked: dict[int, _Segment] = {}  # sent, neither acked nor selectively acked
        self._srtt: float | None = None
        self._rttvar = 0.0
        self.rto = timing.rto_initial
        self._handshake_due = now  # SYN or SYN_ACK: goes out at the first poll
        self._handshake_sent = 0.0
        self._handshake_retransmits = -1
        # receiving
        self._expected = 0
        self._out_of_order: dict[int, tuple[bytes, bool]] = {}
        self._reassembler = Reassembler()
        self._ack_due = False
        self.retransmissions = 0
        self.duplicates = 0

    @classmethod
    def dialling(cls, local_id: int, now: float, timing: UdpTiming = UdpTiming()) -> ReliableLink:
        return cls(local_id, 0, State.SYN_SENT, now, timing)

    @classmethod
    def accepting(cls, local_id: int, remote_id: int, now: float,
                  timing: UdpTiming = UdpTiming()) -> ReliableLink:
        return cls(local_id, remote_id, State.SYN_RECEIVED, now, timing)

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def drained(self) -> bool:
        return not self._queue and not self._unacked

    # -------------------------------------------------------------- the user's side

    def send(self, data: bytes) -> None:
        """Queue bytes; they arrive whole, in order, once (a very big write as several)."""
        if not data or self.state in (State.CLOSING, State.CLOSED):
            return
        for at in range(0, len(data), MAX_MESSAGE):
            for piece, more in fragment(data[at:at + MAX_MESSAGE]):
                self._queue.append(_Segment(self._next_seq, piece, more))
                self._next_seq += 1

    def close(self) -> None:
        """Close after what is queued has been acked (poll sends FIN then)."""
        if self.state in (State.SYN_SENT, State.SYN_RECEIVED):
            self.state = State.CLOSED
        elif self.state is State.OPEN:
            self.state = State.CLOSING

    def fail(self, why: str) -> None:
        if self.state is not State.CLOSED:
            self.state = State.CLOSED
            self.failure = why

    # -------------------------------------------------------------- the wire's side

    def receive(self, kind: Kind, source: int, body: bytes, now: float) -> list[bytes]:
        """A datagram for this link (header already read); returns the messages now complete."""
        if self.state is State.CLOSED:
            return []
        if kind is Kind.RST:
            self.fail("reset by the peer")
            return []
        if kind is Kind.FIN:
            self.state = State.CLOSED
            return []
        if kind is Kind.SYN:  # our SYN_ACK was lost: send it again
            if self.state is State.SYN_RECEIVED:
                self._handshake_due = now
            return []
        if kind is Kind.SYN_ACK:
            if self.state is State.SYN_SENT:
                self.remote_id = source
                self.state = State.OPEN
                if self._handshake_retransmits == 0:
                    self._measured(now - self._handshake_sent)
            self._ack_due = True  # confirms the link to the acceptor
            return []
        if self.state is State.SYN_SENT:
            return []  # cannot happen before SYN_ACK: the acceptor waits for our first word
        if self.state is State.SYN_RECEIVED:
            self.state = State.OPEN
        if kind is Kind.ACK:
            self._acked(body, now)
            return []
        return self._data(body)

    def _data(self, body: bytes) -> list[bytes]:
        seq, more = _data.unpack_from(body)
        self._ack_due = True
        if seq < self._expected or seq in self._out_of_order:
            self.duplicates += 1
            return []
        if seq >= self._expected + 32 * self.timing.send_window:
            return []  # beyond what the sender may have in flight: a confused peer
        self._out_of_order[seq] = (body[_data.size:], bool(more))
        messages: list[bytes] = []
        while self._expected in self._out_of_order:
            piece, more = self._out_of_order.pop(self._expected)
            self._expected += 1
            try:
                message = self._reassembler.feed(piece, more)
            except ReassemblyError as exc:
                self.fail(str(exc))
                return messages
            if message is not None:
                messages.append(message)
        return messages

    def _acked(self, body: bytes, now: float) -> None:
        cumulative, count = _ack.unpack_from(body)
        ranges = [_range.unpack_from(body, _ack.size + i * _range.size)
                  for i in range(min(count, (len(body) - _ack.size) // _range.size))]
        unacked = self._unacked
        acked = [seq for seq in unacked if seq < cumulative]
        for start, end in ranges:
            if end - start < len(unacked):
                acked += [seq for seq in range(start, end) if seq in unacked]
            else:
                acked += [seq for seq in unacked if start <= seq < end]
        sample = None
        for seq in acked:
            segment = unacked.pop(seq, None)
            if segment is not None and not segment.resent:  # Karn: only clean samples
                sample = now - segment.sent_at
        if sample is not None:
            self._measured(sample)
        if ranges and self._srtt is not None:  # a hole below what arrived: resend it, once
            highest = max(end for _, end in ranges)
            for segment in unacked.values():
                if segment.seq < highest and not segment.fast \
                        and now - segment.sent_at >= self._srtt:
                    segment.fast = True
                    segment.due = now

    def _measured(self, rtt: float) -> None:
        """RFC 6298's smoothed round trip and RTO."""
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt
        self.rto = min(max(self._srtt + 4 * self._rttvar, self.timing.rto_min),
                       self.timing.rto_max)

    def _backoff(self, retransmits: int) -> float:
        return min(self.rto * 2 ** retransmits, self.timing.rto_max)

    # -------------------------------------------------------------- what to send

    def poll(self, now: float) -> list[bytes]:
        """The datagrams to send now."""
        out: list[bytes] = []
        if self.state is State.CLOSED:
            return out
        if self.state in (State.SYN_SENT, State.SYN_RECEIVED):
            if now >= self._handshake_due:
                self._handshake_retransmits += 1
                if self._handshake_retransmits > self.timing.max_retransmits:
                    self.fail("no answer to the connection setup")
                    return out
                self._handshake_sent = now
                self._handshake_due = now + self._backoff(self._handshake_retransmits)
                out.append(header(Kind.SYN, 0, self.local_id) if self.state is State.SYN_SENT
                           else header(Kind.SYN_ACK, self.remote_id, self.local_id))
            return out
        if self._ack_due:
            self._ack_due = False
            out.append(self._ack_datagram())
        timed_out = False
        for segment in self._unacked.values():  # in seq order
            if segment.due > now:
                continue
            if segment.fast and not segment.resent:  # a hole an ack showed: no backoff
                segment.resent = True
            elif timed_out:  # one timeout at a time: a late ack may still cover the rest
                segment.due = now + self._backoff(segment.retransmits)
                continue
            elif segment.retransmits >= self.timing.max_retransmits:
                self.fail(f"{segment.retransmits} retransmissions without an ack")
                return out
            else:
                timed_out = True
                segment.retransmits += 1
                segment.resent = True
            self.retransmissions += 1
            self._transmit(segment, now, out)
        base = min(self._unacked, default=self._next_seq - len(self._queue))
        while self._queue and self._queue[0].seq < base + self.timing.send_window:
            segment = self._queue.popleft()
            self._unacked[segment.seq] = segment
            self._transmit(segment, now, out)
        if self.state is State.CLOSING and self.drained:
            self.state = State.CLOSED
            out.append(header(Kind.FIN, self.remote_id, self.local_id))
        return out

    def _transmit(self, segment: _Segment, now: float, out: list[bytes]) -> None:
        segment.sent_at = now
        segment.due = now + self._backoff(segment.retransmits)
        out.append(header(Kind.DATA, self.remote_id, self.local_id)
                   + _data.pack(segment.seq, segment.more) + segment.piece)

    def _ack_datagram(self) -> bytes:
        ranges: list[tuple[int, int]] = []
        for seq in sorted(self._out_of_order):
            if ranges and ranges[-1][1] == seq:
                ranges[-1] = (ranges[-1][0], seq + 1)
            elif len(ranges) == MAX_SACK:
                break
            else:
                ranges.append((seq, seq + 1))
        return b"".join([header(Kind.ACK, self.remote_id, self.local_id),
                         _ack.pack(self._expected, len(ranges)),
                         *(_range.pack(*r) for r in ranges)])

    def deadline(self) -> float | None:
        """When ``poll`` has something to do next without anything arriving (None: never)."""
        if self.state is State.CLOSED:
            return None
        if self.state in (State.SYN_SENT, State.SYN_RECEIVED):
            return self._handshake_due
        return min((s.due for s in self._unacked.values()), default=None)


# ---------------------------------------------------------------------------------- transport


class _UdpEnd(asyncio.Transport):
    """What a PeerLink writes to: one link of a :class:`UdpTransport`."""

    def __init__(self, owner: UdpTransport, link: ReliableLink,
                 peer: tuple[str, int]) -> None:
        super().__init__()
        self._owner = owner
        self.link = link
        self.peer = peer
        self.protocol: asyncio.Protocol | None = None
        self.lost = False  # connection_lost was called (or is on its way)
        self.opened: asyncio.Future[None] | None = None  # a dial waiting for SYN_ACK
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: float | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self.peer
        if name == "sockname":
            return self._owner.sockname
        return default

    def is_closing(self) -> bool:
        return self.lost or self.link.state in (State.CLOSING, State.CLOSED)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.is_closing():
            self.link.send(bytes(data))
            self._owner._service(self)

    def close(self) -> None:
        if self.link.state is not State.CLOSED:
            self.link.close()
            self._owner._service(self)
        self._owner._lose(self, None)

    def abort(self) -> None:
        self.link.fail("aborted")
        self._owner._service(self)
        self._owner._lose(self, None)


class _Socket(asyncio.DatagramProtocol):
    def __init__(self, owner: UdpTransport) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.owner._datagram(data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP cluster transport: %s", exc)


class UdpTransport:
    """Node links over UDP unicast, one socket per node: see the module docstring."""

    def __init__(self, bind_host: str, bind_port: int, timing: UdpTiming = UdpTiming()) -> None:
        self.bind_host = bind_host
        self.bind_port = bind_port
        self.timing = timing
        self.sockname: tuple[str, int] | None = None
        self._socket: asyncio.DatagramTransport | None = None
        self._accept: Callable[[], asyncio.Protocol] | None = None
        self._ends: dict[int, _UdpEnd] = {}  # by local connection id
        self._syns: dict[tuple[tuple[str, int], int], _UdpEnd] = {}  # by (peer, its id)
        self._dirty: set[_UdpEnd] = set()
        self._flush_scheduled = False
        self._loss = 0.0
        self._random = random.Random()
        self.datagrams_out = 0
        self.datagrams_in = 0

    # -------------------------------------------------------------- NodeTransport

    async def listen(self, accept: Callable[[], asyncio.Protocol]) -> ClusterNodeAddress:
        await self._open()
        self._accept = accept
        assert self.sockname is not None
        return ClusterNodeAddress(*self.sockname)

    async def dial(self, address: ClusterNodeAddress, connect: LinkFactory[LinkT],
                   timeout: float) -> LinkT:
        await self._open()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(address.host, address.port,
                                               family=self._family, type=socket.SOCK_DGRAM)
                peer = (str(infos[0][4][0]), int(infos[0][4][1]))
                end = self._new_end(ReliableLink.dialling(self._new_id(), time.monotonic(),
                                                          self.timing), peer)
                end.opened = loop.create_future()
                self._service(end)
                try:
                    await end.opened
                except BaseException:
                    end.link.close()
                    self._forget(end)
                    raise
        except (OSError, TimeoutError, ConnectionError) as exc:
            raise NodeUnreachable(f"{address.host}:{address.port}: {exc or 'timed out'}") \
                from exc
        link = connect()
        end.protocol = link
        link.connection_made(end)
        return link

    async def close(self) -> None:
        """Stop accepting; links still open are closed, unacked data gets ``linger`` seconds."""
        self._accept = None
        for end in list(self._ends.values()):
            end.close()
        deadline = time.monotonic() + self.timing.linger
        while self._ends and time.monotonic() < deadline and self._socket is not None:
            await asyncio.sleep(0.01)
        for end in list(self._ends.values()):
            self._send(header(Kind.FIN, end.link.remote_id, end.link.local_id), end.peer)
            end.link.fail("transport closed")
            self._forget(end)
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def answers(self, address: ClusterNodeAddress) -> bool | None:
        """No probe over UDP: a peer whose link closed is taken for gone."""
        return False

    # -------------------------------------------------------------- test hooks

    def drop_outgoing(self, fraction: float, seed: int = 0) -> None:
        """Lose ``fraction`` of the datagrams this node sends, chosen by a seeded generator."""
        self._loss = fraction
        self._random = random.Random(seed)

    def kill(self) -> None:
        """The process dies: the socket closes, nobody is told, the links hear nothing more."""
        for end in list(self._ends.values()):
            end.lost = True
            end.link.fail("killed")
            self._forget(end)
        self._accept = None
        if self._socket is not None:
            self._socket.abort()
            self._socket = None

    # -------------------------------------------------------------- the socket's side

    async def _open(self) -> None:
        if self._socket is not None:
            return
        loop = asyncio.get_running_loop()
        try:
            self._socket, _ = await loop.create_datagram_endpoint(
                lambda: _Socket(self), local_addr=(self.bind_host, self.bind_port))
        except OSError as exc:
            raise listen_error("<transport><udp>", self.bind_host, self.bind_port, exc) from exc
        sock = self._socket.get_extra_info("socket")
        self._family = sock.family
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):  # bursts of a window; capped by OS
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, option, 4 * 1024 * 1024)
        name = sock.getsockname()
        self.sockname = (str(name[0]), int(name[1]))

    _family: int = socket.AF_INET

    def _new_id(self) -> int:
        while True:
            candidate = secrets.randbits(32)
            if candidate and candidate not in self._ends:
                return candidate

    def _new_end(self, link: ReliableLink, peer: tuple[str, int]) -> _UdpEnd:
        end = _UdpEnd(self, link, peer)
        self._ends[link.local_id] = end
        return end

    def _datagram(self, data: bytes, peer: tuple[str, int]) -> None:
        if self._socket is None:
            return
        self.datagrams_in += 1
        parsed = parse_header(data)
        if parsed is None:
            return
        kind, destination, source = parsed
        if kind is Kind.SYN:
            self._syn(peer, source)
            return
        end = self._ends.get(destination)
        if end is not None and kind is Kind.SYN_ACK and end.link.state is State.SYN_SENT:
            end.peer = peer  # a multi-homed or NATed acceptor may answer from another address
        elif end is None or end.peer != peer or end.link.remote_id != source:
            if kind is not Kind.RST:  # no such link (any more): tell the sender
                self._send(header(Kind.RST, source, destination), peer)
            return
        try:
            messages = end.link.receive(kind, source, data[_header.size:], time.monotonic())
        except struct.error:
            end.link.fail("a malformed datagram")
            messages = []
        for message in messages:
            if end.protocol is None or end.lost:
                break
            end.protocol.data_received(message)
        self._service(end)

    def _syn(self, peer: tuple[str, int], remote_id: int) -> None:
        end = self._syns.get((peer, remote_id))
        if end is not None:
            end.link.receive(Kind.SYN, remote_id, b"", time.monotonic())
            self._service(end)
            return
        if self._accept is None:
            self._send(header(Kind.RST, remote_id, 0), peer)
            return
        end = self._new_end(ReliableLink.accepting(self._new_id(), remote_id, time.monotonic(),
                                                   self.timing), peer)
        self._syns[(peer, remote_id)] = end
        end.protocol = self._accept()
        end.protocol.connection_made(end)
        self._service(end)

    def _service(self, end: _UdpEnd) -> None:
        """Poll ``end`` once this loop iteration is done (writes and acks go out together)."""
        self._dirty.add(end)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, set()
        now = time.monotonic()
        loop = asyncio.get_running_loop()
        for end in dirty:
            if self._ends.get(end.link.local_id) is not end:
                continue
            link = end.link
            for datagram in link.poll(now):
                self._send(datagram, end.peer)
            if end.opened is not None and not end.opened.done():
                if link.state in (State.OPEN, State.CLOSING):
                    end.opened.set_result(None)
                elif link.closed:
                    end.opened.set_exception(ConnectionError(link.failure or "refused"))
            if link.closed:
                if link.failure:
                    log.debug("UDP link to %s:%d closed: %s", *end.peer, link.failure)
                self._lose(end, ConnectionError(link.failure) if link.failure else None)
                self._forget(end)
                continue
            deadline = link.deadline()
            if deadline != end.timer_at:
                if end.timer is not None:
                    end.timer.cancel()
                end.timer_at = deadline
                end.timer = None if deadline is None else loop.call_at(
                    loop.time() + max(deadline - now, 0.0), self._timer_fired, end)

    def _timer_fired(self, end: _UdpEnd) -> None:
        end.timer = end.timer_at = None  # so the next flush sets one again, even if it is early
        self._service(end)

    def _lose(self, end: _UdpEnd, exc: Exception | None) -> None:
        if not end.lost:
            end.lost = True
            if end.protocol is not None:
                asyncio.get_running_loop().call_soon(end.protocol.connection_lost, exc)

    def _forget(self, end: _UdpEnd) -> None:
        if self._ends.get(end.link.local_id) is end:
            del self._ends[end.link.local_id]
        self._syns.pop((end.peer, end.link.remote_id), None)
        if end.timer is not None:
            end.timer.cancel()
            end.timer = None
        self._dirty.discard(end)

    def _send(self, datagram: bytes, peer: tuple[str, int]) -> None:
        if self._socket is None:
            return
        if self._loss and self._random.random() < self._loss:
            return
        self.datagrams_out += 1
        self._socket.sendto(datagram, peer)
