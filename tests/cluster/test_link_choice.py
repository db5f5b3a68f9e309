"""Which of two links between the same two nodes stays (``Membership.establish``): every order
in which the HELLOs and WELCOMEs of the dials can arrive, in the cases that make second links
(crossing dials, a node that restarted at a new address, one node reached under two
addresses), must end with both nodes on the same open link.

The real ``Membership`` runs on stub node parts and stub links; a frame is read when the test
says so, which is how all the orders are tried."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest.mock import MagicMock

import pytest

from hive_core.cluster._membership import Membership
from hive_core.cluster._parts import Member
from hive_core.cluster._wire import FrameKind
from hive_ext_api import ClusterNodeAddress


@dataclass(eq=False)
class End:
    """One end of a link: what ``Membership`` sees of a ``PeerLink``."""

    pair: Pair
    outbound: bool
    peer_id: str | None = None
    sent: list[tuple[FrameKind, Any]] = field(default_factory=list)
    last_read: float = field(default_factory=time.monotonic)
    went_stale: bool = False
    peer_address: Any = None

    @property
    def closed(self) -> bool:
        return self.pair.closed

    def send(self, kind: FrameKind, body: Any = None) -> None:
        self.sent.append((kind, body))

    def close(self) -> None:
        self.pair.closed = True  # the other end reads the end of the stream soon after


@dataclass(eq=False)
class Pair:
    name: str
    closed: bool = False
    dialler: End = field(init=False)
    answerer: End = field(init=False)

    def __post_init__(self) -> None:
        self.dialler, self.answerer = End(self, True), End(self, False)

    def welcome(self) -> dict[str, Any] | None:
        bodies = [body for kind, body in self.answerer.sent if kind is FrameKind.WELCOME]
        return bodies[-1] if bodies else None


def membership(node_id: str, incarnation: int, port: int) -> Membership:
    node = MagicMock()
    node.node_id, node.incarnation = node_id, incarnation
    node.settings.protocol = 4
    node.settings.heartbeat_interval, node.settings.heartbeat_timeout = 0.5, 3.0
    node.settings.progress_interval = 10.0
    node.address = ClusterNodeAddress("127.0.0.1", port)
    node.health = None
    found = Membership(node)
    found._protocols = MagicMock()
    found._protocols.refusal.return_value = None
    return found


@dataclass
class Dial:
    """``frm`` dials ``to`` on ``pair``: ``to`` reads the HELLO, then ``frm`` the WELCOME."""

    frm: Membership
    to: Membership
    pair: Pair


def orders(dials: list[Dial]) -> Iterator[list[tuple[str, Dial]]]:
    """Every order of the dials' two steps in which a WELCOME is read after its HELLO."""
    steps = [(step, dial) for dial in dials for step in ("hello", "welcome")]
    for order in itertools.permutations(steps):
        if all(order.index(("hello", d)) < order.index(("welcome", d)) for d in dials):
            yield list(order)


def play(order: list[tuple[str, Dial]]) -> None:
    for step, dial in order:
        if step == "hello":
            if not dial.pair.closed:
                dial.to.establish(dial.pair.answerer, dial.frm.hello(), answer=True)
        else:
            welcome = dial.pair.welcome()  # a WELCOME sent before the close still arrives
            if welcome is not None:
                dial.frm.establish(dial.pair.dialler, welcome)


def settled_on_one_link(a: Membership, b: Membership) -> bool:
    at_a, at_b = a.members.get(b.node.node_id), b.members.get(a.node.node_id)
    return (at_a is not None and at_b is not None
            and isinstance(at_a.link, End) and isinstance(at_b.link, End)
            and at_a.link.pair is at_b.link.pair and not at_a.link.closed)


IDS = [("a", "b"), ("b", "a")]
Setup = Callable[[], tuple[Membership, Membership, list[Dial]]]


def in_every_order(setup: Setup) -> None:
    """Play each order of the dials ``setup`` makes (afresh each time): one link in the end."""
    for index in range(6):
        a, b, dials = setup()
        order = list(orders(dials))[index]
        play(order)
        assert settled_on_one_link(a, b), [(step, dial.pair.name) for step, dial in order]


@pytest.mark.parametrize(("first", "second"), IDS)
def test_crossing_dials_end_on_one_link_in_every_order(first: str, second: str) -> None:
    def setup() -> tuple[Membership, Membership, list[Dial]]:
        a, b = membership(first, 1, 1), membership(second, 1, 2)
        return a, b, [Dial(a, b, Pair("a->b")), Dial(b, a, Pair("b->a"))]

    in_every_order(setup)


@pytest.mark.parametrize(("first", "second"), IDS)
def test_a_node_restarted_at_a_new_address_and_dials_crossing_end_on_one_link(
        first: str, second: str) -> None:
    """The restarted node (incarnation 2) and a node still holding a link to its previous
    incarnation dial each other at once; the old link's verdict is not about the new one."""
    def setup() -> tuple[Membership, Membership, list[Dial]]:
        a, b = membership(first, 2, 1), membership(second, 1, 2)
        dead = Pair("old")
        b.members[first] = Member(first, ClusterNodeAddress("127.0.0.1", 9), "", 4,
                                  dead.dialler, 1)  # type: ignore[arg-type]
        b.members[first].joined_at -= 100
        dead.dialler.last_read -= 100
        return a, b, [Dial(a, b, Pair("a->b")), Dial(b, a, Pair("b->a"))]

    in_every_order(setup)


@pytest.mark.parametrize(("first", "second"), IDS)
def test_one_node_reached_under_two_addresses_ends_on_one_link(first: str, second: str) -> None:
    """``first`` dials ``second`` at two addresses at once: one link stays, whichever WELCOME
    arrives first (a verdict to close a link is followed with no member yet, too)."""
    def setup() -> tuple[Membership, Membership, list[Dial]]:
        a, b = membership(first, 1, 1), membership(second, 1, 2)
        return a, b, [Dial(a, b, Pair("one")), Dial(a, b, Pair("two"))]

    in_every_order(setup)


@pytest.mark.parametrize(("first", "second"), IDS)
@pytest.mark.parametrize("joined_long_ago", [False, True])
@pytest.mark.parametrize("dialled_by_first", [False, True])
def test_linked_nodes_that_dial_again_crossing_stay_on_one_link(
        first: str, second: str, joined_long_ago: bool, dialled_by_first: bool) -> None:
    """Linked already (either end having dialled), both dial again at once (a discovery
    reload): whatever each end's clock says, they end on one link."""
    def setup() -> tuple[Membership, Membership, list[Dial]]:
        a, b = membership(first, 1, 1), membership(second, 1, 2)
        old = Pair("old")
        a_end, b_end = (old.dialler, old.answerer) if dialled_by_first else \
            (old.answerer, old.dialler)
        for this, other, end in ((a, second, a_end), (b, first, b_end)):
            this.members[other] = Member(other, ClusterNodeAddress("127.0.0.1", 9), "", 4,
                                         end, 1)  # type: ignore[arg-type]
            end.peer_id = other
        if joined_long_ago:
            a.members[second].joined_at -= 100  # one end's clock only: they disagree
        return a, b, [Dial(a, b, Pair("a->b")), Dial(b, a, Pair("b->a"))]

    in_every_order(setup)
