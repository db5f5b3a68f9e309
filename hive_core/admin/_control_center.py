"""The control center: web pages an operator looks at the cluster with, served by every node.

Plain files the package ships (``admin/control_center/``: HTML, one script, one style sheet; no
build step, no library: the charts are SVG drawn by the script) and a small JSON API under
``/cc/api`` they read. It runs on its own listener (``<control-center><listeners>``, HTTP on
127.0.0.1:8080 unless told otherwise), on the same HTTP server as the REST API.

Every page and every API call needs a login. ``POST /login`` checks the password against the
configured hash (in a thread: a key derivation takes about 0.1 s) and sets a random session
cookie (HttpOnly, SameSite=Strict, Secure on HTTPS); a session ends at logout or after
``<session-timeout>`` seconds without use. A call that changes state must also carry the header
``X-Hive-Control-Center`` (a form on another site cannot set it), and is logged with the user:
logins, logouts, client disconnects, backups made and imported.

What the pages show of other nodes comes from the cluster: every node's heartbeat carries its
load (connections, sessions, messages in and out), so any node's overview has the whole
cluster; the retained messages are on every node; subscriptions are this node's sessions' and
the filters each other node announced; a client is searched among this node's sessions and
the cluster's directory of who holds which session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import secrets
import time
import urllib.parse
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from hive_core import __version__
from hive_core.admin._auth import LoginGuard, refusal_log
from hive_core.admin._http import Action, Raw, Reply, Request, Routes, Upload, serve_http
from hive_core.admin._rest import https_context
from hive_core.config import HttpsListener, PasswordHash
from hive_core.net import bound_address, listen_error
from hive_ext_api.backup import BackupError

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from hive_core.admin._backups import Backups
    from hive_core.admin._status import NodeStatus
    from hive_core.cluster import ClusterStats
    from hive_core.config import ControlCenter as ControlCenterConfig
    from hive_core.config import HttpListener

log = logging.getLogger("hive.control-center")

API = "/cc/api"
COOKIE = "hive_cc"
ACTION_HEADER = b"x-hive-control-center"
SAMPLE_INTERVAL = 2.0
SAMPLES = 300  # ten minutes of charts at SAMPLE_INTERVAL
LIST_LIMIT = 200
MAX_UPLOAD = 256 * 2**20  # a backup file sent from the browser, streamed to the backup folder
_PAGES = {"/": ("index.html", "text/html; charset=utf-8"),
          "/login": ("login.html", "text/html; charset=utf-8"),
          "/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/style.css": ("style.css", "text/css; charset=utf-8")}


class ControlCenterNode(Protocol):
    """What the control center shows of a node and does to it (the node answers)."""

    @property
    def node_id(self) -> str: ...

    def node_loads(self) -> dict[str, tuple[float, list[int]]]:
        """Every node's last known load, by node id: (Unix time it was taken, [connections,
        sessions, messages in, messages out])."""
        ...

    async def find_clients(self, text: str, limit: int) -> list[dict[str, Any]]:
        """Clients whose id contains ``text``: this node's sessions, and the cluster's (as the
        nodes that hold them answer; their rows hold None where a node does not answer)."""
        ...

    async def client_details(self, client_id: str) -> dict[str, Any] | None:
        """One session: state, subscriptions, queue, from this node or the node that holds
        it; None when no node has it (or its node does not answer)."""
        ...

    def disconnect_client(self, client_id: str) -> str | None:
        """Close the client's connection on this node; why not, or None when done."""
        ...

    def retained_view(self, text: str, limit: int) -> dict[str, Any]:
        """Retained messages whose topic contains ``text``."""
        ...

    def subscriptions_view(self, text: str, limit: int) -> dict[str, Any]:
        """Topic filters containing ``text``: this node's (with how many sessions) and each
        other node's."""
        ...

    def extensions_view(self) -> list[dict[str, Any]]:
        """Every extension found: name, version, where from, active, why not, failures."""
        ...


@dataclass
class _Login:
    user: str
    expires: float  # monotonic


