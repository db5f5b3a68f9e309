"""Messages between nodes are acknowledged and sent again after a partition or a reconnect.

Real brokers and clusters on a memory network (as in ``test_membership``); QoS 1 publishers and
subscribers; every run counts published, acknowledged, received, lost and duplicated.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable

from cluster.test_membership import Client, Node, full_mesh, run_cluster, settle, until
from hive_core.cluster._forwarding import HeldForwards
from hive_core.cluster._wire import FrameKind
from hive_core.mqtt import PubAck, Publish, PubRec

from ._memory_network import MemoryNetwork

_pids = itertools.count(1)


class Tally:
    def __init__(self, publisher: Client, subscribers: list[Client]) -> None:
        self.publisher = publisher
        self.subscribers = subscribers
        self.published: list[bytes] = []
        self.ids: dict[int, bytes] = {}

    def publish(self, topic: str, payload: bytes) -> None:
        pid = next(_pids) % 65535 + 1
        self.ids[pid] = payload
        self.published.append(payload)
        self.publisher.send(Publish(topic, payload, 1, packet_id=pid))

    @property
    def acknowledged(self) -> set[bytes]:
        return {self.ids[p.packet_id] for p in self.publisher.wire.packets
                if isinstance(p, PubAck)}

    def counts(self, subscriber: Client) -> dict[str, int]:
        got = Counter(subscriber.payloads)
        acked = self.acknowledged
        return {"published": len(self.published), "acknowledged": len(acked),
                "received": len(got), "lost": len(acked - set(got)),
                "duplicated": sum(n - 1 for n in got.values() if n > 1)}


def subscriber(node: Node, client_id: str, topic: str) -> Client:
    """QoS 0 on the last hop: this client never acknowledges, so it must not hit a window."""
    client = node.client(client_id)
    client.subscribe(topic, qos=0)
    return client


def test_a_partition_loses_no_acknowledged_message_and_duplicates_none() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        far = subscriber(n2, "far", "t")
        farther = subscriber(n3, "farther", "t")
        await until(lambda: n1.cluster.table.filters_of("n2") == {"t"}
                    and n1.cluster.table.filters_of("n3") == {"t"})
        tally = Tally(n1.client("pub"), [far, farther])
        for i in range(50):
            tally.publish("t", b"before %d" % i)
        await until(lambda: len(tally.acknowledged) == 50, what="PUBACKs before the split")
        network.partition(["n1"], ["n2", "n3"])
        for i in range(200):
            tally.publish("t", b"during %d" % i)
            if i % 20 == 0:
                await asyncio.sleep(0.01)
        await settle()
        # nothing crossed: no PUBACK promises a delivery the other side does not have yet
        assert len(tally.acknowledged) == 50
        await asyncio.sleep(0.8)  # longer than the heartbeat timeout: n1 drops its peers
        assert not n1.peers
        assert len(tally.acknowledged) == 250  # they left: the messages wait for their return
        network.heal()
        await until(full_mesh(nodes), what="the cluster back together")
        await until(lambda: all(len(s.payloads) == 250 for s in (far, farther)),
                    what="every message after the heal")
        for sub in (far, farther):
            counts = tally.counts(sub)
            assert counts == {"published": 250, "acknowledged": 250, "received": 250,
                              "lost": 0, "duplicated": 0}, counts
            assert sub.payloads == tally.published  # and in order
        assert n1.cluster.forwarding.replayed >= 400
        assert n1.cluster.forwarding.dropped == 0

    run_cluster(scenario)


def test_frames_handled_before_a_reconnect_are_not_handled_twice() -> None:
    """A link that breaks after the frames arrived but before their acknowledgement."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, _ = nodes
        far = subscriber(n2, "far", "t")
        await until(lambda: n1.cluster.table.filters_of("n2") == {"t"})
        tally = Tally(n1.client("pub"), [far])
        acks_to_n1 = n2.cluster.acks.soon
        n2.cluster.acks.soon = lambda peer: None  # type: ignore[method-assign]
        for i in range(30):
            tally.publish("t", b"%d" % i)
        await until(lambda: len(far.payloads) == 30, what="the deliveries")
        assert not tally.acknowledged  # n2 has not acknowledged: n1 keeps them, no PUBACK
        n2.cluster.acks.soon = acks_to_n1  # type: ignore[method-assign]
        n1.cluster.members["n2"].link.close()  # a reset: both ends reconnect
        kept = n1.cluster.forwarding.outgoing["n2"].frames
        await until(lambda: n2.cluster.forwarding.duplicates == 30 and not kept,
                    what="the frames sent again, skipped and acknowledged")
        assert len(tally.acknowledged) == 30
        counts = tally.counts(far)
        assert counts["lost"] == 0 and counts["duplicated"] == 0, counts

    run_cluster(scenario)


