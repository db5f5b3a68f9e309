"""The `hive` command: version, which config it picks, config errors, and stopping on a signal."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import free_port

from hive_core import __version__

pytestmark = pytest.mark.timeout(30)

HIVE = shutil.which("hive", path=str(Path(sys.executable).parent)) or "hive"
STARTED = re.compile(r"Started Hive in \d+ ms")


class Run:
    """`hive run ...` in a folder; stdout is read line by line, stderr kept apart."""

    def __init__(self, folder: Path, *args: str) -> None:
        self.proc = subprocess.Popen([HIVE, "run", *args], cwd=folder, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stdout: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout.append(line)
            self.lines.put(line)
        self.lines.put("")  # end of output

    def wait_for(self, pattern: str | re.Pattern[str], timeout: float = 15.0) -> re.Match[str]:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if not line:
                break
            found = regex.search(line)
            if found:
                return found
        raise AssertionError(f"{regex.pattern!r} not in the output:\n{self.output()}")

    def finish(self, signum: int | None = None, timeout: float = 10.0) -> tuple[int, str]:
        """Send ``signum`` (if given), wait for the exit; the exit code and stderr."""
        if signum is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signum)
        try:
            code = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()

    def output(self) -> str:
        return "".join(self.stdout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def runs() -> object:
    started: list[Run] = []

    def start(folder: Path, *args: str) -> Run:
        run = Run(folder, *args)
        started.append(run)
        return run

    yield start
    for run in started:
        run.kill()


def hive_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HIVE, *args], cwd=cwd, capture_output=True, text=True, timeout=20)


def config(port: int, body: str = "") -> str:
    return (f"<hivemq>\n  <listeners>\n    <tcp-listener>\n      <port>{port}</port>\n"
            f"      <bind-address>127.0.0.1</bind-address>\n    </tcp-listener>\n  </listeners>\n"
            f"{body}</hivemq>\n")


def mqtt_connects(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x1e\x00\x02id")
        return sock.recv(4) == b"\x20\x02\x00\x00"


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


# ---------------------------------------------------------------------------- version


def test_version() -> None:
    done = hive_cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"hive {__version__}"


@pytest.mark.parametrize(("words", "commands"), [
    ((), ["run", "extensions", "cluster", "certs"]),
    (("cluster",), ["status"]),
    (("certs",), ["ca", "node"]),
])
def test_a_missing_command_prints_help_not_internal_names(words: tuple[str, ...],
                                                          commands: list[str]) -> None:
    done = hive_cli(*words)
    assert done.returncode == 2
    usage = " ".join(("hive", *words))
    assert f"usage: {usage} [-h]" in done.stderr
    for command in commands:  # each with its one-line help
        assert re.search(rf"^    {command}\b", done.stderr, re.MULTILINE), done.stderr
    assert "required" not in done.stderr and "_command" not in done.stderr


# ---------------------------------------------------------------------------- --extension

FILE_EXTENSION = """
import logging

from hive_ext_api import hookimpl

__version__ = "{version}"
log = logging.getLogger("hive.ext.greeter")


@hookimpl
def hive_client_connected(client):
    log.info("greeter saw %s", client.client_id)
