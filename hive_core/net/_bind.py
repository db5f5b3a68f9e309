"""A bind that failed, told as the config element behind it.

"[Errno 98] error while attempting to bind on address ('0.0.0.0', 1883)" leaves the operator to
guess which of a node's listeners, REST API, cluster port or health check it was; a
:class:`ListenError` says ``<tcp-listener> on 0.0.0.0:1883: address already in use``.
"""

from __future__ import annotations

import os
import socket

__all__ = ["ListenError", "listen_error"]


class ListenError(OSError):
    """A listening socket could not be opened; ``str()`` names the config element and address.

    ``errno`` is the one of the underlying error (EADDRINUSE, EADDRNOTAVAIL, EACCES, ...).
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno  # OSError's own errno: kept for callers that check it

    def __str__(self) -> str:
        return str(self.args[0])


def _with_errno(exc: OSError) -> OSError:
    """The error that carries the errno: uvloop wraps it in one without ("could not bind")."""
    while not exc.errno and isinstance(exc.__cause__, OSError):
        exc = exc.__cause__
    return exc


def _reason(host: str, exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {host!r}: {exc.strerror}"
    if exc.errno and exc.errno > 0:
        text = os.strerror(exc.errno)
        return text[:1].lower() + text[1:]
    return str(exc)


def listen_error(element: str, host: str, port: int | str, exc: OSError) -> ListenError:
    """The error to raise when binding ``element`` (``"<tcp-listener>"``) on host:port failed."""
    shown = f"[{host}]" if ":" in host else host
    exc = _with_errno(exc)
    return ListenError(f"{element} on {shown}:{port}: {_reason(host, exc)}", exc.errno)
