"""A paho-mqtt client run as its own process (inside a network namespace, for split tests).

    python _ns_client.py sub CLIENT_ID TOPIC PORT      prints "connack SP", "msg N", "gone RC"
    python _ns_client.py pub CLIENT_ID TOPIC PORT FIRST COUNT   prints "ack N", then "done"

Both use MQTT 5, QoS 1 and a persistent session (expiry 1 hour) on 127.0.0.1:PORT; a
subscriber reconnects on its own when the node closes its connection, unless told to stay away
by a session takeover (reason 0x8E: another connection with its id is the newer one).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


def say(line: str) -> None:
    print(line, flush=True)


def client(client_id: str, port: int) -> tuple[mqtt.Client, dict[str, Any]]:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                    protocol=mqtt.MQTTv5)
    c.reconnect_delay_set(0.1, 0.5)
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 3600
    return c, {"host": "127.0.0.1", "port": port, "keepalive": 30, "clean_start": False,
               "properties": props}


def subscribe(client_id: str, topic: str, port: int) -> None:
    c, connect = client(client_id, port)

    def on_connect(cl: Any, u: Any, flags: Any, reason: Any, props: Any) -> None:
        say(f"connack {int(flags.session_present)}")
        cl.subscribe(topic, 1)

    def on_disconnect(cl: Any, u: Any, flags: Any, reason: Any, props: Any) -> None:
        say(f"gone {int(reason.value)}")
        if int(reason.value) == 0x8E:
            cl.disconnect()
            sys.exit(0)

    c.on_connect = on_connect
    c.on_disconnect = on_disconnect
    c.on_message = lambda cl, u, m: say(f"msg {m.topic} {int(m.payload)}")
    c.connect(**connect)
    c.loop_forever(retry_first_connection=True)


def publish(client_id: str, topic: str, port: int, first: int, count: int) -> None:
    c, connect = client(client_id, port)
    acked = threading.Event()
    mids: dict[int, int] = {}
    done: set[int] = set()
    lock = threading.Lock()

    early: set[int] = set()  # acknowledged before publish() returned its mid

    def settle(number: int) -> None:
        done.add(number)
        say(f"ack {number}")
        if len(done) == count:
            acked.set()

    def on_publish(cl: Any, u: Any, mid: int, reason: Any, props: Any) -> None:
        if reason.is_failure:
            return
        with lock:  # paho calls this holding its own lock: never call paho holding ours
            number = mids.pop(mid, None)
            if number is None:
                early.add(mid)
            else:
                settle(number)

    c.on_publish = on_publish
    c.connect(**connect)
    c.loop_start()
    for number in range(first, first + count):
        info = c.publish(topic, str(number).encode(), 1)
        with lock:
            if info.mid in early:
                early.discard(info.mid)
                settle(number)
            else:
                mids[info.mid] = number
        time.sleep(0.005)
    acked.wait(60)
    c.disconnect()
    c.loop_stop()
    say("done")


if __name__ == "__main__":
    mode, cid, top, p = sys.argv[1:5]
    if mode == "sub":
        subscribe(cid, top, int(p))
    else:
        publish(cid, top, int(p), int(sys.argv[5]), int(sys.argv[6]))
