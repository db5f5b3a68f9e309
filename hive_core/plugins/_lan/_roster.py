"""The nodes heard on the LAN lately; a node not heard for a while ages out. Sans-IO."""

from __future__ import annotations

from dataclasses import dataclass

from hive_core.plugins._lan._announcement import Announcement
from hive_ext_api import ClusterNodeAddress

__all__ = ["HeardNode", "Roster"]


@dataclass(slots=True)
class HeardNode:
    node_id: str
    address: ClusterNodeAddress
    last_heard: float  # monotonic seconds


class Roster:
    """Other nodes of one cluster, by node id, with when each was last heard.

    ``expiry`` is how long a node stays listed after its last announcement. A node that
    restarts keeps its id (it lives in the node's data folder), so its new address replaces
    the old one instead of both being proposed.
    """

    def __init__(self, expiry: float) -> None:
        if expiry <= 0:
            raise ValueError("the expiry must be positive")
        self.expiry = expiry
        self._nodes: dict[str, HeardNode] = {}

    def heard(self, announcement: Announcement, now: float) -> bool:
        """Note an announcement; True when it names a node that was not listed (or moved)."""
        known = self._nodes.get(announcement.node_id)
        address = announcement.address
        if known is not None and known.address == address and not self._expired(known, now):
            known.last_heard = max(known.last_heard, now)
            return False
        self._nodes[announcement.node_id] = HeardNode(announcement.node_id, address, now)
        return True

    def left(self, node_id: str) -> HeardNode | None:
        """The node said it is leaving: forget it now. The node it was, or None."""
        return self._nodes.pop(node_id, None)

    def expire(self, now: float) -> list[HeardNode]:
        """Drop the nodes not heard within the expiry; the ones dropped."""
        gone = [node for node in self._nodes.values() if self._expired(node, now)]
        for node in gone:
            del self._nodes[node.node_id]
        return gone

    def addresses(self, now: float) -> list[ClusterNodeAddress]:
        """The addresses of the nodes heard within the expiry, in node id order."""
        return [node.address for _id, node in sorted(self._nodes.items())
                if not self._expired(node, now)]

    def __len__(self) -> int:
        return len(self._nodes)

    def _expired(self, node: HeardNode, now: float) -> bool:
        return now - node.last_heard > self.expiry
