"""``<overload-protection>``: the node's pressure, and credit taken from the heaviest senders.

Ten times a second the node takes a :class:`Pressure` sample: how late the event loop ran, how
full the queue of a connected subscriber that falls behind is, the messages waiting in
connected clients' queues, the bytes waiting for other nodes, the slowest disk commit, its
resident memory and the pressure other nodes announced. Each source gives a level from 0 to
10; the node's level is the highest, and falls by one per sample at most.

While the level is above 0 the node is *engaged*: what it reads from its clients per sample (its
*budget*) starts at the rate that made it engaged, shrinks at every sample under pressure (by a
tenth per level, by half at most) and grows again at every sample without, by a twentieth of
that rate and a twelfth of itself, up to twice what the clients sent lately. The budget is
shared equally among the clients that want to send. A client's credit
grows by its share and shrinks by what it sent; a client in debt is not read from (its socket
fills and TCP slows it down) until the shares have paid the debt back. While a subscriber's
queue is filling (the sources that end in dropped messages), a client that is read may take its
credit and one more share until the next sample, no more: past that it holds its own reading
(``Sender.read_until``), since between two samples a fast sender whose messages are
acknowledged at once could otherwise bring in what the node takes in a whole second. Once the
level has fallen back to 0, if every client sending more than a share is held, the least
indebted is read again: the node's input does not sit idle for debts alone. Light
senders (a CONNECT, a PINGREQ, a few messages a second) stay under their share and are never
held, nor is a client the node is delivering to (its acknowledgements are what drains the
backlog). The node ends the engagement once the level has stayed 0 for ``CALM`` seconds.

:class:`OverloadProtection` is the decision, socket-free;
:class:`~hive_core.broker._overload_monitor.OverloadMonitor` samples a running node on a timer
(nothing of it runs per message).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["READ_FREELY", "OverloadProtection", "OverloadStats", "Pressure", "Sender"]

log = logging.getLogger("hive.overload")

TICK = 0.1
"""Seconds between samples."""
MAX_LEVEL = 10
LAG_STEP = 0.025
"""Seconds the event loop runs late per level: 250 ms late is level 10."""
FILL_FROM, FILL_TO = 0.1, 0.6
"""How full (of ``<max-queue-size>``) the queue of a connected, acknowledging subscriber may
get before it counts, and where it is level 10 (messages are dropped once it is full)."""
QUEUED_STEP = 50_000
"""Messages waiting in connected clients' queues, all together, per level."""
LINK_STEP = 4 * 1024 * 1024
"""Bytes waiting for other nodes (unwritten, or written and not acknowledged) per level; at
level 10 they are 40 MiB, below the 64 MiB a node keeps for one peer before dropping any."""
COMMIT_STEP = 0.1
"""Seconds a disk commit takes per level."""
MEMORY_FROM = 0.5
"""The share of the memory limit where memory starts to count; 100 % is level 10."""
CALM = 5.0
"""Seconds at level 0 before the engagement ends (one log line per flood, not per wave)."""
MIN_SHARE = 512
"""Bytes per sample every client may send whatever the level: CONNECT, PINGREQ and a few
messages always get through."""
GROWTH = 0.05
"""The budget's growth per sample without pressure, as a share of the rate that made the node
engaged (the whole of it again in two seconds); it shrinks faster than it grows."""
REGROWTH = 0.08
"""And as a share of the budget itself: a node engaged by a flood that began just before (the
rate counted at rest was small) reaches what its clients send within a second or two of calm,
rather than holding them with nothing to protect."""
MAX_DEBT = 100
"""A client's debt is at most this many shares (ten seconds' worth): what a held client sends
in one burst when it is read again (its socket's buffer) is paid back in full, so a heavier
sender is held longer and all get the same share, yet none is held longer than that."""
REST_SCAN = 0.5
"""Seconds between counts of what each client read while the node is not engaged."""

READ_FREELY = float("inf")
"""``Sender.read_until`` of a client overload protection does not limit."""

SOURCES = ("loop-lag", "queue-fill", "queued", "node-links", "disk", "memory", "peers")


class Sender(Protocol):
    """A client connection as overload protection sees it (a :class:`Channel` is one)."""

    received: int  # bytes read from it so far
    mark: int  # ``received`` at overload protection's last count (while not engaged)
    held: bool  # reading paused by overload protection
    read_until: float  # it holds its own reading once ``received`` passes this

    @property
    def delivering(self) -> bool:
        """Messages to it wait for its acknowledgement (holding it would stall them)."""
        ...

    def hold_reading(self) -> None: ...

    def release_reading(self) -> None: ...


