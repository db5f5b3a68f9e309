"""A flood of QoS 1 PUBLISHes from many MQTT 3.1.1 connections, as a process of its own.

``python _flood.py HOST:PORT[,HOST:PORT...] PUBLISHERS SECONDS TOPIC_PREFIX [WINDOW] [SIZE] [QOS]``

Each publisher connects (round robin over the addresses), keeps ``WINDOW`` messages waiting for
their PUBACK, and sends for ``SECONDS``; then it waits (10 s at most) for the PUBACKs still due
and disconnects. The payload of each message is ``<publisher>:<serial>:`` padded to ``SIZE``
bytes. With QOS 0 each publisher writes as fast as its socket takes (nothing is acknowledged,
nothing listed). On stdout, one JSON object: ``{"sent": {publisher: count}, "acked": {publisher:
[serials]}}``: a serial is listed once its PUBACK arrived, i.e. once the broker took
responsibility for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time


def _remaining_length(size: int) -> bytes:
    out = bytearray()
    while True:
        byte = size % 128
        size //= 128
        out.append(byte | 0x80 if size else byte)
        if not size:
            return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw


def _connect(client_id: str) -> bytes:
    body = _string("MQTT") + bytes([4, 0x02]) + (60).to_bytes(2, "big") + _string(client_id)
    return b"\x10" + _remaining_length(len(body)) + body


def _publish(topic: bytes, packet_id: int, payload: bytes) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + packet_id.to_bytes(2, "big") + payload
    return b"\x32" + _remaining_length(len(body)) + body


def _publish_qos0(topic: bytes, payload: bytes) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + payload
    return b"\x30" + _remaining_length(len(body)) + body


async def publisher(number: int, host: str, port: int, topic: str, seconds: float, window: int,
                    size: int, acked: list[int], qos: int = 1) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(_connect(f"flood-{topic.replace('/', '-')}-{number}"))
    connack = await asyncio.wait_for(reader.readexactly(4), 30)
    assert connack[0] == 0x20 and connack[3] == 0, connack
    topic_raw = f"{topic}/{number}".encode()
    if qos == 0:
        return await _flood_qos0(writer, topic_raw, number, seconds, size)
    inflight: dict[int, int] = {}  # packet id: serial
    room = asyncio.Event()
    room.set()
    done = False

    async def read_acks() -> None:
        buffer = b""
        while True:
            data = await reader.read(65536)
            if not data:
                return
            buffer += data
            at = 0
            while len(buffer) - at >= 4:
                if buffer[at] != 0x40:
                    raise AssertionError(f"unexpected packet {buffer[at]:#x}")
                packet_id = int.from_bytes(buffer[at + 2:at + 4], "big")
                serial = inflight.pop(packet_id, None)
                if serial is not None:
                    acked.append(serial)
                at += 4
            buffer = buffer[at:]
            room.set()
            if done and not inflight:
                return

    acks = asyncio.create_task(read_acks())
    serial = 0
    packet_id = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if len(inflight) >= window:
            room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(room.wait(), 0.5)
            continue
        batch = []
        while len(inflight) < window:
            serial += 1
            packet_id = packet_id % 65535 + 1
            while packet_id in inflight:
                packet_id = packet_id % 65535 + 1
            inflight[packet_id] = serial
            payload = f"{number}:{serial}:".encode().ljust(size, b"x")
            batch.append(_publish(topic_raw, packet_id, payload))
        writer.write(b"".join(batch))
        await writer.drain()
    done = True
    if inflight:
        try:
            await asyncio.wait_for(acks, 15)
        except TimeoutError:
            acks.cancel()
    else:
        acks.cancel()
    writer.write(b"\xe0\x00")
    writer.close()
    return serial


async def _flood_qos0(writer: asyncio.StreamWriter, topic_raw: bytes, number: int,
                      seconds: float, size: int) -> int:
    serial = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        batch = []
        for _ in range(100):
            serial += 1
            batch.append(_publish_qos0(topic_raw, f"{number}:{serial}:".encode().ljust(size, b"x")))
        writer.write(b"".join(batch))
        if not await _drained(writer, until):
            writer.transport.abort()  # the node reads it too slowly to end on time
            return serial
    writer.write(b"\xe0\x00")
    writer.close()
    return serial


async def _drained(writer: asyncio.StreamWriter, until: float) -> bool:
    """Whether what was written left before ``until``: a node that holds a flooder back may
    not read it for longer than the flood lasts, and the flood ends on time all the same."""
    try:
        await asyncio.wait_for(writer.drain(), max(0.05, until - time.monotonic()))
    except TimeoutError:
        return False
    return True


async def main() -> None:
    addresses = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in sys.argv[1].split(",")]
    publishers, seconds, topic = int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    window = int(sys.argv[5]) if len(sys.argv) > 5 else 50
    size = int(sys.argv[6]) if len(sys.argv) > 6 else 64
    qos = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    acked: dict[int, list[int]] = {n: [] for n in range(publishers)}
    sent = await asyncio.gather(*(
        publisher(n, *addresses[n % len(addresses)], topic, seconds, window, size, acked[n], qos)
        for n in range(publishers)), return_exceptions=True)
    print(json.dumps({"sent": {n: s if isinstance(s, int) else repr(s)
                               for n, s in enumerate(sent)},
                      "acked": acked}))


if __name__ == "__main__":
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
