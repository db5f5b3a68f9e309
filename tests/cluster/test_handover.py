"""A persistent session moving between nodes: only its node is asked, the move is confirmed
before the old node forgets it, large sessions cross in parts, and credentials come first.

Nodes and clients as in ``test_membership``: real brokers and clusters on a memory network.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from cluster.test_membership import (
    Client,
    Node,
    _Wire,
    address,
    full_mesh,
    run_cluster,
    settle,
    until,
)
from hive_core import mqtt
from hive_core.broker import ClientConnection, Message, snapshot_records
from hive_core.broker._records import session_from
from hive_core.cluster import _session_frames
from hive_core.cluster._handed import TAIL_HOPS
from hive_core.cluster._replication import message_fields
from hive_core.cluster._wire import FrameKind, encode_frame
from hive_core.persistence import MemorySessionStore, StoredMessage
from hive_core.plugins import ExtensionManager, Extensions
from hive_ext_api import AuthDecision, ConnectInfo, hookimpl

from ._memory_network import MemoryNetwork

_pids = itertools.count(1)
SERVER_UNAVAILABLE_V3 = 3


def offline_subscriber(node: Node, client_id: str, topic: str) -> None:
    """A persistent session on ``node`` subscribed to ``topic`` (QoS 1), then disconnected."""
    client = node.client(client_id, clean=False)
    client.subscribe(topic, qos=1)
    client.connection.connection_lost(None)


async def offline_subscriber_on_n1(n1: Node, n3: Node, client_id: str, topic: str) -> None:
    """``offline_subscriber`` on n1, once n3 routes ``topic`` to n1."""
    offline_subscriber(n1, client_id, topic)
    await until(lambda: n3.cluster.table.filters_of("n1") == {topic})


def publish_qos1(client: Client, topic: str, payload: bytes) -> None:
    client.send(mqtt.Publish(topic, payload, 1, packet_id=next(_pids)))


def connack(client: Client) -> mqtt.ConnAck | None:
    acks = [p for p in client.wire.packets if isinstance(p, mqtt.ConnAck)]
    return acks[0] if acks else None


def stall(node: Node) -> list[tuple[Any, ...]]:
    """``node`` stops answering session fetches (a paused process); returns what it got."""
    asked: list[tuple[Any, ...]] = []
    node.cluster.custody.hand_over = lambda link, request, client_id, failed=None: asked.append(  # type: ignore
        (link, request, client_id))
    return asked


def test_a_queued_session_moves_whole_and_the_old_node_forgets_it() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        await offline_subscriber_on_n1(n1, n3, "dev", "q")
        await until(lambda: n2.cluster.owner_of("dev") == "n1", what="the directory")
        publisher = n3.client("pub")
        for i in range(20):
            publish_qos1(publisher, "q", b"%d" % i)
        await until(lambda: len(n1.broker.sessions["dev"].queue) == 20, what="queued on n1")
        back = n2.client("dev", clean=False)
        await until(lambda: len(back.received) == 20, what="the queue delivered on n2")
        assert connack(back).session_present  # type: ignore[union-attr]
        assert back.payloads == [b"%d" % i for i in range(20)]
        assert "dev" not in n1.broker.sessions
        await until(lambda: n3.cluster.owner_of("dev") == "n2", what="n3 learns the owner")
        assert n1.cluster.owner_of("dev") == "n2"

    run_cluster(scenario)


def test_a_stalled_owner_gets_the_client_refused_and_keeps_the_session() -> None:
    """The old node keeps the session until the new one confirms: a late answer is declined."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        await offline_subscriber_on_n1(n1, n3, "dev", "q")
        publisher = n3.client("pub")
        for i in range(30):
            publish_qos1(publisher, "q", b"%d" % i)
        await until(lambda: len(n1.broker.sessions["dev"].queue) == 30)
        await until(lambda: n2.cluster.owner_of("dev") == "n1")
        asked = stall(n1)
        refused = n2.client("dev", clean=False)
        await until(lambda: connack(refused) is not None, timeout=3, what="a CONNACK")
        assert connack(refused).reason_code == SERVER_UNAVAILABLE_V3  # type: ignore
        assert refused.wire.closed and "dev" not in n2.broker.sessions
        # n1 wakes up and answers the old request: n2 declines, n1 keeps everything
        del n1.cluster.custody.hand_over  # type: ignore[attr-defined]
        link, request, client_id = asked[0]
        n1.cluster.custody.hand_over(link, request, client_id)
        await settle()
        assert len(n1.broker.sessions["dev"].queue) == 30
        assert not n1.cluster.custody.handing.get(link)
        again = n2.client("dev", clean=False)
        await until(lambda: len(again.received) == 30, what="the whole queue on n2")
        assert again.payloads == [b"%d" % i for i in range(30)]

    run_cluster(scenario)


