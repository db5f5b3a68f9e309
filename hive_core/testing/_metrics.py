"""A metrics registry that remembers what an extension registered, for tests without a node."""

from __future__ import annotations

from hive_core.broker import ExtensionMetrics

__all__ = ["RecordingMetrics"]


class RecordingMetrics(ExtensionMetrics):
    """The node's own registry of extension metrics; ``metrics["name"]`` reads one."""

    def __getitem__(self, name: str) -> float:
        if name in self.counters:
            return self.counters[name].value
        read, _description = self.gauges[name]
        return read()
