"""The extension inside a node (in-process, hive-broker's ``hive_node_factory``) with real S3."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hive_ext_api.testing import DiscoveryContract, cluster_xml

import hive_ext_s3
from hive_ext_s3 import CONFIG_ENV
from s3_server import S3Server, free_port

PREFIX = "node-test/"


def configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "s3discovery.properties"
    path.write_text(text)
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return path


class TestContract(DiscoveryContract):
    """What every discovery extension on a shared service does inside a node."""

    NAME, MODULE, CONFIG_ENV, HIVE_API = "s3-discovery", hive_ext_s3, CONFIG_ENV, ">=1.7,<2"

    @pytest.fixture
    def working_settings(self, s3: S3Server, bucket: str) -> str:
        return s3.properties(bucket, file_prefix=PREFIX)

    @pytest.fixture
    def down_settings(self, bucket: str) -> str:
        return S3Server.never_started().properties(bucket, file_prefix=PREFIX)

    @pytest.fixture
    def wrong_settings(self, s3: S3Server, bucket: str) -> tuple[str, str]:
        return (s3.properties(bucket, file_expiration="10", update_interval="10"),
                "update-interval (10 s) must be above 0 and shorter than file-expiration (10 s)")

    @pytest.fixture
    def entries(self, s3: S3Server, bucket: str) -> Callable[[], dict[str, tuple[str, int]]]:
        return lambda: {key: (record["host"], record["port"])
                        for key, record in s3.records(bucket, PREFIX).items()}

    @pytest.fixture
    def entry_name(self) -> Callable[[str], str]:
        return lambda node_id: f"{PREFIX}{node_id}"


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
            wait_until(lambda: len(s3.records(bucket, PREFIX)) == 1, 5, "this node's record")
            node.stop()
        for other in ("consul-discovery", "docker-discovery"):
            if not any(r.name == other for r in node.extensions.manager.records):
                continue  # not installed here
            lines = [r for r in caplog.records if r.getMessage().startswith(f"{other}:")
                     or f"Extension {other} " in r.getMessage()]
            idle = [r for r in lines if f"{other}: idle" in r.getMessage()]
            assert len(idle) == 1 and idle[0].levelname == "INFO", \
                [r.getMessage() for r in lines]
            assert all(r.levelno < logging.WARNING for r in lines), \
                [r.getMessage() for r in lines]
