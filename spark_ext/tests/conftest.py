"""Fixtures: nodes as real processes, one local Spark session for the whole run, moto's S3."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from _procs import HiveNode

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
