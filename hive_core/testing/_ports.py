"""Free loopback ports for test processes, taken outside the kernel's ephemeral range.

A port the kernel hands out for ``bind(0)`` comes from the same range it uses for the local end
of every outgoing connection. Between the moment a test picks such a port and the moment the
node it starts binds it, any connection (a node dialling its peers, a client, another pytest
worker) can take it, and the node fails with "address already in use". Ports below the
ephemeral range are never given to outgoing connections; each pytest-xdist worker walks its own
slice of them, so two workers never pick the same one either.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator
from pathlib import Path

__all__ = ["free_port"]

LOWEST = 20000
"""Below this, ports are left to services (Consul, S3 servers, databases) a machine may run."""


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _slice() -> range:
    """This process's share of [LOWEST, ephemeral start): by pytest-xdist worker, if any."""
    top = max(_ephemeral_start(), LOWEST + 2000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker) % workers if worker.isdigit() else 0
    width = (top - LOWEST) // workers
    return range(LOWEST + index * width, LOWEST + (index + 1) * width)


def _candidates() -> Iterator[int]:
    ports = _slice()
    start = os.getpid() % len(ports)  # successive runs do not start on the same ports
    return itertools.cycle([*ports[start:], *ports[:start]])


_next = _candidates()


def _bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):  # some tests give the port to UDP
        with socket.socket(family, kind) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` for TCP and UDP, never the same twice in this process (until the
    slice wraps around), and never one the kernel gives to outgoing connections."""
    for _ in range(len(_slice())):
        port = next(_next)
        if _bindable(host, port):
            return port
    raise RuntimeError(f"no free port on {host} in {_slice()}")