def test_a_stalled_node_does_not_delay_clients_whose_sessions_are_elsewhere() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        offline_subscriber(n3, "on-n3", "x")
        await until(lambda: n2.cluster.owner_of("on-n3") == "n3")
        stall(n1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        fresh = n2.client("fresh", clean=False)
        moved = n2.client("on-n3", clean=False)
        await until(lambda: connack(fresh) is not None and connack(moved) is not None,
                    timeout=0.5, what="CONNACKs without waiting for the stalled node")
        assert loop.time() - started < 0.5
        assert connack(moved).session_present  # type: ignore[union-attr]
        assert not connack(fresh).session_present  # type: ignore[union-attr]

    run_cluster(scenario)


def test_a_session_and_retained_messages_larger_than_a_frame_cross_in_parts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_session_frames, "PART_BYTES", 2000)

    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        await offline_subscriber_on_n1(n1, n3, "dev", "big")
        publisher = n3.client("pub")
        for i in range(30):
            publish_qos1(publisher, "big", b"%03d" % i + b"x" * 1000)
            publisher.send(mqtt.Publish(f"kept/{i}", b"r" * 1000, 0, retain=True))
        await until(lambda: len(n1.broker.sessions["dev"].queue) == 30)
        before = n2.cluster.metrics.frames_in["SESSION"]
        back = n2.client("dev", clean=False)
        await until(lambda: len(back.received) == 30)
        assert [p.payload[:3] for p in back.received] == [b"%03d" % i for i in range(30)]
        assert n2.cluster.metrics.frames_in["SESSION"] - before >= 10
        # a node joining late gets the retained messages in parts
        late = Node("n4", [address("n1")], network.transport("n4", 7800))
        nodes.append(late)
        await late.start()
        await until(full_mesh(nodes), what="n4 joins")
        await until(lambda: len(late.broker.retained) == 30, what="every retained message")
        assert late.cluster.metrics.frames_in["RETAINED"] >= 10

    run_cluster(scenario)


class Passwords:
    @hookimpl
    def hive_authenticate(self, connect: ConnectInfo) -> AuthDecision:
        return AuthDecision(connect.password == b"right", reason_code=0x86)


def test_a_wrong_password_on_another_node_leaves_the_owner_connected() -> None:
    """Credentials are checked before the session is fetched from its node."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, _ = nodes
        manager = ExtensionManager(builtins=(), discover_installed=False)
        manager.register("passwords", Passwords())
        n2.broker.extensions = Extensions(manager)
        owner = n1.client("dev", clean=False)
        owner.subscribe("q", qos=1)
        await until(lambda: n2.cluster.owner_of("dev") == "n1")
        stranger = _connect(n2, "dev", b"wrong")
        await until(lambda: connack(stranger) is not None, what="the refusal")
        assert connack(stranger).reason_code == 4  # type: ignore[union-attr]
        await settle()
        assert not owner.wire.closed
        assert n1.broker.sessions["dev"].connection is not None
        assert n2.cluster.metrics.frames_in["SESSION"] == 0
        right = _connect(n2, "dev", b"right")
        await until(lambda: owner.wire.closed, what="the real takeover")
        assert connack(right).reason_code == 0  # type: ignore[union-attr]

    run_cluster(scenario)


def _connect(node: Node, client_id: str, password: bytes) -> Client:
    """A persistent MQTT 3.1.1 client with a username and password."""
    client = Client.__new__(Client)
    client.version = 4
    client.wire = _Wire()
    client.connection = ClientConnection(node.broker)
    client.connection.connection_made(client.wire)
    client.send(mqtt.Connect(client_id, 4, clean_start=False, keep_alive=0, username="u",
                             password=password))
    return client



def test_an_mqtt5_client_refused_during_a_session_fetch_gets_an_mqtt5_connack() -> None:
    """The refusal is written in the client's protocol version (it was an MQTT 3 CONNACK
    with return code 3, which an MQTT 5 client cannot read)."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, _n3 = nodes
        offline_subscriber(n1, "dev5", "q")
        await until(lambda: n2.cluster.owner_of("dev5") == "n1")
        stall(n1)
        wire = _Wire()
        wire.decoder = mqtt.PacketDecoder(protocol_version=5, server=False)
        connection = ClientConnection(n2.broker)
        connection.connection_made(wire)
        connection.data_received(mqtt.encode_packet(mqtt.Connect("dev5", 5, clean_start=False), 5))
        await until(lambda: any(isinstance(p, mqtt.ConnAck) for p in wire.packets), timeout=3,
                    what="a CONNACK")
        ack = next(p for p in wire.packets if isinstance(p, mqtt.ConnAck))
        assert ack.reason_code == mqtt.ReasonCode.SERVER_UNAVAILABLE
        assert wire.closed

    run_cluster(scenario)


