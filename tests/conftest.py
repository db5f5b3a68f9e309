"""Fixtures shared by the whole suite: real `hive run` processes on free loopback ports."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from e2e._paho_peer import peers  # the paho peer fixture of the e2e tests

from hive_core.testing import free_port  # outside the ephemeral range: see its docstring

__all__ = ["HiveProcess", "closing_all", "free_port", "peers", "render_config", "run_to_exit"]

STARTED = re.compile(r"Started Hive in (\d+) ms")


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


@contextlib.contextmanager
def closing_all(make: Callable[..., C]) -> Iterator[Callable[..., C]]:
    """``make`` that remembers what it made; every one of those is closed at the end.

        @pytest.fixture
        def clients():
            with closing_all(PahoClient) as make:
                yield make
    """
    made: list[C] = []

    def remembered(*args: Any, **kwargs: Any) -> C:
        made.append(thing := make(*args, **kwargs))
        return thing

    try:
        yield remembered
    finally:
        for thing in made:
            thing.close()


class HiveProcess:
    """One `hive run` child process, its config and its log; stopped by PID at teardown."""

    launcher: tuple[str, ...] = ()
    """Words before the command, e.g. ``("ip", "netns", "exec", NS)`` (it keeps the PID)."""

    def __init__(self, folder: Path, config_xml: str, port: int, extra_ports: dict[str, int]):
        self.folder = folder
        self.config = folder / "config.xml"
        self.config.write_text(config_xml)
        self.data_dir = folder / "data"
        self.port = port
        self.ports = extra_ports
        self.log_path = folder / "hive.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []
        self._reader: threading.Thread | None = None
        self.env: dict[str, str] = {}  # set for the process besides the test's environment
        self.args: list[str] = []  # after `hive run`'s own, e.g. ["--extension", "./x.py"]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log(self) -> str:
        return "".join(self._lines)

    def start(self, timeout: float = 20.0) -> HiveProcess:
        self._lines = []
        self.proc = subprocess.Popen(
            [*self.launcher, sys.executable, "-m", "hive_core.cli", "run",
             "--config", str(self.config), "--data-dir", str(self.data_dir), *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.folder,
            env={**os.environ, **self.env} if self.env else None,
        )
        started = threading.Event()
        proc = self.proc

        def read() -> None:
            assert proc.stdout is not None
            with self.log_path.open("a") as out:
                for raw in proc.stdout:
                    line = raw.decode(errors="replace")
                    self._lines.append(line)
                    out.write(line)
                    out.flush()
                    if STARTED.search(line):
                        started.set()
            started.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        # The event is also set when the output ends: only the log line means "serving".
        if not started.wait(timeout) or not STARTED.search(self.log) or proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"hive did not start:\n{self.log}")
        return self

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            found = regex.search(self.log)
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not in log:\n{self.log}")

    def kill(self) -> None:
        """kill -9: no flush, no goodbye."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self._reader is not None:
                self._reader.join(5)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.terminate(10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._reader is not None:
            self._reader.join(5)

    def restart(self) -> HiveProcess:
        self.stop()
        return self.start()


def render_config(port: int, body: str = "", listeners: str | None = None) -> str:
    if listeners is None:
        listeners = (f"<tcp-listener><port>{port}</port>"
                     "<bind-address>127.0.0.1</bind-address></tcp-listener>")
    return f"<hivemq><listeners>{listeners}</listeners>{body}</hivemq>"


def run_to_exit(config: Path, data_dir: Path | None = None, timeout: float = 30,
                env: dict[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`hive run` that is expected to stop by itself (refused at start): its exit code and
    output. ``env`` is set besides the test's environment; the data folder defaults to
    ``data`` beside the config."""
    return subprocess.run(
        [sys.executable, "-m", "hive_core.cli", "run", "--config", str(config),
         "--data-dir", str(data_dir or config.parent / "data")],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env={**os.environ, **env} if env else None)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each phase's report on the item (``rep_call``...): fixtures see whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


NODE_LOG_TAIL = 120
"""Lines of each node's log printed when a test that started nodes fails."""


@pytest.fixture
def hive_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[object]:
    """Start nodes: ``hive_factory(body="<mqtt>...</mqtt>")`` returns a started HiveProcess.

    When the test fails, the last lines of each node's log are printed (the report shows
    them), so that a failure seen once, in CI, can be read afterwards."""
    nodes: list[HiveProcess] = []

    def start(body: str = "", listeners: str | None = None, port: int | None = None,
              start: bool = True, **extra_ports: int) -> HiveProcess:
        port = port or free_port()
        folder = tmp_path / f"node{len(nodes)}"
        folder.mkdir()
        node = HiveProcess(folder, render_config(port, body, listeners), port, extra_ports)
        nodes.append(node)
        return node.start() if start else node

    yield start
    for node in nodes:
        node.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for index, node in enumerate(nodes):
            lines = node.log_path.read_text(errors="replace").splitlines() \
                if node.log_path.exists() else []
            print(f"--- node{index} (MQTT port {node.port}), last {NODE_LOG_TAIL} of "
                  f"{len(lines)} log lines ---", *lines[-NODE_LOG_TAIL:], sep="\n")


@pytest.fixture
def hive(hive_factory) -> HiveProcess:  # type: ignore[no-untyped-def]
    """One node on the defaults, TCP on a free loopback port."""
    return hive_factory()  # type: ignore[no-any-return]
