"""The device scripts as a user runs them: console scripts in subprocesses, against a node."""

from __future__ import annotations

import json
import subprocess
import sysconfig
import threading
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(sysconfig.get_path("scripts"))


class Script:
    """A console script in a subprocess; its stdout lines arrive in ``lines`` as it prints."""

    def __init__(self, name: str, *args: object) -> None:
        self.proc = subprocess.Popen([str(SCRIPTS / name), *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for_line(self, start: str, timeout: float = 15) -> str:
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(line.startswith(start) for line in self.lines), timeout)
        assert found, f"no line starting {start!r} in {self.lines}"
        return next(line for line in self.lines if line.startswith(start))

    def finish(self, timeout: float = 30) -> tuple[int, list[str], str]:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        assert self.proc.stderr is not None
        return code, self.lines, self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def scripts() -> Any:
    started: list[Script] = []

    def run(name: str, *args: object) -> Script:
        script = Script(name, *args)
        started.append(script)
        return script

    yield run
    for script in started:
        script.kill()


def test_subscriber_prints_what_the_device_publishes(hive_node: Any, scripts: Any) -> None:
    where = ("--host", hive_node.host, "--port", hive_node.port)
    subscriber = scripts("hive-device-subscriber", *where, "--count", 4, "--timeout", 30)
    subscriber.wait_for_line("Subscribed to sensors/+/temperature")

    publisher = scripts("hive-device-publisher", *where, "--device-id", "device-42",
                        "--count", 4, "--interval", 0.05)

    code, published, errors = publisher.finish()
    assert code == 0, errors
    assert len(published) == 4
    assert all(line.startswith("Published to sensors/device-42/temperature: ")
               for line in published)
    code, received, errors = subscriber.finish()
    assert code == 0, errors
    readings = [line.split(": ", 1) for line in received if not line.startswith("Subscribed")]
    assert [topic for topic, _ in readings] == ["sensors/device-42/temperature"] * 4
    payloads = [json.loads(payload) for _, payload in readings]
    assert {p["device_id"] for p in payloads} == {"device-42"}
    assert all(25.5 <= p["temperature"] <= 30.5 for p in payloads)
    assert payloads == [json.loads(line.split(": ", 1)[1]) for line in published]


def test_subscriber_for_one_device_ignores_the_others(hive_node: Any, scripts: Any) -> None:
    where = ("--host", hive_node.host, "--port", hive_node.port)
    subscriber = scripts("hive-device-subscriber", *where, "--device-id", "device-b",
                         "--count", 2, "--timeout", 30, "--mqtt", "3.1.1")
    subscriber.wait_for_line("Subscribed to sensors/device-b/temperature")

    for device in ("device-a", "device-b"):
        code, _, errors = scripts("hive-device-publisher", *where, "--device-id", device,
                                  "--count", 2, "--interval", 0, "--qos", 2).finish()
        assert code == 0, errors

    code, received, errors = subscriber.finish()
    assert code == 0, errors
    assert [line.split(":", 1)[0] for line in received[1:]] == [
        "sensors/device-b/temperature"] * 2


def test_publisher_says_when_no_broker_answers(scripts: Any, unused_port: int) -> None:
    code, _, errors = scripts("hive-device-publisher", "--host", "127.0.0.1",
                              "--port", unused_port, "--count", 1).finish()
    assert code == 1
    assert f"cannot connect to 127.0.0.1:{unused_port}" in errors


def test_subscriber_gives_up_after_its_timeout(hive_node: Any, scripts: Any) -> None:
    code, _, errors = scripts("hive-device-subscriber", "--host", hive_node.host,
                              "--port", hive_node.port, "--count", 1, "--timeout", 0.5).finish()
    assert code == 1
    assert "0 readings within 0.5 s, wanted 1" in errors


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