def test_a_session_handed_over_carries_the_identities_it_took() -> None:
    """What a session took from the cluster moves with it: a copy of one of those messages
    that reaches it again on its new node (a merge, a rescue, a late route) is not taken."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        await offline_subscriber_on_n1(n1, n3, "carrier", "id/#")
        publisher = n3.client("pub")
        publish_qos1(publisher, "id/a", b"once")
        await until(lambda: len(n1.broker.sessions["carrier"].queue) == 1)
        seen = dict(n1.broker.sessions["carrier"].seen or {})
        assert len(seen) == 1
        back = n2.client("carrier", clean=False)
        await until(lambda: len(back.received) == 1, what="the queue on n2")
        moved = n2.broker.sessions["carrier"]
        assert set(moved.seen or {}) == set(seen)
        # the same message again, as a merge would bring it: not taken a second time
        (mid,) = seen
        n2.broker.custody.merge_queue("carrier", [(StoredMessage("id/a", b"once", 1), mid)])
        await settle()
        assert back.payloads == [b"once"]

    run_cluster(scenario)


async def qos2_subscriber_on_n2(n2: Node, n3: Node, client_id: str, prefix: str) -> Client:
    """A persistent QoS 2 subscriber to ``prefix/#`` on n2, its filter known on n3."""
    subscriber = n2.client(client_id, clean=False)
    subscriber.subscribe(f"{prefix}/#", qos=2)
    await until(lambda: n3.cluster.table.filters_of("n2") == {f"{prefix}/#"})
    return subscriber


def test_a_merge_finishes_with_pubrel_a_qos2_delivery_the_other_copys_client_had() -> None:
    """A copy kept in a merge may hold an older state of a QoS 2 delivery (a replica from
    before a split: PUBLISH not yet answered) that the other copy's client has had since
    (PUBREC there, or completed). Sent again as PUBLISH it would reach the client as new: the
    hand-over's identities turn it into PUBREL (chaos seed 11, QoS 2 twice)."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        _n1, n2, n3 = nodes
        subscriber = await qos2_subscriber_on_n2(n2, n3, "twice", "m")
        n3.client("pub2").send(mqtt.Publish("m/a", b"one", 2, packet_id=next(_pids)))
        await until(lambda: len(subscriber.received) == 1, what="the QoS 2 delivery")
        session = n2.broker.sessions["twice"]
        ((pid, outbound),) = session.inflight.items()
        assert outbound.state == "publish"
        mid = outbound.pending.message.mid
        assert mid is not None
        n2.broker.custody.merge_queue("twice", [], taken=[mid])
        await settle()
        assert outbound.state == "pubrel"
        assert [p.packet_id for p in subscriber.wire.packets if isinstance(p, mqtt.PubRel)] == [pid]
        assert len(subscriber.received) == 1  # no PUBLISH again

    run_cluster(scenario)


def test_a_completed_qos2_delivery_is_remembered_on_disk_and_not_taken_again() -> None:
    """PUBCOMP ends a QoS 2 exchange and its in-flight row: the store keeps the message's
    identity instead (remember_taken), so that a session restored from it after a restart
    knows it had the message, and a copy a merge or a rescue brings is not taken as new
    (simulation seed 5353: QoS 2 twice after a node that delivered during a split was
    restarted from its disk). A QoS 1 delivery is not remembered: a copy may come again."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        _n1, n2, n3 = nodes
        subscriber = await qos2_subscriber_on_n2(n2, n3, "done", "d")
        n3.client("pub").send(mqtt.Publish("d/a", b"two", 2, packet_id=next(_pids)))
        n3.client("pub1").send(mqtt.Publish("d/b", b"one", 1, packet_id=next(_pids)))
        await until(lambda: len(subscriber.received) == 2, what="both deliveries")
        session = n2.broker.sessions["done"]
        (two,) = [p for p in subscriber.received if p.qos == 2]
        (one,) = [p for p in subscriber.received if p.qos == 1]
        mid = session.inflight[two.packet_id].pending.message.mid
        assert mid is not None
        subscriber.send(mqtt.PubRec(two.packet_id))
        await until(lambda: any(isinstance(p, mqtt.PubRel) for p in subscriber.wire.packets))
        store = n2.broker.records.store
        assert isinstance(store, MemorySessionStore)
        assert store.contents().taken == {}  # still in flight: its row holds the identity
        subscriber.send(mqtt.PubComp(two.packet_id))
        subscriber.send(mqtt.PubAck(one.packet_id))
        await until(lambda: not session.inflight)
        assert store.contents().taken == {"done": [mid]}  # the QoS 1 one is not kept
        (records,) = snapshot_records(store.contents())
        restored = session_from(records, 0.0)
        assert mid in (restored.seen or {})

    run_cluster(scenario)


