"""Bad bytes on a live listener: each bad connection is closed, the node and everyone else go on."""

from __future__ import annotations

import asyncio
import os
import queue
import random
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import free_port
from e2e.rawclient import RawClient
from paho.mqtt.enums import CallbackAPIVersion

from hive_core.config import parse_config
from hive_core.mqtt import (
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketDecoder,
    PingReq,
    PropertyId,
    PubAck,
    Publish,
    PubRel,
    Subscribe,
    SubscriptionRequest,
    Unsubscribe,
    Will,
    encode_packet,
)
from hive_core.testing import RunningNode
from hive_ext_api import AuthDecision, ConnectInfo, hookimpl

pytestmark = pytest.mark.timeout(40)

# HIVE_FUZZ_SEED / HIVE_FUZZ_CONNECTIONS widen a soak run by hand; the suite uses the defaults.
SEED = int(os.environ.get("HIVE_FUZZ_SEED", "20261121"))
CONNECTIONS = int(os.environ.get("HIVE_FUZZ_CONNECTIONS", "300"))
WAIT = 5.0


def assert_log_clean(log: str) -> None:
    for needle in ("Traceback", "internal error", "Fatal error", "Exception in callback"):
        assert needle not in log, f"{needle!r} in the node log:\n{log}"


# ---------------------------------------------------------------------------- the fuzz corpus


def _valid_session(rng: random.Random) -> tuple[int, list[bytes]]:
    """A plausible client conversation, one encoded packet per item, for a random version."""
    version = rng.choice((3, 4, 5))
    props: dict[PropertyId, Any] = {}
    if version == 5 and rng.random() < 0.5:
        props = {PropertyId.SESSION_EXPIRY_INTERVAL: rng.choice((0, 10, 0xFFFFFFFF)),
                 PropertyId.RECEIVE_MAXIMUM: rng.randint(1, 100)}
    will = None
    if rng.random() < 0.3:
        will = Will("fuzz/will", rng.randbytes(rng.randint(0, 20)), rng.randint(0, 2),
                    rng.random() < 0.2, {})
    client_id = f"fuzz-{rng.getrandbits(40):x}"
    packets: list[Packet] = [Connect(client_id, version, rng.random() < 0.8, rng.randint(0, 600),
                                     None, None, will, props)]
    for _ in range(rng.randint(0, 6)):
        pid = rng.randint(1, 0xFFFF)
        kind = rng.randrange(6)
        topic = rng.choice(("fuzz/a", "fuzz/b/c", "$SYS/x", "fuzz/" + "z" * rng.randint(1, 50)))
        if kind == 0:
            qos = rng.randint(0, 2)
            packets.append(Publish(topic, rng.randbytes(rng.randint(0, 300)), qos,
                                   rng.random() < 0.2, False, pid if qos else None, {}))
        elif kind == 1:
            packets.append(Subscribe(pid, [SubscriptionRequest(rng.choice(("fuzz/#", "+/a", topic)),
                                                                rng.randint(0, 2))], {}))
        elif kind == 2:
            packets.append(Unsubscribe(pid, [topic], {}))
        elif kind == 3:
            packets.append(PingReq())
        elif kind == 4:
            packets.append(PubRel(pid))
        else:
            packets.append(PubAck(pid))
    if rng.random() < 0.3:
        packets.append(Disconnect(0, {}))
    return version, [encode_packet(p, version) for p in packets]


def _mutate(rng: random.Random, data: bytearray) -> bytearray:
    choice = rng.randrange(6)
    if not data:
        return bytearray(rng.randbytes(rng.randint(1, 64)))
    if choice == 0:  # flip bytes
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif choice == 1:  # overwrite with a random byte
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif choice == 2:  # insert junk
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randint(1, 16))
    elif choice == 3:  # cut a piece out
        at = rng.randrange(len(data))
        del data[at:at + rng.randint(1, 8)]
    elif choice == 4:  # a huge remaining length
        at = rng.randrange(len(data))
        data[at:at] = bytes((rng.choice((0x10, 0x30, 0x82)), 0xFF, 0xFF, 0xFF, 0x7F))
    else:  # a remaining length that never ends
        data += bytes((0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF))
    return data


