"""MQTT 3.1.1 load generator for benchmarking any broker (Hive, Mosquitto, ...).

Deliberately independent of hive_core: every packet is encoded here, by hand.

Design (see bench/README.md for the long version):

* Publishers and subscribers run in separate processes (multiprocessing, fork),
  pinned to the generator core.  Each process drives several connections with
  non-blocking sockets and one epoll selector: no asyncio, no per-message
  allocation on the hot path.
* PUBLISH packets are pre-encoded once; the hot loop sends slices of one big
  buffer (``memoryview``), so a batch of N messages costs one ``send`` call.
* Incoming streams are counted with a minimal parser that only walks the fixed
  header and the remaining length of each packet.  Subscribers answer QoS 1
  PUBLISHes with PUBACK themselves; publishers count PUBACKs.
* Flow control: the publishers stop sending while
  ``sent - min(delivered per subscriber connection) >= window``.  The counters
  live in shared memory (``RawArray``).  Nothing is dropped by the generator and
  the broker's queues stay bounded, so a broker is measured at its sustainable
  rate, and any message that does not arrive is reported as loss.
* QoS 1 publishers additionally keep at most ``inflight`` un-acknowledged
  PUBLISHes per connection.

Use as a module (``run_load(LoadSpec(...))``, ``run_connections(...)``) or as a
CLI: ``python bench/loadgen.py --port 1883 --scenario qos0`` prints JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import multiprocessing as mp
import os
import queue as queue_mod
import random
import resource
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
import uuid
from dataclasses import asdict, dataclass
from typing import Any

BROKER_CORE = 0
GEN_CORE = 1

# shared run state values
ST_SETUP, ST_RUN, ST_STOP, ST_DONE, ST_ABORT = 0, 1, 2, 3, 4

RECV_SIZE = 1 << 18
_mono_ns = time.monotonic_ns
_EVR = selectors.EVENT_READ
_EVW = selectors.EVENT_WRITE


# --------------------------------------------------------------------------------------
# process helpers
# --------------------------------------------------------------------------------------


NICE = 0  # niceness applied to generator children (and by run.py to brokers); root may go < 0


def apply_nice(n: int | None = None, own_session: bool = False) -> None:
    """Set the niceness of this process.  With autogroup scheduling (the Linux default)
    niceness only ranks processes of one session against each other, so the session's
    autogroup gets the same niceness; ``own_session`` first moves the process into a new
    session (and autogroup) so that nothing else of the caller's session is affected."""
    n = NICE if n is None else n
    if not n:
        return
    if own_session:
        with contextlib.suppress(OSError):
            os.setsid()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, n)
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as f:
        f.write(str(n))


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux prctl)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def pin_to_core(core: int) -> None:
    """Pin the calling process to ``core`` (ignored when the core doesn't exist)."""
    try:
        if core < (os.cpu_count() or 1):
            os.sched_setaffinity(0, {core})
    except (AttributeError, OSError):
        pass


