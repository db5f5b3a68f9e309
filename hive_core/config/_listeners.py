"""<listeners>: where MQTT clients connect (TCP, TLS, WebSocket, secure WebSocket)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import ClassVar, Literal

from pydantic import field_validator, model_validator
from pydantic_xml import element, wrapped

from ._base import (
    ClientAuthenticationMode,
    ConfigModel,
    Milliseconds,
    Port,
    TlsProtocol,
    XmlBool,
    misplaced,
)

__all__ = [
    "AnyListener",
    "Keystore",
    "LegacyTcpListener",
    "ListenerKind",
    "ListenerTls",
    "Listeners",
    "TcpListener",
    "TlsTcpListener",
    "TlsWebsocketListener",
    "Truststore",
    "WebsocketListener",
]

ListenerKind = Literal["tcp", "tls-tcp", "websocket", "tls-websocket"]


class Keystore(ConfigModel, tag="keystore"):
    """The certificate chain and private key a TLS endpoint presents.

    ``path`` may name a PEM file (certificate chain and key, or chain only when the key is in
    the same file), a PKCS#12 bundle (``.p12``/``.pfx``) or a Java JKS or JCEKS key store
    (found by its magic number, whatever its name; its first private key entry is used).
    Loading the file is the job of whoever builds the ``ssl.SSLContext``, not of this model.
    """

    path: str = element(tag="path")
    """A PEM file (certificate chain and key), a PKCS#12 bundle (.p12, .pfx) or a Java key
    store (JKS, JCEKS)."""
    password: str | None = element(tag="password", default=None)
    """The PKCS#12 or Java key store password, or the key's when there is no
    private-key-password."""
    private_key_password: str | None = element(tag="private-key-password", default=None)
    """The password of an encrypted private key (a Java key store's key password)."""


class Truststore(ConfigModel, tag="truststore"):
    """The certificates a TLS endpoint trusts (PEM bundle, PKCS#12, JKS or JCEKS, like
    :class:`Keystore`)."""

    path: str = element(tag="path")
    """A PEM file of CA certificates, a PKCS#12 bundle (.p12, .pfx) or a Java key store (JKS,
    JCEKS: its trusted certificates and its key entries' certificates)."""
    password: str | None = element(tag="password", default=None)
    """The PKCS#12 password; for a Java key store, checks its integrity (left out, the store is
    read unchecked, as keytool -list does)."""


class ListenerTls(ConfigModel, tag="tls"):
    """<tls> of a secure listener."""

    protocols: tuple[TlsProtocol, ...] = wrapped(
        "protocols", element(tag="protocol"), default=("TLSv1.3", "TLSv1.2")
    )
    """The TLS versions offered."""
    cipher_suites: tuple[str, ...] = wrapped(
        "cipher-suites", element(tag="cipher-suite"), default=()
    )
    """Empty means the TLS library's defaults."""
    keystore: Keystore = element(tag="keystore")
    """The listener's certificate chain and private key."""
    truststore: Truststore | None = element(tag="truststore", default=None)
    """The CA certificates that client certificates are checked against."""
    client_authentication_mode: ClientAuthenticationMode = element(
        tag="client-authentication-mode", default="NONE"
    )
    """Whether a client must (REQUIRED), may (OPTIONAL) or need not (NONE) show a certificate."""
    handshake_timeout: Milliseconds = element(tag="handshake-timeout", default=10000)
    """Milliseconds a client has to finish the TLS handshake."""

    @model_validator(mode="after")
    def _client_auth_needs_trust(self) -> ListenerTls:
        if self.client_authentication_mode != "NONE" and self.truststore is None:
            raise misplaced(
                "client-authentication-mode",
                f"client-authentication-mode {self.client_authentication_mode} needs a "
                "<truststore> to check client certificates against",
            )
        return self


class _Listener(ConfigModel):
    kind: ClassVar[ListenerKind]
    port: Port
    bind_address: str = element(tag="bind-address", default="0.0.0.0")
    """The local address to listen on; 0.0.0.0: every interface."""
    name: str | None = element(tag="name", default=None)
    """A name for the logs; not set: `<kind>-listener-<port>`, e.g. tcp-listener-1883."""
    proxy_protocol: XmlBool = element(tag="proxy-protocol", default=False)
    """Whether every connection starts with a PROXY protocol header (v1 or v2, as HAProxy's
    `send-proxy` and `send-proxy-v2` write it, before TLS on a secure listener): the client's
    address in it is the one the node logs and shows to extensions. A connection without a
    valid header is closed and counted (`proxy_protocol_refused` in the metrics). Only for a
    listener that no one but the load balancer can reach, or with `trusted-proxies`: whoever
    can connect can claim any address in a header."""
    trusted_proxies: tuple[str, ...] = wrapped(
        "trusted-proxies", element(tag="proxy"), default=()
    )
    """With `proxy-protocol`: the addresses (or networks, `10.0.0.0/24`) of the load balancers;
    a connection from any other address is closed before its header is read (and counted as
    refused). Empty: any address may send a header (the node warns at start)."""

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network") from None
        return tuple(entry.strip() for entry in value)

    def trusted_proxy_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(entry, strict=False) for entry in self.trusted_proxies)

    @property
    def display_name(self) -> str:
        """``name``, or ``<kind>-listener-<port>`` as HiveMQ names an unnamed listener."""
        return self.name or f"{self.kind}-listener-{self.port}"


