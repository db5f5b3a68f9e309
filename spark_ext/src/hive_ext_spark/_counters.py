"""What the event log counts, in the node's metrics registry (``spark-events.*``)."""

from __future__ import annotations

from hive_ext_api import Counter, MetricsRegistry


class LogCounters:
    """The node's metrics this log counts into (``spark-events.*``)."""

    def __init__(self, metrics: MetricsRegistry | None) -> None:
        def counter(name: str, description: str) -> Counter:
            if metrics is None:
                return _LocalCounter()
            return metrics.counter(f"spark-events.{name}", description)

        self.dropped = counter("dropped", "events not recorded: no segment to write into "
                                          "(full disk, folder not writable)")
        self.lost = counter("lost", "recorded events removed by retention-max-bytes before "
                                    "the Spark job or S3 took them")
        self.landed = counter("segments-landed", "segments closed and renamed to their final name")
        self.removed = counter("segments-removed", "landed segments removed by retention")
        self.write_errors = counter("write-errors", "segments that could not be created or landed")
        self.recorded = counter("recorded", "events recorded since the node started")
        self.recovered = counter("recovered", "events found in segments a killed node left "
                                              "open, landed at start")
        self.s3_uploads = counter("s3-uploads", "segments shipped to S3")
        self.s3_failures = counter("s3-failures", "failed attempts to ship a segment to S3")


class _LocalCounter:
    """A counter for a log that runs without a node (tools, tests)."""

    def __init__(self) -> None:
        self._value = 0

    def inc(self, amount: int = 1) -> None:
        self._value += amount

    @property
    def value(self) -> int:
        return self._value
