"""Real servers for the tests: a private dockerd, dnsmasq, and Hive nodes (host processes or
containers). Everything started here is stopped by PID; names, subnets and ports are picked so
that tests running at the same time on this machine cannot clash.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import docker
import docker.errors
import docker.types

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = "install it with scripts/testbed/docker.sh (Debian docker.io and dnsmasq-base)"
STARTED = re.compile(r"Started Hive in \d+ ms")
HIVE = Path(sys.executable).with_name("hive")  # the console script of this environment
DISABLED_ENV = "HIVE_DISABLED_EXTENSIONS"


def binary(name: str) -> str:
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:{SYSTEM_PATH}")
    if found is None:
        raise RuntimeError(f"{name} is not installed: {INSTALL_HINT}")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for(check: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> float:
    """Poll ``check`` until true; the seconds it took. Fails naming ``what`` after ``timeout``."""
    begun = time.monotonic()
    while time.monotonic() - begun < timeout:
        with contextlib.suppress(OSError, ValueError):
            if check():
                return time.monotonic() - begun
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what}")


# A REST API outside loopback needs <auth> (issue 8): containers are asked with this token.
REST_TOKEN = "hive-docker-tests-" + "0123456789abcdef" * 2


def rest_get(host: str, port: int, path: str, timeout: float = 3.0) -> Any:
    request = urllib.request.Request(f"http://{host}:{port}{path}",
                                     headers={"Authorization": f"Bearer {REST_TOKEN}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def stop_pid(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM, then SIGKILL if it lingers; reaps it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # a paused process cannot act on SIGTERM
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def unused_subnet(prefix: int = 24) -> ipaddress.IPv4Network:
    """A /24 (or /``prefix``) in 10.192.0.0/10 that no interface or route here uses."""
    taken = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True,
                           text=True, check=False).stdout
    used = [ipaddress.ip_network(m, strict=False)
            for m in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", taken)]
    for _ in range(200):
        address = f"10.{random.randint(192, 254)}.{random.randint(0, 255)}.0/{prefix}"
        candidate = ipaddress.ip_network(address, strict=False)
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise RuntimeError(f"no free /{prefix} in 10.192.0.0/10 for a test network")


# ---------------------------------------------------------------------------------- dockerd


class Dockerd:
    """A private dockerd: its own data, exec root, pid file and socket under one temp folder.

    ``--bridge=none``: no docker0 (it would clash with other daemons); networks are made by the
    tests with unique bridge names. ``--live-restore``: containers keep running while the daemon
    is stopped, so a test can take the Engine API away from running nodes.
    """

    def __init__(self, log_dir: Path, live_restore: bool = True,
                 tls_dir: Path | None = None) -> None:
        self.live_restore = live_restore  # swarm mode does not go with live restore
        self.tls_dir = tls_dir  # made by make_tls_files: also serve the API over TLS on TCP
        self.tls_port = 0
        self.root = Path(tempfile.mkdtemp(prefix="hdk-", dir="/tmp"))  # unix socket paths are short
        self.socket_dir = self.root / "sock"
        self.socket_dir.mkdir()
        self.socket = self.socket_dir / "docker.sock"
        self.log_path = log_dir / "dockerd.log"  # kept with the test's files, after cleanup too
        self.proc: subprocess.Popen[bytes] | None = None
        self.version = ""
        self.bridges: list[str] = []  # bridge devices made for this daemon's networks

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def client(self, timeout: float = 30.0) -> docker.APIClient:
        return docker.APIClient(base_url=self.url, version="auto", timeout=timeout)

    def _tls_arguments(self) -> list[str]:
        if self.tls_dir is None:
            return []
        self.tls_port = free_port()
        server = self.tls_dir / "server"
        return ["-H", f"tcp://127.0.0.1:{self.tls_port}", "--tlsverify",
                "--tlscacert", str(server / "ca.pem"), "--tlscert", str(server / "cert.pem"),
                "--tlskey", str(server / "key.pem")]

    def start(self, timeout: float = 60.0) -> Dockerd:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [binary("dockerd"), "--data-root", str(self.root / "data"),
                 "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "pid"),
                 "-H", self.url, "--iptables=false", "--ip-masq=false", "--bridge=none",
                 *(["--live-restore"] if self.live_restore else []), *self._tls_arguments()],
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PATH": f"{SYSTEM_PATH}:{os.environ.get('PATH', '')}"})
        try:
            wait_for(self._answers, timeout, "dockerd answers on its socket", every=0.2)
        except AssertionError as exc:
            self.stop()
            raise RuntimeError(
                f"dockerd did not start:\n{self.log_path.read_text()[-3000:]}") from exc
        with contextlib.closing(self.client()) as client:
            self.version = client.version()["Version"]
        return self

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"dockerd exited:\n{self.log_path.read_text()[-3000:]}")
        try:
            with contextlib.closing(self.client(timeout=2)) as client:
                return bool(client.ping())
        except docker.errors.DockerException:
            return False

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the daemon by PID (containers keep running: live restore)."""
        if self.proc is not None:
            stop_pid(self.proc, timeout=30)

    def remove_everything(self) -> None:
        """Every service, container and network of this daemon (it must be running)."""
        with contextlib.closing(self.client()) as client:
            if client.info().get("Swarm", {}).get("LocalNodeState") == "active":
                for service in client.services():
                    client.remove_service(service["ID"])
                client.leave_swarm(force=True)
            for container in client.containers(all=True):
                with contextlib.suppress(docker.errors.APIError):
                    client.remove_container(container["Id"], force=True)
            for network in client.networks():
                if network["Name"] not in ("none", "host", "bridge"):
                    with contextlib.suppress(docker.errors.APIError):
                        client.remove_network(network["Id"])

    def cleanup(self) -> None:
        """Containers and networks gone, daemon stopped, its folder removed."""
        try:
            if self.proc is not None and self.proc.poll() is not None:
                self.start()  # live restore kept its containers running: it must remove them
            if self.proc is not None:
                self.resume()
                self.remove_everything()
        finally:
            self.stop()
            for bridge in self.bridges:  # a network the daemon did not get to remove
                subprocess.run(["ip", "link", "del", bridge], check=False, capture_output=True)
            self._kill_leftover_containerd()
            self._unmount_leftovers()
            shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftover_containerd(self) -> None:
        pid_file = self.root / "exec" / "containerd" / "containerd.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)

    def _unmount_leftovers(self) -> None:
        mounts = Path("/proc/mounts").read_text().splitlines()
        targets = [line.split()[1] for line in mounts if str(self.root) in line.split()[1]]
        for target in sorted(targets, key=len, reverse=True):
            subprocess.run(["umount", "-l", target], check=False, capture_output=True)


