"""Who may call the REST API: HTTP Basic against hashed passwords, and bearer tokens.

:class:`Gatekeeper` answers one request's ``Authorization`` header with an :class:`Access`.
A token is checked at once (SHA-256 of what was sent against each configured token's, in
constant time); a password costs a key derivation (about 0.1 s), run on one worker thread so
the event loop, which also serves MQTT, never waits for it, and a flood of wrong passwords
takes at most that one thread. A password that was right once is remembered as an HMAC under
a key that lives only in this process, so a client polling every second costs one
derivation, not one per request. Refusals are counted and logged at most once per period.
A :class:`LoginGuard` slows guessing: after a few failures a user name or an address waits,
longer after each, and the derivations waiting at once are bounded.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import logging
import os
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hive_core.admin._passwords import verify_password
from hive_core.config import PasswordHash
from hive_core.plugins import WarningGate

if TYPE_CHECKING:
    from hive_core.config import RestApiAuth

__all__ = ["Access", "AuthStats", "Gatekeeper", "LoginGuard", "refusal_log"]

log = logging.getLogger("hive.admin")

REALM = "hive"
LOG_PERIOD = 10.0


class Access(enum.Enum):
    GRANTED = "granted"
    ANONYMOUS = "anonymous"
    """No credentials were sent (only the open paths answer)."""
    DENIED = "denied"
    """Credentials were sent and are wrong, or cannot be read."""


@dataclass
class AuthStats:
    """What ``/api/v1/metrics`` shows under ``rest_api``."""

    authentication_enabled: bool
    authentication_failures: int = 0
    """Requests whose credentials were wrong or unreadable."""
    unauthenticated_requests: int = 0
    """Requests without credentials to a path that needs them."""


def refusal_log(period: float = LOG_PERIOD,
                clock: Callable[[], float] = time.monotonic) -> WarningGate:
    """Refusals of one kind logged at most once per ``period`` seconds, the rest counted."""
    return WarningGate(log, period, clock=clock)


class LoginGuard:
    """Slows password guessing, per user name and per address, and bounds the work it costs.

    After ``free`` failures in a row, a user name (or an address) must wait before its next
    try: 1 s, then twice as long after each further failure, up to ``max_delay``; a success
    clears the count. A try while waiting is refused without a key derivation. Derivations
    run on one thread, at most ``max_waiting`` at once (``per_address`` of one address); a
    try beyond that is refused as busy, so a flood holds neither memory nor other users up.
    """

    def __init__(self, free: int = 5, max_delay: float = 60.0, max_waiting: int = 8,
                 per_address: int = 2, clock: Callable[[], float] = time.monotonic,
                 remembered: int = 10_000) -> None:
        self.free, self.max_delay, self.clock = free, max_delay, clock
        self.max_waiting, self.per_address = max_waiting, per_address
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._remembered = remembered
        self._waiting: Counter[str] = Counter()
        self._deriving: ThreadPoolExecutor | None = None

    def wait_left(self, user: str, peer: str) -> float:
        """Seconds before ``user`` from ``peer`` may try a password; 0: now."""
        now = self.clock()
        return max(self._left(f"user:{user}", now), self._left(f"address:{peer}", now))

    def _left(self, key: str, now: float) -> float:
        count, last = self._failures.get(key, (0, 0.0))
        if count < self.free:
            return 0.0
        delay = min(self.max_delay, 2.0 ** (count - self.free))
        return max(0.0, last + delay - now)

    def settle(self, user: str, peer: str, right: bool) -> None:
        for key in (f"user:{user}", f"address:{peer}"):
            if right:
                self._failures.pop(key, None)
                continue
            count, _last = self._failures.pop(key, (0, 0.0))
            self._failures[key] = (count + 1, self.clock())
            while len(self._failures) > self._remembered:  # the oldest go first
                self._failures.popitem(last=False)

    def busy(self, peer: str) -> bool:
        """Whether a derivation for ``peer`` would wait past the bounds."""
        return (sum(self._waiting.values()) >= self.max_waiting
                or self._waiting[peer] >= self.per_address)

    async def verify(self, peer: str, password: bytes, hashed: PasswordHash) -> bool:
        """The key derivation, on the guard's one thread (check :meth:`busy` first)."""
        if self._deriving is None:
            self._deriving = ThreadPoolExecutor(1, thread_name_prefix="hive-login")
        self._waiting[peer] += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._deriving, verify_password, password, hashed)
        finally:
            self._waiting[peer] -= 1
            if not self._waiting[peer]:
                del self._waiting[peer]

    def close(self) -> None:
        if self._deriving is not None:
            self._deriving.shutdown(wait=False, cancel_futures=True)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class Gatekeeper:
    """The REST API's authentication, from ``<rest-api><auth>`` (enabled)."""

    def __init__(self, auth: RestApiAuth, refusals: WarningGate | None = None) -> None:
        self.stats = AuthStats(authentication_enabled=True)
        self._users = {user.name: PasswordHash.parse(user.password_hash) for user in auth.users}
        self._tokens = [_sha256(token.encode("ascii")) for token in auth.tokens]
        self._refusals = refusals or refusal_log()
        self._memory_key = os.urandom(32)
        self._remembered: dict[str, bytes] = {}
        self.guard = LoginGuard()
        # an unknown user costs a derivation too, so timing does not tell which names exist
        self._decoy = next(iter(self._users.values()), None)

    @property
    def summary(self) -> str:
        """For the log: which schemes, for how many users and tokens."""
        parts = []
        if self._users:
            parts.append(f"HTTP Basic for {len(self._users)} user(s)")
        if self._tokens:
            parts.append(f"Bearer for {len(self._tokens)} token(s)")
        return " and ".join(parts)

    @property
    def challenges(self) -> list[bytes]:
        """The ``WWW-Authenticate`` values of a 401: one per configured scheme."""
        values = []
        if self._users:
            values.append(f'Basic realm="{REALM}", charset="UTF-8"'.encode())
        if self._tokens:
            values.append(f'Bearer realm="{REALM}"'.encode())
        return values

    def admit(self, authorization: bytes | None, peer: str
              ) -> Access | asyncio.Future[Access]:
        """The access ``authorization`` (the header's value, None when absent) gives.

        A password not yet remembered is checked on the worker thread: the answer is then a
        future. Wrong credentials are counted and logged here.
        """
        if authorization is None:
            return Access.ANONYMOUS
        scheme, _, credentials = authorization.strip().partition(b" ")
        scheme = scheme.lower()
        credentials = credentials.strip()
        if scheme == b"bearer" and self._tokens:
            return self._settle(self._token_matches(credentials), peer, "a bearer token")
        if scheme == b"basic" and self._users:
            return self._basic(credentials, peer)
        return self._settle(False, peer, f"the {scheme[:20].decode('ascii', 'replace')!r} "
                                         "scheme, which is not configured")

    def _token_matches(self, token: bytes) -> bool:
        sent = _sha256(token)
        matched = False
        for expected in self._tokens:  # every one, so the time does not say which matched
            matched |= hmac.compare_digest(sent, expected)
        return matched

    def _basic(self, credentials: bytes, peer: str) -> Access | asyncio.Future[Access]:
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return self._settle(False, peer, "unreadable Basic credentials")
        name, colon, password = decoded.partition(":")
        if not colon:
            return self._settle(False, peer, "unreadable Basic credentials")
        secret = password.encode("utf-8")
        remembered = self._remembered.get(name)
        if remembered is not None and hmac.compare_digest(self._memo(secret), remembered):
            return Access.GRANTED
        hashed = self._users.get(name, self._decoy)
        assert hashed is not None  # Basic is only taken when users are configured
        guard = self.guard
        wait = guard.wait_left(name, peer)
        if wait > 0:
            return self._settle(False, peer, f"user {name[:64]!r}, {wait:.0f} s before it may "
                                             "try again")
        if guard.busy(peer):
            return self._settle(False, peer, "too many password checks waiting")
        future = asyncio.ensure_future(guard.verify(peer, secret, hashed))
        return _chained(future, lambda right: self._password_checked(
            name, secret, right and name in self._users, peer))

    def _password_checked(self, name: str, secret: bytes, right: bool, peer: str) -> Access:
        if right:
            self._remembered[name] = self._memo(secret)
        self.guard.settle(name, peer, right)
        return self._settle(right, peer, f"user {name[:64]!r}")

    def _memo(self, secret: bytes) -> bytes:
        return hmac.new(self._memory_key, secret, hashlib.sha256).digest()

    def _settle(self, right: bool, peer: str, who: str) -> Access:
        if right:
            return Access.GRANTED
        self.stats.authentication_failures += 1
        self._refusals.warn("denied", "REST API: wrong credentials from %s (%s)", peer, who)
        return Access.DENIED

    def refused_anonymous(self, peer: str, path: str) -> None:
        """A request without credentials got 401: counted, and logged now and then."""
        self.stats.unauthenticated_requests += 1
        self._refusals.warn("anonymous", "REST API: request for %s from %s without "
                                         "credentials", path[:200], peer)

    def close(self) -> None:
        self.guard.close()


def _chained(future: asyncio.Future[bool] | asyncio.Task[bool], then: Callable[[bool], Access]
             ) -> asyncio.Future[Access]:
    """A future of ``then(result)`` once ``future`` is done (cancelled with it)."""
    outcome: asyncio.Future[Access] = asyncio.get_running_loop().create_future()

    def done(source: asyncio.Future[bool]) -> None:
        if outcome.cancelled():
            return
        if source.cancelled():
            outcome.cancel()
        elif source.exception() is not None:
            outcome.set_exception(source.exception())  # type: ignore[arg-type]
        else:
            outcome.set_result(then(source.result()))

    future.add_done_callback(done)
    outcome.add_done_callback(lambda _: future.cancel() if outcome.cancelled() else None)
    return outcome
