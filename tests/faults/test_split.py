"""A real network split: three nodes in three network namespaces on one bridge; one node's
link goes down while clients on both sides keep working, then comes back.

The merge rules (README, "Network splits") each get a client that exercises them:
- a session connected on one side and taken over on the other is kept where its client is
  connected, and what the other side queued for it meanwhile is added (no duplicates);
- a client id connected on both sides keeps the newer connection; the older gets 0x8E;
- subscriptions made on either side during the split are routed everywhere afterwards.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster._nodes import wait_for
from cluster.test_lan_namespaces import (
    HEARTBEAT,
    SECRET,
    NamespaceNodes,
    namespace_nodes,
    node_id,
)
from conftest import HiveProcess
from netns import Host, Testbed, testbed

__all__ = ["namespace_nodes", "testbed"]  # fixtures, imported for pytest

pytestmark = pytest.mark.timeout(180)
CLUSTER_PORT = 7800
CLIENT = str(Path(__file__).with_name("_ns_client.py"))


def split_body(own: str, addresses: list[str]) -> str:
    nodes = "".join(f"<node><host>{a}</host><port>{CLUSTER_PORT}</port></node>"
                    for a in addresses)
    return (f"<cluster><enabled>true</enabled><transport><tcp><bind-address>{own}"
            f"</bind-address><bind-port>{CLUSTER_PORT}</bind-port></tcp></transport>"
            f"<discovery><static>{nodes}</static></discovery>{HEARTBEAT}{SECRET}</cluster>"
            "<rest-api><enabled>true</enabled><listeners><http><port>8080</port>"
            "<bind-address>127.0.0.1</bind-address></http></listeners></rest-api>")


class NsClient:
    """A client process inside a namespace (tests/faults/_ns_client.py); its lines, read."""

    def __init__(self, host: Host, *args: str) -> None:
        self.proc = host.popen([sys.executable, CLIENT, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def count(self, prefix: str) -> int:
        return sum(1 for line in list(self.lines) if line.startswith(prefix))

    def numbers(self) -> Counter[int]:
        return Counter(int(line.rsplit(" ", 1)[1]) for line in list(self.lines)
                       if line.startswith("msg "))

    def wait(self, prefix: str, count: int = 1, timeout: float = 20.0) -> None:
        wait_for(lambda: self.count(prefix) >= count, timeout,
                 f"{count} x {prefix!r} from a client; it said {self.lines[-5:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


def publish(host: Host, topic: str, first: int, count: int) -> NsClient:
    client = NsClient(host, "pub", f"split-pub-{first}", topic, "1883", str(first), str(count))
    client.wait("done", timeout=60)
    assert client.count("ack ") == count, client.lines[-5:]
    return client


def members_seen(nodes: NamespaceNodes, node: HiveProcess) -> int:
    try:
        return len(nodes.members(node))
    except OSError:
        return -1


def metric(nodes: NamespaceNodes, node: HiveProcess, name: str) -> int:
    host = nodes.hosts[id(node)]
    return int(host.http_json(8080, "/api/v1/metrics").get("cluster", {}).get(name, 0))


@pytest.fixture
def three(testbed: Testbed, namespace_nodes: NamespaceNodes) -> Iterator[list[Any]]:
    lan = testbed.segment()
    hosts = [testbed.host(lan) for _ in range(3)]
    addresses = [h.address for h in hosts]
    nodes = [namespace_nodes.add(h, split_body(h.address, addresses)) for h in hosts]
    for node in nodes:
        node.start()
    ids = {node_id(n) for n in nodes}
    namespace_nodes.wait_members(nodes, lambda: ids, 20, "3 nodes form one cluster")
    yield [testbed, namespace_nodes, hosts, nodes]


def test_both_sides_serve_during_a_split_and_merge_after_it(three: list[Any]) -> None:
    testbed, ns, hosts, nodes = three
    a_host, b_host, c_host = hosts
    a = nodes[0]
    clients: list[NsClient] = []
    try:
        keeper = NsClient(a_host, "sub", "split-s", "split/s/#", "1883")
        older = NsClient(a_host, "sub", "split-z", "split/z/#", "1883")
        clients += [keeper, older]
        keeper.wait("connack")
        older.wait("connack")
        time.sleep(1.0)  # the sessions reach their backup

        testbed.partition(a_host)
        wait_for(lambda: members_seen(ns, a) == 1 and all(
            members_seen(ns, n) == 2 for n in nodes[1:]), 20, "the split to be noticed")
        wait_for(lambda: sum(metric(ns, n, "sessions_taken_over") for n in nodes[1:]) >= 2,
                 20, "the other side to take the sessions of the cut-off node over")

        # Both sides serve: messages for the keeper on each side, a newer connection for
        # split-z on the other side, a new subscription on each side.
        clients.append(publish(c_host, "split/s/x", 1, 50))  # queued in the other copy
        clients.append(publish(a_host, "split/s/x", 51, 50))  # delivered on the keeper's side
        newer = NsClient(b_host, "sub", "split-z", "split/z/#", "1883")
        a_side_new = NsClient(a_host, "sub", "split-anew", "split/anew/#", "1883")
        bc_side_new = NsClient(c_host, "sub", "split-bcnew", "split/bcnew/#", "1883")
        clients += [newer, a_side_new, bc_side_new]
        for client in (newer, a_side_new, bc_side_new):
            client.wait("connack")
        assert newer.lines[0] == "connack 1"  # split-z's session, taken over on this side
        keeper.wait("msg ", 50)

        testbed.heal(a_host)
        ids = {node_id(n) for n in nodes}
        ns.wait_members(nodes, lambda: ids, 30, "the sides to join again")
        wait_for(lambda: "Finished cluster merge process successfully." in a.log, 20,
                 "the merge")

        keeper.wait("msg ", 100, timeout=30)  # the other side's 50 are added, once each
        older.wait("gone 142")  # 0x8E: the newer connection on the other side keeps the id
        time.sleep(1.0)
        assert newer.proc.poll() is None and newer.count("gone") == 0, newer.lines[-5:]
        clients.append(publish(c_host, "split/anew/x", 1001, 1))
        clients.append(publish(a_host, "split/bcnew/x", 2001, 1))
        a_side_new.wait("msg ")
        bc_side_new.wait("msg ")
        received = keeper.numbers()
        duplicated = sum(n - 1 for n in received.values())
        lost = sorted(set(range(1, 101)) - set(received))
        print(f"split of one node from two, QoS 1: the session kept where its client was "
              f"connected got {len(received)} of 100 (lost {len(lost)}, duplicated "
              f"{duplicated}); split-z kept its newer connection; subscriptions from both "
              f"sides routed after the merge")
        assert not lost and duplicated == 0, (lost, received)
    finally:
        for client in clients:
            client.stop()
