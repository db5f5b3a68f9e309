"""End-to-end latency of the pipeline: PUBLISH acknowledged -> row visible in the Parquet table.

    python spark_ext/bench/latency.py [--seconds 60] [--rate 20] [--segment-max-age 1s]
                                      [--trigger 1]

Starts one `hive run` node with the extension and `hive-spark stream` on its events folder
(both in a temporary folder, stopped by PID at the end), publishes ``rate`` QoS 1 messages per
second whose payload is the time of their PUBACK, and reports when each row became visible: the
time the job wrote the file-sink log entry (``_spark_metadata/<batch>``) that lists its file,
which is when Spark readers start to see it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pyarrow.parquet as pq

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def visible_at(out: Path) -> dict[str, float]:
    """Parquet file (absolute path) -> when its batch entered ``_spark_metadata``."""
    files: dict[str, float] = {}
    for entry in (out / "_spark_metadata").glob("[0-9]*"):
        committed = entry.stat().st_mtime
        for line in entry.read_text().splitlines()[1:]:
            path = json.loads(line)["path"].removeprefix("file:")
            # every tenth entry (N.compact) lists the earlier batches' files again
            files[path] = min(committed, files.get(path, committed))
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=float, default=20)
    parser.add_argument("--segment-max-age", default="1s")
    parser.add_argument("--trigger", type=float, default=1.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hive-spark-latency-"))
    events, out, ckpt = tmp / "events", tmp / "parquet", tmp / "ckpt"
    port = free_port()
    (tmp / "config.xml").write_text(
        f"<hivemq><listeners><tcp-listener><port>{port}</port><bind-address>127.0.0.1"
        "</bind-address></tcp-listener></listeners></hivemq>")
    (tmp / "spark.properties").write_text(
        f"folder = {events}\nsegment-max-age = {args.segment_max_age}\n")
    env = {**os.environ, "HIVE_SPARK_CONFIG": str(tmp / "spark.properties"),
           "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    with (tmp / "hive.log").open("wb") as log:
        node = subprocess.Popen([str(BIN / "hive"), "run", "--config", str(tmp / "config.xml"),
                                 "--data-dir", str(tmp / "data")], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
    with (tmp / "job.log").open("wb") as log:
        job = subprocess.Popen(
            [str(BIN / "hive-spark"), "stream", "--input", str(events), "--output", str(out),
             "--checkpoint", str(ckpt), "--trigger", str(args.trigger), "--master", "local[2]",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while not (ckpt / "offsets").is_dir():  # the job runs its first (empty) batch
            time.sleep(0.2)
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="latency")
        client.connect("127.0.0.1", port)
        client.loop_start()
        sent = 0
        began = time.time()
        while time.time() - began < args.seconds:
            client.publish("latency/probe", repr(time.time()), qos=1).wait_for_publish(5)
            sent += 1
            time.sleep(max(0.0, began + sent / args.rate - time.time()))
        client.disconnect()
        client.loop_stop()
        deadline = time.time() + 120
        latencies: list[float] = []
        while time.time() < deadline:
            committed = visible_at(out)
            latencies = []
            for path, at in committed.items():
                for value in pq.read_table(path, columns=["payload"]).column("payload"):
                    latencies.append(at - float(value.as_py()))
            if len(latencies) >= sent:
                break
            time.sleep(1)
    finally:
        os.killpg(job.pid, signal.SIGTERM)  # the job's own session: its JVM and workers
        node.send_signal(signal.SIGTERM)
        job.wait(30)
        node.wait(30)
    latencies.sort()
    print(f"{len(latencies)} of {sent} rows; segment-max-age {args.segment_max_age}, trigger "
          f"{args.trigger:g} s: latency p50 {statistics.median(latencies):.2f} s, p95 "
          f"{latencies[int(len(latencies) * 0.95) - 1]:.2f} s, max {latencies[-1]:.2f} s")
    return 0 if len(latencies) == sent else 1


if __name__ == "__main__":
    sys.exit(main())
