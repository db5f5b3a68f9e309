"""Real `hive run` processes, as an operator starts them, for extension authors' tests.

Each node has a folder of its own (``config.xml``, its data folder, ``hive.log``) and picks its
MQTT, REST and cluster ports when it starts (a port picked earlier may be taken by then; a node
that finds one taken anyway is started again on new ones). It is stopped by its PID, whatever
happened. The REST API (``GET /api/v1/cluster/nodes``, ``/api/v1/metrics``) is the judge of what
a node sees, as it would be for an operator.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from hive_core.testing._ports import free_port

__all__ = ["EXTENSION_DISCOVERY", "HiveProcess", "HiveProcesses", "wait_until"]

STARTED = re.compile(r"Started Hive in \d+ ms")
PORT_TAKEN = "address already in use"
EXTENSION_DISCOVERY = ("<discovery><extension><reload-interval>1</reload-interval></extension>"
                       "</discovery>")
"""The default ``<discovery>``: extensions asked every second."""


def wait_until(check: Callable[[], object], timeout: float = 10.0, what: str = "the condition",
               every: float = 0.05) -> float:
    """Poll ``check()`` until it is true; the seconds that took.

    An OSError or ValueError from ``check`` counts as "not yet" (a server not up, an answer not
    complete). After ``timeout`` an AssertionError names ``what`` and the last such error.
    """
    begun = time.monotonic()
    last: Exception | None = None
    while True:
        try:
            if check():
                return time.monotonic() - begun
        except (OSError, ValueError) as exc:
            last = exc
        if time.monotonic() - begun >= timeout:
            raise AssertionError(f"not within {timeout:g} s: {what}"
                                 + (f" (last: {last!r})" if last is not None else ""))
        time.sleep(every)


def _hive_command() -> str:
    """The `hive` of this environment (beside this Python), else the one on PATH."""
    beside = Path(sys.executable).with_name("hive")
    found = str(beside) if beside.exists() else shutil.which("hive")
    if found is None:
        raise RuntimeError("no `hive` command: install hive-broker into this environment")
    return found


class HiveProcess:
    """One `hive run` process on ``host`` (a loopback address) with a cluster and a REST API."""

    def __init__(self, folder: Path, host: str = "127.0.0.1", cluster_port: int | None = None,
                 discovery_xml: str = EXTENSION_DISCOVERY,
                 extension_files: dict[str, str] | None = None, env: dict[str, str] | None = None,
                 heartbeat_ms: tuple[int, int] = (500, 2000), cluster_xml: str = "",
                 mqtt_port: int | None = None) -> None:
        self.folder = folder
        self.data_dir = folder / "data"
        self.host = host
        self.fixed_cluster_port = cluster_port  # None: a free one at each start
        self.cluster_port = cluster_port or 0
        self.fixed_mqtt_port = mqtt_port  # for clients that reconnect across a restart
        self.mqtt_port = mqtt_port or 0
        self.rest_port = 0
        self.discovery_xml = discovery_xml
        self.cluster_xml = cluster_xml  # more of <cluster> (<authentication>, say)
        self.heartbeat_ms = heartbeat_ms
        self.env = env or {}
        self.config = folder / "config.xml"
        self.log_path = folder / "hive.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_from = 0  # where this run's lines begin in hive.log
        folder.mkdir(parents=True)
        for relative, text in (extension_files or {}).items():  # under data/extensions/
            path = self.data_dir / "extensions" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def config_xml(self) -> str:
        interval, timeout = self.heartbeat_ms
        return (
            "<hivemq><listeners><tcp-listener>"
            f"<port>{self.mqtt_port}</port><bind-address>{self.host}</bind-address>"
            "</tcp-listener></listeners>"
            "<cluster><enabled>true</enabled><transport><tcp>"
            f"<bind-address>{self.host}</bind-address><bind-port>{self.cluster_port}</bind-port>"
            f"</tcp></transport>{self.discovery_xml}"
            f"<failure-detection><heartbeat><interval>{interval}</interval>"
            f"<timeout>{timeout}</timeout></heartbeat></failure-detection>{self.cluster_xml}"
            "</cluster><rest-api><enabled>true</enabled><listeners><http>"
            f"<port>{self.rest_port}</port><bind-address>{self.host}</bind-address>"
            "</http></listeners></rest-api>"
            "<persistence><mode>in-memory</mode></persistence></hivemq>")

    @property
    def log(self) -> str:
        """What the node logged since its last start."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as file:
            file.seek(self._log_from)
            return file.read().decode(errors="replace")

    @property
    def node_id(self) -> str:
        return (self.data_dir / "node-id").read_text().strip()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> HiveProcess:
        """Start the process on fresh ports; :meth:`wait_started` waits until it serves."""
        self.mqtt_port = self.fixed_mqtt_port or free_port(self.host)
        self.rest_port = free_port(self.host)
        self.cluster_port = self.fixed_cluster_port or free_port(self.host)
        self.config.write_text(self.config_xml())
        self._log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [_hive_command(), "run", "--config", str(self.config), "--data-dir",
                 str(self.data_dir)], stdout=log, stderr=subprocess.STDOUT, cwd=self.folder,
                env={**os.environ, **self.env})
        return self

    def wait_started(self, timeout: float = 30.0, attempts: int = 3) -> HiveProcess:
        """Until the log says it serves; started again on new ports if one was taken."""
        try:
            wait_until(lambda: STARTED.search(self.log) is not None or not self.running,
                       timeout, f"{self.folder.name} logs 'Started Hive'")
        except AssertionError:
            raise AssertionError(f"{self.folder.name} did not start:\n{self.log}") from None
        if self.running:
            return self
        if attempts > 1 and PORT_TAKEN in self.log:
            return self.launch().wait_started(timeout, attempts - 1)
        raise AssertionError(f"{self.folder.name} exited:\n{self.log}")

    def start(self) -> HiveProcess:
        return self.launch().wait_started()

    def wait_for_log(self, pattern: str, timeout: float = 15.0) -> re.Match[str]:
        """The first match of ``pattern`` in this run's log, waiting for it."""
        regex = re.compile(pattern)
        try:
            wait_until(lambda: regex.search(self.log), timeout,
                       f"{pattern!r} in the log of {self.folder.name}")
        except AssertionError:
            raise AssertionError(f"{pattern!r} not in the log of {self.folder.name}:\n"
                                 f"{self.log}") from None
        found = regex.search(self.log)
        assert found is not None
        return found

    def kill(self) -> None:
        """kill -9 by PID: no goodbye, no deregistration."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM by PID, as a service manager stops it; its exit status."""
        assert self.proc is not None, "never started"
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.terminate(15)
        except subprocess.TimeoutExpired:
            self.kill()

    def rest(self, path: str, timeout: float = 5.0) -> Any:
        """``GET path`` of the node's REST API, as JSON."""
        with urllib.request.urlopen(f"http://{self.host}:{self.rest_port}{path}",
                                    timeout=timeout) as response:
            return json.load(response)

    def members(self) -> set[str]:
        """The ids of the members the node lists (itself included)."""
        return {str(item["id"]) for item in self.rest("/api/v1/cluster/nodes")["items"]}

    def extension_metric(self, name: str) -> float:
        """An extension's counter or gauge, as ``GET /api/v1/metrics`` shows it."""
        return float(self.rest("/api/v1/metrics")["extensions"][name])


