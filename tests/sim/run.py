"""Run the cluster simulation for any number of seeds, or replay one.

    python tests/sim/run.py --seeds 0-9999 --jobs 2   # a range (each seed in its own process)
    python tests/sim/run.py --seeds 1234 --verbose    # one seed: its schedule and log lines
    python tests/sim/run.py --seeds 0-999 --faults kill,move --traffic 30
    python tests/sim/run.py --seeds 0-99 --retain       # every message retained, and checked
    python tests/sim/run.py --seeds 0-99 --overlap      # moves during kills, freezes, splits

A seed that breaks an invariant is printed with what broke and the schedule that led there;
the exit code is 1 when any did. Runs under PYTHONHASHSEED=0 (it re-executes itself so).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim._runner import hash_seed_fixed, run_seed, run_seeds, verdict_line
from sim._world import FAULTS, Options


def seeds_from(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def _in_simulation(record: logging.LogRecord) -> bool:
    """Each log line says when (simulated) and which node wrote it."""
    import asyncio

    from sim._loop import NODE

    node = NODE.get()
    record.node = node.name if node is not None else "-"
    try:
        record.sim_time = asyncio.get_running_loop().time()
    except RuntimeError:
        record.sim_time = 0.0
    return True


def main() -> int:
    if not hash_seed_fixed():
        os.execve(sys.executable, [sys.executable, *sys.argv],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-99", help="seeds: 7, 0-999, or 1,5,9-12")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"which of {', '.join(FAULTS)} (and cut: the link between two "
                             "nodes only) the nemesis uses")
    parser.add_argument("--traffic", type=float, default=Options.traffic,
                        help="seconds of publishing (simulated)")
    parser.add_argument("--nodes", type=int, default=Options.nodes)
    parser.add_argument("--retain", action="store_true",
                        help="publishers retain every message; retained messages are checked")
    parser.add_argument("--overlap", action="store_true",
                        help="subscribers move also while a node fault is under way")
    parser.add_argument("--hold", type=float, default=Options.hold,
                        help="seconds the replicating stores hold a QoS 1 delivery's ops "
                             "(<delivery-hold>); 0 holds none")
    parser.add_argument("--jobs", type=int, default=1,
                        help="seeds run at once, each in a process of its own (verdicts do not "
                             "depend on it)")
    parser.add_argument("--verbose", action="store_true",
                        help="one seed, in this process, with the nodes' log lines")
    args = parser.parse_args()
    options = Options(nodes=args.nodes, traffic=args.traffic, retain=args.retain,
                      overlap=args.overlap, hold=args.hold,
                      faults=tuple(f for f in args.faults.split(",") if f))
    seeds = seeds_from(args.seeds)
    begun = time.monotonic()
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG if os.environ.get("SIM_DEBUG") else logging.INFO,
                            format="%(sim_time)9.3f %(node)-4s %(levelname)-7s %(message)s")
        logging.getLogger().handlers[0].addFilter(_in_simulation)
        results = [run_seed(seeds[0], options, verbose=True)]
    else:
        results = []
        for result in run_seeds(seeds, options, max(1, args.jobs)):
            results.append(result)
            if result["broken"]:
                print(verdict_line(result), flush=True)
    broken = [r for r in results if r["broken"]]
    for result in broken[:3] if not args.verbose else results:
        print(f"\n{verdict_line(result)}")
        print("\n".join(result.get("details", [])))
        print("schedule:\n" + "\n".join(result.get("schedule", [])))
    totals = {name: sum(r.get(name, 0) for r in results)
              for name in ("acknowledged", "expected", "lost", "qos2_duplicates",
                           "qos1_duplicates", "reordered", "wrong_session_present", "owners",
                           "retained", "errors")}
    print("totals: " + ", ".join(f"{name} {count}" for name, count in totals.items()))
    print(f"\n{len(results)} seeds, {len(broken)} broken, {time.monotonic() - begun:.1f} s")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
