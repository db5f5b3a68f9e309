"""Several "hosts" on one machine: network namespaces on Linux bridges, for LAN and split tests.

    with Testbed() as bed:                      # or the ``testbed`` fixture
        lan = bed.segment()                     # a bridge with a /24 of its own
        a, b, c = (bed.host(lan) for _ in range(3))   # a namespace each, eth0 on the bridge
        a.popen(["hive", "run", ...])           # runs inside a; its PID is kept
        a.http_json(8080, "/api/v1/health")     # a request from inside a
        bed.partition(c); bed.heal(c)           # c's links down, then up again
        bed.route(c, "add", "default", "dev", "eth0")

Inside a namespace the machine's host name resolves to that host's first address (a file in
``/etc/netns/NAME/``), as on a real host.

Every name carries a token unique to the testbed and the owner's PID (namespaces
``hive-tb-TOKEN-pPID-N``, bridges ``hb-TOKEN-N`` whose alias names the PID), so tests running
side by side never meet, and a testbed whose process died (a killed test run) is swept away by
the next one: the processes left inside its namespaces are killed, then the namespaces and
bridges deleted. Teardown kills every process started here by PID and deletes everything, also
when the test failed. Nothing gets an address on the machine itself, so nothing a test sends
can reach beyond its bridges. Creating namespaces needs root (CI runs as root).
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

__all__ = ["Host", "NotRoot", "Segment", "Testbed", "pid_alive", "sweep_leftovers", "testbed"]

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
ETC_NETNS = "/etc/netns"  # ip netns exec mounts /etc/netns/NAME/FILE over /etc/FILE
_NAMESPACE = re.compile(r"^hive-tb-([0-9a-f]+)-p(\d+)-\d+$")
_ALIAS = re.compile(r"^hive-testbed owner=(\d+)$")


class NotRoot(RuntimeError):
    """Namespaces and bridges can only be made by root."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(namespace: str) -> None:
    """SIGKILL whatever still runs in ``namespace`` (left by a test run that was killed)."""
    for line in _ip("netns", "pids", namespace, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(line), signal.SIGKILL)


def sweep_leftovers() -> list[str]:
    """Delete the namespaces and bridges of testbeds whose owner process is gone; their names."""
    swept = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        found = _NAMESPACE.match(name)
        if found and not pid_alive(int(found.group(2))):
            _kill_inside(name)
            _ip("netns", "delete", name, check=False)
            shutil.rmtree(os.path.join(ETC_NETNS, name), ignore_errors=True)
            swept.append(name)
    links = json.loads(_ip("-j", "-d", "link", "show", "type", "bridge", check=False).stdout
                       or "[]")
    for link in links:
        owner = _ALIAS.match(link.get("ifalias", ""))
        if owner and not pid_alive(int(owner.group(1))):
            _ip("link", "delete", link["ifname"], check=False)
            swept.append(link["ifname"])
    return swept


def _setns_function() -> Callable[[int, int], None]:
    if hasattr(os, "setns"):  # Python 3.12+
        return os.setns
    libc = ctypes.CDLL(None, use_errno=True)

    def setns(fd: int, nstype: int) -> None:
        if libc.setns(fd, nstype) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    return setns


_setns = _setns_function()


@dataclass
class Segment:
    """One bridge: a LAN of its own, with its own /24."""

    bridge: str
    network: ipaddress.IPv4Network

    @property
    def broadcast(self) -> str:
        return str(self.network.broadcast_address)