def fuzz_case(rng: random.Random) -> list[bytes]:
    """The writes of one bad connection."""
    style = rng.randrange(5)
    if style == 0:
        return [rng.randbytes(rng.randint(1, 300))]
    _, packets = _valid_session(rng)
    stream = bytearray(b"".join(packets))
    if style == 1:  # truncated anywhere
        stream = stream[:rng.randrange(len(stream))]
    elif style == 2:  # corrupted somewhere after a good CONNECT
        head = packets[0]
        tail = _mutate(rng, bytearray(b"".join(packets[1:])))
        stream = bytearray(head) + tail
    elif style == 3:  # corrupted anywhere, maybe twice
        for _ in range(rng.randint(1, 2)):
            stream = _mutate(rng, stream)
    else:  # a good CONNECT, then random bytes
        stream = bytearray(packets[0]) + rng.randbytes(rng.randint(1, 100))
    # Split into random writes so the codec sees partial packets too.
    writes = []
    while stream:
        cut = rng.randint(1, max(1, len(stream)))
        writes.append(bytes(stream[:cut]))
        del stream[:cut]
    return writes


def throw(port: int, writes: list[bytes], read: bool) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            for data in writes:
                sock.sendall(data)
            if read:
                sock.shutdown(socket.SHUT_WR)
                deadline = time.monotonic() + 1.0
                while time.monotonic() < deadline:
                    if not sock.recv(65536):
                        break
    except OSError:
        pass  # the broker is free to reset a bad connection


# ---------------------------------------------------------------------------- the live fuzz


class Keeper:
    """A paho subscriber and a paho publisher exchanging QoS 1 messages on a background loop.

    paho calls ``on_publish`` holding its own ``_out_message_mutex``, and ``publish()`` takes that
    mutex: ``publish()`` is never called holding ``self.lock``, or the two threads deadlock.
    """

    def __init__(self, port: int) -> None:
        self.topic = f"keep/{uuid.uuid4().hex}"
        self.acked: set[bytes] = set()
        self.received: set[bytes] = set()
        self.lock = threading.Lock()
        self.sent: dict[int, bytes] = {}
        self.early: set[int] = set()  # acknowledged before publish() returned its mid
        self.subscribed = threading.Event()
        name = self.topic[5:]
        self.sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"keeper-sub-{name}",
                               protocol=mqtt.MQTTv5)
        self.sub.on_connect = lambda c, u, f, rc, p: c.subscribe(self.topic, 1)
        self.sub.on_subscribe = lambda c, u, mid, rcs, p: self.subscribed.set()
        self.sub.on_message = self._on_message
        self.pub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"keeper-pub-{name}",
                               protocol=mqtt.MQTTv311)
        self.pub.on_publish = self._on_publish
        self.port = port
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._publish_loop, daemon=True)

    def _on_message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.received.add(bytes(message.payload))

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        with self.lock:
            payload = self.sent.pop(mid, None)
            if payload is not None:
                self.acked.add(payload)
            else:
                self.early.add(mid)

    def start(self) -> None:
        self.sub.connect("127.0.0.1", self.port, keepalive=30)
        self.sub.loop_start()
        assert self.subscribed.wait(WAIT), "the keeper's subscription was not acknowledged"
        self.pub.connect("127.0.0.1", self.port, keepalive=30)
        self.pub.loop_start()
        self.thread.start()

    def _publish_loop(self) -> None:
        n = 0
        while not self.stop.is_set():
            payload = f"m{n}".encode()
            info = self.pub.publish(self.topic, payload, 1)  # not under self.lock: see above
            if info.rc == mqtt.MQTT_ERR_SUCCESS:
                with self.lock:
                    if info.mid in self.early:
                        self.early.discard(info.mid)
                        self.acked.add(payload)
                    else:
                        self.sent[info.mid] = payload
            n += 1
            time.sleep(0.01)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the keeper's publish loop is stuck"
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            with self.lock:
                if not self.sent and self.acked <= self.received:
                    break
            time.sleep(0.05)
        for client in (self.pub, self.sub):
            client.disconnect()
            client.loop_stop()


