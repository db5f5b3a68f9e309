"""config.xml, parsed with pydantic-xml into frozen, typed models.

``load_config(path)`` / ``parse_config(text)`` return a :class:`HiveConfig`; anything wrong
raises :class:`ConfigError` naming the file, the element path and the line. Element names
are HiveMQ 4's (kebab-case), attributes are their snake_case spelling.
"""

from ._cluster import (
    BroadcastDiscovery,
    Cluster,
    ClusterTls,
    Discovery,
    DiscoveryKind,
    EffectiveHeartbeat,
    ExtensionDiscovery,
    FailureDetection,
    Heartbeat,
    MulticastDiscovery,
    Replication,
    StaticDiscovery,
    StaticNode,
    TcpHealthCheck,
    TcpTransport,
    Transport,
    TransportKind,
    UdpTransport,
)
from ._errors import ConfigError
from ._listeners import (
    AnyListener,
    Keystore,
    LegacyTcpListener,
    ListenerKind,
    Listeners,
    ListenerTls,
    TcpListener,
    TlsTcpListener,
    TlsWebsocketListener,
    Truststore,
    WebsocketListener,
)
from ._loader import load_config, parse_config
from ._mqtt import (
    FeatureSwitch,
    InflightWindow,
    KeepAlive,
    MessageExpiry,
    Mqtt,
    Packets,
    QualityOfService,
    QueuedMessages,
    ReceiveMaximum,
    Restrictions,
    SessionExpiry,
    TopicAlias,
)
from ._node import Extensions, Persistence
from ._reference import reference_markdown
from ._rest_api import HttpListener, RestApi
from ._root import HiveConfig, default_config

__all__ = [
    "AnyListener",
    "BroadcastDiscovery",
    "Cluster",
    "ClusterTls",
    "ConfigError",
    "Discovery",
    "DiscoveryKind",
    "EffectiveHeartbeat",
    "ExtensionDiscovery",
    "Extensions",
    "FailureDetection",
    "FeatureSwitch",
    "Heartbeat",
    "HiveConfig",
    "HttpListener",
    "InflightWindow",
    "KeepAlive",
    "Keystore",
    "LegacyTcpListener",
    "ListenerKind",
    "ListenerTls",
    "Listeners",
    "MessageExpiry",
    "Mqtt",
    "MulticastDiscovery",
    "Packets",
    "Persistence",
    "QualityOfService",
    "QueuedMessages",
    "ReceiveMaximum",
    "Replication",
    "RestApi",
    "Restrictions",
    "SessionExpiry",
    "StaticDiscovery",
    "StaticNode",
    "TcpHealthCheck",
    "TcpListener",
    "TcpTransport",
    "TlsTcpListener",
    "TlsWebsocketListener",
    "TopicAlias",
    "Transport",
    "TransportKind",
    "Truststore",
    "UdpTransport",
    "WebsocketListener",
    "default_config",
    "load_config",
    "parse_config",
    "reference_markdown",
]
