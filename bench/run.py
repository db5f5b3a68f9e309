"""Run the Hive benchmark: Hive and Mosquitto side by side, in one run, reporting ratios.

    .venv/bin/python bench/run.py                      # everything, both brokers, 1 round
    .venv/bin/python bench/run.py --quick              # smoke run (short, 2,000 connections)
    .venv/bin/python bench/run.py --brokers mosquitto --scenarios qos0,latency --rounds 3

Each measurement starts a fresh broker process pinned to core 0 (the generator runs on
core 1), runs one scenario, and stops the broker by PID.  Brokers alternate within each
scenario (hive, mosquitto, hive, mosquitto, ... for --rounds N); the median per broker
and the ratio hive/mosquitto are reported on stdout and appended as markdown to --out.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import failover  # noqa: E402
import loadgen  # noqa: E402

REPO = HERE.parent
DEFAULT_HIVE = f"{REPO / '.venv' / 'bin' / 'hive'} run --config {{config}} --data-dir {{data_dir}}"
HIVE_READY = "Started Hive in"
QUEUE_SIZE = 100_000

HIVE_CONFIG = """<hivemq>
  <listeners>
    <tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address></tcp-listener>
  </listeners>
  <mqtt><queued-messages><max-queue-size>{queue}</max-queue-size></queued-messages></mqtt>{cluster}{rest}
</hivemq>
"""

# With --scrape-interval every Hive node gets the REST API (scraped or not, so that the nodes
# compared differ only in being scraped).
HIVE_REST = """
  <rest-api><enabled>true</enabled><listeners><http>
    <port>{rest_port}</port><bind-address>127.0.0.1</bind-address>
  </http></listeners></rest-api>"""
PROMETHEUS_PATH = "/api/v1/metrics/prometheus"

# The cluster scenarios' nodes: static discovery lists every node's cluster port. Failure
# detection (heartbeat, TCP health check) keeps its defaults.
HIVE_CLUSTER = """
  <cluster>
    <enabled>true</enabled>
    <transport><tcp>
      <bind-address>127.0.0.1</bind-address><bind-port>{cluster_port}</bind-port>
    </tcp></transport>
    <discovery><static>{nodes}</static></discovery>{replication}
  </cluster>"""
HIVE_REPLICATION = """
    <replication><replica-count>{count}</replica-count></replication>"""

# Mosquitto 2.0 drops an outgoing QoS 0 message when the client's outgoing packet count
# reaches max_queued_messages (db__ready_for_flight); with max_inflight_messages 0 QoS 0 is
# never dropped and QoS 1 has no per-client in-flight cap (Hive's MQTT 3 sessions have none
# either). The generator's window keeps every queue far below 100,000 anyway.
MOSQUITTO_CONFIG = """listener {port} 127.0.0.1
allow_anonymous true
persistence false
max_queued_messages {queue}
max_queued_bytes 0
max_inflight_messages 0
set_tcp_nodelay {nodelay}
log_dest stderr
user root
log_type error
log_type warning
"""


# --------------------------------------------------------------------------------------
# brokers
# --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` and all its descendants, in KiB."""
    total = 0
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


def _pin_broker(core: int = loadgen.BROKER_CORE) -> None:
    loadgen.die_with_parent()
    loadgen.apply_nice()  # the broker has its own session (start_new_session)
    loadgen.pin_to_core(core)
    loadgen.raise_nofile()


def _child(parent: ET.Element, tag: str) -> ET.Element:
    """``parent``'s first ``tag`` element, added when it has none."""
    found = parent.find(tag)
    return found if found is not None else ET.SubElement(parent, tag)


@dataclass
class BrokerDef:
    name: str
    kind: str  # "hive" | "mosquitto"
    cmd: str = ""
    config_template: Path | None = None  # hive: a full config file whose listener we rewrite