def test_the_keeper_never_deadlocks_with_pahos_network_thread(hive: Any) -> None:
    """A slow on_publish (paho's network thread holding its mutex) must not stall the keeper."""
    keeper = Keeper(hive.port)

    def slow_on_publish(client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        time.sleep(0.02)  # widens the window a busy machine opens by chance
        keeper._on_publish(client, userdata, mid, rc, props)

    keeper.pub.on_publish = slow_on_publish
    keeper.start()
    time.sleep(1.5)
    finisher = threading.Thread(target=keeper.finish, daemon=True)
    finisher.start()
    finisher.join(2 * WAIT + 5)
    assert not finisher.is_alive(), "the keeper deadlocked with paho's network thread"
    with keeper.lock:
        assert len(keeper.acked) >= 20 and keeper.acked <= keeper.received


def test_live_listener_survives_random_and_corrupted_input(hive: Any) -> None:
    keeper = Keeper(hive.port)
    keeper.start()
    rng = random.Random(SEED)
    cases = [(fuzz_case(rng), rng.random() < 0.3) for _ in range(CONNECTIONS)]
    try:
        with ThreadPoolExecutor(max_workers=12) as pool:
            futures = []
            for writes, read in cases:
                futures.append(pool.submit(throw, hive.port, writes, read))
                time.sleep(3.0 / CONNECTIONS)  # spread over ~3 s: the keepers work all along
            for future in futures:
                future.result(timeout=20)
    finally:
        keeper.finish()
    assert hive.proc.poll() is None, "the node died"
    with keeper.lock:
        lost = keeper.acked - keeper.received
        assert len(keeper.acked) >= 100, "the keepers hardly exchanged anything"
        assert not lost, f"{len(lost)} acknowledged QoS 1 messages never delivered"
    # Still serving: a new client connects, subscribes and gets a message.
    with RawClient(hive.port) as client:
        assert client.connect(5, client_id="after-fuzz").reason_code == 0
        client.subscribe("after/t", qos=1)
        client.publish("after/t", b"still here", qos=1)
        packets: list[Packet] = []
        deadline = time.monotonic() + WAIT
        while not any(isinstance(p, Publish) for p in packets) and time.monotonic() < deadline:
            packet = client.receive(1)
            if packet is not None:
                packets.append(packet)
        assert any(isinstance(p, Publish) and p.payload == b"still here" for p in packets), packets
    assert hive.proc.poll() is None
    assert_log_clean(hive.log)


# ---------------------------------------------------------------------------- specific cases

CONNECT_V4 = encode_packet(Connect("raw-v4", 4, True, 30, None, None, None, {}), 4)


def test_malformed_packet_after_connect_v5_gets_disconnect_0x81(hive: Any) -> None:
    malformed = [
        b"\x36\x07\x00\x01t\x00\x01\x00x",  # PUBLISH with QoS 3 [MQTT-3.3.1-4]
        b"\x32\x05\x00\x01t\x00\x01\x20",  # PUBLISH whose property length runs past the end
        b"\x82\x04\x00\x01\x00\x00",  # SUBSCRIBE with a payload cut short
        b"\x30\x06\x00\x02\xff\xfe\x00\x00",  # PUBLISH with a topic that is not UTF-8
    ]
    for n, data in enumerate(malformed):
        with RawClient(hive.port) as client:
            assert client.connect(5, client_id=f"malformed-{n}").reason_code == 0
            client.send_raw(data)
            disconnect = client.expect_disconnect(0x81)
            assert isinstance(disconnect, Disconnect)
    assert_log_clean(hive.log)


def test_malformed_packet_after_connect_v3_closes_the_socket(hive: Any) -> None:
    for version, data in ((4, b"\x36\x07\x00\x01t\x00\x01\x00x"), (3, b"\x82\x04\x00\x01\x00\x00"),
                          (4, b"\x30\x06\x00\x02\xff\xfe\x00\x00")):
        with RawClient(hive.port) as client:
            assert client.connect(version, client_id=f"v{version}").reason_code == 0
            client.send_raw(data)
            assert client.expect_closed() == []
    assert_log_clean(hive.log)


def _read_all(sock: socket.socket, timeout: float = WAIT) -> bytes:
    """Everything the broker sends until it closes the connection (which it must, in time)."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"connection still open after {timeout} s; got {data!r}")


@pytest.mark.parametrize("level", [0, 2, 6, 7, 255])
def test_unsupported_protocol_level_gets_connack_0x01(hive: Any, level: int) -> None:
    body = b"\x00\x04MQTT" + bytes((level,)) + b"\x02\x00\x1e\x00\x02id"
    with socket.create_connection(("127.0.0.1", hive.port), timeout=WAIT) as sock:
        sock.sendall(bytes((0x10, len(body))) + body)
        assert _read_all(sock) == b"\x20\x02\x00\x01"
    assert_log_clean(hive.log)


@pytest.mark.parametrize("first", [
    b"\xc0\x00",  # PINGREQ
    b"\x30\x05\x00\x01tab",  # PUBLISH
    b"\x82\x06\x00\x01\x00\x01t\x00",  # SUBSCRIBE
    b"\xe0\x00",  # DISCONNECT
    b"\x20\x02\x00\x00",  # CONNACK, a server's packet
    b"\x00\x00",  # reserved type 0
])
def test_first_packet_not_connect_closes_the_connection(hive: Any, first: bytes) -> None:
    with socket.create_connection(("127.0.0.1", hive.port), timeout=WAIT) as sock:
        sock.sendall(first)
        assert _read_all(sock) == b""
    assert_log_clean(hive.log)


def test_packet_over_the_maximum_size_gets_0x95(hive_factory: Any) -> None:
    node = hive_factory(body="<mqtt><packets><max-packet-size>1000</max-packet-size></packets>"
                             "</mqtt>")
    with RawClient(node.port) as client:
        connack = client.connect(5, client_id="big")
        assert connack.reason_code == 0
        assert connack.properties[PropertyId.MAXIMUM_PACKET_SIZE] == 1000
        client.publish("big/t", b"x" * 900, qos=1)  # fits
        assert isinstance(client.expect(PubAck), PubAck)
        client.publish("big/t", b"x" * 2000, qos=1)
        client.expect_disconnect(0x95)
    # Only the header of a huge packet: refused before the body arrives.
    with RawClient(node.port) as client:
        assert client.connect(5, client_id="big2").reason_code == 0
        client.send_raw(b"\x30\xff\xff\xff\x7f")
        client.expect_disconnect(0x95)
    # MQTT 3.1.1 has no DISCONNECT from the server: the socket closes.
    with RawClient(node.port) as client:
        client.connect(4, client_id="big3")
        client.publish("big/t", b"x" * 2000, qos=0)
        assert client.expect_closed() == []
    # A CONNECT over the limit gets no session at all.
    with socket.create_connection(("127.0.0.1", node.port), timeout=WAIT) as sock:
        big = encode_packet(Connect("c" * 1500, 4, True, 30, None, None, None, {}), 4)
        sock.sendall(big)
        assert _read_all(sock) in (b"", b"\x20\x02\x00\x01")
    assert node.proc.poll() is None
    assert_log_clean(node.log)


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _unfinished_connect(port: int, megabytes: int) -> None:
    """A CONNECT that announces 256 MB, then `megabytes` of its body; waits for the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(b"\x10\xff\xff\xff\x7f\x00\x04MQTT\x05\x02\x00\x1e")
        chunk = b"x" * (1 << 20)
        try:
            for _ in range(megabytes):
                sock.sendall(chunk)
            while sock.recv(65536):
                pass
        except OSError:  # closed by the node: what the test waits for
            pass


def test_memory_of_unfinished_connects_is_freed_when_they_close(hive_factory: Any) -> None:
    """Issue 20 (1): the decoder's buffer lived on in a ClientConnection <-> Channel cycle.

    The pre-CONNECT limit is raised to the packet maximum here, so that only the release of
    the buffer at the close keeps the node's memory down."""
    node = hive_factory(body="<restrictions><no-connect-idle-timeout>1000</no-connect-idle-timeout>"
                             "<max-pre-connect-size>268435460</max-pre-connect-size>"
                             "</restrictions>")
    assert node.proc is not None
    before = _rss_mb(node.proc.pid)
    for _ in range(2):
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: _unfinished_connect(node.port, 30), range(4)))
    time.sleep(0.5)
    after = _rss_mb(node.proc.pid)
    assert after - before < 60, f"RSS {before:.0f} MB before, {after:.0f} MB after 8 x 30 MB"
    with RawClient(node.port) as client:
        assert client.connect(5, client_id="after-the-bursts").reason_code == 0


