"""A small HTTP/1.1 server for the REST API: h11 parses and frames, asyncio carries the bytes.

Only what a JSON API needs: GET documents, actions by method on path patterns (a POST with
a small body or none), keep-alive, pipelining (answers in order), an idle
deadline per connection, a cap on what a request may send, and authentication by a
:class:`~hive_core.admin.Gatekeeper` when one is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http
import ipaddress
import json
import logging
import ssl
import tempfile
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import h11

from hive_core.admin._auth import Access, Gatekeeper, refusal_log

log = logging.getLogger("hive.admin")

Document = Callable[[], Any]
"""Builds the JSON value of one GET route when it is asked for."""


@dataclass(frozen=True)
class Request:
    """What an :data:`Action` is given: the method, the path, the values of the pattern's
    ``{name}`` segments (percent-decoded), and the body (at most ``MAX_REQUEST_BODY`` bytes)."""

    method: str
    path: str
    params: dict[str, str]
    body: bytes = b""
    query: str = ""  # after the "?", undecoded
    headers: tuple[tuple[bytes, bytes], ...] = ()  # names in lower case, as h11 gives them
    body_file: Path | None = None  # an :class:`Upload`'s body, streamed to this file
    secure: bool = False  # it came over TLS
    peer: str = "?"  # the client's address

    def header(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lower case) if it came once, else None."""
        values = [value for key, value in self.headers if key == name]
        return values[0] if len(values) == 1 else None


@dataclass(frozen=True)
class Reply:
    status: int
    value: Any
    headers: tuple[tuple[bytes, bytes], ...] = ()  # more response headers (Set-Cookie...)


@dataclass(frozen=True)
class Raw:
    """A body that is not JSON (a document or a reply may be one)."""

    content_type: bytes
    body: bytes


Action = Callable[[Request], "Reply | Awaitable[Reply]"]
"""Answers one method on a path pattern (``/api/v1/x/{id}``), on the event loop: it must not
block (long work goes to a task it starts and a later GET reports on). It may return an
awaitable (a password check in a thread): the connection reads nothing more until it is
answered."""

IDLE_TIMEOUT = 30.0
HEAD_TIMEOUT = 10.0  # from a request head's first byte to its end
MAX_CONNECTIONS_PER_ADDRESS = 32
MAX_REQUEST_BODY = 64 * 1024
_SERVER = b"Hive"
_crowded = refusal_log()  # one line per 10 s for addresses past the connection cap


@dataclass(frozen=True)
class Upload:
    """A POST path whose body may be big: ``check`` answers the request head (a refusal, or
    None to go on) before a byte of the body is read, and the body goes to a file in
    ``folder()`` (the action finds it as ``Request.body_file``), never to memory."""

    limit: int
    folder: Callable[[], Path]
    check: Callable[[Request], Reply | None]


@dataclass(frozen=True)
class Routes:
    """What a connection answers: ``documents`` by path (GET), ``actions`` by path pattern
    and method, and with a gatekeeper, the ``public`` documents a request without
    credentials gets instead (for a load balancer)."""

    documents: dict[str, Document]
    gatekeeper: Gatekeeper | None = None
    public: dict[str, Document] = field(default_factory=dict)
    actions: dict[str, dict[str, Action]] = field(default_factory=dict)
    uploads: dict[str, Upload] = field(default_factory=dict)  # by path (POST only)
    json_posts: bool = False  # a POST must say Content-Type: application/json

    def action(self, path: str) -> tuple[dict[str, Action], dict[str, str]] | None:
        """The actions of the first pattern ``path`` matches, and its segments' values."""
        parts = path.split("/")
        for pattern, methods in self.actions.items():
            wanted = pattern.split("/")
            if len(wanted) != len(parts):
                continue
            params: dict[str, str] = {}
            for want, part in zip(wanted, parts, strict=True):
                if want.startswith("{") and want.endswith("}") and part:
                    params[want[1:-1]] = urllib.parse.unquote(part)  # "a%20b": the id "a b"
                elif want != part:
                    break
            else:
                return methods, params
        return None


