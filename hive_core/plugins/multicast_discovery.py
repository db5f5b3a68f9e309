"""Built-in plugin: multicast discovery for the UDP transport (HiveMQ's default cluster).

Nodes announce themselves on the UDP transport's ``<multicast-address>`` and
``<multicast-port>`` (228.8.8.8:45588 unless configured), through the interface of the
transport's ``<bind-address>`` only, with ``<multicast-ttl>`` hops (1: the link). Without a
bind address discovery stays on loopback. ``<discovery><multicast>`` may set
``<announce-interval>`` (ms) and ``<cluster-name>``.
"""

from __future__ import annotations

import logging
from typing import Any

from hive_core.plugins._lan import (
    AnnouncerSettings,
    LanDiscovery,
    check_bind_address,
    interface_for,
    multicast_channel,
    note_default_interface,
)

_SETTING = "<transport><udp><bind-address>"


class MulticastDiscovery(LanDiscovery):
    kind = "multicast"

    def settings_for(self, cluster: Any, log: logging.Logger) -> AnnouncerSettings:
        transport = cluster.effective_transport()
        discovery = cluster.effective_discovery()
        bind_address = transport.bind_address
        check_bind_address(bind_address, _SETTING)
        note_default_interface(self.kind, bind_address, _SETTING, log)
        group, port, ttl = (transport.multicast_address, transport.multicast_port,
                            transport.multicast_ttl)
        return AnnouncerSettings(
            self.kind, discovery.cluster_name, discovery.announce_interval / 1000,
            lambda: multicast_channel(group, port, interface_for(bind_address), ttl))


def create_plugin() -> MulticastDiscovery:
    """One instance per node: nodes in one process (tests) must not share a roster."""
    return MulticastDiscovery()