def make_tls_files(folder: Path) -> Path:
    """A CA, and a certificate for 127.0.0.1 good for server and client (``hive certs``), laid
    out as dockerd's flags and DOCKER_CERT_PATH want them: ``server/`` and ``client/`` with
    ``ca.pem``, ``cert.pem``, ``key.pem``."""
    ca = folder / "ca"
    made = folder / "made"
    subprocess.run([str(HIVE), "certs", "ca", "--out", str(ca)], check=True, capture_output=True)
    subprocess.run([str(HIVE), "certs", "node", "--ca", str(ca), "--name", "docker", "--ip",
                    "127.0.0.1", "--out", str(made)], check=True, capture_output=True)
    for side in ("server", "client"):
        (folder / side).mkdir()
        shutil.copy(made / "ca.pem", folder / side / "ca.pem")
        shutil.copy(made / "docker-cert.pem", folder / side / "cert.pem")
        shutil.copy(made / "docker-key.pem", folder / side / "key.pem")
    return folder


def root_filesystem_tar() -> bytes:
    """An empty root: mount points, and merged-/usr links; the host's /usr is bound in."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for folder in ("usr", "etc", "tmp", "proc", "sys", "dev", "root", "run", "var", "data"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            tar.addfile(info)
        for link in ("bin", "lib", "lib64", "sbin"):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, f"usr/{link}"
            tar.addfile(info)
    return buffer.getvalue()


def python_mounts() -> list[str]:
    """Host folders a container needs to run this environment's ``hive``: /usr, this Python,
    this environment, and the source folders of editable installs (found by module name)."""
    folders = {"/usr", sys.base_prefix, sys.prefix}
    for module in ("hive_core", "hive_ext_api", "hive_ext_docker"):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{module} is not importable in this environment")
        folders.add(str(Path(spec.origin).resolve().parents[1]))
    # a folder inside another mounted one needs no mount of its own
    return sorted(f for f in folders
                  if not any(f != o and f.startswith(o.rstrip("/") + "/") for o in folders))


class BridgeNetwork:
    """A user-defined bridge network with a unique name, bridge device and subnet."""

    def __init__(self, client: docker.APIClient) -> None:
        self.client = client
        tag = uuid.uuid4().hex[:8]
        self.name = f"hive-net-{tag}"
        self.bridge = f"hvd{tag}"  # interface names are at most 15 characters
        self.subnet = unused_subnet()
        self.gateway = str(next(self.subnet.hosts()))
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(
            subnet=str(self.subnet), gateway=self.gateway)])
        self.id = client.create_network(
            self.name, driver="bridge", ipam=ipam,
            options={"com.docker.network.bridge.name": self.bridge})["Id"]

    def remove(self) -> None:
        with contextlib.suppress(docker.errors.APIError):
            self.client.remove_network(self.id)


class Containers:
    """Containers made by one test, removed (forced) at its end."""

    def __init__(self, client: docker.APIClient, image: str) -> None:
        self.client = client
        self.image = image
        self.ids: list[str] = []

    def run(self, command: list[str], labels: dict[str, str], network: str | None,
            binds: dict[str, str] | None = None, environment: dict[str, str] | None = None,
            name: str | None = None) -> str:
        """Start a container; ``binds`` maps host folders to container paths (read-write)."""
        volumes = {folder: {"bind": folder, "mode": "ro"} for folder in python_mounts()}
        for host, inside in (binds or {}).items():
            volumes[host] = {"bind": inside, "mode": "rw"}
        host_config = self.client.create_host_config(binds=volumes,
                                                     network_mode=network or "none")
        container = self.client.create_container(
            self.image, command=command, labels=labels, environment=environment,
            host_config=host_config, name=name or f"hive-test-{uuid.uuid4().hex[:10]}")
        self.ids.append(container["Id"])
        self.client.start(container["Id"])
        return str(container["Id"])

    def inspect(self, container: str) -> dict[str, Any]:
        return dict(self.client.inspect_container(container))

    def ip(self, container: str, network: str) -> str:
        return str(self.inspect(container)["NetworkSettings"]["Networks"][network]["IPAddress"])

    def remove_all(self) -> None:
        for container in self.ids:
            with contextlib.suppress(docker.errors.APIError):
                self.client.remove_container(container, force=True)
        self.ids.clear()


class Swarm:
    """A single-node swarm on a daemon: its docker_gwbridge made first under a unique bridge
    name and subnet, cluster and VXLAN ports picked free, overlay subnets from a free pool."""

    def __init__(self, dockerd: Dockerd) -> None:
        self.client = dockerd.client()
        tag = uuid.uuid4().hex[:8]
        subnet = unused_subnet()
        gateway = str(next(subnet.hosts()))
        dockerd.bridges.append(f"hvg{tag}")
        self.client.create_network(
            "docker_gwbridge", driver="bridge",
            ipam=docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(
                subnet=str(subnet), gateway=gateway)]),
            options={"com.docker.network.bridge.name": f"hvg{tag}",
                     "com.docker.network.bridge.enable_icc": "false",
                     "com.docker.network.bridge.enable_ip_masquerade": "false"})
        # on the gateway (this swarm's own address): its gossip binds <listen address>:7946,
        # a port that cannot be changed, so two swarms on 127.0.0.1 would clash
        self.client.init_swarm(advertise_addr=gateway,
                               listen_addr=f"{gateway}:{free_port(gateway)}",
                               default_addr_pool=[str(unused_subnet(prefix=20))],
                               subnet_size=24, data_path_port=_free_udp_port(20000, 40000))

    def overlay(self) -> str:
        name = f"hive-overlay-{uuid.uuid4().hex[:8]}"
        self.client.create_network(name, driver="overlay", attachable=True)
        return name

    def tasks(self, service: str) -> list[dict[str, Any]]:
        """The running containers of a service's tasks."""
        return list(self.client.containers(
            filters={"label": f"com.docker.swarm.service.name={service}"}))

    def run_python(self, container: str, code: str) -> str:
        """Run this environment's Python inside a task's container; its output."""
        exec_id = self.client.exec_create(container, [sys.executable, "-c", code])
        output = self.client.exec_start(exec_id).decode()
        if self.client.exec_inspect(exec_id)["ExitCode"] != 0:
            raise AssertionError(f"python in {container[:12]} failed:\n{output}")
        return str(output)


