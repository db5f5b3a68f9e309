"""``<discovery><extension><name>``: several discovery extensions installed, one answers."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from conftest import free_port

from hive_core.config import ConfigError
from hive_ext_api import ClusterNodeAddress, ExtensionContext, hookimpl


class Seer:
    """A discovery extension that records what its context told it."""

    def __init__(self) -> None:
        self.told: tuple[bool, bool, str | None, str] | None = None

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        self.told = (context.extension_discovery, context.discovery_named,
                     context.discovery_choice, context.discovery_idle_reason())

    @hookimpl
    def hive_discovery_reload(self) -> list[ClusterNodeAddress] | None:
        return None


def cluster_xml(extension: str) -> str:
    return ("<cluster><enabled>true</enabled><transport><tcp>"
            f"<bind-address>127.0.0.1</bind-address><bind-port>{free_port()}</bind-port>"
            f"</tcp></transport><discovery>{extension}</discovery></cluster>"
            "<persistence><mode>in-memory</mode></persistence>")


def test_without_a_name_every_discovery_extension_is_asked_none_named(
        hive_node_factory: Any) -> None:
    first, second = Seer(), Seer()
    hive_node_factory(extensions=[first, second], config_xml=cluster_xml("<extension/>"))
    assert first.told is not None and first.told[:3] == (True, False, None)
    assert second.told is not None and second.told[:3] == (True, False, None)


def test_the_name_chooses_one_and_the_others_are_told_why_they_idle(
        hive_node_factory: Any) -> None:
    first, second = Seer(), Seer()  # registered as Seer and Seer-2
    hive_node_factory(extensions=[first, second], config_xml=cluster_xml(
        "<extension><name>Seer-2</name></extension>"))
    assert first.told == (False, False, "Seer-2", "<discovery><extension><name> names Seer-2")
    assert second.told is not None and second.told[:3] == (True, True, "Seer-2")


def test_a_name_no_extension_has_stops_the_node_naming_the_element(
        hive_node_factory: Any) -> None:
    with pytest.raises(RuntimeError) as failed:
        hive_node_factory(extensions=[Seer()], config_xml=cluster_xml(
            "<extension><name>consul-discvery</name></extension>"))
    error = failed.value.__cause__
    assert isinstance(error, ConfigError)
    assert error.path == "hivemq/cluster/discovery/extension/name"
    assert "no extension named consul-discvery is installed" in str(error)
    assert "discovery extensions: Seer" in str(error)


def test_a_static_node_does_not_say_that_other_discoveries_started(
        hive_node_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO"):
        hive_node_factory(config_xml=cluster_xml("<static/>"))
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not [m for m in said if "multicast" in m or "broadcast" in m], said
