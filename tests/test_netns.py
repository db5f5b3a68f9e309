"""The namespace test bed itself (tests/netns.py): reachability, partitions, teardown, sweeping."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netns import ETC_NETNS, Host, NotRoot, Testbed, _ip, sweep_leftovers, testbed

__all__ = ["testbed"]  # the fixture, imported for pytest

TESTS = Path(__file__).resolve().parent


def namespaces() -> set[str]:
    return {line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()}


def bridges() -> set[str]:
    return {link["ifname"] for link in json.loads(_ip("-j", "link", "show", "type", "bridge")
                                                  .stdout or "[]")}


def udp_reaches(sender: Host, receiver: Host, address: str, attempts: int = 1) -> bool:
    """Does a datagram from ``sender`` to ``address`` arrive in ``receiver`` (within 0.5 s,
    in one of ``attempts`` tries: a loaded machine may be late with the first one)?"""
    return any(_one_datagram(sender, receiver, address) for _ in range(attempts))


def _one_datagram(sender: Host, receiver: Host, address: str) -> bool:
    inbox = receiver.udp_socket()
    outbox = sender.udp_socket()
    outbox.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    try:
        inbox.bind(("0.0.0.0", 0))
        inbox.settimeout(0.5)
        try:
            outbox.sendto(b"ping", (address, inbox.getsockname()[1]))
        except OSError:
            return False  # no route at all
        try:
            return inbox.recv(16) == b"ping"
        except TimeoutError:
            return False
    finally:
        inbox.close()
        outbox.close()


def test_hosts_on_a_segment_reach_each_other_and_no_one_else(testbed: Testbed) -> None:
    lan, other = testbed.segment(), testbed.segment()
    a, b, c = testbed.host(lan), testbed.host(lan), testbed.host(other)
    assert lan.network != other.network
    assert ipaddress.ip_address(a.address) in lan.network
    assert ipaddress.ip_address(c.address) in other.network
    assert udp_reaches(a, b, b.address, attempts=5)
    assert udp_reaches(a, b, lan.broadcast, attempts=5)
    assert not udp_reaches(a, c, c.address)
    testbed.partition(b)
    assert not udp_reaches(a, b, b.address)
    testbed.heal(b)
    assert udp_reaches(a, b, b.address, attempts=5)


def test_inside_a_host_its_name_is_its_own_address(testbed: Testbed) -> None:
    host = testbed.host(testbed.segment())
    done = host.run([sys.executable, "-c",
                     "import socket; print(socket.gethostbyname(socket.gethostname()))"])
    assert done.stdout.strip() == host.address


def test_close_kills_what_runs_inside_and_removes_everything() -> None:
    with pytest.raises(RuntimeError, match="the test failed"), Testbed() as bed:
        lan = bed.segment()
        host = bed.host(lan)
        sleeper = host.popen(["sleep", "300"])
        stray = subprocess.Popen(host.command(["sleep", "301"]))  # not started through popen
        deadline = time.monotonic() + 5  # ``ip netns exec`` enters the namespace, then execs
        while str(stray.pid) not in subprocess.run(
                ["ip", "netns", "pids", host.name], capture_output=True, text=True).stdout.split():
            assert time.monotonic() < deadline, "the stray never entered the namespace"
            time.sleep(0.02)
        raise RuntimeError("the test failed")
    assert sleeper.poll() == -signal.SIGKILL
    assert stray.wait(5) == -signal.SIGKILL
    assert host.name not in namespaces() and lan.bridge not in bridges()
    assert not os.path.exists(os.path.join(ETC_NETNS, host.name))


def test_a_killed_runs_leftovers_are_swept_by_the_next() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]); "
         "from netns import Testbed; bed = Testbed(); host = bed.host(bed.segment()); "
         "host.popen(['sleep', '300']); print(host.name, bed.segments[0].bridge, flush=True); "
         "time.sleep(300)", str(TESTS)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        name, bridge = owner.stdout.readline().split()
        deadline = time.monotonic() + 10
        left_inside: list[int] = []
        while not left_inside and time.monotonic() < deadline:  # ip netns exec enters, then execs
            left_inside = [int(p) for p in _ip("netns", "pids", name).stdout.split()]
            time.sleep(0.02)
        assert left_inside
    finally:
        owner.kill()
        owner.wait(10)
    assert name in namespaces() and bridge in bridges()
    swept = sweep_leftovers()
    assert name in swept and bridge in swept
    assert name not in namespaces() and bridge not in bridges()
    time.sleep(0.1)
    for pid in left_inside:
        assert not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_without_root_it_refuses_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NotRoot, match="need root"):
        Testbed()


def test_a_socket_made_inside_stays_inside(testbed: Testbed) -> None:
    host = testbed.host(testbed.segment())
    sock = host.inside(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    with sock:
        sock.bind((host.address, 0))  # only that namespace has the address
        assert sock.getsockname()[0] == host.address
