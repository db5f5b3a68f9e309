"""What a run must show: the invariants, counted.

- **lost**: a message its publisher had acknowledged (PUBACK, or PUBREC at QoS 2) that a
  subscriber whose subscription existed before it was published never received;
- **qos2_duplicates**: a QoS 2 message a QoS 2 subscriber received as new more than once;
- **qos1_duplicates**: the same at QoS 1 (allowed by MQTT, counted);
- **reordered**: a message received as new after a later one of the same publisher (counted;
  MQTT allows it after a reconnect of the subscriber);
- **wrong_session_present**: a reconnect answered "no session" although every node's disk
  survived (so a copy or a replica of the session existed);
- **owners**: after the heal, client ids held by no node or by more than one, or a node whose
  directory names another holder than the one that has the session;
- **retained** (with ``Options.retain``: publishers retain every message): after the heal, a
  publisher's topic whose retained message is not the same on every node, or not its last one
  (every message is acknowledged by then);
- **errors**: exceptions the event loop caught.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ._world import Record, World

INVARIANTS = ("lost", "qos2_duplicates", "wrong_session_present", "owners", "retained",
              "errors")
"""What must be 0 for a run to pass (the other counts are reported)."""


@dataclass
class Verdict:
    published: int = 0
    acknowledged: int = 0
    expected: int = 0  # (subscriber, message) pairs that must arrive
    received: int = 0
    lost: int = 0
    qos2_duplicates: int = 0
    qos1_duplicates: int = 0
    reordered: int = 0
    wrong_session_present: int = 0
    owners: int = 0
    retained: int = 0
    errors: int = 0
    details: list[str] = field(default_factory=list)

    @property
    def broken(self) -> list[str]:
        return [name for name in INVARIANTS if getattr(self, name)]

    def summary(self) -> str:
        return (f"published {self.published}, acknowledged {self.acknowledged}, expected "
                f"{self.expected}, received {self.received}, lost {self.lost}, QoS 2 "
                f"duplicates {self.qos2_duplicates}, QoS 1 duplicates {self.qos1_duplicates}, "
                f"reordered {self.reordered}, wrong session present "
                f"{self.wrong_session_present}, owners {self.owners}, errors {self.errors}")


def check(world: World) -> Verdict:
    verdict = count(world.record, [c.client_id for c in world.clients if c.role == "sub"])
    verdict.owners = _owners(world, verdict.details)
    if world.options.retain:
        verdict.retained = _retained(world, verdict.details)
    return verdict


def count(record: Record, subscribers: Iterable[str]) -> Verdict:
    """Every invariant but ``owners`` (which needs the nodes), from what the clients recorded:
    the simulation's clients and the real ones of ``tests/chaos`` fill the same record."""
    verdict = Verdict(published=len(record.published), acknowledged=len(record.acked))
    for client_id in subscribers:
        since = record.subscribed_at.get(client_id)
        got = record.deliveries.get(client_id, [])
        seen: dict[tuple[str, int], int] = {}
        latest: dict[str, int] = {}
        for delivery in got:
            key = (delivery.publisher, delivery.seq)
            if not delivery.new:
                continue
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                if delivery.qos == 2:
                    verdict.qos2_duplicates += 1
                    if len(verdict.details) < 20:
                        first = next(d for d in got if (d.publisher, d.seq) == key)
                        verdict.details.append(
                            f"{client_id} got {key} twice at QoS 2: at {first.at:.3f} "
                            f"from {first.node} (id {first.packet_id}), again at "
                            f"{delivery.at:.3f} from {delivery.node} (id {delivery.packet_id}"
                            f"{', DUP' if delivery.dup else ''})")
                else:
                    verdict.qos1_duplicates += 1
                continue
            if delivery.seq < latest.get(delivery.publisher, 0):
                verdict.reordered += 1
            latest[delivery.publisher] = max(latest.get(delivery.publisher, 0), delivery.seq)
        verdict.received += len(seen)
        if since is None:
            continue
        for key in record.acked:
            if record.published[key] <= since:
                continue
            verdict.expected += 1
            if key not in seen:
                verdict.lost += 1
                if len(verdict.details) < 20:
                    verdict.details.append(f"{client_id} never got {key} (published at "
                                           f"{record.published[key]:.3f})")
    verdict.wrong_session_present = len(record.session_lost)
    for client_id, node, at in record.session_lost[:5]:
        verdict.details.append(f"{client_id} found no session on {node} at {at:.3f}")
    verdict.errors = len(record.errors)
    verdict.details += record.errors[:5]
    return verdict


def _owners(world: World, details: list[str]) -> int:
    wrong = 0
    for client in world.clients:
        holders = [n.name for n in world.nodes
                   if n.broker is not None and client.client_id in n.broker.sessions]
        if len(holders) != 1:
            wrong += 1
            details.append(f"{client.client_id} held by {holders or 'no node'}")
            continue
        for node in world.nodes:
            if node.cluster is None or node.name == holders[0]:
                continue
            named = node.cluster.owner_of(client.client_id)
            if named is not None and named != holders[0]:
                wrong += 1
                details.append(f"{node.name} names {named} for {client.client_id}, held by "
                               f"{holders[0]}")
    return wrong


def _retained(world: World, details: list[str]) -> int:
    wrong = 0
    for client in world.clients:
        if client.role != "pub" or not client.seq:
            continue
        topic = f"{client.topic}/{client.client_id}"
        held = {}
        for node in world.nodes:
            if node.broker is not None and node.up:
                message = node.broker.retained.get(topic)
                held[node.name] = message.payload.decode() if message is not None else None
        last = f"{client.client_id}:{client.seq}"
        if set(held.values()) != {last}:
            wrong += 1
            details.append(f"retained {topic}: {held}, its last message {last}")
    return wrong
