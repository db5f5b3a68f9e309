"""The cluster under a seeded nemesis, in simulation (see ``tests/sim/run.py`` for any seeds).

Each seed runs three real brokers and clusters (replica-count 2) on a simulated clock, network
and disks, with persistent MQTT 5 subscribers and publishers at QoS 1 and 2 on every node, and
checks the invariants of ``_checker.py``. The seeds run in a child process under
PYTHONHASHSEED=0, each forked from one parent, so a failing seed printed here replays alike
with ``python tests/sim/run.py --seeds N --faults F``.

Every seed that ever broke an invariant is kept in ``REGRESSIONS`` (CI runs them). The ranges
are marked ``slow`` and run in ``tox`` (CI's 30 minutes cannot hold them on a 2-core machine):
150 seeds of subscribers moving between nodes, 350 of all four faults mixed (kills and
restarts, freezes, one node cut off, moves), 300 of all four with moves on a clock of their own
(``--overlap``: a client moves while a node is down, frozen or cut off) and 50 of all four with
every message retained (then retained messages must converge too); the seeds of those ranges
that still break an invariant are listed in ``OPEN`` (open defects of the cluster).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).with_name("run.py")

ALL = "kill,freeze,isolate,move"
CUT = "kill,freeze,cut,move"  # one link cut, its two nodes still linked to the third (open)

REGRESSIONS = [
    # A session handed over to its publisher's node got a local message directly and again
    # in the old node's tail: the message had no identity yet when it was delivered locally.
    (14, "move"),
    # A node cut off and healed: a copy dropped in the merge handed back what the keeper had
    # delivered directly seconds before (QoS 2 twice: the merge window remembered 1-2 s).
    (4, "isolate"),
    # The third node kept naming the node whose copy was dropped in a merge (the keeper never
    # said it kept the session with a newer claim): a stale directory, one owner no more.
    (6, "isolate"),
    # The isolated node took its predecessor over and forgot how much of its frames it had
    # handled; after the heal the rescued messages were skipped as handled (lost).
    (11, "isolate"),
    # A subscriber back on its publisher's node after kills: a local message reached its
    # session directly and again in the old node's tail (no identity yet when delivered).
    (19, "kill"),
    # A message routed to the node that took a failed node over, after the takeover: the
    # taker kept it from the sessions it took over, as if it were in the failed node's share
    # (which it was not): lost.
    (2033, "kill"),
    # The node cut off took its neighbours over (seeing only itself), dropped what it kept
    # for them, and delivered it to the sessions it took from a stale replica: lost. Now only
    # a node that sees more than half of the nodes takes over one that does not answer.
    (2032, "isolate"),
    # A copy dropped in a merge did not say what its client had had: the keeper's copy, routed
    # to while apart, sent the same messages again from its queue (QoS 2 twice). Then, cut
    # off, a node saw one peer time out and counted the other, silent as long, as still there:
    # it took the first over as the larger side (QoS 2 twice after the heal).
    (2050, ALL),
    # A node killed and restarted merged its copy from disk: the messages there had lost
    # their identities (not stored), and the keeper took them again (QoS 2 twice).
    (2052, ALL),
    (2020, ALL),
    # A CONNECT on the node taking a failed node over, which turned out alive and linked
    # again meanwhile: the fetch gave up instead of asking it (a fresh session). Failed once
    # the larger side was counted by fresh heartbeats, before the fetch asked again.
    (2010, ALL),
    # A copy dropped in a merge sent its queue to the keeper once, and the keeper was killed
    # before it wrote it: the node that took the keeper over had it from no one (lost). The
    # queue now travels as data frames, kept until acknowledged and rescued with the rest.
    (3078, ALL),
    # A node restarted, and its link to a peer closed before the peer's FILTERS arrived: it
    # routed nothing to that peer's subscribers until the link was back (lost). What a peer
    # that left before saying what it wants could want is now kept for it: everything.
    (3086, ALL),
    (3165, ALL),
    # A node frozen with its clients connected woke into a merge: it told the others its
    # client was connected, the client's connection then turned out dead, and each node gave
    # its copy up for the other's (lost). Each now weighs the claim it told.
    (4094, ALL),
    (4186, ALL),
    # A copy dropped in a merge handed on its queue but not what it had sent and not had
    # acknowledged (sent straight from the window, without a queue position): lost.
    (4168, ALL),
    # A publisher's QoS 2 PUBLISH routed by a copy dropped in a merge before its PUBREC went
    # out: sent again to the keeper, it was routed again under another identity (twice).
    (4056, ALL),
    # A copy dropped in a merge held a QoS 2 delivery its client had taken (PUBREC) and not
    # released: the keeper never sent that PUBREL, and later used the same packet id for a
    # new message, which the client took for the old one (lost). The window now moves as a
    # window, under the same packet ids.
    (4412, ALL),
    # The keeper of a merge skipped the dropped copy's messages at positions up to its own
    # mark, positions counted on another node: messages queued there while apart (lost).
    # Marks now apply only to messages without identity.
    (66, ALL),
    # A frozen node woke, its client resumed the node's stale copy there, and the node that
    # had taken it over ended its own copy on CLIENT_CONNECTED with what it had rescued
    # (lost). A copy still held when its client connects elsewhere is now handed over.
    (162, ALL),
    # Replication ops sent on a link that was swapped for a new one were lost, and the backup
    # applied the next ones on top without noticing: the node's commits waited for an
    # acknowledgement that never came, and a subscriber's QoS 2 deliveries with them (lost).
    # A gap now makes the backup ask for a snapshot; a lagging backup on a new link gets one.
    (253, ALL),
    (2066, ALL),
    # A copy dropped in a merge handed on its window; for each QoS 1 delivery in it that the
    # keeper had too, the keeper sent PUBREL. A QoS 1 client answers nothing to that, and the
    # id stayed in the keeper's window for good (bench failover-stop: thousands lost). The
    # simulated subscriber at QoS 1 now counts any PUBREL as an error.
    (103, ALL),
    # A node frozen past the heartbeat timeout woke with its client's QoS 2 PUBLISHes still in
    # the connection's buffer; the client had moved and sent them again to the node that
    # took the session over. Routed at the wake under this node's identities, they reached
    # every subscriber twice. Client input now waits for the fence after a pause.
    (5006, ALL),
    (5049, ALL),
    # A copy dropped in a merge told every member SESSION_GONE; a member not linked to the
    # keeper forgot the owner and gave the client a fresh session (present 0). Now the
    # dropping node stays named, and a fetch there is told where the session is.
    (5003, ALL),
    (5128, ALL),
    # A subscriber moved between the two nodes of the larger side while the third node was
    # cut off; what the cut-off node acknowledged for it meanwhile was kept for the node it
    # left, replayed there after the heal, and matched nobody (lost). That node now sends
    # it on to the session's new node until every node has confirmed the new route.
    (5135, ALL),
    # A copy kept in a merge got the frames the dropped copy's node kept for it (REPLAY)
    # before that copy's hand-over said what its client had had while apart: sent again
    # (QoS 2 twice). Messages from a merging node now wait for the copy's hand-over.
    (84, ALL),
    # The same, and a copy fetched for a CONNECT was given up by a merge while it was being
    # written here: the client got a new session. It now counts as connected in a merge.
    (156, ALL),
    # A node that delivered QoS 2 messages during a split was killed around the heal and
    # restarted from its disk: the identities of what its clients had completed were not
    # stored, so its copy's hand-over did not name them and the keeper (the copy taken over
    # during the split) sent them again. They are stored now (remember_taken, schema 5).
    (5353, ALL),
    (153, ALL),
    (9605, ALL),
    (3721, ALL),
    (7310, ALL),
    # A split healed in part: the cut-off node was linked to a third node, not yet to the one
    # that had taken its sessions over, when its client moved to the third node. That node's
    # directory named the taken-over copy (higher epoch): resumed, it sent again what the
    # client had completed on the other copy. A CONNECT now asks first the node whose copy
    # last claimed its client connected (ConnectedClaims), which a merge of the two keeps.
    (3757, ALL),
    # Messages for a silent node kept on disk changed this run's timing (PUBACKs a second
    # after a freeze): a CONNECT had fetched its session from the node that took it over when
    # the frozen node woke with a connected claim of a newer epoch; the merge gave the fetched
    # copy up while it was being stored, and the CONNECT went on with a new session. Such a
    # CONNECT is refused now (0x88); the client connects again and resumes the kept copy.
    (1890, ALL),
    # A copy that lost a merge waited for the members' ROUTED before it was dropped; its client
    # connected to it meanwhile and it stayed, serving QoS 2 messages the client had completed
    # on the keeper (QoS 2 twice). Such copies now yield: the CONNECT fetches the keeper's
    # session and the stale copy is folded into it. (It broke on c67684d; the code since moves
    # its timing, so this guards the trajectory, tests/cluster/test_handover.py the mechanism.)
    (9963, ALL),
    # The cut fault (README: still open) on 2026-11-28 (fourteenth session). A restarted node
    # dropped its copy of a session in a merge before a node it had been cut from linked and
    # replayed what it had kept for it; the move remembered only the nodes linked then, and
    # the replay matched nothing (69, 225 lost). Such a node now asks every node that links
    # within ABSENT_KEEP of its start. The node the session went to had itself kept frames for
    # the dropped copy's node while they were apart, and was never asked (57, 18 lost): the
    # session's node is asked too. And the simulated restart did not send again the QoS 2
    # messages whose forwards a kill had cut short, as a real node does (114, 24 lost).
    (57, CUT), (69, CUT), (114, CUT),
]
"""(seed, faults) that broke an invariant once: each must keep passing."""


def simulate(seeds: str, faults: str, timeout: float,
             overlap: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(RUN), "--seeds", seeds, "--faults", faults,
                           *(["--overlap"] if overlap else [])],
                          capture_output=True, text=True, timeout=timeout, check=False)


OVERLAP_REGRESSIONS = [
    # On a98215a (2026-11-27): a node cut off on the smaller side settled the commits waiting
    # for its lost backup and sent QoS 2 PUBLISHes the replica taken over on the larger side
    # never had; the client moved there during the split and got them again (QoS 2 twice, as
    # chaos seed 26). Such commits now wait for the heal (Replicator.fenced_by).
    41, 80, 138,
    # On a98215a: lost messages and a wrong session present (20, 112), a wrong session
    # present (61: a node restarted and linked to a peer whose link closed before that peer
    # said which sessions it holds; the client got a fresh session there. Such a CONNECT is
    # refused now until the peer has said it: Membership.unheard), and 47 messages lost (249:
    # a CONNECT fetched its session from the node its client had left; a merge gave the copy
    # up while it was being stored here and the fetch was confirmed all the same, so the node
    # that had handed it over forgot it too and the client's next CONNECT found no session
    # anywhere. Such a fetch is declined now).
    20, 61, 112, 249,
    # Broke on intermediate versions of the fence: a client resumed the cut-off node's own
    # copy, which the larger side had taken over (4, lost: such a CONNECT is refused now);
    # the fence lifted only once the new backup had the snapshot (35, lost); the fetch above
    # confirmed (228, 146 lost).
    4, 35, 228,
    # On fe27bfe: a copy of a session dropped in a merge (its client had moved to the keeper
    # while this node was frozen) forgot its filters, and what a node cut off meanwhile had
    # routed here for it and kept arrived after the heal, matched nothing and was lost (389,
    # 18 lost; the copy is now remembered as moved: Moved.moved_away); a QoS 2 PUBLISH whose
    # first send waited for the commit to an unreachable backup was sent again at once on the
    # client's next connection, and the node that took the session over from that backup's
    # replica sent it as new (565, 6 twice and 7 lost; resends and PUBRELs of a persistent
    # session wait for the commit: send_exchange).
    389, 565,
    # Broke with that change to resends (not before: the timing differs): a merge handed a
    # dropped copy's window to a copy that was being handed over to a third node; the window
    # went into the copy here after its export, the tail carried only its queue, and the
    # messages were lost (578, 32 lost). Such a window now goes with the tail.
    578,
    # Broke with those changes too, by timing: each of two nodes dropped its copy of a session
    # for the other's (90 lost, a wrong session present). One told the other its client was
    # connecting (a CONNECT arriving there, refused a moment later) and then dropped its copy
    # on the claim it had been told before, while the other dropped its copy on that
    # "connecting" (665; chaos seed 26's unexplained first run looked the same). A copy now
    # stays when what its node told the keeper last beats the keeper's claim.
    665,
]
"""Seeds of all four faults with ``--overlap`` that broke an invariant once."""


def regression_batches(size: int = 9) -> list[tuple[list[int], str, bool]]:
    """The regression seeds as (seeds, faults, overlap), at most ``size`` seeds each: one
    process per batch (its imports are two seconds, a seed about one), several batches for the
    two workers to share."""
    groups: dict[tuple[str, bool], list[int]] = {}
    for seed, faults in REGRESSIONS:
        groups.setdefault((faults, False), []).append(seed)
    groups[(ALL, True)] = list(OVERLAP_REGRESSIONS)
    return [(seeds[at:at + size], faults, overlap)
            for (faults, overlap), seeds in groups.items()
            for at in range(0, len(seeds), size)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("seeds", "faults", "overlap"), regression_batches(),
                         ids=lambda value: ",".join(map(str, value))
                         if isinstance(value, list) else None)
def test_the_seeds_that_failed_once_pass(seeds: list[int], faults: str, overlap: bool) -> None:
    """Each seed's line names what broke and how to replay it alone."""
    done = simulate(",".join(map(str, seeds)), faults, timeout=220, overlap=overlap)
    assert f"{len(seeds)} seeds, 0 broken" in done.stdout and done.returncode == 0, \
        done.stdout[-8000:] + done.stderr[-2000:]


