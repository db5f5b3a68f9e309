"""What the overload tests run against a node: a flood, a subscriber, a probe, a memory watch.

- :class:`Flood`: ``_flood.py`` in a process of its own (QoS 1 publishers, many connections).
- :class:`Subscriber`: ``mosquitto_sub`` (C, so the subscriber keeps up better than the node)
  writing every payload it receives to a file.
- :class:`Probe`: a thread that, every quarter second, opens a new MQTT connection (CONNECT to
  CONNACK) and sends PINGREQ on a connection it keeps (to PINGRESP), recording both times.
- :class:`MemoryWatch`: a thread sampling a process's resident memory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

FLOOD = Path(__file__).with_name("_flood.py")
PROBE_TIMEOUT = 10.0


class Flood:
    def __init__(self, addresses: list[tuple[str, int]], publishers: int, seconds: float,
                 topic: str, window: int = 50, size: int = 64, qos: int = 1) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(FLOOD), ",".join(f"{h}:{p}" for h, p in addresses),
             str(publishers), str(seconds), topic, str(window), str(size), str(qos)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.seconds = seconds

    def result(self) -> tuple[int, dict[int, list[int]]]:
        """(messages sent, acknowledged serials by publisher), once the flood is over."""
        out, err = self.proc.communicate(timeout=self.seconds + 40)
        assert self.proc.returncode == 0, err.decode()
        document = json.loads(out)
        failed = {n: s for n, s in document["sent"].items() if not isinstance(s, int)}
        assert not failed, f"publishers failed: {failed}"
        return (sum(document["sent"].values()),
                {int(n): serials for n, serials in document["acked"].items()})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Subscriber:
    """``mosquitto_sub`` on ``topic_filter`` at QoS 1, every payload a line of ``out``."""

    def __init__(self, host: str, port: int, topic_filter: str, out: Path) -> None:
        self.out = out
        self._file = out.open("wb")
        self.proc = subprocess.Popen(
            ["mosquitto_sub", "-h", host, "-p", str(port), "-q", "1", "-t", topic_filter,
             "-F", "%p", "-i", f"overload-sub-{port}-{os.getpid()}"],
            stdout=self._file, stderr=subprocess.PIPE)

    def lines(self) -> list[bytes]:
        self._file.flush()
        return self.out.read_bytes().splitlines()

    def received(self) -> set[tuple[int, int]]:
        """(publisher, serial) of every flood message received."""
        found = set()
        for line in self.lines():
            parts = line.split(b":", 2)
            if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                found.add((int(parts[0]), int(parts[1])))
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._file.close()


def _connect_packet(client_id: str) -> bytes:
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid
    return bytes([0x10, len(body)]) + body


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed by the node")
        data += chunk
    return data


class Probe(threading.Thread):
    """CONNECT and PINGREQ round trips to one node, every quarter second, until stopped."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(daemon=True)
        self.address = (host, port)
        self.connects: list[float] = []  # seconds; PROBE_TIMEOUT for one that failed
        self.pings: list[float] = []
        self.failures: list[str] = []
        self._stop_event = threading.Event()
        self._count = 0

    def _connect(self) -> socket.socket:
        self._count += 1
        sock = socket.create_connection(self.address, timeout=PROBE_TIMEOUT)
        sock.settimeout(PROBE_TIMEOUT)
        sock.sendall(_connect_packet(f"probe-{os.getpid()}-{self.address[1]}-{self._count}"))
        connack = _read_exactly(sock, 4)
        assert connack[0] == 0x20 and connack[3] == 0, connack
        return sock

    def run(self) -> None:
        kept: socket.socket | None = None
        while not self._stop_event.wait(0.25):
            begun = time.monotonic()
            try:
                sock = self._connect()
                self.connects.append(time.monotonic() - begun)
                sock.sendall(b"\xe0\x00")
                sock.close()
            except (OSError, AssertionError) as exc:
                self.connects.append(PROBE_TIMEOUT)
                self.failures.append(f"CONNECT: {exc!r}")
            begun = time.monotonic()
            try:
                if kept is None:
                    kept = self._connect()
                    begun = time.monotonic()
                kept.sendall(b"\xc0\x00")
                assert _read_exactly(kept, 2) == b"\xd0\x00"
                self.pings.append(time.monotonic() - begun)
            except (OSError, AssertionError) as exc:
                self.pings.append(PROBE_TIMEOUT)
                self.failures.append(f"PINGREQ: {exc!r}")
                if kept is not None:
                    kept.close()
                kept = None
        if kept is not None:
            kept.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(PROBE_TIMEOUT * 2 + 1)


