"""Real `hive run` nodes on loopback, as an operator starts them, and their REST API.

Each node has its own folder (config.xml, data folder, log), MQTT, cluster and REST ports picked
free, and is stopped by its PID at teardown, whatever happened. (The minimum of hive-broker's own
test helpers, copied: an extension's tests never import the core's.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

STARTED = re.compile(r"Started Hive in (\d+) ms")
HEARTBEAT_MS = (500, 2000)  # short, so a killed node is noticed within a test's time


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hive_command() -> list[str]:
    """The `hive` of this environment (next to this Python), as an operator would run it."""
    beside = Path(sys.executable).with_name("hive")
    found = str(beside) if beside.exists() else shutil.which("hive")
    if found is None:
        raise RuntimeError("no `hive` command: install hive-broker into this environment")
    return [found]


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``check`` until true; the seconds it took. Fails naming ``what`` after ``timeout``."""
    begun = time.monotonic()
    while time.monotonic() - begun < timeout:
        if check():
            return time.monotonic() - begun
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


class HiveNode:
    """One `hive run` process with cluster discovery through an extension, and a REST API."""

    def __init__(self, folder: Path, extension_files: dict[str, str], reload_interval_s: int,
                 env: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.data_dir = folder / "data"
        self.mqtt_port, self.cluster_port, self.rest_port = free_port(), free_port(), free_port()
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []
        self._reader: threading.Thread | None = None
        folder.mkdir(parents=True)
        for relative, text in extension_files.items():  # under data/extensions/
            path = self.data_dir / "extensions" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        interval, timeout = HEARTBEAT_MS
        self.config = folder / "config.xml"
        self.config.write_text(
            "<hivemq><listeners><tcp-listener>"
            f"<port>{self.mqtt_port}</port><bind-address>127.0.0.1</bind-address>"
            "</tcp-listener></listeners>"
            "<cluster><enabled>true</enabled><transport><tcp>"
            f"<bind-address>127.0.0.1</bind-address><bind-port>{self.cluster_port}</bind-port>"
            "</tcp></transport><discovery><extension><reload-interval>"
            f"{reload_interval_s}</reload-interval></extension></discovery>"
            f"<failure-detection><heartbeat><interval>{interval}</interval>"
            f"<timeout>{timeout}</timeout></heartbeat></failure-detection></cluster>"
            "<rest-api><enabled>true</enabled><listeners><http>"
            f"<port>{self.rest_port}</port><bind-address>127.0.0.1</bind-address>"
            "</http></listeners></rest-api>"
            "<persistence><mode>in-memory</mode></persistence></hivemq>")

    @property
    def log(self) -> str:
        return "".join(self._lines)

    @property
    def node_id(self) -> str:
        return (self.data_dir / "node-id").read_text().strip()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> HiveNode:
        """Start the process; :meth:`wait_started` waits for it to serve."""
        self._lines = []
        self.proc = subprocess.Popen(
            [*hive_command(), "run", "--config", str(self.config), "--data-dir",
             str(self.data_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=self.folder, env=self.env)
        proc = self.proc

        def read() -> None:
            assert proc.stdout is not None
            with (self.folder / "hive.log").open("a") as out:
                for raw in proc.stdout:
                    line = raw.decode(errors="replace")
                    self._lines.append(line)
                    out.write(line)
                    out.flush()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        return self

    def wait_started(self, timeout: float = 30.0) -> HiveNode:
        try:
            wait_for(lambda: STARTED.search(self.log) is not None or not self.running, timeout,
                     f"{self.folder.name} logs 'Started Hive'")
        except AssertionError:
            raise AssertionError(f"{self.folder.name} did not start:\n{self.log}") from None
        if not self.running:
            raise AssertionError(f"{self.folder.name} exited:\n{self.log}")
        return self

    def start(self) -> HiveNode:
        return self.launch().wait_started()

    def wait_for_log(self, pattern: str, timeout: float = 15.0) -> re.Match[str]:
        regex = re.compile(pattern)
        found: list[re.Match[str]] = []

        def seen() -> bool:
            match = regex.search(self.log)
            if match:
                found.append(match)
            return match is not None

        try:
            wait_for(seen, timeout, f"{pattern!r} in the log of {self.folder.name}")
        except AssertionError:
            raise AssertionError(f"{pattern!r} not in the log of {self.folder.name}:\n"
                                 f"{self.log}") from None
        return found[0]

    def kill(self) -> None:
        """kill -9: no goodbye, no deregistration."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._join_reader()

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM, as a service manager stops it; its exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._join_reader()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self._join_reader()
            return
        try:
            self.terminate(15)
        except subprocess.TimeoutExpired:
            self.kill()

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(5)

    def get(self, path: str, timeout: float = 5.0) -> Any:
        url = f"http://127.0.0.1:{self.rest_port}{path}"
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.load(response)

    def members(self) -> set[str]:
        """The ids of the members this node's REST API lists (itself included)."""
        return {str(item["id"]) for item in self.get("/api/v1/cluster/nodes")["items"]}


class Nodes:
    """The nodes of one test: ``add`` makes one; every one is stopped at teardown."""

    def __init__(self, root: Path, extension_files: dict[str, str],
                 reload_interval_s: int = 1) -> None:
        self.root = root
        self.extension_files = extension_files
        self.reload_interval_s = reload_interval_s
        self.all: list[HiveNode] = []

    def add(self) -> HiveNode:
        node = HiveNode(self.root / f"node{len(self.all)}", self.extension_files,
                        self.reload_interval_s, dict(os.environ))
        self.all.append(node)
        return node

    def start_together(self, nodes: Iterable[HiveNode]) -> float:
        """Launch every node at once (as an orchestrator would), then wait for each to serve;
        the monotonic time when the last one served."""
        started = [node.launch() for node in nodes]
        for node in started:
            node.wait_started()
        return time.monotonic()

    def close(self) -> None:
        for node in self.all:
            node.stop()


def agree(nodes: Iterable[HiveNode], count: int, timeout: float = 30.0) -> float:
    """Until every node's REST API lists the same ``count`` members; the seconds it took."""
    nodes = list(nodes)

    def agreed() -> bool:
        try:
            views = [node.members() for node in nodes]
        except OSError:  # a REST API not up yet
            return False
        return all(len(view) == count and view == views[0] for view in views)

    return wait_for(agreed, timeout, f"{len(nodes)} nodes agree on {count} members")


def nodes_fixture(root: Path, extension_files: dict[str, str],
                  reload_interval_s: int = 1) -> Iterator[Nodes]:
    nodes = Nodes(root, extension_files, reload_interval_s)
    try:
        yield nodes
    finally:
        nodes.close()
