"""``hive-device-publisher``: a device publishing its temperature, once every interval."""

from __future__ import annotations

import argparse
import json
import sys
import time

from hive_device_scripts import _common


def reading(device_id: str) -> bytes:
    temperature = round(25.5 + (time.time() % 5), 2)  # a sensor that drifts by a few degrees
    return json.dumps({"device_id": device_id, "temperature": temperature,
                       "timestamp": round(time.time(), 3)}).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hive-device-publisher",
        description="Publish a temperature reading every INTERVAL seconds to "
                    "sensors/<device-id>/temperature.")
    _common.add_connection_options(parser)
    parser.add_argument("--device-id", default="device-123", help="default: device-123")
    parser.add_argument("--count", type=int, default=0,
                        help="readings to publish, then stop (default: 0, forever)")
    parser.add_argument("--interval", type=_common.positive_float, default=1.0, metavar="SECONDS",
                        help="seconds between readings (default: 1)")
    args = parser.parse_args(argv)

    client = _common.new_client(args, client_id=args.device_id)
    if not _common.connect(client, args):
        return 1
    topic = _common.TOPIC.format(device=args.device_id)
    sent = 0
    with _common.until_done_or_interrupted(client):
        while args.count == 0 or sent < args.count:
            payload = reading(args.device_id)
            info = client.publish(topic, payload, qos=args.qos)
            info.wait_for_publish(args.connect_timeout)
            if not info.is_published():
                print(f"no acknowledgement for the reading to {topic}", file=sys.stderr)
                return 1
            sent += 1
            print(f"Published to {topic}: {payload.decode()}", flush=True)
            if args.count == 0 or sent < args.count:
                time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
