"""``<proxy-protocol>true</proxy-protocol>``: a listener behind a load balancer reads the PROXY
header (v1 or v2) first, and the client's address in it is the one the node shows.

These tests write the header themselves, on a raw socket, to shape every case (fragments, LOCAL,
garbage, silence); tests/cluster/test_haproxy.py puts the real HAProxy in front.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from cluster._nodes import metrics
from conftest import free_port
from e2e.certs import PKI, make_pki
from e2e.rawclient import RawClient

from hive_core.config import parse_config
from hive_core.mqtt import ConnAck
from hive_core.net._proxy_header import V2_SIGNATURE
from hive_core.testing import RunningNode
from hive_ext_api import AuthDecision, ClientInfo, ConnectInfo, hookimpl

pytestmark = pytest.mark.timeout(60)


def rest(port: int) -> str:
    return (f"<rest-api><enabled>true</enabled><listeners><http><port>{port}</port>"
            "<bind-address>127.0.0.1</bind-address></http></listeners></rest-api>")


def tcp(port: int, proxy: str | None = "true") -> str:
    element = "" if proxy is None else f"<proxy-protocol>{proxy}</proxy-protocol>"
    return (f"<tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address>{element}"
            "</tcp-listener>")


def v1(source: str, sport: int, port: int) -> bytes:
    family = "TCP6" if ":" in source else "TCP4"
    destination = "::1" if family == "TCP6" else "127.0.0.1"
    return f"PROXY {family} {source} {destination} {sport} {port}\r\n".encode()


def v2(source: str, sport: int, port: int, local: bool = False) -> bytes:
    import ipaddress

    src = ipaddress.ip_address(source)
    dst = ipaddress.ip_address("::1" if src.version == 6 else "127.0.0.1")
    family = 0x21 if src.version == 6 else 0x11
    body = src.packed + dst.packed + struct.pack("!HH", sport, port)
    body += b"\x04\x00\x02\x00\x00"  # a NOOP TLV: skipped
    return (V2_SIGNATURE + bytes([0x20 if local else 0x21, family])
            + struct.pack("!H", len(body)) + body)


@pytest.fixture
def proxied(hive_factory: Any) -> Any:
    """A node whose one TCP listener requires the PROXY header; its REST API for the metrics."""
    port = free_port()
    return hive_factory(listeners=tcp(port), port=port, body=rest(rest_port := free_port()),
                        rest=rest_port)


def refused(node: Any) -> int:
    return int(metrics(node)["broker"]["proxy_protocol_refused"])


@pytest.mark.parametrize("header", [v1, v2])
def test_the_headers_client_address_is_in_the_access_log(proxied: Any, header: Any) -> None:
    proxied.wait_for_log(rf"Started tcp listener tcp-listener-{proxied.port} on address "
                         r"127\.0\.0\.1 and on port \d+, PROXY protocol header required")
    for source, sport, client_id in (("203.0.113.7", 40001, "c4"), ("2001:db8::7", 40002, "c6")):
        with RawClient(proxied.port) as client:
            client.send_raw(header(source, sport, proxied.port))
            assert client.connect(5, client_id).reason_code == 0
            client.disconnect()
        proxied.wait_for_log(rf"client '{client_id}' connected from {source}:{sport} on "
                             rf"tcp-listener-{proxied.port} \(MQTT 5\)")
    assert refused(proxied) == 0


def test_a_header_in_pieces_and_the_connect_in_the_same_read(proxied: Any) -> None:
    header = v1("198.51.100.9", 1883, proxied.port)
    with RawClient(proxied.port) as client:
        for byte in header[:20]:  # one byte per read, as a slow network may
            client.send_raw(bytes([byte]))
            time.sleep(0.01)
        # the header's end and the whole CONNECT in one segment
        client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.send_raw(header[20:] + bytes.fromhex("101000044d5154540402003c00046f6e6531"))
        assert client.expect(ConnAck).reason_code == 0
    proxied.wait_for_log(r"client 'one1' connected from 198\.51\.100\.9:1883 ")


def test_local_keeps_the_connections_own_address(proxied: Any) -> None:
    with RawClient(proxied.port) as client:
        client.send_raw(v2("203.0.113.7", 40001, proxied.port, local=True))
        assert client.connect(4, "checker").reason_code == 0
        own = client.sock.getsockname()
    proxied.wait_for_log(rf"client 'checker' connected from 127\.0\.0\.1:{own[1]} ")


@pytest.mark.parametrize(("first_bytes", "reason"), [
    (bytes.fromhex("101000044d5154540402003c0004") + b"abcd",
     r"no PROXY protocol header: the connection began with b'\\x10\\x10"),
    (b"PROXY TCP4 203.0.113.7 127.0.0.1 99999 1883\r\n", "invalid port '99999'"),
    (b"PROXY UNKNOWN " + b"x" * 120, "without CRLF in 107 bytes"),
    (V2_SIGNATURE + b"\x21\x11\xff\xff", "PROXY v2 header of 65551 bytes"),
    (b"PROXY TCP4 203.0.113.7", "the connection ended inside the PROXY protocol header"),
])
def test_a_missing_or_bad_header_is_refused_logged_and_counted(
        proxied: Any, first_bytes: bytes, reason: str) -> None:
    with RawClient(proxied.port) as client:
        client.send_raw(first_bytes)
        if reason.startswith("the connection ended"):
            client.sock.shutdown(socket.SHUT_WR)
        client.expect_closed()
    proxied.wait_for_log(r"INFO  - refusing connection from 127\.0\.0\.1:\d+ on "
                         rf"tcp-listener-{proxied.port}: .*{reason}")
    assert refused(proxied) == 1
    # and the node serves on
    with RawClient(proxied.port) as client:
        client.send_raw(v1("203.0.113.8", 5, proxied.port))
        assert client.connect(5, "after").reason_code == 0
    assert refused(proxied) == 1


def test_no_header_in_time_is_refused(hive_factory: Any) -> None:
    port, rest_port = free_port(), free_port()
    node = hive_factory(listeners=tcp(port), port=port, rest=rest_port, body=rest(rest_port)
                        + "<restrictions><no-connect-idle-timeout>500</no-connect-idle-timeout>"
                          "</restrictions>")
    with RawClient(port) as client:
        client.send_raw(b"PROX")
        begun = time.monotonic()
        client.expect_closed(timeout=5)
        assert time.monotonic() - begun < 3
    node.wait_for_log(r"refusing connection from \S+ on \S+: no PROXY protocol header within "
                      r"0\.5 s")
    assert refused(node) == 1
    with RawClient(port) as client:  # a port probe (connect, close) is not refused: no bytes
        pass
    with RawClient(port) as client:
        client.send_raw(v1("203.0.113.8", 5, port))
        assert client.connect(5, "after").reason_code == 0
    assert refused(node) == 1


def test_without_the_element_a_header_is_an_mqtt_protocol_error(hive_factory: Any) -> None:
    plain, explicit = free_port(), free_port()
    node = hive_factory(listeners=tcp(plain, None) + tcp(explicit, "false"), port=plain)
    for port in (plain, explicit):
        with RawClient(port) as client:
            # read as MQTT: 'P' (0x50) a PUBREC before CONNECT, of 'R' (82) bytes
            client.send_raw(v1("203.0.113.7", 40001, port).ljust(84, b"\0"))
            client.expect_closed()
        with RawClient(port) as client:
            assert client.connect(5, f"direct-{port}").reason_code == 0
        node.wait_for_log(rf"client 'direct-{port}' connected from 127\.0\.0\.1:\d+ ")
    assert "PROXY protocol header required" not in node.log


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.mark.parametrize("header", [v1, v2])
def test_on_a_tls_listener_the_header_comes_before_the_handshake(
        hive_factory: Any, pki: PKI, header: Any) -> None:
    port = free_port()
    node = hive_factory(listeners=(
        f"<tls-tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address>"
        f"<proxy-protocol>true</proxy-protocol><tls><keystore><path>{pki.server_pem}</path>"
        "</keystore></tls></tls-tcp-listener>"), port=port)
    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    with RawClient(port) as client:
        client.send_raw(header("203.0.113.70", 41000, port))
        client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
        assert client.connect(5, "secure").reason_code == 0
        client.disconnect()
    node.wait_for_log(r"client 'secure' connected from 203\.0\.113\.70:41000 on "
                      rf"tls-tcp-listener-{port} ")
    # a client that starts TLS at once, without the header, is refused before any handshake
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, \
            pytest.raises((ssl.SSLError, OSError)):
        context.wrap_socket(sock, server_hostname="127.0.0.1")
    node.wait_for_log(r"refusing connection from \S+ on tls-tcp-listener-\d+: no PROXY protocol "
                      r"header: the connection began with b'\\x16\\x03")


class SeenAddresses:
    """Records the address each hook is given for a client."""

    def __init__(self) -> None:
        self.authenticated: list[tuple[str, int] | None] = []
        self.connected: list[tuple[str, int] | None] = []

    @hookimpl
    def hive_authenticate(self, connect: ConnectInfo) -> AuthDecision:
        self.authenticated.append(connect.client.remote_address)
        return AuthDecision.accept()

    @hookimpl
    def hive_client_connected(self, client: ClientInfo) -> None:
        self.connected.append(client.remote_address)


def test_extensions_see_the_clients_address(tmp_path: Path) -> None:
    port = free_port()
    config = parse_config(f"<hivemq><listeners>{tcp(port)}</listeners></hivemq>",
                          source="<test>")
    seen = SeenAddresses()
    node = RunningNode(config, tmp_path / "data", [seen], load_installed=False).start()
    try:
        with RawClient(port) as client:
            client.send_raw(v2("2001:db8::42", 50042, port))
            assert client.connect(5, "ext").reason_code == 0
            deadline = time.monotonic() + 5
            while not seen.connected and time.monotonic() < deadline:
                time.sleep(0.02)
    finally:
        node.stop()
    assert seen.authenticated == [("2001:db8::42", 50042)]
    assert seen.connected == [("2001:db8::42", 50042)]


def test_only_the_trusted_proxies_may_send_a_header(hive_factory: Any) -> None:
    """Risk (issue 20): with the PROXY protocol on, any direct client could claim any address
    (a forged 10.6.6.6 got through a 10/8 allow-list)."""
    port, other = free_port(), free_port()
    listeners = (f"<tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address>"
                 "<proxy-protocol>true</proxy-protocol><trusted-proxies><proxy>192.0.2.10</proxy>"
                 "<proxy>10.0.0.0/8</proxy></trusted-proxies></tcp-listener>"
                 f"<tcp-listener><port>{other}</port><bind-address>127.0.0.1</bind-address>"
                 "<proxy-protocol>true</proxy-protocol><trusted-proxies><proxy>127.0.0.0/8"
                 "</proxy></trusted-proxies></tcp-listener>")
    node = hive_factory(listeners=listeners, port=port, body=rest(rest_port := free_port()),
                        rest=rest_port)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(v1("10.6.6.6", 40001, port) + bytes.fromhex(
            "101000044d5154540402003c00046f6e6531"))
        sock.settimeout(5)
        with contextlib.suppress(ConnectionResetError):  # closed (reset), no CONNACK
            assert sock.recv(16) == b""
    node.wait_for_log(r"refusing connection from 127\.0\.0\.1:\d+ on tcp-listener-\d+: not a "
                      r"trusted proxy")
    assert refused(node) == 1
    with RawClient(other) as client:  # from a trusted address: the header's client counts
        client.send_raw(v1("10.6.6.6", 40002, other))
        assert client.connect(5, "behind").reason_code == 0
    node.wait_for_log(r"client 'behind' connected from 10\.6\.6\.6:40002")
    assert "takes a PROXY protocol header from any address" not in node.log
    with pytest.raises(Exception, match=r"trusted-proxies.*'ten\.example' is not an IP"):
        parse_config("<hivemq><listeners><tcp-listener><port>1</port><proxy-protocol>true"
                     "</proxy-protocol><trusted-proxies><proxy>ten.example</proxy>"
                     "</trusted-proxies></tcp-listener></listeners></hivemq>")