OPEN: dict[tuple[int, bool], str] = {}
"""(seed, overlap) of the ranges that still break an invariant, with what breaks: an open defect
each, named here so that it cannot go unnoticed. A fix removes its line (a seed listed here that
passes fails the test, so the list only shrinks)."""

RANGES = [(1000, 1149, "move", False), (0, 174, ALL, False), (175, 349, ALL, False),
          (0, 149, ALL, True), (150, 299, ALL, True)]
"""800 seeds, in five tests so that the workers share them: client moves alone, all four
faults (kills, freezes, one node cut off, client moves) mixed, and the four with moves during
the node faults."""


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize(("first", "last", "faults", "overlap"), RANGES)
def test_the_cluster_under_a_seeded_nemesis_loses_nothing_and_gets_qos2_once(
        first: int, last: int, faults: str, overlap: bool) -> None:
    done = simulate(f"{first}-{last}", faults, timeout=400, overlap=overlap)
    broken = {int(line.split()[1].rstrip(":")) for line in done.stdout.splitlines()
              if line.startswith("seed ") and ": ok" not in line}
    assert f"{last - first + 1} seeds," in done.stdout, \
        done.stdout[-3000:] + done.stderr[-2000:]
    expected = {seed for seed, moved in OPEN if first <= seed <= last and moved == overlap}
    assert broken == expected, (
        f"broken seeds {sorted(broken)}, open {sorted(expected)}:\n" + done.stdout[-6000:])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_retained_messages_converge_under_the_nemesis() -> None:
    """50 seeds of all four faults with every message retained: after the heal, every node
    holds each publisher's last message as the retained one of its topic."""
    done = subprocess.run([sys.executable, str(RUN), "--seeds", "1200-1249", "--faults", ALL,
                           "--retain"], capture_output=True, text=True, timeout=280,
                          check=False)
    assert "50 seeds, 0 broken" in done.stdout, done.stdout[-6000:] + done.stderr[-2000:]
    assert "retained 0" in done.stdout


