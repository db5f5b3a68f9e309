"""The cluster keeps its promises under combined faults: a short chaos run on real processes.

Three `hive run` nodes (replica-count 2, file persistence), twelve persistent MQTT 5 clients
(on each node a QoS 1 and a QoS 2 subscriber to ``chaos/#`` and a QoS 1 and a QoS 2
publisher), a seeded nemesis (``_run.py``), and the simulation's checker
(``tests/sim/_checker.py``) fed with what the real clients recorded. It must show no
acknowledged message lost, no QoS 2 message delivered twice as new, and no reconnect answered
"no session".

In CI, all four faults mixed for 75 s: kill -9 of a node (restarted 1-5 s later), SIGSTOP for
2-10 s, a node's cluster ports cut off for 3-10 s (iptables on loopback), and subscribers moving
between nodes. Lost, QoS 2 delivered twice and wrong `session present` must all be 0.
``python tests/chaos/run.py --minutes 4 --seed N`` runs longer ones, ``--faults freeze,move``
or ``isolate,move`` some of the faults.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos._clients import RealClient
from chaos._run import Chaos

SECONDS = 75.0
CI_FAULTS = ("kill", "freeze", "isolate", "move")


@pytest.mark.timeout(480)
def test_kills_freezes_partitions_and_moves_lose_nothing_and_deliver_qos2_once(
        tmp_path: Path) -> None:
    outcome = Chaos(seed=1, folder=tmp_path, seconds=SECONDS, faults=CI_FAULTS).run()
    report = "\n".join(outcome.lines())
    print(report)
    verdict = outcome.verdict
    assert verdict.published > 1000, report  # traffic flowed all along
    assert any("kill -9" in line for line in outcome.schedule), report
    assert verdict.lost == 0, report
    assert verdict.qos2_duplicates == 0, report
    assert verdict.wrong_session_present == 0, report


@pytest.mark.timeout(120)
def test_the_checker_sees_a_lost_and_a_twice_delivered_message(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run is not blind: a subscriber that drops one delivery counts as one lost, and one
    that records a QoS 2 delivery twice as new counts as one QoS 2 duplicate."""
    original = RealClient._on_publish
    tampered: set[str] = set()

    def tampering(self: RealClient, packet: object) -> None:
        original(self, packet)  # type: ignore[arg-type]
        deliveries = self.record.deliveries[self.client_id]
        if len(deliveries) >= 10 and self.client_id not in tampered:
            if self.client_id == "sub1-n1":
                tampered.add(self.client_id)
                deliveries.pop()
            elif self.client_id == "sub2-n2" and deliveries[-1].qos == 2:
                tampered.add(self.client_id)
                deliveries.append(deliveries[-1])

    monkeypatch.setattr(RealClient, "_on_publish", tampering)
    outcome = Chaos(seed=2, folder=tmp_path, seconds=5.0, faults=()).run()
    report = "\n".join(outcome.lines())
    assert tampered == {"sub1-n1", "sub2-n2"}, report
    assert outcome.verdict.lost == 1, report
    assert outcome.verdict.qos2_duplicates == 1, report
    assert outcome.verdict.broken == ["lost", "qos2_duplicates"], report
