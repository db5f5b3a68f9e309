"""A chaos run against three real nodes, as long as you like (the CI test is a short one).

    python tests/chaos/run.py --minutes 4 --seed 7
    python tests/chaos/run.py --minutes 10 --seed 3 --faults kill,move
    python tests/chaos/run.py --minutes 4 --seed 7 --keep /tmp/chaos-7   # keep the nodes' logs

Starts three `hive run` nodes on loopback (replica-count 2, file persistence), a persistent
MQTT 5 subscriber at QoS 1 and one at QoS 2 and a QoS 1 and a QoS 2 publisher on each, and a
seeded nemesis of kill -9, SIGSTOP, partitions (iptables on loopback: needs root and iptables,
see scripts/testbed/iptables.sh) and subscriber moves; then heals everything, waits for quiet
and prints a line per invariant, the figures, and on a failure what broke and the schedule.
The exit code is 1 when an invariant broke. Run it from the repository's root (the nodes run
the code on PYTHONPATH, as the tests do).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chaos._run import FAULTS, Chaos


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="minutes of faults")
    parser.add_argument("--seed", type=int, default=0, help="the nemesis's seed")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"which of {', '.join(FAULTS)} the nemesis uses")
    parser.add_argument("--rate", type=float, default=8.0,
                        help="messages per second of each of the six publishers")
    parser.add_argument("--keep", type=Path, default=None,
                        help="a folder for the nodes' data and logs and the clients' record "
                             "(record.json), kept afterwards")
    args = parser.parse_args()
    faults = tuple(f for f in args.faults.split(",") if f)
    with tempfile.TemporaryDirectory(prefix="hive-chaos-") as temporary:
        folder = args.keep or Path(temporary)
        outcome = Chaos(args.seed, folder, args.minutes * 60, faults, args.rate).run()
        print("\n".join(outcome.lines()))
        if args.keep is not None:
            outcome.dump(args.keep / "record.json")
            print(f"nodes' logs in {args.keep}/n*/hive.log, the clients' record in "
                  f"{args.keep}/record.json")
    return 1 if outcome.verdict.broken else 0


if __name__ == "__main__":
    sys.exit(main())