@dataclass
class Host:
    """A namespace with one interface per segment it is on (eth0, eth1, ...)."""

    name: str
    index: int
    addresses: list[str]  # per interface, in segment order
    host_ends: list[str]  # the veth ends on the bridges (what partition takes down)
    processes: list[subprocess.Popen[Any]] = field(default_factory=list)

    @property
    def address(self) -> str:
        """The address on its first segment."""
        return self.addresses[0]

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` run inside this namespace (``ip netns exec`` replaces itself: same PID)."""
        return ["ip", "netns", "exec", self.name, *args]

    def popen(self, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``args`` inside; killed by PID at teardown if still running."""
        proc = subprocess.Popen(self.command(args), **kwargs)
        self.processes.append(proc)
        return proc

    def run(self, args: Sequence[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(args), capture_output=True, text=True,
                              timeout=timeout)

    def inside(self, call: Callable[[], T]) -> T:
        """Run ``call`` in a thread that entered this namespace (sockets made there stay in it)."""
        outcome: list[Any] = []

        def enter_and_call() -> None:
            try:
                with open(os.path.join(NETNS_DIR, self.name)) as handle:
                    _setns(handle.fileno(), CLONE_NEWNET)
                outcome.append((True, call()))
            except BaseException as exc:  # handed to the caller's thread
                outcome.append((False, exc))

        thread = threading.Thread(target=enter_and_call, daemon=True)
        thread.start()
        thread.join(30)
        ok, value = outcome[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return,unused-ignore]

    def connect(self, address: tuple[str, int], timeout: float = 5.0) -> socket.socket:
        """A TCP connection made from inside this namespace."""
        return self.inside(lambda: socket.create_connection(address, timeout))

    def udp_socket(self) -> socket.socket:
        return self.inside(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))

    def http_json(self, port: int, path: str, host: str = "127.0.0.1",
                  timeout: float = 5.0) -> Any:
        """GET ``path`` from ``host:port`` as seen from inside; the JSON answer."""
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
        connection.sock = self.connect((host, port), timeout)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path} in {self.name}: {response.status} {body!r}")
            return json.loads(body)
        finally:
            connection.close()


class Testbed:
    """Bridges and namespaces made for one test, all removed by :meth:`close`."""

    __test__ = False  # a helper, not a test class

    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise NotRoot("network namespace tests need root to create namespaces and bridges "
                          "(CI runs as root); run them as root, e.g. sudo .venv/bin/pytest")
        sweep_leftovers()
        self.token = secrets.token_hex(3)
        self.segments: list[Segment] = []
        self.hosts: list[Host] = []
        self._closed = False

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _free_network(self) -> ipaddress.IPv4Network:
        """A /24 in 10.0.0.0/8 that no address of this machine and no other segment is in."""
        used = [ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
                for link in json.loads(_ip("-j", "-4", "addr", check=False).stdout or "[]")
                for a in link.get("addr_info", [])]
        used += [s.network for s in self.segments]
        for _ in range(200):
            network = ipaddress.IPv4Network(
                f"10.{random.randint(100, 254)}.{random.randint(0, 255)}.0/24")
            if not any(network.overlaps(other) for other in used):
                return network
        raise RuntimeError("no free /24 in 10.100.0.0 - 10.254.255.0 for a test segment")

    def segment(self) -> Segment:
        """A new bridge (multicast snooping off: every port sees every group)."""
        bridge = f"hb-{self.token}-{len(self.segments)}"
        _ip("link", "add", bridge, "type", "bridge")
        segment = Segment(bridge, self._free_network())
        self.segments.append(segment)  # before anything can fail: close() removes it
        _ip("link", "set", bridge, "alias", f"hive-testbed owner={os.getpid()}")
        _ip("link", "set", bridge, "type", "bridge", "mcast_snooping", "0")
        _ip("link", "set", bridge, "up")
        return segment

    def host(self, *segments: Segment, multicast_route: bool = False) -> Host:
        """A namespace with ``lo`` up and an interface on each of ``segments`` (none: only lo).

        ``multicast_route`` adds 224.0.0.0/4 via its first interface, for software that sends
        multicast without choosing an interface (a namespace has no default route).
        """
        index = len(self.hosts) + 1
        name = f"hive-tb-{self.token}-p{os.getpid()}-{index}"
        _ip("netns", "add", name)
        host = Host(name, index, [], [])
        self.hosts.append(host)
        _ip("-n", name, "link", "set", "lo", "up")
        for number, segment in enumerate(segments):
            end, inner = f"hv{self.token}{index}x{number}", f"eth{number}"
            _ip("link", "add", end, "type", "veth", "peer", "name", inner, "netns", name)
            host.host_ends.append(end)
            _ip("link", "set", end, "master", segment.bridge, "up")
            address = segment.network.network_address + 10 + index
            _ip("-n", name, "addr", "add", f"{address}/{segment.network.prefixlen}", "brd",
                segment.broadcast, "dev", inner)
            _ip("-n", name, "link", "set", inner, "up")
            host.addresses.append(str(address))
        if multicast_route and segments:
            _ip("-n", name, "route", "add", "224.0.0.0/4", "dev", "eth0")
        # As on a real host, this machine's name means this host's own address in there.
        own = host.addresses[0] if host.addresses else "127.0.0.1"
        os.makedirs(os.path.join(ETC_NETNS, name), exist_ok=True)
        with open(os.path.join(ETC_NETNS, name, "hosts"), "w") as hosts:
            hosts.write(f"127.0.0.1 localhost\n{own} {socket.gethostname()}\n")
        return host

    def route(self, host: Host, *args: str) -> None:
        """``ip route ARGS`` inside ``host`` (e.g. a default route through one interface)."""
        _ip("-n", host.name, "route", *args)

    def partition(self, host: Host) -> None:
        """Cut ``host`` off every segment (its links go down; the processes keep running)."""
        for end in host.host_ends:
            _ip("link", "set", end, "down")

    def heal(self, host: Host, timeout: float = 5.0) -> None:
        """Bring ``host``'s links up again; returns once each carries (operstate UP)."""
        for end in host.host_ends:
            _ip("link", "set", end, "up")
        deadline = time.monotonic() + timeout
        for end in host.host_ends:
            while json.loads(_ip("-j", "link", "show", "dev", end).stdout or "[{}]")[0].get(
                    "operstate") != "UP":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{end} not up {timeout:.0f} s after the heal")
                time.sleep(0.02)

    def close(self) -> None:
        """Kill what runs inside (by PID), delete the namespaces, then the bridges. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for host in self.hosts:
            for proc in host.processes:
                if proc.poll() is None:
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
            _kill_inside(host.name)  # anything a test started inside some other way
            _ip("netns", "delete", host.name, check=False)
            shutil.rmtree(os.path.join(ETC_NETNS, host.name), ignore_errors=True)
        for segment in self.segments:
            _ip("link", "delete", segment.bridge, check=False)


@pytest.fixture
def testbed() -> Iterator[Testbed]:
    """A :class:`Testbed` torn down after the test, pass or fail."""
    with Testbed() as bed:
        yield bed