@dataclass(slots=True)
class Pressure:
    """One sample of the node's load."""

    loop_lag: float = 0.0  # seconds the sample ran later than asked
    queue_fill: float = 0.0  # the fullest queue of a subscriber that acknowledges (0 to 1)
    queued_messages: int = 0  # waiting in the queues of connected clients' sessions
    link_bytes: int = 0  # waiting for other nodes: not written yet, or not acknowledged
    commit_seconds: float = 0.0  # the slowest disk commit since the last sample
    memory_bytes: int = 0  # resident
    memory_limit: int = 0  # 0: unknown
    peer_level: int = 0  # the highest level announced by the nodes this one forwards to

    def levels(self) -> dict[str, int]:
        """The level of each source (see ``SOURCES``), 0 to 10."""
        memory = 0
        if self.memory_limit:
            used = self.memory_bytes / self.memory_limit
            memory = int((used - MEMORY_FROM) / (1 - MEMORY_FROM) * MAX_LEVEL) \
                if used > MEMORY_FROM else 0
        fill = int((self.queue_fill - FILL_FROM) / (FILL_TO - FILL_FROM) * MAX_LEVEL) + 1 \
            if self.queue_fill > FILL_FROM else 0
        raw = (int(self.loop_lag / LAG_STEP), fill, self.queued_messages // QUEUED_STEP,
               self.link_bytes // LINK_STEP, int(self.commit_seconds / COMMIT_STEP), memory,
               self.peer_level)
        return {source: max(0, min(MAX_LEVEL, value)) for source, value in zip(SOURCES, raw,
                                                                                 strict=True)}


@dataclass(slots=True)
class _Account:
    mark: int  # Sender.received at the last count
    credit: float = 0.0  # in shares: one share is added per sample, what it sent taken off


@dataclass(slots=True, frozen=True)
class OverloadStats:
    """Overload protection at one moment, for the metrics."""

    level: int
    engaged: bool
    clients_held: int
    share: int  # bytes per sample each client may send now (0: not engaged)
    engagements: int  # times it engaged
    holds: int  # times a client was held
    sources: dict[str, int] = field(default_factory=dict)  # level by source
    loop_lag: float = 0.0
    budget: int = 0  # bytes per sample read from all clients together (0: not engaged)
    pressured: dict[str, int] = field(default_factory=dict)  # samples above 0, by source


