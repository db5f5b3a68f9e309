"""Fixtures: nodes as real processes, one local Spark session and one standalone Spark cluster
for the whole run, moto's S3."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from _procs import HiveNode, free_port, kill_tree, wait_for_match

# What TESTBED.md says PySpark needs here: this Python for workers, loopback, no UI.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
# moto's S3 takes any key; set before Spark starts, so its Python workers inherit them.
for _key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ[_key] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"

SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
              "spark.driver.memory": "1g", "spark.sql.session.timeZone": "UTC"}


def spark_conf_args(tmp: Path) -> list[str]:
    """The same settings as ``--conf`` arguments for a job in its own process."""
    conf = {**SPARK_CONF, "spark.local.dir": str(tmp / "spark-local"),
            "spark.sql.warehouse.dir": str(tmp / "warehouse")}
    return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]


@pytest.fixture
def hive_run(tmp_path: Path) -> Iterator[Callable[..., HiveNode]]:
    """``hive_run(properties="...", body="...", start=True)``: a node, stopped at the end."""
    nodes: list[HiveNode] = []

    def make(properties: str = "", body: str = "", start: bool = True,
             name: str | None = None, **kwargs: Any) -> HiveNode:
        node = HiveNode(tmp_path / (name or f"node{len(nodes)}"), properties, body, **kwargs)
        nodes.append(node)
        return node.start() if start else node

    yield make
    for node in nodes:
        node.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local Spark session (2 cores) for every test that needs one."""
    from hive_ext_spark.stream import session

    tmp = tmp_path_factory.mktemp("spark")
    conf = {**SPARK_CONF, "spark.local.dir": str(tmp / "local"),
            "spark.sql.warehouse.dir": str(tmp / "warehouse")}
    spark = session("local[2]", app_name="hive-ext-spark tests", conf=conf)
    yield spark
    spark.stop()


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


@dataclass
class Standalone:
    """A standalone Spark cluster: its master's URL and the worker's work folder."""

    url: str
    work: Path

    def apps(self) -> list[Path]:
        """The folder of each application the worker ran executors for."""
        return list(self.work.glob("app-*"))


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A master and one worker (2 cores, 1 GiB) on loopback, for the whole run; stopped by PID
    (the executors with the worker)."""
    folder = tmp_path_factory.mktemp("standalone")
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
        yield Standalone(url, folder / "work")
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 server on a free loopback port; its endpoint URL. Reset per test by s3."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(s3_server: str) -> Iterator[Any]:
    """A boto3 client on a fresh moto state with the bucket ``events``."""
    import urllib.request

    import boto3

    urllib.request.urlopen(urllib.request.Request(f"{s3_server}/moto-api/reset", method="POST"),
                           timeout=5).close()
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    client.create_bucket(Bucket="events")
    yield client
