"""What a copy of a session dropped in a merge hands to the copy kept here (a split healed).

Both copies were routed to while apart. The dropped one sends its window (the packet ids its
client may hold), what its client surely had (identities), the QoS 2 PUBLISHes its client
sent and had routed there, and its queue; the kept one takes each message once (see
``_handover``) and finishes each packet id the client may still hold.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from hive_core.broker._handover import MessageId, takes, took_older
from hive_core.broker._message import Message
from hive_core.broker._outbox import send_exchange
from hive_core.broker._records import pending_from
from hive_core.broker._session import Outbound, Pending
from hive_core.mqtt import PUBREL, encode_ack
from hive_core.persistence import StoredInflight

if TYPE_CHECKING:
    from hive_core.broker._metrics import BrokerMetrics
    from hive_core.broker._outbox import Outbox
    from hive_core.broker._records import Records
    from hive_core.broker._session import Session


def merge_window(outbox: Outbox, records: Records, session: Session,
                 window: list[StoredInflight]) -> None:
    """The dropped copy's window: each delivery goes into this copy's window under its own
    packet id, finished from here (PUBLISH again with DUP, or PUBREL); one whose id this copy
    uses already is queued as a new delivery (or, released, left). PUBREL goes only for a
    QoS 2 id: a QoS 1 client answers it with nothing, and the id would stay taken for good."""
    link = session.connection
    for record in window:
        pid = record.packet_id
        pending = (pending_from(record.message) if record.message
                   else Pending(Message("", b"", 2, False, None, ""), 2, None, False))
        mid = pending.message.mid
        if pid in session.inflight:
            if record.state != "pubrel" and takes(session, mid):
                outbox.deliver(session, pending)
            continue
        if record.state != "pubrel" and mid is not None and mid in (session.seen or {}):
            # This copy has it too (queued, sent, or delivered already).
            if pending.qos < 2:
                continue  # a QoS 1 id holds nothing at the client: this copy's send does
            # The client may hold it under this id, waiting for PUBREL: only the id is
            # finished (PUBREL; a client without it answers PUBCOMP all the same).
            record = StoredInflight(session.client_id, pid, "out", "pubrel", record.message)
        takes(session, mid)
        outbound = session.window()[pid] = Outbound(pending, record.state)
        if session.persistent:
            records.sent(session, pid, outbound)
        if link is not None and not link.closed:
            if outbound.state == "pubrel":
                outbox.send_pubrel(link, session, pid)
            else:
                outbox.resend(link, session, pid, outbound)


def merge_had(records: Records, metrics: BrokerMetrics, session: Session,
              taken: list[MessageId] | None, inbound: list[int] | None) -> None:
    """``taken``: what the other copy's client surely had. While the copies were apart both
    were routed to, so such a message may wait in this copy's queue: it leaves the queue
    unsent, and no way brings it here again. ``inbound``: QoS 2 PUBLISHes the client sent the
    other copy, routed there: sent again here (DUP), they get a PUBREC and are not routed a
    second time."""
    if inbound and session.taken_over:
        # Only onto a copy its client has not used since: else that client may have
        # finished those exchanges here and reused the packet ids.
        for pid in inbound:
            if pid not in session.inbound_qos2:
                session.received_qos2(pid)
                if session.persistent:
                    records.received_qos2(session, pid)
    if taken:
        for mid in took_older(session, taken):  # new here: kept on disk too
            if session.persistent:
                records.took(session, mid)
        had = set(taken)
        _finish_what_was_had(records, session, had)
        if any(p.message.mid in had for p in session.queue):
            kept: deque[Pending] = deque()
            for pending in session.queue:
                if pending.message.mid in had:  # its row goes, its identity stays
                    with records.atomic():
                        records.dequeue(session, pending)
                        if session.persistent:
                            records.took(session, pending.message.mid)
                    metrics.handover_duplicates_skipped += 1
                else:
                    kept.append(pending)
            session.queue = kept


def _finish_what_was_had(records: Records, session: Session, had: set[MessageId]) -> None:
    """QoS 2 deliveries in this copy's window that the other copy's client had (PUBREC there,
    or completed): this copy's state is older (a replica of before the split, say), and a
    PUBLISH again under the same id would reach the client as a new message. Only PUBREL
    goes: it completes an exchange the client holds, and one it finished gets PUBCOMP."""
    link = session.connection
    for pid, outbound in session.inflight.items():
        if outbound.state in ("publish", "held") and outbound.pending.qos == 2 \
                and outbound.pending.message.mid in had:
            outbound.state = "pubrel"
            if session.persistent:
                records.released(session, pid)
            if link is not None and not link.closed:
                send_exchange(link, session, encode_ack(PUBREL, pid), True)