def test_a_remembered_identity_goes_to_backups_that_read_it() -> None:
    """remember_taken is a replicated write (op TAKEN) to backups whose HELLO said
    taken_ops; a backup of an older version gets no op it cannot read."""
    from types import SimpleNamespace

    from hive_core.cluster._replication import ReplicatingStore, apply_op

    inner = MemorySessionStore()
    store = ReplicatingStore(inner)
    store.replicator = SimpleNamespace(backups={"b": None}, ship_soon=lambda: None)  # type: ignore[assignment]
    store.remember_taken("c", "n1", 7)
    assert store.pending == [] and inner.contents().taken == {"c": [("n1", 7)]}
    store.taken_ops = True
    store.remember_taken("c", "n1", 8)
    (op,) = store.pending
    replica = MemorySessionStore()
    apply_op(replica, op)
    assert replica.contents().taken == {"c": [("n1", 8)]}


def test_a_replica_snapshot_carries_what_the_client_had_only_to_a_backup_that_reads_it() -> None:
    """A new backup starts from a snapshot: to one whose HELLO said taken_ops, each session
    comes with what its client has had (not what is still queued: that is its rows); an older
    backup unpacks exactly three fields and gets three."""
    from hive_core.broker import SessionRecords
    from hive_core.cluster._replication import records_fields, records_of
    from hive_core.persistence import StoredSession

    records = SessionRecords(StoredSession("c", 5, 60), [], [], [("n1", 4), ("n2", 9)])
    assert len(records_fields(records, identified=True)) == 3
    again = records_of(records_fields(records, identified=True, taken=True))
    assert again.seen == [("n1", 4), ("n2", 9)]
    assert records_of(records_fields(records)).seen is None


def test_a_queued_delivery_marked_sent_goes_to_backups_that_read_it() -> None:
    """send_queued is a replicated write (op SEND_QUEUED) while every backup's HELLO said
    sent_ops; while one did not, the store declines it (False), and the caller moves the
    delivery to an in-flight row, which every backup reads."""
    from types import SimpleNamespace

    from hive_core.cluster._replication import ReplicatingStore, apply_op
    from hive_core.persistence import StoredMessage

    inner = MemorySessionStore()
    store = ReplicatingStore(inner)
    store.replicator = SimpleNamespace(backups={"b": None}, fenced_by=set(),  # type: ignore[assignment]
                                       ship_soon=lambda: None)
    message = StoredMessage("t", b"m", 1, False, b"", None, "pub")
    store.enqueue("c", 1, message)
    assert store.send_queued("c", 1, 7) is False
    assert inner.contents().sent == {} and len(store.pending) == 1  # the ENQUEUE only
    store.sent_ops = True
    assert store.send_queued("c", 1, 7) is True
    assert inner.contents().sent == {"c": {1: 7}}
    replica = MemorySessionStore()
    for op in store.pending:
        apply_op(replica, op)
    assert replica.contents().sent == {"c": {1: 7}}
    assert replica.contents().queues == {"c": [(1, message)]}
    assert ReplicatingStore(MemorySessionStore()).send_queued("c", 1, 7) is True  # no backups

    class Older(MemorySessionStore):  # a store of extension API before 1.8
        send_queued = None  # type: ignore[assignment]

    assert ReplicatingStore(Older()).send_queued is None  # the records take in-flight rows


