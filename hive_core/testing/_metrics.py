"""A metrics registry that remembers what an extension registered, for tests without a node."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["RecordingMetrics"]


@dataclass(slots=True)
class RecordedCounter:
    name: str
    description: str = ""
    value: int = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


@dataclass(slots=True)
class RecordingMetrics:
    """A ``MetricsRegistry`` as the node's; ``metrics["name"]`` reads a counter or a gauge."""

    counters: dict[str, RecordedCounter] = field(default_factory=dict)
    gauges: dict[str, Callable[[], float]] = field(default_factory=dict)

    def counter(self, name: str, description: str = "") -> RecordedCounter:
        return self.counters.setdefault(name, RecordedCounter(name, description))

    def gauge(self, name: str, read: Callable[[], float], description: str = "") -> None:
        self.gauges[name] = read

    def __getitem__(self, name: str) -> float:
        if name in self.counters:
            return self.counters[name].value
        return self.gauges[name]()
