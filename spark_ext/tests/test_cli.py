"""hive-spark dump: the events of landed segments as JSON lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hive_ext_api import PublishMessage

from _procs import kill_tree, wait_for
from conftest import spark_conf_args
from hive_ext_spark import EventLog

HIVE_SPARK = str(Path(sys.executable).with_name("hive-spark"))


def test_dump_prints_every_event_of_a_folder(tmp_path: Path) -> None:
    event_log = EventLog(tmp_path, "node-a", segment_max_bytes=64 * 1024,
                         segment_max_age_s=30, retention_max_bytes=1 << 30)
    event_log.open()
    event_log.append("dev-1", PublishMessage("a/b", b"21.5", 1, True, [("unit", "C")]))
    event_log.append("dev-2", PublishMessage("a/c", b"\xff\x00", 0))
    event_log.close()
    done = subprocess.run([HIVE_SPARK, "dump", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["node_id"], r["sequence"], r["topic"], r["qos"], r["retain"], r["client_id"],
             r["user_properties"]) for r in rows] == [
        ("node-a", 1, "a/b", 1, True, "dev-1", [["unit", "C"]]),
        ("node-a", 2, "a/c", 0, False, "dev-2", [])]
    assert (rows[0]["payload"], rows[1]["payload_base64"]) == ("21.5", "/wA=")


def test_dump_names_a_file_that_is_not_a_segment(tmp_path: Path) -> None:
    bogus = tmp_path / "x.events"
    bogus.write_bytes(b"hello")
    done = subprocess.run([HIVE_SPARK, "dump", str(bogus)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert f"{bogus}: too short for a segment header" in done.stderr


def test_stream_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole foreground process group (the job, its JVM, its Python
    workers): the job stops the query and the session and exits 0, with no traceback."""
    events, out, ckpt = tmp_path / "events", tmp_path / "parquet", tmp_path / "ckpt"
    event_log = EventLog(events, "node-a", segment_max_bytes=64 * 1024,
                         segment_max_age_s=30, retention_max_bytes=1 << 30)
    event_log.open()
    for n in range(20):
        event_log.append("dev-1", PublishMessage(f"a/{n % 3}", b"%d" % n, 1))
    event_log.close()
    output = tmp_path / "job.out"
    with output.open("wb") as sink:
        job = subprocess.Popen([sys.executable, "-m", "hive_ext_spark.cli", "stream",
                                "--input", str(events), "--output", str(out),
                                "--checkpoint", str(ckpt), "--trigger", "1",
                                "--master", "local[2]", *spark_conf_args(tmp_path)],
                               stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: (out / "_spark_metadata" / "0").exists() or job.poll() is not None,
                 120, "the first batch committed")
        assert job.poll() is None, output.read_text()
        time.sleep(1.5)  # into the next micro-batches
        os.killpg(job.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
        code = job.wait(60)
    finally:
        if job.poll() is None:
            kill_tree(job)  # type: ignore[arg-type]
    text = output.read_text()
    assert code == 0, text
    assert "Traceback" not in text and "Exception" not in text, text
    assert "hive-spark stream: stopped" in text, text
