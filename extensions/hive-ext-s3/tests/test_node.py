"""The extension inside a node (in-process, hive-broker's ``hive_node_factory``) with real S3."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import hive_ext_s3
from hive_ext_s3 import CONFIG_ENV
from s3_server import S3Server, free_port

PREFIX = "node-test/"


def cluster_xml(cluster_port: int, discovery: str = "<extension><reload-interval>1"
                                                    "</reload-interval></extension>") -> str:
    return ("<cluster><enabled>true</enabled><transport><tcp>"
            f"<bind-address>127.0.0.1</bind-address><bind-port>{cluster_port}</bind-port>"
            f"</tcp></transport><discovery>{discovery}</discovery></cluster>"
            "<persistence><mode>in-memory</mode></persistence>")


def configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "s3discovery.properties"
    path.write_text(text)
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return path


def records(s3: S3Server, bucket: str) -> dict[str, dict[str, Any]]:
    client: Any = s3.client()
    listing = client.list_objects_v2(Bucket=bucket, Prefix=PREFIX).get("Contents", [])
    return {item["Key"]: json.loads(client.get_object(Bucket=bucket, Key=item["Key"])["Body"]
                                    .read()) for item in listing}


def test_installed_it_is_active_registers_the_node_and_counts(
        hive_node_factory: Any, s3: S3Server, bucket: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, wait_until: Callable[..., float]) -> None:
    configure(tmp_path, monkeypatch, s3.properties(bucket, file_prefix=PREFIX))
    port = free_port()
    node = hive_node_factory(config_xml=cluster_xml(port), load_installed=True)
    record = node.extension("s3-discovery")
    assert (record.active, record.version, record.source) == (True, "1.0.0", "hive_ext_s3")

    node_id = node.services.node_id
    stored = records(s3, bucket)
    assert list(stored) == [f"{PREFIX}{node_id}"]
    assert (stored[f"{PREFIX}{node_id}"]["host"], stored[f"{PREFIX}{node_id}"]["port"]) == (
        "127.0.0.1", port)
    counters = node.services.metrics.counters
    wait_until(lambda: counters["s3-discovery.queries"].value >= 2, 5, "two reloads")
    assert counters["s3-discovery.errors"].value == 0

    node.stop()  # a clean stop deregisters
    assert records(s3, bucket) == {}


def test_an_outage_is_counted_in_the_node_metrics_and_the_node_runs_on(
        hive_node_factory: Any, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        wait_until: Callable[..., float]) -> None:
    down = S3Server.never_started()
    configure(tmp_path, monkeypatch, down.properties(bucket, file_prefix=PREFIX))
    node = hive_node_factory(extensions=[hive_ext_s3.create_plugin()],
                             config_xml=cluster_xml(free_port()))
    counters = node.services.metrics.counters
    wait_until(lambda: counters["s3-discovery.errors"].value >= 3, 10, "three failed calls")
    with socket.create_connection((node.host, node.port), timeout=5):
        pass  # still serving MQTT


def test_a_bad_configuration_refuses_the_extension_not_the_node(
        hive_node_factory: Any, s3: S3Server, bucket: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    configure(tmp_path, monkeypatch, s3.properties(bucket, file_expiration="10",
                                                   update_interval="10"))
    node = hive_node_factory(config_xml=cluster_xml(free_port()), load_installed=True)
    record = node.extension("s3-discovery")
    assert not record.active
    assert "update-interval (10 s) must be above 0 and shorter than file-expiration (10 s)" \
        in record.reason
    with socket.create_connection((node.host, node.port), timeout=5):
        pass


def test_idle_when_the_node_uses_another_discovery(
        hive_node_factory: Any, s3: S3Server, bucket: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    configure(tmp_path, monkeypatch, s3.properties(bucket, file_prefix=PREFIX))
    with caplog.at_level("INFO"):
        node = hive_node_factory(config_xml=cluster_xml(free_port(), "<static/>"),
                                 load_installed=True)
    assert node.extension("s3-discovery").active
    assert "s3-discovery: idle" in caplog.text
    time.sleep(0.5)
    assert records(s3, bucket) == {}


def test_installed_under_the_extensions_entry_point() -> None:
    from importlib.metadata import entry_points

    (entry_point,) = entry_points(group="hive.extensions", name="s3-discovery")
    assert entry_point.load() is hive_ext_s3
    assert hive_ext_s3.HIVE_API == ">=1.7,<2"


def _lines_of(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(f"{name}:")
            or f"Extension {name} " in r.getMessage()]


def test_with_no_settings_of_its_own_it_stays_idle_with_one_info_line(
        hive_node_factory: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Several discovery packages installed together: one nobody set up stays out quietly."""
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    with caplog.at_level("INFO"):
        node = hive_node_factory(config_xml=cluster_xml(free_port()), load_installed=True)
    assert node.extension("s3-discovery").active
    lines = _lines_of(caplog, "s3-discovery")
    idle = [r for r in lines if "s3-discovery: idle: no settings of its own" in r.getMessage()]
    assert len(idle) == 1 and idle[0].levelname == "INFO", [r.getMessage() for r in lines]
    assert all(r.levelno < logging.WARNING for r in lines), [r.getMessage() for r in lines]


def test_named_in_the_node_configuration_it_needs_its_settings(
        hive_node_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    node = hive_node_factory(config_xml=cluster_xml(free_port(), (
        "<extension><name>s3-discovery</name></extension>")), load_installed=True)
    record = node.extension("s3-discovery")
    assert not record.active and "no configuration at" in record.reason


def test_an_s3_node_with_other_discovery_packages_installed(
        hive_node_factory: Any, s3: S3Server, bucket: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        wait_until: Callable[..., float]) -> None:
    """Only the S3 extension answers; Consul and Docker discovery (when installed: they are in
    CI) stay idle with one INFO line each, with no settings (a name chooses too)."""
    configure(tmp_path, monkeypatch, s3.properties(bucket, file_prefix=PREFIX))
    monkeypatch.delenv("HIVE_DISABLED_EXTENSIONS", raising=False)  # undo only_this_extension
    for name in [n for n in os.environ if n.startswith(("HIVE_CONSUL_", "HIVE_DOCKER_"))]:
        monkeypatch.delenv(name)
    for discovery in ("<extension><reload-interval>1</reload-interval></extension>",
                      "<extension><reload-interval>1</reload-interval>"
                      "<name>s3-discovery</name></extension>"):
        caplog.clear()
        with caplog.at_level("INFO"):
            node = hive_node_factory(config_xml=cluster_xml(free_port(), discovery),
                                     load_installed=True)
            wait_until(lambda: len(records(s3, bucket)) == 1, 5, "this node's record")
            node.stop()
        for other in ("consul-discovery", "docker-discovery"):
            if not any(r.name == other for r in node.extensions.manager.records):
                continue  # not installed here
            lines = _lines_of(caplog, other)
            idle = [r for r in lines if f"{other}: idle" in r.getMessage()]
            assert len(idle) == 1 and idle[0].levelname == "INFO", \
                [r.getMessage() for r in lines]
            assert all(r.levelno < logging.WARNING for r in lines), \
                [r.getMessage() for r in lines]
