"""One client's acknowledgements that wait for the disk (and for the other nodes).

A PUBACK, PUBREC, PUBREL or PUBCOMP confirms something the node must not forget after a
crash, so it goes out only once that is committed; and never before an earlier one, so the
ones that wait keep their order and one commit releases all that waited meanwhile. A
publisher's PUBACK or PUBREC waits for the nodes its message was forwarded to as well
(``settle``); a delivery, a PUBREL or a PUBCOMP for this node's store and its backups only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from hive_core.broker._settings import BrokerSettings
from hive_core.mqtt import PUBACK, ReasonCode
from hive_ext_api import PersistenceError


class Committer(Protocol):
    """What the acknowledgements wait on: the node's broker."""

    @property
    def settings(self) -> BrokerSettings: ...

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...

    async def commit(self) -> None: ...

    async def settle(self) -> None: ...


class AckSender(Protocol):
    """Where they go: the client's channel."""

    closed: bool
    throttled: bool

    def send(self, data: bytes) -> None: ...

    def refuse(self, reason: int, message: str) -> None: ...

    def resume_after_throttle(self) -> None: ...

    def forwards_confirmation(self) -> Callable[[], None] | None:
        """What to do once the messages forwarded so far are acknowledged, or None."""
        ...

log = logging.getLogger("hive.broker")


class NoAcks:
    """A channel's acknowledgements before the first one waits: nothing (most connections
    never publish at QoS 1 or 2, and an idle one saves the object and its list)."""

    __slots__ = ()
    waiting: tuple[bytes, ...] = ()

    def pubacks_waiting(self) -> int:
        return 0

    async def sent(self) -> None:
        return None

    def send(self, data: bytes, durable: bool, forwards: bool) -> None:
        raise AssertionError("the channel makes its CommittedAcks before the first send")


NO_ACKS = NoAcks()


class CommittedAcks:
    """The acknowledgements of one channel waiting for a commit, in order."""

    __slots__ = ("_broker", "_channel", "_needs_commit", "_needs_forwards", "task", "waiting")

    def __init__(self, channel: AckSender, broker: Committer) -> None:
        self._channel = channel
        self._broker = broker
        self.waiting: list[bytes] = []
        self._needs_commit = False
        self._needs_forwards = False  # a publisher's ack waits for the nodes too
        self.task: asyncio.Task[None] | None = None

    def send(self, data: bytes, durable: bool, forwards: bool) -> None:
        # Behind anything not sent yet: waiting, or in the batch whose commit is under way.
        if durable or self.waiting or self.task is not None:
            self.waiting.append(data)
            self._needs_commit = self._needs_commit or durable
            self._needs_forwards = self._needs_forwards or forwards
            if self.task is None:
                self.task = self._broker.spawn(self._release())
        else:
            self._channel.send(data)

    def pubacks_waiting(self) -> int:
        return sum(data[0] == PUBACK for data in self.waiting)

    async def sent(self) -> None:
        """Until what waits now is out (or its connection ended)."""
        task = self.task
        if task is not None:
            with contextlib.suppress(Exception):  # its failure closed the connection
                await asyncio.shield(task)

    async def _release(self) -> None:
        channel, broker = self._channel, self._broker
        try:
            while self.waiting and not channel.closed:
                batch, needs_commit, needs_forwards = (self.waiting, self._needs_commit,
                                                       self._needs_forwards)
                self.waiting, self._needs_commit, self._needs_forwards = [], False, False
                confirm = channel.forwards_confirmation() if needs_forwards else None
                if needs_commit:
                    try:
                        await (broker.settle() if needs_forwards else broker.commit())
                    except Exception as exc:
                        # Not on disk, so not acknowledged: the client sends it again (DUP).
                        if not isinstance(exc, PersistenceError):
                            log.error("the session store failed to commit", exc_info=exc)
                        channel.refuse(ReasonCode.UNSPECIFIED_ERROR,
                                       f"cannot store the message: {exc}")
                        return
                for data in batch:
                    channel.send(data)
                if confirm is not None:
                    confirm()
                if channel.throttled and len(self.waiting) < \
                        broker.settings.server_receive_maximum:
                    channel.resume_after_throttle()
        finally:
            self.task = None
