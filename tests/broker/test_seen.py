"""The identities a session took (``Session.seen``, the newest SEEN_MAX) when another copy's
are merged in (broker/_handover.py, broker/_merge.py).

Chaos seed 22: a restarted node's copy of a session was merged into the copy a takeover had
made of it, with the identities its client had had, about 10,000 of them, oldest first. Taken
one by one, each evicted the oldest identity here, which was the next one of that same list,
so the whole list went through, and the 30 messages the taken-over copy had just delivered
were pushed out. The restarted copy's queue then handed them over again, and 15 QoS 2
messages reached the client twice."""

from __future__ import annotations

from hive_core.broker import Session
from hive_core.broker._handover import SEEN_MAX, takes
from hive_core.broker._merge import merge_had
from hive_core.broker._metrics import BrokerMetrics
from hive_core.broker._records import Records
from hive_core.persistence import MemorySessionStore


def test_a_long_list_of_older_identities_does_not_push_out_the_newest() -> None:
    session = Session("c", 5, 3600)
    history = [("n1", serial) for serial in range(SEEN_MAX)]  # oldest first
    recent = [("n2", serial) for serial in range(100)]
    for mid in history[100:] + recent:  # this copy: most of the history, then 100 new
        assert takes(session, mid)
    assert len(session.seen or {}) == SEEN_MAX
    merge_had(Records(MemorySessionStore()), BrokerMetrics(), session, history, None)
    assert len(session.seen or {}) == SEEN_MAX
    assert all(mid in (session.seen or {}) for mid in recent)
    assert not any(takes(session, mid) for mid in recent)  # a copy of one: not taken again


def test_older_identities_fill_what_room_there_is() -> None:
    session = Session("c", 5, 3600)
    takes(session, ("n2", 1))
    merge_had(Records(MemorySessionStore()), BrokerMetrics(), session,
              [("n1", 1), ("n1", 2), ("n2", 1)], None)
    assert list(session.seen or {}) == [("n1", 1), ("n1", 2), ("n2", 1)]
