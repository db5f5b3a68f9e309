"""Sizes the code may not grow past: a class is one idea (STYLE.md), a dispatcher with more
than 30 paths is a state machine hiding in one function (ruff's C901, pyproject.toml).

No class in hive_core is over ``CLASS_LINES`` lines, except those listed in ``GROWN`` with the
size they had when the limit came; that list may only shrink (and its sizes only go down).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLASS_LINES = 600

# "module:Class" -> its lines when the limit came (issue 24 splits them), lowered as parts
# move out (broker/_acks.py, broker/_merge.py).
GROWN: dict[str, int] = {
    "hive_core/broker/_broker.py:Broker": 812,
    "hive_core/broker/_channel.py:Channel": 782,
}


def class_sizes() -> dict[str, int]:
    sizes = {}
    for path in sorted((ROOT / "hive_core").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                name = f"{path.relative_to(ROOT).as_posix()}:{node.name}"
                sizes[name] = (node.end_lineno or node.lineno) - node.lineno + 1
    return sizes


def test_no_class_grows_past_the_limit() -> None:
    sizes = class_sizes()
    over = {name: lines for name, lines in sizes.items()
            if lines > GROWN.get(name, CLASS_LINES)}
    assert not over, f"classes over {CLASS_LINES} lines (or over their GROWN size): {over}"


def test_the_list_of_grown_classes_only_shrinks() -> None:
    sizes = class_sizes()
    stale = {name for name in GROWN if sizes.get(name, 0) <= CLASS_LINES}
    assert not stale, f"back under {CLASS_LINES} lines (or gone): remove from GROWN: {stale}"


def test_the_cluster_is_split_into_parts_under_the_limit() -> None:
    sizes = class_sizes()
    cluster = {name: lines for name, lines in sizes.items()
               if name.startswith("hive_core/cluster/")}
    assert "hive_core/cluster/_cluster.py:Cluster" in cluster
    assert max(cluster.values()) <= CLASS_LINES
