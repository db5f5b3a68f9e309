"""Cluster discovery on the local network: nodes announce themselves by multicast or broadcast.

The datagram format and the roster of nodes heard are sans-IO; the channel module opens the
sockets pinned to one interface; the announcer runs one node's side; the plugin module holds
the hooks the two built-in plugins share.
"""

from hive_core.plugins._lan._announcement import (
    FORMAT_VERSION,
    Announcement,
    AnnouncementKind,
    MalformedAnnouncement,
    decode,
    encode,
)
from hive_core.plugins._lan._announcer import EXPIRY_INTERVALS, Announcer, AnnouncerSettings
from hive_core.plugins._lan._channel import Channel, broadcast_channel, multicast_channel
from hive_core.plugins._lan._interface import Interface, NoSuchInterface, interface_for
from hive_core.plugins._lan._plugin import LanDiscovery
from hive_core.plugins._lan._roster import Roster
from hive_core.plugins._lan._warnings import WarningGate

__all__ = ["EXPIRY_INTERVALS", "FORMAT_VERSION", "Announcement", "AnnouncementKind", "Announcer",
           "AnnouncerSettings", "Channel", "Interface", "LanDiscovery", "MalformedAnnouncement",
           "NoSuchInterface", "Roster", "WarningGate", "broadcast_channel", "decode", "encode",
           "interface_for", "multicast_channel"]
