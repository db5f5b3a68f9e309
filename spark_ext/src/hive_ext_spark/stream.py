"""The streaming job: landed event segments -> Parquet, partitioned by date and topic prefix.

    hive-spark stream --input DATA/extensions/spark/events --output OUT --checkpoint CKPT
    spark-submit --master spark://HOST:7077 $(python -c 'import hive_ext_spark.stream as m;
        print(m.__file__)') --input /shared/events --output /shared/parquet --checkpoint ...

Exactly once across restarts of the job, of the brokers, or both: the source's offsets are
per-node segment and sequence numbers (see :mod:`hive_ext_spark._source`), Spark keeps them in
the checkpoint, and the Parquet file sink commits each micro-batch once in ``_spark_metadata``
(read the output with Spark, which follows that log: files of a batch cut short by a kill are
not part of the table).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from hive_ext_spark._deps import require

require("pyspark", "the Spark job")

from pyspark.sql import Column, DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming.query import StreamingQuery  # noqa: E402

from hive_ext_spark._inputs import input_spec  # noqa: E402
from hive_ext_spark._source import SOURCE_NAME, HiveEventsDataSource  # noqa: E402

PARTITION_COLUMNS = ("date", "topic_prefix")


def topic_prefix(depth: int) -> Column:
    """The first ``depth`` levels of the topic, joined by '/' (``plant/hall-1`` for depth 2)."""
    return F.array_join(F.slice(F.split(F.col("topic"), "/"), 1, depth), "/")


def with_partitions(events: DataFrame, topic_depth: int) -> DataFrame:
    # The date is the UTC day: the job sets spark.sql.session.timeZone to UTC.
    return (events.withColumn("date", F.to_date(F.col("timestamp")))
            .withColumn("topic_prefix", topic_prefix(topic_depth)))


def session(master: str | None = None, app_name: str = "hive-spark-stream",
            conf: dict[str, str] | None = None) -> SparkSession:
    """A session for the job; settings from ``spark-submit`` or ``--conf`` win over ours."""
    # Executors must run this Python (it has pyarrow and this package), not whatever is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {"spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "4"}
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def read_events(spark: SparkSession, inputs: Sequence[dict[str, Any]],
                stream: bool = True) -> DataFrame:
    spark.dataSource.register(HiveEventsDataSource)
    reader = spark.readStream if stream else spark.read
    return reader.format(SOURCE_NAME).option("inputs", json.dumps(list(inputs))).load()


def start(spark: SparkSession, inputs: Sequence[dict[str, Any]], output: str, checkpoint: str,
          topic_depth: int = 1, trigger_seconds: float | None = 5.0,
          available_now: bool = False, query_name: str | None = None) -> StreamingQuery:
    """Start the query; ``available_now`` takes what is landed now and stops."""
    if topic_depth < 1:
        raise ValueError(f"--topic-depth must be 1 or more, not {topic_depth}")
    events = with_partitions(read_events(spark, inputs), topic_depth)
    writer = (events.writeStream.format("parquet").outputMode("append")
              .option("path", output).option("checkpointLocation", checkpoint)
              .partitionBy(*PARTITION_COLUMNS))
    if query_name:
        writer = writer.queryName(query_name)
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_seconds is not None:
        writer = writer.trigger(processingTime=f"{trigger_seconds:g} seconds")
    return writer.start()


def arguments(argv: Sequence[str] | None = None,
              parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    parser = parser or argparse.ArgumentParser(
        prog="hive-spark stream", description="Stream Hive's event segments to Parquet.")
    parser.add_argument("--input", action="append", required=True, metavar="FOLDER|s3://B/P",
                        help="where nodes land segments (a folder with one sub-folder per node, "
                             "or an S3 prefix); repeat for several")
    parser.add_argument("--output", required=True, help="the Parquet table's folder")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint folder")
    parser.add_argument("--topic-depth", type=int, default=1,
                        help="topic levels in the topic_prefix partition column (default 1)")
    parser.add_argument("--trigger", type=float, default=5.0, metavar="SECONDS",
                        help="seconds between micro-batches (default 5)")
    parser.add_argument("--available-now", action="store_true",
                        help="take what is landed now, write it, and stop")
    parser.add_argument("--master", help="Spark master URL (default: spark-submit's, or local)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting; repeat for several")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL (default: AWS)")
    parser.add_argument("--s3-region", default="us-east-1")
    parser.add_argument("--s3-path-style", action="store_true",
                        help="path-style S3 addressing (most S3-compatible servers)")
    return parser.parse_args(argv)


def spark_conf(pairs: Sequence[str], command: str = "hive-spark stream") -> dict[str, str]:
    """``--conf KEY=VALUE`` arguments as settings; a malformed one exits with status 2."""
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            print(f"{command}: --conf {pair!r}: expected KEY=VALUE", file=sys.stderr)
            raise SystemExit(2)
        conf[key.strip()] = value.strip()
    return conf


def run(args: argparse.Namespace) -> int:
    try:
        inputs = [input_spec(i, args.s3_region, args.s3_endpoint, args.s3_path_style)
                  for i in args.input]
    except ValueError as exc:
        raise SystemExit(f"hive-spark stream: {exc}") from None
    spark = session(args.master, conf=spark_conf(args.conf))
    stop_asked = _stop_on_signals()  # after the session: pyspark sets a SIGINT handler too
    query = start(spark, inputs, args.output, args.checkpoint, args.topic_depth, args.trigger,
                  args.available_now)
    print(f"hive-spark stream: query {query.id} running, writing {args.output} "
          "(Ctrl-C or SIGTERM stops it cleanly)", flush=True)
    # Short waits: the signal handler only sets a flag, and the stop happens here, between two
    # calls into the JVM (an exception raised inside a py4j call breaks its connection).
    while not query.awaitTermination(1):
        if stop_asked.is_set():
            print("hive-spark stream: stopping (a batch not committed yet is taken again at "
                  "the next start)", flush=True)
            query.stop()
            break
    spark.stop()
    if stop_asked.is_set():
        print("hive-spark stream: stopped", flush=True)
    return 0


def _stop_on_signals() -> threading.Event:
    """SIGINT (Ctrl-C) and SIGTERM ask the job to stop; a second one ends the process at once."""
    asked = threading.Event()

    def ask(signum: int, frame: object) -> None:
        if asked.is_set():
            os._exit(128 + signum)
        asked.set()

    signal.signal(signal.SIGINT, ask)
    signal.signal(signal.SIGTERM, ask)
    return asked


def main(argv: Sequence[str] | None = None) -> int:
    return run(arguments(argv))


if __name__ == "__main__":  # spark-submit .../hive_ext_spark/stream.py ...
    sys.exit(main())