def resident_memory(pid: int) -> int:
    """Bytes (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no VmRSS")


class MemoryWatch(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = resident_memory(pid)
        self.first = self.peak
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(0.1):
            try:
                self.peak = max(self.peak, resident_memory(self.pid))
            except (OSError, ValueError):
                return

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def rest_metrics(host: str, port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{host}:{port}/api/v1/metrics", timeout=10) as answer:
        return json.load(answer)  # type: ignore[no-any-return]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else 0.0


def _pause(process: subprocess.Popen[bytes], pauses: tuple[tuple[float, float], ...]) -> None:
    started = time.monotonic()
    for at, length in pauses:
        time.sleep(max(0.0, started + at - time.monotonic()))
        if process.poll() is not None:
            return
        process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(length)
        finally:
            process.send_signal(signal.SIGCONT)


def flood_and_count(publish_to: list[tuple[str, int]], subscribe_at: tuple[str, int],
                    probe_at: list[tuple[str, int]], pids: list[int], folder: Path,
                    publishers: int, seconds: float, settle: float = 30.0,
                    pauses: tuple[tuple[float, float], ...] = ()) -> dict[str, Any]:
    """Flood ``publish_to`` while a subscriber at ``subscribe_at`` takes everything, probes ask
    each of ``probe_at`` and the memory of each process in ``pids`` is watched; the figures.
    ``pauses``: (seconds into the flood, seconds) the subscriber is stopped (SIGSTOP), as a
    process starved of CPU is."""
    subscriber = Subscriber(*subscribe_at, "flood/#", folder / "received.txt")
    watches = [MemoryWatch(pid) for pid in pids]
    probes = [Probe(*address) for address in probe_at]
    pausing = threading.Thread(target=_pause, args=(subscriber.proc, pauses), daemon=True)
    try:
        time.sleep(1.5)  # mosquitto_sub subscribed, and the other nodes heard of its filter
        for thread in [*watches, *probes]:
            thread.start()
        flood = Flood(publish_to, publishers, seconds, "flood")
        pausing.start()
        try:
            sent, acked = flood.result()
        finally:
            flood.stop()
            for probe in probes:
                probe.stop()
            pausing.join(sum(at + length for at, length in pauses) + 5)
        expected = {(n, serial) for n, serials in acked.items() for serial in serials}
        deadline = time.monotonic() + settle
        received = subscriber.received()
        while not expected <= received and time.monotonic() < deadline:
            time.sleep(0.5)
            received = subscriber.received()
    finally:
        for watch in watches:
            watch.stop()
        subscriber.stop()
    connects = [t for probe in probes for t in probe.connects]
    pings = [t for probe in probes for t in probe.pings]
    return {
        "sent": sent, "acked": len(expected), "received": len(received & expected),
        "lost": len(expected - received), "probes": len(pings),
        "connect_p50": percentile(connects, 0.5), "connect_max": max(connects, default=0.0),
        "ping_p50": percentile(pings, 0.5), "ping_max": max(pings, default=0.0),
        "probe_failures": [failure for probe in probes for failure in probe.failures],
        "rss_growth_mib": [round((w.peak - w.first) / (1024 * 1024), 1) for w in watches],
    }
