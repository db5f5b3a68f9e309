"""Real processes for the tests: `hive run` nodes with the extension, and killing by PID.

A node is hive-broker's :class:`HiveProcess`: the `hive` command of this Python's environment
(where hive-ext-spark is installed, so the node loads it through its entry point), with its own
data folder and log, and its own ``spark.properties`` (named by ``HIVE_SPARK_CONFIG``); its
configuration is an MQTT listener on a loopback port it keeps across restarts, and ``body``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from hive_core.testing import HiveProcess, free_port, wait_until

__all__ = ["HiveNode", "cluster_body", "free_port", "kill_tree", "wait_for_match"]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found through /proc)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.append(child)
                    stack.append(child)
    return found


def kill_tree(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL,
              timeout: float = 20.0) -> None:
    """Send ``sig`` to ``proc`` and everything it started (each by its PID); reap ``proc``."""
    pids = [proc.pid, *descendants(proc.pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)
    if proc.poll() is None:
        for pid in [proc.pid, *descendants(proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(10)
    deadline = time.monotonic() + timeout
    for pid in pids[1:]:  # grandchildren are not ours to reap: wait until they are gone
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            try:
                if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                    break
            except OSError:
                break
            time.sleep(0.05)


def wait_for_match(pattern: str, text: Callable[[], str], timeout: float,
                   what: str) -> re.Match[str]:
    """Poll ``text()`` until ``pattern`` is in it; its first match."""
    regex = re.compile(pattern)
    found: list[re.Match[str]] = []

    def seen() -> bool:
        match = regex.search(text())
        if match:
            found.append(match)
        return match is not None

    wait_until(seen, timeout, what)
    return found[0]


class HiveNode(HiveProcess):
    """One `hive run` process; ``body`` is its configuration after the MQTT listener (a
    cluster, say), ``properties`` the text of its ``spark.properties``."""

    def __init__(self, folder: Path, properties: str = "", body: str = "",
                 extra_env: dict[str, str] | None = None) -> None:
        super().__init__(folder, mqtt_port=free_port(), env={
            "HIVE_SPARK_CONFIG": str(folder / "spark.properties"), **(extra_env or {})})
        self.properties = folder / "spark.properties"
        self.properties.write_text(properties)
        self.body = body

    def config_xml(self) -> str:
        return (f"<hivemq><listeners><tcp-listener><port>{self.mqtt_port}</port>"
                f"<bind-address>{self.host}</bind-address></tcp-listener></listeners>{self.body}"
                "</hivemq>")

    @property
    def port(self) -> int:
        """The MQTT listener's port, the same at every start."""
        return self.mqtt_port

    @property
    def events_root(self) -> Path:
        return self.data_dir / "extensions" / "spark" / "events"


def cluster_body(own_port: int, ports: Iterable[int], persistence: str = "file") -> str:
    nodes = "".join(f"<node><host>127.0.0.1</host><port>{p}</port></node>" for p in ports)
    return (
        "<cluster><enabled>true</enabled>"
        f"<transport><tcp><bind-address>127.0.0.1</bind-address><bind-port>{own_port}"
        "</bind-port></tcp></transport>"
        f"<discovery><static>{nodes}</static></discovery>"
        "<failure-detection><heartbeat><interval>500</interval><timeout>2000</timeout>"
        "</heartbeat></failure-detection></cluster>"
        f"<persistence><mode>{persistence}</mode></persistence>")