class OverloadProtection:
    """The level and the credit of each sender (see the module docstring); no I/O."""

    def __init__(self, now: float = 0.0) -> None:
        self.level = 0
        self.engaged_since: float | None = None
        self.engagements = 0
        self.holds = 0
        self.share = 0.0
        self.sources: dict[str, int] = dict.fromkeys(SOURCES, 0)
        self.pressured: dict[str, int] = dict.fromkeys(SOURCES, 0)  # samples above 0, by source
        self.pressure = Pressure()
        self._accounts: dict[Sender, _Account] = {}  # while engaged
        # At rest, only what each client had read at the last count, kept as its ``mark``: a
        # count over 20,000 idle connections makes no objects (it was 26 ms per 5,000).
        self._marked_at = now
        self._rate = 0.0  # bytes per sample the senders sent when the engagement began
        self._read = 0  # bytes per sample read from the senders it weighs: the recent peak
        self.budget = 0.0  # bytes per sample the node reads from all its clients together
        self._calm_since: float | None = None
        self._peak = 0  # the highest level of this engagement
        self._peak_held = 0

    @property
    def engaged(self) -> bool:
        return self.engaged_since is not None

    def update(self, pressure: Pressure, senders: Collection[Sender], now: float) -> None:
        """A new sample: the level moves, and while engaged each sender's credit."""
        self.pressure = pressure
        self.sources = pressure.levels()
        for source, level in self.sources.items():
            if level:
                self.pressured[source] += 1
        measured = max(self.sources.values())
        self.level = measured if measured >= self.level else self.level - 1
        if self.engaged_since is None:
            if self.level == 0:
                if now - self._marked_at >= REST_SCAN:
                    self._mark(senders, now)
                return
            self._engage(senders, now)
        if measured:  # a tenth less per level, half at most
            self.budget *= max(0.5, (MAX_LEVEL - measured) / MAX_LEVEL)
        else:
            # At most twice what the clients sent: a budget they leave unused does not pile up.
            self.budget = min(self.budget * (1 + REGROWTH) + GROWTH * self._rate + MIN_SHARE,
                              2 * max(self._rate, self._read) + MIN_SHARE)
        self._peak = max(self._peak, self.level)
        self._share_credit(senders, now)
        if self.level:
            self._calm_since = None
        elif self._calm_since is None:
            self._calm_since = now
        elif now - self._calm_since >= CALM:
            self._end(now)

    def _mark(self, senders: Iterable[Sender], now: float) -> None:
        for sender in senders:
            sender.mark = sender.received
        self._marked_at = now

    def _engage(self, senders: Collection[Sender], now: float) -> None:
        elapsed = max(now - self._marked_at, TICK)
        sent = 0
        for sender in senders:
            sent += sender.received - sender.mark
        self._accounts = {sender: _Account(sender.mark) for sender in senders}
        self._rate = self.budget = sent * TICK / elapsed
        self.engaged_since = now
        self.engagements += 1
        self._peak = self.level
        self._peak_held = 0
        self._calm_since = None
        causes = ", ".join(f"{source} {level}" for source, level in self.sources.items() if level)
        log.warning("Overload protection engaged: level %d (%s); the clients that send the "
                    "most are read less until the pressure falls", self.level, causes)

    def _share_credit(self, senders: Collection[Sender], now: float) -> None:
        accounts = self._accounts
        current: dict[Sender, _Account] = {}  # the connections that are gone are forgotten
        counted: list[tuple[Sender, _Account, int]] = []
        wanting = read = 0
        for sender in senders:
            account = accounts.get(sender)
            if account is None:  # connected since the last count: everything it sent is new
                account = _Account(0)
            current[sender] = account
            used = sender.received - account.mark
            account.mark = sender.received
            if sender.delivering:  # its acknowledgements drain the backlog: never held
                account.credit = 0.0
                sender.read_until = READ_FREELY
                if sender.held:
                    sender.release_reading()
                continue
            if used or sender.held:
                wanting += 1
            counted.append((sender, account, used))
            read += used
        self._accounts = current
        self._read = max(read, int(self._read * 0.8))  # the recent peak, fading
        self._marked_at = now
        # What was read since the last sample is charged at the share in force meanwhile.
        before = self.share or max(float(MIN_SHARE), self.budget / max(1, wanting))
        self.share = max(float(MIN_SHARE), self.budget / max(1, wanting))
        held = 0
        # Only a subscriber's queue filling loses messages (dropped when full): then a client
        # read again stops at its share within the sample. Other pressure (a late loop, the
        # links to other nodes) is weighed at the samples only, as before.
        sources = self.sources
        bounded = bool(sources["queue-fill"] or sources["queued"])
        for _sender, account, used in counted:
            # In shares, not bytes: a debt made when the share was large is not forgiven
            # when the share shrinks, nor made heavier.
            account.credit = max(-MAX_DEBT, min(account.credit + 1, 1) - used / before)
        if not self.level:
            # The level has fallen back to 0 (one step per sample: the larger the pressure
            # was, the longer this takes). If every client sending more than a share is held
            # now, the node's input would sit idle for debts alone (one burst against a share
            # shrunk to its floor is the longest debt there is, MAX_DEBT samples): the least
            # indebted is read again; the others keep their debts. Light senders do not count.
            indebted = [account for _sender, account, _used in counted if account.credit < 0]
            if indebted and not any(account.credit >= 0 and used >= before
                                    for _sender, account, used in counted):
                max(indebted, key=lambda account: account.credit).credit = 0.0
        for sender, account, _used in counted:
            if account.credit < 0:
                held += 1
                if not sender.held:
                    self.holds += 1
                    sender.hold_reading()
            else:
                sender.read_until = sender.received + (account.credit + 1) * self.share \
                    if bounded else READ_FREELY
                if sender.held:
                    sender.release_reading()
        self._peak_held = max(self._peak_held, held)

    def _end(self, now: float) -> None:
        for sender in self._accounts:
            sender.read_until = READ_FREELY
            if sender.held:
                sender.release_reading()
        # Back to plain marks (a new engagement counts from them, not from zero), and no
        # account keeps a closed connection alive.
        for sender, account in self._accounts.items():
            sender.mark = account.mark
        self._accounts = {}
        began = self.engaged_since or now
        self.engaged_since = None
        self._calm_since = None
        self.share = 0.0
        log.warning("Overload protection ended after %.1f s: highest level %d, %d clients "
                    "held at once at most", now - began, self._peak, self._peak_held)

    def release_all(self) -> None:
        """Stop holding anyone (the node stops)."""
        for sender in self._accounts:
            sender.read_until = READ_FREELY
            if sender.held:
                sender.release_reading()

    def stats(self) -> OverloadStats:
        held = sum(sender.held for sender in self._accounts) if self.engaged else 0
        return OverloadStats(self.level, self.engaged, held,
                             int(self.share) if self.engaged else 0, self.engagements,
                             self.holds, dict(self.sources), self.pressure.loop_lag,
                             int(self.budget) if self.engaged else 0, dict(self.pressured))
