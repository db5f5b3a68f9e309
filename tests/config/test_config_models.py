"""Defaults, ${ENV:...}, both <node> shapes, listener order and the effective cluster values."""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path

import pydantic
import pytest

from hive_core.config import (
    HiveConfig,
    Listeners,
    StaticDiscovery,
    TcpListener,
    TlsTcpListener,
    TlsWebsocketListener,
    WebsocketListener,
    default_config,
    load_config,
    parse_config,
)

# A cluster reachable from other hosts needs one (see test_cluster_authentication_config.py).
SECRET = "<authentication><shared-secret>a-secret-for-tests-only</shared-secret></authentication>"


def _static(config: HiveConfig) -> StaticDiscovery:
    discovery = config.cluster.effective_discovery()
    assert isinstance(discovery, StaticDiscovery)
    return discovery


def test_default_config_is_one_plain_tcp_listener_and_no_cluster() -> None:
    config = default_config()
    assert list(config.listeners) == [TcpListener(port=1883, bind_address="0.0.0.0")]
    assert config.cluster.enabled is False
    assert config == parse_config("<hivemq/>")
    assert config == parse_config("<hivemq></hivemq>")


MQTT_SETTINGS: dict[str, tuple[object, object]] = {
    # <mqtt> setting: (its default, its value in test_full_mqtt_section's document)
    "queued_messages.max_queue_size": (1000, 5),
    "queued_messages.strategy": ("discard", "discard-oldest"),
    "topic_alias.enabled": (True, False),
    "topic_alias.max_per_client": (5, 9),
    "message_expiry.max_interval": (4294967296, 60),
    "session_expiry.max_interval": (4294967295, 0),
    "packets.max_packet_size": (268435460, 1024),
    "receive_maximum.server_receive_maximum": (100, 3),
    "keep_alive.allow_unlimited": (True, False),
    "keep_alive.max_keep_alive": (65535, 60),
    "subscription_identifier.enabled": (True, False),
    "wildcard_subscriptions.enabled": (True, False),
    "shared_subscriptions.enabled": (True, False),
    "retained_messages.enabled": (True, False),
    "quality_of_service.max_qos": (2, 1),
    "inflight_window.max_messages": (32, 4),
}


def mqtt_settings(config: HiveConfig) -> dict[str, object]:
    """The values of MQTT_SETTINGS' settings in ``config``."""
    return {name: attrgetter(name)(config.mqtt) for name in MQTT_SETTINGS}


def test_mqtt_defaults() -> None:
    defaults = {name: default for name, (default, _) in MQTT_SETTINGS.items()}
    assert mqtt_settings(default_config()) == defaults


def test_restrictions_persistence_extensions_defaults() -> None:
    config = default_config()
    restrictions = config.restrictions
    assert restrictions.max_connections == -1 and restrictions.connection_limit is None
    assert restrictions.max_client_id_length == 65535
    assert restrictions.max_topic_length == 65535
    assert restrictions.no_connect_idle_timeout == 10000
    assert restrictions.incoming_bandwidth_throttling == 0
    persistence = config.persistence
    assert (persistence.mode, persistence.commit_interval, persistence.sync) == ("file", 2, True)
    assert config.extensions.disabled == ()


def test_cluster_defaults_follow_the_docs() -> None:
    cluster = default_config().cluster
    assert cluster.transport_kind == "udp" and cluster.discovery_kind == "multicast"
    transport = cluster.effective_transport()
    assert (transport.bind_address, transport.bind_port, transport.external_port) == (None, 8000, 0)
    check = cluster.failure_detection.tcp_health_check
    assert (check.enabled, check.bind_port, check.external_port, check.port_range) == (
        True,
        0,
        0,
        50,
    )
    assert cluster.replication.replica_count == 2


