"""The tests every discovery extension on a shared service passes inside a node.

A test module of the extension subclasses :class:`DiscoveryContract` and gives, as fixtures,
the settings file's text for a service that works, for one that is down, and a wrong one, and
what the service holds::

    class TestContract(DiscoveryContract):
        NAME, MODULE = "s3-discovery", hive_ext_s3

        @pytest.fixture
        def working_settings(self, s3, bucket): return s3.properties(bucket)
        ...

The tests start real nodes (``hive_node_factory``) with the extension installed and check what
an operator relies on: the node registers and deregisters itself, a service outage is counted
and the node runs on, a wrong setting refuses the extension and not the node, and the extension
stays out (one INFO line, no entry) when the node uses another discovery or it has no settings.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster_xml(cluster_port: int, discovery: str = "<extension><reload-interval>1"
                                                    "</reload-interval></extension>") -> str:
    """A node's ``<cluster>`` on loopback at ``cluster_port`` with ``discovery``, and an
    in-memory store."""
    return ("<cluster><enabled>true</enabled><transport><tcp>"
            f"<bind-address>127.0.0.1</bind-address><bind-port>{cluster_port}</bind-port>"
            f"</tcp></transport><discovery>{discovery}</discovery></cluster>"
            "<persistence><mode>in-memory</mode></persistence>")


class DiscoveryContract:
    """The tests (see the module docstring); the subclass sets the class attributes and
    overrides the fixtures that raise :class:`NotImplementedError`."""

    NAME: ClassVar[str] = ""
    """The extension's name (``s3-discovery``)."""
    MODULE: ClassVar[ModuleType | None] = None
    """Its module, as its entry point loads it."""
    CONFIG_ENV: ClassVar[str] = ""
    """The environment variable that points at its settings file."""
    VERSION: ClassVar[str] = "1.0.0"
    """Its version, as the node reports it."""
    HIVE_API: ClassVar[str] = ""
    """The extension API range it declares."""

    @pytest.fixture
    def working_settings(self) -> str:
        """The settings file's text for the service the test runs."""
        raise NotImplementedError

    @pytest.fixture
    def down_settings(self) -> str:
        """The settings file's text for a service that does not answer."""
        raise NotImplementedError

    @pytest.fixture
    def wrong_settings(self) -> tuple[str, str]:
        """A settings file's text with a wrong setting, and what the refusal says."""
        raise NotImplementedError

    @pytest.fixture
    def entries(self) -> Callable[[], dict[str, tuple[str, int]]]:
        """What the service holds now: each live entry's name, and its node's address."""
        raise NotImplementedError

    @pytest.fixture
    def entry_name(self) -> Callable[[str], str]:
        """The name a node's entry has in the service, from its node id."""
        raise NotImplementedError

    def configure(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
        """Write the settings file and point the extension at it."""
        path = tmp_path / "discovery.properties"
        path.write_text(text)
        monkeypatch.setenv(self.CONFIG_ENV, str(path))
        return path

    def lines_of(self, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
        """The extension's log lines, and the node's about it."""
        return [r for r in caplog.records if r.getMessage().startswith(f"{self.NAME}:")
                or f"Extension {self.NAME} " in r.getMessage()]

    def test_installed_it_is_active_registers_the_node_and_counts(
            self, hive_node_factory: Any, working_settings: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch, wait_until: Callable[..., float],
            entries: Callable[[], dict[str, tuple[str, int]]],
            entry_name: Callable[[str], str]) -> None:
        self.configure(tmp_path, monkeypatch, working_settings)
        port = free_port()
        node = hive_node_factory(config_xml=cluster_xml(port), load_installed=True)
        record = node.extension(self.NAME)
        assert self.MODULE is not None
        assert (record.active, record.version, record.source) == (
            True, self.VERSION, self.MODULE.__name__)
        assert entries() == {entry_name(node.services.node_id): ("127.0.0.1", port)}
        counters = node.services.metrics.counters
        wait_until(lambda: counters[f"{self.NAME}.queries"].value >= 2, 5, "two reloads")
        assert counters[f"{self.NAME}.errors"].value == 0
        node.stop()  # a clean stop deregisters
        assert entries() == {}

    def test_an_outage_is_counted_in_the_node_metrics_and_the_node_runs_on(
            self, hive_node_factory: Any, down_settings: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch, wait_until: Callable[..., float]) -> None:
        self.configure(tmp_path, monkeypatch, down_settings)
        assert self.MODULE is not None
        node = hive_node_factory(extensions=[self.MODULE.create_plugin()],
                                 config_xml=cluster_xml(free_port()))
        counters = node.services.metrics.counters
        wait_until(lambda: counters[f"{self.NAME}.errors"].value >= 3, 10, "three failed calls")
        with socket.create_connection((node.host, node.port), timeout=5):
            pass  # still serving MQTT

    def test_a_wrong_setting_refuses_the_extension_not_the_node(
            self, hive_node_factory: Any, wrong_settings: tuple[str, str], tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> None:
        text, message = wrong_settings
        self.configure(tmp_path, monkeypatch, text)
        node = hive_node_factory(config_xml=cluster_xml(free_port()), load_installed=True)
        record = node.extension(self.NAME)
        assert not record.active
        assert message in record.reason
        with socket.create_connection((node.host, node.port), timeout=5):
            pass

    def test_idle_when_the_node_uses_another_discovery(
            self, hive_node_factory: Any, working_settings: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
            entries: Callable[[], dict[str, tuple[str, int]]]) -> None:
        self.configure(tmp_path, monkeypatch, working_settings)
        with caplog.at_level("INFO"):
            node = hive_node_factory(config_xml=cluster_xml(free_port(), "<static/>"),
                                     load_installed=True)
        assert node.extension(self.NAME).active
        assert f"{self.NAME}: idle" in caplog.text
        time.sleep(0.5)
        assert entries() == {}

    def test_installed_under_the_extensions_entry_point(self) -> None:
        from importlib.metadata import entry_points

        (entry_point,) = entry_points(group="hive.extensions", name=self.NAME)
        assert entry_point.load() is self.MODULE
        assert self.MODULE.HIVE_API == self.HIVE_API

    def test_with_no_settings_of_its_own_it_stays_idle_with_one_info_line(
            self, hive_node_factory: Any, monkeypatch: pytest.MonkeyPatch,
            caplog: pytest.LogCaptureFixture) -> None:
        """Several discovery packages installed together: one nobody set up stays out quietly
        (no WARNING every minute about a service that is not there)."""
        monkeypatch.delenv(self.CONFIG_ENV, raising=False)
        assert self.CONFIG_ENV not in os.environ
        with caplog.at_level("INFO"):
            node = hive_node_factory(config_xml=cluster_xml(free_port()), load_installed=True)
            time.sleep(1.5)  # a reload or two
        assert node.extension(self.NAME).active
        lines = self.lines_of(caplog)
        idle = [r for r in lines if f"{self.NAME}: idle: no settings of its own" in r.getMessage()]
        assert len(idle) == 1 and idle[0].levelname == "INFO", [r.getMessage() for r in lines]
        assert all(r.levelno < logging.WARNING for r in lines), [r.getMessage() for r in lines]
        assert f"{self.NAME}.queries" not in node.services.metrics.counters
