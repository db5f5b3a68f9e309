"""The cluster keeps its promises under combined faults: a short chaos run on real processes.

Three `hive run` nodes (replica-count 2), twelve persistent MQTT 5 clients, a seeded nemesis
(see ``_run.py``) and the checker of the simulation (``tests/sim/_checker.py``) fed with what
the real clients recorded. CI runs about 75 s of faults; ``python tests/chaos/run.py --minutes
4 --seed N`` runs longer ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos._run import Chaos

SECONDS = 75.0


@pytest.mark.timeout(420)
def test_a_short_chaos_run_loses_nothing_and_gets_qos2_once(tmp_path: Path) -> None:
    outcome = Chaos(seed=1, folder=tmp_path, seconds=SECONDS).run()
    print("\n".join(outcome.lines()))
    verdict = outcome.verdict
    assert verdict.lost == 0, "\n".join(outcome.lines())
    assert verdict.qos2_duplicates == 0, "\n".join(outcome.lines())
    assert verdict.wrong_session_present == 0, "\n".join(outcome.lines())
