"""A stopped node leaves nothing behind in its process: no task on the event loop, no open
port. One node in this process with its servers (MQTT listener, cluster transport and TCP
health check, REST API, control center), a client connected and subscribed, then
``HiveNode.stop``: an embedding application (or a test) that
runs a node in its own loop gets that loop back as it was."""

from __future__ import annotations

import asyncio
import socket
import tempfile
from pathlib import Path

import anyio
import pytest

from hive_core.admin import hash_password
from hive_core.config import parse_config
from hive_core.node import HiveNode
from hive_core.testing import free_port

pytestmark = pytest.mark.timeout(60)


def config(mqtt: int, cluster: int, rest: int, control: int) -> str:
    hashed = hash_password("stop-test", "pbkdf2-sha256")
    return f"""<hivemq>
  <listeners><tcp-listener><port>{mqtt}</port><bind-address>127.0.0.1</bind-address>
  </tcp-listener></listeners>
  <rest-api><enabled>true</enabled><listeners><http><port>{rest}</port>
    <bind-address>127.0.0.1</bind-address></http></listeners></rest-api>
  <control-center><enabled>true</enabled><listeners><http><port>{control}</port>
    <bind-address>127.0.0.1</bind-address></http></listeners>
    <users><user><name>ops</name><password-hash>{hashed}</password-hash></user></users>
  </control-center>
  <cluster><enabled>true</enabled>
    <transport><tcp><bind-address>127.0.0.1</bind-address><bind-port>{cluster}</bind-port>
    </tcp></transport>
    <discovery><static><node><host>127.0.0.1</host><port>{cluster}</port></node></static>
    </discovery>
  </cluster>
</hivemq>"""


def refused(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_stopped_node_leaves_no_task_and_no_open_port_behind() -> None:
    ports = [free_port() for _ in range(4)]
    mqtt = ports[0]

    async def main() -> None:
        node = HiveNode(parse_config(config(*ports)), Path(tempfile.mkdtemp()) / "data",
                        load_installed=False)
        before = asyncio.all_tasks()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(node.run)
            with anyio.fail_after(20):
                while node.broker is None or not node.listeners or node.cluster is None:
                    await anyio.sleep(0.05)
            reader, writer = await asyncio.open_connection("127.0.0.1", mqtt)
            # CONNECT (MQTT 3.1.1, persistent session "c"), then SUBSCRIBE "t/#" at QoS 1
            writer.write(bytes([0x10, 13, 0, 4]) + b"MQTT" + bytes([4, 0, 0, 60, 0, 1]) + b"c")
            writer.write(bytes([0x82, 8, 0, 1, 0, 3]) + b"t/#" + bytes([1]))
            assert (await reader.readexactly(4))[:2] == bytes([0x20, 2])  # CONNACK
            assert (await reader.readexactly(5))[0] == 0x90  # SUBACK
            assert not any(refused(port) for port in ports)
            node.stop()
        assert await reader.read() == b""  # the node closed the client's connection
        writer.close()
        await asyncio.sleep(0.1)  # the client's own transport closes
        left = asyncio.all_tasks() - before - {asyncio.current_task()}
        assert not left, f"tasks left after the node stopped: {left}"
        assert all(refused(port) for port in ports), "a port still takes connections"

    asyncio.run(main())
