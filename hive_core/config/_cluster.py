"""<cluster>: transport, discovery, failure detection and replication, as HiveMQ 4 spells them.

Defaults follow HiveMQ's cluster documentation. What is absent is resolved by the
``effective_*`` methods of :class:`Cluster`, not stored, so a config round-trips as written.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator
from pydantic_xml import attr, element, wrapped

from ._base import (
    BindPort,
    ClientAuthenticationMode,
    ConfigModel,
    Milliseconds,
    NonNegativeInt,
    Port,
    PositiveInt,
    TlsProtocol,
    XmlBool,
    misplaced,
)
from ._listeners import Keystore, Truststore
from ._schema import model_shape

__all__ = [
    "MIN_SECRET_LENGTH",
    "BroadcastDiscovery",
    "Cluster",
    "ClusterAuthentication",
    "ClusterTls",
    "Discovery",
    "DiscoveryKind",
    "DnsDiscovery",
    "EffectiveHeartbeat",
    "ExtensionDiscovery",
    "FailureDetection",
    "Heartbeat",
    "MulticastDiscovery",
    "Replication",
    "StaticDiscovery",
    "StaticNode",
    "TcpHealthCheck",
    "TcpTransport",
    "Transport",
    "TransportKind",
    "UdpTransport",
    "is_loopback_host",
]

TransportKind = Literal["tcp", "udp"]
DiscoveryKind = Literal["static", "multicast", "broadcast", "dns", "extension"]


def _cluster_name(value: str) -> str:
    if not 1 <= len(value) <= 50:
        raise ValueError(f"a cluster name has 1 to 50 characters, got {len(value)}")
    return value


ClusterName = Annotated[str, AfterValidator(_cluster_name)]


def _node_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", value):
        raise ValueError(f"a node name has 1 to 64 letters, digits, '.', '_' or '-', got "
                         f"{value!r}")
    return value


NodeName = Annotated[str, AfterValidator(_node_name)]


MIN_SECRET_LENGTH = 16
SECRET_RECIPE = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


def _shared_secret(value: str) -> str:
    # The value itself never goes into the message: it is a secret.
    if len(value) < MIN_SECRET_LENGTH:
        raise ValueError(f"a shared secret needs at least {MIN_SECRET_LENGTH} characters, this "
                         f"one has {len(value)}; make one with `{SECRET_RECIPE}`")
    return value


SharedSecret = Annotated[str, AfterValidator(_shared_secret)]


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost`` or a loopback IP address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may well name another host


def _ipv4(value: str, what: str) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 {what}") from None


class ClusterTls(ConfigModel, tag="tls"):
    """<tls> inside <transport><tcp>: encrypts node-to-node traffic (discovery stays plain).

    Key and trust store paths are PEM, PKCS#12, JKS or JCEKS files, as for listeners (see Keystore).
    """

    enabled: XmlBool = element(tag="enabled", default=False)
    """Whether node links use TLS (mutual: both sides show a certificate)."""
    protocols: tuple[TlsProtocol, ...] = wrapped("protocols", element(tag="protocol"), default=())
    """Empty means the TLS library's defaults."""
    cipher_suites: tuple[str, ...] = wrapped(
        "cipher-suites", element(tag="cipher-suite"), default=()
    )
    """Cipher suites allowed (OpenSSL names); none: the TLS library's defaults."""
    server_keystore: Keystore | None = element(tag="server-keystore", default=None)
    """This node's certificate and key (required with TLS on)."""
    server_certificate_truststore: Truststore | None = element(
        tag="server-certificate-truststore", default=None
    )
    """The CA that signed the other nodes' certificates (required with TLS on)."""
    client_authentication_mode: ClientAuthenticationMode = element(
        tag="client-authentication-mode", default="NONE"
    )
    """Whether a dialling node must (REQUIRED), may (OPTIONAL) or need not (NONE) show one.
    Only REQUIRED keeps strangers out: a cluster other hosts can reach needs it, or a
    <authentication><shared-secret>."""
    client_authentication_keystore: Keystore | None = element(
        tag="client-authentication-keystore", default=None
    )
    """What this node shows when it dials; not set: the server-keystore."""
    client_certificate_truststore: Truststore | None = element(
        tag="client-certificate-truststore", default=None
    )
    """Checks dialling nodes' certificates; not set: server-certificate-truststore."""

    @model_validator(mode="after")
    def _enabled_needs_keystore(self) -> ClusterTls:
        if self.enabled and self.server_keystore is None:
            raise misplaced("enabled", "cluster TLS is enabled but has no <server-keystore>")
        return self


