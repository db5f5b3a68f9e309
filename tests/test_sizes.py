"""Sizes the code may not grow past: a class is one idea (STYLE.md), a dispatcher with more
than 30 paths is a state machine hiding in one function (ruff's C901, pyproject.toml).

No class in hive_core is over ``CLASS_LINES`` lines, no function over ``FUNCTION_LINES`` lines
or over McCabe ``COMPLEXITY``, except those listed (``GROWN``, ``LONG``, ``COMPLEX``) with the
size they had when the limit came; those lists may only shrink (and their sizes only go down).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLASS_LINES = 600

# "module:Class" -> its lines when the limit came, lowered as parts moved out; empty since
# the channel's acknowledgement and subscription handlers went to broker/_handlers.py. A class
# that grows past the limit splits: this list may not grow.
GROWN: dict[str, int] = {}


FUNCTION_LINES = 80
# "module:Class.function" -> its lines when the limit came (issue 24)
LONG: dict[str, int] = {
    "hive_core/cluster/_cluster.py:Cluster.__init__": 90,
    "hive_core/cluster/_custody.py:Custody._fetch": 82,
    "hive_core/mqtt/_stream.py:PacketDecoder.feed": 113,
    "hive_core/node.py:HiveNode._serve_locked": 95,
    "hive_core/persistence/_sqlite_schema.py:write": 100,
}

COMPLEXITY = 15
# "module:function" -> its McCabe complexity when the limit came: the hot parsers and paths
# (one function on purpose: a call per packet or frame costs) and a few to split (issue 24)
COMPLEX: dict[str, int] = {
    "hive_core/broker/_broker.py:publish": 19,
    "hive_core/broker/_channel.py:_on_publish": 17,
    "hive_core/cluster/_custody.py:_fetch": 19,
    "hive_core/cluster/_wire.py:_unpack": 17,
    "hive_core/mqtt/_properties.py:read_properties": 19,
    "hive_core/mqtt/_stream.py:feed": 27,
    "hive_core/node.py:_serve_locked": 19,
    "hive_ext_api/backup.py:record_problem": 17,
}


def function_sizes() -> dict[str, int]:
    sizes: dict[str, int] = {}
    for path in sorted((ROOT / "hive_core").rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()

        def walk(node: ast.AST, prefix: str, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = f"{module}:{prefix}{child.name}"
                    sizes[name] = (child.end_lineno or child.lineno) - child.lineno + 1
                    walk(child, f"{prefix}{child.name}.")
                elif isinstance(child, ast.ClassDef):
                    walk(child, f"{prefix}{child.name}.")
        walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return sizes


def complexities() -> dict[str, int]:
    """ruff's McCabe complexity of every function over COMPLEXITY."""
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "C901", "--config",
         f"lint.mccabe.max-complexity={COMPLEXITY}", "--output-format", "json", "--exit-zero",
         "--no-cache", "hive_core", "hive_ext_api"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    result = {}
    for item in json.loads(found.stdout):
        match = re.match(r"`(.+)` is too complex \((\d+) > ", item["message"])
        assert match, item["message"]
        path = Path(item["filename"]).resolve().relative_to(ROOT).as_posix()
        result[f"{path}:{match[1]}"] = int(match[2])
    return result


def class_sizes() -> dict[str, int]:
    sizes = {}
    for path in sorted((ROOT / "hive_core").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                name = f"{path.relative_to(ROOT).as_posix()}:{node.name}"
                sizes[name] = (node.end_lineno or node.lineno) - node.lineno + 1
    return sizes


def over_and_stale(sizes: dict[str, int], listed: dict[str, int],
                   limit: int) -> tuple[dict[str, int], set[str]]:
    """What is over ``limit`` (or over its listed figure), and listed names back under it."""
    over = {name: size for name, size in sizes.items() if size > listed.get(name, limit)}
    return over, {name for name in listed if sizes.get(name, 0) <= limit}


class Limit(NamedTuple):
    things: str  # what is measured, in the plural
    sizes: Callable[[], dict[str, int]]
    listed: dict[str, int]  # the ones over the limit when it came, with their size then
    list_name: str
    lines: int


LINE_LIMITS = [Limit("classes", class_sizes, GROWN, "GROWN", CLASS_LINES),
               Limit("functions", function_sizes, LONG, "LONG", FUNCTION_LINES)]


@pytest.mark.parametrize("limit", LINE_LIMITS, ids=lambda limit: limit.things)
def test_nothing_grows_past_the_limit(limit: Limit) -> None:
    over, _ = over_and_stale(limit.sizes(), limit.listed, limit.lines)
    assert not over, (f"{limit.things} over {limit.lines} lines (or over their "
                      f"{limit.list_name} size): {over}")


@pytest.mark.parametrize("limit", LINE_LIMITS, ids=lambda limit: limit.things)
def test_the_list_of_grown_ones_only_shrinks(limit: Limit) -> None:
    _, stale = over_and_stale(limit.sizes(), limit.listed, limit.lines)
    assert not stale, (f"back under {limit.lines} lines (or gone): remove from "
                       f"{limit.list_name}: {stale}")


def test_the_cluster_is_split_into_parts_under_the_limit() -> None:
    sizes = class_sizes()
    cluster = {name: lines for name, lines in sizes.items()
               if name.startswith("hive_core/cluster/")}
    assert "hive_core/cluster/_cluster.py:Cluster" in cluster
    assert max(cluster.values()) <= CLASS_LINES


def test_no_function_grows_more_complex() -> None:
    over, stale = over_and_stale(complexities(), COMPLEX, COMPLEXITY)
    assert not over, f"functions over McCabe {COMPLEXITY} (or over their COMPLEX figure): {over}"
    assert not stale, f"back under McCabe {COMPLEXITY} (or gone): remove from COMPLEX: {stale}"
