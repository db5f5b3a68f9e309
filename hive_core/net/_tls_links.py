"""TLS on node links, with the handshake's outcome said in the log on both ends.

Left to itself asyncio (and uvloop) would hide why a node cannot join: a failed server-side
handshake is logged only in debug mode, and the alert OpenSSL writes to tell the other end
why is dropped when the connection is closed, so that end sees only a reset. Here both ends
of a node link run asyncio's TLS protocol made by Hive (:class:`_NodeTls`), which sends that
alert, and a failure becomes one WARNING line on each node::

    cluster TLS handshake with 127.0.0.1:7801 failed: REASON

Under TLS 1.3 the dialing node's handshake ends before the accepting node has checked the
dialer's certificate; a refusal then arrives as an alert on the first read, which
:class:`_FirstRead` reports the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import TypeVar, cast

__all__ = ["TlsAcceptor", "dial_tls", "handshake_failure"]

log = logging.getLogger("hive.cluster")

P = TypeVar("P", bound=asyncio.Protocol)

# What an OpenSSL reason means for a cluster operator; the reason itself is kept in brackets.
_MEANING = {
    "TLSV1_ALERT_UNKNOWN_CA": "the other node does not trust this node's certificate",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the other node refused this node's certificate",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the other node refused this node's certificate",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED":
        "the other node requires a certificate and this node sent none",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE":
        "the dialing node sent no certificate (client-authentication-mode REQUIRED)",
    "WRONG_VERSION_NUMBER": "the other end does not speak TLS (is cluster TLS enabled there?)",
    "HTTP_REQUEST": "the other end does not speak TLS",
    "UNSUPPORTED_PROTOCOL": "no TLS protocol version in common",
    "TLSV1_ALERT_PROTOCOL_VERSION": "no TLS protocol version in common",
    "NO_PROTOCOLS_AVAILABLE": "no TLS protocol version in common",
    "NO_SHARED_CIPHER": "no cipher suite in common",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the other node ended the handshake (no common cipher "
                                     "suite or protocol?)",
}


def handshake_failure(exc: BaseException) -> str:
    """One line saying why a handshake failed, for the operator."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or ""
        if reason in _MEANING:
            return f"{_MEANING[reason]} ({reason.lower().replace('_', ' ')})"
        if reason:
            return reason.lower().replace("_", " ")
        return str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError | ConnectionAbortedError):
        return f"no handshake in time ({exc})"
    return str(exc) or type(exc).__name__


def _warn(peer: str, exc: BaseException) -> None:
    log.warning("cluster TLS handshake with %s failed: %s", peer, handshake_failure(exc))


def _peer(transport: asyncio.BaseTransport) -> str:
    address = transport.get_extra_info("peername")
    return f"{address[0]}:{address[1]}" if address else "an unknown peer"


class _NodeTls(sslproto.SSLProtocol):
    """asyncio's TLS protocol, sending the alert that says why a handshake failed.

    asyncio's own closes the connection at once, the alert still in its outgoing buffer
    (CPython 3.11 to 3.13, whose ``_on_handshake_complete`` and ``_process_outgoing`` these
    are); flushing it first lets the other node log the reason instead of a reset.
    """

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        if handshake_exc is not None:
            with contextlib.suppress(Exception):  # best effort: the link fails either way
                self._process_outgoing()  # type: ignore[attr-defined]
        super()._on_handshake_complete(handshake_exc)


def _node_tls(app: asyncio.BaseProtocol, context: ssl.SSLContext,
              handshake: asyncio.Future[None], timeout: float, *, server_side: bool,
              server_hostname: str | None = None) -> _NodeTls:
    return _NodeTls(asyncio.get_running_loop(), app, context, handshake,
                    server_side=server_side, server_hostname=server_hostname,
                    ssl_handshake_timeout=timeout)  # type: ignore[arg-type]


