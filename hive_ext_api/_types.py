"""The values Hive hands to extensions and the answers extensions give back."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol


class ReasonCode(IntEnum):
    """The MQTT 5 reason codes an extension may answer with (the specification's names)."""

    SUCCESS = 0x00
    NO_MATCHING_SUBSCRIBERS = 0x10
    UNSPECIFIED_ERROR = 0x80
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    BAD_AUTHENTICATION_METHOD = 0x8C
    TOPIC_NAME_INVALID = 0x90
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99


class ExtensionRefused(Exception):
    """Raised from ``hive_extension_start`` to refuse to run; the message says why."""


@dataclass(slots=True)
class ClientInfo:
    """Who a hook is about: one connected client."""

    client_id: str
    protocol_version: int  # 3, 4 (3.1.1) or 5
    username: str | None = None
    listener: str = ""
    remote_address: tuple[str, int] | None = None
    certificate: bytes | None = None  # the client's TLS certificate (DER), when it sent one
    node: str = ""  # API 1.4: the id of the node it is connected to, in the services' answers


@dataclass(slots=True)
class ConnectInfo:
    """A CONNECT as authentication and the connect interceptor see it.

    A connect interceptor may change ``client_id``, ``username``, ``keep_alive`` and
    ``user_properties``; the other fields are read-only facts.
    """

    client: ClientInfo
    password: bytes | None = None
    clean_start: bool = True
    keep_alive: int = 60
    session_expiry_interval: int = 0
    user_properties: list[tuple[str, str]] = field(default_factory=list)
    authentication_method: str | None = None
    authentication_data: bytes | None = None

    @property
    def client_id(self) -> str:
        """The client identifier of the CONNECT (``client.client_id``)."""
        return self.client.client_id

    @property
    def username(self) -> str | None:
        """The user name of the CONNECT, None when it had none (``client.username``)."""
        return self.client.username


@dataclass(slots=True)
class AuthDecision:
    """The answer of an authenticator.

    ``allow`` lets the client in; otherwise ``reason_code`` (default NOT_AUTHORIZED) goes into
    the CONNACK (MQTT 3 clients get the closest return code) with ``reason_string`` for MQTT 5.
    ``user_properties`` go into the CONNACK of an MQTT 5 client that is let in.
    """

    allow: bool
    reason_code: int = ReasonCode.NOT_AUTHORIZED
    reason_string: str | None = None
    user_properties: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def accept(cls) -> AuthDecision:
        """Let the client in (CONNACK with reason code 0x00)."""
        return cls(True, ReasonCode.SUCCESS)

    @classmethod
    def refuse(cls, reason_code: int = ReasonCode.NOT_AUTHORIZED,
               reason_string: str | None = None) -> AuthDecision:
        """Keep the client out: the CONNACK carries ``reason_code`` (and, for MQTT 5,
        ``reason_string``), then the connection closes."""
        return cls(False, reason_code, reason_string)


@dataclass(slots=True)
class AuthExchange:
    """One step of an MQTT 5 enhanced authentication (CONNECT or AUTH packet from the client)."""

    client: ClientInfo
    method: str
    data: bytes | None
    step: int  # 0 for the CONNECT, 1.. for each AUTH the client sent since
    state: dict[str, Any] = field(default_factory=dict)  # kept across the steps of one exchange


@dataclass(slots=True)
class AuthStep:
    """The answer to an :class:`AuthExchange`: go on with ``data``, or finish."""

    outcome: str  # "continue", "success" or "failure"
    data: bytes | None = None
    reason_code: int = ReasonCode.NOT_AUTHORIZED
    reason_string: str | None = None

    @classmethod
    def more(cls, data: bytes | None) -> AuthStep:
        """Another round: the client gets an AUTH packet (0x18, continue) with ``data``."""
        return cls("continue", data)

    @classmethod
    def success(cls, data: bytes | None = None) -> AuthStep:
        """Authenticated: the CONNACK (or, for a re-authentication, AUTH 0x00) carries
        ``data`` as its authentication data."""
        return cls("success", data, ReasonCode.SUCCESS)

    @classmethod
    def failure(cls, reason_code: int = ReasonCode.NOT_AUTHORIZED,
                reason_string: str | None = None) -> AuthStep:
        """Not authenticated: the CONNACK (or DISCONNECT, during a re-authentication) carries
        ``reason_code`` and ``reason_string``, then the connection closes."""
        return cls("failure", None, reason_code, reason_string)


@dataclass(slots=True)
class PublishMessage:
    """A PUBLISH as interceptors see it; every field may be changed in place."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    user_properties: list[tuple[str, str]] = field(default_factory=list)
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None


class ReceivedPublish(Protocol):
    """A PUBLISH the node accepted from a client, as :func:`hookspecs.hive_publishes_received`
    sees it: read-only, and valid during that call only (it is the node's own object)."""

    @property
    def topic(self) -> str:
        """The topic it was published to (after the interceptors)."""
        ...

    @property
    def payload(self) -> bytes:
        """Its payload."""
        ...

    @property
    def qos(self) -> int:
        """Its QoS (0, 1 or 2)."""
        ...

    @property
    def retain(self) -> bool:
        """Its retain flag."""
        ...

    @property
    def publisher_id(self) -> str:
        """The client id of the client that sent it."""
        ...

    @property
    def has_properties(self) -> bool:
        """Whether it carries any MQTT 5 property (a message expiry included)."""
        ...

    def to_publish_message(self) -> PublishMessage:
        """A copy with its MQTT 5 properties, as an interceptor sees it (made on each call)."""
        ...


@dataclass(slots=True)
class SubscriptionInfo:
    """One subscription of a client (as SUBSCRIBE asked, or as the node holds it)."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    subscription_id: int | None = None


@dataclass(slots=True)
class RetainedInfo:
    """A retained message as :meth:`HiveServices.retained` lists it."""

    topic: str
    payload: bytes
    qos: int


@dataclass(slots=True, frozen=True)
class ClusterNodeAddress:
    """A candidate cluster member, as discovery reports it (host and node transport port)."""

    host: str
    port: int


@dataclass(slots=True, frozen=True)
class ClusterMember:
    """A node of the cluster as :meth:`HiveServices.cluster_members` lists it."""

    node_id: str
    address: ClusterNodeAddress
    state: str  # "RUNNING", "JOINING", "UNREACHABLE", ...
    version: str
