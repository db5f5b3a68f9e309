"""Three real `hive run` nodes on loopback, each under a group id of its own, and a firewall
that cuts one node's cluster and health-check ports off from the others (its MQTT clients stay
connected), without network namespaces: the nodes share 127.0.0.1 as they do in the other
real-process tests.

Every new loopback connection a node dials is marked with the node's gid (mangle OUTPUT,
CONNMARK); a chain of our own on ``INPUT -i lo`` drops, while a node is cut off, its marked
packets to the others' cluster and health ports and theirs to its ports, both directions (a
connection's mark is on its replies too). Every rule carries the comment
``hive-chaos-<pid>``: :meth:`Firewall.close` deletes them, and a firewall whose process died
is swept by the next one.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from pathlib import Path

from cluster._nodes import get
from conftest import HiveProcess, free_port, render_config
from netns import pid_alive

HEARTBEAT = (1000, 3000)  # ms: a frozen or cut-off node is declared dead after 3 s
QUEUE = 100_000  # a subscriber's queue: nothing dropped for want of room
_COMMENT = re.compile(r"hive-chaos-(\d+)")


class Node(HiveProcess):
    def __init__(self, name: str, folder: Path, config_xml: str, port: int,
                 extra_ports: dict[str, int], gid: int) -> None:
        super().__init__(folder, config_xml, port, extra_ports)
        self.name = name
        self.gid = gid
        # setpriv execs: the PID kept is the node's, and its connections carry the gid
        self.launcher = ("setpriv", f"--regid={gid}", "--clear-groups")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def node_config(name: str, cluster_port: int, health_port: int, all_cluster_ports: list[int],
                mqtt_port: int, rest_port: int) -> str:
    peers = "".join(f"<node><host>127.0.0.1</host><port>{p}</port></node>"
                    for p in all_cluster_ports)
    interval, timeout = HEARTBEAT
    body = (
        f"<cluster><enabled>true</enabled><node-name>{name}</node-name>"
        f"<transport><tcp><bind-address>127.0.0.1</bind-address><bind-port>{cluster_port}"
        "</bind-port></tcp></transport>"
        f"<discovery><static>{peers}</static></discovery>"
        f"<failure-detection><heartbeat><interval>{interval}</interval><timeout>{timeout}"
        "</timeout></heartbeat><tcp-health-check><bind-address>127.0.0.1</bind-address>"
        f"<bind-port>{health_port}</bind-port><port-range>0</port-range></tcp-health-check>"
        "</failure-detection>"
        "<replication><replica-count>2</replica-count></replication></cluster>"
        "<rest-api><enabled>true</enabled><listeners><http>"
        f"<port>{rest_port}</port><bind-address>127.0.0.1</bind-address>"
        "</http></listeners></rest-api>"
        f"<mqtt><queued-messages><max-queue-size>{QUEUE}</max-queue-size></queued-messages>"
        "</mqtt>")
    return render_config(mqtt_port, body)


def make_nodes(folder: Path, count: int, rng: random.Random) -> list[Node]:
    """``count`` nodes (not started), file persistence, replica-count 2, gids of their own."""
    cluster_ports = [free_port() for _ in range(count)]
    base = rng.randrange(42_000, 60_000, 8)  # gids no other process uses
    nodes = []
    for index, cluster_port in enumerate(cluster_ports):
        name = f"n{index + 1}"
        health, mqtt, rest = free_port(), free_port(), free_port()
        node_folder = folder / name
        node_folder.mkdir(parents=True)
        config = node_config(name, cluster_port, health, cluster_ports, mqtt, rest)
        nodes.append(Node(name, node_folder, config, mqtt,
                          {"cluster": cluster_port, "health": health, "rest": rest},
                          base + index))
    return nodes


def members(node: Node) -> int:
    try:
        return len(get(node, "/api/v1/cluster/nodes", timeout=2.0)["items"])
    except (OSError, ValueError):
        return -1


def sessions_held(node: Node) -> int | None:
    try:
        return int(get(node, "/api/v1/metrics", timeout=5.0)["broker"]["sessions"])
    except (OSError, ValueError, KeyError):
        return None


class FirewallUnavailable(RuntimeError):
    pass


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True,
                          timeout=20)
    if check and done.returncode != 0:
        raise FirewallUnavailable(f"iptables {' '.join(args)}: {done.stderr.strip()}")
    return done


class Firewall:
    def __init__(self, nodes: list[Node]) -> None:
        if os.geteuid() != 0 or shutil.which("iptables") is None:
            raise FirewallUnavailable("partitions need root and iptables "
                                      "(scripts/testbed/iptables.sh)")
        self.nodes = nodes
        self.tag = f"hive-chaos-{os.getpid()}"
        self.chain = f"HIVECHAOS{os.getpid()}"[:28]
        self.cut: str | None = None
        self._marks: list[list[str]] = []
        self._jump = ["INPUT", "-i", "lo", "-m", "comment", "--comment", self.tag,
                      "-j", self.chain]

    def open(self) -> Firewall:
        sweep_leftovers()
        _iptables("-N", self.chain)
        try:
            _iptables("-I", *self._jump)
            for node in self.nodes:
                rule = ["OUTPUT", "-o", "lo", "-m", "conntrack", "--ctstate", "NEW",
                        "-m", "owner", "--gid-owner", str(node.gid), "-m", "comment",
                        "--comment", self.tag, "-j", "CONNMARK", "--set-mark", str(node.gid)]
                _iptables("-t", "mangle", "-A", *rule)
                self._marks.append(rule)
        except BaseException:
            self.close()
            raise
        return self

    def isolate(self, victim: Node) -> None:
        """Cut ``victim``'s cluster and health ports off from the others, both ways."""
        others = [n for n in self.nodes if n is not victim]

        def drop(mark: int, ports: list[int]) -> None:
            _iptables("-A", self.chain, "-m", "connmark", "--mark", str(mark), "-p", "tcp",
                      "-m", "multiport", "--ports", ",".join(map(str, ports)),
                      "-m", "comment", "--comment", self.tag, "-j", "DROP")

        drop(victim.gid, [p for n in others for p in (n.ports["cluster"], n.ports["health"])])
        for other in others:
            drop(other.gid, [victim.ports["cluster"], victim.ports["health"]])
        self.cut = victim.name

    def heal(self) -> None:
        _iptables("-F", self.chain)
        self.cut = None

    def close(self) -> None:
        """Every rule and the chain gone (also after a failure half way)."""
        _iptables("-D", *self._jump, check=False)
        for rule in self._marks:
            _iptables("-t", "mangle", "-D", *rule, check=False)
        self._marks = []
        _iptables("-F", self.chain, check=False)
        _iptables("-X", self.chain, check=False)
        self.cut = None


def sweep_leftovers() -> None:
    """Delete the rules and chains of chaos runs whose process is gone (a killed run)."""
    for table in ("filter", "mangle"):
        listing = _iptables("-t", table, "-S", check=False).stdout.splitlines()
        for line in listing:
            found = _COMMENT.search(line)
            if not line.startswith("-A ") or found is None or pid_alive(int(found.group(1))):
                continue
            words = line.split()
            words = [w.strip('"') for w in words]
            _iptables("-t", table, "-D", *words[1:], check=False)
        if table == "filter":
            for line in listing:
                if line.startswith("-N HIVECHAOS"):
                    pid = int(line.split()[1][len("HIVECHAOS"):] or 0)
                    if not pid_alive(pid):
                        _iptables("-F", line.split()[1], check=False)
                        _iptables("-X", line.split()[1], check=False)
