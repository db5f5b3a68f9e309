"""Failover time of a persistent session: run.py's `failover` and `failover-stop` scenarios.

Three Hive nodes with the default heartbeat. A persistent MQTT 3.1.1 subscriber (clean session
0) on node A gets a paced, numbered QoS 1 stream that a publisher sends to a third node. Then A
is killed (SIGKILL) or frozen (SIGSTOP), the subscriber reconnects to node B, and the figure is
the time from the signal to B's CONNACK with session present. After it, the stream goes on for a
second and stops; every message the publisher got a PUBACK for must reach the subscriber.

A killed node's sockets close at once, so the subscriber and the other nodes notice it at once
(TCP health check, node links). A frozen node's sockets stay open: the other nodes notice it
through the heartbeat timeout. The subscriber is told right away (its connection is dropped
as a load balancer or a short keep-alive would), so the figure is the cluster's part only.

B is either the node that takes A's sessions over (the next one after A on the ring of node ids)
or the other survivor, which then fetches the session from the taker; runs alternate.
Packets are encoded here (`loadgen`), so nothing depends on an MQTT library.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loadgen

RETRY_S = 0.05  # between a refused or failed connect and the next attempt
CONNACK_WAIT_S = 30.0  # a node may hold a CONNECT while it waits for the session's holder
TOOK_OVER = re.compile(
    r"Took over the (\d+) persistent sessions of failed node \S+ "
    r"from its replica in (\d+) ms"
)


def _packets(buf: bytearray) -> list[tuple[int, bytes]]:
    """Take the complete packets off the front of ``buf``: (first byte, body) each."""
    out = []
    pos, n = 0, len(buf)
    while pos + 2 <= n:
        rl, i, mult = 0, pos + 1, 1
        while i < n:
            b = buf[i]
            rl += (b & 0x7F) * mult
            mult *= 128
            i += 1
            if b < 0x80:
                break
        else:
            break
        if i + rl > n:
            break
        out.append((buf[pos], bytes(buf[i : i + rl])))
        pos = i + rl
    del buf[:pos]
    return out


class _Client(threading.Thread):
    """A client of the nodes in a thread of its own, until :meth:`stop`; what ends it early is
    kept in ``error`` (reported by measure(), never a hung thread)."""

    def __init__(self, port: int, topic: str) -> None:
        super().__init__(daemon=True)
        self.port, self.topic = port, topic
        self.error: str | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=5)

    def run(self) -> None:
        try:
            self.work()
        except Exception as exc:
            self.error = repr(exc)

    def work(self) -> None:
        raise NotImplementedError


class Subscriber(_Client):
    """A persistent QoS 1 subscriber that reconnects to ``next_port`` when it loses its node."""

    def __init__(self, port: int, topic: str) -> None:
        super().__init__(port, topic)
        self.next_port = port
        self.client_id = f"bf-{uuid.uuid4().hex[:8]}"
        self.received: Counter[int] = Counter()
        self.connected_at: list[float] = []
        self.sessions_present: list[bool] = []
        self.refused = 0  # connects refused or failed before a CONNACK
        self.subscribed = threading.Event()
        self._drop = threading.Event()

    def drop(self) -> None:
        """Give up the current connection (its node is frozen) and reconnect."""
        self._drop.set()

    def count(self) -> int:
        with self._lock:
            return len(self.received)

    def snapshot(self) -> Counter[int]:
        with self._lock:
            return Counter(self.received)

    def work(self) -> None:
        while not self._stopping.is_set():
            sock = self._connect()
            if sock is not None:
                with contextlib.closing(sock):
                    self._read(sock)
                self.port = self.next_port

    def _connect(self) -> socket.socket | None:
        while not self._stopping.is_set():
            sock = None
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=CONNACK_WAIT_S)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.sendall(loadgen.connect_packet(self.client_id, clean=False))
                first, body = loadgen.read_packet(sock)
                if first >> 4 == 2 and len(body) >= 2 and body[1] == 0:
                    self.connected_at.append(time.monotonic())
                    present = bool(body[0] & 1)
                    self.sessions_present.append(present)
                    if not self.subscribed.is_set():
                        loadgen.mqtt_subscribe(sock, self.topic, 1)
                        self.subscribed.set()
                    sock.settimeout(None)
                    self._drop.clear()
                    return sock
            except OSError:
                pass
            if sock is not None:
                sock.close()
            self.refused += 1
            time.sleep(RETRY_S)
        return None

    def _read(self, sock: socket.socket) -> None:
        buf = bytearray()
        while not self._stopping.is_set() and not self._drop.is_set():
            try:
                if not select.select([sock], [], [], 0.05)[0]:
                    continue
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            acks = []
            numbers = []
            for first, body in _packets(buf):
                if first >> 4 != 3:
                    continue
                at = 2 + struct.unpack_from("!H", body)[0]
                if first & 0x06:
                    acks.append(b"\x40\x02" + body[at : at + 2])
                    at += 2
                numbers.append(int(body[at:]))
            with self._lock:
                self.received.update(numbers)
            if acks:
                try:
                    sock.sendall(b"".join(acks))
                except OSError:
                    return


class Publisher(_Client):
    """Numbered QoS 1 messages at ``rate`` per second to one node, counting the PUBACKs."""

    def __init__(self, port: int, topic: str, rate: float) -> None:
        super().__init__(port, topic)
        self.rate = rate
        self.sent = 0
        self.acked: set[int] = set()
        self._inflight: dict[int, int] = {}  # packet id -> number
        self._stop_sending = threading.Event()

    def stop_sending(self) -> None:
        self._stop_sending.set()

    def stop(self) -> None:
        self._stop_sending.set()
        super().stop()

    def all_acked(self) -> bool:
        with self._lock:
            return self._stop_sending.is_set() and not self._inflight

    def work(self) -> None:
        sock = loadgen.mqtt_connect("127.0.0.1", self.port, f"bfp-{uuid.uuid4().hex[:8]}")
        with contextlib.closing(sock):
            self._run(sock)

    def _run(self, sock: socket.socket) -> None:
        sock.settimeout(None)
        buf = bytearray()
        started = time.monotonic()
        while not self._stopping.is_set():
            due = int((time.monotonic() - started) * self.rate)
            out = []
            while not self._stop_sending.is_set() and self.sent < due:
                number = self.sent + 1
                packet_id = (number - 1) % 65535 + 1
                with self._lock:
                    if packet_id in self._inflight:
                        break  # 65,535 unacknowledged: wait
                    self._inflight[packet_id] = number
                out.append(loadgen.publish_packet(self.topic, b"%d" % number, 1, packet_id))
                self.sent = number
            if out:
                sock.sendall(b"".join(out))
            if not select.select([sock], [], [], 0.002)[0]:
                continue
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the publisher's node closed the connection")
            buf += data
            for first, body in _packets(buf):
                if first >> 4 == 4:
                    with self._lock:
                        number = self._inflight.pop(struct.unpack_from("!H", body)[0], 0)
                        if number:  # numbers start at 1
                            self.acked.add(number)


@dataclass
class Node:
    port: int  # MQTT listener
    pid: int
    node_id: str
    log_path: Path


def _wait(what: str, done: Any, timeout: float, *threads: Any, fail: bool = True) -> bool:
    """Until ``done()``; raises (or, with ``fail=False``, returns False) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not done():
        for t in threads:
            if t.error:
                raise RuntimeError(f"{what}: {t.error}")
        if time.monotonic() > deadline:
            if fail:
                raise RuntimeError(f"timeout after {timeout:.0f} s waiting for {what}")
            return False
        time.sleep(0.005)
    return True


