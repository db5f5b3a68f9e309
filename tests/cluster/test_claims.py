"""ConnectedClaims: a CONNECT asks first the copy whose client was connected at its last claim,
when the directory names another one (taken over while the two were apart) that it has not
merged with yet (simulation seed 3757: QoS 2 twice after the client moved to a third node)."""

from __future__ import annotations

import asyncio

from cluster.test_membership import Node, run_cluster, settle
from hive_core.cluster._claims import ConnectedClaims
from hive_core.mqtt import Disconnect

from ._memory_network import MemoryNetwork

MEMBERS = {"n1", "n2", "n3"}


def test_a_connected_claim_older_than_the_directorys_is_asked_first() -> None:
    claims = ConnectedClaims()
    claims.claimed("c", "n1", 10, connected=True)  # its client on n1, before the split
    # n2 took n1's sessions over meanwhile (epoch 20): the directory names n2
    assert claims.contested("c", "n2", MEMBERS) == "n1"
    assert claims.contested("c", "n2", {"n2", "n3"}) is None  # n1 not linked here: no
    assert claims.contested("c", "n1", MEMBERS) is None  # the directory names it already


def test_a_claim_is_dropped_when_that_node_says_otherwise_or_lets_go() -> None:
    claims = ConnectedClaims()
    claims.claimed("c", "n1", 10, connected=True)
    claims.claimed("c", "n3", 5, connected=False)  # another node, not connected: nothing
    assert claims.contested("c", "n2", MEMBERS) == "n1"
    # n1 restarted: its OWNED says not connected, with an epoch that starts lower
    claims.claimed("c", "n1", 0, connected=False)
    assert claims.contested("c", "n2", MEMBERS) is None
    claims.claimed("c", "n1", 13, connected=True)
    claims.forget("c", "n3")  # another node's copy went: not this claim
    assert claims.contested("c", "n2", MEMBERS) == "n1"
    claims.forget("c", "n1")  # n1 dropped its copy (SESSION_GONE)
    assert claims.contested("c", "n2", MEMBERS) is None
    claims.claimed("c", "n1", 14, connected=True)
    claims.claimed("d", "n1", 14, connected=True)
    claims.claimed("e", "n3", 14, connected=True)
    claims.forget_node("n1")  # taken over
    assert claims.contested("c", "n2", MEMBERS) is None
    assert claims.contested("e", "n2", MEMBERS) == "n3"
    claims.forget("e")  # held here now
    assert claims.contested("e", "n2", MEMBERS) is None


def test_the_newest_connected_claim_wins() -> None:
    claims = ConnectedClaims()
    claims.claimed("c", "n1", 10, connected=True)
    claims.claimed("c", "n3", 30, connected=True)
    claims.claimed("c", "n1", 20, connected=True)  # older than n3's: ignored
    assert claims.contested("c", "n2", MEMBERS) == "n3"



def test_a_node_whose_client_connected_and_left_again_keeps_its_copy_as_it_told_the_others() -> None:  # noqa: E501
    """Chaos seed 21: a node woke from a freeze into a merge; a client connected there
    (CLIENT_CONNECTED, a new epoch) and was gone again when the other side's OWNED came, which
    claimed an older epoch with its client connected. This node compared that claim with its
    client's state *now* (not connected) and dropped its copy; the other node compared the
    CLIENT_CONNECTED it was told (connected, newer) and dropped its own: both copies gone,
    the next CONNECT found no session. Both must compare the claims as they were told."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        _n1, n3 = nodes
        client = n3.client("c", clean=False)
        await settle()
        client.send(Disconnect())  # gone again; its session stays on n3
        await settle()
        custody = n3.cluster.custody
        told = custody.owned_since["c"]
        # n1's copy: its client connected there while the two were apart, at an older epoch
        custody._on_owned(n3.cluster.members["n1"], [["c", told - 1, True]])
        await asyncio.sleep(0.05)
        assert n3.broker.custody.has_session("c")

    run_cluster(scenario, count=2)
