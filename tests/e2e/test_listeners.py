"""Listeners end to end: TCP, WebSocket and TLS on real `hive run` processes, real clients."""

from __future__ import annotations

import base64
import contextlib
import os
import queue
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import closing_all, free_port
from e2e.certs import PKI, make_pki
from paho.mqtt.enums import CallbackAPIVersion

pytestmark = pytest.mark.timeout(30)

WAIT = 5.0


class Client:
    """A paho client on a background loop; messages land in a queue, every wait is bounded."""

    def __init__(self, port: int, transport: str = "tcp", protocol: int = mqtt.MQTTv311,
                 ws_path: str | None = None, tls: dict[str, Any] | None = None,
                 client_id: str | None = None) -> None:
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.port = port
        self.paho = mqtt.Client(CallbackAPIVersion.VERSION2,
                                client_id=client_id or f"t-{uuid.uuid4().hex[:10]}",
                                protocol=protocol, transport=transport)  # type: ignore[arg-type]
        if ws_path is not None:
            self.paho.ws_set_options(path=ws_path)
        if tls is not None:
            self.paho.tls_set(**tls)
        self.connack: queue.Queue[Any] = queue.Queue()
        self.subacks: queue.Queue[Any] = queue.Queue()
        self.paho.on_connect = lambda c, u, f, rc, p=None: self.connack.put(rc)
        self.paho.on_subscribe = lambda c, u, mid, rcs, p=None: self.subacks.put(rcs)
        self.paho.on_message = lambda c, u, msg: self.messages.put(msg)

    def connect(self) -> Client:
        self.paho.connect("127.0.0.1", self.port, keepalive=30)
        self.paho.loop_start()
        rc = self.connack.get(timeout=WAIT)
        assert not rc.is_failure, rc
        return self

    def subscribe(self, topic: str, qos: int = 1) -> None:
        self.paho.subscribe(topic, qos)
        codes = self.subacks.get(timeout=WAIT)
        assert all(not code.is_failure for code in codes), codes

    def publish(self, topic: str, payload: bytes, qos: int = 1) -> None:
        info = self.paho.publish(topic, payload, qos)
        info.wait_for_publish(WAIT)
        assert info.is_published()

    def expect(self, topic: str, payload: bytes) -> mqtt.MQTTMessage:
        message = self.messages.get(timeout=WAIT)
        assert (message.topic, message.payload) == (topic, payload)
        return message

    def close(self) -> None:
        self.paho.disconnect()
        self.paho.loop_stop()


@pytest.fixture
def clients() -> Iterator[Callable[..., Client]]:
    with closing_all(Client) as make:
        yield make


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tcp(port: int) -> str:
    return f"<tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address></tcp-listener>"


def websocket(port: int, path: str = "/mqtt") -> str:
    return (f"<websocket-listener><port>{port}</port><bind-address>127.0.0.1</bind-address>"
            f"<path>{path}</path></websocket-listener>")


def tls_tcp(port: int, keystore: Path, password: str | None = None,
            truststore: Path | None = None, client_auth: str = "NONE") -> str:
    key = f"<path>{keystore}</path>"
    if password:
        key += f"<password>{password}</password><private-key-password>{password}" \
               "</private-key-password>"
    trust = ""
    if truststore is not None:
        trust = f"<truststore><path>{truststore}</path>"
        trust += f"<password>{password}</password>" if password else ""
        trust += "</truststore>"
    return (f"<tls-tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address>"
            f"<tls><keystore>{key}</keystore>{trust}"
            f"<client-authentication-mode>{client_auth}</client-authentication-mode></tls>"
            "</tls-tcp-listener>")


# ---------------------------------------------------------------------------- several at once


def test_tcp_websocket_and_tls_listeners_share_one_broker(hive_factory: Any, clients: Any,
                                                          pki: PKI) -> None:
    port, ws_port, tls_port = free_port(), free_port(), free_port()
    node = hive_factory(port=port, listeners=tcp(port) + websocket(ws_port)
                        + tls_tcp(tls_port, pki.server_pem))
    for kind, bound in (("tcp", port), ("websocket", ws_port), ("tls-tcp", tls_port)):
        node.wait_for_log(rf"Started {kind} listener \S+ on address 127\.0\.0\.1 and on port "
                          rf"{bound}\b")
    on_tcp = clients(port).connect()
    on_ws = clients(ws_port, transport="websockets", ws_path="/mqtt").connect()
    on_tls = clients(tls_port, tls={"ca_certs": str(pki.ca_pem)}).connect()
    everyone = {"tcp": on_tcp, "ws": on_ws, "tls": on_tls}
    for client in everyone.values():
        client.subscribe("mix/#")
    for name, sender in everyone.items():
        payload = f"from {name}".encode()
        sender.publish(f"mix/{name}", payload)
        for client in everyone.values():
            client.expect(f"mix/{name}", payload)


