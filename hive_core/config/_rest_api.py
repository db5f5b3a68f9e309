"""<rest-api>: the HTTP API an operator (or `hive cluster status`) asks about the node.

It listens on loopback unless told otherwise; a listener on any other address needs
``<auth>`` (HTTP Basic against hashed passwords, or bearer tokens) or, for ``<https>``,
client certificates, and a config that would expose it without either is refused.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, model_validator
from pydantic_xml import element, wrapped

from ._base import ConfigModel, Port, XmlBool, misplaced
from ._listeners import ListenerTls

__all__ = ["HttpListener", "HttpsListener", "PasswordHash", "RestApi", "RestApiAuth",
           "RestApiUser", "is_loopback"]

PasswordAlgorithm = Literal["scrypt", "pbkdf2-sha256"]

# Bounds a configured hash must stay in: below, it is too cheap to guess; above, one login
# attempt would take seconds or hundreds of MiB.
SCRYPT_LOG2_N = (14, 20)
SCRYPT_MAX_MEMORY = 256 * 2**20
PBKDF2_ITERATIONS = (100_000, 10_000_000)
_PHC = re.compile(r"^\$([a-z0-9-]+)\$([a-z0-9=,]+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$")
_TOKEN68 = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")
MIN_TOKEN_LENGTH = 32


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


@dataclass(frozen=True)
class PasswordHash:
    """A password hash in the PHC string format, as ``<password-hash>`` holds it.

    ``$scrypt$ln=15,r=8,p=1$SALT$HASH`` (cost 2**ln, block size r, parallelism p) or
    ``$pbkdf2-sha256$i=600000$SALT$HASH`` (i iterations); SALT and HASH are base64 without
    padding. ``hive rest-api hash-password`` writes one. :meth:`parse` refuses a malformed
    string and costs outside the bounds above; ``str()`` gives the string back.
    """

    algorithm: PasswordAlgorithm
    parameters: tuple[tuple[str, int], ...]
    salt: bytes
    digest: bytes

    def parameter(self, name: str) -> int:
        return dict(self.parameters)[name]

    def __str__(self) -> str:
        parameters = ",".join(f"{name}={value}" for name, value in self.parameters)
        return f"${self.algorithm}${parameters}${_b64encode(self.salt)}${_b64encode(self.digest)}"

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        found = _PHC.match(text.strip())
        if found is None:
            raise ValueError("not a password hash: expected $scrypt$ln=..,r=..,p=..$SALT$HASH "
                             "or $pbkdf2-sha256$i=..$SALT$HASH (make one with "
                             "`hive rest-api hash-password`)")
        algorithm, listed, salt_text, digest_text = found.groups()
        try:
            parameters = tuple((name, int(value)) for name, value in
                               (item.split("=", 1) for item in listed.split(",")))
        except ValueError:
            raise ValueError(f"the parameters {listed!r} of a password hash are not "
                             "name=integer pairs") from None
        try:
            salt, digest = _b64decode(salt_text), _b64decode(digest_text)
        except (binascii.Error, ValueError):
            raise ValueError("the salt or hash of a password hash is not base64") from None
        if len(salt) < 8 or not 16 <= len(digest) <= 64:
            raise ValueError("a password hash needs a salt of at least 8 bytes and a hash of "
                             "16 to 64 bytes")
        if algorithm == "scrypt":
            _check_scrypt(dict(parameters), listed)
        elif algorithm == "pbkdf2-sha256":
            _check_pbkdf2(dict(parameters), listed)
        else:
            raise ValueError(f"unknown password hash algorithm {algorithm!r}: use scrypt or "
                             "pbkdf2-sha256")
        return cls(algorithm, parameters, salt, digest)  # type: ignore[arg-type]


def _check_scrypt(parameters: dict[str, int], listed: str) -> None:
    if sorted(parameters) != ["ln", "p", "r"]:
        raise ValueError(f"a scrypt hash takes the parameters ln, r and p, got {listed!r}")
    low, high = SCRYPT_LOG2_N
    if not low <= parameters["ln"] <= high:
        raise ValueError(f"scrypt cost ln={parameters['ln']} is outside {low} to {high}")
    if not 1 <= parameters["r"] <= 32 or not 1 <= parameters["p"] <= 16:
        raise ValueError("scrypt takes r from 1 to 32 and p from 1 to 16")
    if 128 * parameters["r"] * 2 ** parameters["ln"] > SCRYPT_MAX_MEMORY:
        raise ValueError(f"scrypt with ln={parameters['ln']} and r={parameters['r']} needs "
                         f"more than {SCRYPT_MAX_MEMORY // 2**20} MiB per check")


def _check_pbkdf2(parameters: dict[str, int], listed: str) -> None:
    if list(parameters) != ["i"]:
        raise ValueError(f"a pbkdf2-sha256 hash takes the parameter i, got {listed!r}")
    low, high = PBKDF2_ITERATIONS
    if not low <= parameters["i"] <= high:
        raise ValueError(f"pbkdf2-sha256 with i={parameters['i']} iterations is outside "
                         f"{low} to {high}")


def _password_hash(value: str) -> str:
    return str(PasswordHash.parse(value))


def _user_name(value: str) -> str:
    if not value or ":" in value:
        raise ValueError("a user name is not empty and has no colon (HTTP Basic splits at it)")
    return value


def _token(value: str) -> str:
    # never quote the value: it is a secret (the loader hides only ${ENV:...} values)
    if len(value) < MIN_TOKEN_LENGTH:
        raise ValueError(f"a token has at least {MIN_TOKEN_LENGTH} characters (this one has "
                         f"{len(value)}); make one with `hive rest-api new-token`")
    if not _TOKEN68.match(value):
        raise ValueError("a token has only letters, digits and - . _ ~ + / (then = padding), "
                         "as a bearer token must")
    return value


def is_loopback(bind_address: str) -> bool:
    """Whether only this machine can reach ``bind_address``; a host name other than
    localhost counts as not (it may resolve elsewhere)."""
    if bind_address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind_address.strip().strip("[]")).is_loopback
    except ValueError:
        return False


class HttpListener(ConfigModel, tag="http"):
    """One plain HTTP listener of the REST API; port 0 asks the OS for a free one."""

    port: Port = element(tag="port", default=8888)
    """The TCP port; 0 asks the system for a free one."""
    bind_address: str = element(tag="bind-address", default="127.0.0.1")
    """The local address. Any address but loopback (127.0.0.0/8, ::1, localhost) needs <auth>."""
    name: str | None = element(tag="name", default=None)
    """A name for the logs."""


class HttpsListener(HttpListener, tag="https"):
    """One HTTPS listener of the REST API: the same <tls> as an MQTT TLS listener."""

    port: Port = element(tag="port", default=8889)
    """The TCP port; 0 asks the system for a free one."""
    tls: ListenerTls = element(tag="tls")
    """Key store, protocols, cipher suites; client-authentication-mode REQUIRED also counts
    as authentication on a non-loopback address."""

    @property
    def requires_client_certificates(self) -> bool:
        return self.tls.client_authentication_mode == "REQUIRED"


class RestApiUser(ConfigModel, tag="user"):
    """One user who may call the REST API with HTTP Basic."""

    name: Annotated[str, AfterValidator(_user_name)] = element(tag="name")
    """The user name."""
    password_hash: Annotated[str, AfterValidator(_password_hash)] = element(tag="password-hash")
    """The password as a scrypt or pbkdf2-sha256 hash from `hive rest-api hash-password`,
    never the password itself."""


class RestApiAuth(ConfigModel, tag="auth"):
    """<auth>: who may call the REST API; every path but /api/v1/health needs credentials."""

    enabled: XmlBool = element(tag="enabled", default=False)
    """Whether requests must authenticate (HTTP Basic for <users>, Bearer for <tokens>)."""
    users: tuple[RestApiUser, ...] = wrapped("users", element(tag="user"), default=())
    """Users with a password (HTTP Basic)."""
    tokens: tuple[Annotated[str, AfterValidator(_token)], ...] = wrapped(
        "tokens", element(tag="token"), default=())
    """Bearer tokens of at least 32 characters (`hive rest-api new-token` makes one); best
    given as ``${ENV:NAME}``."""

    @model_validator(mode="after")
    def _credentials_fit_enabled(self) -> RestApiAuth:
        if self.enabled and not self.users and not self.tokens:
            raise misplaced("enabled", "REST API authentication is enabled but no <users> or "
                                       "<tokens> are configured: nobody could call it")
        if not self.enabled and (self.users or self.tokens):
            given = "users" if self.users else "tokens"
            raise misplaced(given, f"<{given}> are configured but <auth><enabled> is not true: "
                                   "they would be ignored")
        refuse_twice(self.users)
        return self


def refuse_twice(users: tuple[Any, ...]) -> None:
    """A user name given twice is a mistake: the second user could never log in."""
    seen: set[str] = set()
    for position, user in enumerate(users, start=1):
        if user.name in seen:
            raise misplaced(f"users/user[{position}]/name",
                            f"user {user.name!r} is configured twice")
        seen.add(user.name)


class RestApi(ConfigModel, tag="rest-api"):
    """<rest-api>: off unless enabled; enabled with no <listeners> means HTTP on 127.0.0.1:8888."""

    enabled: XmlBool = element(tag="enabled", default=False)
    """Whether the node serves its REST API (health, cluster members, metrics)."""
    auth: RestApiAuth = element(tag="auth", default_factory=RestApiAuth)
    """Authentication of REST API requests."""
    listeners: tuple[HttpListener | HttpsListener, ...] = wrapped(
        "listeners", element(), default=())
    """Its <http> and <https> listeners; none: HTTP on 127.0.0.1:8888."""

    def effective_listeners(self) -> tuple[HttpListener | HttpsListener, ...]:
        return self.listeners or (HttpListener(),)

    def _positions(self) -> list[tuple[str, HttpListener]]:
        """Each listener with its element path under <rest-api>: listeners/https[2]."""
        counted: dict[str, int] = {}
        placed = []
        for listener in self.listeners:
            tag = type(listener).__xml_tag__ or "http"
            counted[tag] = counted.get(tag, 0) + 1
            placed.append((f"listeners/{tag}[{counted[tag]}]", listener))
        return placed

    @model_validator(mode="after")
    def _ports_are_distinct(self) -> RestApi:
        taken: set[tuple[str, int]] = set()
        for at, listener in self._positions():
            key = (listener.bind_address, listener.port)
            if listener.port and key in taken:
                raise misplaced(f"{at}/port",
                                f"port {listener.port} on {listener.bind_address} is already "
                                "used by another REST API listener")
            taken.add(key)
        return self

    @model_validator(mode="after")
    def _exposed_only_with_authentication(self) -> RestApi:
        if not self.enabled or self.auth.enabled:
            return self
        for at, listener in self._positions():
            if is_loopback(listener.bind_address):
                continue
            if isinstance(listener, HttpsListener) and listener.requires_client_certificates:
                continue
            raise misplaced(
                f"{at}/bind-address",
                f"the REST API would listen on {listener.bind_address}, which is not a "
                "loopback address, without authentication: anyone reaching it could read the "
                "cluster's members and metrics; enable <rest-api><auth> with <users> or "
                "<tokens> (or, on <https>, client-authentication-mode REQUIRED), or bind to "
                "127.0.0.1")
        return self