class TcpTransport(ConfigModel, tag="tcp"):
    bind_address: str | None = element(tag="bind-address", default=None)
    """The local address for node links; not set: every interface (see external-address)."""
    bind_port: BindPort = element(tag="bind-port", default=8000)
    """The port node links are accepted on; 0: a free one."""
    external_address: str | None = element(tag="external-address", default=None)
    """The address other nodes should use, when this node is behind NAT."""
    external_port: Port = element(tag="external-port", default=0)
    """0: same as bind-port."""
    tls: ClusterTls | None = element(tag="tls", default=None)
    """TLS between nodes; absent: plain TCP."""

    @property
    def tls_enabled(self) -> bool:
        return self.tls is not None and self.tls.enabled


class UdpTransport(ConfigModel, tag="udp"):
    bind_address: str | None = element(tag="bind-address", default=None)
    """The local address of the node socket; not set: every interface."""
    bind_port: BindPort = element(tag="bind-port", default=8000)
    """The UDP port of the node socket; 0: a free one."""
    external_address: str | None = element(tag="external-address", default=None)
    """The address other nodes reach this one on, when it is not the bind address."""
    external_port: Port = element(tag="external-port", default=0)
    """The port other nodes reach this one on; 0: the bound port."""
    multicast_enabled: XmlBool = element(tag="multicast-enabled", default=True)
    """Must be true: multicast discovery, the only one UDP works with, needs it."""
    multicast_address: str = element(tag="multicast-address", default="228.8.8.8")
    """The IPv4 multicast group discovery announces on."""
    multicast_port: Port = element(tag="multicast-port", default=45588)
    """The UDP port of the multicast group."""
    multicast_ttl: Annotated[int, Field(ge=0, le=255)] = element(tag="multicast-ttl", default=1)
    """Hive addition: router hops a discovery datagram may cross. HiveMQ documents none; 1 keeps
    discovery on the interface's own link (JGroups, whose group and port these are, uses 8)."""

    @field_validator("multicast_address")
    @classmethod
    def _is_multicast_group(cls, value: str) -> str:
        if not _ipv4(value, "multicast address").is_multicast:
            raise ValueError(f"{value} is not an IPv4 multicast address (224.0.0.0 to "
                             "239.255.255.255)")
        return value

    @field_validator("multicast_port")
    @classmethod
    def _is_a_port(cls, value: int) -> int:
        if value == 0:
            raise ValueError("the multicast port must be from 1 to 65535")
        return value


class Transport(ConfigModel, tag="transport"):
    """<transport> holds <tcp> or <udp>; neither means the default (see Cluster)."""

    tcp: TcpTransport | None = element(tag="tcp", default=None)
    """Node links over TCP (optionally TLS); works with static, broadcast, extension discovery."""
    udp: UdpTransport | None = element(tag="udp", default=None)
    """Node links over UDP; works only with multicast discovery."""

    @model_validator(mode="after")
    def _one_kind(self) -> Transport:
        if self.tcp is not None and self.udp is not None:
            raise misplaced("udp", "<transport> takes either <tcp> or <udp>, not both")
        return self


