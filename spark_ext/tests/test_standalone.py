"""The job on a real standalone Spark cluster: a master and a worker started from the pyspark
distribution's own classes on loopback, the job given to it by ``spark-submit``, reading and
writing a shared folder. Master, worker and executors are stopped by PID afterwards."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

import hive_ext_spark.stream
from _procs import HiveNode, free_port, kill_tree, wait_for_match
from conftest import spark_conf_args

pytestmark = pytest.mark.timeout(300)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class Daemon:
    """A Spark master or worker JVM (spark-class execs java: the PID is the JVM's)."""

    def __init__(self, folder: Path, name: str, args: list[str]) -> None:
        self.log = folder / f"{name}.log"
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOG_DIR": str(folder / "logs"), "SPARK_WORKER_DIR": str(folder / "work")}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args],
                                         stdout=out, stderr=subprocess.STDOUT, env=env)

    def wait_for_log(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        return wait_for_match(pattern, self._running_log, timeout,
                              f"{pattern!r} in {self.log.name}")

    def _running_log(self) -> str:
        assert self.proc.poll() is None, self.log.read_text()
        return self.log.read_text()

    def stop(self) -> None:
        kill_tree(self.proc, sig=15)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """A master and one worker (2 cores, 1 GiB) on loopback; the master's URL."""
    folder = tmp_path / "standalone"
    folder.mkdir()
    port = free_port()
    daemons: list[Daemon] = []
    try:
        master = Daemon(folder, "master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
            "--webui-port", str(free_port())])
        daemons.append(master)
        master.wait_for_log(r"I have been elected leader")
        url = f"spark://127.0.0.1:{port}"
        worker = Daemon(folder, "worker", [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
            "--webui-port", str(free_port()), "--cores", "2", "--memory", "1G",
            "--work-dir", str(folder / "work"), url])
        daemons.append(worker)
        worker.wait_for_log(r"Successfully registered with master")
        yield url
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


def spark_submit(master: str, tmp_path: Path, script: str, args: list[str], timeout: float,
                 output: Path | None = None) -> float:
    """Give ``script`` with ``args`` to the standalone cluster at ``master`` by spark-submit, and
    wait until it succeeds; the seconds it took. It logs to ``tmp_path/submit.log``, where its
    output goes too unless ``output`` is given."""
    submit = [str(spark_home() / "bin" / "spark-submit"), "--master", master,
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
    # The worker ran the executors (their logs are in its work folder), not a local master.
    assert list((tmp_path / "standalone" / "work").glob("app-*/*/stderr")), log.read_text()
    return took


def test_spark_submit_to_a_standalone_cluster(standalone: str, tmp_path: Path, spark: Any,
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
