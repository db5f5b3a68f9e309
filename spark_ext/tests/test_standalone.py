"""The job on a real standalone Spark cluster (``standalone`` in conftest.py: a master and a
worker started from the pyspark distribution's own classes on loopback, shared by the run), the
job given to it by ``spark-submit``, reading and writing a shared folder."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

import hive_ext_spark.stream
from _procs import HiveNode, kill_tree
from conftest import Standalone, spark_conf_args, spark_home

pytestmark = pytest.mark.timeout(300)


def spark_submit(cluster: Standalone, tmp_path: Path, script: str, args: list[str],
                 timeout: float, output: Path | None = None) -> float:
    """Give ``script`` with ``args`` to the standalone ``cluster`` by spark-submit, and wait
    until it succeeds; the seconds it took. It logs to ``tmp_path/submit.log``, where its output
    goes too unless ``output`` is given."""
    apps_before = set(cluster.apps())
    submit = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.url,
              "--executor-memory", "512m", "--total-executor-cores", "2",
              *spark_conf_args(tmp_path), script, *args]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    began = time.monotonic()
    log = tmp_path / "submit.log"
    with contextlib.ExitStack() as files:
        errors = files.enter_context(log.open("wb"))
        out = errors if output is None else files.enter_context(output.open("wb"))
        job = subprocess.Popen(submit, stdout=out, stderr=errors, env=env)
        try:
            assert job.wait(timeout) == 0, log.read_text()[-5000:]
        finally:
            kill_tree(job)
    took = time.monotonic() - began
    # The worker ran this job's executors (their logs are in its work folder), not a local
    # master.
    ran = set(cluster.apps()) - apps_before
    assert ran and all(list(app.glob("*/stderr")) for app in ran), log.read_text()
    return took


def test_spark_submit_to_a_standalone_cluster(standalone: Standalone, tmp_path: Path, spark: Any,
                                              hive_run: Any) -> None:
    shared = tmp_path / "shared"
    node: HiveNode = hive_run(f"folder = {shared / 'events'}\nsegment-max-age = 200ms\n")
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="line-1")
    publisher.connect("127.0.0.1", node.port)
    publisher.loop_start()
    for n in range(500):
        publisher.publish(f"factory/line-1/counter/{n % 5}", str(n), qos=1)
    publisher.publish("factory/done", b"1", qos=1).wait_for_publish(10)
    publisher.disconnect()
    publisher.loop_stop()
    node.stop()

    out, ckpt = shared / "parquet", shared / "checkpoint"
    took = spark_submit(standalone, tmp_path, hive_ext_spark.stream.__file__, [
        "--input", str(shared / "events"), "--output", str(out), "--checkpoint", str(ckpt),
        "--topic-depth", "2", "--available-now"], timeout=240)

    table = spark.read.parquet(str(out))
    assert table.count() == 501
    assert sorted(r.topic_prefix for r in table.select("topic_prefix").distinct().collect()) \
        == ["factory/done", "factory/line-1"]
    assert sorted(int(r.payload) for r in table.where("topic != 'factory/done'")
                  .select("payload").collect()) == list(range(500))
    print(f"\nspark-submit to the standalone cluster took {took:.1f} s")
