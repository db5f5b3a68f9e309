"""The upgrade window: which peers a node can form a cluster with, and what to do when it cannot.

Two nodes speak the lower of their node protocols, when that is one both still speak (each says
the oldest it speaks in its HELLO; a build from before protocol 2 says nothing, i.e. 1). Each
release speaks the previous release's protocol, so a rolling upgrade mixes two neighbouring
releases (README, "Rolling upgrades and restarts"). A peer outside the window is refused with a
line that says which node is behind and how to get past it; once per peer, as it dials again at
every discovery round.
"""

from __future__ import annotations

from typing import Any

from hive_core.cluster._wire import MIN_PROTOCOL_VERSION

__all__ = ["ProtocolWindow"]

GUIDE = "README.md, \"Rolling upgrades and restarts\""


class ProtocolWindow:
    """This node's node protocols, ``MIN_PROTOCOL_VERSION`` to ``newest``."""

    def __init__(self, newest: int, oldest: int = MIN_PROTOCOL_VERSION) -> None:
        self.oldest, self.newest = oldest, newest
        self._told: set[tuple[str, int]] = set()

    def refusal(self, peer_id: str, hello: dict[str, Any]) -> str | None:
        """None when this node and the peer of ``hello`` have a protocol in common; else why
        not and what to do, or "" when that was said already for this peer and protocol."""
        protocol = int(hello["protocol"])
        peer_oldest = int(hello.get("min_protocol", 1))
        if max(peer_oldest, self.oldest) <= min(protocol, self.newest):
            return None
        if (peer_id, protocol) in self._told:
            return ""
        self._told.add((peer_id, protocol))
        build = f"Hive {hello['version']}" if hello.get("version") else "a Hive build"
        ours = f"{self.oldest} to {self.newest}"
        theirs = f"{peer_oldest} to {protocol}" if peer_oldest != protocol else f"{protocol}"
        if protocol < self.oldest:
            return (
                f"node {peer_id} ({build}) speaks node protocol {theirs} and this node {ours}: "
                f"not joining. That node is more than one release behind, and a rolling upgrade "
                f"mixes neighbouring releases only. Upgrade it: stop it, install this node's "
                f"release there and start it again (it then joins). If all the other nodes are "
                f"of that old release too, stop every one of them and start them all on this "
                f"release: a cluster cannot be upgraded across more than one release node by "
                f"node ({GUIDE})")
        return (
            f"node {peer_id} ({build}) speaks node protocol {theirs} and this node {ours}: not "
            f"joining. This node is more than one release behind that one: stop it, install "
            f"the cluster's release and start it again ({GUIDE})")