def test_what_a_client_sends_before_connect_is_bounded(hive_factory: Any) -> None:
    """Issue 20 (1): <max-pre-connect-size> (64 KiB by default) bounds the CONNECT."""
    node = hive_factory()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", node.port), timeout=WAIT) as sock:
        sock.sendall(b"\x10\xff\xff\xff\x7f\x00\x04MQTT\x05\x02\x00\x1e")
        assert _read_all(sock) == b""  # refused on the fixed header, no 10 s wait
    assert time.monotonic() - started < 3
    will = Will("w/big", b"w" * 60_000, 0, False, {})  # 120 kB: a will and a password
    big = encode_packet(Connect("big-will", 4, True, 30, "u", b"p" * 60_000, will), 4)
    with socket.create_connection(("127.0.0.1", node.port), timeout=WAIT) as sock:
        sock.sendall(big)
        assert _read_all(sock) == b""
    raised = hive_factory(body="<restrictions><max-pre-connect-size>200000</max-pre-connect-size>"
                               "</restrictions>")
    with socket.create_connection(("127.0.0.1", raised.port), timeout=WAIT) as sock:
        sock.sendall(big)
        assert sock.recv(4) == b"\x20\x02\x00\x00"
    assert_log_clean(node.log)


# ---------------------------------------------------------------------------- slow and idle


