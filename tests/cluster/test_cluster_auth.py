"""Nodes authenticate each other with the cluster's shared secret (issue 8), in one process.

The handshake and the signed records on their own (sans-IO), then whole clusters on the
in-memory network, over real UDP sockets and over TCP: nodes with the same secret form a
cluster and route; a node with another secret, or none, is refused and counted; a peer that says
nothing is refused after the connect timeout; a relayed handshake gives the relay nothing.
The same with `hive run` processes and strangers on real sockets: test_cluster_authentication.py.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from cluster.test_membership import Node, address, full_mesh, until
from cluster.test_udp import UdpNode, routed
from hive_core.cluster import Cluster, FrameDecoder, FrameKind, encode_frame
from hive_core.cluster._auth import (
    HANDSHAKE_FRAME_MAX,
    RECORD_MAX,
    AuthenticationFailed,
    Handshake,
    RecordOpener,
    cluster_key,
)
from hive_ext_api import ClusterNodeAddress

from ._memory_network import MemoryNetwork

pytestmark = pytest.mark.timeout(30)

KEY = cluster_key("the-cluster-secret-of-these-tests")
OTHER_KEY = cluster_key("another-cluster-secret-entirely")


def frames(data: bytes) -> list[tuple[FrameKind, Any]]:
    return FrameDecoder().feed(data)


def exchange(dialer: Handshake, acceptor: Handshake, chunk: int = 0) -> list[str]:
    """Run a handshake to its end, ``chunk`` bytes at a time (0: whole writes); what went
    where, in order ("d>a AUTH_PROOF" is the dialler's proof reaching the acceptor)."""
    wire = [("d>a", dialer.challenge()), ("a>d", acceptor.challenge())]
    seen = []
    while wire:
        direction, data = wire.pop(0)
        seen += [f"{direction} {kind.name}" for kind, _ in frames(data)]
        receiver = acceptor if direction == "d>a" else dialer
        pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
        for piece in pieces:
            reply, rest = receiver.feed(piece)
            assert rest in (None, b"")
            if reply:
                wire.append(("a>d" if direction == "d>a" else "d>a", reply))
    return seen


# ------------------------------------------------------------------------------ handshake


@pytest.mark.parametrize("chunk", [0, 1, 7])
def test_both_ends_prove_themselves_the_dialler_first(chunk: int) -> None:
    dialer, acceptor = Handshake(KEY, dialer=True), Handshake(KEY, dialer=False)
    assert exchange(dialer, acceptor, chunk) == [
        "d>a AUTH_CHALLENGE", "a>d AUTH_CHALLENGE", "d>a AUTH_PROOF", "a>d AUTH_PROOF"]
    assert dialer.proven and acceptor.proven
    assert dialer.sealer and dialer.opener and acceptor.sealer and acceptor.opener
    hello = encode_frame(FrameKind.HELLO, {"id": "n1"})
    sealed = dialer.sealer.seal(hello)
    assert hello in sealed  # signed, not encrypted: TLS is for that
    assert b"".join(acceptor.opener.open(sealed[i:i + 5]) for i in range(0, len(sealed), 5)) \
        == hello
    assert dialer.opener.open(acceptor.sealer.seal(b"back")) == b"back"


def test_the_accepting_node_proves_nothing_to_a_peer_with_another_secret() -> None:
    dialer, acceptor = Handshake(OTHER_KEY, dialer=True), Handshake(KEY, dialer=False)
    acceptor.challenge()
    assert acceptor.feed(dialer.challenge()) == (b"", None)  # no proof for a mere nonce
    proof, _ = dialer.feed(Handshake(KEY, dialer=False).challenge())
    with pytest.raises(AuthenticationFailed, match="its proof is wrong: its shared secret is "
                                                   "not this node's"):
        acceptor.feed(proof)


def test_the_dialling_node_checks_the_acceptors_proof() -> None:
    dialer, impostor = Handshake(KEY, dialer=True), Handshake(OTHER_KEY, dialer=False)
    impostor.feed(dialer.challenge())
    proof, _ = dialer.feed(impostor.challenge())
    impostor._check = lambda body: None  # type: ignore[method-assign]  # it answers anyway
    answer, _ = impostor.feed(proof)
    assert [kind for kind, _ in frames(answer)] == [FrameKind.AUTH_PROOF]
    with pytest.raises(AuthenticationFailed, match="its proof is wrong"):
        dialer.feed(answer)


def _challenge(**body: Any) -> bytes:
    return encode_frame(FrameKind.AUTH_CHALLENGE, body)


@pytest.mark.parametrize(("first", "why"), [
    (encode_frame(FrameKind.HELLO, {"id": "intruder", "protocol": 1}),
     "it sent HELLO before authenticating"),
    (encode_frame(FrameKind.FILTER_ADD, "#"), "it sent FILTER_ADD before authenticating"),
    (encode_frame(FrameKind.SESSION_FETCH, [1, "c"]),
     "it sent SESSION_FETCH before authenticating"),
    (encode_frame(FrameKind.AUTH_PROOF, {"proof": b"x" * 32}),
     "it sent AUTH_PROOF before authenticating"),
    (b"\x00\x00\x00\x02\x63\x00", "it sent a frame of unknown kind 99 before authenticating"),
    ((HANDSHAKE_FRAME_MAX + 1).to_bytes(4, "big") + b"\x00" * 8,
     f"a frame of {HANDSHAKE_FRAME_MAX + 1} bytes before authenticating"),
    (_challenge(version=1, nonce=b"short"), "its challenge is not a fresh nonce"),
    (_challenge(version=2, nonce=b"n" * 32), "it speaks cluster authentication version 2"),
    (_challenge(nonce="not bytes"), "its challenge is malformed"),
    (b"\x00\x00\x00\x02\x32\x0b", "its AUTH_CHALLENGE frame does not decode"),
])
def test_anything_but_a_challenge_first_is_refused(first: bytes, why: str) -> None:
    with pytest.raises(AuthenticationFailed, match=why):
        Handshake(KEY, dialer=False).feed(first)


def test_a_node_refuses_its_own_nonce_sent_back() -> None:
    node = Handshake(KEY, dialer=False)
    with pytest.raises(AuthenticationFailed, match="not a fresh nonce"):
        node.feed(node.challenge())


def proven_pair() -> tuple[Handshake, Handshake]:
    dialer, acceptor = Handshake(KEY, dialer=True), Handshake(KEY, dialer=False)
    exchange(dialer, acceptor)
    return dialer, acceptor


def test_a_record_altered_replayed_reflected_or_forged_is_refused() -> None:
    dialer, acceptor = proven_pair()
    assert dialer.sealer and acceptor.opener and acceptor.sealer
    first = dialer.sealer.seal(b"first")
    acceptor.opener.open(first)
    altered = bytearray(dialer.sealer.seal(b"publish to a/b"))
    altered[8] ^= 0x01
    with pytest.raises(AuthenticationFailed, match="record 1 is not signed"):
        _fresh_copy(acceptor).open(bytes(altered))
    cases = {
        "replayed": first,
        "reflected": acceptor.sealer.seal(b"x"),  # the acceptor's own record sent back to it
        "forged": b"\x00\x00\x00\x05hello" + secrets.token_bytes(32),
        "plain frame": encode_frame(FrameKind.FILTER_ADD, "#") + b"\x00" * 32,
    }
    for name, data in cases.items():
        with pytest.raises(AuthenticationFailed, match="is not signed"):
            _fresh_copy(acceptor).open(data)
            raise AssertionError(f"the {name} record was taken")


def _fresh_copy(handshake: Handshake) -> RecordOpener:
    """The opener as it is now, so that each refused case starts from the same point."""
    return copy.deepcopy(handshake.opener)  # type: ignore[return-value]


def test_a_write_larger_than_a_record_is_cut_and_put_together_again() -> None:
    dialer, acceptor = proven_pair()
    assert dialer.sealer and acceptor.opener
    data = secrets.token_bytes(2 * RECORD_MAX + 100)
    sealed = dialer.sealer.seal(data)
    assert len(sealed) == len(data) + 3 * (4 + 32)
    assert acceptor.opener.open(sealed) == data
    oversized = (RECORD_MAX + 1).to_bytes(4, "big") + b"\x00" * 100
    with pytest.raises(AuthenticationFailed, match=f"a record of {RECORD_MAX + 1} bytes"):
        acceptor.opener.open(oversized)


def test_a_relayed_handshake_gives_the_relay_nothing() -> None:
    """A stranger that makes a node dial it relays that link's handshake to a link it opened
    to the same node: both ends prove themselves (they are the node), but the stranger cannot
    put a frame of its own on either link."""
    node_dialling, node_accepting = Handshake(KEY, dialer=True), Handshake(KEY, dialer=False)
    exchange(node_dialling, node_accepting)  # every byte passed through the stranger
    assert node_dialling.proven and node_accepting.proven
    assert node_accepting.opener is not None
    hello = encode_frame(FrameKind.HELLO, {"id": "intruder", "protocol": 1})
    with pytest.raises(AuthenticationFailed, match="is not signed"):
        node_accepting.opener.open(hello + b"\x00" * 32)


# ------------------------------------------------------------------------------ clusters


def secured(node: Any, secret: str | None) -> Any:
    """``node`` (of test_membership or test_udp) with a shared secret in its settings."""
    old: Cluster = node.cluster
    settings = dataclasses.replace(old.settings, shared_secret=secret)
    node.cluster = Cluster(old.node_id, settings, old.broker, old.extensions, old.transport)
    return node


@pytest.fixture
def refusals(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.WARNING, logger="hive.cluster")
    yield caplog


def refused(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused the cluster link" in r.message]


def test_on_the_memory_network_only_nodes_with_the_secret_join(
        refusals: pytest.LogCaptureFixture) -> None:
    secret = "the-cluster-secret-of-these-tests"

    async def main() -> None:
        network = MemoryNetwork()
        names = ["n1", "n2", "wrong", "none"]
        seeds = [address(n) for n in names]
        n1, n2, wrong, none = nodes = [
            secured(Node(name, seeds, network.transport(name)), key)
            for name, key in zip(names, [secret, secret, "not-the-secret-of-this-cluster",
                                         None], strict=True)]
        try:
            for node in nodes:
                await node.start()
            await until(full_mesh([n1, n2]), what="n1 and n2 joined")
            await until(lambda: n1.cluster.authentication.failures >= 2
                        and wrong.cluster.authentication.failures >= 2
                        and none.cluster.authentication.failures >= 2, what="the refusals")
            await asyncio.sleep(0.3)  # discovery reloads every 0.05 s: they keep knocking
            assert (n1.peers, n2.peers, wrong.peers, none.peers) == ({"n2"}, {"n1"}, set(),
                                                                     set())
            subscriber = n2.client("sub")
            subscriber.subscribe("t/#")
            await until(lambda: n1.cluster.table.filters_of("n2") == {"t/#"})
            n1.client("pub").publish("t/1", b"signed records")
            await until(lambda: subscriber.payloads == [b"signed records"])
            assert n1.cluster.stats().authentication_failures == \
                n1.cluster.authentication.failures
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(main())
    messages = refused(refusals)
    assert any("its proof is wrong" in m for m in messages)
    assert any("it sent HELLO before authenticating" in m for m in messages)
    assert any("it asks for a cluster shared secret and this node has none" in m
               for m in messages)
    assert any(m.startswith("refused the cluster link from wrong:0") for m in messages)


class _Silent(asyncio.Protocol):
    """A stranger that connects and says nothing."""

    def __init__(self) -> None:
        self.received = b""
        self.lost = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.received += data

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set_result(None)


def test_a_peer_that_does_not_authenticate_in_time_is_refused(
        refusals: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        network = MemoryNetwork()
        node = secured(Node("n1", [], network.transport("n1")), "the-cluster-secret-of-tests")
        await node.start()
        try:
            stranger = network.transport("stranger")
            silent = await stranger.dial(address("n1"), _Silent, 1.0)
            loop = asyncio.get_running_loop()
            begun = loop.time()
            await asyncio.wait_for(silent.lost, 5)
            waited = loop.time() - begun
            assert 0.9 < waited < 2.0  # the node's connect timeout: 1 s
            assert [kind for kind, _ in frames(silent.received)] == [FrameKind.AUTH_CHALLENGE]
            assert node.cluster.authentication.failures == 1
        finally:
            await node.stop()

    asyncio.run(main())
    assert refused(refusals) == ["refused the cluster link from stranger:0: it did not "
                                 "authenticate within 1 s (every node needs the same "
                                 "<cluster><authentication><shared-secret>)"]


def test_udp_links_authenticate_too(refusals: pytest.LogCaptureFixture) -> None:
    secret = "the-cluster-secret-of-these-tests"

    async def main() -> None:
        n1, n2 = secured(UdpNode("n1"), secret), secured(UdpNode("n2"), secret)
        wrong = secured(UdpNode("wrong"), "not-the-secret-of-this-cluster")
        try:
            await n1.start([])
            await n2.start([n1.cluster.address])
            await until(full_mesh([n1, n2]), what="n1 and n2 joined over UDP")
            subscriber = await routed(n2, n1, "u/+")
            n1.client("pub").publish("u/1", b"signed over udp")
            await until(lambda: subscriber.payloads == [b"signed over udp"])
            await wrong.start([n1.cluster.address, n2.cluster.address])
            await until(lambda: n1.cluster.authentication.failures >= 1
                        and n2.cluster.authentication.failures >= 1, what="the refusals")
            assert wrong.peers == set() and n1.peers == {"n2"}
        finally:
            for node in (wrong, n2, n1):
                await node.stop()

    asyncio.run(main())
    assert any("its proof is wrong" in m for m in refused(refusals))


def test_tcp_links_authenticate_too() -> None:
    from hive_core.cluster import TcpTransport

    async def main() -> None:
        seeds: list[ClusterNodeAddress] = []
        nodes = [secured(Node(name, [], TcpTransport("127.0.0.1", 0), host="127.0.0.1", port=0),
                         secret)
                 for name, secret in (("a", "the-cluster-secret-of-tests"),
                                      ("b", "the-cluster-secret-of-tests"),
                                      ("c", "not-the-secret-of-this-cluster"))]
        try:
            for node in nodes:
                node.discovery.seeds = seeds
                await node.start()
                seeds.append(node.cluster.address)
            a, b, c = nodes
            await until(full_mesh([a, b]), what="a and b joined over TCP")
            await until(lambda: c.cluster.authentication.failures >= 2, what="c refused")
            assert c.peers == set() and a.peers == {"b"}
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(main())


class _Listening(asyncio.Protocol):
    """A stranger a node dials (discovery named it): challenges back, then a forged record."""

    def __init__(self, seen: list[bytes]) -> None:
        self.seen = seen

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        transport.write(encode_frame(  # type: ignore[attr-defined]
            FrameKind.AUTH_CHALLENGE, {"version": 1, "nonce": secrets.token_bytes(32)}))

    def data_received(self, data: bytes) -> None:
        self.seen.append(data)
        if len(self.seen) == 2:  # the node proved itself: pretend to have done the same
            self.transport.write(  # type: ignore[attr-defined]
                encode_frame(FrameKind.AUTH_PROOF, {"proof": secrets.token_bytes(32)}))


def test_a_dialling_node_holds_its_hello_until_the_peer_is_proven(
        refusals: pytest.LogCaptureFixture) -> None:
    async def main() -> list[bytes]:
        network = MemoryNetwork()
        seen: list[bytes] = []
        await network.transport("stranger").listen(lambda: _Listening(seen))
        node = secured(Node("n1", [ClusterNodeAddress("stranger", 7800)],
                            network.transport("n1")), "the-cluster-secret-of-tests")
        await node.start()
        try:
            await until(lambda: node.cluster.authentication.failures >= 1, what="the refusal")
        finally:
            await node.stop()
        return seen

    seen = asyncio.run(main())
    kinds = [kind for kind, _ in frames(b"".join(seen[:2]))]
    assert kinds == [FrameKind.AUTH_CHALLENGE, FrameKind.AUTH_PROOF]  # no HELLO, nothing else
    assert b"".join(seen[2:]) == b""
    assert refused(refusals)[0].startswith("refused the cluster link to stranger:7800: its "
                                           "proof is wrong")
