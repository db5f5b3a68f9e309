"""The container image and the compose cluster, built and run as a user does, on a real engine.

``docker build`` (through ``docker-compose up --build``) builds the Dockerfile as shipped, from a
build context laid out like a checkout; ``docker-compose`` runs docker/compose.yaml as shipped:
three nodes and HAProxy. The only differences from a user's run are the two base images, made
here because no registry is reachable (tests/container/_engine.py), and the wheels the build
installs from instead of a package index. One engine and one cluster for the whole module.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from faults._traffic import Publisher, Subscriber, Tally, wait_delivered

from container._engine import Engine, haproxy_image, python_image, wait_for
from hive_core.testing import free_port

REPO = Path(__file__).resolve().parents[2]
PYTHON = f"py{sys.version_info.major}{sys.version_info.minor}"
WHEELS = REPO / ".cache" / "container-wheels" / PYTHON
BUILD_CONTEXT = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "hive_core",
                 "hive_ext_api", "docker")
UID = 10001  # the Dockerfile's HIVE_UID

# slow: about 95 s of a worker (the image build, the compose cluster); tox runs it, CI does not
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


@dataclass
class Stack:
    engine: Engine
    compose_file: Path
    project: str
    env: dict[str, str]
    image: str
    mqtt_port: int
    rest_port: int
    secrets: dict[str, str]  # the Docker secrets' values, by name (files, not environment)

    def compose(self, *args: str, check: bool = True) -> Any:
        return self.engine.compose(self.compose_file, self.project, *args, env=self.env,
                                   check=check)

    def container(self, service: str) -> str:
        return str(self.compose("ps", "-q", service).stdout.strip())

    def inspect(self, service: str) -> dict[str, Any]:
        return dict(json.loads(self.engine.docker("inspect", self.container(service)).stdout)[0])

    def logs(self, service: str) -> str:
        return self.engine.logs(self.container(service))

    def rest(self, path: str) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.rest_port}{path}",
            headers={"Authorization": f"Bearer {self.secrets['hive_rest_token']}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)

    def members(self) -> list[dict[str, Any]]:
        return list(self.rest("/api/v1/cluster/nodes")["items"])

    def healthy(self, service: str) -> bool:
        return bool(self.inspect(service)["State"].get("Health", {}).get("Status") == "healthy")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    running = Engine(tmp_path_factory.mktemp("engine")).start()
    try:
        yield running
    finally:
        running.cleanup()


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build context as a checkout lays it out, with the wheels of an offline build in
    docker/wheels/ (the Dockerfile's PIP_OPTIONS names them)."""
    if not WHEELS.is_dir() or not any(WHEELS.glob("*.whl")):
        raise RuntimeError(f"no wheels for the image's build in {WHEELS}: "
                           "run scripts/testbed/container.sh")
    folder = tmp_path_factory.mktemp("context")
    for name in BUILD_CONTEXT:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, folder / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.whl"))
        else:
            shutil.copy2(source, folder / name)
    for wheel in WHEELS.glob("*.whl"):
        shutil.copy2(wheel, folder / "docker" / "wheels" / wheel.name)
    return folder


