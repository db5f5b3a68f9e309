"""Built-in plugin: broadcast discovery for the TCP transport.

A node binds the first free port of ``<port>`` .. ``<port>`` + ``<port-range>`` (8555-8560
unless configured) and announces itself to every port of that range on
``<broadcast-address>`` (255.255.255.255 unless configured). The socket is bound to the
interface of the TCP transport's ``<bind-address>`` (SO_BINDTODEVICE), so broadcasts leave
through that interface only; without a bind address discovery stays on loopback.
``<discovery><broadcast>`` may also set ``<announce-interval>`` (ms) and ``<cluster-name>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hive_core.plugins._lan import Channel, LanDiscovery, broadcast_channel, interface_for


class BroadcastDiscovery(LanDiscovery):
    kind = "broadcast"
    bind_setting = "<transport><tcp><bind-address>"

    def channel_opener(self, cluster: Any, bind_address: str | None) -> Callable[[], Channel]:
        discovery = cluster.effective_discovery()
        address, port, port_range = (discovery.broadcast_address, discovery.port,
                                     discovery.port_range)
        return lambda: broadcast_channel(address, port, port_range, interface_for(bind_address))


def create_plugin() -> BroadcastDiscovery:
    """One instance per node: nodes in one process (tests) must not share a roster."""
    return BroadcastDiscovery()
