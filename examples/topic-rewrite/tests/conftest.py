"""The node fixture's extension; ``mqtt_client`` comes with hive-broker's pytest plugin."""

from __future__ import annotations

from typing import Any

import pytest

import hive_ext_topic_rewrite


@pytest.fixture
def hive_extensions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The extension with the default rules and a known node name."""
    monkeypatch.delenv(hive_ext_topic_rewrite.RULES_ENV, raising=False)
    monkeypatch.delenv(hive_ext_topic_rewrite.WRAP_JSON_ENV, raising=False)
    monkeypatch.setenv(hive_ext_topic_rewrite.NODE_ENV, "hive-test-node")
    return [hive_ext_topic_rewrite]