@dataclass
class Broker:
    d: BrokerDef
    args: argparse.Namespace
    port: int = 0
    proc: subprocess.Popen | None = None
    workdir: Path | None = None
    log_path: Path | None = None
    started_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    core: int = loadgen.BROKER_CORE
    cluster_xml: str = ""  # a <cluster> section for the default Hive config
    rest_port: int = 0  # the REST API's port (with --scrape-interval)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _hive_config(self, path: Path) -> None:
        rest = HIVE_REST.format(rest_port=self.rest_port) if self.rest_port else ""
        if self.d.config_template is None:
            path.write_text(
                HIVE_CONFIG.format(
                    port=self.port, queue=QUEUE_SIZE, cluster=self.cluster_xml, rest=rest
                )
            )
            return
        tree = ET.parse(self.d.config_template)
        root = tree.getroot()
        if rest:
            old = root.find("rest-api")
            if old is not None:
                root.remove(old)
            root.append(ET.fromstring(rest))
        tcp = _child(_child(root, "listeners"), "tcp-listener")
        for tag, val in (("port", str(self.port)), ("bind-address", "127.0.0.1")):
            _child(tcp, tag).text = val
        qm = _child(_child(root, "mqtt"), "queued-messages")
        if qm.find("max-queue-size") is None:
            ET.SubElement(qm, "max-queue-size").text = str(QUEUE_SIZE)
        tree.write(path, encoding="unicode")

    def start(self) -> None:
        self.port = free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"bench-{self.d.name}-"))
        logs = Path(self.args.out).parent / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"{self.d.name}.log"
        if self.d.kind == "mosquitto":
            conf = self.workdir / "mosquitto.conf"
            conf.write_text(
                MOSQUITTO_CONFIG.format(
                    port=self.port,
                    queue=QUEUE_SIZE,
                    nodelay="true" if self.args.mosquitto_nodelay else "false",
                )
            )
            argv = [self.args.mosquitto_bin, "-c", str(conf)]
            ready_line = None
        else:
            conf = self.workdir / "hive.xml"
            if self.args.scrape_interval:
                self.rest_port = free_port()
            self._hive_config(conf)
            data_dir = self.workdir / "data"
            data_dir.mkdir()
            cmd = self.d.cmd
            if "{config}" not in cmd:
                cmd += " --config {config} --data-dir {data_dir}"
            argv = [
                a.format(config=conf, data_dir=data_dir, port=self.port) for a in shlex.split(cmd)
            ]
            ready_line = HIVE_READY
        log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.extra["log"] = log
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            preexec_fn=lambda: _pin_broker(self.core),
            start_new_session=True,
        )
        deadline = t0 + self.args.start_timeout
        seen_line = ready_line is None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.d.name} exited with {self.proc.returncode} during "
                    f"start-up; log tail:\n{self._log_tail()}"
                )
            if not seen_line:
                with contextlib.suppress(OSError):
                    seen_line = ready_line in self.log_path.read_text(errors="replace")
            if seen_line and _port_open(self.port) and (
                not self.rest_port or _port_open(self.rest_port)
            ):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.d.name} not ready after {self.args.start_timeout}s "
                    f"(waiting for {'port' if seen_line else repr(ready_line)}); "
                    f"log tail:\n{self._log_tail()}"
                )
            time.sleep(0.05)
        self.started_s = time.monotonic() - t0
        time.sleep(0.3)  # let start-up work settle before measuring

    def _log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])  # type: ignore[union-attr]
        except OSError:
            return "(no log)"

    def all_pids(self) -> list[int]:
        return _descendants(self.pid)

    def rss(self) -> int:
        return rss_kib(self.pid)

    def stop(self) -> None:
        p = self.proc
        if p is not None:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()
                    p.wait(timeout=10)
            # anything the broker left in its own session (pgid == its pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            self.proc = None
        log = self.extra.pop("log", None)
        if log is not None:
            log.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