"""


def _greeter(folder: Path, version: str = "2.5") -> Path:
    path = folder / "greeter.py"
    path.write_text(FILE_EXTENSION.format(version=version))
    return path


@pytest.mark.parametrize("given", ["./greeter.py", "greeter.py", "{folder}/greeter.py"])
def test_extension_by_file_path_is_loaded_and_runs(tmp_path: Path, runs: object,
                                                    given: str) -> None:
    _greeter(tmp_path)
    port = free_port()
    (tmp_path / "c.xml").write_text(config(port))
    run = runs(tmp_path, "--config", "c.xml", "--data-dir", "d",  # type: ignore[operator]
               "--extension", given.format(folder=tmp_path))
    run.wait_for(r"Extension greeter 2\.5 started")
    run.wait_for(STARTED)
    assert mqtt_connects(port)
    run.wait_for(r"greeter saw id")
    code, err = run.finish(signal.SIGTERM)
    assert code == 0, err


def test_a_package_folder_and_a_module_without_version(tmp_path: Path, runs: object) -> None:
    package = tmp_path / "greeting"
    package.mkdir()
    (package / "__init__.py").write_text(FILE_EXTENSION.replace('__version__ = "{version}"\n',
                                                                 ""))
    (tmp_path / "c.xml").write_text(config(free_port()))
    run = runs(tmp_path, "--config", "c.xml", "--data-dir", "d",  # type: ignore[operator]
               "--extension", "./greeting/")
    run.wait_for(r"Extension greeting \(version unknown\) started")
    run.wait_for(STARTED)
    code, err = run.finish(signal.SIGTERM)
    assert code == 0, err


@pytest.mark.parametrize(("given", "says"), [
    ("./missing.py", "hive: --extension: ./missing.py: no such file"),
    ("no_such_module_x", "hive: --extension: no module named 'no_such_module_x' on the Python "
                         "path; give an importable module name"),
    ("./broken.py", "hive: --extension: ./broken.py failed while loading: {folder}/broken.py, "
                    "line 2: ZeroDivisionError: division by zero"),
    ("./needs.py", "hive: --extension: ./needs.py: No module named 'paho_not_here' (pip install "
                   "paho_not_here)"),
    ("./notes.txt", "hive: --extension: ./notes.txt is neither a .py file nor a package folder"),
    (".", "hive: --extension: . is a folder without __init__.py"),
])
def test_an_extension_that_cannot_be_loaded_is_refused_without_traceback(
        tmp_path: Path, given: str, says: str) -> None:
    (tmp_path / "broken.py").write_text("import logging\nx = 1 / 0\n")
    (tmp_path / "needs.py").write_text("import paho_not_here\n")
    (tmp_path / "notes.txt").write_text("not python\n")
    (tmp_path / "c.xml").write_text(config(free_port()))
    done = hive_cli("run", "--config", "c.xml", "--data-dir", "d", "--extension", given,
                    cwd=tmp_path)
    assert done.returncode == 2
    assert says.format(folder=tmp_path) in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "Started Hive" not in done.stdout


# ---------------------------------------------------------------------------- which config


def test_conf_config_xml_in_the_working_folder_is_used(tmp_path: Path, runs: object) -> None:
    port = free_port()
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.xml").write_text(config(port))
    run = runs(tmp_path)  # type: ignore[operator]
    run.wait_for(r"Loading configuration from conf/config\.xml")
    run.wait_for(rf"Started tcp listener \S+ on address 127\.0\.0\.1 and on port {port}\b")
    run.wait_for(STARTED)
    assert mqtt_connects(port)
    assert (tmp_path / "data").is_dir(), "the default data folder is ./data"
    code, err = run.finish(signal.SIGTERM)
    assert code == 0, err


def test_explicit_config_wins_over_conf_config_xml(tmp_path: Path, runs: object) -> None:
    port, other = free_port(), free_port()
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.xml").write_text(config(other))
    (tmp_path / "mine.xml").write_text(config(port))
    run = runs(tmp_path, "--config", "mine.xml", "--data-dir", "d")  # type: ignore[operator]
    run.wait_for(r"Loading configuration from mine\.xml")
    run.wait_for(rf"and on port {port}\b")
    run.wait_for(STARTED)
    assert (tmp_path / "d").is_dir()
    code, err = run.finish(signal.SIGTERM)
    assert code == 0, err
    assert f"port {other}" not in run.output()


def test_without_any_config_the_built_in_default_is_used(tmp_path: Path, runs: object) -> None:
    run = runs(tmp_path)  # type: ignore[operator]
    run.wait_for(r"No configuration file given: using the built-in default")
    if not port_is_free(1883):
        # Something else has 1883 here: the default shows in the refusal instead.
        code, err = run.finish()
        assert code == 1
        assert "1883" in err and "address already in use" in err.lower(), err
        assert "Traceback" not in err + run.output()
        return
    try:
        found = run.wait_for(r"Started tcp listener \S+ on address (\S+) and on port (\d+)|"
                             r"cannot start")
    except AssertionError:
        code, err = run.finish()
        raise AssertionError(f"exit {code}: {err}") from None
    if "cannot start" in found.group(0):  # lost a race for 1883 with another process
        code, err = run.finish()
        assert code == 1 and "1883" in err, err
        return
    assert found.groups() == ("0.0.0.0", "1883")
    run.wait_for(STARTED)
    code, err = run.finish(signal.SIGINT)
    assert code == 0, err


# ---------------------------------------------------------------------------- bad config


@pytest.mark.parametrize(("body", "element", "line"), [
    ("<listeners>\n<tcp-listener>\n<port>1883</port>\n<colour>blue</colour>\n</tcp-listener>\n"
     "</listeners>\n", "colour", 6),
    ("<listeners>\n<tcp-listener>\n<port>abc</port>\n</tcp-listener>\n</listeners>\n", "port", 5),
    ("<listeners>\n<tcp-listener>\n<port>70000</port>\n</tcp-listener>\n</listeners>\n", "port", 5),
    ("<mqtt>\n<no-such-thing/>\n</mqtt>\n", "no-such-thing", 4),
])
def test_bad_config_exits_non_zero_naming_element_and_line(tmp_path: Path, body: str,
                                                           element: str, line: int) -> None:
    path = tmp_path / "config.xml"
    # Line 1 is the XML declaration, line 2 <hivemq>: ``body`` starts on line 3.
    path.write_text(f"<?xml version='1.0'?>\n<hivemq>\n{body}</hivemq>\n")
    done = hive_cli("run", "--config", str(path), cwd=tmp_path)
    assert done.returncode != 0
    assert element in done.stderr, done.stderr
    assert f"line {line}" in done.stderr, done.stderr
    assert str(path) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "Started Hive" not in done.stdout


def test_not_well_formed_xml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.xml"
    path.write_text("<hivemq>\n  <listeners>\n    <tcp-listener>\n  </listeners>\n</hivemq>\n")
    done = hive_cli("run", "--config", str(path), cwd=tmp_path)
    assert done.returncode != 0
    assert "line 4" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_missing_config_file(tmp_path: Path) -> None:
    done = hive_cli("run", "--config", str(tmp_path / "nope.xml"), cwd=tmp_path)
    assert done.returncode != 0
    assert "nope.xml" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_missing_tls_key_store_is_a_clear_start_error(tmp_path: Path) -> None:
    path = tmp_path / "config.xml"
    port = free_port()
    path.write_text(f"<hivemq><listeners><tls-tcp-listener><port>{port}</port>"
                    "<bind-address>127.0.0.1</bind-address><tls><keystore>"
                    f"<path>{tmp_path / 'missing.pem'}</path></keystore></tls>"
                    "</tls-tcp-listener></listeners></hivemq>")
    done = hive_cli("run", "--config", str(path), "--data-dir", str(tmp_path / "d"),
                    cwd=tmp_path)
    assert done.returncode != 0
    assert "missing.pem" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout


# ---------------------------------------------------------------------------- stopping


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_cleanly_with_exit_code_0(tmp_path: Path, runs: object, signum: int) -> None:
    port = free_port()
    (tmp_path / "config.xml").write_text(config(port))
    run = runs(tmp_path, "--config", "config.xml")  # type: ignore[operator]
    run.wait_for(STARTED)
    # A connected client must not hold the stop up.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x1e\x00\x02id")
        assert sock.recv(4) == b"\x20\x02\x00\x00"
        started = time.monotonic()
        code, err = run.finish(signum)
        assert time.monotonic() - started < 5
    assert code == 0, err
    assert "Hive stopped" in run.output()
    assert "Traceback" not in err + run.output()
    assert not err.strip(), err