def _ws_upgrade(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                 b"Sec-WebSocket-Protocol: mqtt\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        assert chunk, "closed during the upgrade"
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return answer.split(b"\r\n\r\n", 1)[1]


def _masked(payload: bytes, opcode: int = 0x2) -> bytes:
    assert len(payload) < 126
    return bytes((0x80 | opcode, 0x80 | len(payload))) + b"\0\0\0\0" + payload


def test_a_connection_without_connect_is_closed_after_the_idle_timeout(hive_factory: Any) -> None:
    port, ws_port = free_port(), free_port()
    node = hive_factory(
        port=port,
        listeners=(f"<tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address>"
                   f"</tcp-listener><websocket-listener><port>{ws_port}</port>"
                   "<bind-address>127.0.0.1</bind-address></websocket-listener>"),
        body="<restrictions><no-connect-idle-timeout>1000</no-connect-idle-timeout></restrictions>")
    socks = [socket.create_connection(("127.0.0.1", p), timeout=WAIT)
             for p in (port, port, ws_port, ws_port, ws_port)]
    try:
        started = time.monotonic()
        socks[1].sendall(CONNECT_V4[:7])  # a CONNECT that never finishes
        _ws_upgrade(socks[3])  # upgraded, but no CONNECT
        socks[4].sendall(b"GET /mqtt HTTP/1.1\r\n")  # an upgrade that never finishes
        for n, sock in enumerate(socks):
            data = _read_all(sock)
            assert data in (b"", b"\x88\x02\x03\xe8"), (n, data)  # nothing, or a WebSocket close
        assert time.monotonic() - started < 4
    finally:
        for sock in socks:
            sock.close()
    assert_log_clean(node.log)


# ---------------------------------------------------------------------------- WebSocket and TLS


def test_websocket_and_tls_listeners_survive_junk(hive_factory: Any, tmp_path: Any) -> None:
    from e2e.certs import make_pki

    pki = make_pki(tmp_path / "pki")
    ws_port, tls_port = free_port(), free_port()
    node = hive_factory(listeners=(
        f"<websocket-listener><port>{ws_port}</port><bind-address>127.0.0.1</bind-address>"
        f"</websocket-listener><tls-tcp-listener><port>{tls_port}</port>"
        "<bind-address>127.0.0.1</bind-address>"
        f"<tls><keystore><path>{pki.server_pem}</path></keystore></tls></tls-tcp-listener>"))
    rng = random.Random(SEED)
    connect_v5 = encode_packet(Connect("ws-junk", 5, True, 30, None, None, None, {}), 5)
    cases: list[tuple[int, bool, list[bytes]]] = []  # port, upgrade first, writes
    for n in range(60):
        style = n % 5
        if style == 0:  # junk instead of an HTTP upgrade
            cases.append((ws_port, False, [rng.randbytes(rng.randint(1, 300))]))
        elif style == 1:  # junk frames
            cases.append((ws_port, True, [rng.randbytes(rng.randint(1, 300))]))
        elif style == 2:  # a text frame [MQTT-6.0.0-1]
            cases.append((ws_port, True, [_masked(b"hello", opcode=0x1)]))
        elif style == 3:  # an unmasked frame from a client
            cases.append((ws_port, True, [bytes((0x82, len(connect_v5))) + connect_v5]))
        else:  # a good CONNECT, then corrupted MQTT inside good frames
            junk = bytes(_mutate(rng, bytearray(CONNECT_V4)))[:120]
            cases.append((ws_port, True, [_masked(connect_v5), _masked(junk)]))
        junk = rng.randbytes(rng.randint(1, 300))
        cases.append((tls_port, False, [b"\x16\x03\x01" + junk if n % 2 else junk]))

    def throw_at(port: int, upgrade: bool, writes: list[bytes]) -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if upgrade:
                    _ws_upgrade(sock)
                for data in writes:
                    sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                _read_all(sock, 1)
        except (OSError, AssertionError):
            pass  # refused, reset, or still open: all fine, the node is what is under test

    with ThreadPoolExecutor(max_workers=12) as pool:
        for future in [pool.submit(throw_at, *case) for case in cases]:
            future.result(timeout=20)
    # Both listeners still serve real clients.
    _round_trip(ws_port, transport="websockets")
    _round_trip(tls_port, ca=str(pki.ca_pem))
    assert node.proc.poll() is None
    assert_log_clean(node.log)


def _round_trip(port: int, transport: str = "tcp", ca: str | None = None) -> None:
    """A paho client subscribes and gets its own QoS 1 message back."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"round-trip-{port}",
                         transport=transport)  # type: ignore[arg-type]
    if ca is not None:
        client.tls_set(ca_certs=ca)
    got: queue.Queue[bytes] = queue.Queue()
    subscribed = threading.Event()
    client.on_subscribe = lambda *args: subscribed.set()
    client.on_message = lambda c, u, message: got.put(bytes(message.payload))
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    try:
        client.subscribe("round/trip", 1)
        assert subscribed.wait(WAIT)
        client.publish("round/trip", b"ok", 1).wait_for_publish(WAIT)
        assert got.get(timeout=WAIT) == b"ok"
    finally:
        client.disconnect()
        client.loop_stop()


def test_a_disconnect_reaches_a_client_that_is_still_sending(hive_factory):
    """The node shuts its sending side and drains the client's input before closing, so a
    client that keeps writing still reads the DISCONNECT (Paho's test_flow_control2): closing
    at once makes the client's next write meet a reset, and paho then never reads it."""
    node = hive_factory(body="<mqtt><receive-maximum><server-receive-maximum>2"
                             "</server-receive-maximum><strategy>disconnect</strategy>"
                             "</receive-maximum></mqtt>")
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="eager", protocol=mqtt.MQTTv5,
                         reconnect_on_failure=False)
    client.max_inflight_messages_set(1000)
    reasons: queue.Queue[int] = queue.Queue()
    client.on_disconnect = lambda c, u, f, reason, p: reasons.put(int(reason.value))
    client.connect("127.0.0.1", node.port)
    client.loop_start()
    try:
        for _ in range(300):
            client.publish("burst", b"x" * 200, qos=2)
        assert reasons.get(timeout=10) == 0x93
    finally:
        client.loop_stop()


class _SlowAuthentication:
    """An authentication extension that takes its time, as one asking a remote service does."""

    @hookimpl
    async def hive_authenticate(self, connect: ConnectInfo) -> AuthDecision:
        await asyncio.sleep(1.5)
        return AuthDecision.accept()


def test_what_arrives_while_extensions_decide_is_bounded_too(tmp_path: Any) -> None:
    """Issue 20 (1): packets sent after CONNECT, before extensions accept it, wait in memory;
    <max-pre-connect-size> bounds them with the CONNECT."""
    port = free_port()
    config = parse_config(f"<hivemq><listeners><tcp-listener><port>{port}</port><bind-address>"
                          "127.0.0.1</bind-address></tcp-listener></listeners><restrictions>"
                          "<max-pre-connect-size>20000</max-pre-connect-size></restrictions>"
                          "</hivemq>", source="<test>")
    node = RunningNode(config, tmp_path / "data", [_SlowAuthentication()],
                       load_installed=False).start()
    try:
        publish = encode_packet(Publish("early/t", b"x" * 1000, 0), 5)
        with RawClient(port) as client:  # a few early packets: within the limit, all handled
            client.decoder = PacketDecoder(protocol_version=5, server=False)
            client.send_raw(encode_packet(Connect("early-ok", 5, True, 30), 5) + publish * 5)
            assert client.expect(ConnAck).reason_code == 0
        with RawClient(port) as client:  # 40 kB before the CONNACK: refused
            client.decoder = PacketDecoder(protocol_version=5, server=False)
            client.send_raw(encode_packet(Connect("early-big", 5, True, 30), 5))
            for _ in range(40):
                client.send_raw(publish)
                time.sleep(0.005)
            assert client.expect(ConnAck).reason_code == 0x95
    finally:
        node.stop()
