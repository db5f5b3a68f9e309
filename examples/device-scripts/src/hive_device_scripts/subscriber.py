"""``hive-device-subscriber``: print the readings of one device, or of all (``--device-id +``)."""

from __future__ import annotations

import argparse
import queue
import sys
import time

import paho.mqtt.client as mqtt
from paho.mqtt.reasoncodes import ReasonCode

from hive_device_scripts import _common


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hive-device-subscriber",
        description="Print the readings published to sensors/<device-id>/temperature.")
    _common.add_connection_options(parser)
    parser.add_argument("--device-id", default="+", help="one device, or + for all (default)")
    parser.add_argument("--count", type=int, default=0,
                        help="stop after this many readings (default: 0, never)")
    parser.add_argument("--timeout", type=_common.positive_float, default=0.0, metavar="SECONDS",
                        help="stop after this long; exit status 1 if --count readings "
                             "did not come (default: 0, never)")
    parser.add_argument("--client-id", default="", help="default: one the broker assigns")
    args = parser.parse_args(argv)

    topic_filter = _common.TOPIC.format(device=args.device_id)
    readings: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
    client = _common.new_client(args, client_id=args.client_id)

    def on_connect(client: mqtt.Client, _userdata: object, _flags: object,
                   reason_code: ReasonCode, _properties: object) -> None:
        if not reason_code.is_failure:  # again after every reconnect
            client.subscribe(topic_filter, qos=args.qos)

    def on_subscribe(_client: mqtt.Client, _userdata: object, _mid: int,
                     reason_codes: list[ReasonCode], _properties: object) -> None:
        if reason_codes[0].is_failure:
            print(f"Subscription to {topic_filter} refused: {reason_codes[0]}", file=sys.stderr,
                  flush=True)
        else:
            print(f"Subscribed to {topic_filter}", flush=True)

    client.on_subscribe = on_subscribe
    client.on_message = lambda _client, _userdata, message: readings.put(message)
    if not _common.connect(client, args):
        return 1
    client.subscribe(topic_filter, qos=args.qos)
    client.on_connect = on_connect
    deadline = time.monotonic() + args.timeout if args.timeout else None
    received = 0
    with _common.until_done_or_interrupted(client):
        while args.count == 0 or received < args.count:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                if args.count == 0:
                    return 0  # listened as long as asked
                print(f"{received} readings within {args.timeout} s, wanted {args.count}",
                      file=sys.stderr)
                return 1
            try:
                message = readings.get(timeout=wait)
            except queue.Empty:
                continue
            received += 1
            print(f"{message.topic}: {message.payload.decode(errors='replace')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