def _ranges(numbers: list[int]) -> str:
    """1, 2, 3, 7 -> '1-3, 7' (sorted input)."""
    out: list[list[int]] = []
    for n in numbers:
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in out)


def _took_over(node: Node) -> re.Match[str] | None:
    return TOOK_OVER.search(node.log_path.read_text(errors="replace"))


def measure(nodes: list[Node], freeze: bool, to_taker: bool, rate: float) -> dict[str, Any]:
    """One failover of node 0 (A), the subscriber's; see the module docstring."""
    ring = sorted(n.node_id for n in nodes)
    victim = nodes[0]
    taker_id = ring[(ring.index(victim.node_id) + 1) % len(ring)]
    taker = next(n for n in nodes if n.node_id == taker_id)
    other = next(n for n in nodes[1:] if n is not taker)
    target, publishing = (taker, other) if to_taker else (other, taker)
    topic = f"bench/failover/{uuid.uuid4().hex[:8]}"
    sub = Subscriber(victim.port, topic)
    pub = Publisher(publishing.port, topic, rate)
    stopped = False
    problems = []
    try:
        sub.start()
        _wait("the subscriber's SUBACK", sub.subscribed.is_set, 30, sub)
        time.sleep(0.3)  # the subscription reaches the other nodes
        pub.start()
        _wait("a second of the stream", lambda: sub.count() >= rate, 30, sub, pub)
        sub.next_port = target.port
        connects = len(sub.connected_at)
        sent_at_fault = pub.sent
        fault_at = time.monotonic()
        if freeze:
            os.kill(victim.pid, signal.SIGSTOP)
            stopped = True
            sub.drop()
        else:
            os.kill(victim.pid, signal.SIGKILL)
        _wait(
            "the subscriber's CONNACK with session present on another node",
            lambda: any(sub.sessions_present[connects:]),
            60,
            sub,
            pub,
        )
        resumed = sub.sessions_present.index(True, connects)
        failover_s = sub.connected_at[resumed] - fault_at
        first_s = sub.connected_at[connects] - fault_at
        present = sub.sessions_present[connects]
        sent_at_resume = pub.sent
        # a frozen node stays frozen until its sessions are taken over, then wakes up
        if not _wait("the takeover", lambda: _took_over(taker), 30, fail=False):
            problems.append(
                f"the taker logged no takeover within 30 s of the {'SIGSTOP' if freeze else 'kill'}"
            )
        if stopped:
            os.kill(victim.pid, signal.SIGCONT)
            stopped = False
        time.sleep(1.0)  # the stream goes on to the resumed session
        pub.stop_sending()
        if not _wait("a PUBACK for every message", pub.all_acked, 30, pub, fail=False):
            problems.append("not every message got a PUBACK within 30 s")
        if not _wait(
            "every acknowledged message at the subscriber",
            lambda: pub.acked <= set(sub.snapshot()),
            30,
            sub,
            fail=False,
        ):
            problems.append("acknowledged messages missing at the subscriber after 30 s")
    finally:
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim.pid, signal.SIGCONT)
        pub.stop()
        sub.stop()
    got = sub.snapshot()
    lost = sorted(pub.acked - set(got))
    took_over = _took_over(taker)
    r: dict[str, Any] = {
        "failover_s": failover_s,
        "to": "taker" if to_taker else "other",
        "session_present": present,  # on the first CONNACK after the fault
        "first_connack_s": first_s,
        "refused": sub.refused,
        "connacks": [int(p) for p in sub.sessions_present[connects:]],  # session present flags
        "sent": pub.sent,
        "acked": len(pub.acked),
        "pubacks_missing": pub.sent - len(pub.acked),
        "sent_at_fault": sent_at_fault,
        "sent_at_resume": sent_at_resume,
        "lost": len(lost),
        "duplicates": sum(c - 1 for c in got.values() if c > 1),
        "takeover_ms": int(took_over.group(2)) if took_over else None,
    }
    if not present:
        problems.insert(
            0,
            f"the first CONNACK after the fault ({first_s:.2f} s) had no session present; "
            f"session present flags of the CONNACKs after the fault: {r['connacks']}",
        )
    if lost:
        problems.append(
            f"{len(lost)} acknowledged messages never arrived: numbers {_ranges(lost)} (message "
            f"{sent_at_fault} was sent before the fault, {sent_at_resume} before the resumption)"
        )
    if problems:
        r["error"] = "; ".join(problems)
    return r
