"""Real processes for the tests: `hive run` nodes with the extension, and killing by PID.

A node is the `hive` command of this Python's environment (where hive-ext-spark is installed, so
the node loads it through its entry point), on free loopback ports, with its own data folder
and its own ``spark.properties`` (named by ``HIVE_SPARK_CONFIG``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

STARTED = re.compile(r"Started Hive in (\d+) ms")
HIVE = str(Path(sys.executable).with_name("hive"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    begun = time.monotonic()
    while time.monotonic() - begun < timeout:
        if check():
            return time.monotonic() - begun
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


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

    wait_for(seen, timeout, what)
    return found[0]


class HiveNode:
    """One `hive run` process; its log is kept; stopped (or killed) by PID."""

    def __init__(self, folder: Path, properties: str = "", body: str = "",
                 extra_env: dict[str, str] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.port = free_port()
        self.data_dir = folder / "data"
        self.config = folder / "config.xml"
        self.properties = folder / "spark.properties"
        self.properties.write_text(properties)
        self.body = body
        self.env = {**os.environ, "HIVE_SPARK_CONFIG": str(self.properties),
                    **(extra_env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: list[str] = []
        self._reader: threading.Thread | None = None

    def write_config(self) -> None:
        self.config.write_text(
            f"<hivemq><listeners><tcp-listener><port>{self.port}</port>"
            f"<bind-address>127.0.0.1</bind-address></tcp-listener></listeners>{self.body}"
            "</hivemq>")

    @property
    def log(self) -> str:
        return "".join(self.lines)

    @property
    def node_id(self) -> str:
        return (self.data_dir / "node-id").read_text().strip()

    @property
    def events_root(self) -> Path:
        return self.data_dir / "extensions" / "spark" / "events"

    def start(self, timeout: float = 30.0) -> HiveNode:
        self.write_config()
        self.lines = []
        started = threading.Event()
        proc = self.proc = subprocess.Popen(
            [HIVE, "run", "--config", str(self.config), "--data-dir", str(self.data_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.folder, env=self.env)

        def read() -> None:
            assert proc.stdout is not None
            with (self.folder / "hive.log").open("a") as out:
                for raw in proc.stdout:
                    line = raw.decode(errors="replace")
                    self.lines.append(line)
                    out.write(line)
                    out.flush()
                    if STARTED.search(line):
                        started.set()
            started.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not started.wait(timeout) or proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"hive did not start:\n{self.log}")
        return self

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        return wait_for_match(pattern, lambda: self.log, timeout,
                              f"{pattern!r} in the log of {self.folder.name}")

    def kill(self) -> None:
        """kill -9: no flush, no goodbye."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._reader is not None:
            self._reader.join(5)


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
