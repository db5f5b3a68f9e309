"""hive-spark dump: the events of landed segments as JSON lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hive_ext_api import PublishMessage

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