@pytest.mark.parametrize(
    ("transport", "interval", "timeout"),
    [
        (f"<transport><tcp/></transport><discovery><static/></discovery>{SECRET}", 3000, 9000),
        ("<transport><udp/></transport>", 8000, 40000),
        ("<discovery><broadcast/></discovery>", 3000, 9000),
        ("", 8000, 40000),
    ],
)
def test_heartbeat_defaults_depend_on_transport(
    transport: str, interval: int, timeout: int
) -> None:
    config = parse_config(f"<hivemq><cluster><enabled>true</enabled>{transport}</cluster></hivemq>")
    heartbeat = config.cluster.effective_heartbeat()
    assert (heartbeat.enabled, heartbeat.interval_ms, heartbeat.timeout_ms) == (
        True,
        interval,
        timeout,
    )


def test_heartbeat_given_values_win() -> None:
    config = parse_config(
        "<hivemq><cluster><enabled>true</enabled><failure-detection><heartbeat><enabled>false</enabled>"
        "<timeout>20000</timeout></heartbeat></failure-detection></cluster></hivemq>"
    )
    heartbeat = config.cluster.effective_heartbeat()
    assert (heartbeat.enabled, heartbeat.interval_ms, heartbeat.timeout_ms) == (False, 8000, 20000)


def test_full_mqtt_section() -> None:
    config = parse_config(
        """<hivemq>
          <mqtt>
            <queued-messages><max-queue-size>5</max-queue-size>
              <strategy>discard-oldest</strategy></queued-messages>
            <topic-alias><enabled>false</enabled><max-per-client>9</max-per-client></topic-alias>
            <message-expiry><max-interval>60</max-interval></message-expiry>
            <session-expiry><max-interval>0</max-interval></session-expiry>
            <packets><max-packet-size>1024</max-packet-size></packets>
            <receive-maximum><server-receive-maximum>3</server-receive-maximum></receive-maximum>
            <keep-alive><allow-unlimited>false</allow-unlimited>
              <max-keep-alive>60</max-keep-alive></keep-alive>
            <subscription-identifier><enabled>false</enabled></subscription-identifier>
            <wildcard-subscriptions><enabled>false</enabled></wildcard-subscriptions>
            <shared-subscriptions><enabled>false</enabled></shared-subscriptions>
            <quality-of-service><max-qos>1</max-qos></quality-of-service>
            <retained-messages><enabled>false</enabled></retained-messages>
            <inflight-window><max-messages>4</max-messages></inflight-window>
          </mqtt>
          <restrictions>
            <max-connections>100</max-connections>
            <max-client-id-length>23</max-client-id-length>
            <max-topic-length>128</max-topic-length>
            <no-connect-idle-timeout>500</no-connect-idle-timeout>
            <incoming-bandwidth-throttling>1000</incoming-bandwidth-throttling>
          </restrictions>
          <persistence><mode>in-memory</mode><commit-interval>0</commit-interval>
            <sync>false</sync></persistence>
          <extensions><disabled><extension>hive-ext-s3</extension>
            <extension>static-discovery</extension></disabled></extensions>
        </hivemq>"""
    )
    configured = {name: value for name, (_, value) in MQTT_SETTINGS.items()}
    assert mqtt_settings(config) == configured
    assert config.restrictions.connection_limit == 100
    assert config.restrictions.max_client_id_length == 23
    assert config.restrictions.max_topic_length == 128
    assert config.restrictions.no_connect_idle_timeout == 500
    assert config.restrictions.incoming_bandwidth_throttling == 1000
    assert (config.persistence.mode, config.persistence.commit_interval) == ("in-memory", 0)
    assert config.persistence.sync is False
    assert config.extensions.disabled == ("hive-ext-s3", "static-discovery")


