"""TLS on node links, with the handshake's outcome said in the log.

asyncio reports a failed server-side handshake only in debug mode, and under TLS 1.3 a dialing
node learns that its certificate was refused only on its first read after the handshake. So
both ends of a node link go through here, and a failure becomes one WARNING line::

    cluster TLS handshake with 127.0.0.1:7801 failed: REASON

on the dialing node and on the accepting one, so that a node kept out knows why, and so do the
nodes it tried to join.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
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


class TlsAcceptor:
    """A protocol factory for ``loop.create_server(..., ssl=None)`` that does TLS itself.

    Each connection is handshaken with ``loop.start_tls`` under a deadline; the link's own
    protocol (from ``protocol_factory``) sees the connection only once it is secure. A failed
    handshake is logged and the connection closed.
    """

    def __init__(self, protocol_factory: Callable[[], asyncio.Protocol],
                 context: ssl.SSLContext, handshake_timeout: float) -> None:
        self._protocol_factory = protocol_factory
        self._context = context
        self._timeout = handshake_timeout
        self._handshakes: set[asyncio.Task[None]] = set()

    def __call__(self) -> asyncio.Protocol:
        return _Accepting(self)

    def _start(self, transport: asyncio.Transport) -> None:
        task = asyncio.get_running_loop().create_task(self._handshake(transport))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, transport: asyncio.Transport) -> None:
        peer = _peer(transport)
        protocol = self._protocol_factory()
        try:
            secure = await asyncio.get_running_loop().start_tls(
                transport, protocol, self._context, server_side=True,
                ssl_handshake_timeout=self._timeout)
        except ssl.SSLError as exc:
            _warn(peer, exc)
            transport.abort()
            return
        except (TimeoutError, ConnectionAbortedError) as exc:
            _warn(peer, exc)
            transport.abort()
            return
        except OSError as exc:  # the dialer hung up: nothing the operator can act on
            log.debug("cluster TLS handshake with %s ended: %s", peer, exc)
            transport.abort()
            return
        if secure is None:  # closed while handshaking
            return
        protocol.connection_made(secure)

    def close(self) -> None:
        """Abandon the handshakes under way (the server is closing)."""
        for task in self._handshakes:
            task.cancel()


class _Accepting(asyncio.Protocol):
    """Holds a fresh connection still, until its handshake task takes it over."""

    def __init__(self, acceptor: TlsAcceptor) -> None:
        self._acceptor = acceptor

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stream = cast(asyncio.Transport, transport)  # uvloop's are not asyncio subclasses
        stream.pause_reading()  # the ClientHello waits for the TLS layer
        self._acceptor._start(stream)


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
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.link.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._transport.set_protocol(self.link)
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
    peer = f"{host}:{port}"
    links: list[P] = []

    def watched() -> asyncio.Protocol:
        links.append(protocol_factory())
        return _FirstRead(links[0], peer)

    try:
        transport, _ = await asyncio.get_running_loop().create_connection(
            watched, host, port, ssl=context, server_hostname=host,
            ssl_handshake_timeout=handshake_timeout)
    except (ssl.SSLError, ConnectionAbortedError) as exc:  # the latter: handshake deadline
        _warn(peer, exc)
        raise
    return transport, links[0]
