"""Which network interface LAN discovery uses: the one holding the transport's bind address.

Discovery datagrams are pinned to that interface, so a multicast or a broadcast never follows
the default route to another network. Without a bind address (or with a wildcard one) discovery
stays on loopback: nodes on one host find each other and nothing leaves the machine.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

import psutil

__all__ = ["LOOPBACK_ADDRESS", "Interface", "NoSuchInterface", "interface_for", "is_wildcard"]

LOOPBACK_ADDRESS = "127.0.0.1"


class NoSuchInterface(OSError):
    """No interface of this host holds the address (yet: an interface may come up later)."""


@dataclass(frozen=True, slots=True)
class Interface:
    name: str  # "lo", "eth0": what SO_BINDTODEVICE takes
    address: str  # its IPv4 address: what IP_MULTICAST_IF and the group membership take
    chosen_by_default: bool = False  # no bind address was configured: loopback it is

    def __str__(self) -> str:
        return f"{self.name} ({self.address})"


def is_wildcard(bind_address: str | None) -> bool:
    return not bind_address or bind_address in ("0.0.0.0", "::")


def _ipv4_of(bind_address: str) -> str:
    """The IPv4 address ``bind_address`` names (a literal, or a host name resolved)."""
    try:
        address = ipaddress.ip_address(bind_address)
    except ValueError:
        try:
            infos = socket.getaddrinfo(bind_address, None, socket.AF_INET, socket.SOCK_DGRAM)
        except socket.gaierror as exc:
            raise NoSuchInterface(f"cannot resolve {bind_address!r}: {exc}") from None
        return str(infos[0][4][0])
    if address.version != 4:
        raise ValueError(f"{bind_address} is an IPv6 address; LAN discovery speaks IPv4 only")
    return str(address)


def interface_for(bind_address: str | None) -> Interface:
    """The interface holding ``bind_address``; loopback when it is unset or a wildcard.

    Raises ValueError for an address discovery cannot use at all (IPv6), and
    :class:`NoSuchInterface` when no interface holds it now.
    """
    wanted = LOOPBACK_ADDRESS if is_wildcard(bind_address) else _ipv4_of(str(bind_address))
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == wanted for a in addresses):
            return Interface(name, wanted, chosen_by_default=is_wildcard(bind_address))
    raise NoSuchInterface(f"no network interface of this host has the address {wanted}")
