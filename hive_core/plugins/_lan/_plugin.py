"""The hooks both LAN discoveries share; a subclass says which <discovery> it serves and how."""

from __future__ import annotations

import abc
import ipaddress
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from hive_core.plugins._lan._announcer import Announcer, AnnouncerSettings
from hive_core.plugins._lan._channel import Channel
from hive_core.plugins._lan._interface import is_wildcard
from hive_ext_api import ClusterNodeAddress, ExtensionContext, ExtensionRefused, hookimpl

__all__ = ["LanDiscovery"]


def check_bind_address(bind_address: str | None, setting: str) -> None:
    """Refuse a bind address LAN discovery can never use (IPv6), naming the setting."""
    if is_wildcard(bind_address):
        return
    try:
        version = ipaddress.ip_address(str(bind_address)).version
    except ValueError:
        return  # a host name: resolved when the channel opens
    if version != 4:
        raise ExtensionRefused(f"{setting} {bind_address} is IPv6; multicast and broadcast "
                               "discovery speak IPv4 only (use an IPv4 address, or static "
                               "or extension discovery)")


def note_default_interface(kind: str, bind_address: str | None, setting: str,
                           log: logging.Logger) -> None:
    """Say at start when discovery stays on loopback because no interface was given."""
    if is_wildcard(bind_address):
        log.info("%s discovery stays on loopback: %s names no interface, so only nodes on "
                 "this host are found and nothing leaves it; set it to this host's address on "
                 "the LAN to find nodes there", kind.capitalize(), setting)


class LanDiscovery(abc.ABC):
    """Discovery by announcements on the local network, active when its <discovery> is chosen.

    Membership stays the core's: reloads only propose the nodes heard lately.
    """

    kind: ClassVar[str]  # the <discovery> element this serves: "multicast" or "broadcast"
    bind_setting: ClassVar[str]  # the transport's <bind-address>, whose interface it uses

    def __init__(self) -> None:
        self.announcer: Announcer | None = None

    def settings_for(self, cluster: Any, log: logging.Logger) -> AnnouncerSettings:
        """The announcer's settings from the node's <cluster>; raises ExtensionRefused."""
        bind_address = cluster.effective_transport().bind_address
        check_bind_address(bind_address, self.bind_setting)
        note_default_interface(self.kind, bind_address, self.bind_setting, log)
        discovery = cluster.effective_discovery()
        return AnnouncerSettings(self.kind, discovery.cluster_name,
                                 discovery.announce_interval / 1000,
                                 self.channel_opener(cluster, bind_address))

    @abc.abstractmethod
    def channel_opener(self, cluster: Any, bind_address: str | None) -> Callable[[], Channel]:
        """How the announcer opens its socket, on the interface of ``bind_address``."""

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        cluster = getattr(context.node_config, "cluster", None)
        if cluster is None or not cluster.enabled or cluster.discovery_kind != self.kind:
            return
        settings = self.settings_for(cluster, context.log)
        metrics = context.services.metrics
        errors = metrics.counter(f"discovery.{self.kind}.errors",
                                 f"{self.kind} discovery problems: the socket could not be "
                                 "opened, a send failed, a malformed announcement")
        announcer = self.announcer = Announcer(settings, context.log, errors.inc)
        metrics.gauge(f"discovery.{self.kind}.nodes", lambda: len(announcer.roster),
                      f"other nodes heard through {self.kind} discovery lately")

    @hookimpl
    async def hive_extension_stop(self) -> None:
        if self.announcer is not None:
            await self.announcer.stop()
            self.announcer = None

    @hookimpl
    async def hive_discovery_init(self, own_address: ClusterNodeAddress, cluster_id: str) -> None:
        if self.announcer is not None and not self.announcer.running:
            await self.announcer.start(cluster_id, own_address)

    @hookimpl
    def hive_discovery_reload(self) -> list[ClusterNodeAddress] | None:
        return self.announcer.addresses() if self.announcer is not None else None

    @hookimpl
    def hive_discovery_reload_interval(self) -> float | None:
        # Reload as often as nodes announce: a node heard is dialled within one interval.
        return self.announcer.settings.interval if self.announcer is not None else None

    @hookimpl
    async def hive_discovery_destroy(self) -> None:
        if self.announcer is not None:
            await self.announcer.stop()
