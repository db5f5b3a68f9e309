"""Issue 8: the node port no longer trusts whoever connects. Real `hive run` nodes on loopback
sharing a secret (<cluster><authentication><shared-secret>), strangers on plain sockets speaking
the node protocol, MQTT clients watching what the nodes do.

A stranger gets the node's challenge and nothing else, whatever it sends (a HELLO with a made-up
node id, a wrong proof, nothing at all), and changes nothing: no message reaches a subscriber,
no retained message appears, a connected client stays connected, a persistent session keeps its
queue; every refusal is counted in the metrics and logged. A node with another secret, or none,
does not join; a node with the right one does. (Mutual TLS: test_cluster_tls.py.)
"""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import HiveProcess, free_port
from e2e._session_helpers import PahoClient

from cluster._nodes import (
    cluster_body,
    cluster_nodes,
    metrics,
    node_id,
    wait_for,
    wait_for_members,
    wait_for_route,
)
from hive_core.cluster._wire import (
    PROTOCOL_VERSION,
    FrameDecoder,
    FrameKind,
    encode_frame,
    encode_publish_frame,
)

pytestmark = pytest.mark.timeout(60)

SECRET = "ThisClusterSecret-" + "x" * 20
REFUSED = r"WARNING - refused the cluster link from 127\.0\.0\.1:\d+: "


def secret_element(secret: str | None) -> str:
    return "" if secret is None else \
        f"<authentication><shared-secret>{secret}</shared-secret></authentication>"


def add_nodes(hive_factory: Callable[..., HiveProcess], count: int, secret: str | None,
              listed: list[int] | None = None) -> list[HiveProcess]:
    """``count`` nodes with ``secret``, each listing ``listed`` (default: the new ones) and
    itself; started in order."""
    ports = [free_port() for _ in range(count)]
    nodes = []
    for port in ports:
        rest = free_port()
        body = cluster_body(port, [*(listed or ports), port], rest).replace(
            "</cluster>", secret_element(secret) + "</cluster>")
        nodes.append(hive_factory(body=body, start=False, cluster=port, rest=rest))
    for node in nodes:
        node.start()
    return nodes


def failures(node: HiveProcess) -> int:
    return int(metrics(node)["cluster"]["authentication_failures"])


def sizes(node: HiveProcess) -> set[int]:
    return {int(size) for size in re.findall(r"Cluster size = (\d+)", node.log)}


# ------------------------------------------------------------------------------ strangers


class Stranger:
    """A plain socket on a node's cluster port, speaking the node protocol without the secret."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.received = b""

    def send(self, *frames: bytes) -> None:
        with contextlib.suppress(OSError):  # the node may have closed already: that is the point
            self.sock.sendall(b"".join(frames))

    def frames_until_closed(self, timeout: float) -> list[tuple[FrameKind, Any]]:
        """Everything the node sends until it closes the link (fails if it does not in time)."""
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"the node kept the link open for {timeout} s") from None
            except ConnectionResetError:
                data = b""
            if not data:
                return FrameDecoder().feed(self.received)
            self.received += data

    def close(self) -> None:
        self.sock.close()


def intrusion(node_port: int) -> list[bytes]:
    """What issue 8's stranger did once in: join, ask for everything, inject, take over."""
    injected = [encode_publish_frame(topic, b"injected", 1, retain, b"", None, "intruder")
                for topic, retain in (("plant/valve", False), ("$SYS/broker/owned", False),
                                      ("plant/retained", True))]
    return [
        encode_frame(FrameKind.HELLO, {"id": "intruder", "protocol": PROTOCOL_VERSION,
                                       "min_protocol": 1, "version": "9.9", "host": "127.0.0.1",
                                       "port": node_port, "incarnation": 1}),
        encode_frame(FrameKind.FILTER_ADD, "#"),
        encode_frame(FrameKind.FILTERS, ["#", "$SYS/#"]),
        *injected,
        encode_frame(FrameKind.RETAIN, ["plant/planted", b"retained by a stranger", 1, True,
                                        b"", None, "intruder"]),
        encode_frame(FrameKind.SESSION_FETCH, [1, "keeper"]),
        encode_frame(FrameKind.CLIENT_CONNECTED, "stayer"),
    ]


@pytest.fixture
def clients() -> Iterator[list[PahoClient]]:
    made: list[PahoClient] = []
    yield made
    for client in made:
        client.close()