def test_a_replica_snapshot_carries_the_sent_marks_only_to_a_backup_that_reads_them() -> None:
    from hive_core.broker import SessionRecords
    from hive_core.cluster._replication import records_fields, records_of
    from hive_core.persistence import StoredMessage, StoredSession

    message = StoredMessage("t", b"m", 1, False, b"", None, "pub")
    records = SessionRecords(StoredSession("c", 5, 60), [(3, message)], [], [], {3: 12})
    assert len(records_fields(records, taken=True)) == 4
    assert records_of(records_fields(records, taken=True)).sent == {}
    assert records_of(records_fields(records, taken=True, sent=True)).sent == {3: 12}


def test_a_stale_copy_here_is_folded_into_the_session_fetched_for_its_client() -> None:
    """A copy that lost a merge and waits to be dropped no longer serves its client: the
    CONNECT fetches the keeper's session, and the copy here is folded into it. Its queue is
    added but for what the keeper's session took, so nothing is lost and nothing taken twice
    (simulation seed 9963: the stale copy served its client, which got QoS 2 messages again
    that it had completed on the keeper)."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        await offline_subscriber_on_n1(n1, n3, "carrier", "id/#")
        publish_qos1(n3.client("pub"), "id/a", b"both")
        await until(lambda: len(n1.broker.sessions["carrier"].queue) == 1)
        (both,) = n1.broker.sessions["carrier"].seen or {}
        # The stale copy on n2: the same message (as a split routed it to both), and one
        # only it had.
        stale = n1.broker.records.export(n1.broker.sessions["carrier"])
        n2.broker.custody.import_session(stale)
        n2.broker.custody.merge_queue("carrier", [
            (StoredMessage("id/b", b"only-here", 1), ("n2", 77))])
        assert [p.message.payload for p in n2.broker.sessions["carrier"].queue] == [
            b"both", b"only-here"]
        # The keeper's session arrives for a CONNECT on n2: one copy of each message.
        n2.broker.custody.import_session(n1.broker.records.export(n1.broker.sessions["carrier"]))
        session = n2.broker.sessions["carrier"]
        assert sorted(p.message.payload for p in session.queue) == [b"both", b"only-here"]
        assert both in (session.seen or {})

    run_cluster(scenario)


def test_copies_waiting_to_be_dropped_yield_to_their_keeper() -> None:
    """While a merge's copies wait for every member's ROUTED, a CONNECT here asks the keeper
    (yielding), and a client that connects here after all takes its copy back."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        _n1, n2, _n3 = nodes
        offline_subscriber(n2, "lost", "y/#")
        await until(lambda: "lost" in n2.broker.sessions)
        custody = n2.cluster.custody
        custody._route_to_keeper("n1", [("lost", (True, 1, True))])
        assert custody.yielding.get("lost") == "n1"
        custody.client_connected("lost")
        assert "lost" not in custody.yielding
        # A barrier that ends with the copy staying (a weaker claim by then) ends its yielding.
        custody._route_to_keeper("n1", [("lost", (False, 0, False))])
        assert custody.yielding.get("lost") == "n1"
        custody._drop_copies(custody._barrier_serial)
        assert "lost" in n2.broker.sessions, "the copy stays"
        assert "lost" not in custody.yielding, custody.yielding

    run_cluster(scenario)


