"""Many seeds, each in a process of its own: a seed does the same thing alone or in a batch.

Each run is forked from one parent that has imported everything and run nothing, so no state a
run leaves (counters, caches, where objects were allocated) reaches the next. ``PYTHONHASHSEED``
must be fixed (the command re-executes itself with 0 when it is not): string hashing decides
the order of sets, and with it the order in which nodes do things.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from ._checker import Verdict, check
from ._world import Options, run_world


def run_seed(seed: int, options: Options, verbose: bool = False) -> dict[str, Any]:
    """One seed in this process: the verdict, and on a failure the schedule."""
    world = run_world(seed, options, verbose=verbose)
    verdict = check(world)
    result = dataclasses.asdict(verdict)
    result["seed"] = seed
    result["broken"] = verdict.broken
    result["schedule"] = world.schedule if verdict.broken or verbose else []
    return result


def run_seeds(seeds: Iterable[int], options: Options) -> Iterator[dict[str, Any]]:
    """Each seed forked from this process; the results in order."""
    for seed in seeds:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: run, answer, leave at once
            code = 0
            try:
                os.close(read)
                answer = json.dumps(run_seed(seed, options)).encode()
                with os.fdopen(write, "wb") as out:
                    out.write(answer)
            except BaseException as exc:
                code = 1
                sys.stderr.write(f"seed {seed}: {exc!r}\n")
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read, "rb") as answer_in:
            data = answer_in.read()
        _, status = os.waitpid(pid, 0)
        if not data:
            yield {"seed": seed, "broken": ["crashed"], "details": [f"exit status {status}"],
                   "schedule": []}
            continue
        yield json.loads(data)


def verdict_line(result: dict[str, Any]) -> str:
    fields = {f.name for f in dataclasses.fields(Verdict)} - {"details"}
    counts = ", ".join(f"{name} {result[name]}" for name in sorted(fields) if name in result)
    return f"seed {result['seed']}: {', '.join(result['broken']) or 'ok'} ({counts})"


def hash_seed_fixed() -> bool:
    return os.environ.get("PYTHONHASHSEED") == "0"
