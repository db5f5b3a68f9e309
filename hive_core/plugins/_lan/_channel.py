"""The sockets discovery datagrams travel on, pinned to one interface. Linux.

Multicast: every node on a host binds the group's port (SO_REUSEADDR), joins the group on the
interface, and sends through it (IP_MULTICAST_IF) with a small TTL. Broadcast: a node binds
the first free port of the range on the interface (SO_BINDTODEVICE, so a datagram to
255.255.255.255 leaves through that interface only) and sends to every port of the range.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from hive_core.plugins._lan._interface import Interface

__all__ = ["Channel", "broadcast_channel", "multicast_channel"]

# Linux: deliver only the groups this socket joined, not every group joined on the host.
IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)


@dataclass(slots=True)
class Channel:
    """An open, non-blocking discovery socket and where announcements go."""

    sock: socket.socket
    destinations: list[tuple[str, int]]
    description: str  # for the log: interface, group or broadcast address, ports

    def close(self) -> None:
        self.sock.close()


def multicast_channel(group: str, port: int, interface: Interface, ttl: int) -> Channel:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # nodes on one host share it
        sock.bind((group, port))  # the group's datagrams only, not unicast to the port
        sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
        membership = socket.inet_aton(group) + socket.inet_aton(interface.address)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                        socket.inet_aton(interface.address))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)  # nodes on this host
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return Channel(sock, [(group, port)],
                   f"interface {interface}, group {group} port {port}, TTL {ttl}")


def _pinned_broadcast_socket(interface: Interface) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.name.encode())
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EPERM:
            raise OSError(exc.errno, f"cannot pin the broadcast socket to {interface.name} "
                          "(SO_BINDTODEVICE needs Linux 5.7 or CAP_NET_RAW)") from exc
        raise
    return sock


def broadcast_channel(broadcast_address: str, port: int, port_range: int,
                      interface: Interface) -> Channel:
    """Bound to the first free port of ``port`` .. ``port + port_range`` on ``interface``."""
    ports = range(port, port + port_range + 1)
    for candidate in ports:
        sock = _pinned_broadcast_socket(interface)
        try:
            # The wildcard address: a socket bound to a unicast address gets no broadcasts.
            sock.bind(("0.0.0.0", candidate))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                continue
            raise
        sock.setblocking(False)
        return Channel(sock, [(broadcast_address, p) for p in ports],
                       f"interface {interface}, broadcast address {broadcast_address}, "
                       f"port {candidate} of {port}-{ports[-1]}")
    raise OSError(errno.EADDRINUSE, f"every port from {port} to {ports[-1]} is taken on "
                  f"{interface.name}: widen <port-range>")