@dataclass
class _Series:
    """One node's load over the last minutes, as it arrived: (time, connections, sessions,
    messages in, messages out)."""

    points: deque[tuple[float, int, int, int, int]] = field(
        default_factory=lambda: deque(maxlen=SAMPLES))

    def add(self, at: float, load: list[int]) -> None:
        if not self.points or at > self.points[-1][0]:
            self.points.append((at, load[0], load[1], load[2], load[3]))

    def rates(self) -> list[list[float]]:
        """[time, messages in/s, messages out/s, connections] between successive points."""
        out = []
        points = list(self.points)
        for before, after in itertools.pairwise(points):
            span = after[0] - before[0]
            if span <= 0:
                continue
            out.append([round(after[0], 3), round(max(0, after[3] - before[3]) / span, 1),
                        round(max(0, after[4] - before[4]) / span, 1), after[1]])
        return out


class ControlCenter:
    """The pages, the logins, the API, and the samples behind the charts."""

    def __init__(self, config: ControlCenterConfig, node: ControlCenterNode,
                 status: NodeStatus, backups: Backups | None) -> None:
        self.config = config
        self.node = node
        self.status = status
        self.backups = backups
        self.bound: list[tuple[str, int]] = []
        self._users = {user.name: PasswordHash.parse(user.password_hash)
                       for user in config.users}
        self._logins: dict[str, _Login] = {}
        self._login_guard = LoginGuard()
        self._refusals = refusal_log()
        self._series: dict[str, _Series] = {}
        self._servers: list[asyncio.Server] = []
        self._sampling = anyio.CancelScope()  # the sampler's, in the node's task group
        self._files = {path: resources.files("hive_core.admin").joinpath(
            "control_center", name).read_bytes() for path, (name, _type) in _PAGES.items()}

    # ------------------------------------------------------------------ serving

    async def start(self, tasks: TaskGroup) -> None:
        """Open the listeners; the load sampler runs in ``tasks`` (the node's) until
        :meth:`close`."""
        routes = self.routes()
        for listener in self.config.effective_listeners():
            context, handshake, kind = None, None, "http"
            if isinstance(listener, HttpsListener):
                context = https_context(listener)
                handshake = listener.tls.handshake_timeout / 1000
                kind = "https"
            try:
                server = await serve_http(routes, listener.bind_address, listener.port,
                                          context, handshake)
            except OSError as exc:
                raise listen_error(f"<control-center><listeners><{kind}>",
                                   listener.bind_address, listener.port, exc) from exc
            self._servers.append(server)
            host, port = bound_address(server)
            self.bound.append((host, port))
            log.info("Started control center%s on address %s and on port %d",
                     " over HTTPS" if context else "", host, port)
            self._warn_plain(listener, host, port, context is not None)
        tasks.start_soon(self._sample)

    @staticmethod
    def _warn_plain(listener: HttpListener, host: str, port: int, tls: bool) -> None:
        from hive_core.config import is_loopback
        if not tls and not is_loopback(listener.bind_address):
            log.warning("control center on %s:%d takes passwords over plain HTTP: anyone on "
                        "the way can read them; prefer an <https> listener", host, port)

    def close(self) -> None:
        for server in self._servers:
            server.close()
        self._login_guard.close()
        self._sampling.cancel()

    def routes(self) -> Routes:
        guarded: dict[str, dict[str, Action]] = {
            f"{API}/me": {"GET": self._me},
            f"{API}/overview": {"GET": self._overview},
            f"{API}/clients": {"GET": self._clients},
            f"{API}/clients/{{id}}": {"GET": self._client},
            f"{API}/clients/{{id}}/disconnect": {"POST": self._disconnect},
            f"{API}/retained": {"GET": self._retained},
            f"{API}/subscriptions": {"GET": self._subscriptions},
            f"{API}/extensions": {"GET": self._extensions},
            f"{API}/backups/{{id}}/file": {"GET": self._download},
            f"{API}/backups/upload": {"POST": self._upload},
        }
        if self.backups is not None:
            for pattern, methods in self.backups.actions(API).items():
                guarded[pattern] = {method: self._logged_backup(method, action)
                                    for method, action in methods.items()}
        actions: dict[str, dict[str, Action]] = {
            path: {method: self._guard(action) for method, action in methods.items()}
            for path, methods in guarded.items()}
        actions["/"] = {"GET": self._page("/")}
        actions["/app.js"] = {"GET": self._file("/app.js")}
        actions["/style.css"] = {"GET": self._file("/style.css")}
        actions["/login"] = {"GET": self._login_page, "POST": self._login}
        actions["/logout"] = {"POST": self._logout}
        uploads = {}
        if self.backups is not None:
            backups = self.backups
            uploads[f"{API}/backups/upload"] = Upload(MAX_UPLOAD, lambda: backups.folder,
                                                      self._refusal)
        return Routes({}, actions=actions, uploads=uploads)

    # ------------------------------------------------------------------ logins

    def _user_of(self, request: Request) -> str | None:
        cookie = request.header(b"cookie")
        if cookie is None:
            return None
        token = None
        for part in cookie.decode("latin-1").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                token = value
        login = self._logins.get(token) if token else None
        now = time.monotonic()
        if login is None or login.expires < now:
            if login is not None:
                del self._logins[token]  # type: ignore[arg-type]
            return None
        login.expires = now + self.config.session_timeout  # a session lasts while used
        return login.user

    def _refusal(self, request: Request) -> Reply | None:
        """Why ``request`` (its head is enough) may not go on: no login, or a change of state
        without the control center's header; None when it may."""
        if self._user_of(request) is None:
            return Reply(401, {"title": "Unauthorized", "detail": "log in first"})
        if request.method != "GET" and request.header(ACTION_HEADER) is None:
            return Reply(403, {"title": "Forbidden",
                               "detail": "a request that changes state must come from the "
                                         "control center's pages"})
        return None

    def _guard(self, action: Action) -> Action:
        def guarded(request: Request) -> Reply | Awaitable[Reply]:
            refusal = self._refusal(request)
            if refusal is not None:
                return refusal
            user = self._user_of(request)
            assert user is not None
            return action(_with_user(request, user))
        return guarded

    def _page(self, path: str) -> Action:
        def page(request: Request) -> Reply:
            if self._user_of(request) is None:
                return Reply(303, Raw(b"text/plain", b"log in first\n"),
                             ((b"location", b"/login"),))
            return self._file(path)(request)  # type: ignore[return-value]
        return page

    def _file(self, path: str) -> Action:
        body, content_type = self._files[path], _PAGES[path][1].encode()

        def file(request: Request) -> Reply:
            return Reply(200, Raw(content_type, body),
                         ((b"cache-control", b"no-store"),
                          (b"content-security-policy",
                           b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
                          (b"x-content-type-options", b"nosniff")))
        return file

    def _login_page(self, request: Request) -> Reply:
        reply = self._file("/login")(request)
        assert isinstance(reply, Reply) and isinstance(reply.value, Raw)
        message = None
        if _query(request, "failed"):
            message = b"Wrong user name or password."
        elif _query(request, "wait"):
            message = b"Too many failed logins: wait a while, then try again."
        if message is not None:
            body = reply.value.body.replace(
                b"<!--MESSAGE-->", b'<p class="error" id="login-error">' + message + b"</p>")
            return Reply(200, Raw(reply.value.content_type, body), reply.headers)
        return reply

    def _login(self, request: Request) -> Awaitable[Reply]:
        form = urllib.parse.parse_qs(request.body.decode("utf-8", "replace"))
        user = (form.get("user") or [""])[0]
        password = (form.get("password") or [""])[0].encode()
        return self._check_login(user, password, request.secure, request.peer)

    async def _check_login(self, user: str, password: bytes, secure: bool,
                           peer: str) -> Reply:
        guard = self._login_guard
        wait = guard.wait_left(user, peer)
        if wait > 0 or guard.busy(peer):
            self._refusals.warn("throttled", "control center: login as %r from %s refused "
                                "without a check: %s", user[:64], peer,
                                f"{wait:.0f} s to wait after failures" if wait > 0
                                else "too many checks waiting")
            return Reply(303, Raw(b"text/plain", b"too many failed logins: wait\n"),
                         ((b"location", b"/login?wait=1"), (b"retry-after",
                                                          str(max(1, round(wait))).encode())))
        hashed = self._users.get(user)
        # An unknown user costs a derivation too, so that a user name cannot be probed.
        right = await guard.verify(peer, password, hashed or next(iter(self._users.values())))
        right = right and hashed is not None
        guard.settle(user, peer, right)
        if not right:
            self._refusals.warn("failed", "control center: failed login as %r from %s",
                                user[:64], peer)
            return Reply(303, Raw(b"text/plain", b"wrong user name or password\n"),
                         ((b"location", b"/login?failed=1"),))
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        for old in [t for t, login in self._logins.items() if login.expires < now]:
            del self._logins[old]
        self._logins[token] = _Login(user, now + self.config.session_timeout)
        log.info("control center: user %r logged in", user)
        cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
        if secure:  # Secure on an HTTP listener's answer: the browser would drop the cookie
            cookie += "; Secure"
        return Reply(303, Raw(b"text/plain", b"logged in\n"),
                     ((b"location", b"/"), (b"set-cookie", cookie.encode())))

    def _logout(self, request: Request) -> Reply:
        user = self._user_of(request)
        cookie = (request.header(b"cookie") or b"").decode("latin-1")
        for part in cookie.split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and value in self._logins:
                del self._logins[value]
        if user is not None:
            log.info("control center: user %r logged out", user)
        return Reply(303, Raw(b"text/plain", b"logged out\n"),
                     ((b"location", b"/login"),
                      (b"set-cookie", f"{COOKIE}=; Path=/; Max-Age=0".encode())))

    # ------------------------------------------------------------------ the API

    def _me(self, request: Request) -> Reply:
        return Reply(200, {"user": _user(request), "node_id": self.node.node_id,
                           "version": __version__})

    def _overview(self, request: Request) -> Reply:
        members = self.status.cluster_members()
        loads = self.node.node_loads()
        cluster = self.status.cluster_stats()
        nodes = []
        for member in members or []:
            series = self._series.get(member.node_id)
            rates = series.rates() if series is not None else []
            load = loads.get(member.node_id)
            nodes.append({
                "id": member.node_id, "state": member.state, "version": member.version,
                "address": f"{member.address.host}:{member.address.port}",
                "this_node": member.node_id == self.node.node_id,
                "connections": load[1][0] if load else None,
                "sessions": load[1][1] if load else None,
                "messages_in_per_second": rates[-1][1] if rates else None,
                "messages_out_per_second": rates[-1][2] if rates else None,
                "series": rates})
        if members is None:  # a single node
            series = self._series.get(self.node.node_id)
            rates = series.rates() if series is not None else []
            load = loads.get(self.node.node_id)
            nodes.append({"id": self.node.node_id, "state": "RUNNING", "version": __version__,
                          "address": None, "this_node": True,
                          "connections": load[1][0] if load else None,
                          "sessions": load[1][1] if load else None,
                          "messages_in_per_second": rates[-1][1] if rates else None,
                          "messages_out_per_second": rates[-1][2] if rates else None,
                          "series": rates})
        replication = None
        if cluster is not None:
            replication = {"replica_count": cluster.replica_count, "backups": cluster.backups,
                           "replicas_held": cluster.replicas_held,
                           "lag": cluster.replication_lag, "takeovers": cluster.takeovers,
                           "merges": cluster.merges}
        return Reply(200, {"node_id": self.node.node_id, "nodes": nodes,
                           "replication": replication, "latency": _latency_rows(cluster),
                           "sample_interval": SAMPLE_INTERVAL})

    async def _clients(self, request: Request) -> Reply:
        text = _query(request, "q")
        return Reply(200, {"items": await self.node.find_clients(text, LIST_LIMIT)})

    async def _client(self, request: Request) -> Reply:
        details = await self.node.client_details(request.params["id"])
        if details is None:
            return Reply(404, {"title": "Not found",
                               "detail": f"no session of {request.params['id']!r} in the "
                                         "cluster (or its node did not answer)"})
        return Reply(200, details)

    def _disconnect(self, request: Request) -> Reply:
        client_id = request.params["id"]
        problem = self.node.disconnect_client(client_id)
        if problem is not None:
            return Reply(409, {"title": "Conflict", "detail": problem})
        log.info("control center: user %r disconnected client %r", _user(request), client_id)
        return Reply(200, {"disconnected": client_id})

    def _retained(self, request: Request) -> Reply:
        return Reply(200, self.node.retained_view(_query(request, "q"), LIST_LIMIT))

    def _subscriptions(self, request: Request) -> Reply:
        return Reply(200, self.node.subscriptions_view(_query(request, "q"), LIST_LIMIT))

    def _extensions(self, request: Request) -> Reply:
        return Reply(200, {"items": self.node.extensions_view()})

    def _download(self, request: Request) -> Reply:
        backup = self.backups.find(request.params["id"]) if self.backups is not None else None
        path = backup.file if backup is not None else None
        if backup is None or path is None or not path.is_file():
            return Reply(404, {"title": "Not found", "detail": "no such backup file"})
        log.info("control center: user %r downloaded backup %s", _user(request), backup.id)
        return Reply(200, Raw(b"application/octet-stream", path.read_bytes()),
                     ((b"content-disposition",
                       f'attachment; filename="{path.name}"'.encode()),))

    def _upload(self, request: Request) -> Reply | Awaitable[Reply]:
        if self.backups is None:
            return Reply(404, {"title": "Not found", "detail": "this node keeps no backups"})
        return self._store_upload(request)

    async def _store_upload(self, request: Request) -> Reply:
        assert self.backups is not None
        if request.body_file is None:
            return Reply(400, {"title": "Not a backup", "detail": "no body"})
        try:
            backup = await self.backups.upload(request.body_file)
        except BackupError as exc:
            return Reply(400, {"title": "Not a backup", "detail": str(exc)})
        log.info("control center: user %r uploaded backup %s (%d bytes)", _user(request),
                 backup.id, backup.bytes or 0)
        return Reply(201, {"backup": backup.document()})

    def _logged_backup(self, method: str, action: Action) -> Action:
        if method == "GET":
            return action

        def logged(request: Request) -> Reply | Awaitable[Reply]:
            reply = action(request)
            if isinstance(reply, Reply) and reply.status < 300:
                what = (f"started the import of backup {request.params['id']}"
                        if "id" in request.params else "started a backup")
                log.info("control center: user %r %s", _user(request), what)
            return reply
        return logged

    # ------------------------------------------------------------------ charts

    async def _sample(self) -> None:
        """Sample the nodes' load for the charts until :meth:`close`."""
        with self._sampling:
            while True:
                self._sample_once()
                await anyio.sleep(SAMPLE_INTERVAL)

    def _sample_once(self) -> None:
        try:
            for node_id, (at, load) in self.node.node_loads().items():
                self._series.setdefault(node_id, _Series()).add(at, load)
            known = {m.node_id for m in self.status.cluster_members() or []}
            known.add(self.node.node_id)
            for gone in set(self._series) - known:
                del self._series[gone]
        except Exception:
            log.exception("control center: sampling the nodes' load failed")


_USER = "/user"  # the logged-in user, beside the path's parameters (no pattern names it)


def _latency_rows(cluster: ClusterStats | None) -> list[dict[str, Any]]:
    """Per other node: the p50 and p99 of each latency histogram (bucket upper bounds, in
    seconds; "inf" beyond the last), and how many of its messages were timed here."""
    if cluster is None:
        return []
    kinds = {"delivery": cluster.delivery_latency, "forward_ack": cluster.forward_ack_latency,
             "replication_ack": cluster.replication_ack_latency}
    rows = []
    for node in sorted({node for by_node in kinds.values() for node in by_node}):
        row: dict[str, Any] = {"node": node}
        for kind, by_node in kinds.items():
            latency = by_node.get(node)
            quantiles = [latency.quantile(q) for q in (0.5, 0.99)] if latency else [None]
            row[kind] = None if quantiles[0] is None else [
                "inf" if q == float("inf") else q for q in quantiles]
        delivered = cluster.delivery_latency.get(node)
        row["delivered"] = delivered.count if delivered else 0
        rows.append(row)
    return rows


def _with_user(request: Request, user: str) -> Request:
    return dataclasses.replace(request, params={**request.params, _USER: user})


def _user(request: Request) -> str:
    return request.params.get(_USER, "?")


def _query(request: Request, name: str) -> str:
    values = urllib.parse.parse_qs(request.query).get(name)
    return values[0] if values else ""

