"""Config elements that had no test showing they change anything (tests/config/test_every_field):
TLS listener protocols, cipher suites, handshake timeout and an encrypted key's password;
WebSocket subprotocols and extensions; max-topic-length; the REST listener's name; node-name;
multicast-ttl; persistence commit-interval and sync reaching the store."""

from __future__ import annotations

import logging
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port
from cryptography.hazmat.primitives import serialization
from e2e.certs import make_pki
from e2e.rawclient import RawClient
from e2e.test_listeners import upgrade_answer

from hive_core.config import parse_config
from hive_core.mqtt import Disconnect, PubAck, Publish
from hive_core.plugins import file_persistence
from hive_core.plugins.multicast_discovery import MulticastDiscovery
from hive_ext_api import ExtensionContext

pytestmark = pytest.mark.timeout(60)


def _tls_listener(port: int, keystore: str, tls_extra: str = "") -> str:
    return (f"<tls-tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address><tls>"
            f"<keystore>{keystore}</keystore>{tls_extra}</tls></tls-tcp-listener>")


def _client_context(pki: Any, version: ssl.TLSVersion | None = None,
                    ciphers: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    context.check_hostname = False
    if version is not None:
        context.minimum_version = context.maximum_version = version
    if ciphers is not None:
        context.set_ciphers(ciphers)
    return context


def _handshake(port: int, context: ssl.SSLContext) -> str:
    """The TLS version agreed, or raises ssl.SSLError."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        return str(tls.version())


def test_tls_protocols_and_cipher_suites_limit_what_a_client_may_use(
        hive_factory: Any, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    only13, only_one_cipher = free_port(), free_port()
    keystore = f"<path>{pki.server_pem}</path>"
    hive_factory(listeners=(
        _tls_listener(only13, keystore, "<protocols><protocol>TLSv1.3</protocol></protocols>")
        + _tls_listener(only_one_cipher, keystore,
                        "<protocols><protocol>TLSv1.2</protocol></protocols><cipher-suites>"
                        "<cipher-suite>ECDHE-ECDSA-AES128-GCM-SHA256</cipher-suite>"
                        "</cipher-suites>")))
    assert _handshake(only13, _client_context(pki)) == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        _handshake(only13, _client_context(pki, ssl.TLSVersion.TLSv1_2))
    assert _handshake(only_one_cipher, _client_context(
        pki, ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-GCM-SHA256")) == "TLSv1.2"
    with pytest.raises(ssl.SSLError):
        _handshake(only_one_cipher, _client_context(
            pki, ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES256-GCM-SHA384"))


def test_tls_handshake_timeout_closes_a_silent_connection(hive_factory: Any,
                                                          tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    hive_factory(listeners=_tls_listener(port, f"<path>{pki.server_pem}</path>",
                                         "<handshake-timeout>500</handshake-timeout>"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
        begun = time.monotonic()
        assert silent.recv(1) == b""  # closed by the node, no ClientHello ever sent
        assert 0.4 < time.monotonic() - begun < 5.0


def test_an_encrypted_key_is_opened_with_private_key_password(hive_factory: Any,
                                                              tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    key = serialization.load_pem_private_key(pki.server_key_pem.read_bytes(), None)
    encrypted = tmp_path / "server-encrypted.pem"
    encrypted.write_bytes(pki.server_cert_pem.read_bytes() + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"k3y-pass")))
    port = free_port()
    hive_factory(listeners=_tls_listener(
        port, f"<path>{encrypted}</path><private-key-password>k3y-pass</private-key-password>"))
    assert _handshake(port, _client_context(pki)).startswith("TLSv1.")
    refused = hive_factory(listeners=_tls_listener(
        free_port(), f"<path>{encrypted}</path><private-key-password>wrong</private-key-password>"),
        start=False)
    with pytest.raises(RuntimeError, match="cannot load key store"):
        refused.start()


def _upgrade(port: int, subprotocol: str, extensions: str = "") -> str:
    """The status line and headers of a WebSocket upgrade answer, in lower case."""
    return upgrade_answer(port, "/mqtt", subprotocol, extensions).decode(errors="replace").lower()


def test_websocket_subprotocols_and_extensions(hive_factory: Any) -> None:
    plain, custom = free_port(), free_port()
    hive_factory(listeners=(
        f"<websocket-listener><port>{plain}</port><bind-address>127.0.0.1</bind-address>"
        "</websocket-listener>"
        f"<websocket-listener><port>{custom}</port><bind-address>127.0.0.1</bind-address>"
        "<subprotocols><subprotocol>mqttv5</subprotocol></subprotocols>"
        "<allow-extensions>true</allow-extensions></websocket-listener>"))
    offer = "permessage-deflate; client_max_window_bits"
    default = _upgrade(plain, "mqtt", offer)
    assert default.startswith("http/1.1 101") and "sec-websocket-extensions" not in default
    allowed = _upgrade(custom, "mqttv5", offer)
    assert allowed.startswith("http/1.1 101")
    assert "sec-websocket-extensions: permessage-deflate" in allowed
    assert _upgrade(custom, "mqtt").startswith("http/1.1 400")  # not among its subprotocols


def test_max_topic_length_refuses_longer_topics_and_filters(hive_factory: Any) -> None:
    node = hive_factory(body="<restrictions><max-topic-length>8</max-topic-length>"
                             "</restrictions>")
    with RawClient(node.port) as client:
        client.connect(5, "short")
        assert client.subscribe("a/b/c/d").reason_codes == [0]
        assert client.subscribe("a/b/c/d/e").reason_codes == [0x8F]  # topic filter invalid
        client.publish("a/b/c/d", b"ok", qos=0)
        assert client.expect(Publish).topic == "a/b/c/d"
        client.publish("a/b/c/d/e", b"no", qos=0)
        assert client.expect(Disconnect).reason_code == 0x90  # topic name invalid


def test_max_topic_levels_refuses_deeper_topics_and_filters(hive_factory: Any) -> None:
    node = hive_factory(body="<restrictions><max-topic-levels>3</max-topic-levels>"
                             "</restrictions>")
    deep = "/".join(["l"] * 1500)
    with RawClient(node.port) as client:
        client.connect(5, "levels")
        assert client.subscribe("a/b/c").reason_codes == [0]
        assert client.subscribe("a/b/c/d").reason_codes == [0x8F]  # topic filter invalid
        assert client.subscribe(deep).reason_codes == [0x8F]
        client.publish("a/b/c", b"ok", qos=0)
        assert client.expect(Publish).topic == "a/b/c"
        client.publish(deep, b"no", qos=0)
        assert client.expect(Disconnect).reason_code == 0x90  # topic name invalid
    with RawClient(node.port) as client:  # the node serves on
        assert client.connect(5, "after").reason_code == 0


def test_the_rest_listeners_name_is_in_the_log(hive_factory: Any) -> None:
    rest = free_port()
    node = hive_factory(body="<rest-api><enabled>true</enabled><listeners><http>"
                             f"<port>{rest}</port><bind-address>127.0.0.1</bind-address>"
                             "<name>operators</name></http></listeners></rest-api>")
    node.wait_for_log(rf"Started REST API operators on address 127\.0\.0\.1 and on port {rest}")


def test_node_name_is_the_nodes_id_in_the_cluster(hive_factory: Any) -> None:
    from cluster._nodes import cluster_body, cluster_nodes, wait_for_members

    ports = [free_port(), free_port()]
    nodes = []
    for name, port in zip(("alpha", "beta"), ports, strict=True):
        rest = free_port()
        body = cluster_body(port, ports, rest).replace(
            "<cluster><enabled>true</enabled>",
            f"<cluster><enabled>true</enabled><node-name>{name}</node-name>")
        nodes.append(hive_factory(body=body, rest=rest))
    wait_for_members(nodes, 2)
    assert sorted(m["id"] for m in cluster_nodes(nodes[0])) == ["alpha", "beta"]
    nodes[1].wait_for_log(r"Cluster size = 2, members : \['alpha', 'beta'\]")


def test_multicast_ttl_is_the_announcements_ttl() -> None:
    cluster = parse_config(
        "<hivemq><cluster><enabled>true</enabled><transport><udp><multicast-port>"
        f"{free_port()}</multicast-port><multicast-ttl>3</multicast-ttl></udp></transport>"
        "</cluster></hivemq>").cluster
    settings = MulticastDiscovery().settings_for(cluster, logging.getLogger("test"))
    channel = settings.open_channel()
    try:
        assert channel.sock.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL) == 3
    finally:
        channel.sock.close()


def test_commit_interval_and_sync_reach_the_file_store(tmp_path: Path) -> None:
    """What the store does with them is tests/persistence's business (test_file_store.py)."""
    config = parse_config("<hivemq><persistence><commit-interval>25</commit-interval>"
                          "<sync>false</sync></persistence></hivemq>")
    context = ExtensionContext("persistence", tmp_path, None, logging.getLogger("t"),  # type: ignore[arg-type]
                               config, tmp_path)
    store = file_persistence.hive_session_store(context)
    assert (store._commit_interval, store._sync) == (0.025, False)  # type: ignore[attr-defined]
    default = file_persistence.hive_session_store(ExtensionContext(
        "persistence", tmp_path, None, logging.getLogger("t"), parse_config("<hivemq/>"),  # type: ignore[arg-type]
        tmp_path))
    assert (default._commit_interval, default._sync) == (0.002, True)  # type: ignore[attr-defined]


def test_delivery_hold_keeps_the_publishers_puback_until_the_subscriber_acknowledges(
        hive_factory: Any) -> None:
    """With a hold of 3 s, a delivery to a connected persistent subscriber is not written while
    its PUBACK may come, so the publisher's PUBACK waits for the subscriber's."""
    node = hive_factory(body="<persistence><delivery-hold>3000</delivery-hold></persistence>")
    with RawClient(node.port) as subscriber, RawClient(node.port) as publisher:
        subscriber.connect(4, "holding", clean_start=False)
        subscriber.subscribe("held/t", qos=1)
        publisher.connect(4, "holding-pub")
        publisher.publish("held/t", b"x", qos=1)
        delivery = subscriber.expect(Publish)
        assert publisher.receive(timeout=1.0) is None  # held: neither written nor acknowledged
        subscriber.send(PubAck(delivery.packet_id))
        assert isinstance(publisher.receive(timeout=5.0), PubAck)
    off = parse_config("<hivemq><persistence><delivery-hold>0</delivery-hold></persistence>"
                       "</hivemq>")
    store = file_persistence.hive_session_store(ExtensionContext(
        "persistence", node.folder, None, logging.getLogger("t"), off, node.folder))  # type: ignore[arg-type]
    assert store._delivery_hold == 0  # type: ignore[attr-defined]


def test_in_memory_persistence_keeps_nothing_across_a_restart(hive_factory: Any) -> None:
    kept, forgotten = hive_factory(), hive_factory(body="<persistence><mode>in-memory</mode>"
                                                        "</persistence>")
    for node in (kept, forgotten):
        with RawClient(node.port) as client:
            client.connect(5, "durable", clean_start=False, SESSION_EXPIRY_INTERVAL=3600)
            client.subscribe("t", qos=1)
            client.disconnect()
        node.restart()
        with RawClient(node.port) as client:
            present = client.connect(5, "durable", clean_start=False,
                                     SESSION_EXPIRY_INTERVAL=3600).session_present
        assert present is (node is kept)
    assert not (forgotten.data_dir / "persistence").exists()


def test_heartbeat_enabled_false_and_udp_external_address_reach_the_cluster() -> None:
    from hive_core.node import cluster_settings

    config = parse_config(
        "<hivemq><cluster><enabled>true</enabled><transport><udp><bind-address>127.0.0.1"
        "</bind-address><bind-port>7811</bind-port><external-address>192.0.2.40"
        "</external-address><external-port>17811</external-port></udp></transport>"
        "<failure-detection><heartbeat><enabled>false</enabled></heartbeat>"
        "</failure-detection><authentication><shared-secret>a-secret-for-tests-only"
        "</shared-secret></authentication></cluster></hivemq>")
    settings = cluster_settings(config)
    assert (settings.bind_host, settings.bind_port) == ("127.0.0.1", 7811)
    assert (settings.external_host, settings.external_port) == ("192.0.2.40", 17811)
    assert settings.heartbeat_timeout == float("inf")  # never dropped for silence
    assert settings.transport_kind == "udp"
