"""The chaos run's partitions: iptables on loopback cut one node's cluster and health-check
ports off from the other nodes, while its MQTT clients stay connected to it, and leave no rule
behind."""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest
from e2e._session_helpers import PahoClient

from chaos._cluster import Firewall, make_nodes, members


def until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.2)


def chaos_rules() -> list[str]:
    """The rules and chains of this process's firewalls."""
    lines = []
    for table in ("filter", "mangle"):
        listing = subprocess.run(["iptables", "-w", "5", "-t", table, "-S"], capture_output=True,
                                 text=True, timeout=20, check=True).stdout
        lines += [line for line in listing.splitlines()
                  if f"hive-chaos-{os.getpid()}" in line or f"HIVECHAOS{os.getpid()}" in line]
    return lines


@pytest.mark.timeout(120)
def test_a_cut_off_node_loses_its_peers_and_keeps_its_clients(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path, 3, random.Random())
    isolated, others = nodes[0], nodes[1:]
    firewall = Firewall(nodes).open()
    clients: list[PahoClient] = []
    try:
        for node in nodes:
            node.start(60.0)
        until(lambda: all(members(n) == 3 for n in nodes), 30, "three members")
        subscriber = PahoClient(isolated.port, "watcher").connect()
        clients.append(subscriber)
        subscriber.subscribe("cut/#", qos=0)
        publisher = PahoClient(isolated.port, "talker").connect()
        clients.append(publisher)
        firewall.isolate(isolated)
        until(lambda: members(isolated) == 1 and all(members(n) == 2 for n in others), 30,
              "the cut-off node alone, the other two together")
        publisher.publish("cut/here", b"still served", qos=0)
        assert subscriber.next_message(5).payload == b"still served"
        assert not subscriber.disconnected.is_set() and not publisher.disconnected.is_set()
        firewall.heal()
        until(lambda: all(members(n) == 3 for n in nodes), 30, "three members after the heal")
    finally:
        for client in clients:
            client.client.disconnect()
            client.client.loop_stop()
        for node in nodes:
            node.kill()
            node.stop()
        firewall.close()
    assert chaos_rules() == []