class HttpConnection(asyncio.Protocol):
    """One client connection: requests in through h11, JSON responses out.

    A request head must be whole within ``HEAD_TIMEOUT`` of its first byte (a client that
    trickles it a byte at a time is closed; an idle connection has ``IDLE_TIMEOUT``), and one
    address holds at most ``MAX_CONNECTIONS_PER_ADDRESS`` connections of a server
    (``per_address``, shared by its connections).
    """

    def __init__(self, routes: Routes | dict[str, Document],
                 per_address: Counter[str] | None = None) -> None:
        self._routes = routes if isinstance(routes, Routes) else Routes(routes)
        self._http = h11.Connection(h11.SERVER, max_incomplete_event_size=16 * 1024)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._request: h11.Request | None = None
        self._body = bytearray()
        self._limit = MAX_REQUEST_BODY
        self._idle: asyncio.TimerHandle | None = None
        self._checking: asyncio.Future[Any] | None = None  # a password or an action pending
        self._tls = False
        self._loopback = False
        self._spool: IO[bytes] | None = None  # an Upload's body being written
        self._spooled = 0
        self._body_file: Path | None = None  # ...and once it is whole, until answered
        self._per_address = per_address if per_address is not None else Counter()
        self._counted = False
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        self._tls = transport.get_extra_info("sslcontext") is not None
        local = transport.get_extra_info("sockname")
        self._loopback = isinstance(local, tuple) and bool(local) and _is_loopback(local[0])
        if self._per_address[self._peer] >= MAX_CONNECTIONS_PER_ADDRESS:
            _crowded.warn("crowded", "HTTP: %s holds %d connections already: new ones are "
                          "closed", self._peer, MAX_CONNECTIONS_PER_ADDRESS)
            transport.close()
            self._transport = None
            return
        self._per_address[self._peer] += 1
        self._counted = True
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted:
            self._counted = False
            self._per_address[self._peer] -= 1
            if self._per_address[self._peer] <= 0:
                del self._per_address[self._peer]
        if self._head_timer is not None:
            self._head_timer.cancel()
        if self._idle is not None:
            self._idle.cancel()
        if self._checking is not None:
            self._checking.cancel()
        self._transport = None
        self._drop_upload()

    def _drop_upload(self) -> None:
        """Remove an upload's file that no action took."""
        if self._spool is not None:
            self._spool.close()
            Path(self._spool.name).unlink(missing_ok=True)
            self._spool = None
        if self._body_file is not None:
            self._body_file.unlink(missing_ok=True)
            self._body_file = None

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(IDLE_TIMEOUT, self._close)

    def _arm_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = asyncio.get_running_loop().call_later(HEAD_TIMEOUT, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self._request is None and self._checking is None:
            self._refuse(408, f"no whole request head within {HEAD_TIMEOUT:g} s")

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()  # what was written is still sent
            self._transport = None

    def data_received(self, data: bytes) -> None:
        self._arm_idle()
        if self._request is None and self._checking is None and self._head_timer is None:
            self._arm_head()  # a request head began: it has HEAD_TIMEOUT to be whole
        self._http.receive_data(data)
        self._next_events()

    def eof_received(self) -> bool | None:
        self._http.receive_data(b"")
        self._next_events()
        # Half-closed: keep writing the answers still due (h11 closes after the last one).
        # asyncio's TLS transport cannot, and warns when asked to.
        return None if self._tls else True

    def _next_events(self) -> None:
        # While a password is checked, later pipelined requests wait in h11's buffer.
        while self._transport is not None and self._checking is None:
            try:
                event = self._http.next_event()
            except h11.RemoteProtocolError as exc:
                self._refuse(exc.error_status_hint, str(exc))
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                if self._head_timer is not None:
                    self._head_timer.cancel()
                    self._head_timer = None
                self._request = event
                self._body = bytearray()
                self._limit = MAX_REQUEST_BODY
                if not self._start_upload(event):
                    return
            elif isinstance(event, h11.Data):
                if self._spool is not None:
                    self._spooled += len(event.data)
                    if self._spooled > self._limit:
                        self._refuse(413, "request body too large")
                        return
                    self._spool.write(event.data)
                    continue
                self._body += event.data  # kept for an action; a GET's is dropped
                if len(self._body) > self._limit:
                    self._refuse(413, "request body too large")
                    return
            elif isinstance(event, h11.EndOfMessage):
                request, self._request = self._request, None
                assert request is not None
                if self._spool is not None:
                    self._spool.close()
                    self._body_file, self._spool = Path(self._spool.name), None
                self._admit(request, bytes(self._body))
                self._body = bytearray()
            elif isinstance(event, h11.ConnectionClosed):
                self._close()
                return

    def _start_upload(self, event: h11.Request) -> bool:
        """For an :class:`Upload` path: check the head, then spool; False when refused."""
        target = event.target.decode("ascii", "replace")
        path, _, query = target.partition("?")
        upload = self._routes.uploads.get(path)
        if upload is None or event.method != b"POST":
            return True
        head = Request("POST", path, {}, b"", query, tuple(event.headers), None, self._tls,
                       self._peer)
        refusal = upload.check(head)
        if refusal is not None:
            self._request = None
            self._respond(refusal.status, refusal.value,
                          [*refusal.headers, (b"connection", b"close")])
            self._close()  # the body is never read
            return False
        folder = upload.folder()
        folder.mkdir(parents=True, exist_ok=True)
        self._spool = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed at the body's end)
            dir=folder, prefix=".upload-", delete=False)
        self._spooled = 0
        self._limit = upload.limit
        return True

    def _admit(self, request: h11.Request, body: bytes) -> None:
        gatekeeper = self._routes.gatekeeper
        if gatekeeper is None:
            self._finish(request, body, Access.GRANTED)
            return
        values = [value for name, value in request.headers if name == b"authorization"]
        if len(values) > 1:
            access: Access | asyncio.Future[Access] = Access.DENIED
        else:
            access = gatekeeper.admit(values[0] if values else None, self._peer)
        if isinstance(access, Access):
            self._finish(request, body, access)
            return
        self._checking = access
        assert self._transport is not None
        self._transport.pause_reading()
        access.add_done_callback(lambda done: self._checked(request, body, done))

    def _checked(self, request: h11.Request, body: bytes,
                 done: asyncio.Future[Access]) -> None:
        self._checking = None
        if self._transport is None or done.cancelled():
            return
        if done.exception() is not None:
            log.error("REST API: checking a password failed", exc_info=done.exception())
            self._finish(request, body, Access.DENIED)
        else:
            self._finish(request, body, done.result())
        if self._transport is not None:
            self._transport.resume_reading()
            self._next_events()

    def _finish(self, request: h11.Request, body: bytes, access: Access) -> None:
        """Answer ``request`` and make ready for the next one on this connection."""
        self._answer(request, body, access)
        if self._checking is None:
            self._next_cycle()

    def _next_cycle(self) -> None:
        self._drop_upload()
        if self._http.our_state is h11.MUST_CLOSE:
            self._close()
        elif self._transport is not None:
            self._http.start_next_cycle()
            if self._http.trailing_data[0]:  # a pipelined request began already
                self._arm_head()

    def _answer(self, request: h11.Request, body: bytes, access: Access) -> None:
        target = request.target.decode("ascii", "replace")
        path, _, query = target.partition("?")
        path = path.rstrip("/") or "/"
        method = request.method.decode("ascii", "replace")
        documents = self._routes.documents
        if access is Access.ANONYMOUS and path in self._routes.public and method == "GET":
            documents = self._routes.public
        elif access is not Access.GRANTED:
            self._unauthorized(path, access)
            return
        document = documents.get(path)
        if document is None:
            self._act(Request(method, path, {}, body, query, tuple(request.headers),
                              self._body_file, self._tls, self._peer))
        elif method != "GET":
            self._respond(405, {"title": "Method not allowed",
                                "detail": f"{path} answers GET only"}, [(b"allow", b"GET")])
        else:
            try:
                value = document()
            except Exception:
                log.exception("REST API: building %s failed", path)
                self._respond(500, {"title": "Internal error", "detail": path})
            else:
                if isinstance(value, Reply):  # a document that says how it is (readiness)
                    self._respond(value.status, value.value)
                else:
                    self._respond(200, value)

    def _act(self, request: Request) -> None:
        path, method = request.path, request.method
        found = self._routes.action(path)
        if found is None:
            self._respond(404, {"title": "Not found", "detail": f"no resource at {path}"})
            return
        methods, params = found
        action = methods.get(method)
        if action is None:
            allowed = ", ".join(sorted(methods))
            self._respond(405, {"title": "Method not allowed",
                                "detail": f"{path} answers {allowed}"},
                          [(b"allow", allowed.encode())])
            return
        if method != "GET":
            refusal = self._cross_site(request)
            if refusal is not None:
                self._respond(*refusal)
                return
        try:
            reply = action(dataclasses.replace(request, params=params))
        except Exception:
            log.exception("REST API: %s %s failed", method, path)
            self._respond(500, {"title": "Internal error", "detail": f"{method} {path}"})
            return
        if isinstance(reply, Reply):
            self._respond(reply.status, reply.value, list(reply.headers))
            return
        # Answered later: nothing more is read from this connection until then.
        waiting = self._checking = asyncio.ensure_future(reply)
        assert self._transport is not None
        self._transport.pause_reading()
        waiting.add_done_callback(lambda done: self._acted(request, done))

    def _cross_site(self, request: Request) -> tuple[int, dict[str, str]] | None:
        """Why a request that changes state may not: it comes from another site's page (its
        ``Origin``, ``Sec-Fetch-Site``), through a name that is not this listener's (DNS
        rebinding onto a loopback listener), or, with ``json_posts``, in a form's content
        type (a page on another site can send a form without asking; JSON it cannot)."""
        host = (request.header(b"host") or b"").decode("latin-1").strip().lower()
        name = urllib.parse.urlsplit(f"//{host}").hostname or ""
        if self._loopback and name != "localhost" and not _is_ip(name):
            return 403, {"title": "Forbidden",
                         "detail": f"Host {host!r} does not name this listener"}
        origin = request.header(b"origin")
        if origin is not None and (origin == b"null" or host != urllib.parse.urlsplit(
                origin.decode("latin-1")).netloc.lower()):
            return 403, {"title": "Forbidden",
                         "detail": "a request from another site's page may not change state"}
        if request.header(b"sec-fetch-site") in (b"cross-site", b"same-site"):
            return 403, {"title": "Forbidden",
                         "detail": "a request from another site's page may not change state"}
        if self._routes.json_posts:
            content_type = (request.header(b"content-type") or b"").partition(b";")[0]
            if content_type.strip().lower() != b"application/json":
                return 415, {"title": "Unsupported media type",
                             "detail": "a request that changes state must be sent as "
                                       "Content-Type: application/json"}
        return None

    def _acted(self, request: Request, done: asyncio.Future[Any]) -> None:
        self._checking = None
        if self._transport is None or done.cancelled():
            self._drop_upload()
            return
        if done.exception() is not None:
            log.error("%s %s failed", request.method, request.path, exc_info=done.exception())
            self._respond(500, {"title": "Internal error",
                                "detail": f"{request.method} {request.path}"})
        else:
            reply = done.result()
            self._respond(reply.status, reply.value, list(reply.headers))
        self._next_cycle()
        if self._transport is not None:
            self._transport.resume_reading()
            self._next_events()

    def _unauthorized(self, path: str, access: Access) -> None:
        gatekeeper = self._routes.gatekeeper
        assert gatekeeper is not None
        if access is Access.ANONYMOUS:
            gatekeeper.refused_anonymous(self._peer, path)
            detail = f"{path} needs credentials"
        else:
            detail = "the credentials are wrong"
        self._respond(401, {"title": "Unauthorized", "detail": detail},
                      [(b"www-authenticate", challenge) for challenge in gatekeeper.challenges])

    def _respond(self, status: int, value: Any,
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:
        if isinstance(value, Raw):
            body, content_type = value.body, value.content_type
        else:
            body, content_type = json.dumps(value, indent=2).encode() + b"\n", b"application/json"
        headers = [(b"content-type", content_type),
                   (b"content-length", str(len(body)).encode()), (b"server", _SERVER),
                   *(extra or ())]
        out = self._http.send(h11.Response(status_code=status, headers=headers,
                                           reason=http.HTTPStatus(status).phrase.encode()))
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


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.partition("%")[0]).is_loopback
    except ValueError:
        return False


async def serve_http(routes: Routes | dict[str, Document], host: str, port: int,
                     context: ssl.SSLContext | None = None,
                     handshake_timeout: float | None = None) -> asyncio.Server:
    """Listen on host:port (TLS with ``context``); each connection answers from ``routes``."""
    loop = asyncio.get_running_loop()
    per_address: Counter[str] = Counter()
    return await loop.create_server(lambda: HttpConnection(routes, per_address), host, port,
                                    reuse_address=True, ssl=context,
                                    ssl_handshake_timeout=handshake_timeout if context else None)
