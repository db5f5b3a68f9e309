"""What a client's channel asks of the broker that carries it: one narrow port.

The channel (``_channel.py``) and what runs on its behalf (``_handlers.py``, ``_steps.py``,
``_acks.py``) reach the node only through :class:`ChannelHost`: the routing of a message, a
session to attach, the outbound window to move, a commit to wait for, and the clocks to read.
:class:`~hive_core.broker.Broker` is one host; a unit test's recording host is another
(``tests/broker/test_channel_alone.py`` drives a channel without a broker or an event loop).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from hive_core.broker._acks import Committer
from hive_core.broker._steps import StepBroker

if TYPE_CHECKING:
    from hive_core.broker._message import Message
    from hive_core.broker._metrics import BrokerMetrics
    from hive_core.broker._ports import InputFence
    from hive_core.broker._session import Link, Outbound, Session
    from hive_core.mqtt import SubscriptionRequest, Will


class Deliveries(Protocol):
    """The outbound window of a session (``_outbox.py``), as its client acknowledges it."""

    def drain(self, session: Session) -> None:
        """The connection can take more: send from the queue what the window allows."""
        ...

    def acknowledged(self, session: Session, packet_id: int) -> None:
        """A delivery is complete (PUBACK, PUBCOMP, or a refusing PUBREC)."""
        ...

    def released(self, session: Session, packet_id: int, outbound: Outbound) -> None:
        """A QoS 2 delivery was received (PUBREC): its PUBREL is owed now."""
        ...


class InboundQoS2Records(Protocol):
    """The store's side of a QoS 2 message a client sends (``_records.py``)."""

    atomic: Callable[[], AbstractContextManager[None]]

    def received_qos2(self, session: Session, packet_id: int,
                      forwarded: Message | None = None) -> None: ...

    def released_qos2(self, session: Session, packet_id: int) -> None: ...


class ChannelHost(StepBroker, Committer, Protocol):
    """The broker as a client's channel sees it."""

    @property
    def metrics(self) -> BrokerMetrics: ...

    @property
    def outbox(self) -> Deliveries: ...

    @property
    def records(self) -> InboundQoS2Records: ...

    @property
    def input_fence(self) -> InputFence:
        """Read on every client read: whether input waits for the cluster."""
        ...

    monotonic: Callable[[], float]
    wall_time: Callable[[], float]

    def input_waits(self, now: float) -> Awaitable[None] | None:
        """What a client's input waits for after this node did not run (None: nothing)."""
        ...

    def mark_dirty(self, link: Any) -> None:
        """``link`` has output to write at the end of this loop iteration."""
        ...

    def accept(self, link: Link) -> None: ...

    def has_room_for(self, client_id: str) -> bool: ...

    def attach(self, link: Link, client_id: str, version: int, clean_start: bool, expiry: int,
               will: Will | None) -> tuple[Session, bool]: ...

    def resume(self, session: Session) -> None: ...

    def connection_closed(self, link: Link, session: Session | None, graceful: bool,
                          will_discarded: bool) -> None: ...

    def refused(self, message: Message) -> bool: ...

    def publish(self, message: Message, from_cluster: bool = False) -> tuple[bool, bool]: ...

    def forwards_held(self) -> AbstractContextManager[Callable[[], bool]]:
        """A block whose sends to other nodes wait for the next commit (``ClusterPort``)."""
        ...

    def received(self, message: Message) -> None:
        """A client's PUBLISH was accepted: for the recorders (``hive_publishes_received``)."""

    def subscribe(self, session: Session, requests: list[SubscriptionRequest],
                  subscription_id: int | None, version: int
                  ) -> tuple[list[int], list[bool]] | None: ...

    def unsubscribe(self, session: Session, filters: Iterable[str]) -> list[int]: ...

    def send_retained_for(self, session: Session, requests: list[SubscriptionRequest],
                          codes: list[int], existed: list[bool]) -> None: ...

    def client_event(self, client_id: str, event: Coroutine[Any, Any, None]) -> None: ...