def _free_udp_port(low: int, high: int) -> int:
    candidates = (random.randint(low, high) for _ in range(100))
    port = _first_bindable(candidates, [(socket.SOCK_DGRAM, "0.0.0.0")])
    if port is None:
        raise RuntimeError(f"no free UDP port in {low}..{high}")
    return port


# ---------------------------------------------------------------------------------- dnsmasq


class Dnsmasq:
    """dnsmasq on 127.0.0.1, a free UDP/TCP port, answering from the hosts files in a folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.hosts_dir = folder / "hosts.d"
        self.hosts_dir.mkdir(parents=True, exist_ok=True)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        banner = subprocess.run([binary("dnsmasq"), "--version"], capture_output=True,
                                text=True, check=True).stdout
        found = re.search(r"version (\S+)", banner)
        self.version = f"dnsmasq {found.group(1) if found else banner[:40]}"

    def start(self, port: int | None = None, timeout: float = 10.0) -> Dnsmasq:
        self.port = port or self.port or _free_udp_and_tcp_port()
        self.proc = subprocess.Popen(
            [binary("dnsmasq"), "--keep-in-foreground", f"--port={self.port}",
             "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
             "--user=root", f"--hostsdir={self.hosts_dir}", "--pid-file=",
             "--host-record=ready.probe,127.0.0.1", "--log-facility=-"],
            stdout=subprocess.DEVNULL, stderr=(self.folder / "dnsmasq.log").open("ab"))
        wait_for(self._answers, timeout, f"dnsmasq answers on 127.0.0.1:{self.port}")
        return self

    def _answers(self) -> bool:
        import dns.exception
        import dns.message
        import dns.query

        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"dnsmasq exited: {(self.folder / 'dnsmasq.log').read_text()}")
        query = dns.message.make_query("ready.probe", "A")
        try:
            response = dns.query.udp(query, "127.0.0.1", timeout=0.5, port=self.port)
        except dns.exception.Timeout:
            return False
        return bool(response.answer)

    def set_records(self, name: str, addresses: list[str], file: str = "nodes") -> None:
        """Replace one hosts file (atomically: dnsmasq reads it as soon as it changes)."""
        temporary = self.folder / f".{file}.tmp"
        temporary.write_text("".join(f"{address} {name}\n" for address in addresses))
        temporary.replace(self.hosts_dir / file)

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc)


def loopback_prefix() -> str:
    """127.x.y: a random /24 of the loopback range, apart from other tests' addresses."""
    return f"127.{random.randint(100, 250)}.{random.randint(0, 255)}"


