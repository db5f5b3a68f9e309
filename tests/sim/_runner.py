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
from collections import deque
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


def run_seeds(seeds: Iterable[int], options: Options, jobs: int = 1) -> Iterator[dict[str, Any]]:
    """Each seed forked from this process, up to ``jobs`` at once; the results in order."""
    running: deque[tuple[int, int, int]] = deque()  # (seed, pid, read end of its pipe)
    for seed in seeds:
        running.append(_fork(seed, options))
        if len(running) >= jobs:
            yield _collect(*running.popleft())
    while running:
        yield _collect(*running.popleft())


def _fork(seed: int, options: Options) -> tuple[int, int, int]:
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
    return seed, pid, read


def _collect(seed: int, pid: int, read: int) -> dict[str, Any]:
    with os.fdopen(read, "rb") as answer_in:
        data = answer_in.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"seed": seed, "broken": ["crashed"], "details": [f"exit status {status}"],
                "schedule": []}
    result: dict[str, Any] = json.loads(data)
    return result


def verdict_line(result: dict[str, Any]) -> str:
    fields = {f.name for f in dataclasses.fields(Verdict)} - {"details"}
    counts = ", ".join(f"{name} {result[name]}" for name in sorted(fields) if name in result)
    return f"seed {result['seed']}: {', '.join(result['broken']) or 'ok'} ({counts})"


def hash_seed_fixed() -> bool:
    return os.environ.get("PYTHONHASHSEED") == "0"