@pytest.fixture(scope="module")
def stack(engine: Engine, context: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    tag = uuid.uuid4().hex[:8]
    mqtt_port, rest_port = free_port(), free_port()
    env = {
        "PYTHON_IMAGE": python_image(engine), "HAPROXY_IMAGE": haproxy_image(engine),
        "PIP_OPTIONS": "--no-index --find-links /wheels", "HIVE_IMAGE": f"hive-test:{tag}",
        "HIVE_MQTT_ADDRESS": "127.0.0.1", "HIVE_MQTT_PORT": str(mqtt_port),
        "HIVE_REST_PORT": str(rest_port),
    }
    # As the compose file's comment says: the secrets as files, in a 0700 folder.
    values = {"hive_cluster_secret": secrets.token_urlsafe(24),
              "hive_rest_token": secrets.token_urlsafe(32)}
    folder = context / "docker" / "secrets"
    folder.mkdir(mode=0o700, exist_ok=True)
    for name, value in values.items():
        (folder / name).write_text(value + "\n")
        (folder / name).chmod(0o644)
    stack = Stack(engine, context / "docker" / "compose.yaml", f"hivetest{tag}", env,
                  f"hive-test:{tag}", mqtt_port, rest_port, values)
    try:
        stack.compose("up", "-d", "--build")
        wait_for(lambda: len(stack.members()) == 3, 90, "3 nodes in hive1's member list")
        wait_for(lambda: all(stack.healthy(s) for s in ("hive1", "hive2", "hive3")), 90,
                 "every node's container healthy")
        yield stack
    finally:
        logs = stack.compose("logs", "--no-color", check=False)
        artifacts = tmp_path_factory.mktemp("compose-logs")
        (artifacts / "compose.log").write_text(f"{logs.stdout}\n{logs.stderr}")
        stack.compose("down", "-v", "--timeout", "30", check=False)


def test_the_image_runs_as_a_user_keeps_data_in_a_volume_and_holds_no_build_tree(
        stack: Stack) -> None:
    image = json.loads(stack.engine.docker("image", "inspect", stack.image).stdout)[0]
    config = image["Config"]
    assert config["User"] == "hive"
    assert "/var/lib/hive" in config["Volumes"]
    assert config["Entrypoint"] == ["hive"]
    assert config["Cmd"][:3] == ["run", "--config", "/etc/hive/config.xml"]
    assert config["Healthcheck"]["Test"][0] == "CMD"
    # Multi-stage: the final image has the environment, not the source, wheels or pip cache.
    listing = stack.engine.docker("run", "--rm", "--entrypoint", "ls", stack.image, "-a", "/")
    assert not {"src", "wheels"} & set(listing.stdout.split())
    installed = stack.engine.docker(
        "run", "--rm", "--entrypoint", "python3", stack.image, "-c",
        "import hive_core, os; print(hive_core.__file__); print(os.getuid())").stdout.split()
    assert installed[0].startswith("/opt/hive/lib/") and installed[1] == str(UID)
    # The running node: PID 1 is hive as the unprivileged user.
    status = stack.engine.docker("exec", stack.container("hive1"), "cat", "/proc/1/status").stdout
    assert re.search(rf"^Uid:\s+{UID}\s", status, re.M), status
    cmdline = stack.engine.docker("exec", stack.container("hive1"), "cat", "/proc/1/cmdline")
    assert "hive\0run\0" in cmdline.stdout
    # No cluster in the default config: no node port to expose (issue 20).
    assert set(config["ExposedPorts"]) == {"1883/tcp"}


def test_the_compose_nodes_hold_no_secret_in_their_environment_and_are_locked_down(
        stack: Stack) -> None:
    """Risk (issue 20): secrets given with -e showed in `docker inspect` and /proc/1/environ;
    the nodes ran with the default capabilities and a writable root file system."""
    facts = stack.inspect("hive1")
    environment = "\n".join(facts["Config"]["Env"])
    proc = stack.engine.docker("exec", stack.container("hive1"), "cat", "/proc/1/environ").stdout
    for value in stack.secrets.values():
        assert value not in environment and value not in proc
    host = facts["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and host["ReadonlyRootfs"] is True
    assert any(option.startswith("no-new-privileges") for option in host["SecurityOpt"])
    status = stack.engine.docker("exec", stack.container("hive1"), "cat", "/proc/1/status").stdout
    assert re.search(r"^CapEff:\s+0+$", status, re.M) and re.search(r"^NoNewPrivs:\s+1$",
                                                                     status, re.M), status
    touched = stack.engine.docker("exec", stack.container("hive1"), "python3", "-c",
                                  "open('/etc/hive/x', 'w')", check=False)  # the image: no touch
    assert touched.returncode != 0 and "Read-only file system" in touched.stderr


def test_hive_cluster_status_on_the_host_reads_the_published_rest_api(stack: Stack) -> None:
    """As the compose file's comment says: hive1's REST API on loopback, with the token."""
    done = subprocess.run(
        [sys.executable, "-m", "hive_core.cli", "cluster", "status", "--json", "--sample", "0",
         "--rest", f"http://127.0.0.1:{stack.rest_port}"], capture_output=True, text=True,
        timeout=60, env={**os.environ, "HIVE_REST_TOKEN": stack.secrets["hive_rest_token"]})
    assert done.returncode == 0, done.stderr
    overview = json.loads(done.stdout)
    assert sorted(n["id"] for n in overview["nodes"]) == ["hive1", "hive2", "hive3"]
    assert {n["state"] for n in overview["nodes"]} == {"RUNNING"}


def test_a_node_from_the_image_alone_takes_its_settings_from_the_environment(
        stack: Stack) -> None:
    """The image's own config.xml: one node, its port from HIVE_MQTT_PORT; a graceful stop."""
    network = f"{stack.project}_default"
    name = f"{stack.project}-single"
    stack.engine.docker("run", "-d", "--name", name, "--network", network,
                        "-e", "HIVE_MQTT_PORT=1999", stack.image)
    try:
        wait_for(lambda: "Started Hive in" in stack.engine.logs(name), 60,
                 "the single node's start")
        facts = json.loads(stack.engine.docker("inspect", name).stdout)[0]
        address = facts["NetworkSettings"]["Networks"][network]["IPAddress"]
        assert any(m["Destination"] == "/var/lib/hive" and m["Type"] == "volume"
                   for m in facts["Mounts"])
        got: list[bytes] = []
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="single")
        client.on_message = lambda _c, _u, message: got.append(message.payload)
        client.connect(address, 1999)
        client.loop_start()
        try:
            client.subscribe("image/t", 1)
            time.sleep(0.3)
            client.publish("image/t", b"through the image", 1).wait_for_publish(5)
            wait_for(lambda: got == [b"through the image"], 10, "the message back")
        finally:
            client.disconnect()
            client.loop_stop()
        wait_for(lambda: json.loads(stack.engine.docker("inspect", name).stdout)[0]["State"]
                 ["Health"]["Status"] == "healthy", 60, "the single node's health check")
        data = stack.engine.docker("exec", name, "ls", "/var/lib/hive/data").stdout.split()
        assert data, "the node wrote nothing in its data folder"
        stack.engine.docker("stop", "--time", "30", name)
        state = json.loads(stack.engine.docker("inspect", name).stdout)[0]["State"]
        assert state["ExitCode"] == 0
        assert "Hive stopped" in stack.engine.logs(name)
    finally:
        stack.engine.docker("rm", "-f", "-v", name, check=False)


def test_the_compose_cluster_behind_haproxy_loses_nothing_when_a_node_is_killed(
        stack: Stack) -> None:
    """A persistent subscriber and a publisher through HAProxy's published port; the node of the
    subscriber is killed -9 mid-stream; the restart policy brings it back into the cluster.

    The stream lasts 4 s: every docker and docker-compose call (a second or more each on a busy
    machine) is made before it starts, and the kill comes once the subscriber has a sixth of it.
    With those calls in between, the kill once came after the end of the stream: everything
    had arrived, and the subscriber had not reconnected yet (connects 1)."""
    assert {m["id"] for m in stack.members()} == {"hive1", "hive2", "hive3"}
    subscriber = Subscriber([stack.mqtt_port], "compose/kill", qos=1, client_id="compose-sub")
    subscriber.start()
    publisher = Publisher([stack.mqtt_port], "compose/kill", qos=1, count=600, rate=150,
                          client_id="compose-pub")
    try:
        home = node_of_the_only_client(stack, subscriber)
        # the client's own address reached the node through the PROXY protocol header: it is
        # the engine's end of the network (docker-proxy), not HAProxy's container
        network = f"{stack.project}_default"
        haproxy = stack.inspect("haproxy")["NetworkSettings"]["Networks"][network]["IPAddress"]
        line = re.search(r"client 'compose-sub' connected from (\S+):\d+", stack.logs(home))
        assert line is not None and line.group(1) != haproxy
        pid = stack.inspect(home)["State"]["Pid"]
        publisher.start()
        wait_for(lambda: len(subscriber.snapshot()) >= 100, 30,
                 "the stream's first 100 messages at the subscriber", every=0.01)
        assert not publisher.finished(), "the stream ended before the kill"
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        received_before = len(subscriber.snapshot())
        wait_delivered(publisher, subscriber, sent=60, acknowledged=60, arrived=60)
        tally = Tally.of([publisher], subscriber)
        print(f"compose cluster, {home} killed after {received_before} messages: {tally}; "
              f"subscriber reconnects {subscriber.connects}, sessions present "
              f"{subscriber.sessions_present}")
        assert tally.lost == 0, tally
        assert tally.acknowledged == tally.published == 600
        assert subscriber.connects >= 2 and subscriber.sessions_present[-1]
        assert subscriber.connected_at[-1] > killed_at
        # restart: unless-stopped brings the node back, with its data volume and its name
        wait_for(lambda: stack.inspect(home)["State"]["Pid"] not in (0, pid), 60,
                 f"{home} restarted by its restart policy")
        wait_for(lambda: {m["id"] for m in stack.members()} == {"hive1", "hive2", "hive3"}
                 and all(m.get("state", "RUNNING") == "RUNNING" for m in stack.members()),
                 90, f"{home} back in the cluster")
        wait_for(lambda: stack.healthy(home), 90, f"{home} healthy again")
    finally:
        publisher.stop()
        subscriber.stop()


def node_of_the_only_client(stack: Stack, client: Subscriber) -> str:
    """The node holding ``client``'s connection, the only MQTT connection in the cluster, as the
    nodes' loads in the REST API tell (hive1's /api/v1/cluster/nodes: its own count and the
    others' from their heartbeats, up to an interval late). The client must not have
    reconnected meanwhile: then a late count could name the node it left."""
    holders: list[str] = []

    def counted() -> bool:
        loads = {m["id"]: m.get("load", {}).get("connections") for m in stack.members()}
        holders[:] = [node for node, connections in loads.items() if connections]
        return sum(connections or 0 for connections in loads.values()) == 1

    wait_for(counted, 30, "the client's connection in one node's load")
    assert client.connects == 1 and not client.disconnects, "the client reconnected meanwhile"
    return holders[0]