class TcpListener(_Listener, tag="tcp-listener"):
    kind: ClassVar[ListenerKind] = "tcp"
    port: Port = element(tag="port", default=1883)
    """The TCP port; 0 asks the system for a free one."""


class LegacyTcpListener(TcpListener, tag="tcp"):
    """``<tcp>``, an older spelling of ``<tcp-listener>`` (seen in seed 000); same meaning."""


class TlsTcpListener(_Listener, tag="tls-tcp-listener"):
    kind: ClassVar[ListenerKind] = "tls-tcp"
    port: Port = element(tag="port", default=8883)
    """The TCP port; 0 asks the system for a free one."""
    tls: ListenerTls = element(tag="tls")
    """TLS: key store, trust store, protocols, client certificates."""


class WebsocketListener(_Listener, tag="websocket-listener"):
    kind: ClassVar[ListenerKind] = "websocket"
    port: Port = element(tag="port", default=8000)
    """The TCP port; 0 asks the system for a free one."""
    path: str = element(tag="path", default="/mqtt")
    """The HTTP path WebSocket clients upgrade on."""
    subprotocols: tuple[str, ...] = wrapped(
        "subprotocols", element(tag="subprotocol"), default=("mqtt", "mqttv3.1")
    )
    """The WebSocket subprotocols accepted."""
    allow_extensions: XmlBool = element(tag="allow-extensions", default=False)
    """Whether WebSocket extensions may be negotiated."""


class TlsWebsocketListener(WebsocketListener, tag="tls-websocket-listener"):
    kind: ClassVar[ListenerKind] = "tls-websocket"
    port: Port = element(tag="port", default=8001)
    """The TCP port; 0 asks the system for a free one."""
    tls: ListenerTls = element(tag="tls")
    """TLS: key store, trust store, protocols, client certificates."""


AnyListener = (
    TcpListener | LegacyTcpListener | TlsTcpListener | WebsocketListener | TlsWebsocketListener
)


class Listeners(ConfigModel, tag="listeners", search_mode="strict"):
    """<listeners>: the listeners in document order; iterate it, index it, take its len().

    ``search_mode="strict"`` keeps mixed listener kinds in document order (pydantic-xml's
    unordered mode would group them by kind).
    """

    items: tuple[AnyListener, ...] = element(default=())
    """The listeners, in the order they are opened."""

    def __iter__(self) -> Iterator[AnyListener]:  # type: ignore[override]
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> AnyListener:
        return self.items[index]

    @model_validator(mode="after")
    def _ports_are_distinct(self) -> Listeners:
        taken: dict[tuple[str, int], int] = {}
        seen_per_tag: dict[str, int] = {}
        for position, listener in enumerate(self.items, start=1):
            tag = type(listener).__xml_tag__ or ""
            seen_per_tag[tag] = seen_per_tag.get(tag, 0) + 1
            key = (listener.bind_address, listener.port)
            if listener.port == 0:
                continue
            if key in taken:
                raise misplaced(
                    f"{tag}[{seen_per_tag[tag]}]/port",
                    f"port {listener.port} on {listener.bind_address} is already used by "
                    f"listener {taken[key]}",
                )
            taken[key] = position
        return self


def default_listeners() -> Listeners:
    """What a config without <listeners> gets: one TCP listener on 0.0.0.0:1883."""
    return Listeners(items=(TcpListener(),))
