"""A message that reaches a session twice is taken once: the session remembers identities.

Every message a node routes across the cluster has an identity: its origin node and a serial
there (node protocol 4), given before it is delivered anywhere and kept with it wherever it is
queued. A copy of the same message can reach one session by several ways: directly, in the
tail of a handover (what the old node queued while the session moved), in the queue of a copy
dropped when a split heals (MERGE_QUEUE), in what the other nodes kept for a failed node
(RESCUED). Each session keeps the identities of the messages it took, the newest
``SEEN_MAX``, and takes a message whose identity it holds no second time, whichever way came
first. Messages without an identity (from a node of protocol 3, or a session's queue as
exported) are never skipped.

This replaces the windows earlier versions opened for a handover or a merge, which remembered
only what arrived while they were open (and the last one or two seconds before): a message
delivered directly long before a split healed came back in the merge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hive_core.broker._session import Session

MessageId = tuple[str, int]
"""(origin node id, the origin's serial): a message's identity across the cluster."""

SEEN_MAX = 10_000
"""Identities a session keeps at most: the oldest go first."""


def takes(session: Session, mid: MessageId | None) -> bool:
    """Whether ``session`` takes a message with identity ``mid`` (False: it had it)."""
    if mid is None:
        return True
    seen = session.seen
    if seen is None:
        seen = session.seen = {}
    elif mid in seen:
        return False
    seen[mid] = None
    if len(seen) > SEEN_MAX:
        del seen[next(iter(seen))]
    return True


def took_older(session: Session, older: list[MessageId]) -> list[MessageId]:
    """Identities another copy of ``session`` took (oldest first), taken here as older than
    any this copy took: of the newest ``SEEN_MAX`` together, they are the first to go. (One by
    one through :func:`takes`, a list as long as the limit would push every identity this copy
    took out: each added one evicts the oldest, which is the next one of the same list.)
    Returns those new here."""
    seen = session.seen or {}
    fresh = [mid for mid in dict.fromkeys(older) if mid not in seen]
    if fresh:
        merged = dict.fromkeys(fresh)
        merged.update(seen)
        if len(merged) > SEEN_MAX:
            merged = dict.fromkeys(list(merged)[-SEEN_MAX:])
            fresh = [mid for mid in fresh if mid in merged]
        session.seen = merged
    return fresh


def had(session: Session) -> list[MessageId]:
    """What the session's client has surely had: identities taken, less those still queued
    or sent without an acknowledgement (PUBREC counts: the client has it)."""
    if not session.seen:
        return []
    pending = {p.message.mid for p in session.queue}
    pending.update(o.pending.message.mid for o in session.inflight.values()
                   if o.state != "pubrel")
    return [mid for mid in session.seen if mid not in pending]