def port_free_on_all(hosts: list[str]) -> int:
    """A TCP port that is free on every one of ``hosts`` (loopback addresses)."""
    candidates = (free_port(hosts[0]) for _ in range(50))
    port = _first_bindable(candidates, [(socket.SOCK_STREAM, host) for host in hosts[1:]])
    if port is None:
        raise RuntimeError(f"no port free on all of {hosts}")
    return port


def _free_udp_and_tcp_port() -> int:
    candidates = (free_port() for _ in range(50))
    port = _first_bindable(candidates, [(socket.SOCK_DGRAM, "127.0.0.1")])
    if port is None:
        raise RuntimeError("no port free for both UDP and TCP on 127.0.0.1")
    return port


def _first_bindable(candidates: Iterable[int],
                    binds: list[tuple[socket.SocketKind, str]]) -> int | None:
    """The first of ``candidates`` that a socket of each kind can bind on its host, if any."""
    for port in candidates:
        try:
            for kind, host in binds:
                with socket.socket(socket.AF_INET, kind) as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return port
    return None


# ---------------------------------------------------------------------------------- Hive nodes


def counter(node: Any, name: str) -> int:
    """The counter ``name`` of an in-process node (``hive_node_factory``), read on its loop."""
    return int(node.call(lambda: node.services.metrics.counter(name).value))


