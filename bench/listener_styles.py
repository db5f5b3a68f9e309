"""Why the MQTT hot path keeps asyncio protocols: the same broker behind two listener styles.

Runs a Hive broker in this process behind either

- ``protocol``: asyncio ``create_server`` with Hive's own ``ClientConnection`` (what ``hive run``
  uses: the loop calls the channel for each read; the broker's batched flush writes with the
  transport's synchronous ``write``), or
- ``streams``: ``anyio.create_tcp_listener`` with one task per connection reading
  ``await stream.receive()`` into the same channel, and a writer task per connection draining
  what the broker's flush queued (anyio streams have no synchronous write),

then measures with ``bench/loadgen.py`` on the other core: QoS 0 1 -> 1 and fan-in 50 -> 1
throughput, p50 latency at 2,000 msg/s, and memory per idle connection. Both styles run in the
same invocation, alternating, so the ratio is what counts. This is a measurement script
for ``docs/architecture.md``, not part of the broker; it imports ``hive_core`` on purpose.

    .venv/bin/python bench/listener_styles.py --rounds 3 --duration 5
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(style: str, port: int) -> None:
    """The broker process: serve on ``port`` in ``style`` until killed."""
    import anyio
    from anyio.abc import SocketStream

    from hive_core.broker import Broker, BrokerSettings, Channel, ClientConnection
    from hive_core.persistence import MemorySessionStore, Snapshot

    async def main() -> None:
        broker = Broker(BrokerSettings(max_queue_size=100_000), MemorySessionStore())
        broker.start(Snapshot())
        if style == "protocol":
            import asyncio

            loop = asyncio.get_running_loop()
            server = await loop.create_server(lambda: ClientConnection(broker), "127.0.0.1",
                                              port, backlog=4096)
            print("ready", flush=True)
            async with server:
                await server.serve_forever()
            return

        class StreamIo:
            """A channel's io over an anyio stream: writes queue for a writer task."""

            def __init__(self, stream: SocketStream) -> None:
                self.stream = stream
                self.send, self.receive = anyio.create_memory_object_stream[bytes](10_000)

            def write(self, data: bytes) -> None:
                self.send.send_nowait(data)

            def close(self) -> None:
                self.send.close()

            def get_extra_info(self, name: str, default: Any = None) -> Any:
                return default

            def arm_deadline(self, seconds: float) -> None:
                pass  # keep-alive timers are not what this measures

        async def handle(stream: SocketStream) -> None:
            io = StreamIo(stream)
            channel = Channel(broker, io)

            async def writer() -> None:
                async with io.receive:
                    async for data in io.receive:
                        await stream.send(data)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(writer)
                try:
                    while True:
                        channel.receive_data(await stream.receive(65536))
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    channel.connection_lost()
                io.send.close()

        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
        print("ready", flush=True)
        await listener.serve(handle)

    anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def measure(style: str, scenario: str, duration: float, warmup: float,
            connections: int) -> float:
    """One figure: msg/s (qos0, fanin), p50 ms (latency) or KiB per idle connection (conns)."""
    sys.path.insert(0, str(HERE))
    import loadgen

    port = free_port()
    broker = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, __file__, "--serve", style, "--port", str(port)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert broker.stdout is not None
        assert broker.stdout.readline().strip() == "ready"
        if scenario == "conns":
            before = rss_kib(broker.pid)

            def after() -> int:
                time.sleep(1.0)
                return rss_kib(broker.pid)

            result = loadgen.run_connections("127.0.0.1", port, connections,
                                             on_connected=after)
            return (int(result["measure"]) - before) / result["connections"]
        spec = loadgen.LoadSpec(host="127.0.0.1", port=port, duration=duration, warmup=warmup,
                                **loadgen.SCENARIO_SPECS[scenario])
        result = loadgen.run_load(spec)
        if scenario == "latency":
            return float(result["p50_ms"])
        return float(result["delivered_per_s"])
    finally:
        broker.kill()
        broker.wait()


UNITS = {"qos0": "msg/s", "fanin": "msg/s", "latency": "ms p50", "conns": "KiB/conn"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", choices=("protocol", "streams"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--scenarios", default="qos0,fanin,latency,conns")
    parser.add_argument("--connections", type=int, default=5000)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return 0
    print("| scenario | unit | protocol | streams | streams/protocol |")
    print("|---|---|---|---|---|")
    for scenario in args.scenarios.split(","):
        figures: dict[str, list[float]] = {"protocol": [], "streams": []}
        for _ in range(args.rounds):
            for style in figures:
                figures[style].append(measure(style, scenario, args.duration, args.warmup,
                                              args.connections))
                time.sleep(0.5)
        medians = {style: statistics.median(values) for style, values in figures.items()}
        print(f"| {scenario} | {UNITS[scenario]} | {medians['protocol']:,.2f} | "
              f"{medians['streams']:,.2f} | {medians['streams'] / medians['protocol']:.2f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