def test_listeners_keep_document_order_and_kind_defaults() -> None:
    config = parse_config(
        """<hivemq><listeners>
             <websocket-listener/>
             <tcp-listener><port>1884</port><name>inner</name></tcp-listener>
             <tls-websocket-listener>
               <tls><keystore><path>ws.p12</path><password>pw</password></keystore></tls>
             </tls-websocket-listener>
             <tls-tcp-listener>
               <bind-address>127.0.0.1</bind-address>
               <tls>
                 <protocols><protocol>TLSv1.3</protocol></protocols>
                 <cipher-suites><cipher-suite>TLS_AES_128_GCM_SHA256</cipher-suite></cipher-suites>
                 <keystore><path>server.pem</path><private-key-password>k</private-key-password>
                 </keystore>
                 <truststore><path>ca.pem</path></truststore>
                 <client-authentication-mode>REQUIRED</client-authentication-mode>
                 <handshake-timeout>2000</handshake-timeout>
               </tls>
             </tls-tcp-listener>
             <tcp-listener/>
           </listeners></hivemq>"""
    )
    kinds = [type(listener) for listener in config.listeners]
    assert kinds == [
        WebsocketListener,
        TcpListener,
        TlsWebsocketListener,
        TlsTcpListener,
        TcpListener,
    ]
    assert [listener.port for listener in config.listeners] == [8000, 1884, 8001, 8883, 1883]
    assert [listener.kind for listener in config.listeners] == [
        "websocket",
        "tcp",
        "tls-websocket",
        "tls-tcp",
        "tcp",
    ]
    websocket = config.listeners[0]
    assert isinstance(websocket, WebsocketListener)
    assert (websocket.path, websocket.subprotocols) == ("/mqtt", ("mqtt", "mqttv3.1"))
    assert websocket.allow_extensions is False
    assert config.listeners[1].display_name == "inner"
    assert config.listeners[4].display_name == "tcp-listener-1883"
    secure_ws = config.listeners[2]
    assert isinstance(secure_ws, TlsWebsocketListener)
    assert secure_ws.tls.protocols == ("TLSv1.3", "TLSv1.2")
    assert secure_ws.tls.keystore.password == "pw"
    assert (secure_ws.tls.client_authentication_mode, secure_ws.tls.handshake_timeout) == (
        "NONE",
        10000,
    )
    tls = config.listeners[3]
    assert isinstance(tls, TlsTcpListener)
    assert tls.bind_address == "127.0.0.1"
    assert tls.tls.protocols == ("TLSv1.3",)
    assert tls.tls.cipher_suites == ("TLS_AES_128_GCM_SHA256",)
    assert tls.tls.keystore.private_key_password == "k"
    assert tls.tls.truststore is not None and tls.tls.truststore.path == "ca.pem"
    assert tls.tls.client_authentication_mode == "REQUIRED"
    assert tls.tls.handshake_timeout == 2000
    assert len(config.listeners) == 5


def test_empty_listeners_means_none() -> None:
    assert len(parse_config("<hivemq><listeners/></hivemq>").listeners) == 0


def test_seed_000_tcp_shape_is_a_tcp_listener() -> None:
    config = parse_config("<hivemq><listeners><tcp><port>1999</port></tcp></listeners></hivemq>")
    [listener] = config.listeners
    assert isinstance(listener, TcpListener) and listener.port == 1999


def test_static_node_shapes_mix() -> None:
    config = parse_config(
        """<hivemq><cluster><enabled>true</enabled>
             <transport><tcp><bind-port>7800</bind-port></tcp></transport>
             <discovery><static>
               <node ip="10.0.0.1"/>
               <node><host>node-b.example</host><port>7801</port></node>
               <node ip="10.0.0.3" port="7802"/>
               <node><host>10.0.0.4</host></node>
             </static></discovery>""" + SECRET + """
           </cluster></hivemq>"""
    )
    nodes = _static(config).nodes
    assert [node.address(7800) for node in nodes] == [
        ("10.0.0.1", 7800),
        ("node-b.example", 7801),
        ("10.0.0.3", 7802),
        ("10.0.0.4", 7800),
    ]
    assert nodes[0].ip == "10.0.0.1" and nodes[0].port is None