def cluster_config(bind_host: str, cluster_port: int, rest_host: str, rest_port: int,
                   mqtt_host: str, mqtt_port: int, reload_interval: int = 1,
                   rest_token: str | None = None) -> str:
    """A node with only extension discovery, a short heartbeat, and the REST API (asking
    for ``rest_token`` when given); the nodes share a secret, as a cluster reachable from
    other hosts (containers bind 0.0.0.0) must."""
    auth = (f"<auth><enabled>true</enabled><tokens><token>{rest_token}</token></tokens></auth>"
            if rest_token else "")
    return f"""<?xml version="1.0"?>
<hivemq>
    <listeners>
        <tcp-listener><port>{mqtt_port}</port><bind-address>{mqtt_host}</bind-address></tcp-listener>
    </listeners>
    <cluster>
        <enabled>true</enabled>
        <transport><tcp><bind-address>{bind_host}</bind-address><bind-port>{cluster_port}</bind-port></tcp></transport>
        <discovery><extension><reload-interval>{reload_interval}</reload-interval></extension></discovery>
        <failure-detection><heartbeat><interval>500</interval><timeout>2000</timeout></heartbeat></failure-detection>
        <authentication><shared-secret>a-secret-for-tests-only</shared-secret></authentication>
    </cluster>
    <rest-api><enabled>true</enabled>{auth}<listeners><http>
        <port>{rest_port}</port><bind-address>{rest_host}</bind-address>
    </http></listeners></rest-api>
    <persistence><mode>in-memory</mode></persistence>
</hivemq>
"""


class ContainerNode:
    """``hive run`` as the only process (PID 1) of a labelled container on the test network."""

    REST_PORT = 8888
    CLUSTER_PORT = 7800

    def __init__(self, containers: Containers, network: BridgeNetwork, folder: Path,
                 labels: dict[str, str], environment: dict[str, str],
                 binds: dict[str, str]) -> None:
        self.containers = containers
        self.network = network
        self.folder = folder  # bound at /hive: config.xml and the node's log
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.xml").write_text(cluster_config(
            "0.0.0.0", self.CLUSTER_PORT, "0.0.0.0", self.REST_PORT, "0.0.0.0", 1883,
            rest_token=REST_TOKEN))
        self.labels = labels
        # the extensions a test keeps out of its nodes (hive_only_installed) stay out here too
        self.environment = {**environment,
                            DISABLED_ENV: os.environ.get(DISABLED_ENV, "")}
        self.binds = {str(folder): "/hive", **binds}
        self.id = ""
        self.starts = 0  # "Started Hive" lines expected in the log so far
        self.address = ""

    @property
    def log_path(self) -> Path:
        return self.folder / "hive.log"

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self) -> ContainerNode:
        # sh only redirects the log to the bound folder, then becomes hive (exec): PID 1
        command = ["/bin/sh", "-c", f"exec {HIVE} run --config /hive/config.xml "
                                    "--data-dir /data >>/hive/hive.log 2>&1"]
        self.id = self.containers.run(command, self.labels, self.network.name, self.binds,
                                      self.environment)
        return self

    def restart(self) -> None:
        self.containers.client.start(self.id)

    @property
    def ip(self) -> str:
        """Its IP on the test network, as of its last start (asks no daemon)."""
        assert self.address, "not started"
        return self.address

    def running(self) -> bool:
        return bool(self.containers.inspect(self.id)["State"]["Running"])

    def wait_started(self, timeout: float = 40.0) -> None:
        def started() -> bool:
            state = self.containers.inspect(self.id)["State"]
            if not state["Running"]:
                raise AssertionError(f"the container exited ({state['ExitCode']}):\n{self.log}")
            return len(STARTED.findall(self.log)) >= self.starts
        self.starts += 1
        wait_for(started, timeout, f"container {self.id[:12]} started hive", every=0.1)
        self.address = self.containers.ip(self.id, self.network.name)

    def members(self) -> set[str]:
        """The ids of the members the node lists (itself included)."""
        return {str(m["id"]) for m in rest_get(self.ip, self.REST_PORT,
                                                "/api/v1/cluster/nodes")["items"]}

    @property
    def node_id(self) -> str:
        items = rest_get(self.ip, self.REST_PORT, "/api/v1/cluster/nodes")["items"]
        return next(str(m["id"]) for m in items if m["this_node"])

    def extension_metric(self, name: str) -> float:
        return float(rest_get(self.ip, self.REST_PORT, "/api/v1/metrics")["extensions"][name])

    def kill9(self) -> None:
        """kill -9 of hive (the container's PID 1, by its PID on this machine)."""
        pid = int(self.containers.inspect(self.id)["State"]["Pid"])
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not self.running(), 20, f"container {self.id[:12]} exited")


