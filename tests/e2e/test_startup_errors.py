"""`hive run` that cannot start says why in config words: the element behind a failed bind, and a
data folder another node holds. No traceback, a non-zero exit, and nothing left running."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import HiveProcess, free_port, render_config, run_to_exit

pytestmark = pytest.mark.timeout(60)


def hive_run(folder: Path, config_xml: str, data_dir: Path | None = None,
             timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`hive run` that is expected to stop by itself; its exit code and output."""
    config = folder / "refused.xml"
    config.write_text(config_xml)
    return run_to_exit(config, data_dir, timeout, cwd=folder)


@pytest.fixture
def taken_tcp() -> Iterator[int]:
    """A loopback TCP port in use (listening) for the test's length."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()[1]


@pytest.fixture
def taken_udp() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def _cluster(transport: str, extra: str = "") -> str:
    return (f"<cluster><enabled>true</enabled><transport>{transport}</transport>"
            f"<discovery><static/></discovery>{extra}</cluster>") if "tcp" in transport else (
        f"<cluster><enabled>true</enabled><transport>{transport}</transport>{extra}</cluster>")


CASES = {
    "mqtt": lambda tcp, udp: render_config(tcp),
    "named mqtt": lambda tcp, udp: render_config(0, listeners=(
        f"<tcp-listener><port>{tcp}</port><bind-address>127.0.0.1</bind-address>"
        "<name>devices</name></tcp-listener>")),
    "websocket": lambda tcp, udp: render_config(0, listeners=(
        f"<websocket-listener><port>{tcp}</port><bind-address>127.0.0.1</bind-address>"
        "</websocket-listener>")),
    "rest": lambda tcp, udp: render_config(free_port(), body=(
        "<rest-api><enabled>true</enabled><listeners><http>"
        f"<port>{tcp}</port><bind-address>127.0.0.1</bind-address></http></listeners>"
        "</rest-api>")),
    "cluster tcp": lambda tcp, udp: render_config(free_port(), body=_cluster(
        f"<tcp><bind-address>127.0.0.1</bind-address><bind-port>{tcp}</bind-port></tcp>")),
    "cluster udp": lambda tcp, udp: render_config(free_port(), body=_cluster(
        f"<udp><bind-address>127.0.0.1</bind-address><bind-port>{udp}</bind-port></udp>")),
    "health check": lambda tcp, udp: render_config(free_port(), body=_cluster(
        f"<tcp><bind-address>127.0.0.1</bind-address><bind-port>{free_port()}</bind-port></tcp>",
        "<failure-detection><tcp-health-check><bind-port>"
        f"{tcp}</bind-port><port-range>0</port-range></tcp-health-check></failure-detection>")),
}
EXPECTED = {
    "mqtt": "<tcp-listener> on 127.0.0.1:{tcp}: address already in use",
    "named mqtt": "<tcp-listener> devices on 127.0.0.1:{tcp}: address already in use",
    "websocket": "<websocket-listener> on 127.0.0.1:{tcp}: address already in use",
    "rest": "<rest-api><listeners><http> on 127.0.0.1:{tcp}: address already in use",
    "cluster tcp": "<transport><tcp> on 127.0.0.1:{tcp}: address already in use",
    "cluster udp": "<transport><udp> on 127.0.0.1:{udp}: address already in use",
    "health check": "<tcp-health-check> on 127.0.0.1:{tcp}: address already in use",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failed_bind_names_its_config_element(case: str, tmp_path: Path, taken_tcp: int,
                                                taken_udp: int) -> None:
    result = hive_run(tmp_path, CASES[case](taken_tcp, taken_udp))
    assert result.returncode == 1, result.stdout + result.stderr
    expected = EXPECTED[case].format(tcp=taken_tcp, udp=taken_udp)
    assert f"hive: cannot start: {expected}" in result.stderr, result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_a_bind_address_this_host_does_not_have(tmp_path: Path) -> None:
    port = free_port()
    result = hive_run(tmp_path, render_config(0, listeners=(
        f"<tcp-listener><port>{port}</port><bind-address>192.0.2.77</bind-address>"
        "</tcp-listener>")))
    assert result.returncode == 1
    assert (f"hive: cannot start: <tcp-listener> on 192.0.2.77:{port}: cannot assign "
            "requested address") in result.stderr, result.stderr


def test_a_second_node_on_one_data_folder_is_refused(tmp_path: Path) -> None:
    first_folder, second_folder = tmp_path / "first", tmp_path / "second"
    first_folder.mkdir()
    second_folder.mkdir()
    shared = tmp_path / "shared-data"
    first = HiveProcess(first_folder, render_config(free_port()), 0, {})
    first.data_dir = shared
    try:
        first.start()
        node_id = (shared / "node-id").read_text()
        result = hive_run(second_folder, render_config(free_port()), data_dir=shared)
        assert result.returncode == 1, result.stdout
        assert (f"hive: cannot start: the data folder {shared} is in use by another Hive node "
                f"(PID {first.pid})") in result.stderr, result.stderr
        assert "Started Hive" not in result.stdout
        assert (shared / "node-id").read_text() == node_id
        # the first is untouched; once it is gone (kill -9 included) the folder is free again
        assert first.proc is not None and first.proc.poll() is None
        first.kill()
        second = HiveProcess(second_folder, render_config(free_port()), 0, {})
        second.data_dir = shared
        try:
            second.start()
        finally:
            second.stop()
    finally:
        first.stop()