def test_environment_placeholders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_TEST_PORT", "1999")
    monkeypatch.setenv("HIVE_TEST_HOST", "10.1.2.3")
    monkeypatch.setenv("HIVE_TEST_PASSWORD", "a<b&c")
    monkeypatch.setenv("HIVE_TEST_CLUSTER_SECRET", "a cluster secret & <more>")
    config = parse_config(
        """<hivemq>
             <listeners><tls-tcp-listener><port>${ENV:HIVE_TEST_PORT}</port>
               <tls><keystore><path>k.pem</path><password>${ENV:HIVE_TEST_PASSWORD}</password>
               </keystore></tls></tls-tcp-listener></listeners>
             <cluster><enabled>true</enabled><discovery><static>
               <node ip="${ENV:HIVE_TEST_HOST}"/>
               <node><host>node-${ENV:HIVE_TEST_PORT}.local</host></node>
             </static></discovery>
             <authentication><shared-secret>${ENV:HIVE_TEST_CLUSTER_SECRET}</shared-secret>
             </authentication></cluster>
           </hivemq>"""
    )
    listener = config.listeners[0]
    assert isinstance(listener, TlsTcpListener)
    assert listener.port == 1999
    assert listener.tls.keystore.password == "a<b&c"  # taken literally, not as XML
    assert [node.host for node in _static(config).nodes] == ["10.1.2.3", "node-1999.local"]
    assert config.cluster.authentication.shared_secret == "a cluster secret & <more>"


def test_environment_placeholders_with_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """``${ENV:NAME:-default}`` as in a shell: the default when NAME is unset or empty."""
    monkeypatch.setenv("HIVE_TEST_PORT", "1999")
    monkeypatch.setenv("HIVE_TEST_EMPTY", "")
    monkeypatch.delenv("HIVE_TEST_UNSET", raising=False)
    config = parse_config(
        """<hivemq>
             <listeners>
               <tcp-listener><port>${ENV:HIVE_TEST_PORT:-1883}</port></tcp-listener>
               <tcp-listener><port>${ENV:HIVE_TEST_UNSET:-1884}</port></tcp-listener>
               <tcp-listener><port>${ENV:HIVE_TEST_EMPTY:-1885}</port>
                 <bind-address>${ENV:HIVE_TEST_UNSET:-}127.0.0.1</bind-address></tcp-listener>
             </listeners>
           </hivemq>"""
    )
    assert [listener.port for listener in config.listeners] == [1999, 1884, 1885]
    assert config.listeners[2].bind_address == "127.0.0.1"


def test_namespaces_and_xsi_attributes_are_accepted() -> None:
    config = parse_config(
        """<?xml version="1.0" encoding="UTF-8"?>
        <hivemq xmlns="http://www.hivemq.com/config"
                xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
                xsi:noNamespaceSchemaLocation="config.xsd">
          <persistence><mode>in-memory</mode></persistence>
        </hivemq>"""
    )
    assert config.persistence.mode == "in-memory"


def test_whitespace_around_values_is_ignored() -> None:
    config = parse_config(
        "<hivemq><listeners><tcp-listener><port>\n  1884\n</port>"
        "<bind-address> 127.0.0.1 </bind-address></tcp-listener></listeners>"
        "<persistence><mode> in-memory </mode></persistence></hivemq>"
    )
    assert (config.listeners[0].port, config.listeners[0].bind_address) == (1884, "127.0.0.1")
    assert config.persistence.mode == "in-memory"


def test_models_are_frozen() -> None:
    config = default_config()
    with pytest.raises(pydantic.ValidationError):
        config.mqtt = config.mqtt
    with pytest.raises(pydantic.ValidationError):
        config.listeners[0].port = 1


def test_round_trip_through_xml() -> None:
    config = parse_config(
        "<hivemq><listeners><tcp-listener/><websocket-listener/></listeners>"
        "<cluster><enabled>true</enabled><discovery><static><node><host>a</host></node>"
        f"</static></discovery>{SECRET}</cluster></hivemq>"
    )
    assert parse_config(config.to_xml(skip_empty=True)) == config


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "config.xml"
    path.write_text(
        "<hivemq><restrictions><max-connections>5</max-connections></restrictions></hivemq>"
    )
    assert load_config(path).restrictions.max_connections == 5
    assert load_config(str(path)) == load_config(path)


def test_listeners_can_be_built_in_python() -> None:
    listeners = Listeners(items=(TcpListener(port=1), WebsocketListener(port=2)))
    assert HiveConfig(listeners=listeners).listeners[1].port == 2
