"""Which node last said a session's client is connected there, beside the directory.

The directory (``Custody.owners``) names the copy with the highest custody epoch. After a split
that is often a copy taken over from a replica, while the node that was cut off still holds the
copy its client stayed connected to. When the two nodes meet, that copy stays (a merge keeps
the connected one) and the taken-over one hands its queue to it. A third node linked to both
before they meet knows both claims; a CONNECT there must not resume the taken-over copy (its
window is from before the split: it would send the client again what the client completed on
the other copy). :class:`ConnectedClaims` keeps, per client id, the newest claim that said
"connected", so that such a CONNECT asks that node first (``Custody._fetch``).

Socket-free; the claims are learnt from OWNED and CLIENT_CONNECTED and dropped when that node
says otherwise, drops the session, is forgotten, or the session is held here.
"""

from __future__ import annotations

from collections.abc import Container


class ConnectedClaims:
    """client id -> (node, custody epoch) of the newest claim made with the client connected."""

    def __init__(self) -> None:
        self._claims: dict[str, tuple[str, int]] = {}

    def claimed(self, client_id: str, node_id: str, epoch: int, connected: bool) -> None:
        """A claim from ``node_id`` (OWNED, or CLIENT_CONNECTED: connected)."""
        current = self._claims.get(client_id)
        if current is not None and current[0] == node_id:
            # That node's own claims come in order on one link (a restarted node's epoch
            # may start lower): its newest one stands.
            if connected:
                self._claims[client_id] = (node_id, epoch)
            else:
                del self._claims[client_id]  # its client left since
        elif connected and (current is None or epoch >= current[1]):
            self._claims[client_id] = (node_id, epoch)

    def contested(self, client_id: str, owner: str | None,
                  members: Container[str]) -> str | None:
        """A member other than the directory's ``owner`` whose copy had its client connected
        at its last claim: the copy a merge of the two will keep."""
        claim = self._claims.get(client_id)
        if claim is None or claim[0] == owner or claim[0] not in members:
            return None
        return claim[0]

    def forget(self, client_id: str, node_id: str | None = None) -> None:
        """The session is held here now, or (``node_id``) that node dropped its copy."""
        claim = self._claims.get(client_id)
        if claim is not None and (node_id is None or claim[0] == node_id):
            del self._claims[client_id]

    def forget_node(self, node_id: str) -> None:
        """No session is held on ``node_id`` any more (taken over, or away for good)."""
        for client_id in [c for c, (n, _) in self._claims.items() if n == node_id]:
            del self._claims[client_id]
