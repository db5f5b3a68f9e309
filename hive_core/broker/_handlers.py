"""What a connected client's acknowledgements, SUBSCRIBEs and UNSUBSCRIBEs do to its channel.

The channel (``broker/_channel.py``) dispatches every packet after the CONNECT through one
table; these are the entries that only move the session's QoS state or its subscriptions. They
are functions of the channel and the packet, called as the channel's own methods would be
(``handler(channel, packet)``), and like the channel they read no clock and wait for nothing:
what must be committed first goes out through :meth:`Channel.send_after_commit`, what an
extension must decide through :meth:`Channel.defer`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from hive_core.broker import _extension_flow as flow
from hive_core.broker import _steps as steps
from hive_core.mqtt import (
    PUBCOMP,
    PUBREL,
    PropertyId,
    PubAck,
    PubComp,
    PubRec,
    PubRel,
    ReasonCode,
    Subscribe,
    Unsubscribe,
    encode_ack,
)

if TYPE_CHECKING:
    from hive_core.broker._host import ChannelHost
    from hive_core.broker._session import Session

RC = ReasonCode


class Channel(steps.Channel, Protocol):
    """What the handlers ask of the channel (``broker/_channel.py``)."""

    session: Session | None

    @property
    def broker(self) -> ChannelHost: ...

    def send_after_commit(self, data: bytes, durable: bool = True,
                          forwards: bool = False) -> None: ...

    def defer(self, step: Awaitable[Any]) -> None: ...


def on_pubrel(channel: Channel, packet: PubRel) -> None:
    """The client releases a QoS 2 message it sent: PUBCOMP once the release is on disk
    (after a crash the client may reuse the id)."""
    session = channel.session
    assert session is not None
    pid = packet.packet_id
    known = pid in session.inbound_qos2
    durable = known and session.persistent
    if known:
        session.inbound_qos2.discard(pid)
        if session.unconfirmed:
            session.unconfirmed.pop(pid, None)
        if durable:
            channel.broker.records.released_qos2(session, pid)
    reason = RC.SUCCESS if known or channel.version != 5 else RC.PACKET_IDENTIFIER_NOT_FOUND
    channel.send_after_commit(encode_ack(PUBCOMP, pid, reason, channel.version), durable)


def on_puback(channel: Channel, packet: PubAck) -> None:
    assert channel.session is not None
    channel.broker.outbox.acknowledged(channel.session, packet.packet_id)


def on_pubrec(channel: Channel, packet: PubRec) -> None:
    """A QoS 2 delivery received: PUBREL once "released" is on disk (a crash must not send the
    PUBLISH again); a refusal in the PUBREC ends the delivery."""
    session = channel.session
    assert session is not None
    outbound = session.inflight.get(packet.packet_id)
    if outbound is None:  # (MQTT 3 has no reason code: it is not encoded)
        channel.send_packet(PubRel(packet.packet_id, RC.PACKET_IDENTIFIER_NOT_FOUND))
        return
    if packet.reason_code >= 0x80:
        channel.broker.outbox.acknowledged(session, packet.packet_id)
        return
    channel.broker.outbox.released(session, packet.packet_id, outbound)
    channel.send_after_commit(encode_ack(PUBREL, packet.packet_id), session.persistent)


def on_pubcomp(channel: Channel, packet: PubComp) -> None:
    assert channel.session is not None
    channel.broker.outbox.acknowledged(channel.session, packet.packet_id)


def on_subscribe(channel: Channel, packet: Subscribe) -> None:
    """Subscribe at once when no extension has a say, or when theirs answer inline; else
    once they have answered (``_steps.subscribe_checked``)."""
    if packet.properties.get(PropertyId.SUBSCRIPTION_IDENTIFIER) \
            and not channel.broker.settings.subscription_identifiers:
        channel.refuse(RC.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
                       "subscription identifiers are disabled")
        return
    extensions = channel.broker.extensions
    if not (extensions.intercepts_subscribe or extensions.authorizes_subscribe):
        channel.finish_subscribe(packet, {})
    elif flow.subscribe_hooks_inline(extensions):
        assert channel.info is not None
        channel.finish_subscribe(packet, flow.subscribe_inline(extensions, channel.info, packet))
    else:
        channel.defer(steps.subscribe_checked(channel, packet))


def on_unsubscribe(channel: Channel, packet: Unsubscribe) -> None:
    if channel.broker.extensions.intercepts_unsubscribe:
        channel.defer(steps.unsubscribe_intercepted(channel, packet))
    else:
        channel.finish_unsubscribe(packet.packet_id, packet.topic_filters)