class StaticNode(ConfigModel, tag="node"):
    """One <node> of static discovery, in either shape the docs show.

    ``<node><host>10.0.0.2</host><port>7800</port></node>`` or ``<node ip="10.0.0.2"/>``
    (the attribute form may carry ``port="7800"`` too). After validation ``host`` is set
    either way; ``port`` is None when not given, meaning "the transport's bind-port".
    """

    ip: str | None = attr(name="ip", default=None)
    """The node's address (the short form); or use <host>."""
    port_attribute: Port | None = attr(name="port", default=None)
    """The node's cluster port; or use <port>."""
    host: str = element(tag="host", default="")
    """The node's address or host name."""
    port: Port | None = element(tag="port", default=None)
    """The node's cluster port; not set: this node's bind-port."""

    @model_validator(mode="before")
    @classmethod
    def _merge_shapes(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        ip, host = data.get("ip"), data.get("host")
        if ip and host:
            raise misplaced("host", "a <node> takes an ip attribute or a <host> element, not both")
        if not ip and not host:
            raise misplaced("host", "a <node> needs a <host> element or an ip attribute")
        if ip and not host:
            data["host"] = ip
        port_attribute, port = data.get("port_attribute"), data.get("port")
        if port_attribute is not None and port is not None:
            raise misplaced("port", "a <node> takes a port attribute or a <port> element, not both")
        if port is None and port_attribute is not None:
            data["port"] = port_attribute
        return data

    def address(self, default_port: int) -> tuple[str, int]:
        """(host, port), taking ``default_port`` (the transport's bind-port) when none given."""
        return self.host, self.port if self.port is not None else default_port


class StaticDiscovery(ConfigModel, tag="static"):
    """A fixed list of nodes; listing this node itself is allowed and recommended."""

    nodes: tuple[StaticNode, ...] = element(tag="node", default=())
    """The nodes, this one included or not; they are dialled every 5 s until joined."""


class MulticastDiscovery(ConfigModel, tag="multicast"):
    """Finds nodes on the UDP transport's multicast address and port (UDP transport only)."""

    announce_interval: Milliseconds = element(tag="announce-interval", default=2000)
    """Hive addition: how often a node announces itself; one not heard for 5 intervals is gone."""
    cluster_name: ClusterName = element(tag="cluster-name", default="hive")
    """Hive addition: nodes only join announcements of their own cluster name."""


class BroadcastDiscovery(ConfigModel, tag="broadcast"):
    broadcast_address: str = element(tag="broadcast-address", default="255.255.255.255")
    """Where announcements go: a subnet's broadcast address, or 255.255.255.255."""
    port: Port = element(tag="port", default=8555)
    """The UDP port announcements go to."""
    port_range: NonNegativeInt = element(tag="port-range", default=5)
    """Also try port+1 .. port+port_range on other nodes."""
    announce_interval: Milliseconds = element(tag="announce-interval", default=2000)
    """Hive addition: how often a node announces itself; one not heard for 5 intervals is gone."""
    cluster_name: ClusterName = element(tag="cluster-name", default="hive")
    """Hive addition: nodes only join announcements of their own cluster name."""

    @field_validator("broadcast_address")
    @classmethod
    def _is_ipv4(cls, value: str) -> str:
        _ipv4(value, "broadcast address")
        return value

    @model_validator(mode="after")
    def _range_fits(self) -> BroadcastDiscovery:
        if self.port == 0:
            raise misplaced("port", "broadcast discovery needs a port from 1 to 65535")
        if self.port + self.port_range > 65535:
            raise misplaced("port-range", f"port {self.port} + port-range {self.port_range} "
                            "goes past port 65535")
        return self


class DnsDiscovery(ConfigModel, tag="dns"):
    """The nodes are the IPv4 addresses one name resolves to, asked of the system's resolver
    (``/etc/resolv.conf``, ``/etc/hosts``) every reload interval: a Kubernetes headless
    service, Docker's ``tasks.<service>``, or any DNS name with one A record per node.
    HiveMQ's DNS discovery extension's settings, as elements."""

    discovery_address: str = element(tag="discovery-address")
    """The name whose addresses are the nodes, e.g.
    ``hive-nodes.mqtt.svc.cluster.local`` (a headless service)."""
    port: Port | None = element(tag="port", default=None)
    """Hive addition: the nodes' cluster port; not set: this node's bind-port."""
    resolution_timeout: float = element(tag="resolution-timeout", default=3)
    """Seconds one resolution may take, at most 4 (the node waits 5 s for a discovery
    answer); one that takes longer keeps the members the node has."""
    reload_interval: PositiveInt = element(tag="reload-interval", default=30)
    """Seconds between two resolutions (HiveMQ's DNS discovery default: 30)."""

    @field_validator("discovery_address")
    @classmethod
    def _is_a_name(cls, value: str) -> str:
        value = value.strip()
        labels = value.rstrip(".").split(".")
        if not value or len(value) > 253 or not all(
                0 < len(label) <= 63 and not label.startswith("-") and not label.endswith("-")
                and all(c.isalnum() or c in "-_" for c in label) for label in labels):
            raise ValueError(f"{value!r} is not a DNS name")
        return value

    @field_validator("resolution_timeout")
    @classmethod
    def _answers_in_time(cls, value: float) -> float:
        if not 0 < value <= 4:
            raise ValueError(f"{value:g}: seconds, more than 0 and at most 4 (the node waits "
                             "5 s for a discovery answer)")
        return value


class ExtensionDiscovery(ConfigModel, tag="extension"):
    """Nodes come from an installed discovery extension (a plugin)."""

    reload_interval: PositiveInt = element(tag="reload-interval", default=60)
    """Seconds between two asks of the extension for the current node list."""
    name: str | None = element(tag="name", default=None)
    """Hive addition: the discovery extension to ask, by its name in ``hive extensions``
    (``s3-discovery``, ``consul-discovery``, ``docker-discovery``); the other discovery
    extensions installed stay idle, and the named one runs even on its default settings.
    Without it, every installed discovery extension that has settings of its own answers, and
    one with none stays idle."""


class Discovery(ConfigModel, tag="discovery"):
    """<discovery> holds exactly one mechanism; none means the default (see Cluster)."""

    static: StaticDiscovery | None = element(tag="static", default=None)
    """A fixed list of nodes."""
    multicast: MulticastDiscovery | None = element(tag="multicast", default=None)
    """Nodes announce themselves on the UDP transport's multicast group."""
    broadcast: BroadcastDiscovery | None = element(tag="broadcast", default=None)
    """Nodes announce themselves by UDP broadcast (TCP transport)."""
    dns: DnsDiscovery | None = element(tag="dns", default=None)
    """Nodes are the addresses a DNS name resolves to (a Kubernetes headless service)."""
    extension: ExtensionDiscovery | None = element(tag="extension", default=None)
    """Nodes come from a discovery extension (S3, Consul, Docker, ...)."""

    @property
    def chosen(
        self,
    ) -> (StaticDiscovery | MulticastDiscovery | BroadcastDiscovery | DnsDiscovery
          | ExtensionDiscovery | None):
        return self.static or self.multicast or self.broadcast or self.dns or self.extension

    @model_validator(mode="after")
    def _one_mechanism(self) -> Discovery:
        given = [
            kind
            for kind in ("static", "multicast", "broadcast", "dns", "extension")
            if getattr(self, kind) is not None
        ]
        if len(given) > 1:
            raise misplaced(given[1], f"<discovery> takes one mechanism, got {' and '.join(given)}")
        return self


class Heartbeat(ConfigModel, tag="heartbeat"):
    """Interval and timeout default per transport; see Cluster.effective_heartbeat()."""

    enabled: XmlBool = element(tag="enabled", default=True)
    """Whether heartbeats detect a silent node."""
    interval: Milliseconds | None = element(tag="interval", default=None)
    """Milliseconds between heartbeats; not set: 3000 over TCP, 8000 over UDP."""
    timeout: Milliseconds | None = element(tag="timeout", default=None)
    """Milliseconds of silence before a node is dropped; not set: 9000 TCP, 40000 UDP."""


class TcpHealthCheck(ConfigModel, tag="tcp-health-check"):
    """A held-open TCP connection per peer, to notice a node leaving sooner than heartbeats."""

    enabled: XmlBool = element(tag="enabled", default=True)
    """Whether each node holds a TCP connection to every peer."""
    bind_address: str | None = element(tag="bind-address", default=None)
    """The local address of the health port; not set: the transport's."""
    bind_port: BindPort = element(tag="bind-port", default=0)
    """0: an ephemeral port."""
    external_address: str | None = element(tag="external-address", default=None)
    """The address peers dial for the health port (NAT); not set: the node's."""
    external_port: Port = element(tag="external-port", default=0)
    """The port peers dial for the health port (NAT); 0: the bound port."""
    port_range: NonNegativeInt = element(tag="port-range", default=50)
    """Also try bind-port+1 .. bind-port+port-range when bind-port is taken; 0: bind-port only."""

    @model_validator(mode="after")
    def _range_fits(self) -> TcpHealthCheck:
        if self.bind_port and self.bind_port + self.port_range > 65535:
            raise misplaced("port-range", f"bind-port {self.bind_port} + port-range "
                            f"{self.port_range} goes past port 65535")
        return self


class ClusterAuthentication(ConfigModel, tag="authentication"):
    """Hive addition: how the nodes of a cluster know each other from strangers."""

    shared_secret: SharedSecret | None = element(tag="shared-secret", default=None, repr=False)
    """A secret every node of the cluster is given, at least 16 characters (`${ENV:NAME}` keeps
    it out of the file). On every node link both nodes prove they hold it before anything else
    crosses, and every write after is signed with it; a peer that cannot is refused, logged and
    counted. Needed when the cluster port is reachable from other hosts, unless cluster TLS
    requires client certificates. Make one with `python -c "import secrets;
    print(secrets.token_urlsafe(32))"`."""


class FailureDetection(ConfigModel, tag="failure-detection"):
    heartbeat: Heartbeat = element(default_factory=Heartbeat)
    """Heartbeats over the node links."""
    tcp_health_check: TcpHealthCheck = element(default_factory=TcpHealthCheck)
    """A held-open TCP connection per peer: a node that dies is noticed at once."""


class Replication(ConfigModel, tag="replication"):
    replica_count: PositiveInt = element(tag="replica-count", default=2)
    """Copies of each piece of persistent data, original included; capped at the member count."""


@dataclass(frozen=True, slots=True)
class EffectiveHeartbeat:
    enabled: bool
    interval_ms: int
    timeout_ms: int


# Heartbeat defaults differ per transport (HiveMQ cluster docs, "Heartbeat" table).
_HEARTBEAT_DEFAULTS: dict[TransportKind, tuple[int, int]] = {
    "tcp": (3000, 9000),
    "udp": (8000, 40000),
}


class Cluster(ConfigModel, tag="cluster"):
    """<cluster>.

    Transport and discovery must fit: UDP works only with multicast discovery, and multicast
    discovery only with UDP transport whose multicast is enabled. When one is left out it is
    chosen to fit the other; when both are, UDP with multicast (HiveMQ's default, meant for
    local testing). So a config with only static discovery (seed 000) runs over TCP, and one
    with only a TCP transport (the TLS example) uses static discovery with no nodes listed:
    the node waits for others to find it.
    """

    enabled: XmlBool = element(tag="enabled", default=False)
    """Whether this node joins a cluster."""
    node_name: NodeName | None = element(tag="node-name", default=None)
    """Hive addition: this node's id in the cluster (logs, REST API), unique among the nodes;
    not set: an id made at the first start and kept in the data folder."""
    host_discovery_address: str | None = element(tag="host-discovery-address", default=None)
    """The address other nodes reach this node on (seed 000): what it announces to discovery
    and to its peers. The transport's <external-address> says the same; give one of them."""
    transport: Transport | None = element(tag="transport", default=None)
    """How nodes talk to each other: <tcp> or <udp>."""
    discovery: Discovery | None = element(tag="discovery", default=None)
    """How nodes find each other: one of static, multicast, broadcast, extension."""
    authentication: ClusterAuthentication = element(default_factory=ClusterAuthentication)
    """How nodes prove to each other that they belong to this cluster."""
    failure_detection: FailureDetection = element(default_factory=FailureDetection)
    """How a node that left is noticed."""
    replication: Replication = element(default_factory=Replication)
    """Copies of persistent data across nodes."""

    def _explicit_transport(self) -> TcpTransport | UdpTransport | None:
        if self.transport is None:
            return None
        return self.transport.tcp or self.transport.udp

    def _explicit_discovery(
        self,
    ) -> (StaticDiscovery | MulticastDiscovery | BroadcastDiscovery | DnsDiscovery
          | ExtensionDiscovery | None):
        return None if self.discovery is None else self.discovery.chosen

    def effective_transport(self) -> TcpTransport | UdpTransport:
        """The transport in use: the one configured, else the one fitting the discovery."""
        explicit = self._explicit_transport()
        if explicit is not None:
            return explicit
        discovery = self._explicit_discovery()
        if discovery is None or isinstance(discovery, MulticastDiscovery):
            return UdpTransport()
        return TcpTransport()

    def effective_discovery(
        self,
    ) -> (StaticDiscovery | MulticastDiscovery | BroadcastDiscovery | DnsDiscovery
          | ExtensionDiscovery):
        """The discovery in use: the one configured, else the one fitting the transport."""
        explicit = self._explicit_discovery()
        if explicit is not None:
            return explicit
        if isinstance(self.effective_transport(), TcpTransport):
            return StaticDiscovery()
        return MulticastDiscovery()

    @property
    def external_address(self) -> str | None:
        """The address other nodes reach this node on, when configured (NAT, several NICs)."""
        return self.effective_transport().external_address or self.host_discovery_address

    def outside_reach(self) -> str | None:
        """Why hosts other than this one can reach this node's cluster port (None: they cannot).

        Without a <bind-address> a node whose discovery only finds nodes on this host (LAN
        discovery on loopback, a static list of loopback addresses) listens on loopback only.
        """
        transport = self.effective_transport()
        external = self.external_address
        if external and not is_loopback_host(external):
            return f"it tells other nodes to reach it on {external}"
        bind = transport.bind_address
        if bind is None:
            if self._discovery_stays_on_this_host():
                return None
            return "without a <bind-address> it listens on every interface"
        if is_loopback_host(bind):
            return None
        if bind in ("0.0.0.0", "::"):
            return f"<bind-address> {bind} is every interface"
        return f"<bind-address> {bind} is not a loopback address"

    def _discovery_stays_on_this_host(self) -> bool:
        discovery = self.effective_discovery()
        if isinstance(discovery, MulticastDiscovery | BroadcastDiscovery):
            return True  # without a bind address LAN discovery stays on loopback
        if isinstance(discovery, StaticDiscovery):
            return bool(discovery.nodes) and all(is_loopback_host(n.host) for n in discovery.nodes)
        return False

    @property
    def tls_authenticates_nodes(self) -> bool:
        """Whether cluster TLS keeps out a node without a certificate the cluster trusts."""
        transport = self.effective_transport()
        return isinstance(transport, TcpTransport) and transport.tls is not None and \
            transport.tls.enabled and transport.tls.client_authentication_mode == "REQUIRED"

    @property
    def transport_kind(self) -> TransportKind:
        return "tcp" if isinstance(self.effective_transport(), TcpTransport) else "udp"

    @property
    def discovery_kind(self) -> DiscoveryKind:
        tag = type(self.effective_discovery()).__xml_tag__
        assert tag in ("static", "multicast", "broadcast", "dns", "extension")
        return tag  # type: ignore[return-value]

    def effective_heartbeat(self) -> EffectiveHeartbeat:
        """Heartbeat settings with the transport's defaults filled in (TCP 3000/9000 ms,
        UDP 8000/40000 ms)."""
        interval, timeout = _HEARTBEAT_DEFAULTS[self.transport_kind]
        heartbeat = self.failure_detection.heartbeat
        return EffectiveHeartbeat(
            enabled=heartbeat.enabled,
            interval_ms=heartbeat.interval if heartbeat.interval is not None else interval,
            timeout_ms=heartbeat.timeout if heartbeat.timeout is not None else timeout,
        )

    @model_validator(mode="after")
    def _transport_fits_discovery(self) -> Cluster:
        transport = self.effective_transport()
        discovery = self.effective_discovery()
        discovery_tag = type(discovery).__xml_tag__
        if isinstance(transport, UdpTransport) and not isinstance(discovery, MulticastDiscovery):
            raise misplaced(
                f"discovery/{discovery_tag}",
                f"{discovery_tag} discovery does not work with UDP transport; UDP transport "
                "works only with multicast discovery (use <transport><tcp>)",
            )
        if isinstance(discovery, MulticastDiscovery):
            if isinstance(transport, TcpTransport):
                raise misplaced(
                    "discovery/multicast",
                    "multicast discovery does not work with TCP transport; it uses the "
                    "multicast address of the UDP transport (use <transport><udp>, or "
                    "static, broadcast or extension discovery)",
                )
            if not transport.multicast_enabled:
                raise misplaced(
                    "transport/udp/multicast-enabled",
                    "multicast discovery needs <multicast-enabled>true</multicast-enabled> "
                    "on the UDP transport",
                )
        heartbeat = self.effective_heartbeat()
        if heartbeat.enabled and heartbeat.timeout_ms <= heartbeat.interval_ms:
            raise misplaced(
                "failure-detection/heartbeat",
                f"heartbeat timeout ({heartbeat.timeout_ms} ms) must be longer than its "
                f"interval ({heartbeat.interval_ms} ms)",
            )
        external = self.effective_transport().external_address
        if self.host_discovery_address and external and external != self.host_discovery_address:
            raise misplaced(
                "host-discovery-address",
                f"host-discovery-address {self.host_discovery_address} and the transport's "
                f"external-address {external} both say where other nodes reach this node; "
                "keep one of them",
            )
        return self

    @model_validator(mode="after")
    def _enabled_is_said(self) -> Cluster:
        # A <cluster> that sets it up but does not say <enabled> (seed 000's shape) would run
        # a lone broker while the operator believes it is clustered: refuse, do not guess.
        given = self.model_fields_set - {"enabled"}
        if given and "enabled" not in self.model_fields_set:
            slots = model_shape(Cluster).slots
            elements = ", ".join(f"<{slots[name].outer_tags[0]}>" for name in sorted(given))
            raise ValueError(
                f"<cluster> sets {elements} but not <enabled>, and a cluster is off unless "
                "enabled: add <enabled>true</enabled> to run this node in the cluster, or "
                "<enabled>false</enabled> to run it alone on purpose"
            )
        return self

    @model_validator(mode="after")
    def _nodes_authenticate_beyond_this_host(self) -> Cluster:
        # Issue 8: anything that reached the node port could join, read and inject.
        if not self.enabled or self.authentication.shared_secret is not None \
                or self.tls_authenticates_nodes:
            return self
        reach = self.outside_reach()
        if reach is None:
            return self
        remedy = (f"give every node the same <authentication><shared-secret> (at least "
                  f"{MIN_SECRET_LENGTH} characters, e.g. ${{ENV:HIVE_CLUSTER_SECRET}}; make one "
                  f"with `{SECRET_RECIPE}`)")
        transport = self.effective_transport()
        tag = f"transport/{self.transport_kind}"
        if isinstance(transport, TcpTransport) and transport.tls_enabled:
            assert transport.tls is not None
            raise misplaced(
                f"{tag}/tls/client-authentication-mode",
                f"cluster TLS with client-authentication-mode "
                f"{transport.tls.client_authentication_mode} lets in a node without a "
                f"certificate, and this cluster is reachable from other hosts ({reach}): set "
                f"it to REQUIRED, or {remedy}")
        if self.external_address and not is_loopback_host(self.external_address):
            at = f"{tag}/external-address" if transport.external_address else \
                "host-discovery-address"
        else:
            at = f"{tag}/bind-address"
        raise misplaced(
            at,
            f"this cluster is reachable from other hosts ({reach}) and its nodes do not "
            f"authenticate each other, so anything that reaches the cluster port could join, "
            f"read every message and publish its own: {remedy}, or use <transport><tcp><tls> "
            f"with <client-authentication-mode>REQUIRED</client-authentication-mode>, or "
            f"<bind-address>127.0.0.1</bind-address> for a cluster on this host only")
