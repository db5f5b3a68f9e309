"""ConnectedClaims: a CONNECT asks first the copy whose client was connected at its last claim,
when the directory names another one (taken over while the two were apart) that it has not
merged with yet (simulation seed 3757: QoS 2 twice after the client moved to a third node)."""

from __future__ import annotations

from hive_core.cluster._claims import ConnectedClaims

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
