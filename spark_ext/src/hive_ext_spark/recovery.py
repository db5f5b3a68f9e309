"""``hive-recovery-tool``: the data folders of a cluster's nodes -> one backup file, on Spark.

    hive-recovery-tool -i DATA1 -i DATA2 DATA3 -e OUT [-t N] [-so] [-io key=value ...]
    spark-submit --master spark://HOST:7077 $(python -c 'import hive_ext_spark.recovery as m;
        print(m.__file__)') -i /shared/data1 /shared/data2 -e /shared/export

The stores of every folder (the node's own ``persistence/sessions.db``, the replicas it holds
for other nodes, its ``cluster-backup/``; see :func:`hive_ext_api.backup.data_folder_stores`)
become an RDD over ``-t`` partitions. Executors read them (:func:`hive_ext_api.backup.read_store`)
and emit one row per client and per retained message: ``(kind, key)`` -> ``(version, body,
queued)``, the body already encoded as the backup holds it. Spark keeps, per ``(kind, key)``,
the row with the highest version (the newest copy; equal versions are copies of one state, and
the larger body is taken so the output does not depend on the order of the inputs), sorts the
winners by kind and key, and the driver streams them (``toLocalIterator``) into a
:class:`hive_ext_api.backup.BackupWriter`: ``OUT/<id>.hive-<hive-broker version>.backup``.

Each store also yields one report row (kind 0, sorted first): how much it held, or why it could
not be read. A store that fails is a failure of the run (exit 1, nothing written) unless
``--skip-bad`` is given: then its rows are left out and a warning names it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hive_ext_api.backup import (
    KIND_CLIENT,
    KIND_RETAINED,
    BackupError,
    BackupWriter,
    ClientState,
    backup_file_name,
    data_folder_stores,
    encode_client,
    encode_retained,
    new_backup_id,
    read_store,
)

from hive_ext_spark._deps import require

PROG = "hive-recovery-tool"
KIND_REPORT = 0  # a store's report row: sorted before every record
# -io keys besides spark.*: what each sets
TOOL_OPTIONS = {
    "master": "the Spark master URL (like --master)",
    "app-name": "the Spark application's name (default hive-recovery-tool)",
    "source": "the backup header's source field (default hive-recovery-tool)",
}

# (kind, key), (version, body, queued messages, copies seen)
Row = tuple[tuple[int, str], tuple[int, bytes, int, int]]


class ToolError(Exception):
    """A problem with the inputs or options; the message says what and where."""


# -- on the executors ------------------------------------------------------------------------


def read_one(store: tuple[str, str], sessions_only: bool) -> list[Row]:
    """Every record of one store, and its report row; a store that fails yields only its
    report (so a half-read store never contributes records)."""
    folder, path = store
    rows: list[Row] = []
    clients = retained = queued = 0
    try:
        for state in read_store(Path(path)):
            if isinstance(state, ClientState):
                count = 0 if sessions_only else len(state.queue)
                body = encode_client(state, sessions_only=sessions_only)
                rows.append(((KIND_CLIENT, state.session.client_id),
                             (state.version, body, count, 1)))
                clients += 1
                queued += count
            elif not sessions_only:
                rows.append(((KIND_RETAINED, state.message.topic),
                             (state.version, encode_retained(state), 0, 1)))
                retained += 1
    except (BackupError, OSError) as exc:
        failed = {"folder": folder, "store": path, "error": str(exc)}
        return [((KIND_REPORT, path), (0, json.dumps(failed).encode(), 0, 1))]
    report = {"folder": folder, "store": path, "error": None, "clients": clients,
              "retained": retained, "queued": queued}
    rows.append(((KIND_REPORT, path), (0, json.dumps(report).encode(), 0, 1)))
    return rows


def newer(a: tuple[int, bytes, int, int], b: tuple[int, bytes, int, int]
          ) -> tuple[int, bytes, int, int]:
    """The newest of two copies (then the larger body: any, but always the same one)."""
    copies = a[3] + b[3]
    best = a if (a[0], a[1]) >= (b[0], b[1]) else b
    return (best[0], best[1], best[2], copies)


# -- on the driver ---------------------------------------------------------------------------


@dataclass(slots=True)
class Summary:
    path: str | None = None
    clients: int = 0
    retained: int = 0
    queued: int = 0
    duplicates_dropped: int = 0
    stores_read: int = 0
    records_read: int = 0  # clients and retained messages in all stores, duplicates included
    folders: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    partitions: int = 0
    sessions_only: bool = False


def hive_version() -> str:
    try:
        return importlib.metadata.version("hive-broker")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def parse_internal_options(pairs: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """``-io key=value`` -> (Spark settings, tool options); an unknown key is a ToolError."""
    spark: dict[str, str] = {}
    tool: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ToolError(f"-io {pair!r}: expected key=value")
        if key.startswith("spark."):
            spark[key] = value
        elif key in TOOL_OPTIONS:
            if not value:
                raise ToolError(f"-io {key}: needs a value ({TOOL_OPTIONS[key]})")
            tool[key] = value
        else:
            known = ", ".join([*TOOL_OPTIONS, "spark.*"])
            raise ToolError(f"-io {pair!r}: unknown option {key!r} (known: {known})")
    return spark, tool


def list_stores(folders: Sequence[str], skip_bad: bool, summary: Summary
                ) -> list[tuple[str, str]]:
    """(folder, store) for every store of every folder; a folder that is not a Hive data
    folder is a ToolError, or skipped with ``skip_bad``."""
    stores: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name in folders:
        folder = str(Path(name).absolute())
        if folder in seen:
            continue
        seen.add(folder)
        try:
            found = data_folder_stores(Path(folder))
        except BackupError as exc:
            if not skip_bad:
                raise ToolError(f"{exc} (give --skip-bad to export the other folders)") from None
            summary.skipped.append({"folder": folder, "error": str(exc)})
            continue
        summary.folders += 1
        stores.extend((folder, str(store)) for store in found)
    if not stores:
        raise ToolError("no store to read in the folders given")
    return stores


def _progress_of_jobs(spark: Any, group: str, stop: threading.Event) -> None:
    """A tqdm bar of the Spark tasks of ``group``'s jobs (on a TTY only)."""
    from tqdm import tqdm

    tracker = spark.sparkContext.statusTracker()
    with tqdm(desc="reading stores (Spark tasks)", unit="task", disable=None,
              file=sys.stderr) as bar:
        if bar.disable:
            return
        while True:
            last = stop.wait(0.5)
            done = total = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job else ():
                    stage = tracker.getStageInfo(stage_id)
                    if stage:
                        done += stage.numCompletedTasks
                        total += stage.numTasks
            bar.total = total
            # when count() returned, every task ran (those of stages Spark skipped had run in
            # the job that sampled the keys for sortByKey)
            bar.n = total if last else done
            bar.refresh()
            if last:
                return


