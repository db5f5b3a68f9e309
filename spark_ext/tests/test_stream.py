"""The streaming job in the shared local session: layout, schema, restarts, queries, S3."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest

from hive_ext_spark import cli, queries
from hive_ext_spark._inputs import input_spec
from hive_ext_spark._segment import Event, encode_header, encode_record, landed_name
from hive_ext_spark.stream import start

pytestmark = pytest.mark.timeout(300)

T0 = int(dt.datetime(2026, 3, 1, 23, 58, 30, tzinfo=dt.UTC).timestamp() * 1_000_000)
SECOND = 1_000_000


def land(root: Path, node_id: str, number: int, events: list[Event]) -> Path:
    """A landed segment exactly as a node writes it."""
    folder = root / node_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / landed_name(number, events[0].sequence, events[-1].sequence)
    path.write_bytes(encode_header(number, node_id, T0)
                     + b"".join(encode_record(e) for e in events))
    return path


def ev(seq: int, at_s: float, topic: str, payload: bytes, client: str = "dev-1",
       **props: Any) -> Event:
    return Event(seq, T0 + int(at_s * SECOND), topic, payload, 1, False, client, **props)


def run_once(spark: Any, inputs: list[str], out: Path, ckpt: Path, depth: int = 1,
             **spec: Any) -> None:
    query = start(spark, [input_spec(i, **spec) for i in inputs], str(out), str(ckpt),
                  topic_depth=depth, available_now=True)
    assert query.awaitTermination(180), "the availableNow query did not finish"
    assert query.exception() is None


def rows(spark: Any, out: Path) -> list[Any]:
    return spark.read.parquet(str(out)).orderBy("node_id", "sequence").collect()


def test_parquet_partitioned_by_date_and_topic_prefix_with_every_field(
        spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "events"
    land(root, "node-a", 1, [
        ev(1, 0, "plant/hall-1/temp", b"21.5", user_properties=[("unit", "C"), ("unit", "K")],
           content_type="text/plain", response_topic="r/1", correlation_data=b"\x00c",
           payload_format_indicator=1, message_expiry_interval=60),
        ev(2, 95, "plant/hall-2/temp", b"19.0"),  # 00:00:05, the next UTC day
    ])
    land(root, "node-b", 1, [ev(1, 1, "office/desk", b"on", client="dev-2")])
    out, ckpt = tmp_path / "parquet", tmp_path / "ckpt"
    run_once(spark, [str(root)], out, ckpt, depth=2)

    table = spark.read.parquet(str(out))
    assert [(f.name, f.dataType.simpleString()) for f in table.schema.fields] == [
        ("node_id", "string"), ("sequence", "bigint"), ("timestamp", "timestamp"),
        ("topic", "string"), ("payload", "binary"), ("qos", "int"), ("retain", "boolean"),
        ("client_id", "string"),
        ("user_properties", "array<struct<key:string,value:string>>"),
        ("content_type", "string"), ("response_topic", "string"),
        ("correlation_data", "binary"), ("payload_format_indicator", "int"),
        ("message_expiry_interval", "bigint"), ("date", "date"), ("topic_prefix", "string")]
    folders = sorted(str(p.relative_to(out)) for p in out.glob("date=*/topic_prefix=*"))
    assert folders == ["date=2026-03-01/topic_prefix=office%2Fdesk",
                       "date=2026-03-01/topic_prefix=plant%2Fhall-1",
                       "date=2026-03-02/topic_prefix=plant%2Fhall-2"]
    first, second, other = rows(spark, out)
    assert (first.node_id, first.sequence, first.topic, bytes(first.payload), first.qos,
            first.retain, first.client_id) == ("node-a", 1, "plant/hall-1/temp", b"21.5", 1,
                                               False, "dev-1")
    assert first.timestamp.replace(tzinfo=dt.UTC) == dt.datetime(2026, 3, 1, 23, 58, 30,
                                                                 tzinfo=dt.UTC)
    assert [(p.key, p.value) for p in first.user_properties] == [("unit", "C"), ("unit", "K")]
    assert (first.content_type, first.response_topic, bytes(first.correlation_data),
            first.payload_format_indicator, first.message_expiry_interval) == (
        "text/plain", "r/1", b"\x00c", 1, 60)
    assert (str(first.date), first.topic_prefix) == ("2026-03-01", "plant/hall-1")
    assert (second.user_properties, second.content_type, second.correlation_data) == \
        ([], None, None)
    assert (str(second.date), second.topic_prefix) == ("2026-03-02", "plant/hall-2")
    assert (other.node_id, other.client_id) == ("node-b", "dev-2")


def test_a_restarted_job_takes_only_new_segments_and_tells_the_node(
        spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "events"
    out, ckpt = tmp_path / "parquet", tmp_path / "ckpt"
    land(root, "node-a", 1, [ev(s, s, "t/a", b"%d" % s) for s in range(1, 4)])
    land(root, "node-a", 2, [ev(s, s, "t/a", b"%d" % s) for s in range(4, 6)])
    run_once(spark, [str(root)], out, ckpt)
    assert [r.sequence for r in rows(spark, out)] == [1, 2, 3, 4, 5]

    # A segment that repeats sequence numbers (a node restored from an old copy) adds only
    # the new ones; a new node joins.
    land(root, "node-a", 3, [ev(s, s, "t/a", b"%d" % s) for s in range(5, 8)])
    land(root, "node-c", 1, [ev(1, 1, "t/c", b"c")])
    run_once(spark, [str(root)], out, ckpt)
    assert [(r.node_id, r.sequence) for r in rows(spark, out)] == [
        ("node-a", s) for s in range(1, 8)] + [("node-c", 1)]
    # Spark commits a batch's offsets to the source as the next batch starts.
    consumed = json.loads((root / "node-a" / "consumed.json").read_text())
    assert consumed["segment"] in (2, 3)
    run_once(spark, [str(root)], out, ckpt)  # nothing new: nothing written
    assert len(rows(spark, out)) == 8


def test_a_segment_removed_before_the_job_took_it_is_skipped(spark: Any,
                                                             tmp_path: Path) -> None:
    root = tmp_path / "events"
    land(root, "n", 1, [ev(1, 0, "t", b"1")])
    gone = land(root, "n", 2, [ev(2, 0, "t", b"2")])
    land(root, "n", 3, [ev(3, 0, "t", b"3")])
    gone.unlink()
    out = tmp_path / "parquet"
    run_once(spark, [str(root)], out, tmp_path / "ckpt")
    assert [r.sequence for r in rows(spark, out)] == [1, 3]


def test_example_queries(spark: Any, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "events"
    land(root, "node-a", 1, [
        ev(1, 0, "meters/1", b"10", client="meter-1"),
        ev(2, 10, "meters/1", b"11", client="meter-1"),
        ev(3, 20, "meters/2", b"20", client="meter-2"),
        ev(4, 35, "meters/1", b"12", client="meter-1"),  # 23:59:05: the next minute
    ])
    land(root, "node-b", 1, [ev(1, 40, "meters/2", b"21", client="meter-2")])
    out = tmp_path / "parquet"
    run_once(spark, [str(root)], out, tmp_path / "ckpt")
    queries.register(spark, str(out))

    per_minute = [(r.topic, r.minute.strftime("%H:%M"), r.messages)
                  for r in spark.sql(queries.MESSAGES_PER_TOPIC_PER_MINUTE).collect()]
    assert per_minute == [("meters/1", "23:58", 2), ("meters/2", "23:58", 1),
                          ("meters/1", "23:59", 1), ("meters/2", "23:59", 1)]
    latest = [(r.device, r.topic, r.value)
              for r in spark.sql(queries.LATEST_VALUE_PER_DEVICE).collect()]
    assert latest == [("meter-1", "meters/1", "12"), ("meter-2", "meters/2", "21")]

    # The same from the command line (in this process, so in this session).
    assert cli.main(["query", "latest", "--parquet", str(out)]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"\|meter-1\|meters/1\|12 +\|2026-03-01 23:59:05\|", shown), shown
    assert re.search(r"\|meter-2\|meters/2\|21 +\|2026-03-01 23:59:10\|", shown), shown
    # --conf as on `stream`: a setting reaches the session; a malformed one is refused (2).
    assert cli.main(["query", "per-minute", "--parquet", str(out),
                     "--conf", "spark.hive.test.marker=on"]) == 0
    assert spark.conf.get("spark.hive.test.marker") == "on"
    with pytest.raises(SystemExit) as refused:
        cli.main(["query", "latest", "--parquet", str(out), "--conf", "no-equals-sign"])
    assert refused.value.code == 2
    assert "--conf 'no-equals-sign': expected KEY=VALUE" in capsys.readouterr().err


def test_the_job_reads_an_s3_prefix_and_a_folder_once_each(spark: Any, tmp_path: Path,
                                                            s3: Any, s3_server: str) -> None:
    local = tmp_path / "events"
    shipped = land(local, "node-a", 1, [ev(1, 0, "t/a", b"a1")])
    land(local, "node-a", 2, [ev(2, 0, "t/a", b"a2")])  # not shipped yet
    s3.put_object(Bucket="events", Key=f"hive-events/node-a/{shipped.name}",
                  Body=shipped.read_bytes())  # kept locally too (s3-keep-local)
    remote = land(tmp_path / "elsewhere", "node-b", 1, [ev(1, 0, "t/b", b"b1")])
    s3.put_object(Bucket="events", Key=f"hive-events/node-b/{remote.name}",
                  Body=remote.read_bytes())
    s3.put_object(Bucket="events", Key="hive-events/node-b/notes.txt", Body=b"not a segment")
    out = tmp_path / "parquet"
    run_once(spark, ["s3://events/hive-events", str(local)], out, tmp_path / "ckpt",
             s3_endpoint=s3_server, s3_path_style=True)
    assert [(r.node_id, r.sequence, bytes(r.payload)) for r in rows(spark, out)] == [
        ("node-a", 1, b"a1"), ("node-a", 2, b"a2"), ("node-b", 1, b"b1")]
