"""Start N real `hive run` nodes that list each other statically, and ask them over REST.

    nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    metrics(nodes[1])["cluster"]["frames_in"]

Import it as ``from cluster._nodes import ...`` (tests/ is on sys.path).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from conftest import HiveProcess, free_port

__all__ = ["MosquittoSub", "cluster_nodes", "get", "metrics", "remote_filters",
           "start_cluster", "wait_for", "wait_for_members", "wait_for_route"]

HEARTBEAT = (500, 2000)  # ms: short, so a lost node is noticed within a test's time


def cluster_body(own_port: int, all_ports: Iterable[int], rest_port: int,
                 heartbeat: tuple[int, int] = HEARTBEAT, extra: str = "") -> str:
    nodes = "".join(f"<node><host>127.0.0.1</host><port>{p}</port></node>" for p in all_ports)
    interval, timeout = heartbeat
    return (
        "<cluster><enabled>true</enabled>"
        f"<transport><tcp><bind-address>127.0.0.1</bind-address><bind-port>{own_port}"
        "</bind-port></tcp></transport>"
        f"<discovery><static>{nodes}</static></discovery>"
        "<failure-detection><heartbeat><interval>"
        f"{interval}</interval><timeout>{timeout}</timeout></heartbeat></failure-detection>"
        "</cluster>"
        "<rest-api><enabled>true</enabled><listeners><http>"
        f"<port>{rest_port}</port><bind-address>127.0.0.1</bind-address>"
        f"</http></listeners></rest-api>{extra}"
        "<persistence><mode>in-memory</mode></persistence>"
    )


def distinct_free_ports(count: int) -> list[int]:
    """``count`` free loopback ports, no two alike."""
    return [free_port() for _ in range(count)]


def start_cluster(hive_factory: Callable[..., HiveProcess], count: int,
                  order: Iterable[int] | None = None,
                  heartbeat: tuple[int, int] = HEARTBEAT,
                  listeners: Callable[[int], str] | None = None) -> list[HiveProcess]:
    """``count`` nodes on free loopback ports, each listing all; started in ``order``.

    ``listeners(port)``, when given, is each node's ``<listeners>`` content for its MQTT port.
    """
    ports = distinct_free_ports(3 * count)
    cluster_ports, mqtt_ports, rest_ports = ports[:count], ports[count:-count], ports[-count:]
    nodes = [hive_factory(body=cluster_body(port, cluster_ports, rest, heartbeat),
                          listeners=listeners(mqtt) if listeners is not None else None,
                          port=mqtt, start=False, cluster=port, rest=rest)
             for port, mqtt, rest in zip(cluster_ports, mqtt_ports, rest_ports, strict=True)]
    for index in order if order is not None else range(count):
        nodes[index].start()
    return nodes


def get(node: HiveProcess, path: str, timeout: float = 5.0) -> Any:
    url = f"http://127.0.0.1:{node.ports['rest']}{path}"
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def cluster_nodes(node: HiveProcess) -> list[dict[str, Any]]:
    return list(get(node, "/api/v1/cluster/nodes")["items"])


def metrics(node: HiveProcess) -> dict[str, Any]:
    return dict(get(node, "/api/v1/metrics"))


def node_id(node: HiveProcess) -> str:
    return (node.data_dir / "node-id").read_text().strip()


def remote_filters(node: HiveProcess) -> dict[str, list[str]]:
    return dict(metrics(node)["cluster"]["remote_filters"])


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``check`` until true; the seconds it took. Fails with ``what`` after ``timeout``."""
    begun = time.monotonic()
    while time.monotonic() - begun < timeout:
        if check():
            return time.monotonic() - begun
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def wait_for_members(nodes: Iterable[HiveProcess], count: int, timeout: float = 10.0) -> None:
    for node in nodes:
        wait_for(lambda n=node: len(cluster_nodes(n)) == count, timeout,  # type: ignore[misc]
                 f"{node.folder.name} sees {count} members")


def wait_for_route(publisher_node: HiveProcess, subscriber_node: HiveProcess,
                   topic_filter: str, timeout: float = 5.0) -> None:
    """Until the publisher's node knows the subscriber's node wants ``topic_filter``."""
    peer = node_id(subscriber_node)
    wait_for(lambda: topic_filter in remote_filters(publisher_node).get(peer, []), timeout,
             f"{publisher_node.folder.name} routes {topic_filter} to "
             f"{subscriber_node.folder.name}")


class MosquittoSub:
    """mosquitto_sub in the background, printing topic and payload per line (-v)."""

    def __init__(self, port: int, topic: str, qos: int = 1, count: int | None = None) -> None:
        # stdbuf: piped, mosquitto_sub would hold its -d lines (and SUBACK) in a buffer
        args = ["stdbuf", "-oL", "mosquitto_sub", "-h", "127.0.0.1", "-p", str(port),
                "-t", topic, "-q", str(qos), "-v", "-d", "-V", "mqttv311"]
        if count is not None:
            args += ["-C", str(count)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        self.subscribed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        assert self.subscribed.wait(5.0), f"mosquitto_sub got no SUBACK: {self.lines}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if "received SUBACK" in line:
                self.subscribed.set()
            elif not line.startswith(("Client ", "Subscribed (mid")):  # -d chatter
                self.lines.append(line)

    def messages(self) -> list[str]:
        if self.proc.poll() is not None:  # exited: its last lines may still be in the pipe
            self._reader.join(5.0)
        return list(self.lines)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self._reader.join(2)