def export(spark: Any, folders: Sequence[str], out: str, *, partitions: int,
           sessions_only: bool = False, skip_bad: bool = False,
           source: str = PROG, warn: Any = None) -> Summary:
    """The transform: read, dedupe, write. Returns what was written (``path`` None when a
    store failed and ``skip_bad`` is off: then nothing is written and ToolError is raised)."""
    from pyspark import StorageLevel
    from tqdm import tqdm

    began = time.monotonic()
    summary = Summary(partitions=partitions, sessions_only=sessions_only)
    stores = list_stores(folders, skip_bad, summary)
    sc = spark.sparkContext
    group = f"hive-recovery-tool-{os.getpid()}-{time.monotonic_ns()}"
    sc.setJobGroup(group, "hive-recovery-tool: read, dedupe and sort the stores")
    so = sessions_only
    winners = (sc.parallelize(stores, max(1, min(partitions, len(stores))))
               .flatMap(lambda store: read_one(store, so))
               .reduceByKey(newer, partitions)
               .sortByKey(True, partitions)
               .persist(StorageLevel.MEMORY_AND_DISK))  # counted, then streamed: read once
    stop = threading.Event()
    watcher = threading.Thread(target=_progress_of_jobs, args=(spark, group, stop), daemon=True)
    watcher.start()
    try:
        total = winners.count()
    finally:
        stop.set()
        watcher.join()
    path = Path(out) / backup_file_name(new_backup_id(), hive_version())
    writer = BackupWriter(path, source=source, hive_version=hive_version(),
                          sessions_only=sessions_only)
    bad: set[str] = set()
    try:
        with tqdm(total=total, desc="writing the backup", unit="rec", disable=None,
                  file=sys.stderr) as bar:
            for (kind, key), (_version, body, queued, copies) in winners.toLocalIterator():
                bar.update(1)
                if kind == KIND_REPORT:
                    report = json.loads(body)
                    if report["error"] is None:
                        summary.stores_read += 1
                        summary.records_read += report["clients"] + report["retained"]
                        continue
                    if not skip_bad:
                        raise ToolError(f"{report['folder']}: {report['error']} "
                                        "(give --skip-bad to export the other folders)")
                    bad.add(key)
                    summary.skipped.append({"folder": report["folder"], "store": key,
                                            "error": report["error"]})
                    continue
                writer.add_raw(kind, body)
                writer.count_queued(queued)
                summary.duplicates_dropped += copies - 1
        if summary.stores_read == 0:
            raise ToolError("no store could be read: nothing to export")
        summary.path = str(writer.close())
    except BaseException:
        writer.abort()
        raise
    finally:
        winners.unpersist()
        sc.setLocalProperty("spark.jobGroup.id", None)
    summary.clients = writer.counts.clients
    summary.retained = writer.counts.retained
    summary.queued = writer.counts.queued
    summary.seconds = round(time.monotonic() - began, 3)
    for item in summary.skipped:
        if warn is not None:
            warn(f"{PROG}: warning: skipped {item.get('store', item['folder'])} "
                 f"({item['error']})")
    return summary


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Merge the data folders of Hive nodes into one backup file, "
        "without the duplicates that replication made (a Spark job).",
        epilog="-io keys: " + "; ".join(f"{k}: {v}" for k, v in TOOL_OPTIONS.items())
        + "; spark.*: any Spark setting (e.g. -io spark.executor.memory=2g)")
    parser.add_argument("-i", "--import", dest="inputs", action="extend", nargs="+",
                        required=True, metavar="DATA",
                        help="a node's data folder; repeat, or give several after one -i")
    parser.add_argument("-e", "--export", dest="export", required=True, metavar="OUT",
                        help="the folder the backup file is written to")
    parser.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="Spark parallelism: partitions, and local[N] without a master "
                             "(default: the processor count)")
    parser.add_argument("-so", "--sessions-only", action="store_true",
                        help="sessions and subscriptions only: no queued or in-flight messages, "
                             "no retained messages, no shared subscriptions")
    parser.add_argument("-io", "--internal-option", action="append", default=[],
                        metavar="KEY=VALUE", help="an internal option (see below); repeat")
    parser.add_argument("--master", help="Spark master URL (default: spark-submit's, or "
                                         "local[N])")
    parser.add_argument("--skip-bad", action="store_true",
                        help="export the other folders when one cannot be read (a warning "
                             "names it)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"-t must be 1 or more, not {args.threads}")
    try:
        args.spark_conf, args.tool_options = parse_internal_options(args.internal_option)
    except ToolError as exc:
        parser.error(str(exc))
    return args


def session_for(args: argparse.Namespace) -> tuple[Any, bool]:
    """(a Spark session, whether this run made it): an active session is used as it is."""
    require("pyspark", PROG)
    require("tqdm", PROG)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    from hive_ext_spark.stream import session

    master = args.master or args.tool_options.get("master")
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = f"local[{args.threads}]"  # not under spark-submit: a local run
    conf = {"spark.ui.showConsoleProgress": "false", **args.spark_conf}
    return session(master, app_name=args.tool_options.get("app-name", PROG), conf=conf), True


def run(args: argparse.Namespace) -> int:
    def warn(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    spark, made = session_for(args)
    try:
        summary = export(spark, args.inputs, args.export, partitions=args.threads,
                         sessions_only=args.sessions_only, skip_bad=args.skip_bad,
                         source=args.tool_options.get("source", PROG), warn=warn)
    except ToolError as exc:
        warn(f"{PROG}: error: {exc}")
        return 1
    finally:
        if made:
            spark.stop()
    if args.json:
        print(json.dumps(asdict(summary)), flush=True)
    else:
        print(f"{PROG}: {summary.clients} clients ({summary.queued} queued messages), "
              f"{summary.retained} retained messages; {summary.duplicates_dropped} duplicates "
              f"dropped; {summary.stores_read} stores read from {summary.folders} folders"
              f"{f', {len(summary.skipped)} skipped' if summary.skipped else ''}; "
              f"{summary.seconds:.1f} s\n{summary.path}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    with contextlib.suppress(BrokenPipeError):
        return run(args)
    return 1


if __name__ == "__main__":  # spark-submit .../hive_ext_spark/recovery.py -i ... -e ...
    sys.exit(main())