# ---------------------------------------------------------------------------- TLS


@pytest.mark.parametrize("store", ["pem", "pkcs12"])
def test_tls_listener_with_a_key_store(hive_factory: Any, clients: Any, pki: PKI,
                                       store: str) -> None:
    tls_port = free_port()
    if store == "pem":
        listener = tls_tcp(tls_port, pki.server_pem)
    else:
        listener = tls_tcp(tls_port, pki.server_p12, password=pki.password)
    hive_factory(listeners=listener)
    subscriber = clients(tls_port, tls={"ca_certs": str(pki.ca_pem)}).connect()
    subscriber.subscribe("secure/t")
    publisher = clients(tls_port, tls={"ca_certs": str(pki.ca_pem)}, protocol=mqtt.MQTTv5)
    publisher.connect().publish("secure/t", b"over tls")
    subscriber.expect("secure/t", b"over tls")

    # mosquitto's clients, trusting the same CA.
    sub = subprocess.Popen(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(tls_port), "--cafile", str(pki.ca_pem),
         "-t", "secure/m", "-C", "1", "-W", "8", "-q", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # mosquitto_sub has no "subscribed" signal: publish until it has seen one (QoS 1).
        deadline = time.monotonic() + 8
        while sub.poll() is None and time.monotonic() < deadline:
            subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(tls_port), "--cafile",
                            str(pki.ca_pem), "-t", "secure/m", "-m", "mosquitto", "-q", "1"],
                           check=True, timeout=8, capture_output=True)
            time.sleep(0.2)
        out, err = sub.communicate(timeout=8)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    assert sub.returncode == 0, err
    assert out.decode().strip() == "mosquitto"


def _refused_at_handshake(context: ssl.SSLContext, port: int) -> bool:
    """True when the server ends the TLS session before any MQTT byte comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="localhost") as secure:
                # TLS 1.3 lets the client finish its side first: the refusal comes with a read.
                secure.sendall(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x1e\x00\x00")
                return secure.recv(4) == b""
        except (ssl.SSLError, ConnectionError):
            return True


def assert_client_certificates_required(
        clients: Any, port: int, pki: PKI, topic: str, payload: bytes,
        tls_versions: tuple[ssl.TLSVersion | None, ...] = (None,)) -> Client:
    """A client with a certificate of the CA gets ``payload`` through on ``topic``; one without
    a certificate, or with a stranger's, is refused at the handshake, at each of
    ``tls_versions`` (None: the default range). The trusted client, still connected."""
    with_cert = clients(port, tls={"ca_certs": str(pki.ca_pem),
                                   "certfile": str(pki.client_cert_pem),
                                   "keyfile": str(pki.client_key_pem)})
    with_cert.connect()
    with_cert.subscribe(topic)
    with_cert.publish(topic, payload)
    with_cert.expect(topic, payload)
    for cert in (None, (pki.stranger_cert_pem, pki.stranger_key_pem)):
        for version in tls_versions:
            context = ssl.create_default_context(cafile=str(pki.ca_pem))
            if version is not None:
                context.minimum_version = context.maximum_version = version
            if cert is not None:
                context.load_cert_chain(cert[0], cert[1])
            assert _refused_at_handshake(context, port), (cert, version)
    return with_cert


def test_tls_client_authentication_required(hive_factory: Any, clients: Any, pki: PKI) -> None:
    tls_port = free_port()
    node = hive_factory(listeners=tls_tcp(tls_port, pki.server_pem, truststore=pki.ca_pem,
                                          client_auth="REQUIRED"))
    with_cert = assert_client_certificates_required(
        clients, tls_port, pki, "auth/t", b"mutual",
        tls_versions=(ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3))
    # Still serving the good client.
    with_cert.publish("auth/t", b"after")
    with_cert.expect("auth/t", b"after")
    assert "Traceback" not in node.log


def test_tls_client_without_the_ca_refuses_the_server(hive_factory: Any, pki: PKI) -> None:
    tls_port = free_port()
    hive_factory(listeners=tls_tcp(tls_port, pki.server_pem))
    context = ssl.create_default_context()  # the system's CAs do not know our test CA
    with (socket.create_connection(("127.0.0.1", tls_port), timeout=WAIT) as raw,
          pytest.raises(ssl.SSLCertVerificationError)):
        context.wrap_socket(raw, server_hostname="localhost")


# ---------------------------------------------------------------------------- WebSocket


@pytest.mark.parametrize("protocol", [mqtt.MQTTv311, mqtt.MQTTv5])
def test_websocket_listener_qos0_and_qos1(hive_factory: Any, clients: Any, protocol: int) -> None:
    ws_port = free_port()
    hive_factory(listeners=websocket(ws_port))
    subscriber = clients(ws_port, transport="websockets", ws_path="/mqtt", protocol=protocol)
    subscriber.connect().subscribe("ws/#")
    publisher = clients(ws_port, transport="websockets", ws_path="/mqtt", protocol=protocol)
    publisher.connect()
    for qos in (0, 1):
        for n in range(20):
            publisher.publish(f"ws/{qos}", f"{qos}-{n}".encode() * (n * 50 + 1), qos=qos)
    for qos in (0, 1):
        for n in range(20):
            message = subscriber.expect(f"ws/{qos}", f"{qos}-{n}".encode() * (n * 50 + 1))
            assert message.qos == qos


def upgrade_answer(port: int, path: str, subprotocol: str | None, extensions: str = "") -> bytes:
    """The status line and headers of the answer to a WebSocket upgrade request."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
             "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if subprotocol is not None:
        lines.append(f"Sec-WebSocket-Protocol: {subprotocol}")
    if extensions:
        lines.append(f"Sec-WebSocket-Extensions: {extensions}")
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer


def test_websocket_wrong_path_or_missing_subprotocol_is_refused(hive_factory: Any,
                                                                clients: Any) -> None:
    ws_port = free_port()
    node = hive_factory(listeners=websocket(ws_port))
    assert upgrade_answer(ws_port, "/mqtt", "mqtt").startswith(b"HTTP/1.1 101")
    assert upgrade_answer(ws_port, "/nope", "mqtt").startswith(b"HTTP/1.1 404")
    assert upgrade_answer(ws_port, "/mqtt", None).startswith(b"HTTP/1.1 400")
    assert upgrade_answer(ws_port, "/mqtt", "stomp").startswith(b"HTTP/1.1 400")
    assert b"101" not in upgrade_answer(ws_port, "/mqtt/", "mqtt").split(b"\r\n")[0]

    wrong = clients(ws_port, transport="websockets", ws_path="/elsewhere")
    with pytest.raises((mqtt.WebsocketConnectionError, OSError)):
        wrong.paho.connect("127.0.0.1", ws_port, keepalive=30)
    # A good client still gets through afterwards.
    clients(ws_port, transport="websockets", ws_path="/mqtt").connect()
    assert "Traceback" not in node.log


def test_websocket_binary_frames_split_across_reads(hive_factory: Any) -> None:
    """A CONNECT split over several WebSocket frames and TCP writes is one packet to MQTT."""
    ws_port = free_port()
    hive_factory(listeners=websocket(ws_port))
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Protocol: mqtt\r\n\r\n")

    def frame(payload: bytes, final: bool, first: bool) -> bytes:
        mask = os.urandom(4)
        head = (0x80 if final else 0) | (0x2 if first else 0x0)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bytes((head, 0x80 | len(payload))) + mask + body

    connect = b"\x10\x0f\x00\x04MQTT\x04\x02\x00\x1e\x00\x03abc"
    with socket.create_connection(("127.0.0.1", ws_port), timeout=WAIT) as sock:
        sock.sendall(request.encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 101")
        data = frame(connect[:5], False, True) + frame(connect[5:], True, False)
        for byte in data:  # one byte per write
            sock.sendall(bytes((byte,)))
        reply = answer.split(b"\r\n\r\n", 1)[1]
        while len(reply) < 6:
            chunk = sock.recv(64)
            assert chunk, "closed instead of CONNACK"
            reply += chunk
        assert reply[:6] == b"\x82\x04\x20\x02\x00\x00"  # binary frame holding CONNACK 0


# ---------------------------------------------------------------------------- bind address


def _addresses() -> list[str]:
    """This host's IPv4 addresses other than loopback."""
    found: set[str] = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    except OSError:
        pass
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            found.add(probe.getsockname()[0])
        except OSError:
            pass
    return sorted(a for a in found if not a.startswith("127."))


def test_bind_address_is_honoured(hive_factory: Any) -> None:
    port = free_port()
    node = hive_factory(port=port, listeners=tcp(port))
    node.wait_for_log(rf"on address 127\.0\.0\.1 and on port {port}\b")
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT):
        pass
    # 127.0.0.2 is loopback too, but not the bound address.
    for address in ["127.0.0.2", *_addresses()]:
        with pytest.raises(OSError):
            socket.create_connection((address, port), timeout=2).close()


