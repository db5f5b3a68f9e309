"""Built-in plugin: broadcast discovery for the TCP transport.

A node binds the first free port of ``<port>`` .. ``<port>`` + ``<port-range>`` (8555-8560
unless configured) and announces itself to every port of that range on
``<broadcast-address>`` (255.255.255.255 unless configured). The socket is bound to the
interface of the TCP transport's ``<bind-address>`` (SO_BINDTODEVICE), so broadcasts leave
through that interface only; without a bind address discovery stays on loopback.
``<discovery><broadcast>`` may also set ``<announce-interval>`` (ms) and ``<cluster-name>``.
"""

from __future__ import annotations

import logging
from typing import Any

from hive_core.plugins._lan import (
    AnnouncerSettings,
    LanDiscovery,
    broadcast_channel,
    check_bind_address,
    interface_for,
    note_default_interface,
)

_SETTING = "<transport><tcp><bind-address>"


class BroadcastDiscovery(LanDiscovery):
    kind = "broadcast"

    def settings_for(self, cluster: Any, log: logging.Logger) -> AnnouncerSettings:
        bind_address = cluster.effective_transport().bind_address
        discovery = cluster.effective_discovery()
        check_bind_address(bind_address, _SETTING)
        note_default_interface(self.kind, bind_address, _SETTING, log)
        address, port, port_range = (discovery.broadcast_address, discovery.port,
                                     discovery.port_range)
        return AnnouncerSettings(
            self.kind, discovery.cluster_name, discovery.announce_interval / 1000,
            lambda: broadcast_channel(address, port, port_range, interface_for(bind_address)))


def create_plugin() -> BroadcastDiscovery:
    """One instance per node: nodes in one process (tests) must not share a roster."""
    return BroadcastDiscovery()
