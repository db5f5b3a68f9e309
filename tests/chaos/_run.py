"""One chaos run: three real nodes, twelve real clients, a seeded nemesis, then the checker.

The nemesis draws from ``faults`` (kill, freeze, isolate, move), seeded:

- **kill**: kill -9 of a node, restarted 1-5 s later (file persistence: its disk survives);
- **freeze**: SIGSTOP of a node for 2-10 s, then SIGCONT;
- **isolate**: the node's cluster and health-check ports cut off from the others for 3-10 s
  (its clients stay connected to it), then healed;
- **move**: a subscriber disconnects and connects to another node (clean start 0).

At most one node-level fault runs at a time, and the next waits until the three nodes see each
other again; moves come at any time, from a task of their own. Every fault is in the schedule
with its time. Afterwards everything heals (SIGCONT, rules deleted, dead nodes started), the
publishers finish what they have in flight, and the run waits until no delivery has arrived
for ``QUIET`` seconds; then :func:`sim._checker.count` counts the invariants from what the
clients recorded, and ``owners`` is the difference between the sessions the nodes hold (their
``broker.sessions``) and the clients (every client has a persistent session).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sim._checker import INVARIANTS, Verdict, count
from sim._mqtt_client import Record

from ._clients import IN_FLIGHT, Clock, RealClient
from ._cluster import Firewall, Node, make_nodes, members, sessions_held

FAULTS = ("kill", "freeze", "isolate", "move")
QUIET = 5.0  # seconds without a delivery: the run is over
SETTLE = 90.0  # seconds at most for the in-flight messages and the quiet after the heal


@dataclass
class Outcome:
    seed: int
    faults: tuple[str, ...]
    verdict: Verdict
    schedule: list[str] = field(default_factory=list)
    refusals: int = 0
    sessions: dict[str, int | None] = field(default_factory=dict)
    record: Record | None = None

    def dump(self, path: Path) -> None:
        """What the clients recorded and the schedule, as JSON (for a look at a failure)."""
        record = self.record or Record()
        path.write_text(json.dumps({
            "seed": self.seed, "faults": list(self.faults), "schedule": self.schedule,
            "verdict": dataclasses.asdict(self.verdict),
            "published": [[p, s, at] for (p, s), at in sorted(record.published.items())],
            "acknowledged": sorted(record.acked),
            "subscribed_at": record.subscribed_at,
            "session_lost": record.session_lost,
            "deliveries": {client: [dataclasses.asdict(d) for d in got]
                           for client, got in record.deliveries.items()}}))

    def lines(self) -> list[str]:
        """A line per invariant, the figures, and on a failure the details and the schedule."""
        v = self.verdict
        out = [f"{name:<22} {getattr(v, name):>6}  {'BROKEN' if getattr(v, name) else 'ok'}"
               for name in INVARIANTS if name != "retained"]  # not published retained here
        out.append(f"seed {self.seed}, faults {','.join(self.faults) or '-'}: {v.summary()}; "
                   f"CONNECT refusals {self.refusals}; sessions per node {self.sessions}")
        if v.broken:
            out += ["details:", *v.details, "schedule:", *self.schedule]
        return out


class Chaos:
    def __init__(self, seed: int, folder: Path, seconds: float,
                 faults: Iterable[str] = FAULTS, rate: float = 8.0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.folder = folder
        self.seconds = seconds
        self.faults = tuple(faults)
        unknown = set(self.faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}: pick from {', '.join(FAULTS)}")
        self.rate = rate  # messages per second per publisher
        self.clock = Clock()
        self.record = Record()
        self.schedule: list[str] = []
        self.nodes: list[Node] = make_nodes(folder, 3, random.Random())  # gids not seeded
        self.firewall: Firewall | None = None
        self.frozen: set[str] = set()
        self.clients: list[RealClient] = []

    # -- bookkeeping

    def note(self, what: str) -> None:
        line = f"{self.clock.now:8.3f} {what}"
        self.schedule.append(line)
        print(f"chaos: {line}", flush=True)

    def running_ports(self) -> dict[str, int]:
        return {n.name: n.port for n in self.nodes if n.running}

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    async def meshed(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            counts = await asyncio.gather(*(asyncio.to_thread(members, n) for n in self.nodes))
            if all(c == len(self.nodes) for c in counts):
                return True
            await asyncio.sleep(0.3)
        return False

    # -- the run

    def run(self) -> Outcome:
        """Everything, cleaned up whatever happens: nodes stopped by PID, rules deleted."""
        try:
            if "isolate" in self.faults:
                self.firewall = Firewall(self.nodes).open()
            return asyncio.run(self._run())
        finally:
            for node in self.nodes:
                if node.running:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(node.pid, signal.SIGCONT)
                node.kill()
                node.stop()
            if self.firewall is not None:
                self.firewall.close()

    async def _run(self) -> Outcome:
        await asyncio.gather(*(asyncio.to_thread(n.start, 60.0) for n in self.nodes))
        if not await self.meshed(60):
            raise AssertionError("the three nodes never saw each other")
        self.note("cluster up: " + ", ".join(
            f"{n.name} pid {n.pid} mqtt {n.port} cluster {n.ports['cluster']} health "
            f"{n.ports['health']} gid {n.gid}" for n in self.nodes))
        for node in self.nodes:
            for role, qos in (("sub", 1), ("sub", 2), ("pub", 1), ("pub", 2)):
                client_id = f"{role}{qos}-{node.name}"
                client = RealClient(client_id, role, qos, node.name, self.record, self.clock,
                                    random.Random(f"{self.seed} {client_id}"),
                                    self.running_ports)
                self.record.qos_of[client.client_id] = qos
                self.clients.append(client)
                client.connect()
        subscribers = [c for c in self.clients if c.role == "sub"]
        publishers = [c for c in self.clients if c.role == "pub"]
        deadline = time.monotonic() + 30
        while not all(c.client_id in self.record.subscribed_at for c in subscribers):
            if time.monotonic() > deadline:
                raise AssertionError("not every subscriber got its SUBACK")
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # the subscriptions reach every node
        self.note(f"traffic for {self.seconds:.0f} s, faults {','.join(self.faults) or '-'}")
        tasks = [asyncio.create_task(self._nemesis())]
        if "move" in self.faults:
            tasks.append(asyncio.create_task(self._mover()))
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            for publisher in publishers:
                if publisher.pending < IN_FLIGHT:
                    publisher.publish_next()
            await asyncio.sleep(self.rng.expovariate(self.rate))
        self.note("traffic ends")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._heal_all()
        if not await self.meshed(60):
            self.note("the nodes do not all see each other after the heal")
        settle = time.monotonic() + SETTLE
        while any(p.pending for p in publishers) and time.monotonic() < settle:
            await asyncio.sleep(0.2)
        left = sum(p.pending for p in publishers)
        self.note(f"publishers done ({left} messages still in flight)")
        await self._quiet(settle)
        for client in self.clients:
            client.stop()
        await asyncio.sleep(0.5)
        sessions = {n.name: await asyncio.to_thread(sessions_held, n) for n in self.nodes}
        verdict = count(self.record, [c.client_id for c in subscribers])
        known = [n for n in sessions.values() if n is not None]
        verdict.owners = abs(sum(known) - len(self.clients)) if len(known) == 3 else 1
        if verdict.owners:
            verdict.details.append(f"sessions held per node {sessions}, clients "
                                   f"{len(self.clients)}")
        verdict.errors = len(self.record.errors) + self._tracebacks(verdict.details)
        verdict.details += self.record.errors[:5]
        return Outcome(self.seed, self.faults, verdict, self.schedule, self.record.refusals,
                       sessions, self.record)

    def _tracebacks(self, details: list[str]) -> int:
        found = 0
        for node in self.nodes:
            log = node.log_path.read_text(errors="replace") if node.log_path.exists() else ""
            here = log.count("Traceback (most recent call last)")
            if here:
                details.append(f"{node.name}: {here} tracebacks in {node.log_path}")
            found += here
        return found

    async def _quiet(self, settle: float) -> None:
        def deliveries() -> int:
            return sum(len(d) for d in self.record.deliveries.values())

        last, since = deliveries(), time.monotonic()
        while time.monotonic() - since < QUIET and time.monotonic() < settle + QUIET:
            await asyncio.sleep(0.25)
            now = deliveries()
            if now != last:
                last, since = now, time.monotonic()
        self.note("quiet")

    # -- the nemesis

    async def _mover(self) -> None:
        subscribers = [c for c in self.clients if c.role == "sub"]
        rng = random.Random(f"{self.seed} moves")  # the nemesis's draws stay the seed's own
        while True:
            await asyncio.sleep(rng.uniform(2.0, 6.0))
            client = rng.choice(subscribers)
            client.home = rng.choice([n.name for n in self.nodes if n.name != client.home])
            self.note(f"move {client.client_id} to {client.home}")
            client.drop()

    async def _nemesis(self) -> None:
        rng = self.rng
        node_faults = [f for f in self.faults if f != "move"]
        if not node_faults:
            return
        while True:
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            fault = rng.choice(node_faults)
            victim = rng.choice(self.nodes)
            if fault == "kill":
                seconds = rng.uniform(1.0, 5.0)
                self.note(f"kill -9 {victim.name} (pid {victim.pid}), restart in {seconds:.1f} s")
                victim.kill()
                await asyncio.sleep(seconds)
                await self._restart(victim)
            elif fault == "freeze":
                seconds = rng.uniform(2.0, 10.0)
                self.note(f"SIGSTOP {victim.name} for {seconds:.1f} s")
                os.kill(victim.pid, signal.SIGSTOP)
                self.frozen.add(victim.name)
                try:
                    await asyncio.sleep(seconds)
                finally:
                    self._thaw(victim)
            elif fault == "isolate":
                assert self.firewall is not None
                seconds = rng.uniform(3.0, 10.0)
                self.note(f"isolate {victim.name} for {seconds:.1f} s")
                self.firewall.isolate(victim)
                try:
                    await asyncio.sleep(seconds)
                finally:
                    self.note("heal")
                    self.firewall.heal()
            if not await self.meshed(45):
                self.note("not meshed 45 s after the fault: going on")

    def _thaw(self, node: Node) -> None:
        if node.name in self.frozen:
            self.frozen.discard(node.name)
            self.note(f"SIGCONT {node.name}")
            if node.running:
                os.kill(node.pid, signal.SIGCONT)

    async def _restart(self, node: Node) -> None:
        self.note(f"restart {node.name}")
        try:
            await asyncio.to_thread(node.start, 60.0)
        except RuntimeError as exc:
            self.note(f"{node.name} did not start: {str(exc)[-300:]}")
            raise
        self.note(f"{node.name} started (pid {node.pid})")

    async def _heal_all(self) -> None:
        for node in self.nodes:
            self._thaw(node)
        if self.firewall is not None and self.firewall.cut is not None:
            self.note("heal")
            self.firewall.heal()
        for node in self.nodes:
            if not node.running:
                await self._restart(node)