class HiveProcesses:
    """The nodes of one test (the ``hive_processes`` fixture): every one stopped at its end."""

    wait_until = staticmethod(wait_until)

    def __init__(self, root: Path) -> None:
        self.root = root
        self.all: list[HiveProcess] = []

    def add(self, **settings: Any) -> HiveProcess:
        """A node not started yet; ``settings`` are :class:`HiveProcess`'s (``extension_files``
        written under ``data/extensions/``, ``env``, ``host``, ``cluster_port``, ...)."""
        node = HiveProcess(self.root / f"node{len(self.all)}", **settings)
        self.all.append(node)
        return node

    def start_together(self, nodes: Iterable[HiveProcess]) -> float:
        """Launch every node at once (as an orchestrator would), then wait for each to serve;
        the monotonic time when the last one served."""
        launched = [node.launch() for node in nodes]
        for node in launched:
            node.wait_started()
        return time.monotonic()

    def form(self, nodes: Sequence[HiveProcess], timeout: float = 30.0) -> tuple[float, float]:
        """Launch ``nodes`` together and wait until they agree on as many members; the seconds
        that took from the launch, and from when the last one served."""
        begun = time.monotonic()
        serving = self.start_together(nodes)
        self.agree(nodes, len(nodes), timeout)
        agreed = time.monotonic()
        return agreed - begun, agreed - serving

    def join(self, node: HiveProcess, nodes: Sequence[HiveProcess],
             timeout: float = 30.0) -> float:
        """Start ``node`` (a new one, or one stopped: its data folder and node id kept) and wait
        until ``nodes`` agree on all of them; the seconds that took."""
        begun = time.monotonic()
        node.start()
        self.agree(nodes, len(nodes), timeout)
        return time.monotonic() - begun

    @staticmethod
    def ride_out_an_outage(nodes: Sequence[HiveProcess], stop: Callable[[], None],
                           start: Callable[[], None], extension: str, failed: str,
                           min_failed: int, failed_within: float = 10.0,
                           back_within: float = 15.0) -> None:
        """``stop`` takes the service of the extension named ``extension`` away for a while,
        ``start`` brings it back.

        Meanwhile every node logs ``failed`` (a pattern) within ``failed_within`` seconds, and
        three seconds later the nodes still agree on all of them, and each has counted at least
        ``min_failed`` failures (``<extension>.errors``) and logged no traceback; back, every
        node says so within ``back_within`` seconds, with at least as many failed calls.
        """
        stop()
        try:
            for node in nodes:
                node.wait_for_log(failed, timeout=failed_within)
            time.sleep(3)  # a few more reloads against nothing
            views = [node.members() for node in nodes]
            assert all(len(view) == len(nodes) and view == views[0] for view in views), views
            for node in nodes:
                assert node.extension_metric(f"{extension}.errors") >= min_failed, node.log
                assert "Traceback" not in node.log
        finally:
            start()
        back = rf"{re.escape(extension)}: answering again after [\d.]+ s and (\d+) failed calls"
        for node in nodes:
            recovered = node.wait_for_log(back, timeout=back_within)
            assert int(recovered.group(1)) >= min_failed, node.log

    @staticmethod
    def agree(nodes: Iterable[HiveProcess], count: int, timeout: float = 30.0) -> float:
        """Until every node lists the same ``count`` members; the seconds that took."""
        nodes = list(nodes)

        def agreed() -> bool:
            views = [node.members() for node in nodes]
            return all(len(view) == count and view == views[0] for view in views)

        return wait_until(agreed, timeout, f"{len(nodes)} nodes agree on {count} members")

    def stop_all(self) -> None:
        """Every node, by PID; a node that fails to stop does not keep the others running."""
        failures = []
        for node in self.all:
            try:
                node.stop()
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]