class Scraper:
    """GETs a Hive node's Prometheus exposition every ``interval`` seconds in a thread, as a
    Prometheus server would, while a scenario runs; counts the scrapes and their times."""

    def __init__(self, port: int, interval: float) -> None:
        self.url = f"http://127.0.0.1:{port}{PROMETHEUS_PATH}"
        self.interval = interval
        self.times_ms: list[float] = []
        self.bytes = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    self.bytes = len(response.read())
                self.times_ms.append((time.monotonic() - t0) * 1000)
            except OSError:
                self.failures += 1
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def summary(self) -> dict[str, Any]:
        t = sorted(self.times_ms)
        return {
            "scrapes": len(t),
            "scrape_failures": self.failures,
            "scrape_ms_median": t[len(t) // 2] if t else None,
            "scrape_ms_max": t[-1] if t else None,
            "scrape_bytes": self.bytes,
        }


CLUSTER_FORMED = "Cluster size = {size}"


@dataclass
class HiveCluster:
    """Hive nodes clustered on loopback (two by default): publishers on node 1, subscribers on
    node 2.

    Each node is a :class:`Broker` of its own (process, log ``<name>-node<i>.log``, core from
    ``--cluster-cores``, in turn); ``port`` is node 2's listener, ``pub_port`` node 1's.
    ``replica_count`` sets ``<replication><replica-count>``; None leaves Hive's default.
    """

    d: BrokerDef
    args: argparse.Namespace
    size: int = 2
    replica_count: int | None = None
    nodes: list[Broker] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.nodes[1].port

    @property
    def pub_port(self) -> int:
        return self.nodes[0].port

    @property
    def pid(self) -> int:
        return self.nodes[0].pid

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.nodes[0].proc

    def start(self) -> None:
        cores = [int(c) for c in self.args.cluster_cores.split(",")] or [loadgen.BROKER_CORE]
        cluster_ports: list[int] = []
        while len(cluster_ports) < self.size:
            port = free_port()
            if port not in cluster_ports:
                cluster_ports.append(port)
        static = "".join(
            f"<node><host>127.0.0.1</host><port>{p}</port></node>" for p in cluster_ports
        )
        replication = (
            HIVE_REPLICATION.format(count=self.replica_count)
            if self.replica_count is not None
            else ""
        )
        for i, cluster_port in enumerate(cluster_ports):
            node = Broker(
                BrokerDef(f"{self.d.name}-node{i + 1}", "hive", self.d.cmd),
                self.args,
                core=cores[i % len(cores)],
                cluster_xml=HIVE_CLUSTER.format(
                    cluster_port=cluster_port, nodes=static, replication=replication
                ),
            )
            self.nodes.append(node)
            node.start()
        formed = CLUSTER_FORMED.format(size=self.size)
        deadline = time.monotonic() + self.args.start_timeout
        while not all(
            formed in n.log_path.read_text(errors="replace")  # type: ignore[union-attr]
            for n in self.nodes
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {self.size} Hive nodes did not form a cluster; node 2 log tail:\n"
                    + self.nodes[1]._log_tail()
                )
            time.sleep(0.05)

    def failover_nodes(self) -> list[failover.Node]:
        return [
            failover.Node(
                n.port,
                n.pid,
                (n.workdir / "data" / "node-id").read_text().strip(),  # type: ignore[operator]
                n.log_path,  # type: ignore[arg-type]
            )
            for n in self.nodes
        ]

    def keep_logs(self, prefix: str) -> None:
        """Copy the nodes' logs to ``<prefix>-<name>.log``: the run failed, look at them later."""
        for n in self.nodes:
            if n.log_path is not None:
                with contextlib.suppress(OSError):
                    shutil.copyfile(n.log_path, n.log_path.with_name(f"{prefix}-{n.log_path.name}"))

    def all_pids(self) -> list[int]:
        return [p for n in self.nodes for p in n.all_pids()]

    def rss(self) -> int:
        return sum(n.rss() for n in self.nodes)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


# --------------------------------------------------------------------------------------
# scenarios
# --------------------------------------------------------------------------------------

# name -> (title, metric key, unit, higher is better)
SCENARIOS: dict[str, tuple[str, str, str, bool]] = {
    "qos0": ("QoS 0 throughput 1 -> 1", "rate", "msg/s", True),
    "qos1": ("QoS 1 throughput 1 -> 1", "rate", "msg/s", True),
    "qos1p": ("QoS 1 throughput 1 -> 1, persistent subscriber", "rate", "msg/s", True),
    "fanout": ("Fan-out 1 -> 50 (one topic)", "rate", "deliveries/s", True),
    "fanin": ("Fan-in 50 -> 1 (bench/x/+)", "rate", "deliveries/s", True),
    "latency": ("Latency QoS 0 1 -> 1 at 2,000 msg/s", "p50_ms", "ms p50", False),
    "conns": ("Idle connections", "kib_per_conn", "KiB/conn", False),
    "cluster": ("Cluster QoS 0 1 -> 1 (2 nodes)", "rate", "msg/s", True),
    "cluster-r1": ("Cluster QoS 1 persistent, replica-count 1 (2 nodes)", "rate", "msg/s", True),
    "cluster-r2": ("Cluster QoS 1 persistent, replica-count 2 (2 nodes)", "rate", "msg/s", True),
    "failover": ("Failover, kill -9 to session present (3 nodes)", "failover_s", "s", False),
    "failover-stop": ("Failover, SIGSTOP to session present (3 nodes)", "failover_s", "s", False),
}

# targets for Hive as ratios to Mosquitto (ratio >= for throughput, <= for latency/memory)
TARGETS: dict[str, tuple[str, float]] = {
    "qos0": (">=", 0.5),
    "qos1": (">=", 0.4),
    "fanout": (">=", 0.5),
    "fanin": (">=", 0.4),
    "latency": ("<=", 2.0),
}
CLUSTER_TARGET = 0.6  # cluster / single-node qos0, both Hive, same run
REPLICATED_TARGET = 0.5  # cluster-r2 / single-node qos1p, both Hive, same run
# Hive-only scenarios on several nodes: (nodes, replica-count or None for the default, the
# single-node scenario of the same run they are compared to, the target ratio or None)
CLUSTERED: dict[str, tuple[int, int | None, str | None, float | None]] = {
    "cluster": (2, None, "qos0", CLUSTER_TARGET),
    "cluster-r1": (2, 1, "qos1p", None),
    "cluster-r2": (2, 2, "qos1p", REPLICATED_TARGET),
    "failover": (3, None, None, None),
    "failover-stop": (3, None, None, None),
}
CONN_KIB_TARGET = 10.0
CONN_TIME_TARGET = 10.0


def run_scenario(
    name: str, broker: Broker | HiveCluster, a: argparse.Namespace, index: int = 0
) -> dict[str, Any]:
    """One measurement; ``index`` counts the measurements of this scenario and broker."""
    if name.startswith("failover"):
        assert isinstance(broker, HiveCluster)
        return failover.measure(
            broker.failover_nodes(),
            freeze=name == "failover-stop",
            to_taker=index % 2 == 0,
            rate=a.failover_rate,
        )
    if name == "conns":
        before = rss_kib(broker.pid)

        def measure() -> int:
            time.sleep(a.settle)
            return rss_kib(broker.pid)

        r = loadgen.run_connections(
            "127.0.0.1",
            broker.port,
            a.connections,
            a.conn_procs,
            a.conn_concurrency,
            on_connected=measure,
            keepalive=a.conn_keepalive,
        )
        after = int(r.pop("measure"))
        n = r["connections"]
        r.update(
            rss_before_kib=before,
            rss_after_kib=after,
            kib_per_conn=(after - before) / n if n else float("nan"),
        )
        if broker.proc is not None and broker.proc.poll() is not None:
            r["error"] = f"broker exited with {broker.proc.returncode}"
        return r
    load = {"cluster": "qos0", "cluster-r1": "qos1p", "cluster-r2": "qos1p"}.get(name, name)
    kw = dict(loadgen.SCENARIO_SPECS[load])
    spec = loadgen.LoadSpec(
        port=broker.port,
        duration=a.duration,
        warmup=a.warmup,
        payload=a.payload,
        window=a.window,
        inflight=a.inflight,
        **kw,
    )
    if name == "fanout":
        spec.subscribers = a.fan
    if name == "fanin":
        spec.publishers = a.fan
    if name == "latency":
        spec.rate = a.latency_rate
        spec.duration = max(a.duration, a.latency_duration)
    if isinstance(broker, HiveCluster):
        spec.pub_port = broker.pub_port
    scraped = isinstance(broker, Broker) and broker.rest_port and broker.d.name in a.scrape_brokers
    if scraped:
        assert isinstance(broker, Broker)
        with Scraper(broker.rest_port, a.scrape_interval) as scraper:
            r = loadgen.run_load(spec, broker.all_pids())
        r.update(scraper.summary())
        if not r["scrapes"] or r["scrape_failures"]:
            r["error"] = f"scrapes: {r['scrapes']} answered, {r['scrape_failures']} failed"
    else:
        r = loadgen.run_load(spec, broker.all_pids())
    r["rate"] = r["delivered_per_s"]
    r["rss_kib"] = broker.rss()
    return r


def metric(name: str, r: dict[str, Any]) -> float:
    """The headline figure of scenario ``name`` in one result."""
    return float(r[SCENARIOS[name][1]])


# --------------------------------------------------------------------------------------
# reporting
# --------------------------------------------------------------------------------------


def _fmt(v: float | None, unit: str) -> str:
    if v is None or v != v:
        return "-"
    if unit.startswith("ms "):
        return f"{v:.3f}"
    if unit.startswith("KiB") or unit == "s":
        return f"{v:.2f}"
    if v >= 1000:
        return f"{v / 1000:.1f}k"
    return f"{v:.1f}"


def _median(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def _report_row(
    s: str,
    title: str,
    key: str,
    unit: str,
    brokers: list[str],
    ref: str | None,
    others: list[str],
    res: dict,
    errors: dict,
    a: argparse.Namespace,
) -> list[str]:
    med: dict[str, float | None] = {}
    for b in brokers:
        runs = res.get((s, b), [])
        med[b] = _median([float(r[key]) for r in runs])
    row = [title, unit]
    for b in brokers:
        cell = _fmt(med[b], unit)
        if errors.get((s, b)):
            cell = cell + " (err)" if med[b] is not None else "error"
        row.append(cell)
    ratios: dict[str, float | None] = {}
    if ref:
        for b in others:
            m, r0 = med[b], med[ref]
            ratios[b] = m / r0 if m is not None and r0 else None
            row.append("-" if ratios[b] is None else f"{ratios[b]:.2f}")
    if "hive" in brokers and "hive-extra" in brokers:
        h, x = med["hive"], med["hive-extra"]
        row.append(f"{x / h:.2f}" if h and x is not None else "-")
    tgt = ""
    if s in TARGETS:
        op, val = TARGETS[s]
        tgt = f"hive/mosq {op} {val:g}"
        r = ratios.get("hive")
        if r is not None:
            ok = r >= val if op == ">=" else r <= val
            tgt += " ok" if ok else " MISS"
    elif CLUSTERED.get(s, (0, None, None))[2] is not None:
        _n, _r, single_s, target = CLUSTERED[s]
        tgt = f"{s}/{single_s} (hive)" + (f" >= {target:g}" if target is not None else "")
        single = _median([float(r["rate"]) for r in res.get((single_s, "hive"), [])])
        v = med.get("hive")
        if single and v is not None:
            tgt += f": {v / single:.3f}"  # 0.496 is a MISS that .2f shows as 0.50
            if target is not None:
                tgt += " ok" if v / single >= target else " MISS"
    elif s == "conns":
        limit = CONN_KIB_TARGET if key == "kib_per_conn" else CONN_TIME_TARGET
        tgt = f"hive <= {limit:g} {unit}" if key == "kib_per_conn" else f"hive < {limit:g} s"
        hr = res.get((s, "hive"), [])
        v = med.get("hive")
        if hr and v is not None:
            complete = all(r["connections"] >= a.connections for r in hr)
            ok = complete and (v <= limit if key == "kib_per_conn" else v < limit)
            tgt += " ok" if ok else (" MISS" if complete else " MISS (not all connected)")
    row.append(tgt)
    return row


def build_report(
    a: argparse.Namespace, brokers: list[str], scen: list[str], res: dict, errors: dict
) -> tuple[str, str]:
    ref = "mosquitto" if "mosquitto" in brokers else None
    others = [b for b in brokers if b != ref]
    headers = ["scenario", "unit", *brokers]
    if ref:
        headers += [f"{b}/{ref}" for b in others]
    if "hive" in brokers and "hive-extra" in brokers:
        headers.append("hive-extra/hive")
    headers.append("target")
    rows: list[list[str]] = []
    notes: list[str] = []
    for s in scen:
        title, key, unit, _hib = SCENARIOS[s]
        row_specs = [(title, key, unit)]
        if s == "conns":
            row_specs = [
                (f"Idle connections ({a.connections}): memory", key, unit),
                (f"Idle connections ({a.connections}): time to all CONNACKs", "connect_s", "s"),
            ]
        for title, key, unit in row_specs:
            rows.append(_report_row(s, title, key, unit, brokers, ref, others, res, errors, a))
        # secondary figures
        for b in brokers:
            runs = res.get((s, b), [])
            if not runs:
                continue
            if s == "latency":
                notes.append(
                    f"{s} {b}: p99 "
                    + ", ".join(f"{r['p99_ms']:.3f}" for r in runs)
                    + " ms; p50 "
                    + ", ".join(f"{r['p50_ms']:.3f}" for r in runs)
                    + f" ms; samples {runs[-1]['latency_samples']}; "
                    + _cpu_note(runs)
                )
            elif s.startswith("failover"):
                notes.append(f"{s} {b}: " + _failover_note(runs))
            elif s == "conns":
                notes.append(
                    f"{s} {b}: "
                    + "; ".join(
                        f"{r['connections']} CONNACKs in {r['connect_s']:.2f} s "
                        f"({r['connects_per_s']:.0f}/s), failed {r['failed']}, RSS "
                        f"{r['rss_before_kib'] / 1024:.1f} -> {r['rss_after_kib'] / 1024:.1f} MiB"
                        + (f" errors {r['errors']}" if r.get("errors") else "")
                        for r in runs
                    )
                )
            else:
                vals = ", ".join(_fmt(metric(s, r), unit) for r in runs)
                loss = sum(r["lost"] for r in runs)
                dups = sum(r["duplicates"] for r in runs)
                extra = f"; LOST {loss}" if loss else "; no loss"
                if dups:
                    extra += f"; duplicates {dups}"
                missing = sum(r.get("pubacks_missing", 0) for r in runs)
                if missing:
                    extra += f"; PUBACKs missing {missing}"
                rss = max(r["rss_kib"] for r in runs) / 1024
                notes.append(
                    f"{s} {b}: runs {vals}{extra}; broker RSS {rss:.1f} MiB; "
                    + _cpu_note(runs)
                    + _scrape_note(runs)
                )
        for b in brokers:
            for e in errors.get((s, b), []):
                notes.append(f"{s} {b}: ERROR {e}")

    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    text = "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"

    stamp = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    rev = "?"
    with contextlib.suppress(Exception):
        rev = (
            subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
            or "?"
        )
    md = [f"## Bench run {stamp} (commit {rev})", ""]
    md.append(f"`{' '.join(shlex.quote(x) for x in sys.argv)}`  ")
    md.append(
        f"duration {a.duration:g} s after {a.warmup:g} s warm-up, rounds {a.rounds}, "
        f"payload {a.payload} B, window {a.window}, connections {a.connections}; "
        "values are medians over rounds; broker on core 0, generator on core 1."
    )
    md.append("")
    md.append("| " + " | ".join(headers) + " |")
    md.append("|" + "|".join("---" for _ in headers) + "|")
    for r in rows:
        md.append("| " + " | ".join(r) + " |")
    md.append("")
    md.extend(f"- {n}" for n in notes)
    md.append("")
    return text, "\n".join(md) + "\n"


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--brokers",
        default="hive,mosquitto",
        help="comma list of hive, mosquitto, hive-extra (default: hive,mosquitto; "
        "hive-extra is added automatically with --extra-hive-config)",
    )
    ap.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma list of {', '.join(SCENARIOS)} (default: all)",
    )
    ap.add_argument("--rounds", type=int, default=1, help="measurements per broker and scenario")
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds before measuring")
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: 1 s runs, 0.5 s warm-up, 2,000 connections"
    )
    ap.add_argument(
        "--out",
        default=str(HERE / "out" / "results.md"),
        help="markdown file the results section is appended to",
    )
    ap.add_argument(
        "--hive-cmd",
        default=DEFAULT_HIVE,
        help="command that starts Hive; {config}, {data_dir}, {port} are substituted "
        "(if {config} is absent, --config/--data-dir are appended)",
    )
    ap.add_argument(
        "--extra-hive-config",
        type=Path,
        help="a Hive config file (e.g. with a no-op interceptor extension) measured as "
        "broker 'hive-extra'; its tcp-listener port/bind-address are rewritten",
    )
    ap.add_argument("--extra-hive-cmd", help="command for hive-extra (default: --hive-cmd)")
    ap.add_argument("--mosquitto-bin", default=shutil.which("mosquitto") or "/usr/sbin/mosquitto")
    ap.add_argument(
        "--mosquitto-nodelay",
        action="store_true",
        help="set_tcp_nodelay true for Mosquitto (default: its default, false)",
    )
    ap.add_argument("--payload", type=int, default=32, help="payload bytes")
    ap.add_argument(
        "--window",
        type=int,
        default=10_000,
        help="max messages sent but not yet delivered to every subscriber",
    )
    ap.add_argument(
        "--inflight",
        type=int,
        default=1_000,
        help="QoS 1: max un-acked PUBLISHes per publisher connection",
    )
    ap.add_argument(
        "--fan", type=int, default=50, help="subscribers (fan-out) / publishers (fan-in)"
    )
    ap.add_argument("--latency-rate", type=float, default=2000.0)
    ap.add_argument("--latency-duration", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=19_000)
    ap.add_argument("--conn-procs", type=int, default=4)
    ap.add_argument(
        "--conn-concurrency", type=int, default=24, help="CONNECTs in progress per client process"
    )
    ap.add_argument(
        "--conn-keepalive",
        type=int,
        default=60,
        help="keep alive of the idle connections, seconds (60: paho-mqtt's default, as devices "
        "connect; 0: none, the broker arms no timer)",
    )
    ap.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="seconds between the last CONNACK and the RSS sample",
    )
    ap.add_argument("--start-timeout", type=float, default=60.0)
    ap.add_argument(
        "--cluster-cores",
        default=f"{loadgen.BROKER_CORE},{loadgen.GEN_CORE}",
        help="cores for the cluster scenario's node 1 (publisher) and node 2 (subscriber)",
    )
    ap.add_argument(
        "--failover-reps",
        type=int,
        default=2,
        help="failover measurements per round, each on a fresh 3-node cluster",
    )
    ap.add_argument(
        "--failover-rate",
        type=float,
        default=500.0,
        help="QoS 1 messages/s to the failover scenarios' subscriber",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness for brokers and generator (e.g. -10 as root on a shared, "
        "busy machine; the report shows how busy each core was with others)",
    )
    ap.add_argument(
        "--scrape-interval",
        type=float,
        default=0.0,
        help="enable the REST API on every Hive node and GET its Prometheus metrics "
        f"({PROMETHEUS_PATH}) every this many seconds while a single-node scenario runs",
    )
    ap.add_argument(
        "--scrape-brokers",
        default="hive,hive-extra",
        help="which Hive brokers --scrape-interval scrapes (default: hive,hive-extra; the "
        "others get the REST API too, unscraped)",
    )
    a = ap.parse_args(argv)
    a.scrape_brokers = {b.strip() for b in a.scrape_brokers.split(",") if b.strip()}
    if a.quick:
        a.duration, a.warmup, a.latency_duration = 1.0, 0.5, 2.0
        if a.connections == 19_000:
            a.connections = 2_000
        a.settle = 0.5
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    brokers = [b.strip() for b in a.brokers.split(",") if b.strip()]
    if a.extra_hive_config and "hive-extra" not in brokers:
        brokers.append("hive-extra")
    scen = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    if "hive" in brokers:
        for s in list(scen):
            single = CLUSTERED.get(s, (0, None, None))[2]
            if single is not None and single not in scen:
                scen.insert(scen.index(s), single)  # the single-node figure it is compared to
    bad = [s for s in scen if s not in SCENARIOS] + [
        b for b in brokers if b not in ("hive", "mosquitto", "hive-extra")
    ]
    if bad:
        print(f"unknown scenario/broker: {', '.join(bad)}", file=sys.stderr)
        return 2
    if "hive-extra" in brokers and not a.extra_hive_config:
        print("hive-extra needs --extra-hive-config", file=sys.stderr)
        return 2
    defs = {
        "hive": BrokerDef("hive", "hive", a.hive_cmd),
        "mosquitto": BrokerDef("mosquitto", "mosquitto"),
        "hive-extra": BrokerDef(
            "hive-extra", "hive", a.extra_hive_cmd or a.hive_cmd, a.extra_hive_config
        ),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    loadgen.NICE = a.nice
    loadgen.pin_to_core(loadgen.GEN_CORE)
    loadgen.raise_nofile()

    results: dict[tuple[str, str], list[dict]] = {}
    errors: dict[tuple[str, str], list[str]] = {}
    failed_start: dict[str, int] = {}
    interrupted = False
    try:
        for s in scen:
            for rnd in range(a.rounds):
                for b in brokers:
                    if failed_start.get(b, 0) >= 2:
                        continue  # this broker doesn't start: don't waste time on it
                    if s in CLUSTERED and b != "hive":
                        continue  # only Hive clusters (hive-extra's config has no <cluster>)
                    # a failover measurement ends the cluster: a round is several of them
                    reps = a.failover_reps if s.startswith("failover") else 1
                    for rep in range(reps):
                        broker: Broker | HiveCluster
                        if s in CLUSTERED:
                            size, replicas = CLUSTERED[s][:2]
                            broker = HiveCluster(defs[b], a, size, replicas)
                        else:
                            broker = Broker(defs[b], a)
                        label = f"[{s} {rnd + 1}/{a.rounds}] {b}"
                        if reps > 1:
                            label += f" ({rep + 1}/{reps})"
                        print(f"{label}: starting", file=sys.stderr, flush=True)
                        before = len(errors.get((s, b), []))
                        r = None
                        try:
                            try:
                                broker.start()
                            except RuntimeError as exc:
                                failed_start[b] = failed_start.get(b, 0) + 1
                                raise exc
                            r = run_scenario(s, broker, a, rnd * reps + rep)
                            results.setdefault((s, b), []).append(r)
                            if r.get("error"):
                                errors.setdefault((s, b), []).append(r["error"])
                            print(f"{label}: {_summary(s, r)}", file=sys.stderr, flush=True)
                        except (RuntimeError, loadgen.LoadError, OSError) as exc:
                            msg = str(exc).strip()
                            errors.setdefault((s, b), []).append(msg.splitlines()[0][:300])
                            print(f"{label}: ERROR {msg}", file=sys.stderr, flush=True)
                        finally:
                            broker.stop()
                            failed = len(errors.get((s, b), [])) > before
                            lossy = bool(r.get("lost")) if r is not None else False
                            if (failed or lossy) and isinstance(broker, HiveCluster):
                                broker.keep_logs(f"{s}-{rnd * reps + rep + 1}")
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: reporting what was measured", file=sys.stderr)
    text, md = build_report(a, brokers, scen, results, errors)
    print(text)
    with open(a.out, "a") as f:
        f.write(md + ("\n(interrupted)\n" if interrupted else "") + "\n")
    print(f"appended to {a.out}", file=sys.stderr)
    return 130 if interrupted else 0


def _cpu_note(runs: list[dict[str, Any]]) -> str:
    """CPU % of broker / generator and of other processes on each core, per run."""

    def one(r: dict[str, Any]) -> str:
        return (
            f"{r.get('broker_cpu_pct', 0):.0f}/{r.get('gen_cpu_pct', 0):.0f}"
            f" ({r.get('core0_other_pct', 0):.0f}/{r.get('core1_other_pct', 0):.0f})"
        )

    return "CPU% broker/gen (others on core0/core1): " + ", ".join(one(r) for r in runs)


def _failover_note(runs: list[dict[str, Any]]) -> str:
    """Each run's time and where the subscriber reconnected, and what the stream saw."""
    by_target = {
        to: _median([r["failover_s"] for r in runs if r["to"] == to]) for to in ("taker", "other")
    }
    return (
        "; ".join(
            f"{r['failover_s']:.2f} s via the {r['to']}"
            + (
                ""
                if r["session_present"]
                else f" (FIRST CONNACK AT {r['first_connack_s']:.2f} s WITHOUT SESSION PRESENT)"
            )
            for r in runs
        )
        + "; median via the taker "
        + ", via the other survivor ".join(
            "-" if v is None else f"{v:.2f} s" for v in by_target.values()
        )
        + f"; refused connects {sum(r['refused'] for r in runs)}"
        + f"; takeover in the taker {', '.join(str(r['takeover_ms']) for r in runs)} ms"
        + f"; stream: {sum(r['acked'] for r in runs)} acknowledged, "
        + (f"LOST {sum(r['lost'] for r in runs)}" if any(r["lost"] for r in runs) else "no loss")
        + f", duplicates {sum(r['duplicates'] for r in runs)}"
        + (
            f", PUBACKs missing {sum(r['pubacks_missing'] for r in runs)}"
            if any(r["pubacks_missing"] for r in runs)
            else ""
        )
    )


def _summary(s: str, r: dict[str, Any]) -> str:
    if s.startswith("failover"):
        return (
            f"{r['failover_s']:.2f} s to CONNACK with session present via the {r['to']} "
            f"(session present flags {r['connacks']}), refused {r['refused']}, "
            f"takeover {r['takeover_ms']} ms, "
            f"lost {r['lost']} dup {r['duplicates']} of {r['acked']} acknowledged"
            + (f"; ERROR {r['error']}" if r.get("error") else "")
        )
    if s == "conns":
        return (
            f"{r['connections']} conns in {r['connect_s']:.2f} s, "
            f"{r['kib_per_conn']:.2f} KiB/conn, failed {r['failed']}"
        )
    if s == "latency":
        return (
            f"p50 {r['p50_ms']:.3f} ms p99 {r['p99_ms']:.3f} ms "
            f"({r['latency_samples']} samples); " + _cpu_note([r])
        )
    return (
        f"{r['rate']:.0f}/s lost {r['lost']} dup {r['duplicates']}; "
        + _cpu_note([r])
        + _scrape_note([r])
    )


def _scrape_note(runs: list[dict[str, Any]]) -> str:
    """Scrapes per run, and the median and slowest scrape, when the broker was scraped."""
    if not any("scrapes" in r for r in runs):
        return ""
    return "; scraped " + ", ".join(
        f"{r['scrapes']}x (median {r['scrape_ms_median'] or 0:.1f} ms, max "
        f"{r['scrape_ms_max'] or 0:.1f} ms, {r['scrape_bytes']} B)"
        for r in runs
        if "scrapes" in r
    )


if __name__ == "__main__":
    sys.exit(main())