def test_what_waits_for_a_copys_hand_over_goes_with_the_session_that_node_fetches() -> None:
    """A keeper holds messages for a session until the node of the dropped copy hands it over
    (merge_wait). When that node fetches the session instead (its client connected there
    while its copy yielded), they go into the session before it is exported: not lost."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, _n3 = nodes
        offline_subscriber(n1, "waited", "w/#")
        await until(lambda: n2.cluster.custody.owner_of("waited") == "n1")
        n1.cluster.merge_wait.expect("n2", ["waited"])
        message = Message("w/x", b"held", 1, False, None, "pub", None)
        message.mid = ("n3", 5)
        assert n1.cluster.merge_wait.hold(message, ["waited"]) == {"waited"}
        back = n2.client("waited", clean=False)
        await until(lambda: back.payloads == [b"held"], what="the held message on n2")

    run_cluster(scenario)



def _tail(payload: bytes, serial: int) -> list[Any]:
    """One message of a SESSION_TAIL (with its identity: from n1)."""
    return [*message_fields(StoredMessage("t/x", payload, 1), identified=False), "n1", serial]


def test_a_tail_that_reaches_a_node_after_its_session_left_follows_the_session() -> None:
    """The old node's tail (what it queued while handing the session over) may reach the new
    node after that node's copy left it: a merge kept another node's copy (simulation seed 181
    with ``--overlap``, 7 lost), or the client moved on. Its messages were acknowledged to
    their publishers and the old node has forgotten them: they go on to the node holding the
    session, and the old node keeps them until the new one has them durably."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        offline_subscriber(n3, "dev", "t/#")
        await until(lambda: n2.cluster.owner_of("dev") == "n3", what="n2 knows the holder")
        assert "dev" not in n2.broker.sessions
        assert n1.cluster.custody.handed._send_tail("n2", "dev", [_tail(b"a", 7), _tail(b"b", 8)])
        queue = lambda: [p.message.payload for p in  # noqa: E731
                         n3.broker.sessions["dev"].queue]
        await until(lambda: queue() == [b"a", b"b"], what="the tail on n3")
        assert n2.cluster.custody.handed.tails_sent_on == 2
        assert n2.broker.metrics.dropped.get("session-gone", 0) == 0
        # Counted: n1 keeps it until n2 acknowledged it, n2 until n3 did.
        for sender, peer in ((n1, "n2"), (n2, "n3")):
            out = sender.cluster.forwarding.outgoing[peer]
            await until(lambda out=out: out.acked == out.sent and not out.frames,
                        what=f"{sender.name}'s tail acknowledged by {peer}")
        # The same tail again (sent again after a reconnect, rescued): each message once.
        n1.cluster.custody.handed._send_tail("n2", "dev", [_tail(b"a", 7)])
        await until(lambda: n1.cluster.forwarding.outgoing["n2"].acked
                    == n1.cluster.forwarding.outgoing["n2"].sent)
        await settle()
        assert queue() == [b"a", b"b"]
        back = n3.client("dev", clean=False)
        await until(lambda: back.payloads == [b"a", b"b"], what="delivered on n3")

    run_cluster(scenario)


def test_a_merge_queue_that_reaches_the_keeper_after_its_session_left_follows_it() -> None:
    """A copy dropped in a merge hands its queue to the keeper (MERGE_QUEUE); the keeper's
    client may connect elsewhere meanwhile, and the session leaves before the queue arrives
    (chaos seed 38, 157 lost as `session-gone`). The queue goes on to the session, whole."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        offline_subscriber(n3, "dev", "t/#")
        await until(lambda: n2.cluster.owner_of("dev") == "n3", what="n2 knows the holder")
        assert "dev" not in n2.broker.sessions
        entries = [[seq, message_fields(StoredMessage("t/x", payload, 1)), "n1", serial]
                   for seq, payload, serial in ((1, b"a", 17), (2, b"b", 18))]
        frame = encode_frame(FrameKind.MERGE_QUEUE, ["dev", 0, entries, [], [], []])
        n1.cluster.members["n2"].link.send_encoded(frame)
        n1.cluster.forwarding.sent("n2", frame)
        queue = lambda: [p.message.payload for p in  # noqa: E731
                         n3.broker.sessions["dev"].queue]
        await until(lambda: queue() == [b"a", b"b"], what="the dropped copy's queue on n3")
        assert n2.cluster.custody.handed.merge_queues_sent_on == 1
        assert n2.broker.metrics.dropped.get("session-gone", 0) == 0
        for sender, peer in ((n1, "n2"), (n2, "n3")):  # each keeps it until acknowledged
            out = sender.cluster.forwarding.outgoing[peer]
            await until(lambda out=out: out.acked == out.sent and not out.frames,
                        what=f"{sender.name}'s frame acknowledged by {peer}")
        # One that went through TAIL_HOPS nodes already goes no further (directories that
        # disagree must not pass it round): dropped here, and counted.
        frame = encode_frame(FrameKind.MERGE_QUEUE, ["dev", 0, entries[:1], None, None, None,
                                                     TAIL_HOPS])
        n1.cluster.members["n2"].link.send_encoded(frame)
        n1.cluster.forwarding.sent("n2", frame)
        await until(lambda: n2.broker.metrics.dropped.get("session-gone", 0) == 1,
                    what="the drop counted")
        assert n2.cluster.custody.handed.merge_queues_sent_on == 1

    run_cluster(scenario)


def test_a_tail_for_a_session_held_nowhere_is_dropped_and_counted() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, _n3 = nodes
        assert n1.cluster.custody.handed._send_tail("n2", "gone", [_tail(b"x", 3)])
        await until(lambda: n2.broker.metrics.dropped.get("session-gone", 0) == 1,
                    what="the drop counted")
        assert n2.cluster.custody.handed.tails_sent_on == 0
        out = n1.cluster.forwarding.outgoing["n2"]
        await until(lambda: out.acked == out.sent)

    run_cluster(scenario)


def test_a_tail_rescued_from_a_failed_node_reaches_the_session_on_its_taker() -> None:
    """A tail the failed node had not acknowledged is rescued to the node taking it over (the
    sender kept it): there it reaches the session it adopted."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        _n1, _n2, n3 = nodes
        offline_subscriber(n3, "dev", "t/#")
        await until(lambda: "dev" in n3.broker.sessions)
        frame = encode_frame(FrameKind.SESSION_TAIL, ["dev", [_tail(b"r", 9)], 0])
        n3.cluster.takeover.deliver_rescued("n2", [frame], "n1", 1, 1)
        await settle()
        assert [p.message.payload for p in n3.broker.sessions["dev"].queue] == [b"r"]

    run_cluster(scenario)


