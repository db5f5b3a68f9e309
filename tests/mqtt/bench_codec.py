"""Micro-benchmark of the PUBLISH hot path: `python tests/mqtt/bench_codec.py`.

Prints packets per CPU second for decoding (PacketDecoder.feed, 1000 packets a call) and encoding
(encode_publish) of a QoS 0 PUBLISH with a 32 byte payload, in MQTT 3.1.1 and 5.0.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hive_core.mqtt import PacketDecoder, encode_publish

PAYLOAD = b"x" * 32
TOPIC = "sensors/building-1/floor-2/temperature"
BATCH = 1000


def rate(run: Callable[[], object], packets_per_run: int, seconds: float = 1.0) -> float:
    best = 0.0
    for _ in range(3):
        runs = 0
        start = time.process_time()
        while (elapsed := time.process_time() - start) < seconds / 3:
            run()
            runs += 1
        best = max(best, runs * packets_per_run / elapsed)
    return best


def main() -> None:
    for version in (4, 5):
        packet = encode_publish(TOPIC, PAYLOAD, 0, False, False, None, None, version)
        stream = packet * BATCH
        decoder = PacketDecoder(version)
        assert len(decoder.feed(stream)) == BATCH

        def decode(decoder: PacketDecoder = decoder, stream: bytes = stream) -> object:
            return decoder.feed(stream)

        def encode(version: int = version) -> object:
            for _ in range(BATCH):
                encode_publish(TOPIC, PAYLOAD, 0, False, False, None, None, version)
            return None

        print(
            f"MQTT {'5.0' if version == 5 else '3.1.1'} QoS 0 PUBLISH ({len(packet)} bytes): "
            f"decode {rate(decode, BATCH):,.0f}/s, encode {rate(encode, BATCH):,.0f}/s"
        )


if __name__ == "__main__":
    main()
