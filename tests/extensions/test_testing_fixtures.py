"""The pytest plugin's helpers for extension authors: `hive run` processes, wait_until, a metrics
registry, keeping other installed extensions out, and endpoints that are not the service."""

from __future__ import annotations

import os
import socket
import sys
import time
import types
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hive_core.testing import HiveProcesses, RecordingMetrics, free_port
from hive_ext_api import ENTRY_POINT_GROUP, hookimpl


def _static(*ports: int) -> str:
    nodes = "".join(f"<node><host>127.0.0.1</host><port>{port}</port></node>" for port in ports)
    return f"<discovery><static>{nodes}</static></discovery>"


def test_hive_processes_form_a_cluster_lose_a_killed_node_and_take_it_back(
        hive_processes: HiveProcesses) -> None:
    ports = free_port(), free_port()
    a, b = (hive_processes.add(cluster_port=port, discovery_xml=_static(*ports))
            for port in ports)
    hive_processes.start_together([a, b])
    assert hive_processes.agree([a, b], 2) < 30
    assert a.members() == {a.node_id, b.node_id}
    assert a.rest("/api/v1/metrics")["extensions"] == {}
    with pytest.raises(KeyError):
        a.extension_metric("nobody.counts-this")

    b.kill()
    assert not b.running
    hive_processes.agree([a], 1, timeout=15)
    first_run = b.log
    b.start()  # the same folder: the same node id, a log of its own
    hive_processes.agree([a, b], 2)
    assert "Started Hive" in first_run and b.log.count("Started Hive") == 1
    assert b.wait_for_log(r"Started Hive in (\d+) ms").group(1).isdigit()
    assert b.terminate() == 0

    hive_processes.stop_all()
    assert not a.running and a.proc is not None and a.proc.returncode is not None


def test_a_node_that_cannot_start_says_why(hive_processes: HiveProcesses) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        node = hive_processes.add(cluster_port=taken.getsockname()[1])
        with pytest.raises(AssertionError, match="exited"):
            node.start()
    assert not node.running


def test_wait_until_counts_the_seconds_and_names_what_never_came() -> None:
    from hive_core.testing import wait_until

    begun = time.monotonic()
    assert wait_until(lambda: time.monotonic() - begun > 0.2, 5, "a moment") >= 0.2

    def refused() -> bool:
        raise ConnectionRefusedError("not up")

    with pytest.raises(AssertionError, match=r"not within 0.3 s: the server \(last: "
                                             r"ConnectionRefusedError\('not up'\)\)"):
        wait_until(refused, 0.3, "the server")


def test_the_wait_until_fixture_is_the_function(wait_until: Callable[..., float]) -> None:
    assert wait_until(lambda: True, 1, "now") < 1


def test_hive_metrics_reads_counters_and_gauges(hive_metrics: RecordingMetrics) -> None:
    errors = hive_metrics.counter("x.errors", "what failed")
    errors.inc()
    errors.inc(2)
    hive_metrics.gauge("x.nodes", lambda: 4.0)
    assert (hive_metrics["x.errors"], hive_metrics["x.nodes"]) == (3, 4.0)
    assert hive_metrics.counter("x.errors") is errors


def test_hive_only_installed_keeps_the_others_out(
        hive_only_installed: Callable[..., None], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("alpha", "beta", "gamma"):
        info = tmp_path / f"hive_ext_{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: hive-ext-{name}\n"
                                       "Version: 1.0\n")
        (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = x_{name}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    hive_only_installed("beta")
    disabled = set(os.environ["HIVE_DISABLED_EXTENSIONS"].split(","))
    assert {"alpha", "gamma"} <= disabled and "beta" not in disabled


def test_the_impostor_answers_anything_with_a_page(hive_impostor_url: str) -> None:
    for method in ("GET", "PUT"):
        request = urllib.request.Request(f"{hive_impostor_url}/v1/anything", method=method,
                                         data=b"{}" if method == "PUT" else None)
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/html"
            assert response.read().startswith(b"<html>")


def test_the_silent_port_accepts_and_never_answers(hive_silent_port: int) -> None:
    with socket.create_connection(("127.0.0.1", hive_silent_port), timeout=2) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(1)


def test_a_running_node_tells_what_it_made_of_an_extension(hive_node_factory: Any) -> None:
    module = types.ModuleType("hive_ext_fixture_probe")
    module.HIVE_API = ">=1.0,<2"  # type: ignore[attr-defined]

    @hookimpl
    def hive_extension_start(context: Any) -> None:
        pass

    module.hive_extension_start = hive_extension_start  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        node = hive_node_factory(extensions=[module])
        record = node.extension("hive_ext_fixture_probe")
        assert record.active and record.reason == ""
        with pytest.raises(LookupError, match="0 extensions named 'nobody'"):
            node.extension("nobody")
    finally:
        del sys.modules[module.__name__]