def test_strangers_get_the_challenge_and_nothing_else_and_change_nothing(
        hive_factory: Callable[..., HiveProcess], clients: list[PahoClient]) -> None:
    a, b = nodes = add_nodes(hive_factory, 2, SECRET)
    wait_for_members(nodes, 2)

    def client(node: HiveProcess, name: str, **kwargs: Any) -> PahoClient:
        made = PahoClient(node.port, name, **kwargs).connect()
        clients.append(made)
        return made

    watchers = [client(node, f"watcher-{i}") for i, node in enumerate(nodes)]
    for watcher in watchers:
        watcher.subscribe("#", qos=1)
        watcher.subscribe("$SYS/#", qos=1)
    keeper = client(a, "keeper", clean=False, expiry=3600)
    keeper.subscribe("kept/#", qos=1)
    keeper.disconnect()
    stayer = client(a, "stayer")
    wait_for_route(a, b, "#")
    stayer.publish("kept/1", b"queued for keeper", qos=1)
    for watcher in watchers:
        assert watcher.next_message().topic == "kept/1"

    # Three strangers at once on node a's cluster port.
    cluster_port = a.ports["cluster"]
    silent, hello, prover = (Stranger(cluster_port) for _ in range(3))
    hello.send(*intrusion(cluster_port))
    prover.send(encode_frame(FrameKind.AUTH_CHALLENGE, {"version": 1,
                                                        "nonce": secrets.token_bytes(32)}),
                encode_frame(FrameKind.AUTH_PROOF, {"proof": secrets.token_bytes(32)}),
                *intrusion(cluster_port))
    begun = time.monotonic()
    for stranger in (hello, prover):
        assert [kind for kind, _ in stranger.frames_until_closed(5)] == \
            [FrameKind.AUTH_CHALLENGE]
    [(kind, challenge)] = silent.frames_until_closed(10)  # the connect timeout: 5 s
    silenced = time.monotonic() - begun
    assert kind is FrameKind.AUTH_CHALLENGE and len(challenge["nonce"]) == 32
    assert 4.0 < silenced < 9.0
    for stranger in (silent, hello, prover):
        stranger.close()

    # Nothing changed: no message anywhere, no retained message, the client is still there,
    # the session kept its queue, the cluster is the same two nodes.
    for watcher in watchers:
        watcher.no_message(0.5)
    late = client(b, "late")
    late.subscribe("#", qos=1)
    late.no_message(0.5)  # a retained message would have come with the SUBACK
    assert not stayer.disconnected.is_set()
    keeper = client(a, "keeper", clean=False, expiry=3600)
    assert keeper.session_present is True
    assert keeper.next_message().payload == b"queued for keeper"
    for node in nodes:
        assert len(cluster_nodes(node)) == 2
        assert "intruder" not in node.log
    assert failures(a) == 3 and failures(b) == 0
    a.wait_for_log(REFUSED + r"it sent HELLO before authenticating \(every node needs the "
                   r"same <cluster><authentication><shared-secret>\)")
    # The watchers would have seen an injected message: a real one reaches both.
    stayer.publish("plant/valve", b"real", qos=1)
    for watcher in watchers:
        message = watcher.next_message()
        assert (message.topic, message.payload) == ("plant/valve", b"real")


def test_a_node_with_another_secret_or_none_does_not_join_one_with_the_secret_does(
        hive_factory: Callable[..., HiveProcess]) -> None:
    members = add_nodes(hive_factory, 2, SECRET)
    wait_for_members(members, 2)
    ports = [node.ports["cluster"] for node in members]
    [wrong] = add_nodes(hive_factory, 1, "AnotherSecret-" + uuid.uuid4().hex, listed=ports)
    [none] = add_nodes(hive_factory, 1, None, listed=ports)  # loopback: allowed without one
    wait_for(lambda: all(failures(node) >= 2 for node in members), 10,
             "both members refused both newcomers")
    wrong.wait_for_log(r"WARNING - refused the cluster link to 127\.0\.0\.1:\d+: it closed the "
                       r"link before authenticating \(it may have refused this node's proof\)")
    none.wait_for_log(r"WARNING - refused the cluster link to 127\.0\.0\.1:\d+: it asks for a "
                      r"cluster shared secret and this node has none")
    for member in members:
        member.wait_for_log(REFUSED + r"(its proof is wrong|it sent HELLO before "
                                      r"authenticating)")
    for node in (wrong, none):
        assert len(cluster_nodes(node)) == 1 and max(sizes(node)) == 1
    for node in members:
        assert len(cluster_nodes(node)) == 2 and max(sizes(node)) == 2
    [right] = add_nodes(hive_factory, 1, SECRET, listed=ports)
    wait_for_members([*members, right], 3)
    assert max(sizes(right)) == 3


def test_a_second_link_with_the_node_id_of_a_live_member_is_refused(
        hive_factory: Callable[..., HiveProcess]) -> None:
    """Risk (issue 20): a process with the secret and a member's node id made a node drop the
    real member's link (and later take its sessions over while it was alive)."""
    first, second = add_nodes(hive_factory, 2, SECRET)
    wait_for_members([first, second], 2)
    time.sleep(1.5)  # past the window in which two nodes' crossing dials are sorted out
    real = node_id(second)
    port = free_port()
    body = cluster_body(port, [first.ports["cluster"], port], free_port()).replace(
        "</cluster>", secret_element(SECRET) + "</cluster>")
    impostor = hive_factory(body=body, start=False, cluster=port)
    impostor.data_dir.mkdir(parents=True, exist_ok=True)
    (impostor.data_dir / "node-id").write_text(real)
    impostor.start()
    first.wait_for_log(rf"ERROR - a second link \(from \('127\.0\.0\.1', \d+\)\) claims the node "
                       rf"id {real} of a member that is connected and answering: refused")
    time.sleep(2)  # several heartbeats: the real member stays, on its own address
    members = {m["id"]: m for m in cluster_nodes(first)}
    assert set(members) == {node_id(first), real}
    assert members[real]["port"] == second.ports["cluster"], members[real]
    assert f"Cluster node {real} (127.0.0.1:{port}" not in first.log