def test_a_member_that_misses_the_new_nodes_claim_is_sent_there_not_given_a_new_session(
        ) -> None:
    """When a session moves, the old node names the new one in its directory before its copy
    ends, and tells the members nothing: a member whose link to the new node was down when
    that node said the client connected there (simulation seed 80 with ``--overlap``) asks
    the old node, and is sent on. Before, the old node's SESSION_GONE made that member think
    the session was held nowhere, and its client got a new, empty session."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        await offline_subscriber_on_n1(n1, n3, "dev", "q")
        await until(lambda: n3.cluster.owner_of("dev") == "n1", what="n3 knows the holder")
        publish_qos1(n2.client("pub"), "q", b"kept")
        await until(lambda: len(n1.broker.sessions["dev"].queue) == 1)
        missed: list[Any] = []
        n3.cluster._handlers[FrameKind.CLIENT_CONNECTED] = lambda member, body: missed.append(
            body)
        moved = n2.client("dev", clean=False)
        await until(lambda: moved.payloads == [b"kept"], what="the session on n2")
        moved.connection.connection_lost(None)
        await until(lambda: bool(missed) and "dev" not in n1.broker.sessions)
        await settle()
        assert n1.cluster.owner_of("dev") == "n2"
        assert n3.cluster.owner_of("dev") == "n1", "n3 still names the old node"
        back = n3.client("dev", clean=False)
        await until(lambda: connack(back) is not None, what="a CONNACK on n3")
        assert connack(back).session_present  # type: ignore[union-attr]
        assert "dev" in n3.broker.sessions and "dev" not in n2.broker.sessions

    run_cluster(scenario)


def test_a_second_confirmation_of_a_move_leaves_the_move_remembered() -> None:
    """Two fetches of one session can both be answered (a client that connected again while
    its first CONNECT waited), and both confirmed. The second SESSION_TAKEN finds nothing to
    release; it must not forget the move either: the old node sends on what a node that has
    not confirmed its route yet still sends there (simulation seed 89 with ``--overlap``: 60
    messages replayed after a split, for a session that had moved on, were dropped)."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        await offline_subscriber_on_n1(n1, n3, "dev", "q")
        asked: list[Any] = []
        n3.cluster._handlers[FrameKind.ROUTE_TO] = lambda member, body: asked.append(body)
        moved = n2.client("dev", clean=False)
        await until(lambda: connack(moved) is not None and "dev" not in n1.broker.sessions)
        await until(lambda: bool(asked), what="n3 asked to route to n2")
        assert "dev" in n1.cluster.moved.sessions
        n1.cluster._handlers[FrameKind.SESSION_TAKEN](n1.cluster.members["n2"], [99, "dev"])
        assert "dev" in n1.cluster.moved.sessions, "the move is still remembered"
        assert n1.cluster.owner_of("dev") == "n2"

    run_cluster(scenario)