# ---------------------------------------------------------------------------------- operator steps


class Node(Protocol):
    """A `hive run` node of an operator test: a host process or a container."""

    @property
    def log(self) -> str: ...

    @property
    def node_id(self) -> str: ...

    def members(self) -> set[str]: ...

    def extension_metric(self, name: str) -> float: ...


def views(nodes: Sequence[Node]) -> list[set[str]]:
    return [node.members() for node in nodes]


def agree(nodes: Sequence[Node], count: int) -> bool:
    """Every node lists the same ``count`` members."""
    seen = views(nodes)
    return all(len(view) == count and view == seen[0] for view in seen)


def _wait_showing_log(node: Node, check: Callable[[], bool], what: str) -> None:
    """:func:`wait_for` (20 s), failing with the end of the node's log."""
    try:
        wait_for(check, 20, what)
    except AssertionError as exc:
        tail = "\n".join(node.log.splitlines()[-30:])
        raise AssertionError(f"{exc}; the node's log ends:\n{tail}") from None


BACK = re.compile(r"docker-discovery: answering again after [\d.]+ s and (\d+) failed calls")


def ride_out_an_outage(nodes: Sequence[Node], stop: Callable[[], None],
                       start: Callable[[], None], failed: re.Pattern[str], error_metric: str,
                       min_failed: int) -> None:
    """The discovery source goes away for a while, then comes back.

    Meanwhile the cluster stays whole, every node logs the outage once (not once a reload) and
    counts it in its metrics (REST); back, every node says so with the failed queries' count.
    ``failed`` matches the outage's first line whatever kind of failure began it: a daemon on
    its way down may first answer late or with an error. ``error_metric`` counts the kind of
    failure the source gone for good gives.
    """
    stop()
    try:
        for node in nodes:
            _wait_showing_log(node, lambda n=node: bool(failed.search(n.log)),  # type: ignore[misc]
                              "the node logs that its discovery source is gone")
        for node in nodes:
            def counted(n: Node = node) -> bool:
                return n.extension_metric(error_metric) >= min_failed
            _wait_showing_log(node, counted,
                              f"the node counts {min_failed} failed queries ({error_metric})")
        assert agree(nodes, len(nodes)), views(nodes)
        for node in nodes:
            assert len(failed.findall(node.log)) == 1, node.log
    finally:
        start()
    for node in nodes:
        wait_for(lambda n=node: bool(BACK.search(n.log)), 20,  # type: ignore[misc]
                 "the node logs that its discovery source answers again")
        back = BACK.search(node.log)
        assert back is not None and int(back.group(1)) >= min_failed, node.log