class TlsAcceptor:
    """A protocol factory for ``loop.create_server(..., ssl=None)`` that does TLS itself.

    Each accepted connection gets a :class:`_NodeTls`, made here rather than by the loop so
    that the handshake's outcome can be seen: the link's own protocol (``protocol_factory``)
    sees the connection once it is secure, and a failed or overdue handshake is logged.
    (``loop.start_tls`` would be the public way, but under uvloop 0.23 a ClientHello that is
    already waiting is sometimes not read, and the handshake hangs until its deadline.)
    """

    def __init__(self, protocol_factory: Callable[[], asyncio.Protocol],
                 context: ssl.SSLContext, handshake_timeout: float) -> None:
        self._protocol_factory = protocol_factory
        self._context = context
        self._timeout = handshake_timeout
        self._handshaking: set[asyncio.Transport] = set()

    def __call__(self) -> asyncio.Protocol:
        return _Accepting(self)

    def _secure(self, accepted: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, accepted)  # uvloop's are not asyncio subclasses
        loop = asyncio.get_running_loop()
        peer = _peer(transport)
        handshake: asyncio.Future[None] = loop.create_future()
        tls = _node_tls(self._protocol_factory(), self._context, handshake, self._timeout,
                        server_side=True)
        # Swapped in before the loop reads anything: the ClientHello goes to the TLS layer.
        transport.set_protocol(tls)
        tls.connection_made(transport)
        self._handshaking.add(transport)

        def done(future: asyncio.Future[None]) -> None:
            self._handshaking.discard(transport)
            exc = None if future.cancelled() else future.exception()
            if isinstance(exc, ssl.SSLError | TimeoutError | ConnectionAbortedError):
                _warn(peer, exc)
            elif exc is not None:  # the dialer hung up: nothing the operator can act on
                log.debug("cluster TLS handshake with %s ended: %r", peer, exc)
            if exc is not None:
                transport.abort()

        handshake.add_done_callback(done)

    def close(self) -> None:
        """Abort the connections still handshaking (the server is closing)."""
        for transport in list(self._handshaking):
            transport.abort()


class _Accepting(asyncio.Protocol):
    """A fresh connection's first protocol: hands it to the TLS layer at once."""

    def __init__(self, acceptor: TlsAcceptor) -> None:
        self._acceptor = acceptor

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._acceptor._secure(transport)


class _FirstRead(asyncio.Protocol):
    """Stands in front of a dialled link until its first bytes arrive.

    Under TLS 1.3 the dialing side's handshake ends before the other node has checked this
    node's certificate; a refusal arrives as an alert on the first read. An ssl.SSLError
    before any data is therefore a handshake failure, and said so. On the first data this
    protocol steps aside, so the link itself reads from then on.
    """

    def __init__(self, link: asyncio.Protocol, peer: str) -> None:
        self.link = link
        self._peer = peer
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.link.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.set_protocol(self.link)
        self.link.data_received(data)

    def eof_received(self) -> bool | None:
        return self.link.eof_received()

    def pause_writing(self) -> None:
        self.link.pause_writing()

    def resume_writing(self) -> None:
        self.link.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError):
            _warn(self._peer, exc)
        self.link.connection_lost(exc)


async def dial_tls(protocol_factory: Callable[[], P], host: str, port: int,
                   context: ssl.SSLContext, handshake_timeout: float,
                   ) -> tuple[asyncio.Transport, P]:
    """Open a TLS connection to a node; returns the transport and the link's protocol.

    Raises ssl.SSLError or ConnectionAbortedError (already logged as a WARNING) when the
    handshake fails or misses its deadline, and other OSErrors, not logged, when the node
    cannot be reached.
    """
    loop = asyncio.get_running_loop()
    peer = f"{host}:{port}"
    link = protocol_factory()
    watch = _FirstRead(link, peer)
    handshake: asyncio.Future[None] = loop.create_future()
    tls = _node_tls(watch, context, handshake, handshake_timeout, server_side=False,
                    server_hostname=host)
    transport, _ = await loop.create_connection(lambda: tls, host, port)
    try:
        await handshake
    except (ssl.SSLError, ConnectionAbortedError) as exc:  # the latter: handshake deadline
        _warn(peer, exc)
        transport.abort()
        raise
    except BaseException:  # cancelled, or the node hung up
        transport.abort()
        raise
    assert watch.transport is not None  # the TLS protocol made the link's connection
    return watch.transport, link
