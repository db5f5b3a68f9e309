"""``hive_events``: a Python data source (batch and streaming) over landed event segments.

The streaming offset is, per node, the last segment taken and the last sequence number in it:
``{"nodes": {"<node id>": {"segment": 12, "sequence": 40961}}}``. A micro-batch reads each
node's segments numbered above the start and up to the end. Landed segments never change and a
node lands them in number order, so replaying a batch after a restart reads the same records;
with Spark's checkpoint and the file sink's log, that makes the Parquet output exactly once.
Records whose sequence number is not above what the node already delivered are dropped (and
logged), so a node that repeats numbers cannot duplicate rows either.

Options: ``inputs`` (a JSON list of :func:`hive_ext_spark._inputs.input_spec` dicts) and
``max-partition-bytes`` (how many bytes of segments one task reads, default 64 MiB).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from hive_ext_spark._deps import require

require("pyspark", "the Spark job")
require("pyarrow", "the Spark job")

import pyarrow as pa  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType  # noqa: E402

try:  # pyspark 4.2 and later: Trigger.AvailableNow stops at the data landed when it started
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pyspark 4.0 and 4.1 run availableNow as one batch
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

from hive_ext_spark._inputs import SegmentInput, SegmentRef, open_input  # noqa: E402
from hive_ext_spark._segment import Event, read_segment  # noqa: E402

log = logging.getLogger("hive_ext_spark")

SOURCE_NAME = "hive_events"
SCHEMA_DDL = (
    "node_id STRING, sequence BIGINT, timestamp TIMESTAMP, topic STRING, payload BINARY, "
    "qos INT, retain BOOLEAN, client_id STRING, "
    "user_properties ARRAY<STRUCT<key: STRING, value: STRING>>, content_type STRING, "
    "response_topic STRING, correlation_data BINARY, payload_format_indicator INT, "
    "message_expiry_interval BIGINT")
ARROW_SCHEMA = pa.schema([
    ("node_id", pa.string()), ("sequence", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("topic", pa.string()),
    ("payload", pa.binary()), ("qos", pa.int32()), ("retain", pa.bool_()),
    ("client_id", pa.string()),
    ("user_properties", pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))),
    ("content_type", pa.string()), ("response_topic", pa.string()),
    ("correlation_data", pa.binary()), ("payload_format_indicator", pa.int32()),
    ("message_expiry_interval", pa.int64()),
])
DEFAULT_PARTITION_BYTES = 64 * 1024**2


def to_record_batch(node_id: str, events: Sequence[Event]) -> pa.RecordBatch:
    columns = [
        [node_id] * len(events), [e.sequence for e in events],
        [e.timestamp_us for e in events], [e.topic for e in events],
        [e.payload for e in events], [e.qos for e in events], [e.retain for e in events],
        [e.client_id for e in events],
        [[{"key": k, "value": v} for k, v in e.user_properties] for e in events],
        [e.content_type for e in events], [e.response_topic for e in events],
        [e.correlation_data for e in events], [e.payload_format_indicator for e in events],
        [e.message_expiry_interval for e in events],
    ]
    arrays = [pa.array(values, type=f.type) for values, f in zip(columns, ARROW_SCHEMA,
                                                                 strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


class SegmentRun(InputPartition):
    """Consecutive segments of one node, read by one task, after sequence ``after``."""

    def __init__(self, spec: dict[str, Any], node_id: str, segments: list[SegmentRef],
                 after: int) -> None:
        super().__init__(None)
        self.spec, self.node_id, self.segments, self.after = spec, node_id, segments, after

    def __repr__(self) -> str:
        numbers = [s.number for s in self.segments]
        return f"SegmentRun(node {self.node_id}, segments {numbers}, after {self.after})"


def read_run(run: SegmentRun) -> Iterator[pa.RecordBatch]:
    source = open_input(run.spec)
    after = run.after
    for ref in run.segments:
        try:
            data = source.read(ref)
        except FileNotFoundError:
            log.warning("segment %d of node %s is gone (removed by the node's retention before "
                        "the job took it): its events %d..%d are lost", ref.number, ref.node_id,
                        ref.first_seq, ref.last_seq)
            continue
        segment = read_segment(data)
        events = [e for e in segment.events if e.sequence > after]
        if len(events) < len(segment.events):
            log.warning("segment %d of node %s: %d records repeat sequence numbers already "
                        "taken; dropped", ref.number, ref.node_id,
                        len(segment.events) - len(events))
        if events:
            after = events[-1].sequence
            yield to_record_batch(run.node_id, events)


class _Inputs:
    """Every input's segments; a segment in two inputs (a folder and S3) counts once."""

    def __init__(self, options: dict[str, str]) -> None:
        text = options.get("inputs")
        if not text:
            raise ValueError("the hive_events source needs the option 'inputs'")
        self.specs: list[dict[str, Any]] = json.loads(text)
        self.partition_bytes = int(options.get("max-partition-bytes", DEFAULT_PARTITION_BYTES))
        self._opened: list[SegmentInput] = []  # on the driver: one client per input, kept

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles readers to its workers; clients (boto3) do not pickle: open them there.
        return {**self.__dict__, "_opened": []}

    def opened(self) -> list[tuple[dict[str, Any], SegmentInput]]:
        if not self._opened:
            self._opened = [open_input(spec) for spec in self.specs]
        return list(zip(self.specs, self._opened, strict=True))

    def listing(self) -> dict[str, list[tuple[SegmentRef, dict[str, Any]]]]:
        by_node: dict[str, dict[int, tuple[SegmentRef, dict[str, Any]]]] = {}
        for spec, source in self.opened():
            for ref in source.list_segments():
                by_node.setdefault(ref.node_id, {}).setdefault(ref.number, (ref, spec))
        return {node: [found[n] for n in sorted(found)] for node, found in by_node.items()}

    def runs(self, node_id: str, found: list[tuple[SegmentRef, dict[str, Any]]],
             after_segment: int, through_segment: int, after_seq: int) -> list[SegmentRun]:
        runs: list[SegmentRun] = []
        current: list[SegmentRef] = []
        spec: dict[str, Any] | None = None
        size = 0
        for ref, ref_spec in found:
            if not after_segment < ref.number <= through_segment:
                continue
            if current and (ref_spec is not spec or size + ref.size > self.partition_bytes):
                assert spec is not None
                runs.append(SegmentRun(spec, node_id, current, after_seq))
                after_seq = current[-1].last_seq
                current, size = [], 0
            current.append(ref)
            spec = ref_spec
            size += ref.size
        if current:
            assert spec is not None
            runs.append(SegmentRun(spec, node_id, current, after_seq))
        return runs


class HiveEventsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.inputs = _Inputs(options)
        self.target: dict[str, Any] | None = None  # Trigger.AvailableNow: where to stop

    def initialOffset(self) -> dict[str, Any]:
        return {"nodes": {}}

    def _listed(self) -> dict[str, Any]:
        nodes = {}
        for node_id, found in sorted(self.inputs.listing().items()):
            last = found[-1][0]
            nodes[node_id] = {"segment": last.number, "sequence": last.last_seq}
        return {"nodes": nodes}

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: Any = None) -> dict[str, Any]:
        """What is landed now (never behind ``start``; never past an availableNow target)."""
        latest = self._listed()["nodes"] if self.target is None else self.target["nodes"]
        nodes = dict((start or {}).get("nodes", {}))
        for node_id, upto in latest.items():
            if upto["segment"] > nodes.get(node_id, {"segment": 0})["segment"]:
                nodes[node_id] = upto
        return {"nodes": dict(sorted(nodes.items()))}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._listed()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        listing = self.inputs.listing()
        runs: list[InputPartition] = []
        for node_id, upto in sorted(end["nodes"].items()):
            since = start.get("nodes", {}).get(node_id, {"segment": 0, "sequence": 0})
            if upto["segment"] <= since["segment"]:
                continue
            found = listing.get(node_id, [])
            wanted = [ref.number for ref, _ in found
                      if since["segment"] < ref.number <= upto["segment"]]
            if upto["segment"] not in wanted:
                log.warning("node %s: segments up to %d are gone since they were listed",
                            node_id, upto["segment"])
            runs.extend(self.inputs.runs(node_id, found, since["segment"], upto["segment"],
                                         since["sequence"]))
        return runs

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SegmentRun)
        return read_run(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Tell folder inputs' nodes what is taken, so their retention knows what it may drop."""
        for _, source in self.inputs.opened():
            for node_id, upto in end["nodes"].items():
                source.mark_consumed(node_id, upto["segment"])


class HiveEventsBatchReader(DataSourceReader):
    """Every landed segment now (for a one-off backfill or a look at the log)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.inputs = _Inputs(options)

    def partitions(self) -> Sequence[InputPartition]:
        runs: list[InputPartition] = []
        for node_id, found in sorted(self.inputs.listing().items()):
            runs.extend(self.inputs.runs(node_id, found, 0, found[-1][0].number, 0))
        return runs

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SegmentRun)
        return read_run(partition)


class HiveEventsDataSource(DataSource):
    """``spark.read(Stream).format("hive_events").option("inputs", ...)``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return HiveEventsBatchReader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HiveEventsStreamReader(dict(self.options))