def test_past_the_bound_kept_for_a_cut_off_node_new_messages_are_refused_none_dropped() -> None:
    """What a node keeps for a node that does not acknowledge is bounded. Past the bound a
    local QoS 1 message for that node is refused (MQTT 5: PUBACK 0x97; MQTT 3.1.1, which has
    no refusing PUBACK: the connection closes without one), a QoS 0 one is not sent, and
    nothing kept is dropped: after the heal every acknowledged message arrives."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, _ = nodes
        far = subscriber(n2, "far", "t")
        await until(lambda: n1.cluster.table.filters_of("n2") == {"t"})
        forwarding = n1.cluster.forwarding
        network.partition(["n1"], ["n2", "n3"])
        publisher = n1.client("pub", version=5)

        def answered() -> int:
            return sum(isinstance(p, PubAck) for p in publisher.wire.packets)

        for i in range(200):  # 20 at a time, within the node's receive maximum
            publisher.send(Publish("t", b"%03d" % i + b"." * 40, 1, packet_id=i + 1))
            if i == 0:  # the bound: 50 of these messages
                forwarding.limit = 50 * forwarding.outgoing["n2"].size
            if i % 20 == 19:  # the first wait for the heartbeat timeout (n1's peers leave)
                await until(lambda sent=i + 1: answered() == sent, what="the PUBACKs")
        codes = {p.packet_id: p.reason_code for p in publisher.wire.packets
                 if isinstance(p, PubAck)}
        accepted = {b"%03d" % (pid - 1) for pid, code in codes.items() if code == 0x00}
        refused = {pid for pid, code in codes.items() if code == 0x97}
        assert len(accepted) + len(refused) == 200 and 48 <= len(accepted) <= 52, codes
        assert forwarding.refused == len(refused)
        assert forwarding.full("n2") and forwarding.dropped == 0
        # the accepted ones are the first ones: what came once the bound was reached is refused
        assert accepted == {b"%03d" % i for i in range(len(accepted))}
        publisher.send(Publish("t", b"QoS 2", 2, packet_id=300))
        await until(lambda: PubRec(300, 0x97) in publisher.wire.packets, what="PUBREC 0x97")
        qos0 = n1.client("qos0")
        for i in range(5):
            qos0.publish("t", b"qos0 %d" % i)
        await settle()
        assert forwarding.dropped == 5  # not sent, counted
        mqtt3 = n1.client("mqtt3")
        mqtt3.send(Publish("t", b"from an MQTT 3.1.1 client", 1, packet_id=1))
        await until(lambda: mqtt3.wire.closed, what="the MQTT 3.1.1 client closed")
        assert not any(isinstance(p, PubAck) for p in mqtt3.wire.packets)
        network.heal()
        await until(full_mesh(nodes), what="the cluster back together")
        await until(lambda: {p[:3] for p in far.payloads} >= accepted,
                    what="every accepted message after the heal")
        await settle()
        got = Counter(p[:3] for p in far.payloads)
        assert set(got) == accepted and max(got.values()) == 1, got  # none refused, none twice
        await until(lambda: not forwarding.full("n2"), what="n2 took what was kept for it")
        publisher.send(Publish("t", b"after" + b"." * 40, 1, packet_id=500))
        await until(lambda: PubAck(500) in publisher.wire.packets, what="accepted again")

    run_cluster(scenario)


def _held(commit_gate: asyncio.Event, commits: list[int],
          tasks: list[asyncio.Task[None]]) -> HeldForwards:
    async def commit() -> None:
        commits.append(len(commits))
        await commit_gate.wait()

    return HeldForwards(commit, lambda work, what: tasks.append(
        asyncio.ensure_future(work())))


def test_held_sends_go_out_after_a_commit_begun_after_them_in_order() -> None:
    """A QoS 2 message's forwards (cluster/_forwarding.py HeldForwards) wait for a commit
    that began after they were held; one held during that commit waits for the next."""
    async def main() -> None:
        gate, commits, tasks = asyncio.Event(), [], []
        held = _held(gate, commits, tasks)
        sent: list[int] = []
        with held.block() as any_held:
            assert not any_held()
            held.hold(lambda: sent.append(1))
            assert any_held()
        assert not held.holding
        first = asyncio.ensure_future(held.sent())
        await asyncio.sleep(0.01)
        held.hold(lambda: sent.append(2))  # the commit under way may not cover its record
        second = asyncio.ensure_future(held.sent())
        await asyncio.sleep(0.01)
        assert sent == [] and not first.done()
        gate.set()
        await asyncio.wait_for(first, 1)
        await asyncio.wait_for(second, 1)
        assert sent == [1, 2]
        assert commits == [0, 1]
        assert len(tasks) == 1  # one release at a time
        await held.sent()  # nothing held: at once

    asyncio.run(main())


def test_a_frame_after_the_held_sends_follows_them_and_goes_at_once_when_none_waits() -> None:
    async def main() -> None:
        gate, commits, tasks = asyncio.Event(), [], []
        held = _held(gate, commits, tasks)
        sent: list[str] = []
        held.after(lambda: sent.append("routed 1"))
        assert sent == ["routed 1"]
        held.hold(lambda: sent.append("publish"))
        held.after(lambda: sent.append("routed 2"))
        await asyncio.sleep(0.01)
        assert sent == ["routed 1"]
        gate.set()
        await asyncio.wait_for(held.sent(), 1)
        assert sent == ["routed 1", "publish", "routed 2"]

    asyncio.run(main())


def test_held_sends_stay_held_when_their_release_is_cancelled() -> None:
    async def main() -> None:
        gate, commits, tasks = asyncio.Event(), [], []
        held = _held(gate, commits, tasks)
        sent: list[int] = []
        held.hold(lambda: sent.append(1))
        wait = asyncio.ensure_future(held.sent())
        await asyncio.sleep(0.01)
        tasks[0].cancel()
        await asyncio.sleep(0.01)
        assert sent == [] and not wait.done()  # not sent, so not acknowledged either
        held.hold(lambda: sent.append(2))  # a new release starts, with both
        gate.set()
        await asyncio.wait_for(wait, 1)
        await asyncio.wait_for(held.sent(), 1)
        assert sent == [1, 2]

    asyncio.run(main())


def test_a_held_send_that_fails_does_not_hold_up_the_others_or_the_waits() -> None:
    async def main() -> None:
        gate, commits, tasks = asyncio.Event(), [], []
        gate.set()
        held = _held(gate, commits, tasks)
        sent: list[int] = []

        def fails() -> None:
            raise OSError("a store write, an interceptor")

        held.hold(fails)
        held.hold(lambda: sent.append(2))
        await asyncio.wait_for(held.sent(), 1)
        assert sent == [2]
        held.hold(lambda: sent.append(3))
        await asyncio.wait_for(held.sent(), 1)
        assert sent == [2, 3]

    asyncio.run(main())


def gated_commits_and_recorded_acks(n2: Node, gate: Callable[[int], Awaitable[None]]
                                    ) -> tuple[list[int], list[int]]:
    """n2's commits wait for ``gate(their number)``; returns (the commits begun, by number;
    the FORWARD_ACK counts n2 sends n1)."""
    begun: list[int] = []
    commit = n2.broker.commit

    async def commit_gated() -> None:
        begun.append(len(begun) + 1)
        await gate(len(begun))
        await commit()

    n2.broker.commit = commit_gated  # type: ignore[method-assign]
    acks: list[int] = []
    link = n2.cluster.members["n1"].link
    send = link.send

    def recording(kind: object, body: object) -> None:
        if kind == FrameKind.FORWARD_ACK:
            acks.append(int(body))  # type: ignore[call-overload]
        send(kind, body)  # type: ignore[arg-type]

    link.send = recording  # type: ignore[method-assign]
    return begun, acks


def test_each_reads_acknowledgement_commit_begins_at_once_and_the_acks_go_in_order() -> None:
    """A FORWARD_ACK waits for its read's commit, which may wait for deliveries held for
    their PUBACK; a later read's commit does not wait for it to begin, and its acknowledgement
    goes only after the earlier one (a count never falls back)."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, _n3 = nodes
        far = subscriber(n2, "far", "t")
        await until(lambda: n1.cluster.table.filters_of("n2") == {"t"})
        first = asyncio.Event()

        async def gate(number: int) -> None:
            if number == 1:
                await first.wait()  # the first read's commit waits, the second's does not

        begun, acks = gated_commits_and_recorded_acks(n2, gate)
        tally = Tally(n1.client("pub"), [far])
        tally.publish("t", b"1")
        await until(lambda: begun == [1], what="the first read's commit")
        tally.publish("t", b"2")
        await until(lambda: begun == [1, 2], what="the second read's commit, at once")
        await settle()
        assert acks == [] and far.payloads == [b"1", b"2"]
        first.set()
        await until(lambda: len(acks) == 2, what="both acknowledgements")
        assert acks[0] < acks[1]
        await until(lambda: tally.acknowledged == {b"1", b"2"}, what="the PUBACKs")

    run_cluster(scenario)


def test_an_acknowledgement_counted_before_the_peer_restarted_is_not_sent_to_it() -> None:
    """A FORWARD_ACK's count is taken before its commit, and counts the frames of one
    incarnation of the peer. If the peer restarted while the commit ran (its REPLAY started
    the count again), that count would acknowledge frames of the new incarnation that this
    node has not handled: the new node would drop them and answer their publishers."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, _n3 = nodes
        far = subscriber(n2, "far", "t")
        await until(lambda: n1.cluster.table.filters_of("n2") == {"t"})
        gate = asyncio.Event()

        async def wait(number: int) -> None:
            await gate.wait()

        _begun, acks = gated_commits_and_recorded_acks(n2, wait)
        tally = Tally(n1.client("pub"), [far])
        tally.publish("t", b"1")
        await until(lambda: far.payloads == [b"1"], what="delivered on n2")
        seen = n2.cluster.forwarding.incoming["n1"]
        incarnation, handled = seen.incarnation, seen.handled
        assert handled >= 1
        # n1 restarted meanwhile: its REPLAY (first place 1) starts the count again.
        n2.cluster.forwarding.replaying("n1", incarnation + 1, 1)
        gate.set()
        await settle()
        assert handled not in acks, acks

    run_cluster(scenario)
