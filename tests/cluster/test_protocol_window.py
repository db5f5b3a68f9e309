"""Which peers a node clusters with, and the line that says what to do about one it cannot."""

from __future__ import annotations

from hive_core.cluster._upgrade import ProtocolWindow


def hello(protocol: int, oldest: int | None = None, version: str = "0.9") -> dict[str, object]:
    answer: dict[str, object] = {"protocol": protocol, "version": version}
    if oldest is not None:
        answer["min_protocol"] = oldest
    return answer


def test_neighbouring_protocols_have_one_in_common() -> None:
    window = ProtocolWindow(4, oldest=2)
    for peer in (hello(2, 2), hello(3, 2), hello(4, 2), hello(5, 4), hello(9, 3)):
        assert window.refusal("peer", peer) is None, peer


def test_an_older_peer_is_told_to_upgrade_once() -> None:
    window = ProtocolWindow(4, oldest=2)
    line = window.refusal("n1", hello(1))  # builds before protocol 2 send no min_protocol
    assert line is not None
    assert line.startswith("node n1 (Hive 0.9) speaks node protocol 1 and this node 2 to 4: "
                           "not joining. That node is more than one release behind")
    assert "stop every one of them and start them all on this release" in line
    assert window.refusal("n1", hello(1)) == ""  # it dials again: said already
    assert window.refusal("n2", hello(1))  # another node is news


def test_a_newer_peer_tells_this_node_to_upgrade() -> None:
    window = ProtocolWindow(4, oldest=2)
    line = window.refusal("n9", hello(7, 5, version="3.0"))
    assert line == ("node n9 (Hive 3.0) speaks node protocol 5 to 7 and this node 2 to 4: not "
                    "joining. This node is more than one release behind that one: stop it, "
                    "install the cluster's release and start it again "
                    "(README.md, \"Rolling upgrades and restarts\")")
