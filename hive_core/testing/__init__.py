"""Helpers for testing Hive extensions: an in-process node, and the pytest plugin's fixtures."""

from hive_core.testing._inprocess import RunningNode, start_node

__all__ = ["RunningNode", "start_node"]
