"""A small HTTP/1.1 server for the REST API: h11 parses and frames, asyncio carries the bytes.

Only what a JSON API needs: GET routes answered at once, keep-alive, pipelining, an idle
deadline per connection and a cap on what a request may send.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import h11

log = logging.getLogger("hive.admin")

Document = Callable[[], Any]
"""Builds the JSON value of one GET route when it is asked for."""

IDLE_TIMEOUT = 30.0
MAX_REQUEST_BODY = 64 * 1024
_SERVER = b"Hive"


class HttpConnection(asyncio.Protocol):
    """One client connection: requests in through h11, JSON responses out."""

    def __init__(self, routes: dict[str, Document]) -> None:
        self._routes = routes
        self._http = h11.Connection(h11.SERVER, max_incomplete_event_size=16 * 1024)
        self._transport: asyncio.Transport | None = None
        self._request: h11.Request | None = None
        self._body_size = 0
        self._idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._transport = None

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(IDLE_TIMEOUT, self._close)

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        self._arm_idle()
        self._http.receive_data(data)
        while self._transport is not None:
            try:
                event = self._http.next_event()
            except h11.RemoteProtocolError as exc:
                self._refuse(exc.error_status_hint, str(exc))
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._request = event
                self._body_size = 0
            elif isinstance(event, h11.Data):
                self._body_size += len(event.data)  # GET routes only: a body is read and dropped
                if self._body_size > MAX_REQUEST_BODY:
                    self._refuse(413, "request body too large")
                    return
            elif isinstance(event, h11.EndOfMessage):
                request, self._request = self._request, None
                assert request is not None
                self._answer(request)
                if self._http.our_state is h11.MUST_CLOSE:
                    self._close()
                    return
                self._http.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                self._close()
                return

    def _answer(self, request: h11.Request) -> None:
        path = request.target.decode("ascii", "replace").split("?", 1)[0].rstrip("/") or "/"
        document = self._routes.get(path)
        if document is None:
            self._respond(404, {"title": "Not found", "detail": f"no resource at {path}"})
        elif request.method != b"GET":
            self._respond(405, {"title": "Method not allowed",
                                "detail": f"{path} answers GET only"}, [(b"allow", b"GET")])
        else:
            try:
                value = document()
            except Exception:
                log.exception("REST API: building %s failed", path)
                self._respond(500, {"title": "Internal error", "detail": path})
            else:
                self._respond(200, value)

    def _respond(self, status: int, value: Any,
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:
        body = json.dumps(value, indent=2).encode() + b"\n"
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode()), (b"server", _SERVER),
                   *(extra or ())]
        out = self._http.send(h11.Response(status_code=status, headers=headers))
        out = (out or b"") + (self._http.send(h11.Data(data=body)) or b"")
        out += self._http.send(h11.EndOfMessage()) or b""
        if self._transport is not None:
            self._transport.write(out)

    def _refuse(self, status: int, why: str) -> None:
        """A request h11 cannot take: answer it if the protocol still allows, then close."""
        if self._http.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            with contextlib.suppress(h11.LocalProtocolError):
                self._respond(status, {"title": "Bad request", "detail": why},
                              [(b"connection", b"close")])
        self._close()


async def serve_http(routes: dict[str, Document], host: str,
                     port: int) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: HttpConnection(routes), host, port,
                                    reuse_address=True)