def test_bind_to_port_zero_logs_the_real_port(hive_factory: Any) -> None:
    node = hive_factory(listeners="<tcp-listener><port>0</port>"
                                  "<bind-address>127.0.0.1</bind-address></tcp-listener>")
    found = node.wait_for_log(r"Started tcp listener \S+ on address 127\.0\.0\.1 and on port "
                              r"(\d+)")
    bound = int(found.group(1))
    assert bound != 0
    with socket.create_connection(("127.0.0.1", bound), timeout=WAIT):
        pass


def failed_start(node: Any) -> int:
    """Start a node that must not start; its exit code once the log is complete."""
    with contextlib.suppress(RuntimeError):
        # start() may miss the failure: stdout can close a moment before the process exits.
        node.start(timeout=10)
    code = int(node.proc.wait(10))
    node.stop()  # joins the log reader
    return code


def test_port_in_use_fails_the_start_with_a_message(hive_factory: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = hive_factory(port=port, listeners=tcp(port), start=False)
        assert failed_start(node) != 0
        assert f"{port}" in node.log and "address already in use" in node.log.lower()
        assert "Traceback" not in node.log


def test_tls_websocket_listener(hive_factory: Any, clients: Any, pki: PKI) -> None:
    port = free_port()
    hive_factory(listeners=(f"<tls-websocket-listener><port>{port}</port>"
                            "<bind-address>127.0.0.1</bind-address><path>/mqtt</path>"
                            f"<tls><keystore><path>{pki.server_p12}</path>"
                            f"<password>{pki.password}</password></keystore></tls>"
                            "</tls-websocket-listener>"))
    client = clients(port, transport="websockets", ws_path="/mqtt",
                     tls={"ca_certs": str(pki.ca_pem)}, protocol=mqtt.MQTTv5)
    client.connect().subscribe("wss/t")
    client.publish("wss/t", b"secure websocket")
    client.expect("wss/t", b"secure websocket")


def test_tls_optional_client_auth_with_a_pkcs12_truststore(hive_factory: Any, clients: Any,
                                                           pki: PKI) -> None:
    port = free_port()
    node = hive_factory(listeners=tls_tcp(port, pki.server_p12, password=pki.password,
                                          truststore=pki.ca_p12, client_auth="OPTIONAL"))
    anonymous = clients(port, tls={"ca_certs": str(pki.ca_pem)}).connect()
    anonymous.subscribe("opt/t")
    known = clients(port, tls={"ca_certs": str(pki.ca_pem), "certfile": str(pki.client_cert_pem),
                               "keyfile": str(pki.client_key_pem)}).connect()
    known.publish("opt/t", b"both welcome")
    anonymous.expect("opt/t", b"both welcome")
    # A certificate is optional, but one that is shown must check out.
    context = ssl.create_default_context(cafile=str(pki.ca_pem))
    context.load_cert_chain(pki.stranger_cert_pem, pki.stranger_key_pem)
    assert _refused_at_handshake(context, port)
    assert "Traceback" not in node.log


@pytest.mark.parametrize("problem", ["wrong password", "not a key store"])
def test_unusable_key_store_stops_the_start_with_a_clear_message(hive_factory: Any, pki: PKI,
                                                                 tmp_path: Path,
                                                                 problem: str) -> None:
    port = free_port()
    if problem == "wrong password":
        store, password = pki.server_p12, "wrong"
    else:
        store, password = tmp_path / "junk.p12", pki.password
        store.write_bytes(os.urandom(300))
    node = hive_factory(listeners=tls_tcp(port, store, password=password), start=False)
    assert failed_start(node) == 2
    assert str(store) in node.log
    assert "Traceback" not in node.log


def test_large_messages_over_websocket_and_tls(hive_factory: Any, clients: Any, pki: PKI) -> None:
    ws_port, tls_port = free_port(), free_port()
    hive_factory(listeners=websocket(ws_port) + tls_tcp(tls_port, pki.server_pem))
    on_ws = clients(ws_port, transport="websockets", ws_path="/mqtt").connect()
    on_tls = clients(tls_port, tls={"ca_certs": str(pki.ca_pem)}).connect()
    on_ws.subscribe("big/#")
    on_tls.subscribe("big/#")
    payloads = [os.urandom(size) for size in (70_000, 1_000_000)]
    for sender, name in ((on_ws, "ws"), (on_tls, "tls")):
        for payload in payloads:
            sender.publish(f"big/{name}", payload)
            for receiver in (on_ws, on_tls):
                receiver.expect(f"big/{name}", payload)
