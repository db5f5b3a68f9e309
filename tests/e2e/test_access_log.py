"""The access log (logger ``hive.access``, INFO): a client's connect, its disconnect, a refused
connect, one line each, in the node's log. Issue 9: none of them was logged at INFO."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
from e2e.rawclient import RawClient

pytestmark = pytest.mark.timeout(60)


def test_connect_and_disconnect_are_logged(hive: Any) -> None:
    subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(hive.port), "-i", "sensor-7",
                    "-u", "alice", "-t", "t", "-m", "x", "-V", "mqttv311"],
                   check=True, timeout=10, capture_output=True)
    found = hive.wait_for_log(r"INFO  - client 'sensor-7' connected from 127\.0\.0\.1:(\d+) on "
                              rf"tcp-listener-{hive.port} \(MQTT 3\.1\.1, user 'alice'\)")
    assert int(found.group(1)) > 0
    hive.wait_for_log(r"INFO  - client 'sensor-7' disconnected \(it sent DISCONNECT\)")


def test_a_lost_connection_and_a_resumed_session(hive: Any) -> None:
    with RawClient(hive.port) as client:
        client.connect(5, "keeper", clean_start=False, SESSION_EXPIRY_INTERVAL=60)
    hive.wait_for_log(r"client 'keeper' connected from \S+ on \S+ \(MQTT 5\)\n")
    hive.wait_for_log(r"client 'keeper' disconnected \(connection lost or closed by the node\)")
    with RawClient(hive.port) as client:
        client.connect(5, "keeper", clean_start=False, SESSION_EXPIRY_INTERVAL=60)
        client.disconnect()
    hive.wait_for_log(r"client 'keeper' connected from \S+ on \S+ \(MQTT 5, session resumed\)")
    hive.wait_for_log(r"client 'keeper' disconnected \(it sent DISCONNECT\)")


def test_a_refused_connect_is_logged(hive_factory: Any) -> None:
    node = hive_factory(body="<restrictions><max-client-id-length>5</max-client-id-length>"
                             "</restrictions>")
    with RawClient(node.port) as client:
        assert client.connect(5, "much-too-long").reason_code == 0x85
    node.wait_for_log(re.escape("INFO  - refusing CONNECT of 'much-too-long': reason 0x85"))
    assert "client 'much-too-long' connected" not in node.log
