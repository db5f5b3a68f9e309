"""HAProxy (Debian's package) in front of `hive run` nodes, as users deploy it.

    proxy = HAProxy(tmp_path, readme_config(frontend_port, [node.port for node in nodes]))
    proxy.start()
    ...
    proxy.stop()   # by PID, also at the fixture's teardown

The ``haproxy_factory`` fixture starts them and stops every one it started. The configuration
is the README's ("Behind a load balancer"), read from README.md, with the frontend bound to a
free loopback port and the three ``server`` lines pointed at the test's nodes: what the README
tells users to run is what the tests run.

Import it as ``from cluster._haproxy import ...`` (tests/ is on sys.path).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest

__all__ = ["HAProxy", "haproxy_factory", "passthrough_config", "readme_config"]

README = Path(__file__).resolve().parents[2] / "README.md"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"  # sbin: not on every PATH


def readme_config(frontend_port: int, node_ports: Sequence[int], proxy: str = "send-proxy-v2",
                  frontend_host: str = "127.0.0.1") -> str:
    """The README's HAProxy configuration for loopback: HAProxy on ``frontend_port``, a
    ``server`` line per node port, and ``proxy`` (``send-proxy`` or ``send-proxy-v2``)."""
    text = README.read_text()
    section = text[text.index("## Behind a load balancer"):]
    found = re.search(r"```haproxy\n(.*?)```", section, re.DOTALL)
    assert found, "README: no haproxy block under 'Behind a load balancer'"
    config = found.group(1)
    servers = re.findall(r"^( +server (\S+) \S+)$", config, re.MULTILINE)
    assert len(servers) == len(node_ports), "one server line per node"
    for (line, name), port in zip(servers, node_ports, strict=True):
        config = config.replace(line, line.split(" server ")[0] + f" server {name} "
                                f"127.0.0.1:{port}")
    assert "    bind :1883\n" in config
    config = config.replace("    bind :1883\n", f"    bind {frontend_host}:{frontend_port}\n")
    assert " send-proxy-v2 " in config
    return config.replace(" send-proxy-v2 ", f" {proxy} ")


def passthrough_config(routes: Sequence[tuple[int, int]], proxy: str = "send-proxy-v2") -> str:
    """TCP mode, one frontend per ``(frontend_port, node_port)`` pair, each to its one node
    with ``proxy``: for listener kinds other than the README's plain TCP."""
    config = ("global\n    log stdout format raw local0 info\n"
              "defaults\n    mode tcp\n    log global\n    option tcplog\n"
              "    timeout connect 2s\n    timeout client 3m\n    timeout server 3m\n")
    for frontend, node in routes:
        config += (f"listen to-{node}\n    bind 127.0.0.1:{frontend}\n"
                   f"    server node 127.0.0.1:{node} {proxy}\n")
    return config


class HAProxy:
    """One ``haproxy -db -f CFG`` child process; its output (the tcplog lines) kept."""

    def __init__(self, folder: Path, config: str, port: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.config = folder / "haproxy.cfg"
        self.config.write_text(config)
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def log(self) -> str:
        return "".join(self._lines)

    def check(self) -> None:
        """``haproxy -c``: the configuration is valid."""
        result = subprocess.run([HAPROXY, "-c", "-f", str(self.config)], capture_output=True,
                                text=True, timeout=10)
        assert result.returncode == 0, result.stdout + result.stderr

    def start(self, timeout: float = 10.0) -> HAProxy:
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(self.config)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        proc = self.proc

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                self._lines.append(raw.decode(errors="replace"))

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        # Listening is seen in the socket table, not by connecting: a test connection would
        # take a turn of the round robin.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with {proc.returncode}:\n{self.log}")
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port
                   for c in psutil.net_connections(kind="tcp")):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"haproxy did not listen on {self.port}:\n{self.log}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)  # hard stop: every connection closed
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)


@pytest.fixture
def haproxy_factory(tmp_path: Path) -> Iterator[object]:
    """``haproxy_factory(config, port)`` returns a started :class:`HAProxy`; all are stopped
    at teardown."""
    started: list[HAProxy] = []

    def start(config: str, port: int) -> HAProxy:
        proxy = HAProxy(tmp_path / f"haproxy{len(started)}", config, port)
        started.append(proxy)
        proxy.check()
        return proxy.start()

    yield start
    for proxy in started:
        proxy.stop()
