"""The address a cluster node tells the others to reach it on, when the config names none.

Without ``<external-address>``, ``<host-discovery-address>`` or a ``<bind-address>`` that names
one interface, a node listens on every interface and must still pick one address to advertise.
``socket.gethostbyname(socket.gethostname())`` gives 127.0.0.1 or Debian's 127.0.1.1, which no
other host can reach. The address of the default route's interface is what another host on the
network most likely reaches this one on; a cluster confined to loopback gets 127.0.0.1.
"""

from __future__ import annotations

import socket
from typing import Any

from hive_core.config import is_loopback_host

__all__ = ["AdvertisedAddress", "advertised_address", "default_route_address"]

LOOPBACK = "127.0.0.1"
# Any address outside this host will do: connect() on a UDP socket only asks the routing table
# which source address it would use; no datagram is sent.
_OUTSIDE = "192.0.2.123"


class AdvertisedAddress(OSError):
    """No address to advertise could be chosen; the message says which setting to give."""


def default_route_address() -> str | None:
    """This host's IPv4 address on the interface of its default route, or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((_OUTSIDE, 9))
        except OSError:  # ENETUNREACH: no default route
            return None
        address = str(probe.getsockname()[0])
    return None if address == "0.0.0.0" else address


def _wildcard(host: str | None) -> bool:
    return not host or host in ("0.0.0.0", "::")


def loopback_only(cluster: Any) -> bool:
    """Whether the cluster's discovery can only ever find nodes on this host.

    LAN discovery without a bind address stays on loopback (docs/cluster-discovery.md); static
    discovery listing loopback addresses only reaches this host. Extension discovery may name
    any host.
    """
    kind = cluster.discovery_kind
    if kind in ("multicast", "broadcast"):
        return _wildcard(cluster.effective_transport().bind_address)
    if kind == "static":
        nodes = cluster.effective_discovery().nodes
        return bool(nodes) and all(is_loopback_host(node.host) for node in nodes)
    return False


def advertised_address(cluster: Any, bind_host: str) -> tuple[str, str]:
    """(host, why): the host other nodes are told to dial, and a few words on how it was chosen.

    In order: ``<external-address>`` / ``<host-discovery-address>``; a bind address that names
    one interface; 127.0.0.1 when discovery stays on this host; the default route's address.
    Raises :class:`AdvertisedAddress` when none of these applies.
    """
    external = cluster.external_address
    if external:
        return external, "configured"
    if not _wildcard(bind_host):
        return bind_host, "the bind address"
    setting = f"<transport><{cluster.transport_kind}><bind-address>"
    if loopback_only(cluster):
        return LOOPBACK, f"no {setting}, and discovery stays on this host"
    address = default_route_address()
    if address is None:
        raise AdvertisedAddress(
            f"no {setting} and no <external-address>, and this host has no default route: "
            "set one of them to the address other nodes reach this node on")
    return address, (f"no {setting}: the address of the default route's interface; set "
                     f"{setting} or <external-address> if other nodes reach this node elsewhere")
