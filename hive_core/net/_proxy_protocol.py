"""``<proxy-protocol>true</proxy-protocol>`` on a listener: the PROXY header read, then MQTT.

Every connection of such a listener starts with a :class:`ProxyHeaderReader` as its protocol.
It reads the header (see ``_proxy_header.py``), then steps aside for good: the listener's own
protocol (MQTT, WebSocket, or the TLS layer in front of either) is swapped in with
``set_protocol`` and given the bytes that followed the header, so the header comes before the
TLS handshake and every later read goes straight to that protocol, as on any other listener.
What the protocol sees as its transport is a :class:`ProxiedTransport`: the connection itself,
except that ``peername`` and ``sockname`` are the client's and the balancer's addresses from
the header, and so is every client address the node shows (access log, extensions).

A connection whose first bytes are not a valid header, or that sends none within the
no-CONNECT timeout, is closed, logged (``hive.access``) and counted
(``proxy_protocol_refused`` in the broker's metrics).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any, cast

from hive_core.broker import Broker
from hive_core.net._proxy_header import ProxyHeader, ProxyHeaderError, ProxyHeaderParser

__all__ = ["ProxiedTransport", "ProxyHeaderReader"]

access_log = logging.getLogger("hive.access")
log = logging.getLogger("hive.connection")


class ProxiedTransport:
    """A connection's transport with the addresses of its PROXY header.

    The transport's own methods are bound on the instance, so a write costs what it costs on
    the bare transport; only ``get_extra_info`` answers differently.
    """

    def __init__(self, transport: Any, peername: tuple[str, int],
                 sockname: tuple[str, int] | None) -> None:
        self._transport = transport
        self._extra: dict[str, Any] = {"peername": peername, "proxy_peername":
                                       transport.get_extra_info("peername")}
        if sockname is not None:
            self._extra["sockname"] = sockname
        self.write = transport.write
        self.writelines = transport.writelines
        self.close = transport.close
        self.abort = transport.abort
        self.is_closing = transport.is_closing
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading
        self.can_write_eof = transport.can_write_eof
        self.write_eof = transport.write_eof

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in self._extra:
            return self._extra[name]
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:  # the rest (TLS uses a few private ones)
        return getattr(self._transport, name)


class ProxyHeaderReader(asyncio.Protocol):
    """A proxy-protocol listener's first protocol on each connection (see the module doc)."""

    def __init__(self, broker: Broker, listener: str,
                 protocol_factory: Callable[[], asyncio.BaseProtocol],
                 tls: ssl.SSLContext | None = None, tls_handshake_timeout: float = 10.0,
                 trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (),
                 ) -> None:
        self._trusted = trusted  # the load balancers' networks; empty: any address
        self._broker = broker
        self._listener = listener
        self._protocol_factory = protocol_factory
        self._tls = tls
        self._tls_handshake_timeout = tls_handshake_timeout
        self._parser = ProxyHeaderParser()
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._received = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's: no subclass
        if self._trusted:
            peer = transport.get_extra_info("peername")
            if not peer:  # gone already (a balancer's bare TCP check): nothing to refuse
                self._transport = None
                cast(asyncio.Transport, transport).abort()
                return
            if not _trusted(peer, self._trusted):
                self._refuse("not a trusted proxy (<trusted-proxies>)")
                return
        self._deadline = asyncio.get_running_loop().call_later(
            self._broker.settings.connect_timeout, self._timed_out)

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return
        self._received = True
        try:
            parsed = self._parser.feed(data)
        except ProxyHeaderError as exc:
            self._refuse(str(exc))
            return
        if parsed is not None:
            self._hand_over(*parsed)

    def eof_received(self) -> bool:
        if self._received:  # gone halfway through a header
            self._refuse("the connection ended inside the PROXY protocol header")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        self._transport = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self._transport is not None:
            self._refuse(f"no PROXY protocol header within "
                         f"{self._broker.settings.connect_timeout:g} s")

    def _refuse(self, reason: str) -> None:
        transport = self._transport
        self._transport = None
        self._cancel_deadline()
        self._broker.metrics.proxy_protocol_refused += 1
        peer = transport.get_extra_info("peername") if transport is not None else None
        access_log.info("refusing connection from %s on %s: %s",
                        f"{peer[0]}:{peer[1]}" if peer else "?", self._listener, reason)
        if transport is not None:
            transport.abort()

    def _hand_over(self, header: ProxyHeader, rest: bytes) -> None:
        transport = self._transport
        assert transport is not None
        self._transport = None
        self._cancel_deadline()
        # LOCAL (the balancer's health check) and address-less families: the real endpoints.
        carrier: Any = transport
        if header.source is not None:
            carrier = ProxiedTransport(transport, header.source, header.destination)
        log.debug("PROXY v%d %s %s: client %s on %s", header.version, header.command,
                  header.family, header.source, self._listener)
        protocol = self._protocol_factory()
        if self._tls is not None:
            protocol = _tls_layer(protocol, self._tls, self._tls_handshake_timeout)
        transport.set_protocol(protocol)
        protocol.connection_made(carrier)
        if rest and not transport.is_closing():
            _feed(protocol, rest)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _trusted(peer: tuple[Any, ...], networks: tuple[_Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(str(peer[0]).partition("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


def _tls_layer(app: asyncio.BaseProtocol, context: ssl.SSLContext,
               timeout: float) -> asyncio.BaseProtocol:
    """asyncio's TLS protocol in front of ``app``, as the loop makes it for an ``ssl=`` server.

    Made here because the loop's own (``ssl=`` on the server, or ``start_tls``) would read the
    PROXY header as the ClientHello, and cannot be handed the bytes already read after it.
    """
    handshake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    handshake.add_done_callback(_handshake_done)
    return sslproto.SSLProtocol(asyncio.get_running_loop(), app, context, handshake,
                                server_side=True,
                                ssl_handshake_timeout=timeout)  # type: ignore[arg-type]


def _handshake_done(handshake: asyncio.Future[None]) -> None:
    # The TLS layer has closed the connection already; said at DEBUG as the loop's own does.
    exc = None if handshake.cancelled() else handshake.exception()
    if exc is not None:
        log.debug("TLS handshake after a PROXY header failed: %r", exc)


def _feed(protocol: asyncio.BaseProtocol, data: bytes) -> None:
    """Give ``protocol`` bytes as the loop would: ``data_received`` or its buffer."""
    if isinstance(protocol, asyncio.BufferedProtocol):
        view = memoryview(data)
        while view:
            buffer = memoryview(protocol.get_buffer(len(view)))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            protocol.buffer_updated(size)
            view = view[size:]
    else:
        cast(asyncio.Protocol, protocol).data_received(data)
