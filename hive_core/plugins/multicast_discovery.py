"""Built-in plugin: multicast discovery for the UDP transport (HiveMQ's default cluster).

Nodes announce themselves on the UDP transport's ``<multicast-address>`` and
``<multicast-port>`` (228.8.8.8:45588 unless configured), through the interface of the
transport's ``<bind-address>`` only, with ``<multicast-ttl>`` hops (1: the link). Without a
bind address discovery stays on loopback. ``<discovery><multicast>`` may set
``<announce-interval>`` (ms) and ``<cluster-name>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hive_core.plugins._lan import Channel, LanDiscovery, interface_for, multicast_channel


class MulticastDiscovery(LanDiscovery):
    kind = "multicast"
    bind_setting = "<transport><udp><bind-address>"

    def channel_opener(self, cluster: Any, bind_address: str | None) -> Callable[[], Channel]:
        transport = cluster.effective_transport()
        group, port, ttl = (transport.multicast_address, transport.multicast_port,
                            transport.multicast_ttl)
        return lambda: multicast_channel(group, port, interface_for(bind_address), ttl)


def create_plugin() -> MulticastDiscovery:
    """One instance per node: nodes in one process (tests) must not share a roster."""
    return MulticastDiscovery()