def raise_nofile() -> int:
    """Raise RLIMIT_NOFILE soft limit to the hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --------------------------------------------------------------------------------------
# MQTT 3.1.1 encoding (only what the generator needs)
# --------------------------------------------------------------------------------------


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n % 128
        n //= 128
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _mqtt_str(s: bytes) -> bytes:
    return struct.pack("!H", len(s)) + s


def connect_packet(client_id: str, keepalive: int = 0, clean: bool = True) -> bytes:
    body = (
        _mqtt_str(b"MQTT")
        + bytes([4, 0x02 if clean else 0x00])
        + struct.pack("!H", keepalive)
        + _mqtt_str(client_id.encode())
    )
    return b"\x10" + encode_varint(len(body)) + body


def subscribe_packet(packet_id: int, topic: str, qos: int) -> bytes:
    body = struct.pack("!H", packet_id) + _mqtt_str(topic.encode()) + bytes([qos])
    return b"\x82" + encode_varint(len(body)) + body


def publish_packet(topic: str, payload: bytes, qos: int = 0, packet_id: int = 0) -> bytes:
    body = _mqtt_str(topic.encode())
    if qos:
        body += struct.pack("!H", packet_id)
    body += payload
    return bytes([0x30 | (qos << 1)]) + encode_varint(len(body)) + body


DISCONNECT = b"\xe0\x00"


# --------------------------------------------------------------------------------------
# blocking setup helpers
# --------------------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by broker during setup")
        buf += chunk
    return bytes(buf)


def read_packet(sock: socket.socket) -> tuple[int, bytes]:
    """Read one whole packet (blocking); return (first byte, body)."""
    first = _recv_exact(sock, 1)[0]
    mult, rl = 1, 0
    while True:
        b = _recv_exact(sock, 1)[0]
        rl += (b & 0x7F) * mult
        mult *= 128
        if b < 0x80:
            break
    return first, (_recv_exact(sock, rl) if rl else b"")


def mqtt_connect(
    host: str, port: int, client_id: str, timeout: float = 30.0, clean: bool = True
) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect_packet(client_id, clean=clean))
    first, body = read_packet(sock)
    if first >> 4 != 2 or len(body) < 2 or body[1] != 0:
        raise ConnectionError(f"bad CONNACK for {client_id}: {first:#x} {body!r}")
    return sock


def mqtt_subscribe(sock: socket.socket, topic: str, qos: int, packet_id: int = 1) -> None:
    sock.sendall(subscribe_packet(packet_id, topic, qos))
    while True:
        first, body = read_packet(sock)
        if first >> 4 == 9:
            break
    if len(body) < 3 or body[2] == 0x80:
        raise ConnectionError(f"SUBSCRIBE to {topic!r} refused: {body!r}")


# --------------------------------------------------------------------------------------
# stream scanners (hot path)
# --------------------------------------------------------------------------------------


def _varint_at(buf: bytes, i: int, n: int) -> tuple[int, int]:
    """Decode a remaining length whose first byte (at i) has the continuation bit.

    Returns (value, index after it), or (-1, 0) if the buffer ends inside it."""
    rl = 0
    shift = 0
    while i < n:
        b = buf[i]
        rl |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return rl, i
        shift += 7
    return -1, 0


def scan_count(buf: bytes, n: int, ptype: int) -> tuple[int, int]:
    """Count complete packets of type ``ptype``; return (bytes consumed, count)."""
    pos = 0
    cnt = 0
    while pos + 2 <= n:
        rl = buf[pos + 1]
        if rl < 0x80:
            end = pos + 2 + rl
        else:
            rl, i = _varint_at(buf, pos + 1, n)
            if rl < 0:
                break
            end = i + rl
        if end > n:
            break
        if buf[pos] >> 4 == ptype:
            cnt += 1
        pos = end
    return pos, cnt


def scan_publish(
    buf: bytes,
    n: int,
    acks: list[bytes] | None,
    lat: list[int] | None,
    now: int,
    t_lo: int,
    t_hi: int,
) -> tuple[int, int]:
    """Count PUBLISH packets; collect PUBACKs for QoS 1 and latencies for timestamped payloads.

    Returns (bytes consumed, publish count)."""
    pos = 0
    cnt = 0
    unpack_ts = _TS.unpack_from
    while pos + 2 <= n:
        rl = buf[pos + 1]
        if rl < 0x80:
            vh = pos + 2
        else:
            rl, vh = _varint_at(buf, pos + 1, n)
            if rl < 0:
                break
        end = vh + rl
        if end > n:
            break
        first = buf[pos]
        if first >> 4 == 3:
            cnt += 1
            p = vh + 2 + ((buf[vh] << 8) | buf[vh + 1])
            if first & 0x06:
                if acks is not None:
                    acks.append(b"\x40\x02" + buf[p : p + 2])
                p += 2
            if lat is not None and end - p >= 8:
                ts = unpack_ts(buf, p)[0]
                if t_lo <= ts < t_hi:
                    lat.append(now - ts)
        pos = end
    return pos, cnt


_TS = struct.Struct("<q")


# --------------------------------------------------------------------------------------
# load specification and shared state
# --------------------------------------------------------------------------------------


@dataclass
class LoadSpec:
    host: str = "127.0.0.1"
    port: int = 1883
    pub_port: int = 0  # publishers connect here when set (a cluster: publish on another node)
    qos: int = 0
    publishers: int = 1
    subscribers: int = 1
    payload: int = 32  # bytes (>= 8 when timestamps are on)
    topic_mode: str = "same"  # "same": one topic; "per-pub": bench/<run>/<i>, sub to bench/<run>/+
    window: int = 10_000  # max (sent - min delivered) in messages
    inflight: int = 1_000  # QoS 1: max un-acked PUBLISHes per publisher connection
    batch: int = 64  # messages per send() call
    rate: float = 0.0  # total msgs/s; 0 = as fast as the window allows
    timestamps: bool = False  # payload starts with a monotonic-ns timestamp -> latency
    persistent: bool = False  # subscribers connect with clean session 0 (a persistent session)
    warmup: float = 1.0
    duration: float = 5.0
    drain_timeout: float = 10.0
    pub_procs: int = 1
    sub_procs: int = 1
    core: int = GEN_CORE


class _Shared:
    def __init__(self, ctx: Any, spec: LoadSpec) -> None:
        self.state = ctx.RawValue("i", ST_SETUP)
        self.t_lo = ctx.RawValue("q", 1 << 62)  # latency sampling window (monotonic ns)
        self.t_hi = ctx.RawValue("q", 1 << 62)
        self.sent = ctx.RawArray("q", spec.pub_procs)  # per publisher process
        self.acked = ctx.RawArray("q", spec.pub_procs)
        self.pub_done = ctx.RawArray("i", spec.pub_procs)
        self.delivered = ctx.RawArray("q", spec.subscribers)  # per subscriber connection
        self.sub_min = ctx.RawArray("q", spec.sub_procs)  # min delivered per sub process
        self.q = ctx.Queue()


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """Split range(n) into ``parts`` contiguous (start, count) chunks."""
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        c = base + (1 if i < extra else 0)
        out.append((start, c))
        start += c
    return out


def _topics(spec: LoadSpec, run_id: str) -> tuple[list[str], str]:
    if spec.topic_mode == "per-pub":
        width = len(str(max(spec.publishers - 1, 0)))
        pubs = [f"bench/{run_id}/{i:0{width}d}" for i in range(spec.publishers)]
        return pubs, f"bench/{run_id}/+"
    t = f"bench/{run_id}/t"
    return [t] * spec.publishers, t


def _child(target: Any, sh: _Shared, role: str, idx: int, *args: Any) -> None:
    try:
        die_with_parent()
        apply_nice(own_session=True)
        target(sh, idx, *args)
    except BaseException as exc:  # report to the coordinator, never hang it
        with contextlib.suppress(Exception):
            sh.q.put(("error", role, idx, f"{exc!r}\n{traceback.format_exc()}"))
        sh.state.value = ST_ABORT
    finally:
        with contextlib.suppress(Exception):
            sh.q.close()
            sh.q.join_thread()


# --------------------------------------------------------------------------------------
# subscriber process
# --------------------------------------------------------------------------------------


def _sub_main(sh: _Shared, pidx: int, spec: LoadSpec, run_id: str, first: int, count: int) -> None:
    pin_to_core(spec.core)
    raise_nofile()
    _, sub_topic = _topics(spec, run_id)
    socks = []
    for i in range(first, first + count):
        s = mqtt_connect(spec.host, spec.port, f"bs-{run_id}-{i}", clean=not spec.persistent)
        mqtt_subscribe(s, sub_topic, spec.qos)
        s.setblocking(False)
        socks.append(s)
    sh.q.put(("ready", "sub", pidx, None))

    sel = selectors.DefaultSelector()
    for j, s in enumerate(socks):
        sel.register(s, _EVR, j)
    counts = [0] * count
    bufs = [bytearray(RECV_SIZE) for _ in range(count)]
    views = [memoryview(b) for b in bufs]
    have = [0] * count
    outq: list[bytes] = [b""] * count
    lat: list[int] | None = [] if spec.timestamps else None
    want_acks = spec.qos > 0
    delivered = sh.delivered
    state = sh.state
    qos0_plain = not want_acks and lat is None
    scan = scan_publish
    while True:
        st = state.value
        if st >= ST_DONE:
            break
        events = sel.select(0.05)
        if not events:
            continue
        now = _mono_ns()
        t_lo = sh.t_lo.value
        t_hi = sh.t_hi.value
        for key, ev in events:
            j = key.data
            s = key.fileobj
            if ev & _EVW:
                pend = outq[j]
                try:
                    k = s.send(pend) if pend else 0
                except BlockingIOError:
                    k = 0
                outq[j] = pend[k:]
                if not outq[j]:
                    sel.modify(s, _EVR, j)
            if not ev & _EVR:
                continue
            buf = bufs[j]
            h = have[j]
            if h == len(buf):  # a single packet larger than the buffer: grow
                views[j].release()
                buf.extend(bytes(len(buf)))
                views[j] = memoryview(buf)
            try:
                got = s.recv_into(views[j][h:])
            except BlockingIOError:
                continue
            if not got:
                raise ConnectionError(f"subscriber {first + j}: broker closed the connection")
            n = h + got
            if qos0_plain:
                used, c = scan_count(buf, n, 3)
            else:
                acks: list[bytes] | None = [] if want_acks else None
                used, c = scan(buf, n, acks, lat, now, t_lo, t_hi)
                if acks:
                    out = outq[j] + b"".join(acks) if outq[j] else b"".join(acks)
                    try:
                        k = s.send(out)
                    except BlockingIOError:
                        k = 0
                    if k < len(out):
                        if not outq[j]:
                            sel.modify(s, _EVR | _EVW, j)
                        outq[j] = out[k:]
                    elif outq[j]:
                        outq[j] = b""
                        sel.modify(s, _EVR, j)
            if used < n:
                buf[: n - used] = buf[used:n]
                have[j] = n - used
            else:
                have[j] = 0
            if c:
                counts[j] += c
                delivered[first + j] = counts[j]
        sh.sub_min[pidx] = min(counts)

    sh.q.put(("result", "sub", pidx, {"counts": counts, "latencies_ns": lat}))
    for s in socks:
        with contextlib.suppress(OSError):
            s.setblocking(True)
            s.settimeout(1.0)
            s.sendall(DISCONNECT)
        s.close()


# --------------------------------------------------------------------------------------
# publisher process
# --------------------------------------------------------------------------------------


def _pub_main(sh: _Shared, pidx: int, spec: LoadSpec, run_id: str, first: int, count: int) -> None:
    pin_to_core(spec.core)
    raise_nofile()
    pub_topics, _ = _topics(spec, run_id)
    topics = pub_topics[first : first + count]
    socks = []
    for i in range(first, first + count):
        s = mqtt_connect(spec.host, spec.pub_port or spec.port, f"bp-{run_id}-{i}")
        s.setblocking(False)
        socks.append(s)

    qos = spec.qos
    payload = bytes(spec.payload) if not spec.timestamps else b""
    # pre-encoded buffers: QoS 0 -> `batch` copies; QoS 1 -> one packet per packet id in a cycle
    cycle = 1
    if qos:
        cycle = min(65535, max(4 * spec.inflight, 4096))
    pkts: list[memoryview] = []
    plen = []
    if not spec.timestamps:
        for t in topics:
            if qos:
                buf = b"".join(publish_packet(t, payload, qos, pid) for pid in range(1, cycle + 1))
                plen.append(len(buf) // cycle)
            else:
                one = publish_packet(t, payload, 0)
                buf = one * spec.batch
                plen.append(len(one))
            pkts.append(memoryview(buf))
    sh.q.put(("ready", "pub", pidx, None))

    sel = selectors.DefaultSelector()
    for j, s in enumerate(socks):
        sel.register(s, _EVR, j)
    sent_c = [0] * count
    acked_c = [0] * count
    pending: list[memoryview | None] = [None] * count
    ack_rest = [b""] * count
    state = sh.state
    while state.value == ST_SETUP:
        time.sleep(0.001)

    total = 0
    total_acked = 0
    sent_arr = sh.sent
    sub_min = sh.sub_min
    window = spec.window
    inflight = spec.inflight if qos else 1 << 62
    nsub_procs = len(sub_min)
    npub_procs = len(sent_arr)
    batch = spec.batch
    rr = 0
    rated = spec.rate > 0
    interval_ns = int(1e9 * npub_procs / spec.rate) if rated else 0
    next_ns = _mono_ns()
    # timestamped packets: topic/qos header is fixed, payload = ts + padding
    ts_pad = bytes(max(spec.payload - 8, 0))
    ts_pid = [0] * count

    def handle_events(timeout: float) -> None:
        nonlocal total_acked
        for key, ev in sel.select(timeout):
            j = key.data
            s = key.fileobj
            if ev & _EVR:
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    data = None
                if data is not None:
                    if not data:
                        raise ConnectionError(
                            f"publisher {first + j}: broker closed the connection"
                        )
                    if ack_rest[j]:
                        data = ack_rest[j] + data
                    used, c = scan_count(data, len(data), 4)
                    ack_rest[j] = data[used:]
                    if c:
                        acked_c[j] += c
                        total_acked += c
            if ev & _EVW:
                pend = pending[j]
                if pend is not None:
                    try:
                        k = s.send(pend)
                    except BlockingIOError:
                        k = 0
                    if k < len(pend):
                        pending[j] = pend[k:]
                    else:
                        pending[j] = None
                        sel.modify(s, _EVR, j)

    def push(j: int, mv: memoryview | bytes) -> None:
        s = socks[j]
        try:
            k = s.send(mv)
        except BlockingIOError:
            k = 0
        if k < len(mv):
            pending[j] = memoryview(mv)[k:]
            sel.modify(s, _EVR | _EVW, j)

    while state.value == ST_RUN:
        handle_events(0)
        if npub_procs == 1:
            gsent = total
        else:
            sent_arr[pidx] = total
            gsent = sum(sent_arr)
        gmin = sub_min[0] if nsub_procs == 1 else min(sub_min)
        credit = window - (gsent - gmin)
        if rated:
            now = _mono_ns()
            if now < next_ns:
                handle_events(min((next_ns - now) / 1e9, 0.01))
                continue
            if credit <= 0:
                handle_events(0.0005)
                continue
            j = rr
            rr = (rr + 1) % count
            if pending[j] is not None or sent_c[j] - acked_c[j] >= inflight:
                handle_events(0.0002)
                continue
            if qos:
                ts_pid[j] = ts_pid[j] % 65535 + 1
            pkt = publish_packet(topics[j], _TS.pack(_mono_ns()) + ts_pad, qos, ts_pid[j])
            push(j, pkt)
            sent_c[j] += 1
            total += 1
            sent_arr[pidx] = total
            next_ns += interval_ns
            if _mono_ns() - next_ns > 1_000_000_000:  # fell >1 s behind: don't burst
                next_ns = _mono_ns()
            continue
        if credit <= 0:
            handle_events(0.0002)
            continue
        progressed = False
        for _ in range(count):
            j = rr
            rr = (rr + 1) % count
            if pending[j] is not None:
                continue
            n = min(batch, credit, inflight - (sent_c[j] - acked_c[j]))
            if n <= 0:
                continue
            L = plen[j]
            if qos:
                start = sent_c[j] % cycle
                n = min(n, cycle - start)
                mv = pkts[j][start * L : (start + n) * L]
            else:
                mv = pkts[j][: n * L]
            push(j, mv)
            sent_c[j] += n
            total += n
            credit -= n
            progressed = True
            if credit <= 0:
                break
        sent_arr[pidx] = total
        if not progressed:
            handle_events(0.0002)

    # flush pending bytes and (QoS 1) wait for all PUBACKs
    sent_arr[pidx] = total
    deadline = time.monotonic() + spec.drain_timeout
    while time.monotonic() < deadline and state.value < ST_DONE:
        if all(p is None for p in pending) and total_acked >= (total if qos else 0):
            break
        handle_events(0.01)
    sh.acked[pidx] = total_acked
    sh.pub_done[pidx] = 1
    while state.value < ST_DONE:
        handle_events(0.02)
    sh.q.put(("result", "pub", pidx, {"sent": sent_c, "acked": acked_c}))
    for s in socks:
        with contextlib.suppress(OSError):
            s.setblocking(True)
            s.settimeout(1.0)
            s.sendall(DISCONNECT)
        s.close()


# --------------------------------------------------------------------------------------
# coordinator
# --------------------------------------------------------------------------------------


_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read()
            fields = st[st.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
        except (OSError, ValueError, IndexError):
            pass
    return total


def _core_ticks() -> dict[int, tuple[int, int]]:
    """{core: (ticks running tasks, total ticks)} from /proc/stat."""
    out = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu") and line[3].isdigit():
                    parts = line.split()
                    v = [int(x) for x in parts[1:9]]
                    # user + nice + system: irq/softirq time (much of loopback TCP) is not
                    # charged to any process, so it must not count as "other load"
                    out[int(parts[0][3:])] = (v[0] + v[1] + v[2], sum(v))
    except OSError:
        pass
    return out


class CpuProbe:
    """CPU use of the broker and the generator processes between start() and stop(),
    and how busy each core was with anything else (other load on a noisy machine)."""

    def __init__(self, broker_pids: list[int], gen_pids: list[int]) -> None:
        self.broker_pids, self.gen_pids = broker_pids, gen_pids

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.b0 = _proc_ticks(self.broker_pids)
        self.g0 = _proc_ticks(self.gen_pids)
        self.c0 = _core_ticks()

    def stop(self) -> dict[str, float]:
        dt = time.monotonic() - self.t0
        b = (_proc_ticks(self.broker_pids) - self.b0) / _CLK / dt * 100
        g = (_proc_ticks(self.gen_pids) - self.g0) / _CLK / dt * 100
        c1 = _core_ticks()
        out = {"broker_cpu_pct": round(b, 1), "gen_cpu_pct": round(g, 1)}
        for core, own in ((BROKER_CORE, b), (GEN_CORE, g)):
            if core in c1 and core in self.c0:
                busy = c1[core][0] - self.c0[core][0]
                tot = c1[core][1] - self.c0[core][1]
                if tot > 0:
                    out[f"core{core}_other_pct"] = round(max(0.0, 100.0 * busy / tot - own), 1)
        return out


class LoadError(RuntimeError):
    pass


def _percentile(sorted_vals: list[int], p: float) -> float:
    if not sorted_vals:
        return float("nan")
    k = min(len(sorted_vals) - 1, max(0, round(p / 100.0 * (len(sorted_vals) - 1))))
    return float(sorted_vals[k])


def _wait_msgs(sh: _Shared, kind: str, expected: int, timeout: float, results: dict) -> None:
    got = 0
    deadline = time.monotonic() + timeout
    while got < expected:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LoadError(f"timeout waiting for {expected} '{kind}' messages (got {got})")
        try:
            msg = sh.q.get(timeout=min(left, 0.5))
        except queue_mod.Empty:
            continue
        if msg[0] == "error":
            raise LoadError(f"{msg[1]} process {msg[2]} failed: {msg[3]}")
        if msg[0] == kind:
            got += 1
            if kind == "result":
                results[(msg[1], msg[2])] = msg[3]


def _stop_children(sh: Any, procs: list[Any], grace: float) -> None:
    """Tell the children to stop (abort if the run did not finish), then reap them by PID."""
    if sh.state.value < ST_DONE:
        sh.state.value = ST_ABORT
    for p in procs:
        p.join(timeout=grace)
        if p.is_alive():
            p.terminate()
            p.join(timeout=2)
        if p.is_alive():
            p.kill()
            p.join()


def run_load(spec: LoadSpec, broker_pids: list[int] | None = None) -> dict[str, Any]:
    """Run one publish/subscribe load and return measured figures.

    Returned keys: delivered_per_s, published_per_s, sent, expected, delivered, lost,
    duplicates, p50_ms/p99_ms/... (with timestamps), measured_s."""
    if spec.timestamps and spec.payload < 8:
        spec.payload = 8
    spec.pub_procs = max(1, min(spec.pub_procs, spec.publishers))
    spec.sub_procs = max(1, min(spec.sub_procs, spec.subscribers))
    ctx = mp.get_context("fork")
    sh = _Shared(ctx, spec)
    run_id = uuid.uuid4().hex[:8]
    pin_to_core(spec.core)
    procs: list[Any] = []
    results: dict[tuple[str, int], Any] = {}
    try:
        for k, (first, cnt) in enumerate(_split(spec.subscribers, spec.sub_procs)):
            p = ctx.Process(target=_child, args=(_sub_main, sh, "sub", k, spec, run_id, first, cnt))
            p.daemon = True
            p.start()
            procs.append(p)
        setup_timeout = 30.0 + 0.05 * (spec.subscribers + spec.publishers)
        _wait_msgs(sh, "ready", spec.sub_procs, setup_timeout, results)
        for k, (first, cnt) in enumerate(_split(spec.publishers, spec.pub_procs)):
            p = ctx.Process(target=_child, args=(_pub_main, sh, "pub", k, spec, run_id, first, cnt))
            p.daemon = True
            p.start()
            procs.append(p)
        _wait_msgs(sh, "ready", spec.pub_procs, setup_timeout, results)

        def total_delivered() -> int:
            return sum(sh.delivered)

        def check_abort() -> None:
            if sh.state.value == ST_ABORT:
                _wait_msgs(sh, "never", 1, 5.0, results)  # raises the child's error
            for p in procs:
                if not p.is_alive() and p.exitcode not in (0, None):
                    raise LoadError(f"generator process died with exit code {p.exitcode}")

        def sleep_checked(sec: float) -> None:
            end = time.monotonic() + sec
            while (left := end - time.monotonic()) > 0:
                time.sleep(min(left, 0.1))
                check_abort()

        probe = CpuProbe(broker_pids or [], [p.pid for p in procs])
        sh.state.value = ST_RUN
        sleep_checked(spec.warmup)
        probe.start()
        t0 = time.monotonic()
        sh.t_lo.value = _mono_ns()
        d0, s0 = total_delivered(), sum(sh.sent)
        sleep_checked(spec.duration)
        t1 = time.monotonic()
        d1, s1 = total_delivered(), sum(sh.sent)
        cpu = probe.stop()
        sh.t_hi.value = _mono_ns()
        sh.state.value = ST_STOP

        # wait for the publishers to flush (and collect their PUBACKs) ...
        deadline = time.monotonic() + spec.drain_timeout + 5
        while not all(sh.pub_done) and time.monotonic() < deadline:
            time.sleep(0.01)
            check_abort()
        sent_total = sum(sh.sent)
        # ... then for every subscriber connection to have everything, or for progress to stop
        last, last_change = -1, time.monotonic()
        while True:
            cur = list(sh.delivered)
            if min(cur) >= sent_total:
                break
            tot = sum(cur)
            now = time.monotonic()
            if tot != last:
                last, last_change = tot, now
            elif now - last_change > min(3.0, spec.drain_timeout):
                break
            time.sleep(0.01)
            check_abort()
        sh.state.value = ST_DONE
        _wait_msgs(sh, "result", spec.sub_procs + spec.pub_procs, 30.0, results)
        for p in procs:
            p.join(timeout=5)
    finally:
        _stop_children(sh, procs, grace=2)

    counts: list[int] = []
    lat: list[int] = []
    acked = 0
    for k in range(spec.sub_procs):
        r = results[("sub", k)]
        counts.extend(r["counts"])
        if r["latencies_ns"]:
            lat.extend(r["latencies_ns"])
    for k in range(spec.pub_procs):
        acked += sum(results[("pub", k)]["acked"])
    expected = sent_total * spec.subscribers
    delivered = sum(counts)
    lost = sum(max(0, sent_total - c) for c in counts)
    dups = sum(max(0, c - sent_total) for c in counts)
    dt = t1 - t0
    out: dict[str, Any] = {
        "delivered_per_s": (d1 - d0) / dt,
        "published_per_s": (s1 - s0) / dt,
        "measured_s": dt,
        "sent": sent_total,
        "expected": expected,
        "delivered": delivered,
        "lost": lost,
        "duplicates": dups,
        **cpu,
    }
    if spec.qos:
        out["pubacks"] = acked
        out["pubacks_missing"] = max(0, sent_total - acked)
    if spec.timestamps:
        lat.sort()
        out["latency_samples"] = len(lat)
        out["p50_ms"] = _percentile(lat, 50) / 1e6
        out["p90_ms"] = _percentile(lat, 90) / 1e6
        out["p99_ms"] = _percentile(lat, 99) / 1e6
        out["max_ms"] = (lat[-1] / 1e6) if lat else float("nan")
    return out


# --------------------------------------------------------------------------------------
# idle connections
# --------------------------------------------------------------------------------------


# Source ports for the idle-connection clients are chosen by the generator: letting
# connect() pick an ephemeral port costs a scan over all ports in use, which with ~19,000
# connections to one destination makes connect() take ~0.4 ms of kernel time each.
SRC_PORT_LO, SRC_PORT_HI = 10_000, 65_000


def _conn_main(
    sh: _Shared,
    pidx: int,
    host: str,
    port: int,
    n: int,
    concurrency: int,
    core: int,
    run_id: str,
    deadline_s: float,
    nprocs: int,
    keepalive: int = 0,
) -> None:
    pin_to_core(core)
    limit = raise_nofile()
    if limit < n + 64:
        raise LoadError(f"RLIMIT_NOFILE {limit} too low for {n} connections in one process")
    span = (SRC_PORT_HI - SRC_PORT_LO) // nprocs
    lo = SRC_PORT_LO + pidx * span
    src_port = lo + random.randrange(span)
    src_host = host if host.startswith("127.") else ""
    sh.q.put(("ready", "conn", pidx, None))
    state = sh.state
    while state.value == ST_SETUP:
        time.sleep(0.001)
    if state.value != ST_RUN:
        return
    t_start = time.monotonic()
    deadline = t_start + deadline_s
    sel = selectors.DefaultSelector()
    socks: list[socket.socket] = []
    inbuf: dict[int, bytes] = {}
    opened = acked = failed = 0
    errors: dict[str, int] = {}

    def err(name: str) -> None:
        errors[name] = errors.get(name, 0) + 1

    connected = sh.delivered  # reused: per-process CONNACK count
    while acked + failed < n and time.monotonic() < deadline and state.value == ST_RUN:
        while opened < n and (opened - acked - failed) < concurrency:
            for _attempt in range(64):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                for _ in range(span):
                    src_port = src_port + 1 if src_port + 1 < lo + span else lo
                    try:
                        s.bind((src_host, src_port))
                        break
                    except OSError:
                        continue
                rc = s.connect_ex((host, port))
                if rc != errno.EADDRNOTAVAIL:  # that 4-tuple is still in TIME_WAIT: next port
                    break
                s.close()
            cid = f"bi-{run_id}-{pidx}-{opened}"
            opened += 1
            if rc not in (0, errno.EINPROGRESS):
                failed += 1
                err(os.strerror(rc))
                s.close()
                continue
            socks.append(s)
            sel.register(s, _EVW, cid)
        for key, ev in sel.select(0.5):
            s = key.fileobj
            if ev & _EVW:
                e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if e:
                    failed += 1
                    err(os.strerror(e))
                    sel.unregister(s)
                    continue
                s.send(connect_packet(key.data, keepalive))
                sel.modify(s, _EVR, key.data)
            elif ev & _EVR:
                try:
                    data = s.recv(64)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    data = b""
                    err(type(exc).__name__)
                fd = s.fileno()
                data = inbuf.pop(fd, b"") + data
                if not data:
                    failed += 1
                    sel.unregister(s)
                    continue
                if len(data) < 4:
                    inbuf[fd] = data
                    continue
                sel.unregister(s)
                if data[0] >> 4 == 2 and data[3] == 0:
                    acked += 1
                    connected[pidx] = acked
                else:
                    failed += 1
                    err("CONNACK refused")
    elapsed = time.monotonic() - t_start
    sh.sub_min[pidx] = failed
    sh.pub_done[pidx] = 1
    sh.q.put(
        (
            "result",
            "conn",
            pidx,
            {"acked": acked, "failed": failed, "elapsed": elapsed, "errors": errors},
        )
    )
    while state.value < ST_DONE:
        time.sleep(0.05)
    # DISCONNECT and let the broker close first (its side keeps the TIME_WAIT), briefly
    for s in socks:
        with contextlib.suppress(OSError, ValueError):
            s.send(DISCONNECT)
            sel.register(s, _EVR)
    end = time.monotonic() + 3.0
    while sel.get_map() and time.monotonic() < end:
        for key, _ in sel.select(0.1):
            with contextlib.suppress(OSError):
                if key.fileobj.recv(64):
                    continue
            sel.unregister(key.fileobj)
    for s in socks:
        s.close()


def run_connections(
    host: str,
    port: int,
    total: int,
    procs: int = 4,
    concurrency: int = 24,
    core: int = GEN_CORE,
    timeout: float = 120.0,
    on_connected: Any = None,
    keepalive: int = 0,
) -> dict[str, Any]:
    """Open ``total`` MQTT connections (CONNECT/CONNACK with ``keepalive`` seconds) and hold
    them idle.

    ``concurrency`` is the number of CONNECTs in progress per process.  When all are up,
    ``on_connected()`` is called (e.g. to sample broker memory) and its return value is
    stored under "measure"; then all connections are closed."""
    ctx = mp.get_context("fork")
    spec = LoadSpec(pub_procs=procs, sub_procs=procs, subscribers=procs)
    sh = _Shared(ctx, spec)
    run_id = uuid.uuid4().hex[:8]
    pin_to_core(core)
    plist: list[Any] = []
    results: dict[tuple[str, int], Any] = {}
    out: dict[str, Any] = {}
    try:
        for k, (_, cnt) in enumerate(_split(total, procs)):
            p = ctx.Process(
                target=_child,
                args=(
                    _conn_main,
                    sh,
                    "conn",
                    k,
                    host,
                    port,
                    cnt,
                    concurrency,
                    core,
                    run_id,
                    timeout,
                    min(procs, total),
                    keepalive,
                ),
            )
            p.daemon = True
            p.start()
            plist.append(p)
        nprocs = len(plist)
        _wait_msgs(sh, "ready", nprocs, 30.0, results)
        t0 = time.monotonic()
        sh.state.value = ST_RUN
        t_all = None
        while time.monotonic() - t0 < timeout + 5:
            if sum(sh.delivered[:nprocs]) >= total and t_all is None:
                t_all = time.monotonic() - t0
            if all(sh.pub_done[:nprocs]):
                break
            if sh.state.value == ST_ABORT:
                break
            time.sleep(0.002)
        _wait_msgs(sh, "result", nprocs, 10.0, results)
        acked = sum(results[("conn", k)]["acked"] for k in range(nprocs))
        failed = sum(results[("conn", k)]["failed"] for k in range(nprocs))
        errors: dict[str, int] = {}
        for k in range(nprocs):
            for e, c in results[("conn", k)]["errors"].items():
                errors[e] = errors.get(e, 0) + c
        if t_all is None:
            t_all = max(results[("conn", k)]["elapsed"] for k in range(nprocs))
        out = {
            "connections": acked,
            "failed": failed,
            "errors": errors,
            "connect_s": t_all,
            "connects_per_s": acked / t_all if t_all else float("nan"),
        }
        if on_connected is not None:
            out["measure"] = on_connected()
        sh.state.value = ST_DONE
    finally:
        _stop_children(sh, plist, grace=15)
    return out


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------

SCENARIO_SPECS: dict[str, dict[str, Any]] = {
    "qos0": {"qos": 0},
    "qos1": {"qos": 1},
    "qos1p": {"qos": 1, "persistent": True},
    "fanout": {"qos": 0, "subscribers": 50},
    "fanin": {"qos": 0, "publishers": 50, "topic_mode": "per-pub"},
    "latency": {"qos": 0, "rate": 2000.0, "timestamps": True},
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="MQTT 3.1.1 load generator (prints JSON)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pub-port", type=int, default=0, help="publishers connect here (a cluster)")
    ap.add_argument("--scenario", choices=[*SCENARIO_SPECS, "conns"], default="qos0")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--qos", type=int, choices=[0, 1])
    ap.add_argument("--publishers", type=int)
    ap.add_argument("--subscribers", type=int)
    ap.add_argument("--payload", type=int)
    ap.add_argument("--window", type=int)
    ap.add_argument("--inflight", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--rate", type=float)
    ap.add_argument("--pub-procs", type=int)
    ap.add_argument("--sub-procs", type=int)
    ap.add_argument(
        "--persistent",
        action="store_true",
        default=None,
        help="subscribers connect with clean session 0",
    )
    ap.add_argument("--connections", type=int, default=19_000, help="conns scenario")
    ap.add_argument("--conn-procs", type=int, default=4, help="conns scenario")
    ap.add_argument("--conn-concurrency", type=int, default=24, help="conns scenario")
    ap.add_argument("--hold", type=float, default=0.0, help="conns: seconds to hold idle")
    a = ap.parse_args(argv)
    if a.scenario == "conns":
        res = run_connections(
            a.host,
            a.port,
            a.connections,
            a.conn_procs,
            a.conn_concurrency,
            on_connected=(lambda: time.sleep(a.hold)) if a.hold else None,
        )
    else:
        kw = dict(SCENARIO_SPECS[a.scenario])
        for name in (
            "qos",
            "publishers",
            "subscribers",
            "payload",
            "window",
            "inflight",
            "batch",
            "rate",
            "pub_procs",
            "sub_procs",
            "persistent",
        ):
            v = getattr(a, name)
            if v is not None:
                kw[name] = v
        spec = LoadSpec(host=a.host, port=a.port, pub_port=a.pub_port, duration=a.duration,
                        warmup=a.warmup, **kw)
        res = run_load(spec)
        res["spec"] = asdict(spec)
    json.dump(res, sys.stdout, indent=2, default=str)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
