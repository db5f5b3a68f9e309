"""A QoS 2 message from a persistent session reaches other nodes once its inbound record is
committed (cluster/_forwarding.py ``HeldForwards``; docs/architecture.md, "A QoS 2 message
reaches other nodes after its record"), on an in-memory network of three real nodes.

The record carries the message until its forwards are acknowledged, for a node that takes
the session over; what went out while the sends were held must not make the message miss a
subscriber or reach one twice.
"""

from __future__ import annotations

import asyncio
import itertools

from cluster.test_handover import qos2_subscriber_on_n2
from cluster.test_membership import Client, Node, run_cluster, settle, until
from hive_core import mqtt
from hive_core.broker._records import Records, session_from
from hive_ext_api import StoredInflight, StoredMessage

from ._memory_network import MemoryNetwork

_pids = itertools.count(1)


def gate_commits(node: Node) -> asyncio.Event:
    """``node``'s held sends wait for this event as well as for their commit."""
    gate = asyncio.Event()
    commit = node.cluster.held._commit

    async def gated() -> None:
        await gate.wait()
        await commit()

    node.cluster.held._commit = gated  # type: ignore[method-assign]
    return gate


async def held_publish(n2: Node, n3: Node, client_id: str,
                       payload: bytes) -> tuple[Client, asyncio.Event, Client, int]:
    """A QoS 2 subscriber on n2, and a persistent publisher on n3 whose QoS 2 message's
    forwards wait (for the gate returned): subscriber, gate, publisher, packet id."""
    subscriber = await qos2_subscriber_on_n2(n2, n3, "sub-" + client_id, "h")
    gate = gate_commits(n3)
    publisher = n3.client(client_id, clean=False)
    pid = next(_pids)
    publisher.send(mqtt.Publish("h/a", payload, 2, packet_id=pid))
    await settle()
    return subscriber, gate, publisher, pid


def pubrecs(client: object) -> int:
    return sum(isinstance(p, mqtt.PubRec) for p in client.wire.packets)  # type: ignore[attr-defined]


def test_a_subscriber_here_at_qos_0_gets_a_held_message_once() -> None:
    """At release the message is offered again to the plain subscribers here (for a session
    that moved here meanwhile); one at QoS 0 took it on the fast path, which keeps no
    identity, so it is not offered to again."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        _n1, n2, n3 = nodes
        await qos2_subscriber_on_n2(n2, n3, "remote", "h")
        here = n3.client("here")
        here.subscribe("h/#", qos=0)
        here2 = n3.client("here2", clean=False)
        here2.subscribe("h/#", qos=2)
        await settle()
        publisher = n3.client("pub", clean=False)
        publisher.send(mqtt.Publish("h/a", b"two", 2, packet_id=next(_pids)))
        await until(lambda: pubrecs(publisher) == 1, what="the PUBREC")
        await settle()
        assert here.payloads == [b"two"]
        assert here2.payloads == [b"two"]
        assert n3.broker.metrics.handover_duplicates_skipped == 0

    run_cluster(scenario)


def test_once_its_forwards_are_acknowledged_the_record_no_longer_carries_the_message() -> None:
    """A client that never sends its PUBREL: the message is not sent on again at a later
    takeover or restart (a subscriber that came later would get an old message, one at QoS 0
    a second copy)."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        _n1, n2, n3 = nodes
        await qos2_subscriber_on_n2(n2, n3, "remote", "h")
        publisher = n3.client("pub", clean=False)
        pid = next(_pids)
        publisher.send(mqtt.Publish("h/a", b"old", 2, packet_id=pid))
        await until(lambda: pubrecs(publisher) == 1, what="the PUBREC")
        await settle()
        session = n3.broker.sessions["pub"]
        assert not session.unconfirmed
        (record,) = n3.broker.records.store.contents().inflight["pub"]  # type: ignore[attr-defined]
        assert (record.packet_id, record.direction, record.message) == (pid, "in", None)
        assert n3.cluster.takeover.publish_unconfirmed([record]) == 0

    run_cluster(scenario)


