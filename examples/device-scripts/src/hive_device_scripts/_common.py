"""What the two scripts share: the topic, the connection options, connecting with a deadline."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Iterator

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode

TOPIC = "sensors/{device}/temperature"
PROTOCOLS = {"3.1.1": mqtt.MQTTv311, "5": mqtt.MQTTv5}


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="localhost", help="broker host (default: localhost)")
    parser.add_argument("--port", type=int, default=1883, help="broker port (default: 1883)")
    parser.add_argument("--qos", type=int, choices=(0, 1, 2), default=1,
                        help="MQTT quality of service (default: 1)")
    parser.add_argument("--mqtt", choices=sorted(PROTOCOLS), default="5",
                        help="MQTT version (default: 5)")
    parser.add_argument("--username", help="user name, if the broker asks for one")
    parser.add_argument("--password", help="password for --username")
    parser.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="give up when the broker does not answer CONNECT in time")


def positive_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def new_client(args: argparse.Namespace, client_id: str) -> mqtt.Client:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=PROTOCOLS[args.mqtt])
    if args.username is not None:
        client.username_pw_set(args.username, args.password)
    return client


def connect(client: mqtt.Client, args: argparse.Namespace) -> bool:
    """Connect and start the network thread; False (after saying why on stderr) if refused."""
    answered = threading.Event()
    outcome: list[str] = []

    def on_connect(_client: mqtt.Client, _userdata: object, _flags: object,
                   reason_code: ReasonCode, _properties: object) -> None:
        if reason_code.is_failure and not outcome:
            outcome.append(f"refused: {reason_code}")
        answered.set()

    previous = client.on_connect
    client.on_connect = on_connect
    try:
        client.connect(args.host, args.port, keepalive=60)
    except OSError as exc:
        print(f"cannot connect to {args.host}:{args.port}: {exc}", file=sys.stderr)
        return False
    client.loop_start()
    if not answered.wait(args.connect_timeout):
        outcome.append(f"no CONNACK within {args.connect_timeout} s")
    if outcome:
        print(f"cannot connect to {args.host}:{args.port}: {outcome[0]}", file=sys.stderr)
        client.loop_stop()
        return False
    client.on_connect = previous
    return True


@contextlib.contextmanager
def until_done_or_interrupted(client: mqtt.Client) -> Iterator[None]:
    """Run the body until it ends or Ctrl-C stops it; then disconnect ``client`` and stop its
    network thread."""
    try:
        yield
    except KeyboardInterrupt:
        pass
    finally:
        client.disconnect()
        client.loop_stop()