def test_the_checker_sees_a_lost_message() -> None:
    """The checker is not blind: a subscriber that drops what it gets counts as lost."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from sim._checker import check
    from sim._world import Options, SimClient, run_world

    original = SimClient._on_publish
    forgotten: list[object] = []

    def forgetful(self: SimClient, packet: object) -> None:
        original(self, packet)  # type: ignore[arg-type]
        deliveries = self.world.record.deliveries[self.client_id]
        if self.client_id == "sub1-1" and len(deliveries) == 3 and not forgotten:
            forgotten.append(deliveries.pop())

    SimClient._on_publish = forgetful  # type: ignore[method-assign]
    try:
        verdict = check(run_world(5, Options(traffic=3.0, settle=5.0, faults=())))
    finally:
        SimClient._on_publish = original  # type: ignore[method-assign]
    assert verdict.lost == 1 and verdict.broken == ["lost"]


def test_the_checker_sees_a_retained_message_not_converged() -> None:
    """With publishers retaining, a node whose retained message for a topic is not the
    publisher's last one breaks the run."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from hive_core.broker._message import Message
    from sim._checker import check
    from sim._world import Options, run_world

    world = run_world(2, Options(retain=True, faults=(), traffic=3.0, settle=3.0))
    assert check(world).retained == 0
    node = world.nodes[0]
    assert node.broker is not None
    topic = next(iter(node.broker.retained))
    node.broker.retained.apply(Message(topic, b"stale:1", 1, True, None, "stale"))
    verdict = check(world)
    assert verdict.retained == 1 and "retained" in verdict.broken, verdict.details