def test_a_resend_while_the_first_copy_is_held_waits_for_it() -> None:
    """The client sends the PUBLISH again (a new connection, DUP) while the first copy's
    forwards wait for their record: its PUBREC waits too, or the client would release a
    message no other node has yet."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        _n1, n2, n3 = nodes
        subscriber, gate, publisher, pid = await held_publish(n2, n3, "pub", b"m")
        publisher.connection.connection_lost(None)
        again = n3.client("pub", clean=False)
        again.send(mqtt.Publish("h/a", b"m", 2, packet_id=pid, dup=True))
        await settle()
        assert pubrecs(again) == 0 and subscriber.payloads == []
        gate.set()
        await until(lambda: pubrecs(again) == 1, what="the PUBREC")
        assert subscriber.payloads == [b"m"]

    run_cluster(scenario)


def test_a_held_shared_send_to_a_node_taken_over_meanwhile_goes_to_the_group_of_now() -> None:
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        gone = n2.client("gone", clean=False)
        gone.subscribe("$share/g/s/#", qos=2)
        other = n1.client("other", clean=False)
        other.subscribe("$share/g/s/#", qos=2)
        await until(lambda: n3.cluster.table.filters_of("n2") == {"$share/g/s/#"}
                    and n3.cluster.table.filters_of("n1") == {"$share/g/s/#"})
        n3.cluster._shared_turn[("g", "s/#")] = 1  # n2's turn (sorted: n1, n2)
        gate = gate_commits(n3)
        publisher = n3.client("pub", clean=False)
        publisher.send(mqtt.Publish("s/a", b"m", 2, packet_id=next(_pids)))
        await settle()
        assert n3.cluster.held.count == 1
        n3.cluster.takeover._rescue_for(n3.cluster.members["n1"], "n2", {})  # n1 took n2
        gate.set()
        await until(lambda: pubrecs(publisher) == 1, what="the PUBREC")
        await until(lambda: other.payloads == [b"m"], what="the group's other member")
        assert gone.payloads == []

    run_cluster(scenario)


def test_a_message_sent_on_again_reaches_shared_groups_too() -> None:
    """Takeover.publish_unconfirmed: the held sends may never have left, shared ones
    included."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        n1, n2, n3 = nodes
        plain = n1.client("plain")
        plain.subscribe("s/#", qos=2)
        shared = n2.client("shared")
        shared.subscribe("$share/g/s/#", qos=2)
        await until(lambda: n3.cluster.table.filters_of("n1") == {"s/#"}
                    and n3.cluster.table.filters_of("n2") == {"$share/g/s/#"})
        record = StoredInflight("pub", 7, "in", "pubrec",
                                StoredMessage("s/a", b"m", 2, origin="n9", serial=5))
        assert n3.cluster.takeover.publish_unconfirmed([record]) == 1
        await until(lambda: plain.payloads == [b"m"] and shared.payloads == [b"m"],
                    what="both subscribers")

    run_cluster(scenario)


def test_while_its_forwards_wait_the_record_carries_the_message_and_so_does_the_session(
) -> None:
    """The record carries the message with its identity: in the store, in a session handed
    over or sent to a new backup (Records.export), and in a session restored from it."""
    async def scenario(network: MemoryNetwork, nodes: list[Node]) -> None:
        _n1, n2, n3 = nodes
        subscriber, gate, publisher, pid = await held_publish(n2, n3, "held-pub", b"two")
        assert subscriber.payloads == []
        session = n3.broker.sessions["held-pub"]
        message = (session.unconfirmed or {})[pid]
        assert message.mid is not None and message.mid[0] == "n3"
        store = n3.broker.records.store
        (record,) = store.contents().inflight["held-pub"]  # type: ignore[attr-defined]
        assert record.direction == "in" and record.message is not None
        assert (record.message.payload, record.message.origin, record.message.serial) == (
            b"two", *message.mid)
        exported = Records.export(session)
        (carried,) = [i for i in exported.inflight if i.direction == "in"]
        assert carried.message == record.message
        restored = session_from(exported, 0.0)
        assert restored.unconfirmed is not None
        assert restored.unconfirmed[pid].mid == message.mid
        gate.set()
        await until(lambda: pubrecs(publisher) == 1, what="the PUBREC")
        assert subscriber.payloads == [b"two"]
        await settle()
        assert not session.unconfirmed
        publisher.send(mqtt.PubRel(pid))
        await until(lambda: any(isinstance(p, mqtt.PubComp) for p in publisher.wire.packets),
                    what="the PUBCOMP")
        assert "held-pub" not in store.contents().inflight  # type: ignore[attr-defined]

    run_cluster(scenario)
