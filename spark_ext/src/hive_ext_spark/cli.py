"""``hive-spark``: the Spark side of hive-ext-spark.

    hive-spark stream --input FOLDER|s3://B/P --output OUT --checkpoint CKPT [...]
    hive-spark query per-minute|latest --parquet OUT [--limit N] [--master URL] [--conf K=V]
    hive-spark dump SEGMENT|FOLDER            (the events of landed segments, as JSON lines)
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from hive_ext_spark._deps import MissingDependency
from hive_ext_spark._segment import LANDED_SUFFIX, SegmentError, read_segment


def _dump(paths: Sequence[str]) -> int:
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        files.extend(sorted(path.rglob(f"*{LANDED_SUFFIX}")) if path.is_dir() else [path])
    for path in files:
        try:
            segment = read_segment(path.read_bytes())
        except (OSError, SegmentError) as exc:
            print(f"hive-spark dump: {path}: {exc}", file=sys.stderr)
            return 1
        for event in segment.events:
            row: dict[str, object] = {
                "node_id": segment.header.node_id, "segment": segment.header.segment,
                "sequence": event.sequence, "timestamp_us": event.timestamp_us,
                "topic": event.topic, "qos": event.qos, "retain": event.retain,
                "client_id": event.client_id, "user_properties": event.user_properties}
            try:
                row["payload"] = event.payload.decode()
            except UnicodeDecodeError:
                row["payload_base64"] = base64.b64encode(event.payload).decode()
            print(json.dumps(row))
    return 0


def _query(args: argparse.Namespace) -> int:
    from hive_ext_spark.queries import QUERIES, register
    from hive_ext_spark.stream import session, spark_conf

    spark = session(args.master, app_name=f"hive-spark query {args.name}",
                    conf=spark_conf(args.conf, "hive-spark query"))
    register(spark, args.parquet)
    spark.sql(QUERIES[args.name]).show(args.limit, truncate=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hive-spark", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    stream = commands.add_parser("stream", help="stream event segments to Parquet")
    query = commands.add_parser("query", help="run an example query on the Parquet table")
    query.add_argument("name", choices=("per-minute", "latest"))
    query.add_argument("--parquet", required=True)
    query.add_argument("--limit", type=int, default=50)
    query.add_argument("--master", help="Spark master URL (default: local)")
    query.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="a Spark setting; repeat for several")
    dump = commands.add_parser("dump", help="print the events of landed segments")
    dump.add_argument("paths", nargs="+", metavar="SEGMENT|FOLDER")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["stream"]:  # the job has its own parser (spark-submit uses it too)
        try:
            from hive_ext_spark import stream as job
        except MissingDependency as exc:
            print(f"hive-spark: {exc}", file=sys.stderr)
            return 2
        return job.run(job.arguments(argv[1:], stream))
    args = parser.parse_args(argv)
    if args.command == "dump":
        return _dump(args.paths)
    try:
        return _query(args)
    except MissingDependency as exc:
        print(f"hive-spark: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
