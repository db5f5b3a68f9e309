"""The recovery tool's time for the data folders of a 3-node cluster.

    python spark_ext/bench/recovery.py [--clients 300] [--queued 30] [--retained 1000] [-t 2]

Starts three `hive run` nodes (replica-count 2, file persistence) in a temporary folder;
``clients`` persistent subscribers (spread over the nodes) subscribe to ``load/#`` and go
offline; ``queued`` QoS 1 messages to ``load/m`` are then queued for each, and ``retained``
retained messages are published; every node is killed -9 (the disaster), and
``hive-recovery-tool`` runs over the three folders in its own process (a fresh local Spark).
Prints the tool's summary, its wall time (JVM start included) and the transform's time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import paho.mqtt.client as mqtt

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from _procs import HiveNode, cluster_body, free_port

TOOL = str(Path(sys.executable).with_name("hive-recovery-tool"))
QUEUE = "<mqtt><queued-messages><max-queue-size>100000</max-queue-size></queued-messages></mqtt>"


def connect(node: HiveNode, name: str, clean: bool) -> mqtt.Client:
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name, clean_session=clean)
    c.connect("127.0.0.1", node.port, keepalive=30)
    c.loop_start()
    return c


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=300)
    parser.add_argument("--queued", type=int, default=30)
    parser.add_argument("--retained", type=int, default=1000)
    parser.add_argument("-t", "--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hive-recovery-bench-") as tmp_name:
        tmp = Path(tmp_name)
        ports = [free_port() for _ in range(3)]
        nodes = [HiveNode(tmp / f"node{i}", "", cluster_body(port, ports).replace(
            "</cluster>", "<replication><replica-count>2</replica-count></replication>"
                          "</cluster>") + QUEUE) for i, port in enumerate(ports)]
        try:
            for node in nodes:
                node.start()
            for node in nodes:
                node.wait_for_log(r"Cluster size = 3", timeout=30)
            began = time.monotonic()
            for n in range(args.clients):
                sub = connect(nodes[n % 3], f"device-{n:05d}", clean=False)
                sub.subscribe("load/#", 1)
                time.sleep(0.02)
                sub.disconnect()
                sub.loop_stop()
            time.sleep(1.0)
            pub = connect(nodes[0], "bench-publisher", clean=True)
            infos = [pub.publish("load/m", f"m-{n}", qos=1) for n in range(args.queued)]
            infos += [pub.publish(f"state/{n}", f"r-{n}", qos=1, retain=True)
                      for n in range(args.retained)]
            for info in infos:
                info.wait_for_publish(60)
            pub.disconnect()
            pub.loop_stop()
            time.sleep(1.0)
            print(f"data written in {time.monotonic() - began:.1f} s")
        finally:
            for node in nodes:
                if node.proc is not None and node.proc.poll() is None:
                    os.kill(node.proc.pid, 9)
            for node in nodes:
                node.kill()
        size = sum(f.stat().st_size for n in nodes for f in n.data_dir.rglob("sessions.db*"))
        began = time.monotonic()
        done = subprocess.run([TOOL, "-i", *(str(n.data_dir) for n in nodes),
                               "-e", str(tmp / "export"), "-t", str(args.threads), "--json"],
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
        wall = time.monotonic() - began
        if done.returncode != 0:
            print(done.stderr[-3000:])
            return 1
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(summary, indent=1))
        print(f"stores: {size / 1e6:.1f} MB in 3 folders; hive-recovery-tool -t {args.threads}: "
              f"{wall:.1f} s wall (JVM start included), the transform {summary['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
